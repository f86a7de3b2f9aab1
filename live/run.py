"""`fedlab run`: a live federation under load and chaos, ending with the checker's verdict.

    fedlab run --chaos drop=0.05,reorder=0.2,duplicate=0.01,kill-source=every:20s,kill-warehouse=once \\
               --algorithm sze-ling --duration 60s

Message faults are the sources' (source_node/faults.py), set at run time: `drop` and `duplicate`
are probabilities per message (notifications and sub-query answers); `reorder=X` delays every
message by an exponential time of mean X seconds, which reorders them (`delay=X` and
`delay_mean=X` are the same); a `notification_` or `answer_` prefix (`notification_drop=0.05`)
sets one kind's rate only, and a source's name before a colon (`sales:answer_drop=0.2`) one
source's only. `fedlab chaos-k8s --faults` takes the same rate names and aliases
(source_node.faults.parse_rates reads both).
`kill-source=every:20s` (or `once`) kills a random source actor that Ray then restarts;
`kill-warehouse=once` stops the warehouse as a crash would, mid-run, and restarts it from Delta.

`--nemesis` applies faults from outside the processes, on a schedule (nemesis):

    fedlab run --nemesis "pause sales at 3s for 4s; kill warehouse at 10s" --duration 20s

`--nemesis random:SEED` draws one; what a local run cannot apply is refused with the reason.

`--view NAME[:ALGORITHM]` may be given more than once: the views are kept over the one federation,
under one load and one set of faults, each by its own algorithm (default `--algorithm`), with its
own version state, Delta tables and history (RUN_DIR/<view>/; the first's RUN_DIR/warehouse/).
One warehouse keeps them all by default, subscribed to the sources once: the views share its
notifications and connections (warehouse.view_group). `--warehouses N` spreads them over N
warehouses, the first view to the first, the second to the second, and so on round, each
subscribed by its own name (warehouse, warehouse-2, ...: source_node.subscriptions) for the
relations its views read. The checker judges each view on its own, and the exit status asks
every one to keep `--expect`. The warehouses share the sources, the load and this process's
Spark session. A nemesis or chaos kill of the warehouse is the first warehouse's, with its views.
After the run, what each fault did: the staleness of each phase of the load (nemesis.effects)
and a plot of staleness and throughput with each fault's window shaded, RUN_DIR/plots/faults.png
(nemesis.plot).
The exit status is the checker's: 0 when the run kept `--expect` (default complete).
"""

from __future__ import annotations

import json
import math
import random
import re
import time
from pathlib import Path

from fedlab.fedmodel import change_history
from fedlab.fedmodel.aggregate_view import parse_query
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER
from fedlab.live.environment import NO_FAULTS, prepare_environment, set_faults, warehouse_spark
from fedlab.nemesis import effects, local, schedule
from fedlab.roles.chaos_k8s import ChaosError, parse_duration
from fedlab.roles.process import (
    RoleError,
    add_source_engine_argument,
    capture_problem,
    add_warehouse_arguments,
    warehouse_settings,
)
from fedlab.simulation.scenario import LEVELS
from fedlab.source_node.faults import parse_rates

_KILLS = ("kill-source", "kill-warehouse")


def parse_chaos(spec: str, sources: list[str] | None = None) -> tuple[dict, dict]:
    """'drop=0.05,sales:answer_drop=0.5,kill-source=every:20s,...' -> (fault rates, process faults).

    Message faults are read by source_node.faults.parse_rates, as `fedlab chaos-k8s --faults`
    reads them (same names, aliases and messages); what is run's own is read here: a source's name
    before a colon scopes a message fault to that source alone (live.environment
    set_faults; `sources`, when given, are the names allowed there), and kill-source and
    kill-warehouse kill processes.
    """
    faults, kills = {}, {}
    for item in filter(None, (x.strip() for x in (spec or "").split(","))):
        head, sep, value = item.partition("=")
        source, _, name = head.rpartition(":")
        if source and sources is not None and source not in sources:
            raise ModelError(f"--chaos: {item}: no source named {source!r} (sources: {', '.join(sources)})")
        if name in _KILLS:
            if source:
                raise ModelError(f"--chaos: {item}: {name} takes no source")
            m = re.fullmatch(r"once|every:(\d+(?:\.\d+)?)s", value)
            if not m:
                raise ModelError(f"--chaos: {name} takes 'once' or 'every:Ns', got {value!r}")
            kills[name] = float(m.group(1)) if m.group(1) else None
            continue
        try:
            rates = parse_rates(name + sep + value)
        except ModelError as err:
            raise ModelError(f"--chaos: {str(err).removeprefix('faults: ')}") from None
        faults.update({f"{source}:{rate}" if source else rate: v for rate, v in rates.items()})
    return faults, kills


def main(args) -> int:
    prepare_environment()
    try:
        from fedlab.loadgen.tpch import tpch_catalog

        sources = sorted(tpch_catalog().sources)
        faults, kills = parse_chaos(args.chaos, sources)
        try:
            duration = parse_duration(args.duration)
        except ChaosError as err:
            raise ModelError(f"--duration: {err}") from None
        if args.expect not in LEVELS:
            raise ModelError(f"--expect must be one of {', '.join(LEVELS)}")
        if problem := capture_problem(args):
            raise ModelError(problem)
        from fedlab.warehouse.core import registry

        views = _views(args.view or [DEFAULT_VIEW], args.algorithm)
        placement = _placement(list(views), args.warehouses)
        first_warehouse = [registry.get(views[v][1]) for v, w in placement.items() if w == DEFAULT_SUBSCRIBER]
        fragile = next((p for p in first_warehouse if not p.assumptions.restartable), first_warehouse[0])
        refuse = local.refuser(fragile.name, fragile.assumptions.restartable)
        chaos_kills = _scheduled_kills(kills, duration, sources, random.Random(args.seed))
        for fault in chaos_kills:
            reason = refuse(fault)
            if reason:
                raise ModelError(f"--chaos kill-{'warehouse' if fault.targets == ('warehouse',) else 'source'}: {reason}")
        nemesis = schedule.read(args.nemesis, sources, duration, refuse)
        settings = {name: warehouse_settings(args, algorithm, parse_query(sql, tpch_catalog()).join)
                    for name, (sql, algorithm) in views.items()}
    except (ModelError, RoleError) as err:
        print(f"fedlab run: {err}")
        return 2
    from fedlab.live.check import judge, open_history
    from fedlab.live.federation import Federation
    from fedlab.loadgen.driver import DriveResult, drive
    from fedlab.loadgen.tpch import tpch_catalog, tpch_data
    from fedlab.loadgen.workload import Workload
    from fedlab.source_node.ray_runtime import stop_ray

    run_dir = Path(args.run_dir or f"runs/run-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    catalog = tpch_catalog()
    data = tpch_data(args.scale)
    spark = warehouse_spark(run_dir)
    first, *more = views
    fed = Federation(catalog, views[first][0], data, run_dir, spark, settings[first],
                     tls=_throwaway_tls(run_dir) if args.tls else None, source_engine=args.source_engine,
                     capture=args.capture)
    for name in more:
        fed.add_view(name, views[name][0], settings[name], subscriber=placement[name])
    events: list[str] = []
    process_faults = sorted(nemesis + chaos_kills, key=lambda f: f.at)
    applier = local.LocalNemesis(fed, process_faults, events)
    try:
        fed.start(ray_temp_dir=str(run_dir / "ray"))
        load = DriveResult()
        fed.serve_load_metrics(load)
        print("\n".join(fed.metrics_lines()), flush=True)
        if faults:
            set_faults(fed, faults)
        applier.start()
        load_from = time.time()
        drive(fed.commit_batch, Workload.named(args.workload).stream(catalog, data, seed=args.seed),
              catalog.sources, args.rate, duration, result=load)
        load_until = time.time()
        applier.stop()
        if faults:   # let the last messages through, then wait for the view to catch up
            set_faults(fed, NO_FAULTS)
        deadline = time.monotonic() + args.settle
        caught_up = all([fed.wait_until_applied(max(0.0, deadline - time.monotonic()), w)
                         for w in fed.views.values()])
    finally:
        applier.stop()   # nothing stays frozen, whatever happened
        fed.stop()
        stop_ray()
        spark.stop()
    run = {"run_dir": str(run_dir), "offered": load.offered, "committed": load.committed, "rejected": load.rejected,
           "rejections": load.rejections(), "achieved_rate": round(load.achieved_rate, 2), "caught_up": caught_up,
           "process_faults": events}
    with open_history(run_dir) as history:   # the sources' commits read once: the checker's, and the faults' staleness
        commits = history.commit_times()
        # each view's side of the history, by its name in the run file (the first's: the default subscriber's)
        histories = {view: history.of(DEFAULT_SUBSCRIBER if view == first else view) for view in views}
        verdicts = {view: judge(h, commits=commits) for view, h in histories.items()}
        results = {view: {**verdicts[view].to_dict(),
                          **_fault_effects(h, commits, applier.applied, load_from, load_until,
                                           run_dir / "plots" / ("faults.png" if view == first else f"faults-{view}.png"))}
                   for view, h in histories.items()}
    result = {**results[first], **run} if not more else {**run, "views": results}
    (run_dir / "verdict.json").write_text(json.dumps(result, indent=2, default=str))
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(f"run {run_dir}: {load.committed} transactions at {run['achieved_rate']}/s; faults {faults}, "
              f"{len(events)} process faults ({'; '.join(events) or 'none'})")
        for line in run["rejections"]:
            print(f"rejected: {line}")
        for view, verdict in verdicts.items():
            _print_view(view if more else None, verdict, results[view])
    return 0 if all(LEVELS.index(v.level) >= LEVELS.index(args.expect) for v in verdicts.values()) else 1


DEFAULT_VIEW = "demo4"


def _views(specs: list[str], algorithm: str) -> dict[str, tuple[str, str]]:
    """--view NAME[:ALGORITHM], repeatable: each view's SQL and algorithm (default `algorithm`) by
    name, in order; ModelError for a view named twice or an unknown algorithm."""
    from fedlab.loadgen.tpch import load_view
    from fedlab.warehouse.core import registry

    views = {}
    for spec in specs:
        name, _, own = spec.partition(":")
        if name in views:
            raise ModelError(f"--view {name} is named twice: each view is kept once")
        try:
            registry.get(own or algorithm)
        except registry.AlgorithmError as err:
            raise ModelError(f"--view {spec}: {err}") from None
        views[name] = (load_view(name), own or algorithm)
    return views


def _placement(views: list[str], warehouses: int) -> dict[str, str]:
    """Each view's warehouse (its subscriber name), the views dealt round the `warehouses` in
    order: the first warehouse is the default subscriber, the others warehouse-2, warehouse-3, ...
    ModelError for fewer than one warehouse or more warehouses than views."""
    if not 1 <= warehouses <= len(views):
        raise ModelError(f"--warehouses {warehouses}: between 1 and the number of views ({len(views)})")
    names = [DEFAULT_SUBSCRIBER, *(f"{DEFAULT_SUBSCRIBER}-{i}" for i in range(2, warehouses + 1))]
    return {view: names[i % warehouses] for i, view in enumerate(views)}


def _fault_effects(history, commits, applied: list, load_from: float, load_until: float, plot: Path) -> dict:
    """With process faults applied, what each did to the staleness of the view `history` is of
    (`commits`: the sources' commit times, live.check.LiveHistory.commit_times)."""
    if not applied:
        return {"fault_phases": [], "fault_plot": None}
    from fedlab.bench import metrics

    state_times = [s["applied_time"] for s in change_history.applied_states(history.run.warehouse_history)]
    lags = metrics.reflections(commits, history.run.warehouse_history, history.start_versions).lags()
    return effects.figures(applied, lags, load_from, load_until, plot, state_times)


def _print_view(view: str | None, verdict, result: dict) -> None:
    """A view's lines of the report (headed by its name when the run kept several)."""
    if view is not None:
        print(f"view {view}:")
    for phase in result["fault_phases"]:
        print(f"  {effects.describe(phase)}")
    if result["fault_plot"]:
        print(f"  staleness and throughput with each fault's window: {result['fault_plot']}")
    print(f"consistency: {verdict.explained_level()}; {verdict.transactions} transactions, {verdict.states} states, "
          f"lost {len(verdict.lost)}, doubled {len(verdict.doubled)}")
    if verdict.first_violation:
        print(f"first violation: {json.dumps(verdict.first_violation, default=str)[:2000]}")


def _scheduled_kills(kills: dict, duration: float, sources: list[str], rng: random.Random) -> list:
    """--chaos kill-source and kill-warehouse as nemesis faults: each every N seconds (a random
    source each time), or once half-way through the load."""
    faults = []
    for name, every in kills.items():
        times = [every * i for i in range(1, math.ceil(duration / every))] if every else [duration / 2]
        for at in times:
            target = rng.choice(sources) if name == "kill-source" else "warehouse"
            faults.append(schedule.Fault("kill", (target,), at))
    return faults


def _throwaway_tls(run_dir: Path):
    from fedlab.roles.certs import write_certificates

    return write_certificates(run_dir / "tls")


def add_arguments(parser) -> None:
    parser.add_argument("--chaos", default="", help="faults, e.g. drop=0.05,reorder=0.2,duplicate=0.01,"
                                                     "kill-source=every:20s,kill-warehouse=once")
    parser.add_argument("--nemesis", default="", help="faults from outside the processes, e.g. "
                        "'pause sales at 3s for 4s; kill warehouse at 10s', or random:SEED")
    parser.add_argument("--algorithm", default="sze-ling")
    parser.add_argument("--access", choices=["join-graph", "scan"])
    add_warehouse_arguments(parser)
    parser.add_argument("--duration", default="60s", help="load duration, e.g. 60s or 2m")
    parser.add_argument("--rate", type=float, default=10.0, help="offered source transactions per second")
    parser.add_argument("--scale", type=float, default=0.01, help="TPC-H scale factor")
    parser.add_argument("--view", action="append", metavar="NAME[:ALGORITHM]",
                        help=f"a view from loadgen/views (default {DEFAULT_VIEW}), kept by ALGORITHM (default "
                             "--algorithm); repeat to keep several over one federation")
    parser.add_argument("--warehouses", type=int, default=1, metavar="N",
                        help="spread the views over N warehouses, each subscribed to the sources by its own name "
                             "(default 1: one warehouse keeps every view)")
    parser.add_argument("--workload", default="mixed", help="rf, mixed or skewed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--settle", type=float, default=180.0, help="seconds to wait for the view to catch up")
    parser.add_argument("--expect", default="complete", help="the level the exit status asks for")
    parser.add_argument("--json", action="store_true", help="print the checker's object plus run_dir")
    parser.add_argument("--run-dir")
    parser.add_argument("--tls", action="store_true",
                        help="mutual TLS on every gRPC channel, with a throwaway CA written to RUN_DIR/tls")
    add_source_engine_argument(parser)
