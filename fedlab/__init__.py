"""fedlab: a testbed for distributed materialized-view maintenance. Autonomous sources commit
transactions and notify a warehouse, which keeps views over them in Delta Lake with a maintenance
algorithm of its choice, under faults, judged by a checker that shares no code with it.

One import name over the folders at the top of the repository (setup.py maps them):

- fedlab.fedmodel: the model every side speaks (catalog, view definition, transactions, row codec);
- fedlab.fedio: the I/O every process shares (gRPC channels with their TLS, the message log);
- fedlab.source_node: one autonomous data source (its database, versions, outbox, server);
- fedlab.warehouse: the maintenance core (pure), the Spark + Delta view store, the gRPC service;
- fedlab.loadgen: what generates load (the workloads, their update streams, the load driver);
- fedlab.checker: the consistency checker, its oracle and levels (nothing of the maintenance path);
- fedlab.simulation: the deterministic and the timed simulator, scenario files, matrix, soak;
- fedlab.bench: `fedlab bench`, the algorithms side by side, and its reports;
- fedlab.live: a federation on this machine (`fedlab run`, `demo`, `check`, `view`, `refresh`);
- fedlab.roles: the processes of a deployment (`fedlab source`, `warehouse`, `load`, `chaos-k8s`);
- fedlab.nemesis: faults applied from outside the processes under test, on a schedule;
- fedlab.cli: the `fedlab` command, and fedlab.algorithm_list its `algorithms` subcommand.
"""

import os

# fedlab forks only to exec (Spark's JVM, the roles, tools), never to go on with gRPC in the child.
# gRPC's own fork handlers restart its poller in such a child, on a descriptor that subprocess
# has just closed, and the child can die before its exec (grpc/grpc#43055): a warehouse's JVM then
# failed to start beside its gRPC calls, as "JAVA_GATEWAY_EXITED". Set before any gRPC import; a
# process's children inherit it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
