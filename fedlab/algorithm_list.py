"""`fedlab algorithms`: every registered maintenance algorithm, the level it claims and what the
claim assumes (warehouse.core.registry; a package adds one through the `fedlab.algorithms`
entry-point group, docs/new-algorithm.md).

    fedlab algorithms           # a table
    fedlab algorithms --json    # one object per algorithm

A plug-in that fails to load is named on one line and the command exits 1, after listing the others.
"""

from __future__ import annotations

import json
import sys

from fedlab.warehouse.core import registry


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object per algorithm, in a list")


def describe(plugin: registry.Plugin) -> dict:
    """What `fedlab algorithms --json` prints of one plug-in."""
    return {"name": plugin.name, "claims": plugin.level, "paper": plugin.paper, "description": plugin.description,
            "assumes": plugin.assumptions.held(), "restartable": plugin.assumptions.restartable,
            "access": plugin.default_access or "whole relations"}


def main(args) -> int:
    loaded, failed = [], []
    for name in registry.names():
        try:
            loaded.append(registry.get(name))
        except registry.AlgorithmError as err:
            failed.append(str(err))
    loaded.sort(key=lambda p: (registry.LEVELS.index(p.level), p.name))
    rows = [describe(p) for p in loaded]
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print("| algorithm | claims | assumes | restarts | access | paper |\n| --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['name']} | {r['claims']} | {', '.join(r['assumes']) or '-'} | "
                  f"{'yes' if r['restartable'] else 'no'} | {r['access']} | {r['paper']} |")
    for line in failed:
        print(f"fedlab algorithms: {line}", file=sys.stderr)
    return 1 if failed else 0
