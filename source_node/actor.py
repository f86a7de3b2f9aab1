"""A source node as a named, restartable Ray actor (docs/architecture.md 5, 6).

The actor is named after its source, in namespace "fedlab", and Ray restarts it without limit
after a crash. A restarted actor runs its constructor again with the original arguments: it
reopens its database file (SQLite, or DuckDB if told so: source_node.engines), where the
relations, versions and unsent notifications are (the outbox is committed with the data), and
starts a new gRPC server, whose port may differ from the old one: `address()` tells the new one.
Settings changed at run time (the warehouse address, the fault rates) are kept in a small JSON
file beside the database and applied again on restart, so a restarted source goes on delivering
to the warehouse it was last pointed at (what each subscriber had not acknowledged is in the
database: source_node.subscriber_outbox; the other subscribers' addresses, the node keeps itself:
source_node.subscriber_addresses). Its message log (fedmodel.message_log.source_log_path, beside
the database) is appended to across restarts.

    handle = start_source_actor(catalog, "ds1", "/abs/path/ds1.sqlite", initial)
    ray.get(handle.address.remote())        # "127.0.0.1:<port>"
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import ray

from fedio.channels import TlsFiles
from fedmodel.catalog import Catalog
from fedmodel.message_log import source_log_path
from source_node.engines import DEFAULT_ENGINE, is_dsn
from source_node.faults import FaultInjector
from source_node.node import SourceNode
from source_node.ray_runtime import NAMESPACE


@ray.remote(max_restarts=-1, max_task_retries=3)
class SourceActor:
    def __init__(self, catalog_dict: dict, source: str, db_path: str, initial: dict | None = None,
                 warehouse_address: str | None = None, host: str = "127.0.0.1", port: int = 0,
                 tls: TlsFiles | None = None, engine: str = DEFAULT_ENGINE, probes: list | None = None,
                 home: str | None = None, prune_applied: bool = False, log_retention: int | None = None):
        """`host` and `port` are where the gRPC server listens: the loopback address on a free port
        on a laptop; on a cluster, all interfaces on the port its Service forwards to. `tls` (the
        PEM contents travel with it) makes its server and its channel to the warehouse mutual TLS.
        `engine`, `probes`, `prune_applied`, `log_retention`: as for source_node.node.SourceNode. `home`: where the actor keeps
        its settings and message log when its database is not a file (PostgreSQL)."""
        beside = Path(db_path) if not is_dsn(db_path) else Path(home or ".") / source
        self._settings_path = Path(f"{beside}.settings.json")
        settings = {"warehouse_address": warehouse_address, "faults": {}}
        if _was_restarted() and self._settings_path.exists():
            settings = {**settings, **json.loads(self._settings_path.read_text())}
        self._settings = settings
        self._save_settings()
        self.node = SourceNode(Catalog.from_dict(catalog_dict), source, db_path, initial,
                               warehouse_address=settings["warehouse_address"],
                               faults=FaultInjector(**settings["faults"]), host=host, port=port, tls=tls,
                               engine=engine, probes=probes or (), message_log=source_log_path(beside),
                               prune_applied=prune_applied, log_retention=log_retention)
        self.node.start()

    def address(self) -> str:
        """The source's gRPC address, "127.0.0.1:<port>" (it may change when the actor restarts)."""
        return self.node.address

    def set_warehouse(self, address: str | None) -> None:
        """Where the sender delivers notifications (the warehouse's gRPC address)."""
        self.node.set_warehouse(address)
        self._settings["warehouse_address"] = address
        self._save_settings()

    def subscribe(self, name: str, address: str | None, relations: list[str] | None = None) -> None:
        """Another warehouse subscribes (source_node.node.SourceNode.subscribe), kept across restarts."""
        self.node.subscribe(name, address, relations)

    def unsubscribe(self, name: str) -> None:
        """Removes a subscriber and releases what was kept for it."""
        self.node.unsubscribe(name)

    def set_faults(self, **rates: float) -> dict:
        """Changes fault rates at run time (source_node.faults.FaultInjector.configure); returns those in force."""
        self.node.faults.configure(**rates)
        self._settings["faults"].update(rates)
        self._save_settings()
        return self.node.faults.rates()

    def health(self) -> dict:
        store = self.node.store
        behind = {name: len(store.unacknowledged(name)) for name in list(self.node.senders)}
        return {"source": store.source, "address": self.node.address, "dsv": store.dsv, "brv": store.brv,
                # what the slowest subscriber has not acknowledged, and each one's
                "unacknowledged": max(behind.values(), default=0), "subscribers": behind, "pid": os.getpid(),
                "message_log": str(self.node.messages.path) if self.node.messages.path else None}

    def stop(self) -> None:
        """Stops the node (server, sender, store); the actor itself stays until killed."""
        self.node.stop()

    def _save_settings(self) -> None:
        tmp = self._settings_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._settings))
        os.replace(tmp, self._settings_path)


def _was_restarted() -> bool:
    with warnings.catch_warnings():
        # Ray 2.60 reads its own deprecated RuntimeContext.actor_id here and warns about it.
        warnings.simplefilter("ignore", DeprecationWarning)
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


def start_source_actor(catalog: Catalog, source: str, db_path: str | os.PathLike,
                       initial: dict | None = None, warehouse_address: str | None = None, *,
                       host: str = "127.0.0.1", port: int = 0, tls: TlsFiles | None = None,
                       engine: str = DEFAULT_ENGINE, probes: list | None = None, home: str | os.PathLike | None = None,
                       prune_applied: bool = False, log_retention: int | None = None, **actor_options):
    """Creates the named actor for `source` (name = source, namespace "fedlab"); returns its handle.

    `actor_options` go to Ray's `.options` (a cluster deployment passes e.g. lifetime="detached",
    get_if_exists=True and a custom resource that pins the actor to the node with its volume).
    """
    location = str(db_path) if is_dsn(db_path) else str(Path(db_path).resolve())
    return SourceActor.options(name=source, namespace=NAMESPACE, **actor_options).remote(
        catalog.to_dict(), source, location, initial, warehouse_address, host, port, tls,
        engine, probes, str(Path(home).resolve()) if home is not None else None, prune_applied, log_retention)
