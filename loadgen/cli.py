"""`fedlab`: the one command-line entry point; each subcommand has its own --help."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedlab", description="A testbed for distributed materialized-view maintenance.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sim = sub.add_parser("simulate", help="run a scenario file deterministically through the maintenance core",
                         description="Run a scenario file through the same core the warehouse uses, with "
                                     "in-process sources; print the trace and the verdict.")
    sim.add_argument("file", help="scenario file (YAML, see docs/scenarios.md)")
    sim.add_argument("--algorithm", help="override the file's algorithm (sze-ling, conventional)")
    sim.add_argument("--access", choices=["join-graph", "scan"], help="override the access path")
    sim.add_argument("--json", action="store_true", help="print one JSON object instead of the trace")
    from loadgen import demo

    demo.add_arguments(sub.add_parser("demo", help="run a live federation under a minute of load (make demo)",
                                      description=demo.__doc__.split("\n\n")[0]))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "simulate":
        from loadgen.simulate import main as simulate_main

        return simulate_main(args)
    if args.command == "demo":
        from loadgen.demo import main as demo_main

        return demo_main(args)
    parser.print_help()
    return 0 if argv is None and len(sys.argv) == 1 else 2


if __name__ == "__main__":
    sys.exit(main())
