"""`fedlab`: the one command-line entry point; each subcommand has its own --help.

Every subcommand is a module with `add_arguments(parser)` and `main(args)` whose docstring's first
paragraph is its description, registered in COMMANDS with its one-line help; it is imported only
when it runs (and for --help), so that `fedlab check` starts fast. The role commands the Helm chart
runs (helm/federation/README.md) also log as services do. `chaos-k8s` parses its own arguments
(roles.chaos_k8s.main takes the argument list, as the chart's chaos Job calls it).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from fedlab.fedmodel.errors import ModelError
from fedlab.warehouse.core.registry import AlgorithmError

COMMANDS = {
    "algorithms": ("fedlab.algorithm_list", "every registered maintenance algorithm: the level it claims and its assumptions"),
    "simulate": ("fedlab.simulation.simulate", "run a scenario file deterministically through the maintenance core"),
    "matrix": ("fedlab.simulation.matrix", "every algorithm against every fault condition, over seeded random schedules"),
    "soak": ("fedlab.simulation.soak", "one algorithm over thousands of random schedules, warehouse crashes included (make soak)"),
    "predict": ("fedlab.simulation.predict", "the timed simulator at scales this machine cannot hold (or against a "
                                                     "bench's live runs)"),
    "calibrate": ("fedlab.simulation.calibrate", "fit the timed simulator's calibration to a `fedlab bench` run"),
    "demo": ("fedlab.live.demo", "run a live federation under a minute of load (make demo)"),
    "run": ("fedlab.live.run", "a live federation under load and chaos, judged by the checker"),
    "bench": ("fedlab.bench.command", "the algorithms side by side on one workload: figures, plots and a summary "
                                              "(make bench)"),
    "bench-postgres": ("fedlab.bench.postgres_maintenance", "Vinh 2020's Table 1 in PostgreSQL: synchronous against "
                                                                    "asynchronous view maintenance, and what change capture "
                                                                    "costs a writer"),
    "bench-scrape": ("fedlab.bench.scrape_cost", "what a Prometheus scrape costs each process of a running "
                                                 "federation (CPU per scrape, share of a core at an interval)"),
    "bench-capture": ("fedlab.bench.capture_cost", "what change capture (none, triggers, logical) costs the writers "
                                                   "of a PostgreSQL source: pgbench's throughput and latency by clients"),
    "check": ("fedlab.live.check", "classify a live run's consistency from its run directory"),
    "view": ("fedlab.live.delta_view", "print the view a live run left in Delta (as a Spark reader sees it)"),
    "refresh": ("fedlab.live.refresh", "roll a running salem warehouse's view forward to a point in time"),
    "top": ("fedlab.live.top", "a live terminal view of a running federation's metrics: lag, staleness, rates, "
                               "faults"),
    "tls-certs": ("fedlab.roles.certs", "write a throwaway CA and a certificate for mutual TLS (ca.crt, tls.crt, "
                                                "tls.key: a Secret for the chart's tls)"),
    "source": ("fedlab.roles.source_role", "run one source node (in this process, or as a Ray actor) until SIGTERM"),
    "warehouse": ("fedlab.roles.warehouse_role", "run the warehouse service until SIGTERM"),
    "load": ("fedlab.roles.load", "commit the configured workload at the sources at a target rate"),
}
ROLES = ("source", "warehouse", "load")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand (of `only`, when given: the others are not imported)."""
    parser = argparse.ArgumentParser(prog="fedlab", description="A testbed for distributed materialized-view maintenance.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)
            continue
        command = importlib.import_module(module)
        command.add_arguments(sub.add_parser(name, help=help_text, description=command.__doc__.split("\n\n")[0]))
    sub.add_parser("chaos-k8s", help="delete federation pods and set fault rates on a schedule (Kubernetes)",
                   add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["chaos-k8s"]:
        from fedlab.roles.chaos_k8s import main as chaos_main

        return chaos_main(argv[1:])
    args = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return 0 if not argv else 2
    if args.command in ROLES:
        from fedlab.roles.process import configure_logging

        configure_logging()
    try:
        return importlib.import_module(COMMANDS[args.command][0]).main(args)
    except (AlgorithmError, ModelError) as err:
        # Input or an environment the command cannot use, found late (an unknown algorithm, a
        # plug-in that does not load, a run directory the PostgreSQL server's user cannot reach):
        # one line, after the command's own clean-up has run.
        print(f"fedlab {args.command}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
