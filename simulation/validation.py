"""The timed simulator against live runs: what it predicts for each run of a `fedlab bench`,
beside what the run measured (`fedlab predict --against BENCH_DIR`).

Each run of the bench is simulated as it ran: its federation and view (TPC-H in its placement, or
its synthetic federation), its update stream (the same generator and seed as the live driver's,
so the very same transactions), its faults, its rate and duration, then its ramp and its settle
(up to the bench's --settle for the view to reflect every commit), every process on one machine
of the calibration's cores (simulation.timed). The figures compared, with issue 69's
targets (docs/results.md, "The timed simulator"):
- sub-queries and bytes per source transaction in the load phase: within 10%;
- staleness to the core's view, p50 and p99, in the load phase: within 25%;
- the highest sustained ramp step: within 25% (not judged when both ramps held at their top:
  each is then only a lower bound, marked `at_least`).
Staleness to the Delta table and the CPU every process used per transaction committed in the
load phase (the profilers' own left out) are shown beside them, without a target.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from fedlab.fedmodel.aggregate_view import parse_query
from fedlab.fedmodel.errors import ModelError
from fedlab.bench.ramp import max_sustained
from fedlab.bench.resources import PROFILER, cpu_ms_per_txn
from fedlab.nemesis.schedule import read
from fedlab.simulation.calibration import Calibration
from fedlab.simulation.scenario import Scenario
from fedlab.simulation.timed import Deployment, TimedRun, TimedSettings, View
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER
from fedlab.warehouse.core.sze_ling.deferral import Deferral

# figure -> (where a run record keeps it, the target: the largest relative difference met)
FIGURES = {
    "sub-queries/txn": (("per_txn", "subqueries"), 0.10),
    "bytes/txn": (("per_txn", "bytes"), 0.10),
    "staleness p50 (ms)": (("staleness_ms", "p50"), 0.25),
    "staleness p99 (ms)": (("staleness_ms", "p99"), 0.25),
    "to Delta p50 (ms)": (("staleness_delta_ms", "p50"), None),
    "to Delta p99 (ms)": (("staleness_delta_ms", "p99"), None),
    "CPU/txn (ms)": (("cpu_ms_per_txn",), None),
    "max sustained (txn/s)": (("max_sustained_rate",), 0.25),
}
RAMP_FIGURE = "max sustained (txn/s)"


def validate(bench_dir: Path, calibration: Calibration, data_dir: str | None = None,
             progress: Callable[[int, int, str], None] = lambda i, n, what: None) -> dict:
    """Every run of the bench in `bench_dir` simulated and compared (see the module docstring)."""
    try:
        summary = json.loads((bench_dir / "summary.json").read_text())
    except (OSError, ValueError) as err:
        raise ModelError(f"{bench_dir}/summary.json: not a bench summary ({err})") from None
    runs = [r for r in summary["runs"] if r.get("consistency") not in ("failed", "unreadable")
            and r.get("stream") != "shared"]
    rows = []
    for i, record in enumerate(runs):
        what = f"{record['label']} {record['view']} at {record['rate_target']:g} txn/s, {record['chaos']}"
        progress(i, len(runs), what)
        started = time.monotonic()
        predicted = simulate_run(record, summary["settings"], calibration, data_dir)
        measured = {**record, "cpu_ms_per_txn": _cpu_ms_per_txn(record)}
        figures = {name: {"measured": _read(measured, path), "predicted": _read(predicted, path), "target": target}
                   for name, (path, target) in FIGURES.items()}
        # a ramp whose every step held says only that the rate lies above its top
        topped = {side: _topped(r.get("ramp")) for side, r in (("measured", record), ("predicted", predicted))}
        if any(topped.values()):
            figures[RAMP_FIGURE]["at_least"] = [side for side, t in topped.items() if t]
        rows.append({"run": what, "folder": record.get("folder"), "trial": record.get("trial", 1),
                     "seconds": round(time.monotonic() - started, 1), "figures": figures,
                     "utilisation": predicted["utilisation"]})
    progress(len(runs), len(runs), "done")
    return {"bench": str(bench_dir), "calibration": calibration.about, "runs": rows}


def simulate_run(record: dict, settings: dict, calibration: Calibration, data_dir: str | None = None) -> dict:
    """The timed simulator's figures for one live run's record (its summary entry)."""
    from fedlab.bench.run_specs import PLACEMENTS
    from fedlab.loadgen.driver_process import DataRecipe, SyntheticRecipe
    from fedlab.loadgen.tpch import load_view, tpch_catalog

    synthetic = record.get("synthetic")
    if synthetic:
        recipe = SyntheticRecipe(synthetic["shape"], synthetic["sources"], synthetic["rows_per_relation"], record["seed"])
        catalog, view_sql = recipe.federation.catalog, recipe.federation.view_sql
    else:
        orders = settings.get("orders")
        recipe = DataRecipe(record["scale"], data_dir, orders if isinstance(orders, int) else 0)
        catalog, view_sql = tpch_catalog(PLACEMENTS[record["placement"]]), load_view(record["view"])
    data = recipe.data()
    scenario = Scenario(record["view"], record["algorithm"], catalog, parse_query(view_sql, catalog), data, [],
                        access=None if record.get("access_path") in (None, "whole relations") else record["access_path"],
                        fifo_repair=True)   # as the live warehouse, for the algorithms that assume FIFO order
    if record.get("combine_max"):
        scenario.deferral = Deferral(combine_max=record["combine_max"], max_jobs=settings.get("max_jobs", 1))
    duration = settings["duration"]
    nemesis = read(settings.get("nemesis") or "", sorted(catalog.sources), duration, TimedRun.refusal)
    run = TimedRun(catalog, data, [View(DEFAULT_SUBSCRIBER, scenario)], recipe.stream(catalog, record["workload"], record["seed"]),
                   TimedSettings(calibration, "loopback", Deployment(shared=True), seed=record["seed"],
                                 faults=record.get("faults") or {}, nemesis=tuple(nemesis),
                                 batch_interval=settings.get("batch_interval", 1.0)))
    run.schedule_nemesis(0.0)
    run.offer(record["rate_target"], duration)
    run.run(duration)
    ramp = run.ramp(settings["ramp_rates"], settings["ramp_step"]) if record.get("ramp") else []
    # as the bench waits for the view to reflect every commit before it measures staleness: the
    # load's last transactions (the last second's are not yet in Delta) count too
    run.settle(settings.get("settle", 30.0))
    figures = run.figures("load")
    view = figures["views"][DEFAULT_SUBSCRIBER]
    start, end = figures["window"]
    floor = calibration.floor + calibration.source_floor * len(catalog.sources)   # what idles beside the jobs
    cpu = (sum(figures["utilisation"].values()) + floor) * (end - start)
    return {**view, "utilisation": figures["utilisation"], "max_sustained_rate": max_sustained(ramp) if ramp else None,
            "cpu_ms_per_txn": round(1000 * cpu / view["transactions"], 2) if view["transactions"] else None,
            "ramp": [s.to_dict() for s in ramp]}


def _cpu_ms_per_txn(record: dict) -> float | None:
    """A live run's CPU of every process per transaction committed in its load phase (bench.resources)."""
    load = next((c for c in record.get("cpu") or [] if c["phase"] == "load"), None)
    if load is None or not record.get("committed_in_load"):
        return None
    return cpu_ms_per_txn({"by_role": {r: s for r, s in load["by_role"].items() if r != PROFILER}},
                          record["committed_in_load"])


def _topped(steps: list[dict] | None) -> bool:
    """Whether a ramp (RampStep.to_dict()s) held at every step it ran: its top is a lower bound."""
    return bool(steps) and all(s.get("sustained") for s in steps)


def _read(record: dict, path: tuple[str, ...]):
    value = record
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def ratio(figure: dict) -> float | None:
    """Predicted over measured (None when either is missing or the measured is 0)."""
    m, p = figure["measured"], figure["predicted"]
    return None if m in (None, 0) or p is None else p / m


def met(figure: dict) -> bool | None:
    """Whether the prediction is within the figure's target of the measurement (None: no target,
    a figure missing, or both only lower bounds: two ramps that held at their top)."""
    r = ratio(figure)
    if r is None or figure["target"] is None or len(figure.get("at_least", ())) == 2:
        return None
    return abs(r - 1) <= figure["target"]
