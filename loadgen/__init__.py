"""Everything around the federation that is not the federation: one sub-package per role.

- workloads: the TPC-H and random federations, their update streams, the load driver;
- simulation: the deterministic simulator, scenario files, `fedlab simulate`, `matrix`, `soak`;
- checker: the independent oracle and the consistency levels (nothing of the maintenance path);
- bench: `fedlab bench`, the algorithms side by side;
- live: a federation on this machine (`fedlab run`, `demo`, `check`, `view`);
- roles: the processes of a deployment (`fedlab source`, `warehouse`, `load`, `chaos-k8s`).

Their subcommands are registered in fedlab.cli, the one entry point.
"""
