"""`fedlab warehouse`: run the warehouse service until SIGTERM (the chart's warehouse role).

Reads the run configuration (run.yaml: catalog, view, sources' addresses, algorithm, run
directory), starts Spark (--spark-master; local[2] by default) and warehouse.service.Warehouse
with its Delta tables under --data (a directory or an object-store URI), and serves gRPC on
--port. The first start materialises the view from the sources' snapshots, waiting for the
sources to come up; a later start on the same --data restores the view, its version state and
the notifications not yet applied from Delta. SIGTERM (or SIGINT) commits the last batch and
stops. With `recompute` in the run configuration, --recompute-period sets the seconds between its
rounds (each round's view evaluation is a Spark job on the warehouse's Spark).

The warehouse's history goes to <run dir>/warehouse/history, and the run file (loadgen.live.runfile)
to the run directory, so that `fedlab check RUN_DIR` finds both. --faults-file is checked, but
the rates are the sources' to apply: the warehouse injects no faults of its own yet.
--tls-cert, --tls-key and --tls-ca (all three or none): mutual TLS on its server and its
channels to the sources (fedio.channels).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from fedmodel.errors import ModelError
from loadgen.live.runfile import RunFile, history_sql
from loadgen.roles.faults_file import FaultsFile
from loadgen.roles.process import (
    Foreground,
    RoleError,
    add_tls_arguments,
    add_warehouse_arguments,
    default_host,
    fail,
    tls_files,
    warehouse_settings,
)
from loadgen.roles.runconfig import RunConfig, load_config

_RETRY = 2.0   # seconds between attempts to reach the sources for the first materialisation


def add_arguments(parser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE", help="run configuration (run.yaml)")
    parser.add_argument("--port", type=int, default=50052, help="gRPC port (default 50052; 0: a free one)")
    parser.add_argument("--host", help="address to listen on (default 0.0.0.0 in a pod, else 127.0.0.1)")
    parser.add_argument("--data", metavar="DIR|URI", help="where the Delta tables live (default: the config's warehouse.data)")
    parser.add_argument("--spark-master", metavar="MASTER", help="Spark master (default: the config's, else local[2])")
    parser.add_argument("--faults-file", metavar="FILE", help="fault rates (JSON); checked, applied by the sources")
    parser.add_argument("--wait-sources", type=float, default=600.0, metavar="SECONDS",
                        help="how long the first start waits for the sources to answer (default 600)")
    add_warehouse_arguments(parser)
    add_tls_arguments(parser)


def main(args) -> int:
    try:
        tls = tls_files(args)
        config = load_config(args.config)
        data = args.data or config.warehouse_data
        if not data:
            raise RoleError("no --data and no warehouse.data in the config: where do the Delta tables go?")
        if args.faults_file:
            FaultsFile(args.faults_file).read()
        settings = warehouse_settings(args, config.algorithm, config.view.join)
    except (ModelError, RoleError) as err:
        return fail("warehouse", err)
    master = args.spark_master or config.spark_master or "local[2]"
    history = write_run_file(config, data)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    foreground = Foreground()

    from warehouse.service import Warehouse
    from warehouse.spark_session import spark_session

    spark = spark_session(warehouse_dir=_spark_warehouse_dir(data), master=master)
    try:
        warehouse = Warehouse(config.catalog, config.view.sql, data, config.addresses, spark, settings,
                              history_dir=history, tls=tls)
        if not _open(warehouse, args.wait_sources, foreground):
            return 1 if not foreground.stopping.is_set() else 0
        port = warehouse.serve(args.port, args.host or default_host())
        write_run_file(config, data, f"{args.host or default_host()}:{port}")
        print(f"warehouse serving on {args.host or default_host()}:{port} ({config.algorithm}, "
              f"{warehouse.status()['view_rows']} view rows, Delta under {data})", flush=True)
        foreground.wait()
        warehouse.close()
    except ModelError as err:
        return fail("warehouse", err)
    finally:
        spark.stop()
    return 0


def write_run_file(config: RunConfig, data: str, address: str | None = None) -> Path | None:
    """The run file in the run directory (if the config names one), with the warehouse's address
    once it serves; returns the history folder."""
    if config.run_dir is None:
        return None
    from warehouse.service import delta_dir

    history = config.run_dir / "warehouse" / "history"
    RunFile(config.catalog, config.view.sql, config.algorithm, {s.name: s.db for s in config.sources},
            history, delta_dir(data), history_sql=history_sql(config.view),
            warehouse_address=address).write(config.run_dir)
    return history


def _open(warehouse, wait: float, foreground: Foreground) -> bool:
    """Restores from Delta or materialises; retries while the sources are unreachable."""
    import grpc

    deadline = time.monotonic() + wait
    while True:
        try:
            warehouse.open()
            return True
        except grpc.RpcError as err:
            if err.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            if time.monotonic() > deadline:
                print(f"fedlab warehouse: the sources did not answer within {wait:g} s ({err.code().name})",
                      file=sys.stderr)
                return False
            print(f"fedlab warehouse: waiting for the sources ({err.code().name})", file=sys.stderr, flush=True)
        if foreground.wait(timeout=_RETRY):
            return False


def _spark_warehouse_dir(data: str) -> str:
    """Spark's own warehouse directory (the store uses path-based tables; nothing lands there)."""
    if "://" in data:
        return str(Path(tempfile.gettempdir()) / "fedlab-spark-warehouse")
    return str(Path(data) / "spark-warehouse")
