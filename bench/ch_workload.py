"""`fedlab bench --workload ch`: CH-benCHmark over PostgreSQL sources (issue 70).

    fedlab bench --workload ch --source-engine postgres --capture logical --duration 60 --repeat 2

The load is TPC-C's five transactions, run by go-tpc (loadgen.ch.go_tpc: a client no one here
wrote) against the `tpcc` source's PostgreSQL database, over `--ch-clients` connections without
keying or thinking time, paced to run `--ch-duty` of the time (loadgen.ch.go_tpc.Pacer: go-tpc
has no rate limit of its own; several shares, `--ch-duty 0.05,0.1,0.2`, sweep the rate); the
views are CH-benCHmark's queries that fedlab maintains
(loadgen/views/ch: `--views`, all of them by default), each kept by every algorithm of
`--algorithms` (Sze-Ling by default), all in one warehouse, subscribed once to the three sources
(loadgen/ch/catalog.py: tpcc, suppliers, geography).

Each trial, in a run directory of its own:
1. prepare: a private PostgreSQL server with its data in RUN_DIR/postgres; go-tpc prepares
   `--ch-warehouses` warehouses in the database `tpcc` (and supplier, nation and region, which
   become the other sources' initial rows), and the generated join columns;
2. alone: go-tpc runs for `--duration` seconds on a copy of that database (so that both runs
   start from the same rows) with no capture and no federation: the client's own throughput,
   the figure to set the next one beside;
3. with the federation: the sources start on the same server (the tpcc source installing its
   capture, `--capture`, around the rows go-tpc left), the warehouse materialises the views, the
   message faults of `--chaos` go on, and go-tpc runs again for `--duration` seconds; with
   `--ch-kills` the tpcc source's node is killed a third of the way in (Ray restarts it), and
   PostgreSQL itself once go-tpc has finished and the federation is catching up (stopped at once,
   started again; go-tpc v1.0.12's clients hang when their server restarts under them);
4. settle: faults off, the views given `--settle` seconds to reflect every commit; then the
   checker judges every view against its oracle from the sources' logs, and each view's
   staleness (commit to view, and to Delta) over the transactions committed during the load, the
   sub-queries per transaction and the CPU by process are read as `fedlab bench` reads them.

Output: BENCH_DIR/bench_ch.json, a table, and bench_ch.png (go-tpc's tpmC alone and with the
federation per trial; each view's staleness p50 and p99 against tpmC), and the highest pace at
which every view was complete with staleness p99 within STALENESS_TARGET in every trial.
"""

from __future__ import annotations

import json
import os
from collections import Counter
import sys
import threading
import time
from pathlib import Path

from fedlab.bench import metrics
from fedlab.bench.resources import POSTGRES, ResourceSampler, cpu_use, machine_seconds
from fedlab.bench.trials import spread
from fedlab.fedmodel.errors import ModelError

CLIENTS = 8
WAREHOUSES = 1
ALGORITHM = "sze-ling"
STALENESS_TARGET = 5.0   # seconds, p99 (issue 70)
GO_TPC = "go-tpc"   # the CPU sampler's name for the client


class ChArgumentError(ValueError):
    """An argument `fedlab bench --workload ch` cannot run with."""


def add_arguments(parser) -> None:
    parser.add_argument("--ch-warehouses", type=int, default=WAREHOUSES,
                        help=f"with --workload ch: TPC-C warehouses go-tpc prepares (default {WAREHOUSES})")
    parser.add_argument("--ch-clients", type=int, default=CLIENTS,
                        help=f"with --workload ch: go-tpc's connections (default {CLIENTS})")
    parser.add_argument("--ch-duty", default="1", metavar="SHARE,...",
                        help="with --workload ch: the share of the time go-tpc runs, stopped the rest of every "
                             "0.1 s: its rate limit, in both runs; several sweep the rate (default 1, unpaced)")
    parser.add_argument("--ch-kills", action="store_true",
                        help="with --workload ch: kill the tpcc source's node a third of the way through the "
                             "load, and PostgreSQL itself once the load is over")


def plan(args) -> dict:
    """What the CH bench runs, from the command line; ChArgumentError naming the first bad
    argument, before anything starts."""
    from fedlab.bench.run_specs import BenchArgumentError, _faults
    from fedlab.loadgen.ch.catalog import PLACEMENT
    from fedlab.loadgen.ch.views import load_view, view_names
    from fedlab.preflight import GO_TPC as GO_TPC_PREREQUISITE
    from fedlab.preflight import go_tpc_path, go_tpc_problem
    from fedlab.warehouse.core import registry

    if args.source_engine != "postgres":
        raise ChArgumentError("--workload ch: go-tpc writes a PostgreSQL database; add --source-engine postgres")
    views = [v for v in (args.views or ",".join(view_names())).split(",") if v]
    for view in views:
        try:
            load_view(view)
        except ModelError as err:
            raise ChArgumentError(f"--views: {err}") from None
    algorithms = [a for a in (args.algorithms or ALGORITHM).split(",") if a]
    for algorithm in algorithms:
        try:
            registry.get(algorithm)
        except registry.AlgorithmError as err:
            raise ChArgumentError(f"--algorithms: {err}") from None
    if args.ch_warehouses < 1 or args.ch_clients < 1:
        raise ChArgumentError("--ch-warehouses and --ch-clients must be at least 1")
    duties = []
    for text in args.ch_duty.split(","):
        try:
            duty = float(text)
        except ValueError:
            duty = None
        if duty is None or not 0 < duty <= 1:
            raise ChArgumentError(f"--ch-duty {text}: a share of the time, above 0 and at most 1")
        duties.append(duty)
    if not args.duration > 0 or args.repeat < 1 or args.settle < 0:
        raise ChArgumentError("--duration must be positive, --repeat at least 1, --settle not negative")
    chaos = (args.chaos or ["notification_drop=0.05,notification_reorder=0.1"])
    if len(chaos) > 1:
        raise ChArgumentError("--workload ch: one --chaos setting")
    try:
        faults = _faults(chaos, list(PLACEMENT))[chaos[0]]
    except BenchArgumentError as err:
        raise ChArgumentError(str(err)) from None
    if go_tpc_path() is None:
        raise ChArgumentError(GO_TPC_PREREQUISITE.line(go_tpc_problem()))
    return {"views": views, "algorithms": algorithms, "capture": args.capture or "triggers", "faults": faults,
            "chaos": chaos[0], "warehouses": args.ch_warehouses, "clients": args.ch_clients,
            "duties": duties,
            "seconds": args.duration, "settle": args.settle, "repeat": args.repeat, "kills": args.ch_kills}


def main(args) -> int:
    try:
        settings = plan(args)
    except ChArgumentError as err:
        print(f"fedlab bench: {err}", file=sys.stderr)
        return 2
    from fedlab.live.environment import prepare_environment, warehouse_spark
    from fedlab.source_node.ray_runtime import stop_ray

    prepare_environment()
    bench_dir = Path(args.out or f"runs/bench-ch-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    bench_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(bench_dir, 0o755)   # the server's user reaches its data directory in each run directory
    say = lambda line: print(line, file=sys.stderr, flush=True)   # noqa: E731
    duties = settings["duties"]
    say(f"fedlab bench --workload ch: {settings['repeat']} trial(s) at each pace "
        f"({', '.join(f'{d * 100:g}%' for d in duties)} of the time), capture {settings['capture']}, "
        f"{settings['clients']} go-tpc clients, views {', '.join(settings['views'])} by "
        f"{', '.join(settings['algorithms'])} -> {bench_dir}")
    spark = warehouse_spark(bench_dir)
    trials = []
    try:
        for duty in duties:
            for trial in range(1, settings["repeat"] + 1):
                run_dir = bench_dir / f"{trial:02d}-ch-{settings['capture']}-duty{duty:g}"
                trials.append({"duty": duty, **run_trial({**settings, "duty": duty}, run_dir, spark, say)})
    finally:
        stop_ray()
        spark.stop()
    summary = {"settings": {k: v for k, v in settings.items() if k != "faults"}, "trials": trials,
               "medians": {f"{d:g}": medians([t for t in trials if t["duty"] == d]) for d in duties},
               "highest_pace_meeting_target": highest_pace_meeting_target(trials)}
    (bench_dir / "bench_ch.json").write_text(json.dumps(summary, indent=2, default=str))
    plot(trials, bench_dir / "bench_ch.png")
    print(table(summary))
    return 0


def view_names_kept(settings: dict) -> dict[str, tuple[str, str]]:
    """The views the warehouse keeps, by their run file name, each (view, algorithm); the first
    is the federation's own (named after the default subscriber)."""
    from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER

    pairs = [(view, algorithm) for algorithm in settings["algorithms"] for view in settings["views"]]
    names = [DEFAULT_SUBSCRIBER] + [f"{view}-{algorithm}" for view, algorithm in pairs[1:]]
    return dict(zip(names, pairs))


def run_trial(settings: dict, run_dir: Path, spark, say) -> dict:
    """One trial's four phases (see the module docstring); its record."""
    from fedlab.checker.pg_server import PostgresServer
    from fedlab.loadgen.ch.catalog import ch_catalog
    from fedlab.loadgen.ch.go_tpc import TpccRun, prepare, rows_of

    run_dir.mkdir(parents=True, exist_ok=True)
    record: dict = {"run_dir": str(run_dir), "notes": []}
    say(f"{run_dir.name}: go-tpc prepares {settings['warehouses']} warehouse(s)")
    began = time.monotonic()
    server = PostgresServer.start(data=run_dir / "postgres")
    try:
        dsn = server.database("tpcc")
        prepare(dsn, settings["warehouses"])
        durable_commits(server, "tpcc")
        initial = rows_of(dsn)
        record["prepare_seconds"] = round(time.monotonic() - began, 1)
        say(f"{run_dir.name}: go-tpc alone for {settings['seconds']:g} s, on a copy")
        alone = copy_of(server, "tpcc", "tpcc_alone")
        durable_commits(server, "tpcc_alone")
        record["alone"] = TpccRun.start(alone, settings["warehouses"], settings["clients"], settings["seconds"],
                                        run_dir / "go-tpc-alone.txt", settings["duty"]).finish(settings["seconds"] + 120)
        drop(server, "tpcc_alone")
    finally:
        server.stop()
    say(f"{run_dir.name}: alone {record['alone']['tpmC']} tpmC; the federation starts")
    record.update(with_federation(settings, run_dir, spark, ch_catalog(), initial, say))
    return record


def copy_of(server, database: str, copy: str) -> str:
    """A copy of `database` on `server` (CREATE DATABASE ... TEMPLATE): go-tpc alone writes it, so
    that the federation starts from the very rows go-tpc alone started from. Its DSN."""
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{database}"')
    return server.dsn_for(copy)


def durable_commits(server, database: str) -> None:
    """go-tpc's commits durable once seen (synchronous_commit on, as on a production server): the
    private server commits asynchronously, and a crash (--ch-kills) would lose commits a source
    captured by triggers had already read and sent (logical decoding reads flushed WAL only)."""
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as con:
        con.execute(f'ALTER DATABASE "{database}" SET synchronous_commit = on')


def drop(server, database: str) -> None:
    import psycopg

    with psycopg.connect(server.dsn, autocommit=True) as con:
        con.execute(f'DROP DATABASE "{database}"')


def with_federation(settings: dict, run_dir: Path, spark, catalog, initial: dict, say) -> dict:
    """Phases 3 and 4: the federation over the prepared database, go-tpc again, the verdicts."""
    from fedlab.bench.runner import source_pids
    from fedlab.live.environment import NO_FAULTS, set_faults
    from fedlab.live.federation import Federation
    from fedlab.loadgen.ch.go_tpc import TpccRun
    from fedlab.loadgen.ch.views import load_view
    from fedlab.warehouse.settings import WarehouseSettings

    kept = view_names_kept(settings)
    (first, (view, algorithm)), *others = kept.items()
    fed = Federation(catalog, load_view(view), initial, run_dir, spark, WarehouseSettings(algorithm),
                     source_engine="postgres", capture=settings["capture"])
    for name, (view, algorithm) in others:
        fed.add_view(name, load_view(view), WarehouseSettings(algorithm))
    record: dict = {"notes": []}
    sampler = None
    try:
        started = time.monotonic()
        fed.start(ray_temp_dir=str(run_dir / "ray"))
        record["start_seconds"] = round(time.monotonic() - started, 1)
        sampler = ResourceSampler(source_pids(fed, record["notes"])).start()
        sampler.name(fed.postgres.pid, POSTGRES, with_children=True)
        set_faults(fed, settings["faults"])
        start_versions = {name: w.status()["applied_dsv"] for name, w in fed.views.items()}
        say(f"{run_dir.name}: views materialised in {record['start_seconds']} s; go-tpc with the federation")
        before, machine = sampler.cpu_seconds(), machine_seconds()
        load_from = time.time()
        load = TpccRun.start(fed.postgres.dsn_for("tpcc"), settings["warehouses"], settings["clients"],
                             settings["seconds"], run_dir / "go-tpc-with.txt", settings["duty"])
        sampler.name(load.pid, GO_TPC, with_children=True)
        kills = Kills(fed, settings["seconds"], record["notes"]).start() if settings["kills"] else None
        record["with"] = load.finish(settings["seconds"] + 120)
        if kills is not None:
            record["kills"] = kills.crash_postgres()
        load_until = time.time()
        record["cpu"] = cpu_use(before, sampler.cpu_seconds(), load_until - load_from, os.cpu_count(),
                                machine=(machine, machine_seconds()))
        say(f"{run_dir.name}: with the federation {record['with']['tpmC']} tpmC; settling")
        set_faults(fed, NO_FAULTS)
        deadline = time.monotonic() + settings["settle"]
        record["caught_up"] = {name: fed.wait_until_applied(max(0.0, deadline - time.monotonic()), warehouse=w)
                               for name, w in fed.views.items()}
        record["counters"] = {name: w.status()["counters"] for name, w in fed.views.items()}
    finally:
        fed.stop()
        if sampler is not None:
            sampler.stop()
    record["views"], record["per_txn"], record["transactions"] = judged(run_dir, kept, start_versions, load_from,
                                                                        load_until, record["counters"], say)
    return record


def judged(run_dir: Path, kept: dict, start_versions: dict, load_from: float, load_until: float,
           counters: dict, say) -> tuple[dict, dict, int]:
    """Each view's verdict, staleness and sub-queries per transaction, the warehouse's cost per
    transaction (its views' together), and the sources' transactions during the load, from the
    run's files and `counters` (each view's engine counters)."""
    from fedlab.live.check import judge, open_history
    from fedlab.live.runfile import RunFile

    views = {}
    with open_history(run_dir) as history:
        commits = history.commit_times()
        in_load = sum(1 for t in commits.values() if t and load_from <= t <= load_until)
        for name, (view, algorithm) in kept.items():
            say(f"{run_dir.name}: checking {view} ({algorithm})")
            verdict = judge(history.of(name), commits=commits)
            seen = metrics.reflections(commits, RunFile.read(run_dir, name).warehouse_history, start_versions[name])
            window = lambda lags: (lag for committed, lag in lags if load_from <= committed <= load_until)  # noqa: E731
            views[name] = {"view": view, "algorithm": algorithm, "consistency": verdict.level,
                           "verdict": {"transactions": verdict.transactions, "states": verdict.states,
                                       "lost": len(verdict.lost), "doubled": len(verdict.doubled)},
                           "subqueries_per_txn": round(counters[name].get("subqueries", 0) / max(in_load, 1), 3),
                           "staleness_ms": metrics.percentiles(window(seen.lags())),
                           "staleness_delta_ms": metrics.percentiles(window(seen.lags(to_delta=True)))}
        files = RunFile.read(run_dir).message_logs()
    cost = metrics.wire_cost(files, window=(load_from, load_until))
    together = Counter()
    for each in counters.values():
        together.update(each)
    per_txn, _ = metrics.per_transaction(cost, together, in_load)
    # The warehouse's message log is its first view's alone: the views' counters count them all.
    per_txn["subqueries"] = round(together.get("subqueries", 0) / max(in_load, 1), 3)
    return views, per_txn, in_load


class Kills:
    """The tpcc source's node killed a third of the way through the load (Ray restarts it on the
    same database), and PostgreSQL once the load is over, while the federation still catches up
    (an immediate stop, a crash to its clients, and a start from the same data directory): go-tpc
    v1.0.12's clients hang when their server restarts under them, so the crash waits for them."""

    def __init__(self, fed, seconds: float, notes: list):
        self.fed, self.seconds, self.notes = fed, seconds, notes
        self.events: list[dict] = []
        self._thread = threading.Thread(target=self._run, name="ch-kills", daemon=True)
        self._stop = threading.Event()

    def start(self) -> "Kills":
        self._thread.start()
        return self

    def _run(self) -> None:
        import ray

        t0 = time.monotonic()
        if self._stop.wait(self.seconds / 3):
            return
        ray.kill(self.fed.actors["tpcc"], no_restart=False)
        self.events.append({"at": round(time.monotonic() - t0, 1), "fault": "killed the tpcc source's node"})
        self.fed.refresh_address("tpcc")   # its restart serves on a new port
        self.events.append({"at": round(time.monotonic() - t0, 1), "fault": "the tpcc source's node serves again"})

    def crash_postgres(self) -> list[dict]:
        """After the load: PostgreSQL stopped at once and started again; every event."""
        self._stop.set()
        self._thread.join()
        server = self.fed.postgres
        server._run("pg_ctl", "-D", str(server.data), "-m", "immediate", "-w", "stop")
        self.events.append({"at": "after the load", "fault": "PostgreSQL stopped at once"})
        time.sleep(1)
        server._run("pg_ctl", "-D", str(server.data), "-l", "server.log", "-w", "-t", "60", "-o", server.options,
                    "start")
        self.events.append({"at": "after the load", "fault": "PostgreSQL started again"})
        return self.events


def medians(trials: list[dict]) -> dict:
    """Median and range over the trials: go-tpc's tpmC alone and with, and each view's staleness."""
    out = {"tpmC_alone": spread([t["alone"]["tpmC"] for t in trials if t["alone"]["tpmC"] is not None]),
           "tpmC_with": spread([t["with"]["tpmC"] for t in trials if t["with"]["tpmC"] is not None]),
           "subqueries_per_txn": spread([t["per_txn"]["subqueries"] for t in trials])}
    for name in trials[0]["views"]:
        for key in ("staleness_ms", "staleness_delta_ms"):
            for p in ("p50", "p99"):
                values = [t["views"][name][key].get(p) for t in trials]
                out[f"{name} {key} {p}"] = spread([v for v in values if v is not None])
    return out


def meets_target(trial: dict) -> bool:
    """Every view complete, with staleness p99 within STALENESS_TARGET."""
    return all(v["consistency"] == "complete" and v["staleness_ms"].get("p99") is not None
               and v["staleness_ms"]["p99"] <= STALENESS_TARGET * 1000 for v in trial["views"].values())


def highest_pace_meeting_target(trials: list[dict]) -> dict | None:
    """The highest pace all of whose trials met the target: its duty and median tpmC with the
    federation; None when none did."""
    met = [d for d in sorted({t["duty"] for t in trials}) if all(meets_target(t) for t in trials if t["duty"] == d)]
    if not met:
        return None
    with_fed = [t["with"]["tpmC"] for t in trials if t["duty"] == met[-1] and t["with"]["tpmC"] is not None]
    return {"duty": met[-1], "tpmC_with": spread(with_fed)}


def table(summary: dict) -> str:
    """The trials as lines of text: the client's figures, then each view's."""
    lines = []
    for t in summary["trials"]:
        alone, with_fed = t["alone"], t["with"]
        share = f" ({with_fed['tpmC'] / alone['tpmC']:.0%} of alone)" if alone["tpmC"] and with_fed["tpmC"] else ""
        errors = sum(with_fed["errors"].values())
        lines.append(f"{Path(t['run_dir']).name}: tpmC alone {alone['tpmC']}, with the federation {with_fed['tpmC']}"
                     f"{share}; {t['transactions']} source transactions in the load, "
                     f"{t['per_txn']['subqueries']} sub-queries each (all views); go-tpc errors {errors}")
        cpu = t["cpu"]["by_role"]
        lines.append("  CPU seconds: " + ", ".join(f"{role} {seconds:.1f}" for role, seconds in list(cpu.items())[:8]))
        for name, v in t["views"].items():
            s, d = v["staleness_ms"], v["staleness_delta_ms"]
            lines.append(f"  {v['view']:>4} {v['algorithm']:<10} {v['consistency']:<9} staleness p50/p99 "
                         f"{s.get('p50')}/{s.get('p99')} ms, to Delta {d.get('p50')}/{d.get('p99')} ms; "
                         f"{v['subqueries_per_txn']} sub-queries a transaction")
    best = summary["highest_pace_meeting_target"]
    found = (f"go-tpc running {best['duty'] * 100:g}% of the time, {best['tpmC_with']['median']} tpmC with the "
             f"federation" if best else "none of those run")
    lines.append(f"highest pace meeting the target (every view complete, staleness p99 at most "
                 f"{STALENESS_TARGET:g} s): {found}")
    return "\n".join(lines)


def plot(trials: list[dict], path: Path) -> None:
    """tpmC alone and with the federation per trial, and each view's staleness p50 and p99 against
    tpmC with the federation, with the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    labels = [Path(t["run_dir"]).name for t in trials]
    x = range(len(trials))
    left.bar([i - 0.2 for i in x], [t["alone"]["tpmC"] or 0 for t in trials], 0.4, label="go-tpc alone")
    left.bar([i + 0.2 for i in x], [t["with"]["tpmC"] or 0 for t in trials], 0.4, label="with the federation")
    left.set_xticks(list(x), labels, rotation=20, fontsize=7)
    left.set_ylabel("tpmC (New-Orders a minute)")
    left.legend(fontsize=8)
    by_rate = sorted(trials, key=lambda t: t["with"]["tpmC"] or 0)
    rates = [t["with"]["tpmC"] or 0 for t in by_rate]
    for name, v in trials[0]["views"].items():
        staleness = lambda key: [(t["views"][name]["staleness_ms"].get(key) or 0) / 1000 for t in by_rate]  # noqa: E731
        p99, = right.plot(rates, staleness("p99"), "o-", markersize=4, label=f"{v['view']} p99")
        right.plot(rates, staleness("p50"), "x:", markersize=4, color=p99.get_color(), label=f"{v['view']} p50")
    right.axhline(STALENESS_TARGET, color="grey", linestyle="--", linewidth=1,
                  label=f"target: p99 at most {STALENESS_TARGET:g} s")
    right.set_yscale("log")
    right.set_xlabel("tpmC with the federation")
    right.set_ylabel("seconds from commit to view")
    right.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
