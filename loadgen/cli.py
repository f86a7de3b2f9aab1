"""`fedlab`: the one command-line entry point; each subcommand has its own --help."""

from __future__ import annotations

import argparse
import importlib
import sys

from warehouse.core.algorithms import ALGORITHMS

# Role commands the Helm chart runs (helm/federation/README.md), each a module with
# add_arguments(parser) and main(args); imported when used, so that `fedlab check` starts fast.
ROLES = {
    "source": ("loadgen.source_role", "run one source node (in this process, or as a Ray actor) until SIGTERM"),
    "warehouse": ("loadgen.warehouse_role", "run the warehouse service until SIGTERM"),
    "load": ("loadgen.load", "commit the configured workload at the sources at a target rate"),
}


# The other commands: each a module whose main(args) runs it, imported when used.
COMMANDS = {"simulate": "loadgen.simulate", "matrix": "loadgen.matrix", "run": "loadgen.run",
            "bench": "loadgen.bench.command", "bench-postgres": "loadgen.bench.postgres_maintenance",
            "demo": "loadgen.demo", "check": "loadgen.check", "view": "loadgen.delta_view", "tls-certs": "loadgen.certs",
            "soak": "loadgen.soak"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedlab", description="A testbed for distributed materialized-view maintenance.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sim = sub.add_parser("simulate", help="run a scenario file deterministically through the maintenance core",
                         description="Run a scenario file through the same core the warehouse uses, with "
                                     "in-process sources; print the trace and the verdict.")
    sim.add_argument("file", help="scenario file (YAML, see docs/scenarios.md)")
    sim.add_argument("--algorithm", help=f"override the file's algorithm ({', '.join(ALGORITHMS)})")
    sim.add_argument("--access", choices=["join-graph", "scan"], help="override the access path")
    sim.add_argument("--json", action="store_true", help="print one JSON object instead of the trace")
    from loadgen import matrix

    matrix.add_arguments(sub.add_parser("matrix", help="every algorithm against every fault condition, "
                                                       "over seeded random schedules",
                                        description=matrix.__doc__.split("\n\n")[0]))
    from loadgen import soak

    soak.add_arguments(sub.add_parser("soak", help="one algorithm over thousands of random schedules, warehouse "
                                                   "crashes included (make soak)",
                                      description=soak.__doc__.split("\n\n")[0]))
    from loadgen import check, demo

    demo.add_arguments(sub.add_parser("demo", help="run a live federation under a minute of load (make demo)",
                                      description=demo.__doc__.split("\n\n")[0]))
    from loadgen import run

    run.add_arguments(sub.add_parser("run", help="a live federation under load and chaos, judged by the checker",
                                     description=run.__doc__.split("\n\n")[0]))
    from loadgen.bench import command as bench

    bench.add_arguments(sub.add_parser("bench", help="the algorithms side by side on one workload: figures, "
                                                     "plots and a summary (make bench)",
                                       description=bench.__doc__.split("\n\n")[0]))
    from loadgen.bench import postgres_maintenance

    postgres_maintenance.add_arguments(sub.add_parser(
        "bench-postgres", help="Vinh 2020's Table 1 in PostgreSQL: synchronous against asynchronous view "
                               "maintenance, and what change capture costs a writer",
        description=postgres_maintenance.__doc__.split("\n\n")[0]))
    check.add_arguments(sub.add_parser("check", help="classify a live run's consistency from its run directory",
                                       description=check.__doc__.split("\n\n")[0]))
    from loadgen import delta_view

    delta_view.add_arguments(sub.add_parser("view", help="print the view a live run left in Delta (as a Spark reader sees it)",
                                            description=delta_view.__doc__.split("\n\n")[0]))
    certs = sub.add_parser("tls-certs", help="write a throwaway CA and a certificate for mutual TLS "
                                             "(ca.crt, tls.crt, tls.key: a Secret for the chart's tls)",
                           description="Write a throwaway CA and one certificate signed by it, valid for "
                                       "server and client auth, naming every --host (loadgen/certs.py).")
    certs.add_argument("out", metavar="DIR", help="where ca.crt, tls.crt and tls.key go")
    certs.add_argument("--host", action="append", metavar="NAME",
                       help="a host peers dial (DNS name or IP address; repeatable; default 127.0.0.1 and localhost)")
    for name, (module, help_text) in ROLES.items():
        role = importlib.import_module(module)
        role.add_arguments(sub.add_parser(name, help=help_text, description=role.__doc__.split("\n\n")[0]))
    sub.add_parser("chaos-k8s", help="delete federation pods and set fault rates on a schedule (Kubernetes)",
                   add_help=False)   # its own parser (loadgen.chaos_k8s) reads the arguments
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["chaos-k8s"]:
        from loadgen.chaos_k8s import main as chaos_main

        return chaos_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in COMMANDS:
        return importlib.import_module(COMMANDS[args.command]).main(args)
    if args.command in ROLES:
        from loadgen.role import configure_logging

        configure_logging()
        return importlib.import_module(ROLES[args.command][0]).main(args)
    parser.print_help()
    return 0 if not argv else 2


if __name__ == "__main__":
    sys.exit(main())
