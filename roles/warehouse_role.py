"""`fedlab warehouse`: run the warehouse service until SIGTERM (the chart's warehouse role).

Reads the run configuration (run.yaml: catalog, view, sources' addresses, algorithm, run
directory), starts Spark (--spark-master; local[2] by default) and warehouse.service.Warehouse
with its Delta tables under --data (a directory or an object-store URI), and serves gRPC on
--port. The first start materialises the view from the sources' snapshots, waiting for the
sources to come up; a later start on the same --data restores the view, its version state and
the notifications not yet applied from Delta, without Spark, while the Spark session starts
beside it (warehouse.spark_session.start_beside): it serves once restored, and its Delta batches,
which the sources' acknowledgements follow, wait for the session. It says when it serves (`up in
N s`) and when the session is up (`Spark session started in N s`), both from the process's start. SIGTERM (or SIGINT) commits the last batch and
stops. With `recompute` in the run configuration, --recompute-period sets the seconds between its
rounds (each round's view evaluation is a Spark job on the warehouse's Spark).

With `views` in the run configuration, the warehouse keeps those views too (warehouse.view_group),
each by its algorithm, its Delta tables under <data>/views/<name>; a reader names the one it reads
in the `fedlab-view` gRPC metadata. With `warehouses`, the views that name another warehouse are
kept by that one: `fedlab warehouse --name NAME` keeps the views naming NAME and, before it first
reads the sources, subscribes to them by NAME (the Source.Subscribe call) with its address from
the config, so that the sources send it every notification from its snapshots on. Only the first
warehouse (`warehouse`, the default --name) writes the run file; it names every warehouse's views.

The warehouse's history goes to <run dir>/warehouse/history (another view's to <run dir>/<name>/history),
and the run file (live.runfile) to the run directory, so that `fedlab check RUN_DIR` finds
them all. --faults-file is checked, but
the rates are the sources' to apply: the warehouse injects no faults of its own yet.
--tls-cert, --tls-key and --tls-ca (all three or none): mutual TLS on its server and its
channels to the sources (fedio.channels).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER
from fedlab.live.runfile import RunFile, Subscriber, history_sql
from fedlab.roles.faults_file import FaultsFile
from fedlab.roles.process import (
    Foreground,
    RoleError,
    add_metrics_argument,
    add_tls_arguments,
    add_warehouse_arguments,
    default_host,
    fail,
    tls_files,
    warehouse_settings,
)
from fedlab.roles.runconfig import RunConfig, load_config

_RETRY = 2.0   # seconds between attempts to reach the sources for the first materialisation


def add_arguments(parser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE", help="run configuration (run.yaml)")
    parser.add_argument("--name", default=DEFAULT_SUBSCRIBER,
                        help=f"which of the config's warehouses this is (default {DEFAULT_SUBSCRIBER!r}, the first): "
                             f"it keeps the views that name it, subscribed to the sources by this name")
    parser.add_argument("--port", type=int, default=50052, help="gRPC port (default 50052; 0: a free one)")
    parser.add_argument("--host", help="address to listen on (default 0.0.0.0 in a pod, else 127.0.0.1)")
    parser.add_argument("--data", metavar="DIR|URI", help="where the Delta tables live (default: the config's warehouse.data)")
    parser.add_argument("--spark-master", metavar="MASTER", help="Spark master (default: the config's, else local[2])")
    parser.add_argument("--faults-file", metavar="FILE", help="fault rates (JSON); checked, applied by the sources")
    parser.add_argument("--wait-sources", type=float, default=600.0, metavar="SECONDS",
                        help="how long the first start waits for the sources to answer (default 600)")
    add_warehouse_arguments(parser)
    add_tls_arguments(parser)
    add_metrics_argument(parser)


def main(args) -> int:
    began = time.monotonic()
    try:
        tls = tls_files(args)
        config = load_config(args.config)
        data = args.data or config.warehouse_data
        if not data:
            raise RoleError("no --data and no warehouse.data in the config: where do the Delta tables go?")
        if args.faults_file:
            FaultsFile(args.faults_file).read()
        if args.name not in config.warehouse_names:
            raise RoleError(f"--name {args.name}: the config has no warehouse of that name "
                            f"(it has {', '.join(config.warehouse_names)})")
        kept = config.kept_by(args.name)
        settings = {v.name: replace(warehouse_settings(args, v.algorithm, v.view.join), subscriber=args.name)
                    for v in kept}
    except (ModelError, RoleError) as err:
        return fail("warehouse", err)
    first = args.name == DEFAULT_SUBSCRIBER
    master = args.spark_master or config.spark_master or "local[2]"
    if first:
        write_run_file(config, data)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    foreground = Foreground()

    from fedlab.warehouse.incarnation import Incarnation
    from fedlab.warehouse.service import Warehouse
    from fedlab.warehouse.spark_session import hadoop_settings, on_object_store, start_beside
    from fedlab.warehouse.view_group import ViewGroup

    # The JVM starts beside the restore, which reads Delta without it; a first start's
    # materialisation, and every Delta batch, wait for it.
    spark = start_beside(warehouse_dir=_spark_warehouse_dir(data), master=master, object_store=on_object_store(data))
    spark.add_done_callback(lambda done: _session_up(done, began, foreground))
    hadoop = hadoop_settings().get
    incarnation = Incarnation()
    try:
        views = {v.name: Warehouse(config.catalog, v.view.sql, _view_data(data, v.name), config.addresses, spark,
                                   settings[v.name], history_dir=_history(config, v.name), tls=tls, hadoop=hadoop,
                                   incarnation=incarnation)
                 for v in kept}
        group = ViewGroup(views, tls)
        if not _open(group, args.wait_sources, foreground, None if first else config.address_of(args.name)):
            if spark.done() and spark.exception() is not None:
                return fail("warehouse", RoleError(f"the Spark session did not start: {spark.exception()}"))
            return 1 if not foreground.stopping.is_set() else 0
        port = group.serve(args.port, args.host or default_host(), args.metrics_port)
        if first:
            write_run_file(config, data, f"{args.host or default_host()}:{port}")
        shown = ", ".join(f"{name}: {w.plugin.name}, {w.status()['view_rows']} rows" for name, w in views.items())
        # Where a restart's time went, for the e2e's recovery figures (docs/kubernetes.md).
        up = time.monotonic()
        metrics = f", metrics on port {group.metrics_port}" if group.metrics_port is not None else ""
        print(f"warehouse serving on {args.host or default_host()}:{port}{metrics} ({shown}; Delta under {data}); "
              f"up in {up - began:.1f} s: views restored or materialised, Spark session "
              f"{'up' if spark.done() else 'still starting'}", flush=True)
        foreground.wait()
        group.close(commit=spark.exception() is None)
        if spark.exception() is not None:
            return fail("warehouse", RoleError(f"the Spark session did not start: {spark.exception()}"))
    except ModelError as err:
        return fail("warehouse", err)
    finally:
        if spark.exception() is None:   # waits for a session still starting, to stop it
            spark.result().stop()
    return 0


def _session_up(spark, began: float, foreground: Foreground) -> None:
    """Says when the Spark session came up (the e2e's recovery figures, docs/kubernetes.md); one
    that failed to start stops the warehouse, which cannot make anything durable without it."""
    if spark.exception() is None:
        print(f"Spark session started in {time.monotonic() - began:.1f} s", flush=True)
    else:
        foreground.stopping.set()


def write_run_file(config: RunConfig, data: str, address: str | None = None) -> None:
    """The run file in the run directory (if the config names one), with the warehouse's address
    once it serves."""
    if config.run_dir is None:
        return
    from fedlab.warehouse.service import delta_dir

    others = {v.name: Subscriber(v.view.sql, v.algorithm, _history(config, v.name), delta_dir(_view_data(data, v.name)),
                                 history_sql(v.view), address if v.warehouse == DEFAULT_SUBSCRIBER
                                 else config.address_of(v.warehouse), v.warehouse if v.warehouse != v.name else None)
              for v in config.more_views}
    RunFile(config.catalog, config.view.sql, config.algorithm, {s.name: s.db for s in config.sources},
            _history(config, DEFAULT_SUBSCRIBER), delta_dir(data), history_sql=history_sql(config.view),
            warehouse_address=address, others=others).write(config.run_dir)


def _view_data(data: str, name: str) -> str:
    """Where a view's Delta tables live: the first view's under --data, another's under views/<name>
    (joined as text: --data may be a URI)."""
    return data if name == DEFAULT_SUBSCRIBER else data.rstrip("/") + f"/views/{name}"


def _history(config: RunConfig, name: str) -> Path | None:
    """A view's history folder in the run directory, named for the view (the first's: `warehouse`,
    DEFAULT_SUBSCRIBER); None without a run directory: under its data."""
    if config.run_dir is None:
        return None
    return config.run_dir / name / "history"


def _open(group, wait: float, foreground: Foreground, subscribe_at: str | None) -> bool:
    """Subscribes the warehouse to the sources with `subscribe_at` as its address (unless None: the
    first warehouse, which every source has), then restores the views from Delta or materialises
    them; retries while the sources are unreachable."""
    import grpc

    deadline = time.monotonic() + wait
    while True:
        try:
            if subscribe_at is not None:
                group.subscribe(subscribe_at)
            group.open()
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
