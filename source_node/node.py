"""One source node in one process: its store, gRPC server, outbox sender and fault injector.

The Ray actor (source_node.actor) wraps one of these; tests and the embedded demo may also run
one directly:

    node = SourceNode(catalog, "ds1", "runs/x/ds1.sqlite", initial, warehouse_address="127.0.0.1:50051")
    node.start()            # binds 127.0.0.1 on a free port
    node.address            # "127.0.0.1:<port>"
    ...
    node.stop()

Its operator's calls (set_warehouse, subscribe, unsubscribe, set_faults, stop) also arrive as
calls of its gRPC server (source_node.control); with `run_settings`, what they set is kept for a
restart (source_node.run_settings). How it runs (engine, address, TLS, retention) is one
SourceSettings (source_node.settings).

It serves any number of warehouses, each a subscriber (source_node.subscriptions) with its own
sender: `set_warehouse` points the default subscriber's, `subscribe` adds another (or points
it elsewhere; a warehouse also subscribes itself through the Subscribe call), `unsubscribe`
removes one and releases what was kept for it. The others' addresses outlive the node
(source_node.subscriber_addresses): a node opening the same database sends to them again.

The store is SQLite unless its settings' `engine` says "duckdb" or "postgres" (source_node.engines; for
PostgreSQL `db_path` is a connection string). Its message log (fedmodel.message_log) is
`<db stem>.messages.jsonl` beside the database file unless `message_log` names another file
(runs/x/ds1.sqlite -> runs/x/ds1.messages.jsonl); a PostgreSQL source keeps one only there.
"""

from __future__ import annotations

import os
import threading
from typing import Sequence

from fedlab.fedio.message_log import MessageLog
from fedlab.fedio.metrics_endpoint import MetricsEndpoint, new_registry
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.message_log import source_log_path
from fedlab.source_node.engines import is_dsn, open_store
from fedlab.source_node.faults import FaultInjector
from fedlab.source_node.metrics import SourceCollector
from fedlab.source_node.run_settings import RunSettings
from fedlab.source_node.sender import NotificationSender, wake_all
from fedlab.source_node.server import SourceServicer, serve
from fedlab.source_node.settings import SourceSettings
from fedlab.source_node.subscriber_addresses import SubscriberAddresses, beside_message_log
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER


class SourceNode:
    def __init__(self, catalog: Catalog, source: str, db_path: str | os.PathLike,
                 initial: dict[str, list[tuple]] | None = None, *, settings: SourceSettings = SourceSettings(),
                 warehouse_address: str | None = None, faults: FaultInjector | None = None,
                 message_log: str | os.PathLike | None = None, run_settings: RunSettings | None = None):
        """Opens (or creates) the store at once, so that it can be inspected before `start`.
        `settings`: how it runs (source_node.settings: engine, address, TLS, retention, ...);
        `run_settings`: where the warehouse address and fault rates set at run time are kept."""
        self.catalog = catalog
        self.source = source
        self.host, self.port = settings.host, settings.port
        self.max_message_bytes = settings.max_message_bytes
        self.faults = faults or FaultInjector()
        self.tls = settings.tls
        self.store = open_store(catalog, source, db_path, settings.engine, initial, settings.log_retention,
                                settings.probes, settings.prune_applied, settings.log_keep_seconds,
                                settings.capture, settings.max_retained_wal)
        if message_log is None and not is_dsn(db_path):
            message_log = source_log_path(db_path)
        self.messages = MessageLog(message_log, source, settings.log_keep_seconds)
        self.resend_interval = settings.resend_interval
        self.senders: dict[str, NotificationSender] = {}   # by subscriber, shared with the servicer
        self._started = False
        self.addresses = SubscriberAddresses(beside_message_log(self.messages.path))
        if self.store.has_subscriber(DEFAULT_SUBSCRIBER):   # unless removed in an earlier life
            self._add_sender(DEFAULT_SUBSCRIBER, warehouse_address)
        for name, address in list(self.addresses.addresses.items()):   # the others, from an earlier life
            if self.store.has_subscriber(name):
                self._add_sender(name, address)
            else:   # a new database
                self.addresses.forget(name)
        self.store.watch(self.wake)   # transactions other clients commit (PostgreSQL)
        self._server = None
        self.metrics_port = settings.metrics_port
        self._metrics: MetricsEndpoint | None = None
        self.run_settings = run_settings
        self.stopped = threading.Event()   # set once `stop` has closed everything
        self._stopping = threading.Lock()

    def _add_sender(self, subscriber: str, address: str | None) -> None:
        sender = NotificationSender(self.store, self.catalog, self.faults, address,
                                    resend_interval=self.resend_interval, max_message_bytes=self.max_message_bytes,
                                    messages=self.messages, tls=self.tls, subscriber=subscriber)
        self.senders[subscriber] = sender
        if self._started:
            sender.start()

    def start(self) -> int:
        """Starts the sender, the gRPC server and, with a metrics port, the Prometheus endpoint
        (source_node.metrics); returns the port the gRPC server is bound to."""
        if self.metrics_port is not None:
            registry = new_registry()
            registry.register(SourceCollector(self))
            self._metrics = MetricsEndpoint.serve(registry, self.host, self.metrics_port)
            self.metrics_port = self._metrics.port
        servicer = SourceServicer(self.store, self.catalog, self.senders, self.faults, self, self.messages)
        self._server, self.port = serve(servicer, self.host, self.port, self.max_message_bytes, tls=self.tls)
        self._started = True
        for sender in list(self.senders.values()):
            sender.start()
        return self.port

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def set_warehouse(self, address: str | None) -> None:
        """Where the default subscriber's notifications go (subscribed again if it was removed)."""
        if DEFAULT_SUBSCRIBER in self.senders:
            self.senders[DEFAULT_SUBSCRIBER].set_warehouse(address)
        else:
            self.subscribe(DEFAULT_SUBSCRIBER, address)
        if self.run_settings is not None:
            self.run_settings.set_warehouse(address)

    def set_faults(self, **rates: float) -> dict:
        """Changes fault rates at run time (source_node.faults.FaultInjector.configure); returns those in force."""
        self.faults.configure(**rates)
        if self.run_settings is not None:
            self.run_settings.add_faults(rates)
        return self.faults.rates()

    def subscribe(self, name: str, address: str | None, relations: Sequence[str] | None = None) -> None:
        """The warehouse `name` subscribes, at `address`, reading `relations` (None: all), durably
        (source_node.subscriber_outbox.subscribe); one subscribed already is pointed at `address`
        and keeps what it had not acknowledged. ModelError (one line) for a relation not owned."""
        self.store.subscribe(name, relations)
        if name != DEFAULT_SUBSCRIBER:   # its operator names it at every start
            self.addresses.remember(name, address)
        if name in self.senders:
            self.senders[name].set_warehouse(address)
        else:
            self._add_sender(name, address)

    def unsubscribe(self, name: str) -> None:
        """Removes the subscriber `name`: its sender stops, what was kept for it is released."""
        sender = self.senders.pop(name, None)
        if sender is not None:
            sender.stop()
        self.store.unsubscribe(name)
        self.addresses.forget(name)

    def wake(self) -> None:
        """A transaction committed: every sender sends it now."""
        wake_all(self.senders)

    def stop(self, grace: float = 1.0) -> None:
        """Stops serving and sending, then closes the store (everything committed is in its file);
        a second call waits for the first."""
        with self._stopping:
            if not self.stopped.is_set():
                self._stop(grace)
                self.stopped.set()

    def _stop(self, grace: float) -> None:
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        for sender in list(self.senders.values()):
            sender.stop()
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        self.store.close()
        self.messages.close()

