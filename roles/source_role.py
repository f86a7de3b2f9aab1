"""`fedlab source`: run one source node until SIGTERM (the chart's source role).

Without --ray-address the node (source_node.node.SourceNode: database file, SQLite unless
--source-engine duckdb, gRPC server, outbox sender, fault injector) runs in this process. With
--ray-address this process joins that Ray cluster and creates, or finds after a restart, the
source's detached, restartable actor (source_node.actor) pinned by --ray-resource to the one Ray
node that offers it (the pod with the source's volume), then stays in the foreground watching it:
it exits non-zero when the actor has not answered for --lost-after seconds (Ray restarts a crashed
actor within a few), or at once when the actor does not answer and this container's raylet is gone
(the actor, pinned to this node, cannot come back before the node does), so that Kubernetes
restarts the container. SIGTERM leaves the detached actor
to Ray: its node's lifetime is its own.

The relations come from --catalog (catalog.yaml); a new database file starts empty, or with
--initial rows ({relation: [[...], ...]}, JSON or YAML). --faults-file rates are applied at once
and again whenever the file changes. --tls-cert, --tls-key and --tls-ca (all three or none) put its
server and its channel to the warehouse under mutual TLS (fedio.channels).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

from fedlab.fedmodel.catalog import validate_row
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.message_log import source_log_path
from fedlab.roles.faults_file import FaultsFile
from fedlab.roles.process import (
    Foreground,
    RoleError,
    add_metrics_argument,
    add_source_engine_argument,
    add_tls_arguments,
    capture_problem,
    default_host,
    fail,
    retention_seconds,
    tls_files,
)
from fedlab.roles.runconfig import load_catalog, read_yaml


def add_arguments(parser) -> None:
    parser.add_argument("--name", required=True, help="the source's name (as in the catalog)")
    parser.add_argument("--catalog", required=True, metavar="FILE", help="catalog file (catalog.yaml)")
    parser.add_argument("--db", required=True, metavar="PATH",
                        help="the source's database file (created if new), or with --source-engine postgres "
                             "a PostgreSQL connection string")
    parser.add_argument("--home", metavar="DIR",
                        help="where a source whose database is not a file (PostgreSQL) keeps its settings "
                             "and message log (default: the working directory)")
    parser.add_argument("--prune-applied", action="store_true",
                        help="PostgreSQL: delete captured changes once the warehouse has acknowledged and "
                             "applied them (bounded change tables; `fedlab check` can then no longer judge "
                             "the run from this source's log)")
    parser.add_argument("--max-retained-wal", type=wal_bytes, default=None, metavar="SIZE",
                        help="with --capture logical: the most WAL its replication slot may keep (e.g. 512MB, "
                             "2GB); past it the source says so and serves a lagging warehouse from its own log "
                             "(default: no bound)")
    parser.add_argument("--log-keep", type=retention_seconds, default=None, metavar="SECONDS",
                        help="seconds its log and message log keep of what they wrote (and the log what a "
                             "warehouse has not acknowledged), or 'forever' (the default): `fedlab check` needs the "
                             "log from the first view the warehouse's history keeps on (give twice the warehouse's "
                             "--history-retention)")
    parser.add_argument("--port", type=int, default=0, help="gRPC port (default: a free one)")
    parser.add_argument("--host", help="address to listen on (default 0.0.0.0 in a pod, else 127.0.0.1)")
    parser.add_argument("--warehouse", metavar="HOST:PORT", help="the warehouse's gRPC address (notifications go there)")
    parser.add_argument("--initial", metavar="FILE", help="initial rows of a new database file: {relation: rows}")
    parser.add_argument("--faults-file", metavar="FILE", help="fault rates (JSON), re-read when it changes")
    parser.add_argument("--ray-address", metavar="HOST:PORT", help="run as a detached actor on this Ray cluster")
    parser.add_argument("--ray-resource", metavar="NAME", help="custom resource pinning the actor to its node")
    parser.add_argument("--lost-after", type=float, default=60.0, metavar="SECONDS",
                        help="with --ray-address: exit 1 when the actor has not answered this long (default 60)")
    add_tls_arguments(parser)
    add_source_engine_argument(parser)
    add_metrics_argument(parser)


def wal_bytes(text: str) -> int:
    """A size such as 512MB or 2GB (kB, MB, GB, TB: powers of 1024, as PostgreSQL's), in bytes."""
    units = {"kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}
    number, unit = text[:-2], text[-2:]
    if unit not in units or not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 512MB or 2GB")
    return int(number) * units[unit]


def main(args) -> int:
    try:
        tls = tls_files(args)
        catalog = load_catalog(args.catalog)
        if args.name not in catalog.sources:
            raise RoleError(f"--name {args.name}: the catalog has no source of that name "
                            f"(it has {', '.join(catalog.sources)})")
        initial = _initial_rows(catalog, args.name, args.initial) if args.initial else None
        faults = FaultsFile(args.faults_file) if args.faults_file else None
        seed, _ = faults.read() if faults else (0, {})
        if args.ray_resource and not args.ray_address:
            raise RoleError("--ray-resource needs --ray-address")
        if args.prune_applied and args.source_engine != "postgres":
            raise RoleError("--prune-applied is for --source-engine postgres")
        if problem := capture_problem(args):
            raise RoleError(problem)
        if args.max_retained_wal is not None and args.capture != "logical":
            raise RoleError("--max-retained-wal is for --capture logical")
        if args.log_keep is not None and not 0 < args.log_keep < math.inf:
            raise RoleError(f"--log-keep must be a positive number of seconds or 'forever', got {args.log_keep:g}")
    except (ModelError, RoleError) as err:
        return fail("source", err)
    host = args.host or default_host()
    if args.ray_address:
        return _run_actor(args, catalog, initial, faults, host, tls)
    return _run_node(args, catalog, initial, faults, seed, host, tls)


def _settings(args, host: str, tls):
    """How the node runs (source_node.settings), from the command line and so the chart's values."""
    from fedlab.source_node.settings import SourceSettings

    return SourceSettings(engine=args.source_engine, host=host, port=args.port, tls=tls,
                          prune_applied=args.prune_applied, log_keep_seconds=args.log_keep,
                          capture=args.capture, max_retained_wal=args.max_retained_wal,
                          metrics_port=args.metrics_port)


def _run_node(args, catalog, initial, faults, seed: int, host: str, tls) -> int:
    from fedlab.source_node.faults import FaultInjector
    from fedlab.source_node.node import SourceNode

    try:
        node = SourceNode(catalog, args.name, args.db, initial, settings=_settings(args, host, tls),
                          warehouse_address=args.warehouse, faults=FaultInjector(seed),
                          message_log=source_log_path(Path(args.home) / args.name) if args.home else None)
    except (ModelError, OSError) as err:
        return fail("source", err)
    except Exception as err:  # the engine's own: a file another process holds, or not a database
        return fail("source", f"cannot open {args.db}: {str(err).strip().splitlines()[0]}")
    try:
        node.start()
    except ModelError as err:   # its metrics port taken: nothing was started
        node.stop()
        return fail("source", err)
    # Once started: a start that failed leaves the process's signal handlers as they were.
    foreground = Foreground()
    if faults:
        faults.watch(lambda rates: node.faults.configure(**rates))
    metrics = f", metrics on {node.host}:{node.metrics_port}" if node.metrics_port is not None else ""
    print(f"source {args.name} serving on {node.address}{' (mutual TLS)' if tls else ''} (DSV {node.store.dsv}), "
          f"warehouse {args.warehouse}{metrics}", flush=True)
    foreground.wait()
    if faults:
        faults.stop()
    node.stop()
    return 0


def _run_actor(args, catalog, initial, faults, host: str, tls) -> int:
    import ray

    from fedlab.source_node.actor import start_source_actor
    from fedlab.source_node.control import SourceControl, wait_for_address
    from fedlab.source_node.ray_runtime import NAMESPACE

    ray.init(address=args.ray_address, namespace=NAMESPACE)
    foreground = Foreground()   # after ray.init, whose own SIGTERM handler exits with status 15
    options = {"lifetime": "detached", "get_if_exists": True}
    if args.ray_resource:
        options["resources"] = {args.ray_resource: 1}
    start_source_actor(catalog, args.name, args.db, initial, args.warehouse,
                       settings=_settings(args, host, tls), home=args.home, **options)
    # A found actor keeps its constructor's settings: point it at this run's warehouse and faults.
    # Found while Ray restarts it on this node (its old node died with its raylet), it answers
    # once it is back. Pinned to this container's node, its server is reached on the loopback
    # address, which the cluster's TLS certificates name.
    local = bool(args.ray_resource)
    control = SourceControl(wait_for_address(args.name, tls, timeout=120, local=local), tls)
    control.set_warehouse(args.warehouse)
    if faults:
        faults.watch(lambda rates: control.set_faults(**rates))
    print(f"source {args.name}: actor at {control.address}", flush=True)
    last_answer = time.monotonic()
    own_raylet = raylet_running()   # this container's Ray node, when it runs one (the chart's source pods)
    while not foreground.wait(timeout=2.0):
        try:
            control.health(timeout=10)
            last_answer = time.monotonic()
        except Exception as err:  # the actor restarting (perhaps on another port), its node gone, the head gone
            if own_raylet and not raylet_running():
                print(f"fedlab source: actor {args.name} lost with this node's raylet", file=sys.stderr)
                return 1
            if time.monotonic() - last_answer > args.lost_after:
                print(f"fedlab source: actor {args.name} lost ({type(err).__name__}: {err})", file=sys.stderr)
                return 1
            try:
                control = SourceControl(wait_for_address(args.name, tls, timeout=2.0, local=local), tls)
            except Exception:   # not back yet: asked again on the next round
                pass
    if faults:
        faults.stop()
    return 0


def raylet_running(proc: Path = Path("/proc")) -> bool:
    """Whether a raylet runs among the processes this one sees (in a container: its own)."""
    for entry in proc.iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "raylet":
                return True
        except OSError:   # ended meanwhile
            continue
    return False


def _initial_rows(catalog, source: str, path: str) -> dict[str, list[tuple]]:
    doc = read_yaml(path, "initial rows")
    rows = {}
    for name, table in doc.items():
        if not catalog.has_relation(str(name)) or catalog.relation(str(name)).source != source:
            raise RoleError(f"initial rows {path}: source {source} has no relation {name!r}")
        rel = catalog.relation(str(name))
        if not isinstance(table, list):
            raise RoleError(f"initial rows {path}: {name} must be a list of rows")
        rows[rel.name] = [validate_row(rel, r, f"initial rows {path}: {name}") for r in table]
    return rows
