"""`fedlab bench`: the maintenance algorithms side by side on the same workload and seed.

    fedlab bench                                   # make bench: the default comparison, SF 0.1, Q3 and
                                                   # the Q5-like view over three sources, 5% of
                                                   # notifications dropped, a ramp to 8,192 txn/s
    fedlab bench --algorithms sze-ling --views q3 --scale 0.1,1   # how cost and staleness grow with the data
    fedlab bench --algorithms sze-ling,sze-ling:scan,recompute --scale 0.1 --rate 50 --json
    fedlab bench --algorithms sze-ling --federation chain,star --sources 3,6,12,24 --rate 50 --ramp-max 0
                                                   # cost as the federation grows: synthetic chain and
                                                   # star views over 3 to 24 sources, one relation each
    fedlab bench --algorithms sze-ling,versioned --views q3 --rate 100 --same-stream --repeat 3
                                                   # the algorithms on one stream (a subscriber each),
                                                   # and each alone: how much they disturb each other,
                                                   # and whether the comparison is steadier

Each run (algorithm x view x scale x chaos, or algorithm x federation x chaos with --federation)
gets its own run directory under the bench directory (`fedlab check` can judge it again); the
bench directory gets summary.json (every figure; printed with --json), summary.md and
summary.html with the PNG plots under plots/. A progress bar shows each phase. Spark and Ray
start once and serve every run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from fedlab.bench import ch_workload
from fedlab.bench.run_specs import (
    DEFAULT_RELATION_ROWS,
    DEFAULT_SOURCES,
    BenchArgumentError,
    BenchPlan,
    run_specs,
    stream_units,
    synthetic_federations,
)
from fedlab.live.outside_writers import add_outside_writers_argument
from fedlab.roles.process import (
    add_reorder_allowance_argument,
    add_retention_arguments,
    add_source_engine_argument,
)

# The TPC-H bench's data arguments and their defaults (None in the parser, so that --federation
# can tell that one was given: a synthetic federation has no use for them).
TPCH_DEFAULTS = {"views": BenchPlan.views, "scale": BenchPlan.scales, "placement": BenchPlan.placements, "orders": 0,
                 "data_dir": None}


def add_arguments(parser) -> None:
    parser.add_argument("--algorithms",
                        help=f"comma-separated, name or name:access (default {BenchPlan.algorithms})")
    parser.add_argument("--combine-max", default=BenchPlan.combine, metavar="N,N,...",
                        help=f"lazy runs once per bound: the most transactions a maintenance job combines "
                             f"(default {BenchPlan.combine})")
    parser.add_argument("--max-jobs", type=int, default=BenchPlan.max_jobs, metavar="J",
                        help="lazy's maintenance jobs in progress at once (default 1, the paper's)")
    parser.add_argument("--views", help=f"comma-separated views from loadgen/views (default {BenchPlan.views})")
    parser.add_argument("--scale", help=f"TPC-H scale factor(s), comma-separated (default {BenchPlan.scales})")
    parser.add_argument("--federation", metavar="SHAPES",
                        help="bench synthetic federations instead of TPC-H: chain, star or both, comma-separated, "
                             "each over every --sources count with one relation per source "
                             "(loadgen.federation_shapes)")
    parser.add_argument("--sources", metavar="N,N,...",
                        help=f"with --federation: how many sources, comma-separated (default {DEFAULT_SOURCES})")
    parser.add_argument("--relation-rows", type=int, metavar="N",
                        help=f"with --federation: initial rows per relation (default {DEFAULT_RELATION_ROWS})")
    parser.add_argument("--rate", type=float, default=BenchPlan.rate,
                        help=f"offered txn/s during the load phase, where staleness is measured (default {BenchPlan.rate:g})")
    parser.add_argument("--duration", type=float, default=BenchPlan.duration,
                        help=f"seconds of the load phase (default {BenchPlan.duration:g})")
    parser.add_argument("--chaos", action="append",
                        help=f"message faults as for fedlab run, or 'none'; repeat to compare (default "
                             f"{','.join(BenchPlan.chaos)})")
    parser.add_argument("--ramp-start", type=float, default=BenchPlan.ramp_start,
                        help=f"first ramp rate, txn/s (default {BenchPlan.ramp_start:g})")
    parser.add_argument("--ramp-factor", type=float, default=BenchPlan.ramp_factor,
                        help=f"each ramp step multiplies the rate (default {BenchPlan.ramp_factor:g})")
    parser.add_argument("--ramp-max", type=float, default=BenchPlan.ramp_max,
                        help=f"highest ramp rate; 0 for no ramp (default {BenchPlan.ramp_max:g})")
    parser.add_argument("--ramp-step", type=float, default=BenchPlan.ramp_step,
                        help=f"seconds per ramp step, the second half judged (default {BenchPlan.ramp_step:g})")
    parser.add_argument("--batch-interval", type=float, default=BenchPlan.batch_interval,
                        help="the longest time between the starts of the warehouse's Delta batches; sooner when "
                             "commits are quick (three times a commit's duration, warehouse.service), back to back "
                             f"when one takes longer than that (default {BenchPlan.batch_interval:g})")
    add_reorder_allowance_argument(parser)
    add_retention_arguments(parser)
    parser.add_argument("--settle", type=float, default=BenchPlan.settle,
                        help=f"seconds a run waits for the view to reflect every commit (default {BenchPlan.settle:g})")
    parser.add_argument("--placement",
                        help="TPC-H relations over sources, comma-separated: spread (Q3 over three sources; "
                             "the default) or default (loadgen.tpch's, Q3 at one source)")
    parser.add_argument("--workload", default=BenchPlan.workload,
                        help=f"rf, mixed or skewed (default {BenchPlan.workload}), or ch: CH-benCHmark, go-tpc's TPC-C "
                             "transactions against a PostgreSQL source (bench/ch_workload.py)")
    parser.add_argument("--seed", type=int, default=BenchPlan.seed)
    parser.add_argument("--repeat", type=int, default=BenchPlan.repeat,
                        help="run everything this many times over: the summary shows how far the trials differ "
                             "(default 1)")
    parser.add_argument("--same-stream", action="store_true",
                        help="run the algorithms together on one federation, load and fault schedule, each "
                             "warehouse a subscriber of its own, and then each alone: the summary compares them "
                             "on the very same stream and says how much they disturb each other (no ramp on "
                             "the shared stream)")
    parser.add_argument("--one-warehouse", action="store_true",
                        help="with --same-stream: one warehouse keeps every algorithm's or view's view of a "
                             "shared stream, one subscriber to the sources, instead of a warehouse each")
    parser.add_argument("--out", help="the bench directory (default runs/bench-TIMESTAMP)")
    parser.add_argument("--data-dir", help="TPC-H data cache (default .cache/tpch)")
    parser.add_argument("--orders", type=int,
                        help="keep only the first N orders and their line items (quick runs; default all)")
    parser.add_argument("--json", action="store_true", help="print summary.json (the progress goes to stderr)")
    parser.add_argument("--idle", type=float, default=30.0, metavar="SECONDS",
                        help="measure every process's CPU for this long with the federation up and no load, "
                             "before the load phase (default 30; 0 skips it)")
    parser.add_argument("--profile", action="store_true",
                        help="sample every process during the load phase (py-spy on the Python processes, Java Flight "
                             "Recorder in the Spark JVM): a flame graph per process in RUN_DIR/profile, the hottest "
                             "frames in the summary")
    parser.add_argument("--nemesis", default="", metavar="SCHEDULE",
                        help="faults applied from outside during each run's load, timed from its start, as "
                             "`fedlab run --nemesis` takes them (e.g. 'pause SOURCE at 5s for 3s; kill warehouse "
                             "at 10s', or random:SEED): every algorithm meets the same schedule")
    add_source_engine_argument(parser)
    add_outside_writers_argument(parser)
    ch_workload.add_arguments(parser)


def main(args) -> int:
    if args.workload == "ch":   # a load of its own, and its own figures
        return ch_workload.main(args)
    try:
        plan = plan_from(args)   # first: it fills in the chosen bench's data arguments
        if args.orders < 0:
            raise BenchArgumentError("--orders must be 0 (all) or a positive number")
        if args.idle < 0:
            raise BenchArgumentError(f"--idle must be 0 (not measured) or a positive number of seconds, got {args.idle:g}")
        specs = run_specs(plan)
    except BenchArgumentError as err:
        print(f"fedlab bench: {err}", file=sys.stderr)
        return 2
    from rich.console import Console

    from fedlab.bench.runner import Instruments
    from fedlab.live.environment import prepare_environment

    prepare_environment()
    console = Console(stderr=args.json)
    if not console.is_terminal:   # a log file or CI: the 14-column table needs more than 80 columns
        console.width = max(console.width, 320)
    bench_dir = Path(args.out or f"runs/bench-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    bench_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    machine = _machine()
    units = stream_units(specs, args.same_stream)
    console.print(f"[bold]fedlab bench[/]: {len(units)} runs -> {bench_dir}")
    if args.same_stream and not any(kind == "shared" for kind, _ in units):
        console.print("[yellow]--same-stream: only one algorithm per run: nothing shares a stream[/]")
    if args.one_warehouse and not args.same_stream:
        console.print("[yellow]--one-warehouse: without --same-stream every run keeps one view[/]")
    runs = _run_all(units, bench_dir, args.data_dir, args.orders, console, Instruments(args.idle, args.profile),
                    args.one_warehouse)
    summary = _summary(specs, runs, bench_dir, started, machine, args)
    from fedlab.bench.report import write

    paths = write(summary, bench_dir)
    if args.json:
        print(json.dumps(summary, default=str))
    else:
        _print(console, summary, paths)
    return 0


def plan_from(args) -> BenchPlan:
    """The bench the command line asks for; BenchArgumentError for a data argument of the other
    bench (TPC-H's or the synthetic federations')."""
    synthetic = _synthetic_federations(args)
    tpch = {} if synthetic else {"views": args.views, "scales": args.scale, "placements": args.placement}
    return BenchPlan(algorithms=args.algorithms or BenchPlan.algorithms, **tpch, chaos=tuple(args.chaos or BenchPlan.chaos), rate=args.rate,
                     duration=args.duration, ramp_start=args.ramp_start, ramp_factor=args.ramp_factor,
                     ramp_max=args.ramp_max, ramp_step=args.ramp_step, settle=args.settle, seed=args.seed,
                     workload=args.workload, source_engine=args.source_engine, capture=args.capture, batch_interval=args.batch_interval,
                     repeat=args.repeat, combine=args.combine_max, max_jobs=args.max_jobs,
                     synthetic=tuple(synthetic or ()), outside_writers=args.outside_writers,
                     reorder_allowance=args.reorder_allowance, journal_retention=args.journal_retention,
                     history_retention=args.history_retention, nemesis=args.nemesis)


def _synthetic_federations(args) -> list | None:
    """The synthetic federations --federation asks for (None: the TPC-H bench), with the chosen
    bench's data arguments defaulted in `args`; BenchArgumentError for an argument of the other bench."""
    if args.federation is None:
        if args.sources is not None or args.relation_rows is not None:
            raise BenchArgumentError("--sources and --relation-rows size the synthetic federations: give --federation too")
        for name, default in TPCH_DEFAULTS.items():
            if getattr(args, name) is None:
                setattr(args, name, default)
        return None
    given = [f"--{name.replace('_', '-')}" for name in TPCH_DEFAULTS if getattr(args, name) is not None]
    if given:
        named = given[0] if len(given) == 1 else f"{', '.join(given[:-1])} and {given[-1]} are"
        raise BenchArgumentError(f"--federation benches synthetic federations: {named}{' is' * (len(given) == 1)} for TPC-H")
    args.sources = DEFAULT_SOURCES if args.sources is None else args.sources
    args.relation_rows = DEFAULT_RELATION_ROWS if args.relation_rows is None else args.relation_rows
    args.orders = 0
    return synthetic_federations(args.federation, args.sources, args.relation_rows, args.seed)


def _run_all(units: list[tuple[str, list]], bench_dir: Path, data_dir: str | None, orders: int, console,
             instruments, one_warehouse: bool = False) -> list[dict]:
    """Runs each unit (bench.run_specs.stream_units) on a federation of its own; a record
    per spec of each, those of a shared stream marked `stream: shared` (and, beside them, the
    alone ones `stream: alone`); with `one_warehouse`, a shared stream's views are one warehouse's."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from fedlab.bench.runner import failed, run_stream
    from fedlab.live.environment import warehouse_spark
    from fedlab.loadgen.driver_process import DataRecipe
    from fedlab.source_node.ray_runtime import stop_ray

    specs = [spec for kind, unit in units if kind == "alone" for spec in unit]
    shared = any(kind == "shared" for kind, _ in units)
    several = {"view": len({s.view for s in specs}) > 1, "scale": len({s.scale for s in specs}) > 1,
               "chaos": len({s.chaos for s in specs}) > 1, "placement": len({s.placement for s in specs}) > 1,
               "trial": len({s.trial for s in specs}) > 1}
    runs = []
    # Twice a second: rich's default of ten redraws a second is CPU in the process being measured.
    progress = Progress(TextColumn("{task.description:<34}"), BarColumn(), TextColumn("{task.fields[info]}"),
                        TimeElapsedColumn(), console=console, refresh_per_second=2)
    with progress:
        setup = progress.add_task("setup: Spark with Delta", total=None, info="")
        spark = warehouse_spark(bench_dir)
        progress.update(setup, total=1, completed=1, info="started")
        try:
            for i, (kind, unit) in enumerate(units, 1):
                spec = unit[0]
                catalog = spec.catalog()
                recipe = spec.synthetic or DataRecipe(spec.scale, data_dir, orders)
                initial = bench_dir / "sources" / f"{spec.data}-{spec.source_engine}"   # its databases, prepared
                # a shared stream holds every view of its group: its folder names none
                folder = spec.folder(i, several) if kind == "alone" else spec.folder(i, {**several, "view": False}, "shared")
                labels = " + ".join(s.label for s in unit)
                task = progress.add_task(f"[{i}/{len(units)}] {labels}", total=None, info="")

                def report(phase, done, total, info, task=task):
                    progress.update(task, completed=done, total=total, info=f"{phase}: {info}")

                try:
                    if spec.source_engine == "postgres":   # the run loads the rows into a server of its own
                        initial = recipe.data()
                    elif not initial.exists():
                        what = f"the {spec.view} federation" if spec.synthetic else f"TPC-H SF {spec.scale:g}"
                        progress.update(setup, description=f"setup: {what}", total=None,
                                        info=f"the sources' {spec.source_engine} files")
                        _prepare_source_files(catalog, recipe, initial, spec.source_engine)
                        progress.update(setup, total=1, completed=1, info=f"{initial.name} written")
                    records = run_stream(unit, catalog, initial, recipe, spark, bench_dir / folder, report,
                                         instruments, one_warehouse)
                except Exception as err:  # one failed run is reported; the others still compare
                    records = [failed(s, bench_dir / folder, err) for s in unit]
                for record in records:
                    record["folder"] = folder
                    if shared:
                        record["stream"] = kind
                progress.update(task, total=1, completed=1, info=f"done: {', '.join(r['consistency'] for r in records)}, "
                                f"{records[0].get('rate_achieved')} txn/s, max sustained {records[0].get('max_sustained_rate')}")
                runs += records
        finally:
            stop_ray()
            spark.stop()
            shutil.rmtree(bench_dir / "sources", ignore_errors=True)   # copies of the data: the runs hold theirs
    return runs


def _prepare_source_files(catalog, recipe, folder: Path, engine: str) -> None:
    """Writes the sources' databases from the TPC-H data in a process of its own: this one runs
    the warehouse and its memory is measured; at SF 1 the rows as Python tuples take 7 GB, which
    a process keeps as its peak after it lets them go."""
    context = multiprocessing.get_context("spawn")   # fork would copy Spark's and gRPC's threads
    with context.Pool(1) as pool:
        pool.apply(_write_source_files, (catalog.to_dict(), recipe, str(folder), engine))


def _write_source_files(catalog_dict: dict, recipe, folder: str, engine: str) -> None:
    from fedlab.fedmodel.catalog import Catalog
    from fedlab.live.federation import prepare_source_files

    partial = Path(folder + ".partial")   # a failed child leaves no folder the next run would trust
    shutil.rmtree(partial, ignore_errors=True)
    prepare_source_files(Catalog.from_dict(catalog_dict), recipe.data(), partial, engine)
    partial.rename(folder)


def _summary(specs, runs: list[dict], bench_dir: Path, started: float, machine: dict, args) -> dict:
    from fedlab.bench.efficiency import evaluate as efficiency
    from fedlab.bench.efficiency import steadiness
    from fedlab.bench.federation_size import finding, growth
    from fedlab.bench.plots import plot_all
    from fedlab.bench.same_stream import comparison
    from fedlab.bench.same_stream import finding as same_stream_finding
    from fedlab.bench.targets import evaluate
    from fedlab.bench.trials import trials

    same_stream = comparison(runs)
    alone = [r for r in runs if r.get("stream") != "shared"]   # what the targets and trials are about
    plots = plot_all(runs, bench_dir / "plots")
    sizes = growth(alone)
    first = specs[0]
    return {"bench_dir": str(bench_dir), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "seconds": round(time.time() - started, 1), "machine": machine,
            "settings": {"algorithms": args.algorithms or BenchPlan.algorithms,
                         **({"federation": args.federation, "sources": args.sources,
                             "relation_rows": args.relation_rows} if args.federation else
                            {"views": args.views, "scale": args.scale, "orders": args.orders or "all",
                             "placement": args.placement}),
                         "chaos": [s or "none" for s in dict.fromkeys(s.chaos for s in specs)],
                         "nemesis": args.nemesis,
                         "rate": first.rate, "duration": first.duration, "ramp_rates": list(first.ramp_rates),
                         "ramp_step": first.ramp_step, "settle": first.settle, "workload": first.workload,
                         "batch_interval": first.batch_interval,
                         "reorder_allowance": first.reorder_allowance,
                         "journal_retention": first.journal_retention,
                         "history_retention": first.history_retention,
                         "combine_max": args.combine_max, "max_jobs": args.max_jobs,
                         "seed": first.seed, "source_engine": args.source_engine, "capture": args.capture,
                         "outside_writers": args.outside_writers, "clients_per_source": 1, "repeat": args.repeat,
                         "idle_seconds": args.idle, "profile": args.profile, "same_stream": args.same_stream,
                         "one_warehouse": args.one_warehouse},
            "runs": [{k: v for k, v in r.items() if k != "series"} for r in runs],
            # the targets are about the TPC-H views
            "targets": [] if args.federation else (evaluate([r for r in alone if r.get("trial", 1) == 1])
                                                   + efficiency([r for r in alone if r.get("trial", 1) == 1])
                                                   + steadiness(alone)),
            "trials": trials(alone),
            # each run's first and last tenth of its load compared (bench.growth), by its folder
            "growth": {r["folder"]: {k: v for k, v in r["growth"].items() if k != "series"}
                       for r in runs if r.get("growth")},
            **({"same_stream": {"groups": same_stream, "finding": same_stream_finding(same_stream)}}
               if same_stream else {}),
            **({"federation_size": {"rows": sizes, "finding": finding(sizes)}} if sizes else {}),
            "plots": {name: str(path.relative_to(bench_dir)) for name, path in plots.items()},
            "notes": ["The driver runs in a process of its own (loadgen.driver_process) and commits with one "
                      "client thread per source, in stream order (the update stream's picture of the keys "
                      "needs it), each time everything queued for the source (up to 256 transactions) as one "
                      "group (CommitBatch); a source commits what its clients queued as one group."]}


def _machine() -> dict:
    import psutil

    from fedlab.simulation.calibrate import commit

    return {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()],
            "memory_gb": round(psutil.virtual_memory().total / 2 ** 30, 1), "platform": platform.platform(),
            "python": platform.python_version(), "commit": commit()}


def _print(console, summary: dict, paths: dict) -> None:
    from rich.table import Table

    from fedlab.bench.report import RUN_COLUMNS, run_row

    table = Table(*RUN_COLUMNS, title="fedlab bench")
    for r in summary["runs"]:
        table.add_row(*run_row(r))
    console.print(table)
    for t in summary["targets"]:
        met = {True: "[green]met[/]", False: "[red]missed[/]", None: "n/a"}[t["met"]]
        console.print(f"  target {t['name']}: {t.get('target', '')} -> {t.get('measured', t.get('note', ''))}: {met}"
                      + (f" ({t['shortfall']})" if t.get("shortfall") else ""))
    console.print(f"summary: {paths['markdown']}, {paths['html']}, {paths['json']}")
