"""One source node in one process: its store, gRPC server, outbox sender and fault injector.

The Ray actor (source_node.actor) wraps one of these; tests and the embedded demo may also run
one directly:

    node = SourceNode(catalog, "ds1", "runs/x/ds1.sqlite", initial, warehouse_address="127.0.0.1:50051")
    node.start()            # binds 127.0.0.1 on a free port
    node.address            # "127.0.0.1:<port>"
    ...
    node.stop()

The store is SQLite unless `engine` says "duckdb" or "postgres" (source_node.engines; for
PostgreSQL `db_path` is a connection string). Its message log (fedmodel.message_log) is
`<db stem>.messages.jsonl` beside the database file unless `message_log` names another file
(runs/x/ds1.sqlite -> runs/x/ds1.messages.jsonl); a PostgreSQL source keeps one only there.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

from fedio.channels import MAX_MESSAGE_BYTES, TlsFiles
from fedio.message_log import MessageLog
from fedmodel.catalog import Catalog
from fedmodel.message_log import source_log_path
from source_node.engines import DEFAULT_ENGINE, is_dsn, open_store
from source_node.faults import FaultInjector
from source_node.sender import NotificationSender
from source_node.server import SourceServicer, serve


class SourceNode:
    def __init__(self, catalog: Catalog, source: str, db_path: str | os.PathLike,
                 initial: dict[str, list[tuple]] | None = None, *, warehouse_address: str | None = None,
                 faults: FaultInjector | None = None, log_retention: int | None = None,
                 resend_interval: float = 2.0, max_message_bytes: int = MAX_MESSAGE_BYTES,
                 host: str = "127.0.0.1", port: int = 0, message_log: str | os.PathLike | None = None,
                 tls: TlsFiles | None = None, engine: str = DEFAULT_ENGINE,
                 probes: Iterable[tuple[str, Sequence[str]]] = (), prune_applied: bool = False):
        """Opens (or creates) the store at once, so that it can be inspected before `start`.
        With `tls`, its server and its channel to the warehouse use mutual TLS. `engine`: "sqlite",
        "duckdb" or "postgres"; `probes`: the column sets to index at once (source_node.probes);
        `prune_applied`: a PostgreSQL source empties its change tables as the warehouse applies them."""
        self.catalog = catalog
        self.source = source
        self.host, self.port = host, port
        self.max_message_bytes = max_message_bytes
        self.faults = faults or FaultInjector()
        self.tls = tls
        self.store = open_store(catalog, source, db_path, engine, initial, log_retention, probes, prune_applied)
        if message_log is None and not is_dsn(db_path):
            message_log = source_log_path(db_path)
        self.messages = MessageLog(message_log, source)
        self.sender = NotificationSender(self.store, catalog, self.faults, warehouse_address,
                                         resend_interval=resend_interval, max_message_bytes=max_message_bytes,
                                         messages=self.messages, tls=tls)
        self.store.watch(self.sender.wake)   # transactions other clients commit (PostgreSQL)
        self._server = None

    def start(self) -> int:
        """Starts the sender and the gRPC server; returns the port the server is bound to."""
        servicer = SourceServicer(self.store, self.catalog, self.sender, self.faults, self.messages)
        self._server, self.port = serve(servicer, self.host, self.port, self.max_message_bytes, tls=self.tls)
        self.sender.start()
        return self.port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def set_warehouse(self, address: str | None) -> None:
        self.sender.set_warehouse(address)

    def stop(self, grace: float = 1.0) -> None:
        """Stops serving and sending, then closes the store (everything committed is in its file)."""
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        self.sender.stop()
        self.store.close()
        self.messages.close()

