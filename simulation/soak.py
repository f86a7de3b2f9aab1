"""`fedlab soak` (`make soak`): one algorithm over thousands of seeded random schedules, every
fault condition of the matrix and the warehouse's crashes (simulation.matrix.RESTART_CONDITIONS:
it restarts from its simulated durable store, half the time between the parts of a batch commit).

    fedlab soak                                   # 10,000 schedules of sze-ling, 2 workers
    fedlab soak --algorithm versioned --schedules 20000
    fedlab soak --algorithm strobe --fifo-repair  # with the live warehouse's per-source FIFO order

The schedules are spread evenly over the conditions; each is a random federation (2-6 relations
over 2-4 sources, loadgen.synthetic) with 60 random steps. Condition by condition it prints how
many schedules ran, how long they took and the verdict: the level that held in every one (the
matrix's cell) and how many fell short of the next; counterexamples are written as scenario files
(`fedlab simulate FILE` replays them). An algorithm that cannot restart from its durable store
(`fedlab algorithms`: the Strobe family, SWEEP) runs under every condition but the warehouse's
crashes. Exit 1 when a condition that keeps the algorithm's
assumptions fell short of the level it claims (`fedlab algorithms` lists both); a shortfall
under a condition that breaks one (reordering, for an algorithm that assumes FIFO delivery) is
reported as such.
"""

from __future__ import annotations

import math
import sys
import time

from fedlab.simulation.matrix import CONDITIONS, RESTART_CONDITIONS, add_fifo_repair, run_matrix
from fedlab.simulation.scenario import LEVELS
from fedlab.warehouse.core import registry


def add_arguments(parser) -> None:
    parser.add_argument("--algorithm", default="sze-ling",
                        help="a registered algorithm (sze-ling); one that cannot restart skips the crashes")
    parser.add_argument("--schedules", type=int, default=10_000, metavar="N", help="schedules in all (10,000)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="first federation seed (0)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--out", default="runs/soak", metavar="DIR", help="counterexamples (runs/soak)")
    add_fifo_repair(parser)


def main(args) -> int:
    plugin = registry.get(args.algorithm)
    if args.schedules < 1:
        print("fedlab soak: --schedules must be at least 1", file=sys.stderr)
        return 2
    conditions = [*CONDITIONS, *(RESTART_CONDITIONS if plugin.assumptions.restartable else ())]
    per = math.ceil(args.schedules / len(conditions))
    claim = plugin.level
    print(f"fedlab soak: {args.algorithm}, {per} schedules under each of {len(conditions)} conditions "
          f"({per * len(conditions)} in all), {args.jobs} workers; it claims {claim}"
          + ("" if plugin.assumptions.restartable else "; it cannot restart: no warehouse crashes"), flush=True)
    started, short = time.monotonic(), []
    for i, condition in enumerate(conditions):
        began = time.monotonic()
        cell, = run_matrix(per, args.seed + i * per, [args.algorithm], [condition], args.out, args.jobs,
                           fifo_repair=args.fifo_repair)
        verdict = cell["level"]
        if LEVELS.index(verdict) < LEVELS.index(claim):
            above = LEVELS[LEVELS.index(verdict) + 1]
            verdict += f", {cell['short_of'][above]} short of {above}: {cell['counterexample']}"
            if cell["claim_failed"]:
                short.append(condition)
            else:
                verdict += f" (breaks {' and '.join(cell['breaks'])})"
        print(f"  {condition:<18} {cell['schedules']:>6} schedules  {time.monotonic() - began:7.1f} s  {verdict}",
              flush=True)
    print(f"{per * len(conditions)} schedules in {time.monotonic() - started:.0f} s: "
          + (f"short of {claim} under {', '.join(short)}" if short else f"{claim} under every condition"))
    return 1 if short else 0
