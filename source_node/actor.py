"""A source node as a named, restartable Ray actor (docs/architecture.md 5, 6).

The actor is named after its source, in namespace "fedlab", and Ray restarts it without limit
after a crash. A restarted actor runs its constructor again with the original arguments: it
reopens its database file (SQLite, or DuckDB if told so: source_node.engines), where the
relations, versions and unsent notifications are (the outbox is committed with the data), and
starts a new gRPC server, whose port may differ from the old one; it publishes that server's
address (source_node.control), and its main thread then waits for the node to stop, so that Ray
does not wake it every 10 ms: the operator's calls go to the source's server, not to the actor.
Settings changed at run time (the warehouse address, the fault rates) are kept beside the database
and applied again on restart (source_node.run_settings), so a restarted source goes on delivering
to the warehouse it was last pointed at (what each subscriber had not acknowledged is in the
database: source_node.subscriber_outbox; the other subscribers' addresses, the node keeps itself:
source_node.subscriber_addresses). Its message log (fedmodel.message_log.source_log_path, beside
the database) is appended to across restarts.

    handle = start_source_actor(catalog, "ds1", "/abs/path/ds1.sqlite", initial)
    control = SourceControl(wait_for_address("ds1"))     # "127.0.0.1:<port>"
    ...
    control.stop(); ray.get(handle.stop.remote()); ray.kill(handle)
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import ray

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.message_log import source_log_path
from fedlab.source_node.engines import is_dsn
from fedlab.source_node.faults import FaultInjector
from fedlab.source_node.control import publish_address
from fedlab.source_node.node import SourceNode
from fedlab.source_node.ray_runtime import NAMESPACE
from fedlab.source_node.run_settings import RunSettings
from fedlab.source_node.settings import SourceSettings


@ray.remote(max_restarts=-1, max_task_retries=3)
class SourceActor:
    def __init__(self, catalog_dict: dict, source: str, db_path: str, initial: dict | None,
                 warehouse_address: str | None, settings: SourceSettings, home: str | None):
        """`settings` as for source_node.node.SourceNode: its `host` and `port` are where the gRPC
        server listens (the loopback address on a free port on a laptop; on a cluster, all
        interfaces on the port its Service forwards to), its `tls` (the PEM contents travel with
        it) makes the server and the channel to the warehouse mutual TLS. `home`: where the actor
        keeps its run settings and message log when its database is not a file (PostgreSQL)."""
        beside = Path(db_path) if not is_dsn(db_path) else Path(home or ".") / source
        run_settings = RunSettings(f"{beside}.settings.json", warehouse_address, _was_restarted())
        self.node = SourceNode(Catalog.from_dict(catalog_dict), source, db_path, initial, settings=settings,
                               warehouse_address=run_settings.warehouse_address,
                               faults=FaultInjector(**run_settings.faults), message_log=source_log_path(beside),
                               run_settings=run_settings)
        self.node.start()
        host = settings.host
        reachable = host if host not in ("0.0.0.0", "::", "") else ray.util.get_node_ip_address()
        publish_address(source, f"{reachable}:{self.node.port}")
        # Runs once the constructor has returned, and holds the main thread until the node stops.
        ray.get_runtime_context().current_actor.hold.options(max_task_retries=0).remote()

    def hold(self) -> None:
        """Waits, on the actor's main thread, until the node has stopped (source_node.control)."""
        self.node.stopped.wait()

    def stop(self) -> None:
        """Stops the node (server, sender, store) if the Stop call has not, and returns once it has:
        Ray delivers it only when `hold` has returned. The actor itself stays until killed."""
        self.node.stop()


def _was_restarted() -> bool:
    with warnings.catch_warnings():
        # Ray 2.60 reads its own deprecated RuntimeContext.actor_id here and warns about it.
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


def start_source_actor(catalog: Catalog, source: str, db_path: str | os.PathLike,
                       initial: dict | None = None, warehouse_address: str | None = None, *,
                       settings: SourceSettings = SourceSettings(), home: str | os.PathLike | None = None,
                       **actor_options):
    """Creates the named actor for `source` (name = source, namespace "fedlab"); returns its handle.

    `actor_options` go to Ray's `.options` (a cluster deployment passes e.g. lifetime="detached",
    get_if_exists=True and a custom resource that pins the actor to the node with its volume).
    """
    location = str(db_path) if is_dsn(db_path) else str(Path(db_path).resolve())
    return SourceActor.options(name=source, namespace=NAMESPACE, **actor_options).remote(
        catalog.to_dict(), source, location, initial, warehouse_address, settings,
        str(Path(home).resolve()) if home is not None else None)
