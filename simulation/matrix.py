"""`fedlab matrix`: the consistency matrix - every algorithm against every fault condition.

Each cell runs one algorithm over N seeded random schedules under one condition and reports the
strongest consistency level (Zhuge et al. 1996, section 4.2; judged by checker against
its DuckDB oracle) that held in every schedule, and how many schedules fell short of each level.
Each algorithm is judged against the level it claims (warehouse.core.registry.Plugin): a cell
below the claim either breaks one of the claim's assumptions (reordering breaks FIFO delivery,
loss, duplication and source restarts break "no loss"; the random federations span several
sources, and source-local transactions change several tuples) or is a claim that failed, which
makes the command exit 1.
Schedule s uses the random federation of seed `seed + s` (loadgen.synthetic: 2-6 relations over
2-4 sources) in every cell, so a row compares conditions and a column algorithms on the same
federations; only the condition's fault rates change the schedule.

Conditions (rates of the scenario format's `random` step, docs/scenarios.md):
- fifo: per-source FIFO delivery without loss, what the Strobe papers assume;
- reordering: any message in flight may overtake others; loss: messages are dropped (sources
  resend unacknowledged notifications, warehouses ask again); duplication: messages arrive
  twice; restart: sources restart (answers in flight lost, unacknowledged notifications resent);
- all: everything together.

The first schedule of a cell that fell short of the level above the cell's is written to DIR as
a scenario file that `fedlab simulate` replays to the same verdict (its `expect.consistency`
names the level it misses, so the replay prints the first violation): the explicit steps the
schedule took (simulation.simulator.Run.steps), so that it replays whatever the random
generator becomes, shrunk to those the verdict needs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from collections import Counter
from pathlib import Path

import yaml

from fedlab.simulation.scenario import LEVELS, TRANSACTION_SCENARIOS, parse_scenario
from fedlab.simulation.simulate import simulate
from fedlab.simulation.simulator import Simulator
from fedlab.loadgen.synthetic import random_scenario
from fedlab.warehouse.core import registry
from fedlab.warehouse.core.planner import ACCESS_PATHS

CONDITIONS = {
    "fifo": {},
    "reordering": {"reorder": 0.3},
    "loss": {"drop": 0.1},
    "duplication": {"duplicate": 0.1},
    "restart": {"restart": 0.03},
    "all": {"reorder": 0.3, "drop": 0.1, "duplicate": 0.1, "restart": 0.03},
}
# Crashes of the warehouse (simulation.simulator: it restarts from its simulated durable store, half
# the time between a batch's Delta commit and the rest; under everything, a batch's commit also
# fails, refused or stored with its reply lost: fail_batch). Not in the matrix by default: some
# algorithms cannot restart (the Strobe family: its widened view is not what the store holds);
# `fedlab soak` runs them.
RESTART_CONDITIONS = {
    "warehouse-restart": {"warehouse_restart": 0.03},
    "everything": {"reorder": 0.3, "drop": 0.1, "duplicate": 0.1, "restart": 0.03, "warehouse_restart": 0.03,
                   "batch_failure": 0.03},
}
# The assumptions (warehouse.core.registry.Assumptions) each condition breaks.
BREAKS = {"fifo": (), "reordering": ("fifo",), "loss": ("no_loss",), "duplication": ("no_loss",),
          "restart": ("no_loss",), "all": ("fifo", "no_loss"), "warehouse-restart": (),
          "everything": ("fifo", "no_loss")}
JUDGED = LEVELS[1:]   # the levels a schedule can fall short of: convergence .. complete
SHRINK_REPLAYS = 200  # replays a counterexample's shrinking may take (a schedule's takes 10-50 ms)


def schedule(algorithm: str, condition: str, seed: int, transactions: str = "source-local",
             steps: int = 60, period: float | None = None, access: str | None = None,
             fifo_repair: bool = False) -> dict:
    """The scenario document of one schedule (a random federation and its random step); written
    with its `fifo_repair`, so that a counterexample replays the same way."""
    doc = random_scenario(seed, steps=steps, commit_rate=0.4, algorithm=algorithm, drop=0.0, reorder=0.0,
                          duplicate=0.0)
    step = doc["steps"][0]["random"]
    step.update({**CONDITIONS, **RESTART_CONDITIONS}[condition])   # the condition's rates (scenario.RANDOM_RATES)
    if transactions != "source-local":
        step["transactions"] = transactions
    if period is not None:
        doc["period"] = period
    if access is not None and registry.get(algorithm).default_access is not None:   # recompute takes none
        doc["access"] = access
    doc["fifo_repair"] = fifo_repair
    del doc["expect"]
    return doc


def _run(job: tuple) -> tuple:
    algorithm, condition, seed, kwargs = job
    doc = schedule(algorithm, condition, seed, **kwargs)
    result = simulate(parse_scenario(doc, f"{algorithm}/{condition}/seed {seed}"))
    return algorithm, condition, seed, result["consistency"], result["maintained_view"] is not None


def broken_assumptions(algorithm: str, condition: str, transactions: str = "source-local",
                       fifo_repair: bool = False) -> list[str]:
    """The assumptions of `algorithm`'s claim that `condition`'s schedules break (reordering
    breaks no FIFO order the warehouse repairs)."""
    broken = {*BREAKS[condition], "single_source"}   # every random federation spans 2-4 sources
    if fifo_repair:
        broken.discard("fifo")
    if transactions != "single-update":
        broken.add("single_update")
    return [a for a in registry.get(algorithm).assumptions.held() if a in broken]


def run_matrix(schedules: int = 20, seed: int = 0, algorithms=None, conditions=tuple(CONDITIONS),
               out: str | Path | None = None, jobs: int = 1, replays: int = SHRINK_REPLAYS, **kwargs) -> list[dict]:
    """The cells, algorithm by algorithm (every registered one without `algorithms`) and condition
    by condition; counterexamples go to `out`, each shrunk with at most `replays` replays."""
    algorithms = algorithms or [p.name for p in registry.plugins()]
    work = [(a, c, seed + s, kwargs) for a in algorithms for c in conditions for s in range(schedules)]
    if jobs > 1:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            outcomes = pool.map(_run, work, chunksize=4)
    else:
        outcomes = [_run(job) for job in work]
    levels: dict[tuple, list[tuple[int, str]]] = {}
    widened: Counter = Counter()   # schedules whose maintained view was the key-widened one
    for algorithm, condition, s, level, wide in outcomes:
        levels.setdefault((algorithm, condition), []).append((s, level))
        widened[(algorithm, condition)] += wide
    cells = []
    for (algorithm, condition), runs in levels.items():
        level = min((lv for _, lv in runs), key=LEVELS.index)
        claim = registry.get(algorithm).level
        broken = broken_assumptions(algorithm, condition, kwargs.get("transactions", "source-local"),
                                    kwargs.get("fifo_repair", False))
        cell = {"algorithm": algorithm, "condition": condition, "level": level, "schedules": len(runs),
                "claims": claim, "breaks": broken,
                "claim_failed": LEVELS.index(level) < LEVELS.index(claim) and not broken,
                "short_of": {target: sum(LEVELS.index(lv) < LEVELS.index(target) for _, lv in runs)
                             for target in JUDGED},
                "widened": widened[(algorithm, condition)]}
        if out is not None and level != LEVELS[-1]:
            s = next(s for s, lv in runs if lv == level)
            path, recorded, shrunk = _write_counterexample(Path(out), algorithm, condition, s, level, replays, kwargs)
            cell["counterexample"] = str(path)
            cell["counterexample_steps"] = {"recorded": recorded, "shrunk": shrunk}
        cells.append(cell)
    return cells


def _write_counterexample(out: Path, algorithm: str, condition: str, seed: int, level: str, replays: int,
                          kwargs: dict) -> tuple[Path, int, int]:
    """Writes the schedule as the explicit steps it took, its random step's decisions shrunk to
    those after which it still replays to `level`; returns the file and how many steps the
    schedule took and the file keeps. Every candidate ends as the schedule does, with `run: all`,
    so that a shortfall is the algorithm's and not a transaction left in flight."""
    missed = LEVELS[LEVELS.index(level) + 1]
    doc = schedule(algorithm, condition, seed, **kwargs)
    *decided, ending = recorded = Simulator(parse_scenario(doc, doc["name"])).execute().steps
    kept = [*shrink(decided, lambda candidate: _replayed_level({**doc, "steps": [*candidate, ending]}) == level,
                   replays),
            ending]
    doc.update(name=f"counterexample: {algorithm} under {condition}, {doc['name']}: {level}, not {missed} "
                    f"({len(kept)} of the {len(recorded)} steps it took)",
               steps=kept, expect={"consistency": missed})
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{algorithm}-{condition}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, default_flow_style=None))   # a row on a line
    return path, len(recorded), len(kept)


def _replayed_level(doc: dict) -> str | None:
    """The level a scenario document replays to; None when it no longer replays (a step that
    needs one taken out, or a core refusing a delta: a view row would go below zero)."""
    try:
        return simulate(parse_scenario(doc, "shrinking"))["consistency"]
    except ValueError:   # ScenarioError is one
        return None


def shrink(steps: list, fails, replays: int = SHRINK_REPLAYS) -> list:
    """The steps with those `fails` does not need taken out, greedily, as delta debugging does:
    chunks of half the steps, then of a quarter, ... then single steps, each removal kept when
    `fails` still holds without it (and tried again at that size while one is). At most
    `replays` calls of `fails`, so that a long schedule costs a bounded time."""
    size = len(steps) // 2
    while size >= 1 and replays > 0:
        i, removed = 0, False
        while i < len(steps) and replays > 0:
            candidate = steps[:i] + steps[i + size:]
            replays -= 1
            if fails(candidate):
                steps, removed = candidate, True
            else:
                i += size
        if not removed:
            size //= 2
        size = min(size, len(steps) // 2)
    return steps


def widening_note(cells: list[dict]) -> str:
    """Which algorithms maintained the view widened with every relation's key (the Strobe family,
    Zhuge et al. 1996, section 5.1), in how many schedules: the cells judge the user's view, the
    widened view's projection. Empty when no schedule's view needed widening."""
    wide = {}
    for c in cells:
        if c.get("widened"):
            wide.setdefault(c["algorithm"], c)
    if not wide:
        return ""
    counts = ", ".join(f"{a} in {c['widened']}/{c['schedules']} schedules" for a, c in wide.items())
    return (f"Maintained view widened with every relation's key (warehouse.core.baselines.keyed_view): {counts}; "
            "the levels judge the user's view, the widened view's projection (`fedlab simulate FILE` prints both).")


def markdown(cells: list[dict]) -> str:
    algorithms = list(dict.fromkeys(c["algorithm"] for c in cells))
    conditions = list(dict.fromkeys(c["condition"] for c in cells))
    by = {(c["algorithm"], c["condition"]): c for c in cells}
    lines = ["| algorithm | claims | " + " | ".join(conditions) + " |", "| --- | --- |" + " --- |" * len(conditions)]
    for a in algorithms:
        lines.append(f"| {a} | {by[(a, conditions[0])]['claims']} | "
                     + " | ".join(_cell_text(by[(a, c)]) for c in conditions) + " |")
    return "\n".join(lines)


def _cell_text(cell: dict) -> str:
    """The measured level; below the claim, also why: an assumption broken, or the claim failed."""
    level = cell["level"]
    if level == LEVELS[-1]:
        return level
    above = LEVELS[LEVELS.index(level) + 1]
    text = f"{level} ({cell['short_of'][above]}/{cell['schedules']} short of {above})"
    if cell["claim_failed"]:
        return f"**{text}: its claim fails**"
    if LEVELS.index(level) < LEVELS.index(cell["claims"]):
        return f"{text}, breaks {' and '.join(cell['breaks'])}"
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--schedules", type=int, default=20, metavar="N", help="random schedules per cell (20)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="first federation seed (0)")
    parser.add_argument("--json", action="store_true", help="print the cells as a JSON list")
    parser.add_argument("--out", default="runs/matrix", metavar="DIR",
                        help="where each cell's first counterexample is written (runs/matrix)")
    parser.add_argument("--algorithms", help="comma-separated (default: every registered one, `fedlab algorithms`)")
    parser.add_argument("--conditions", default=",".join(CONDITIONS),
                        help=f"comma-separated (default all of {', '.join(CONDITIONS)}; also "
                             f"{', '.join(RESTART_CONDITIONS)}, for the algorithms that can restart)")
    parser.add_argument("--transactions", choices=TRANSACTION_SCENARIOS, default="source-local",
                        help="source-local (1-5 operations each, default) or single-update transactions")
    parser.add_argument("--steps", type=int, default=60, help="random steps per schedule (60)")
    parser.add_argument("--access", choices=ACCESS_PATHS, help="one access path for every algorithm")
    parser.add_argument("--period", type=float, help="recompute's period in simulated time")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (1)")
    add_fifo_repair(parser)


def add_fifo_repair(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fifo-repair", action="store_true",
                        help="process each source's messages in the order it sent them, for the algorithms "
                             "that assume FIFO delivery, as the live warehouse does (default: in arrival order, "
                             "the network the papers' assumptions break)")


def main(args) -> int:
    algorithms = [a for a in (args.algorithms or "").split(",") if a] or [p.name for p in registry.plugins()]
    conditions = [c for c in args.conditions.split(",") if c]
    unknown = [c for c in conditions if c not in CONDITIONS and c not in RESTART_CONDITIONS]
    for a in algorithms:
        registry.get(a)   # AlgorithmError, one line (fedlab.cli), for a name that is not registered
    cannot = ([a for a in algorithms if not registry.get(a).assumptions.restartable]
              if set(conditions) & set(RESTART_CONDITIONS) else [])
    if cannot:
        print(f"fedlab matrix: {cannot[0]} cannot restart the warehouse from its durable store: "
              f"leave out {', '.join(RESTART_CONDITIONS)}", file=sys.stderr)
        return 2
    if unknown or args.schedules < 1:
        print(f"fedlab matrix: unknown condition {unknown[0]!r}" if unknown
              else "fedlab matrix: --schedules must be at least 1", file=sys.stderr)
        return 2
    cells = run_matrix(args.schedules, args.seed, algorithms, conditions, args.out, args.jobs,
                       transactions=args.transactions, steps=args.steps, period=args.period, access=args.access,
                       fifo_repair=args.fifo_repair)
    if args.json:
        print(json.dumps(cells))
    else:
        print(f"{args.schedules} schedules per cell, federation seeds {args.seed}..{args.seed + args.schedules - 1}, "
              f"{args.transactions} transactions; counterexamples in {args.out}\n")
        print(markdown(cells))
        note = widening_note(cells)
        if note:
            print(f"\n{note}")
        for cell in cells:
            if "counterexample" in cell:
                steps = cell["counterexample_steps"]
                print(f"{cell['counterexample']}: {steps['shrunk']} steps, shrunk from {steps['recorded']}")
    failed = [f"{c['algorithm']} under {c['condition']}" for c in cells if c["claim_failed"]]
    if failed:
        print(f"fedlab matrix: below the claimed level with its assumptions kept: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
