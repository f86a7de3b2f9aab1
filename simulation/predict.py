"""`fedlab predict`: the timed simulator at scales this machine cannot hold, and against live runs.

    fedlab predict                                  # the sweep below, about an hour
    fedlab predict --part 'algorithms part'         # one part of it
    fedlab predict --sources 10_000 --views 1000 --rates 10000 --networks wan --losses 0.01
    fedlab predict --sources 8 --views 1 --shapes chain --algorithms sze-ling,sweep --networks lan,wan
    fedlab predict --against runs/bench-TIMESTAMP    # each live run of a bench, predicted beside it

Each point is a generated federation (loadgen.many_views: SOURCES sources of one
relation each, VIEWS views each joining 2 to 8 of them in the SHAPE asked for, ROWS rows per
relation), offered RATE source transactions a second in all, spread evenly over the sources,
through the network profile (simulation.network: lan, wan) with LOSS of every kind of
message lost, each view kept by a warehouse of its own running ALGORITHM, every source on a
machine of one core and every warehouse on one of two (its Python and its Spark JVM), timed by
the calibration (simulation.calibration; the shipped default, fitted here, unless
--calibration names another). It runs WARMUP seconds, then DURATION seconds in which it measures,
then up to SETTLE more for what those committed to be reflected. For each point it reports
staleness p50/p99 (to the core's view and to Delta, over every view's transactions), messages
and bytes per source transaction, each kind of process's utilisation, the rate at which the
warehouses saturate, how many warehouses of one interpreter each would keep the views at 70%
busy, and the cores their Spark JVMs use in all.

With no grid given, the sweep is the issue's: one axis at a time from a base point (100 sources,
100 views of random shape, 1,000 txn/s, WAN, no loss, sze-ling): sources 10, 100, 1,000, 10,000;
views 1, 100, 1,000; shapes chain, star, random; rates 100, 1,000, 10,000; LAN and WAN; 0% and 1%
loss; every built-in algorithm; then the largest point (10,000 sources, 1,000 views, 10,000 txn/s,
WAN, 1% loss); then where the algorithms part as a view grows: every built-in algorithm on one
chain over 2, 4 and 8 sources at 100 txn/s, over a LAN and a WAN. Each point runs in a process
of its own, whose peak memory it reports. It writes summary.json, summary.md and plots/ into
--out (runs/predict-TIMESTAMP).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from fedlab.fedmodel.errors import ModelError

BASE = {"sources": 100, "views": 100, "shape": "random", "rate": 1000.0, "network": "wan", "loss": 0.0,
        "algorithm": "sze-ling"}
AXES = {"sources": (10, 100, 1000, 10000), "views": (1, 100, 1000), "shape": ("chain", "star", "random"),
        "rate": (100.0, 1000.0, 10000.0), "network": ("lan", "wan"), "loss": (0.0, 0.01)}
LARGEST = {"sources": 10000, "views": 1000, "shape": "random", "rate": 10000.0, "network": "wan", "loss": 0.01,
           "algorithm": "sze-ling"}
WIDTHS = (2, 4, 8)           # the chains over which the algorithms part
SMALL_BUDGET = 120.0         # seconds of run time for each point where the algorithms are compared
COMPARED = ("axis: algorithm", "algorithms part")
PARTING_RATE = 100.0
ROWS = 100                   # per relation
TARGET_BUSY = 0.7            # how busy a warehouse may be kept


@dataclass(frozen=True)
class Point:
    sources: int
    views: int
    shape: str
    rate: float
    network: str
    loss: float
    algorithm: str
    sweep: str = "grid"       # which part of the sweep it belongs to
    width: int | None = None  # relations each view joins (None: 2 to 8, drawn)

    @property
    def label(self) -> str:
        views = f"{self.views:,} {self.shape} view{'s' * (self.views > 1)}" + (f" of {self.width}" if self.width else "")
        return (f"{self.algorithm}, {self.sources:,} sources, {views}, {self.rate:,.0f} txn/s, {self.network}, "
                f"{self.loss:.0%} loss")


def builtin_algorithms() -> list[str]:
    """Every algorithm fedlab registers itself (a plug-in package's are not swept by default)."""
    from importlib.metadata import entry_points

    return [ep.name for ep in entry_points(group="fedlab.algorithms") if ep.value.startswith("fedlab.warehouse.")]


def sweep() -> list[Point]:
    """The issue's points (see the module docstring), each once."""
    points: list[Point] = []

    def add(point: Point) -> None:
        if all(replace(p, sweep="") != replace(point, sweep="") for p in points):
            points.append(point)

    for axis, values in AXES.items():
        for value in values:
            add(Point(**{**BASE, axis: value}, sweep=f"axis: {axis}"))
    for algorithm in builtin_algorithms():
        add(Point(**{**BASE, "algorithm": algorithm}, sweep="axis: algorithm"))
    add(Point(**LARGEST, sweep="largest"))
    for network in ("lan", "wan"):
        for width in WIDTHS:
            for algorithm in builtin_algorithms():
                add(Point(width, 1, "chain", PARTING_RATE, network, 0.0, algorithm, "algorithms part", width))
    return points


def grid(args) -> list[Point]:
    """The points of the options given (every combination), or the sweep (or one --part of it)
    when none is."""
    given = {name: getattr(args, name) for name in ("sources", "views", "shapes", "rates", "networks", "losses", "algorithms")}
    if args.part is not None:
        if any(given.values()):
            raise ModelError("--part picks points of the sweep: give it no --sources, --views, ... beside it")
        swept = sweep()
        points = [p for p in swept if p.sweep == args.part]
        if not points:
            parts = list(dict.fromkeys(p.sweep for p in swept))
            raise ModelError(f"--part: no part of the sweep is called {args.part!r} (one of {', '.join(parts)})")
        return points
    if not any(given.values()):
        return sweep()
    values = {"sources": _numbers(given["sources"], int, "--sources") or [BASE["sources"]],
              "views": _numbers(given["views"], int, "--views") or [BASE["views"]],
              "shape": _words(given["shapes"]) or [BASE["shape"]],
              "rate": _numbers(given["rates"], float, "--rates") or [BASE["rate"]],
              "network": _words(given["networks"]) or [BASE["network"]],
              "loss": _numbers(given["losses"], float, "--losses") or [BASE["loss"]],
              "algorithm": _words(given["algorithms"]) or [BASE["algorithm"]]}
    points = [Point(*combo) for combo in _product(list(values.values()))]
    for p in points:
        _check(p)
    return points


def _check(p: Point) -> None:
    from fedlab.simulation.network import profile
    from fedlab.loadgen.many_views import SHAPES
    from fedlab.warehouse.core import registry

    if p.sources < 2 or p.views < 1 or p.rate <= 0 or not 0 <= p.loss < 1:
        raise ModelError(f"{p.label}: sources >= 2, views >= 1, a rate > 0 and a loss in [0, 1) are needed")
    if p.shape not in SHAPES:
        raise ModelError(f"--shapes: unknown shape {p.shape!r} (one of {', '.join(SHAPES)})")
    profile(p.network)
    registry.get(p.algorithm)


def _product(lists):
    if not lists:
        yield ()
        return
    for value in lists[0]:
        for rest in _product(lists[1:]):
            yield (value, *rest)


def _numbers(text, kind, flag):
    if not text:
        return []
    try:
        return [kind(x.strip().replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ModelError(f"{flag}: expected numbers separated by commas, got {text!r}") from None


def _words(text):
    return [x.strip() for x in (text or "").split(",") if x.strip()]


# ---- one point ----

def run_point(point: Point, calibration_path: str | None, warmup: float, duration: float, settle: float,
              seed: int, budget: float = math.inf, progress: Callable[[str, float], None] = lambda phase, done: None,
              faults: str = "", nemesis: str = "", check: bool = False, memory_mb: float = math.inf) -> dict:
    """The figures of one point (see the module docstring), with its run time and peak memory;
    `progress(phase, share done)` as it goes. A point that takes more than `budget` seconds, or
    more than `memory_mb` megabytes, stops where its clock got to (an algorithm far behind keeps
    the simulator as busy as the warehouse, and holds what the warehouse would) and reports what
    it measured so far. With `check`, every view's states are kept and judged by the checker
    (checker), the weakest level reported."""
    from fedlab.fedmodel.aggregate_view import parse_query
    from fedlab.fedmodel.catalog import Catalog
    from fedlab.nemesis.schedule import read
    from fedlab.simulation.calibration import load
    from fedlab.simulation.scenario import LEVELS, Scenario
    from fedlab.simulation.simulate import judge
    from fedlab.simulation.timed import Deployment, TimedRun, TimedSettings, View
    from fedlab.loadgen.many_views import many_views
    from fedlab.loadgen.synthetic_load import SyntheticStream
    from fedlab.source_node.faults import parse_rates

    started = time.monotonic()
    progress("building the federation", 0.0)
    federation = many_views(point.sources, point.views, point.shape, seed, point.width)
    rows = federation.rows(ROWS, seed)
    views, parsed = [], []
    for v in federation.views:
        relations = [federation.catalog.relation(r) for r in v.relations]
        catalog = Catalog(tuple(relations))
        parsed.append(parse_query(v.sql, federation.catalog).join)
        # the live warehouse's per-source FIFO order for the algorithms that assume it (warehouse.fifo_order)
        views.append(View(v.name, Scenario(v.name, point.algorithm, catalog, parse_query(v.sql, catalog),
                                           {r.name: rows[r.name] for r in relations}, [], fifo_repair=True)))
    stream = SyntheticStream(federation.catalog, parsed, rows, seed=seed)
    schedule = read(nemesis, sorted(federation.catalog.sources), duration, TimedRun.refusal)
    run = TimedRun(federation.catalog, rows, views, stream,
                   TimedSettings(load(calibration_path), point.network, Deployment(shared=False), seed=seed,
                                 faults=parse_rates(faults) if faults else {}, loss=point.loss, nemesis=tuple(schedule)),
                   recording=check)
    built = time.monotonic() - started
    total = warmup + duration
    over = Limits(started, budget, memory_mb)
    run.offer(point.rate, warmup, "warm-up")
    finished = over.within(lambda: run.run(warmup, lambda t: progress("warm-up", t / total), over))
    before = run.backlog()
    run.schedule_nemesis(warmup)
    run.offer(point.rate, duration, "load")
    finished = finished and over.within(lambda: run.run(total, lambda t: progress("measuring", t / total), over))
    after = run.backlog()
    progress("settling", 1.0)
    caught_up = finished and over.within(lambda: run.settle(settle, over))
    figures = run.figures("load")
    pooled = figures.get("all views") or next(iter(figures["views"].values()))
    busy = figures["utilisation"]
    python = [u for name, u in busy.items() if name.startswith("warehouse ")]
    jvm = [u for name, u in busy.items() if name.startswith("spark JVM ")]
    sources = [u for name, u in busy.items() if name.startswith("source ")]
    committed = pooled["transactions"]
    # the backlog counts a transaction once for each view it reaches: so is it judged
    reaching = sum(v["transactions"] for v in figures["views"].values())
    grew = after - before
    sustained = grew <= 0.25 * max(reaching, 1) + 5
    busiest = max(python + jvm)
    saturates = point.rate / busiest if busiest else None
    if not sustained:   # the backlog grew: what the views took in is the ceiling, whatever the CPU says
        saturates = min(saturates or math.inf, point.rate * max(reaching - grew, 0) / max(reaching, 1))
    if not finished:    # stopped short of its window's end: neither figure has a window to stand on
        saturates = None
    if check:
        progress("checking", 1.0)
        levels = [judge(w.sim).level for w in run.warehouses.values()]
    return {"point": asdict(point), "label": point.label,
            **({"consistency": min(levels, key=LEVELS.index)} if check else {}),
            "staleness_ms": pooled["staleness_ms"], "staleness_delta_ms": pooled["staleness_delta_ms"],
            "per_txn": pooled["per_txn"], "transactions": committed, "reflected": pooled["reflected"],
            "caught_up": caught_up, "sustained": sustained and finished, "backlog": {"before": before, "after": after},
            **({} if finished else {"stopped": f"{over.reason}, at {run.clock.now:.2f} simulated s"}),
            "utilisation": {"warehouse python": _spread(python), "warehouse JVM": _spread(jvm),
                            "source": _spread(sources)},
            "saturates_at": round(saturates, 1) if saturates else None,
            "warehouses_needed": math.ceil(sum(python) / TARGET_BUSY) if python else None,
            "jvm_cores_needed": round(sum(jvm), 2),
            "seconds": round(time.monotonic() - started, 1), "build_seconds": round(built, 1),
            "simulated_seconds": round(run.clock.now, 2),
            "peak_memory_mb": round(peak_memory_mb(), 1)}


class PointStopped(Exception):
    """A limit stopped a point inside one action of its clock."""


class Limits:
    """What a point may take of this machine: `budget` seconds of run time from `started`
    (time.monotonic) and `memory_mb` megabytes. The clock asks before every action (the peak
    memory read a few times a second: a read costs more than an action); `within` also stops the
    action itself, since one can run for minutes and build gigabytes (SWEEP's join of an answer
    into its partial derivations, far behind). Once a limit is passed, it says which."""

    CHECK_EVERY = 0.25   # seconds of run time between reads of the peak memory

    def __init__(self, started: float, budget: float, memory_mb: float):
        self.started, self.budget, self.memory_mb = started, budget, memory_mb
        self.reason: str | None = None
        self._next_check = started

    def __call__(self) -> bool:
        if self.reason is None:
            now = time.monotonic()
            if now - self.started > self.budget:
                self._out_of_time()
            elif now >= self._next_check:
                self._next_check = now + self.CHECK_EVERY
                if peak_memory_mb() > self.memory_mb:
                    self._out_of_memory()
        return self.reason is not None

    def _out_of_time(self) -> None:
        self.reason = f"after {self.budget:g} s of run time"

    def _out_of_memory(self) -> None:
        self.reason = f"at {self.memory_mb:,.0f} MB of memory"

    def within(self, phase: Callable[[], bool]) -> bool:
        """Runs a phase of the point (which asks this object between actions) under a timer at
        the budget and an address-space limit at the memory bound, in the main thread (signals
        reach no other); whether it got through."""
        if self.reason is not None:
            return False
        main = threading.current_thread() is threading.main_thread()
        timed = main and math.isfinite(self.budget)
        unresident = unresident_mb() if main and math.isfinite(self.memory_mb) else None
        if timed:
            handler, began = signal.signal(signal.SIGALRM, self._alarm), time.monotonic()
            earlier = signal.setitimer(signal.ITIMER_REAL, max(self.budget - (began - self.started), 0.001))
        if unresident is not None:
            # what is mapped but not resident (libraries, arenas) comes on top of the bound
            limit = resource.getrlimit(resource.RLIMIT_AS)
            ceiling = int((self.memory_mb + unresident) * 2**20)
            resource.setrlimit(resource.RLIMIT_AS, (ceiling if limit[1] < 0 else min(ceiling, limit[1]), limit[1]))
        try:
            return phase()
        except PointStopped:
            return False
        except MemoryError:
            self._out_of_memory()
            return False
        finally:
            if timed:   # a timer set before (a test runner's timeout) goes on as it was
                left = max(earlier[0] - (time.monotonic() - began), 0.001) if earlier[0] else 0
                signal.setitimer(signal.ITIMER_REAL, left)
                signal.signal(signal.SIGALRM, handler)
            if unresident is not None:
                resource.setrlimit(resource.RLIMIT_AS, limit)

    def _alarm(self, signum, frame) -> None:
        self._out_of_time()
        raise PointStopped(self.reason)


def unresident_mb() -> float | None:
    """This process's address space less its resident memory (None where /proc does not say)."""
    try:
        size, resident = Path("/proc/self/statm").read_text().split()[:2]
    except OSError:
        return None
    return (int(size) - int(resident)) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_memory_mb() -> float:
    """This process's peak resident memory (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory_share_mb(jobs: int) -> float:
    """Each of `jobs` points' share of four fifths of this machine's memory."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    return 0.8 * total / max(1, jobs)


def _spread(values: list[float]) -> dict:
    if not values:
        return {"mean": None, "max": None}
    return {"mean": round(sum(values) / len(values), 4), "max": round(max(values), 4)}


def _run_in_child(conn, point: Point, calibration: str | None, warmup: float, duration: float, settle: float,
                  seed: int, budget: float, faults: str, nemesis: str, check: bool, memory_mb: float) -> None:
    """A point in a process of its own (spawned by the sweep, so that its peak memory is its
    own): its progress and then its figures go back through `conn`."""
    try:
        result = run_point(point, calibration, warmup, duration, settle, seed, budget,
                           lambda phase, done: conn.send(("progress", phase, done)), faults, nemesis, check, memory_mb)
    except Exception as err:   # one failed point is reported; the sweep goes on
        result = {"point": asdict(point), "label": point.label, "error": f"{type(err).__name__}: {err}"}
    conn.send(("done", result))
    conn.close()


# ---- the command ----

def add_arguments(parser) -> None:
    for name, what in (("sources", "numbers of sources"), ("views", "numbers of views"),
                       ("shapes", "view shapes: chain, star, random, mixed"), ("rates", "offered txn/s in all"),
                       ("networks", "network profiles: lan, wan (loopback: every process on one machine)"),
                       ("losses", "shares of messages lost, e.g. 0,0.01"),
                       ("algorithms", "registered algorithms (`fedlab algorithms`)")):
        parser.add_argument(f"--{name}", metavar="LIST", help=f"comma-separated {what}; every combination is a point "
                                                                "(none of these: the issue's sweep)")
    parser.add_argument("--part", help="one part of the issue's sweep instead of all of it: 'axis: sources' (views, "
                                        "shape, rate, network, loss, algorithm), 'largest' or 'algorithms part'")
    parser.add_argument("--warmup", type=float, default=2.0, help="simulated seconds before measuring (default 2)")
    parser.add_argument("--duration", type=float, default=5.0, help="simulated seconds measured (default 5)")
    parser.add_argument("--settle", type=float, default=30.0,
                        help="simulated seconds at most for the measured transactions to be reflected (default 30)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget", type=float, default=600.0,
                        help="seconds of run time a point may take before it stops where it got to (default 600; "
                             f"{SMALL_BUDGET:g} at most where the sweep compares algorithms)")
    parser.add_argument("--memory", type=float, metavar="MB",
                        help="megabytes of memory a point may take before it stops where it got to (default: four "
                             "fifths of this machine's, shared among --jobs)")
    parser.add_argument("--chaos", default="", metavar="RATES",
                        help="message faults at every point's sources, as `fedlab run --chaos` takes them (default none)")
    parser.add_argument("--nemesis", default="", metavar="SCHEDULE",
                        help="faults from outside at every point, timed from the measured window's start, as `fedlab run "
                             "--nemesis` takes them (pause, kill; partitions between sources and the warehouse)")
    parser.add_argument("--check", action="store_true",
                        help="keep every view's states and judge each with the checker (slow for large points)")
    parser.add_argument("--calibration", help="a calibration file (fedlab calibrate; default: the one measured here)")
    parser.add_argument("--jobs", type=int, default=1, help="points simulated at once, a process each (default 1)")
    parser.add_argument("--against", metavar="BENCH_DIR",
                        help="instead: simulate each live run of that bench and put the prediction beside what it measured")
    parser.add_argument("--data-dir", help="with --against: the TPC-H data cache (default .cache/tpch)")
    parser.add_argument("--out", help="the output directory (default runs/predict-TIMESTAMP)")
    parser.add_argument("--json", action="store_true", help="print summary.json (the progress goes to stderr)")


def main(args) -> int:
    from rich.console import Console

    from fedlab.simulation.calibration import load
    from fedlab.source_node.faults import parse_rates

    try:
        calibration = load(args.calibration)
        points = [] if args.against else grid(args)
        if args.memory is not None and not args.memory > 0:
            raise ModelError(f"--memory: {args.memory:g} MB leaves a point nothing (give megabytes above 0)")
        if args.chaos:
            parse_rates(args.chaos)
        if args.nemesis and points:   # checked against the largest point's sources
            from fedlab.nemesis.schedule import read
            from fedlab.simulation.timed import TimedRun

            read(args.nemesis, [f"s{i}" for i in range(1, max(p.sources for p in points) + 1)], args.duration,
                 TimedRun.refusal)
    except ModelError as err:
        print(f"fedlab predict: {err}", file=sys.stderr)
        return 2
    out = Path(args.out or f"runs/predict-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=args.json)
    started = time.time()
    if args.against:
        summary = _against(Path(args.against), calibration, args.data_dir, console)
    else:
        summary = _sweep(points, args, console)
    summary.update(started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                   seconds=round(time.time() - started, 1), calibration=calibration.about)
    from fedlab.simulation.prediction_report import write

    paths = write(summary, out)
    if args.json:
        print(json.dumps(summary, default=str))
    else:
        console.print(f"summary: {paths['markdown']}, {paths['json']}")
    return 0


def _progress(console):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                    TimeElapsedColumn(), console=console, refresh_per_second=2)


def _sweep(points: list[Point], args, console) -> dict:
    console.print(f"[bold]fedlab predict[/]: {len(points)} points, {args.warmup:g} s of warm-up and "
                  f"{args.duration:g} s measured each")
    results: dict[int, dict] = {}
    memory = args.memory if args.memory is not None else memory_share_mb(args.jobs)
    context = multiprocessing.get_context("spawn")
    waiting, running = list(enumerate(points)), {}   # running: connection -> (index, task, process)
    with _progress(console) as progress:
        overall = progress.add_task("points", total=len(points), info="")
        while waiting or running:
            while waiting and len(running) < max(1, args.jobs):
                i, point = waiting.pop(0)
                mine, theirs = context.Pipe(duplex=False)
                # where the algorithms are compared, one that falls far behind has shown it soon
                budget = min(args.budget, SMALL_BUDGET) if point.sweep in COMPARED else args.budget
                child = context.Process(target=_run_in_child, args=(theirs, point, args.calibration, args.warmup,
                                                                    args.duration, args.settle, args.seed, budget,
                                                                    args.chaos, args.nemesis, args.check, memory),
                                        daemon=True)
                child.start()
                theirs.close()
                running[mine] = (i, progress.add_task(f"  {point.label}"[:90], total=1.0, info="starting"), child)
            for conn in multiprocessing.connection.wait(list(running)):
                i, task, child = running[conn]
                try:
                    message = conn.recv()
                except EOFError:
                    message = ("done", {"point": asdict(points[i]), "label": points[i].label,
                                        "error": f"the point's process ended (exit code {child.exitcode})"})
                if message[0] == "progress":
                    progress.update(task, completed=message[2], info=message[1])
                    continue
                results[i] = message[1]
                child.join()
                del running[conn]
                progress.remove_task(task)
                result = message[1]
                progress.update(overall, advance=1, info=(f"{result['label']}: p99 {result['staleness_ms']['p99']} ms, "
                                                          f"{result['seconds']} s" if "error" not in result else
                                                          f"{result['label']}: {result['error']}")[:150])
    return {"kind": "sweep", "settings": {"warmup": args.warmup, "duration": args.duration, "settle": args.settle,
                                          "seed": args.seed, "rows_per_relation": ROWS, "target_busy": TARGET_BUSY,
                                          "chaos": args.chaos or "none", "nemesis": args.nemesis or "none",
                                          "checked": args.check, "budget_s": args.budget,
                                          "memory_mb": round(memory)},
            "points": [results[i] for i in range(len(points))]}


def _against(bench_dir: Path, calibration, data_dir, console) -> dict:
    from fedlab.simulation.validation import validate

    with _progress(console) as progress:
        task = progress.add_task("live runs simulated", total=None, info="")

        def report(i, n, what):
            progress.update(task, completed=i, total=n, info=what)

        try:
            result = validate(bench_dir, calibration, data_dir, report)
        except ModelError as err:
            raise SystemExit(f"fedlab predict: {err}") from None
    return {"kind": "against", **result}
