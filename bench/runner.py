"""One bench run, live: a Federation for one algorithm, the load, the ramp, the checker, the figures.

Phases, each reported to `progress(phase, done, total, info)`:
  start   the source actors and the warehouse (initial materialisation), the message faults;
  idle    every process's CPU over some seconds with nothing offered (Instruments.idle_seconds);
  load    the workload at the run's rate for its duration: staleness is reported for the
          transactions committed in this window (the rate the staleness target is about), and
          the view is read every 5 s meanwhile (twice in a shorter load; bench.reads);
          pgbench writes a PostgreSQL source beside it when asked (RunSpec.outside_writers);
  ramp    the rate search (bench.ramp), on the same stream, right after;
          the CPU every process used is read around the load and each ramp step (`cpu`);
  settle  the faults are lifted and the view is given `settle` seconds to reflect every commit;
  check   every process stopped, the checker judges the run from its files, and the figures are
          read from the same files (bench.metrics).
Spark and Ray are the caller's (started once for all runs); everything else is stopped here.

Several runs that differ only in their algorithm and view can share one stream (`run_stream`,
`fedlab bench --same-stream`, issue 35): one federation, one load, one fault schedule, and a
warehouse per algorithm and view, each subscribed to the sources by a name of its own (the first
by the default one).
Each gets its own record: its staleness, wire cost and verdict from its own history and the lines
of the sources' logs about it; the load, the CPU and the process faults are the stream's, in every
record. The ramp needs a federation per algorithm (each has its own highest rate), so a shared
stream has none.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fedlab.fedmodel import change_history
from fedlab.fedmodel.message_log import WAREHOUSE_NODE
from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER
from fedlab.bench import growth, metrics
from fedlab.bench.growth import GrowthProbe, interval_for
from fedlab.bench.profile import Stopwatches
from fedlab.bench.profilers import Profilers, pyspy_binary, python_shares
from fedlab.bench.ramp import max_sustained, ramp
from fedlab.bench.reads import READ_INTERVAL, ReadProbe
from fedlab.bench.resources import (DRIVER, JVM, OUTSIDE_WRITERS, POSTGRES, PROFILER, WAREHOUSE, ResourceSampler,
                                     cpu_use, machine_seconds)
from fedlab.bench.run_specs import RunSpec
from fedlab.bench.threads import ThreadCensus
from fedlab.live.environment import NO_FAULTS, set_faults
from fedlab.live.outside_writers import OutsideWriters, outside_writers_line, written_source
from fedlab.nemesis import effects
from fedlab.nemesis.local import LocalNemesis
from fedlab.loadgen.driver_process import DataRecipe, DriverProcess, SyntheticRecipe
from fedlab.warehouse.core.registry import Settings
from fedlab.warehouse.core.sze_ling.deferral import Deferral
from fedlab.warehouse.settings import WarehouseSettings
from fedlab.warehouse.spark_session import jvm_pid

Progress = Callable[[str, float, float | None, str], None]
IDLE_SETTLE = 2.0   # seconds after the driver's start before the idle federation is measured


class _Phases:
    """Wall seconds per phase, and the progress callback told which phase is on."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.seconds: dict[str, float] = {}
        self._phase, self._since = None, time.monotonic()

    def __call__(self, phase: str, done: float, total: float | None, info: str) -> None:
        if phase != self._phase:
            self.end()
            self._phase = phase
        self.progress(phase, done, total, info)

    def end(self) -> None:
        now = time.monotonic()
        if self._phase:
            self.seconds[self._phase] = round(self.seconds.get(self._phase, 0.0) + now - self._since, 1)
        self._phase, self._since = None, now


@dataclass(frozen=True)
class Instruments:
    """What a run measures beyond its figures: `idle_seconds` of every process's CPU with the
    federation up and no load (0: not measured), and with `profile` the load phase sampled
    (bench.profilers)."""

    idle_seconds: float = 30.0
    profile: bool = False


def run_one(spec: RunSpec, catalog, initial: Path | dict, recipe: DataRecipe | SyntheticRecipe, spark, run_dir: Path,
            progress: Progress, instruments: Instruments = Instruments()) -> dict:
    """Runs `spec` in `run_dir`; returns its record (the summary's figures plus `series` for plots).
    `initial`: the sources' databases holding the initial data (live.federation.prepare_source_files),
    or for PostgreSQL sources the rows themselves; `recipe` how the load driver's process reads the same;
    the view is the spec's (a TPC-H view, or its synthetic federation's)."""
    record, = run_stream([spec], catalog, initial, recipe, spark, run_dir, progress, instruments)
    return record


def run_stream(specs: list[RunSpec], catalog, initial: Path | dict, recipe: DataRecipe | SyntheticRecipe, spark,
               run_dir: Path, progress: Progress, instruments: Instruments = Instruments(),
               one_warehouse: bool = False) -> list[dict]:
    """Runs `specs`, which differ only in their algorithm and view, on one stream in `run_dir` (one
    spec: a run of its own, with the ramp), a warehouse each or with `one_warehouse` all kept by
    one (warehouse.view_group); returns a record per spec, in order (as run_one's)."""
    from fedlab.live.federation import Federation

    first = specs[0]
    names = subscriber_names(specs)
    stream = _header(first, catalog, run_dir)
    fed = Federation(catalog, first.view_sql(), initial, run_dir, spark, _settings(first),
                     source_engine=first.source_engine, capture=first.capture)
    others = {name: (_settings(s), s.view_sql()) for name, s in zip(names[1:], specs[1:])}
    if one_warehouse:
        for name, (settings, view_sql) in others.items():
            fed.add_view(name, view_sql, settings)
    run = _LiveRun(first, fed, stream, _Phases(progress), {} if one_warehouse else others)
    try:
        run.start(catalog, recipe, run_dir)
        if instruments.idle_seconds:
            stream["idle"] = _idle(run.sampler, run.census_pids(spark), instruments.idle_seconds, run.progress)
        run.load(run_dir / "profile" if instruments.profile else None, spark)
        if len(specs) == 1:
            run.ramp()
        else:
            stream.update(ramp=[], max_sustained_rate=None)
            kept = "one warehouse keeping them all" if one_warehouse else "each a subscriber of its own"
            stream["notes"].append(f"{len(specs)} algorithms on one stream, {kept} "
                                   f"({', '.join(names)}): no ramp (each algorithm has its own highest rate)")
        run.settle()
    finally:
        run.stop()
    records = []
    with _history(run_dir, run.progress) as (history, commits, unreadable):
        for spec, name in zip(specs, names):
            record = {**stream, **_header(spec, catalog, run_dir), **run.warehouses[name], "notes": list(stream["notes"])}
            if len(specs) > 1:
                record.update(subscriber=name, shared_with=[n for n in names if n != name])
            if history is None:
                record["consistency"] = "unreadable"
                record["notes"] += [f"checker: {unreadable}", f"staleness: the sources' logs could not be read ({unreadable})"]
            else:
                _judge(record, history, commits, name, run.progress)
            _figures(record, run_dir, name, run.start_versions[name], run.load_from, run.load_until, commits,
                     run.growth, _settings(spec))
            records.append(record)
    run.progress.end()
    for record in records:
        record["phase_seconds"] = run.progress.seconds
    figures = [{k: v for k, v in r.items() if k != "series"} for r in records]
    (run_dir / "bench_run.json").write_text(json.dumps(figures[0] if len(figures) == 1 else figures,
                                                       indent=2, default=str))
    return records


def subscriber_names(specs: list[RunSpec]) -> list[str]:
    """The name each spec's warehouse subscribes to the sources by: the first the default one (a
    run of one algorithm is as it always was), the others their labels as file names, and their
    views when the specs keep several.

    >>> from dataclasses import replace
    >>> from fedlab.bench.run_specs import BenchPlan, run_specs
    >>> a, = run_specs(BenchPlan(algorithms="sze-ling", views="q3", chaos=("none",)))
    >>> subscriber_names([a, replace(a, access="scan"), replace(a, algorithm="lazy", combine_max=10)])
    ['warehouse', 'sze-ling-scan', 'lazy-10']
    >>> subscriber_names([a, replace(a, algorithm="versioned"), replace(a, view="q5")])
    ['warehouse', 'versioned-q3', 'sze-ling-q5']
    """
    views = len({s.view for s in specs}) > 1
    return [DEFAULT_SUBSCRIBER, *(s.label.replace(":", "-").replace("@", "-") + (f"-{s.view}" if views else "")
                                  for s in specs[1:])]


def commit_groups(timings: dict[str, dict]) -> dict[str, int]:
    """How many group commits the driver made at each source, from its commit timings
    ({source: CommitTimings.to_dict()}, loadgen.driver_process): what
    `fedlab calibrate` fits a commit call's cost to.

    >>> from fedlab.loadgen.driver_process import CommitTimings
    >>> t = CommitTimings()
    >>> for n in (8, 8, 3):
    ...     t.add(0.002, n)
    >>> commit_groups({"crm": t.to_dict()})
    {'crm': 3}
    """
    return {source: t["calls"] for source, t in timings.items()}


def _settings(spec: RunSpec) -> WarehouseSettings:
    """The warehouse's settings for `spec`'s algorithm."""
    bounds = Deferral(combine_max=spec.combine_max, max_jobs=spec.max_jobs) if spec.combine_max else None
    return WarehouseSettings(spec.algorithm, Settings(access=spec.access, reorder_allowance=spec.reorder_allowance,
                                                      deferral=bounds), batch_interval=spec.batch_interval,
                             journal_retention=spec.journal_retention, history_retention=spec.history_retention)


def _header(spec: RunSpec, catalog, run_dir: Path) -> dict:
    """The record's first fields: what the run is, before anything is measured."""
    return {"algorithm": spec.algorithm, "access_path": spec.access_path, "label": spec.label,
            "view": spec.view, "scale": spec.scale, "chaos": spec.chaos or "none", "faults": spec.faults,
            "placement": spec.placement, "sources": list(catalog.sources), "source_engine": spec.source_engine, "capture": spec.capture,
            "workload": spec.workload, "trial": spec.trial, "combine_max": spec.combine_max,
            "seed": spec.seed, "rate_target": spec.rate, "reorder_allowance": _settings(spec).reorder_allowance,
            "run_dir": str(run_dir), "notes": [],
            **_synthetic(spec)}


class _LiveRun:
    """A run's live phases over its federation, in order: start, load, ramp, settle; then stop,
    whatever happened. Each fills the run's record; what a later phase, stop or the figures need
    is kept here (stop closes what started, so the sampler and the driver are set as they start)."""

    def __init__(self, spec: RunSpec, fed, record: dict, progress: _Phases,
                 others: dict[str, tuple[WarehouseSettings, str]] | None = None):
        """`record`: the stream's figures; `others`: more warehouses on the same stream, by
        subscriber name, each with its settings and view (their figures go into `warehouses`)."""
        self.spec, self.fed, self.record, self.progress = spec, fed, record, progress
        self.others = others or {}
        self.warehouses: dict[str, dict] = {}   # subscriber -> what the settle phase read of its warehouse
        self.watches = Stopwatches()
        self.sampler: ResourceSampler | None = None
        self.driver: DriverProcess | None = None
        self.writers: OutsideWriters | None = None   # pgbench, during the load (spec.outside_writers)
        self.nemesis: LocalNemesis | None = None      # the process faults, during the load (spec.nemesis)
        self.growth: GrowthProbe | None = None        # readings through the load (bench.growth)
        self.committed_now = 0                        # what the drive in progress has committed so far
        self.instrumented = None                      # the warehouse object the stopwatches time
        self.pids: dict[str, int] = {}
        self.start_versions: dict[str, dict] = {}   # subscriber -> its view's versions before the load
        self.wall0 = 0.0                      # monotonic time the load began (the time profile's start)
        self.load_from = self.load_until = 0.0   # the load phase's wall-clock window

    def start(self, catalog, recipe: DataRecipe | SyntheticRecipe, run_dir: Path) -> None:
        """The source actors and the warehouse (its initial materialisation), the sampler of every
        process's resources, the message faults, and the load driver's process."""
        spec, fed, record = self.spec, self.fed, self.record
        self.progress("start", 0, None, "source actors, warehouse, initial materialisation")
        fed.start(ray_temp_dir=str(run_dir.parent / "ray"))
        for name, (settings, view_sql) in self.others.items():
            self.progress("start", 0, None, f"the warehouse of {settings.algorithm}, subscribed as {name}")
            fed.add_subscriber(name, settings, view_sql)
        self.pids = source_pids(fed, record["notes"])
        self.sampler = ResourceSampler(self.pids).start()
        if fed.postgres is not None and fed.postgres.pid:   # the sources' work is done in its backends
            self.sampler.name(fed.postgres.pid, POSTGRES, with_children=True)
        missing = self.watches.instrument_warehouse(fed.warehouse)
        self.instrumented = fed.warehouse
        if missing:
            record["notes"].append(f"profile: the warehouse has no {', '.join(missing)} to time")
        if spec.faults:
            set_faults(fed, spec.faults)
        self.start_versions = {name: w.status()["applied_dsv"] for name, w in self.all_warehouses().items()}
        self.progress("start", 0, None, "the load driver's process and its update stream")
        self.driver = DriverProcess(catalog, recipe, spec.workload, spec.seed, fed.addresses)
        self.sampler.name(self.driver.pid, DRIVER)
        record["cpu"] = []

    def follow(self) -> None:
        """Times the parts of a warehouse the nemesis restarted, as the first one's were (a new object)."""
        warehouse = self.fed.warehouse
        if warehouse is not None and warehouse is not self.instrumented:
            self.watches.instrument_warehouse(warehouse)
            self.instrumented = warehouse

    def census_pids(self, spark) -> dict[str, int]:
        """The processes a thread census reads: the warehouse's, the driver's, each source's and
        the Spark JVM's."""
        jvm = jvm_pid(spark)
        return {WAREHOUSE: os.getpid(), DRIVER: self.driver.pid, **{f"source {s}": p for s, p in self.pids.items() if p},
                **({JVM: jvm} if jvm else {})}

    def drive(self, rate: float, seconds: float, report):
        """The load at `rate` for `seconds`; the CPU every process used meanwhile goes into the
        record (the first time as the load phase's, then as a ramp step's), the commits' timings
        into the time profile."""
        before, machine, since, began = self.sampler.cpu_seconds(), machine_seconds(), time.monotonic(), time.time()

        def counted(elapsed, result):
            self.committed_now = result.committed
            report(elapsed, result)

        self.committed_now = 0
        result, timings = self.driver.drive(rate, seconds, counted)
        # The stretch's wall-clock window and the driver's commit groups per source: with the
        # message logs, what each process did in it (simulation.calibrate fits its costs).
        self.record["cpu"].append({"phase": "ramp" if self.record["cpu"] else "load", "rate": rate,
                                   **cpu_use(before, self.sampler.cpu_seconds(), time.monotonic() - since,
                                             os.cpu_count(), machine=(machine, machine_seconds())),
                                   "window": [round(began, 3), round(time.time(), 3)], "offered": result.offered,
                                   "groups": commit_groups(timings)})
        self.watches.add_commits(timings)
        return result

    def load(self, profile: Path | None, spark) -> None:
        """The workload at the run's rate for its duration, the view read meanwhile, and with a
        `profile` folder every process sampled by the profilers into it."""
        spec, record, progress = self.spec, self.record, self.progress
        profilers = None
        if profile is not None:
            profilers = Profilers(profile, {role: pid for role, pid in self.census_pids(spark).items() if role != JVM},
                                  spark)
            for pid in profilers.start().profiler_pids:
                self.sampler.name(pid, PROFILER)
        self.load_from = time.time()
        self.wall0 = time.monotonic()
        if spec.nemesis:
            self.nemesis = LocalNemesis(self.fed, list(spec.nemesis), []).start()
        reads = ReadProbe(self.fed.read_view, interval=min(READ_INTERVAL, spec.duration / 2)).start()
        parts, logs = disk_parts(self.fed.run_dir)
        self.growth = GrowthProbe(self.sampler, self.watches, lambda: self.committed_now, parts,
                                  interval_for(spec.duration), leave_out=logs, before_reading=self.follow).start()
        if spec.outside_writers:
            written = written_source(self.fed.catalog)
            self.writers = OutsideWriters.start(self.fed.postgres.bin_dir, self.fed.postgres.dsn_for(written),
                                                spec.outside_writers, spec.duration, spec.scale)
            self.sampler.name(self.writers.process.pid, OUTSIDE_WRITERS)
        load = self.drive(spec.rate, spec.duration,
                          lambda elapsed, r: progress("load", min(elapsed, spec.duration), spec.duration,
                                                      f"committed {r.committed}/{r.offered}"))
        self.growth.stop()
        if self.nemesis is not None:
            self.nemesis.stop()
            record["nemesis"] = {"events": self.nemesis.events, "applied": self.nemesis.applied}
            if any(f.kind == "kill" for f in spec.nemesis):
                record["notes"].append("a source the nemesis killed came back as a new process, which the CPU "
                                       "sampler does not follow: its figures leave out that source's time after; a "
                                       "warehouse restarted is timed again from the growth's next reading on")
        if self.writers is not None:
            record["outside_writers"] = outside = self.writers.finish()
            record["notes"].append(outside_writers_line(outside))
        record["read_latency_ms"] = reads.stop()
        if profilers is not None:
            progress("load", spec.duration, spec.duration, "writing the profiles")
            record["profilers"] = profilers.stop(load.committed)
            record["profilers"]["processes"] = python_shares(record["profilers"], record["cpu"][0]["by_role"])
        if reads.errors:
            record["notes"].append(f"{len(reads.errors)} reads of the view failed, first: {reads.errors[0]}")
        self.load_until = time.time()
        record.update(offered=load.offered, committed_in_load=load.committed, rejected=load.rejected,
                      rate_achieved=round(load.achieved_rate, 2))
        if load.rejected:
            record["notes"].append(f"{load.rejected} commits rejected: {'; '.join(load.rejections())}")

    def ramp(self) -> None:
        """The search for the highest sustained rate (bench.ramp), on the same stream."""
        spec, record, progress = self.spec, self.record, self.progress
        steps = ramp(self.fed, self.drive, list(spec.ramp_rates), spec.ramp_step,
                     lambda i, rate, elapsed: progress("ramp", i + min(elapsed / spec.ramp_step, 1),
                                                       len(spec.ramp_rates), f"step {i + 1}: {rate:g} txn/s"))
        record["ramp"] = [s.to_dict() for s in steps]
        record["max_sustained_rate"] = max_sustained(steps)
        if steps and all(s.sustained for s in steps):
            record["notes"].append(f"every ramp step up to {steps[-1].rate:g} txn/s was sustained: "
                                   "the highest sustained rate is at least that (raise --ramp-max)")

    def settle(self) -> None:
        """The faults lifted and the views given `settle` seconds in all to reflect every commit;
        then each warehouse's counters, and the time profile from the load's start."""
        self.progress("settle", 0, None, "faults lifted; waiting for the view to reflect every commit")
        if self.spec.faults:
            set_faults(self.fed, NO_FAULTS)
        deadline = time.monotonic() + self.spec.settle
        for name, warehouse in self.all_warehouses().items():
            caught_up = self.fed.wait_until_applied(timeout=max(0.0, deadline - time.monotonic()), warehouse=warehouse)
            status = warehouse.status()
            self.warehouses[name] = {"caught_up": caught_up, "counters": status["counters"],
                                     "resynchronisations": status["resynchronisations"]}
        wall = time.monotonic() - self.wall0
        # The stopwatches time the first warehouse's parts (and the commits, which are the stream's).
        self.warehouses[DEFAULT_SUBSCRIBER].update(profile=self.watches.report(wall), floor_ms=self.watches.floor_ms())

    def all_warehouses(self) -> dict:
        """Every warehouse of the stream by subscriber name, the first the federation's own."""
        return self.fed.views

    def stop(self) -> None:
        """Every process of the run stopped (the driver and the sampler if they started), and what
        the sampler measured into the record."""
        self.progress("check", 0, None, "stopping the run's processes")
        if self.nemesis is not None:
            self.nemesis.stop()   # nothing stays frozen, whatever happened
        if self.driver is not None:
            self.driver.close()
        if self.writers is not None and self.writers.process.poll() is None:
            self.writers.process.kill()
        self.fed.stop()
        if self.sampler is not None:
            self.sampler.stop()
            self.record.update(self.sampler.figures())


@contextmanager
def _history(run_dir: Path, progress: _Phases):
    """While open: the run's history (live.check.LiveHistory, read as needed) and its
    sources' commit times, read once for every warehouse's verdict and figures, and None; or
    (None, no commit times, why) when it cannot be read."""
    from fedlab.live.check import HistoryError, open_history

    progress("check", 0, None, "reading the sources' commits")
    with ExitStack() as stack:
        try:
            history = stack.enter_context(open_history(run_dir))
            commits = history.commit_times()
        except HistoryError as err:
            yield None, metrics.DsvTimes(), err
            return
        yield history, commits, None


def _judge(record: dict, history, commits, subscriber: str, progress: _Phases) -> None:
    """The checker's level for the warehouse `subscriber` of the run's `history` (a LiveHistory;
    `commits` its sources' commit times), into `record` ("unreadable", with the reason in the
    notes, when its side cannot be read)."""
    from fedlab.live.check import HistoryError, judge

    progress("check", 0, None, f"checker (DuckDB oracle over the histories){'' if subscriber == DEFAULT_SUBSCRIBER else ': ' + subscriber}")
    try:
        verdict = judge(history.of(subscriber), commits=commits)
        record["consistency"] = verdict.level
        record["verdict"] = {"transactions": verdict.transactions, "states": verdict.states,
                             "lost": len(verdict.lost), "doubled": len(verdict.doubled)}
    except HistoryError as err:
        record["consistency"] = "unreadable"
        record["notes"].append(f"checker: {err}")


def _idle(sampler: ResourceSampler, pids: dict[str, int], seconds: float, progress) -> dict:
    """Every process's CPU over `seconds` with the federation up and nothing offered: what the
    testbed costs by itself (timers, heartbeats, pollers), after IDLE_SETTLE seconds of quiet; and
    the census of the threads of `pids` (role -> pid), per second, which names the threads that
    still wake."""
    progress("idle", 0, seconds, "no load: what the federation costs by itself")
    time.sleep(IDLE_SETTLE)
    census = ThreadCensus(pids, set(pids) - {JVM}, pyspy_binary()).start()
    before, machine, since, began = sampler.cpu_seconds(), machine_seconds(), time.monotonic(), time.time()
    while (elapsed := time.monotonic() - since) < seconds:
        progress("idle", elapsed, seconds, "no load: what the federation costs by itself")
        time.sleep(min(1.0, seconds - elapsed))
    use = cpu_use(before, sampler.cpu_seconds(), time.monotonic() - since, os.cpu_count(),
                  machine=(machine, machine_seconds()))
    return {**use, "share_of_a_core": round(sum(use["by_role"].values()) / use["seconds"], 4),
            "window": [round(began, 3), round(time.time(), 3)], "threads": census.stop(use["seconds"], "s")}


def failed(spec: RunSpec, run_dir: Path, error: BaseException) -> dict:
    """The record of a run that could not finish: every figure present, none measured."""
    empty = metrics.percentiles([])
    return {"algorithm": spec.algorithm, "access_path": spec.access_path, "label": spec.label, "view": spec.view,
            "scale": spec.scale, "chaos": spec.chaos or "none", "faults": spec.faults, "placement": spec.placement,
            "workload": spec.workload, "trial": spec.trial,
            "seed": spec.seed, "rate_target": spec.rate, "rate_achieved": None, "max_sustained_rate": None,
            "combine_max": spec.combine_max, "read_latency_ms": empty,
            "staleness_ms": empty, "staleness_delta_ms": empty, "floor_ms": None, "per_txn": {k: None for k in ("subqueries", "messages", "rows", "bytes")},
            "peak_memory_mb": None, "warehouse_cpu_seconds": None, "consistency": "failed", "ramp": [],
            "run_dir": str(run_dir), "notes": [f"the run failed: {type(error).__name__}: {error}"], **_synthetic(spec)}


def _synthetic(spec: RunSpec) -> dict:
    """The synthetic federation a run is over, for the table of cost against its size (none for TPC-H)."""
    recipe = spec.synthetic
    return {"synthetic": {"shape": recipe.shape, "sources": recipe.sources, "rows_per_relation": recipe.rows}} if recipe else {}


def source_pids(fed, notes: list) -> dict[str, int]:
    """Each source actor's process id, from its health call; a source whose call fails is named
    in the run's notes (its CPU and memory are then not sampled: figures the run can do without)."""
    pids = {}
    for source in fed.actors:
        try:
            pids[source] = fed.control(source).health(timeout=30)["pid"]
        except Exception as err:   # any failure of the call: the note says which
            notes.append(f"source {source}: its health call failed ({type(err).__name__}: {err}); "
                         "its CPU and memory are not sampled")
    return pids


def disk_parts(run_dir: Path) -> tuple[dict[str, list[Path]], set[Path]]:
    """The parts of a run's directory whose disk a long run watches (bench.growth): each
    view's Delta journal and base, its history folder, every node's message log, the sources'
    databases (with SQLite's side files, or the PostgreSQL server's data); and the message logs
    inside a history folder, which are counted as message logs only."""
    from fedlab.live.runfile import RunFile

    run = RunFile.read(run_dir)
    views = [run.of(name) for name in run.subscribers]
    delta = [Path(v.warehouse_delta) for v in views if v.warehouse_delta and "://" not in v.warehouse_delta]
    logs = {p for p in run.message_logs().values() if p is not None}
    for v in views:
        logs.add(v.message_logs()[WAREHOUSE_NODE])
    files = [Path(db) for db in run.sources.values() if isinstance(db, Path)]
    sources = [Path(f"{db}{suffix}") for db in files for suffix in ("", "-wal", "-shm")]
    return {"journal": [d / "journal" for d in delta], "view": [d / "view" for d in delta],
            "history": [v.warehouse_history for v in views], "message logs": sorted(logs),
            "sources": sources + ([run.postgres] if run.postgres else [])}, logs


def _figures(record: dict, run_dir: Path, subscriber: str, start_versions: dict, load_from: float,
             load_until: float, commits, probe: GrowthProbe | None = None,
             settings: WarehouseSettings | None = None) -> None:
    """Staleness, wire cost and growth (with the load's `probe`) of the warehouse `subscriber`
    from the run's files and its sources' `commits` (their commit times), into `record`."""
    from fedlab.live.runfile import RunFile

    run = RunFile.read(run_dir, subscriber)
    kept_from, _ = change_history.read_start(run.warehouse_history)
    trimmed = any(kept_from.get(s, 1) > start_versions.get(s, 1) for s in kept_from)
    if trimmed:
        record["notes"].append("the history retention trimmed the warehouse's history and the sources' logs: "
                               f"staleness is measured from the states it kept (from the source versions {kept_from} "
                               "on), and so are the growth figures of staleness (none in a tenth it trimmed); the "
                               "transactions of the load phase are the driver's count")
    seen = metrics.reflections(commits, run.warehouse_history, start_versions)
    # every source's transactions from DSV 2, those its log no longer holds too
    record["transactions"] = sum(dsv - 1 for dsv in commits.highest().values())
    lags = seen.lags()
    in_load = [lag for committed, lag in lags if load_from <= committed <= load_until]
    record["staleness_ms"] = metrics.percentiles(in_load)
    record["staleness_ms_whole_run"] = metrics.percentiles(lag for _, lag in lags)
    to_delta = seen.lags(to_delta=True)
    record["staleness_delta_ms"] = metrics.percentiles(lag for committed, lag in to_delta
                                                       if load_from <= committed <= load_until)
    record["series"] = {"staleness": [(round(c - load_from, 3), round(lag, 4)) for c, lag in lags],
                        "load_seconds": load_until - load_from}
    if probe is not None and len(probe.readings) > 1:
        entries = growth.series(probe, lags, to_delta, load_from)
        faults = record.get("nemesis", {}).get("applied") or []
        growth.mark_faults(entries, [(a["began"] - load_from, a["ended"] - load_from) for a in faults])
        kept = growth.kept_seconds(settings.journal_retention, settings.history_retention, settings.compact_interval)
        warm = growth.warm_seconds(settings.journal_retention, settings.compact_interval)
        record["growth"] = {**growth.judge(entries, load_until - load_from, kept, warm), "series": entries}
    if record.get("nemesis", {}).get("applied"):
        plot = "faults.png" if subscriber == DEFAULT_SUBSCRIBER else f"faults-{subscriber}.png"
        state_times = [s["applied_time"] for s in change_history.applied_states(run.warehouse_history)]
        record.update(effects.figures(record["nemesis"]["applied"], lags, load_from, load_until,
                                      run_dir / "plots" / plot, state_times))
    files = run.message_logs()
    receipts = metrics.first_receipts(files)
    record["staleness_parts"] = metrics.staleness_parts(
        metrics.DsvTimes((key, t) for key, t in commits.items() if t and load_from <= t <= load_until), receipts, seen.applied,
        seen.durable, metrics.lost_notifications(files, subscriber))
    cost = metrics.wire_cost(files, subscriber=subscriber)
    record["wire"] = {k: cost[k] for k in ("messages", "rows", "bytes", "dropped", "by_kind", "logs", "missing_logs")}
    counters = record.get("counters", {})
    record["per_txn_whole_run"], notes = metrics.per_transaction(cost, counters, record["transactions"])
    record["notes"].extend(notes)
    # Algorithms are compared at the same offered load: the load phase's messages over the
    # transactions committed in it (the ramp takes each algorithm to a different rate).
    load_cost = metrics.wire_cost(files, window=(load_from, load_until), subscriber=subscriber)
    in_load_commits = (record["committed_in_load"] if trimmed else
                       sum(1 for t in commits.values() if t and load_from <= t <= load_until))
    record["per_txn"], _ = metrics.per_transaction(load_cost, counters, in_load_commits)
    # The engine counts compensations over the whole run only.
    record["per_txn"]["compensations"] = record["per_txn_whole_run"]["compensations"]
    record["wire_load"] = {k: load_cost[k] for k in ("messages", "rows", "bytes", "dropped", "by_kind")}
    record["notifications_reordered"] = metrics.reordered_notifications(receipts)
