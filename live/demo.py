"""`fedlab demo`: the main job. A live federation on this machine under about a minute of load.

Three source actors on a local Ray (TPC-H at a small scale factor spread over "sales",
"procurement" and "reference"), the warehouse on Spark with Delta tables under the run directory
maintaining a 4-relation view with Sze-Ling's algorithm, and the load generator committing a
mixed update stream at a target rate. Sources drop, duplicate and delay some notifications and
answers (moderate chaos), so the verdict means something. It ends with a summary: transactions
committed and applied, the view's size, staleness, and whether the final view equals the view
recomputed from the sources, and the checker's verdict on the run's histories (the exit status is
non-zero unless the view converged and the run was completely consistent); every process it
started is stopped.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

from fedlab.fedmodel.aggregate_view import parse_query
from fedlab.fedmodel.errors import ModelError
from fedlab.bench.metrics import percentiles
from fedlab.live.environment import prepare_environment, set_faults, warehouse_spark
from fedlab.live.outside_writers import (
    OutsideWriters,
    add_outside_writers_argument,
    outside_writers_line,
    source_written,
)
from fedlab.roles.process import (RoleError, add_deferral_arguments, add_source_engine_argument, capture_problem,
                                  deferral)
from fedlab.loadgen.driver import DriveResult, drive
from fedlab.warehouse.core import registry
from fedlab.warehouse.core.registry import Settings
from fedlab.warehouse.settings import WarehouseSettings

DEFAULT_CHAOS = {"drop": 0.05, "duplicate": 0.02, "delay_mean": 0.05}


def main(args) -> int:
    prepare_environment()
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from fedlab.live.federation import Federation
    from fedlab.loadgen.tpch import load_view, tpch_catalog, tpch_data
    from fedlab.loadgen.workload import Workload
    from fedlab.source_node.ray_runtime import stop_ray

    console = Console()
    try:
        view_sql = load_view(args.view)
        bounds = deferral(args)
        registry.check_view(args.algorithm, parse_query(view_sql, tpch_catalog()).join)
        written = source_written(args.outside_writers, args.source_engine, tpch_catalog())
        if problem := capture_problem(args):
            raise RoleError(problem)
    except (ModelError, RoleError, registry.AlgorithmError) as err:   # before anything is made: no run directory for refused input
        print(f"fedlab demo: {err}")
        return 2
    run_dir = Path(args.run_dir or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    # The terminal shows progress and the summary; log lines (retries under chaos, Spark's and
    # Ray's start-up) go to files in the run directory.
    logging.basicConfig(filename=run_dir / "fedlab.log", level=logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    catalog = tpch_catalog()
    console.print(f"[bold]fedlab demo[/]: TPC-H SF {args.scale}, view {args.view}, {args.algorithm}, "
                  f"{args.rate} txn/s for {args.duration:g} s, chaos {DEFAULT_CHAOS if not args.no_chaos else 'off'}")
    console.print(f"run directory: {run_dir}")
    with console.status("generating TPC-H data"):
        data = tpch_data(args.scale, args.data_dir)
    with console.status("starting Spark with Delta"):
        spark = warehouse_spark(run_dir)
    tls = None
    if args.tls:
        from fedlab.roles.certs import write_certificates

        tls = write_certificates(run_dir / "tls")
    fed = Federation(catalog, view_sql, data, run_dir, spark, WarehouseSettings(args.algorithm, Settings(deferral=bounds)),
                     tls=tls, source_engine=args.source_engine, capture=args.capture)
    writers = None
    try:
        with console.status("starting Ray, three source actors and the warehouse (initial materialisation)"):
            fed.start(ray_temp_dir=str(run_dir / "ray"))
            if not args.no_chaos:
                set_faults(fed, DEFAULT_CHAOS)
        console.print(f"view materialised: {len(fed.warehouse.view_rows())} rows; sources {fed.addresses}; "
                      f"warehouse {fed.warehouse_address}")
        load = DriveResult()
        fed.serve_load_metrics(load)
        console.print("\n".join(fed.metrics_lines()), highlight=False)
        stream = Workload.named("mixed").stream(catalog, data, seed=args.seed)
        if written is not None:
            writers = OutsideWriters.start(fed.postgres.bin_dir, fed.postgres.dsn_for(written),
                                           args.outside_writers, args.duration, args.scale)
        _drive(fed, stream, load, args.rate, args.duration, Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), console=console))
        outside = writers.finish() if writers is not None else None
        with console.status("waiting for the view to reflect every commit"):
            caught_up = fed.wait_until_applied(timeout=args.settle)
        with console.status("recomputing the view from source snapshots (Spark)"):
            recomputed = fed.recompute()
        view = fed.warehouse.view_rows()
        summary = _summary(fed, load, caught_up, view, recomputed, run_dir)
        summary["outside_writers"] = outside
    finally:
        if writers is not None and writers.process.poll() is None:
            writers.process.kill()
        with console.status("stopping every process"):
            fed.stop()
            stop_ray()
            spark.stop()
    with console.status("checking the run's consistency (fedlab check: DuckDB oracle over the histories)"):
        from fedlab.live.check import check

        verdict = check(run_dir)
    summary["consistency"] = {"level": verdict.level, "transactions": verdict.transactions,
                              "states": verdict.states, "lost": verdict.lost, "doubled": verdict.doubled}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    _print(console, summary)
    failed = (summary["outside_writers"] or {}).get("error")
    return 0 if summary["converged"] and verdict.level == "complete" and not failed else 1


def _drive(fed, stream, load: DriveResult, rate: float, duration: float, progress) -> None:
    with progress:
        task = progress.add_task("load", total=duration, info="")

        def show(elapsed, result):
            status = fed.warehouse.status()
            progress.update(task, completed=min(elapsed, duration),
                            info=f"committed {result.committed}/{result.offered}  applied {status['applied']}  "
                                 f"in flight {status['in_flight']}")
        drive(fed.commit_batch, stream, fed.catalog.sources, rate, duration, show, result=load)


def _summary(fed, load, caught_up: bool, view: dict, recomputed: dict, run_dir: Path) -> dict:
    status = fed.warehouse.status()
    return {
        "run_dir": str(run_dir),
        "offered": load.offered,
        "committed": load.committed,
        "rejected": load.rejected,
        "rejections": load.rejections(),
        "achieved_rate": round(load.achieved_rate, 1),
        "applied": status["applied"],
        "caught_up": caught_up,
        "view_rows": len(view),
        "view_multiplicity": sum(view.values()),
        "converged": view == recomputed,
        "differences": len(set(view.items()) ^ set(recomputed.items())),
        "staleness_ms": percentiles(s for _, s in fed.warehouse.staleness),
        "counters": status["counters"],
        "withheld": status["withheld"],
        "withheld_resends": status["withheld_resends"],
        "resent_lost": status["resent_lost"],
        "resynchronisations": status["resynchronisations"],
    }


def _print(console, s: dict) -> None:
    verdict = "[green]yes[/]" if s["converged"] else f"[red]NO[/] ({s['differences']} rows differ)"
    console.print(f"\n[bold]summary[/]\n  transactions offered {s['offered']}, committed {s['committed']} "
                  f"({s['achieved_rate']}/s), rejected {s['rejected']}, applied {s['applied']}"
                  f"{'' if s['caught_up'] else ' (did not catch up in time)'}\n"
                  + "".join(f"  rejected: {line}\n" for line in s["rejections"])
                  + (f"  {outside_writers_line(s['outside_writers'])}\n" if s["outside_writers"] else "")
                  + f"  final view: {s['view_rows']} rows\n"
                  f"  final view equals the view recomputed from the sources (convergence): {verdict}\n"
                  f"  staleness ms: p50 {s['staleness_ms']['p50']}, p95 {s['staleness_ms']['p95']}, "
                  f"p99 {s['staleness_ms']['p99']}, max {s['staleness_ms']['max']}\n"
                  f"  sub-queries {s['counters']['subqueries']}, retries {s['counters']['retries']} "
                  f"({s['withheld']} withheld: answered before they went; {s['resent_lost']} lost, asked at once), "
                  f"resend requests {s['counters']['resends']} ({s['withheld_resends']} withheld: arrived meanwhile), "
                  f"duplicates ignored {s['counters']['duplicates']}, "
                  f"compensation steps {s['counters']['compensations']}\n"
                  f"  consistency (fedlab check): {s['consistency']['level']} over {s['consistency']['transactions']} "
                  f"transactions, {len(s['consistency']['lost'])} lost, {len(s['consistency']['doubled'])} doubled\n"
                  f"  run directory: {s['run_dir']} (logs: fedlab.log, spark.log, ray.log)")


def add_arguments(parser) -> None:
    parser.add_argument("--scale", type=float, default=0.01, help="TPC-H scale factor (default 0.01)")
    parser.add_argument("--view", default="demo4", help="view file under loadgen/views (default demo4)")
    parser.add_argument("--algorithm", default="sze-ling", help="maintenance algorithm (default sze-ling)")
    parser.add_argument("--rate", type=float, default=100.0, help="target source transactions per second (default 100)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    parser.add_argument("--settle", type=float, default=120.0, help="seconds to wait for the view to catch up")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-chaos", action="store_true", help="no message faults")
    parser.add_argument("--run-dir", help="where the run's files go (default runs/demo-TIMESTAMP)")
    parser.add_argument("--data-dir", help="TPC-H data cache (default .cache/tpch)")
    parser.add_argument("--tls", action="store_true",
                        help="mutual TLS on every gRPC channel, with a throwaway CA written to RUN_DIR/tls")
    add_outside_writers_argument(parser)
    add_deferral_arguments(parser)
    add_source_engine_argument(parser)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(None))
