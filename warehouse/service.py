"""The live warehouse of one view: the pure maintenance core driven by gRPC, a few threads and the Delta store.

Its gRPC service is its view group's (warehouse.view_group: a process keeps one view or several,
one subscriber to the sources), which hands it what is meant for its view:
- Notify (a gRPC stream from each source): each batch of notifications is queued for the core
  and answered at once; the reply acknowledges, per source, every DSV that is durably stored in
  Delta, so a source keeps (and resends) anything the warehouse could still lose in a crash. It also says which DSVs reached
  this process (its receipts: received, perhaps not yet durable) in this incarnation (a random id
  per process), so that a source does not resend those on its short timer while they wait for the
  core or a batch commit, and resends them at once when the id changes.
- One core thread takes everything that arrived (notifications, answers, timer ticks, evaluated
  views) from one queue, in arrival order and in batches, and hands it to the maintenance core:
  no RPC waits for the core, and the core is never entered by two threads.
- A dispatcher per source (warehouse.dispatcher) sends the core's sub-queries, several tasks' at
  once in one batch (beyond the paper: fewer round trips) on the source's Query stream
  (warehouse.query_stream), and its resend requests; a copy the core sent again while the reply
  was on its way, and that reply answered, stays home (warehouse.dispatch_rules), one whose
  reply came back without its answer (lost) goes again at once, and a resend request asks only
  for what has still not arrived.
- A timer (warehouse.timer) hands the core the time when the core said it would next need it (a
  sub-query to send again, a gap to ask for: the algorithm's `next_timer`), or every `tick` for an
  algorithm that does not say; an idle warehouse's threads all sleep.
- A committer (warehouse.committer) writes what the core applied to Delta in batches: one journal
  append per batch holds the batch's net view delta and each transaction's own delta (its change
  log); the spacing of batches follows how long a commit takes, up to `batch_interval`.
- A compactor (warehouse.committer.Compactor) folds those deltas into the Delta view's base every
  `compact_interval` seconds (warehouse.store.delta_store: the view is merge-on-read).
- An evaluator (warehouse.evaluator) runs periodic recomputation's view evaluations (EvaluateView)
  as Spark jobs over the relations the core gathered, and hands the rows back (ViewEvaluated).
Each of those owns its lock and its thread; this module composes them with the core thread.
- With `salem`, each batch also holds the timed view delta rows propagated since the last one
  (ViewDeltaPropagated), tagged with this warehouse's epoch (restarts re-propagate from the view's
  point, and a reader takes only the newest epoch's rows), and Refresh may name a point in time
  (RefreshRequested): the view is rolled there, and the reply waits for the batch that holds it.
- For the Strobe family, which assumes FIFO channels, each source's notifications and answers
  reach the core in the order the source sent them (warehouse.fifo_order).
The core keeps the view in memory (partial self-maintenance reads it; ReadView serves it); Delta
is its durable copy. After a crash the warehouse restarts from Delta: the view, the version
state, and the notifications received but not yet applied; an aggregate or outer-join view's
state (its groups, the counts that say which padded rows are subsumed) is rebuilt from the join
restored.
The warehouse's message log (fedmodel.message_log, `messages.jsonl` in the history folder) gets a
line for every notification and answer received and every sub-query and resend request sent.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from fedlab.fedio.channels import MAX_MESSAGE_BYTES, TlsFiles, client_channel
from fedlab.fedio.message_log import MessageLog
from fedlab.fedio.metrics_endpoint import BucketCounts
from fedlab.fedmodel.aggregate_view import parse_query
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.change_history import ChangeHistory
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.message_log import WAREHOUSE_LOG, WAREHOUSE_NODE, notification_fields
from fedlab.fedmodel.terms_sql import maintained_sql
from fedlab.fedmodel.wire import pb, rpc
from fedlab.warehouse.core import registry
from fedlab.warehouse.core.aggregate_state import aggregate_of
from fedlab.warehouse.committer import Committer, Compactor
from fedlab.warehouse.core.batches import BatchLedger, Marks
from fedlab.warehouse.core.events import (
    Acknowledge,
    EvaluateView,
    NotificationArrived,
    RefreshRequested,
    RequestResend,
    SendSubquery,
    StateApplied,
    TimerFired,
    ViewDeltaPropagated,
    ViewQueried,
    ViewReady,
)
from fedlab.warehouse.core.ports import drive
from fedlab.warehouse.core.salem.propagate import SalemOptions
from fedlab.warehouse.core.salem.timeline import PointError
from fedlab.warehouse.dispatcher import Dispatcher, Peer
from fedlab.warehouse.evaluator import Evaluator
from fedlab.warehouse.fifo_order import FifoOrder
from fedlab.warehouse.incarnation import Incarnation
from fedlab.warehouse.lag import Lag
from fedlab.warehouse.settings import WarehouseSettings
from fedlab.warehouse.spark_session import started
from fedlab.warehouse.store.delta_store import AppliedTxn, DeltaViewStore, Restored, StoreError
from fedlab.warehouse.store.materialize import materialize
from fedlab.warehouse.timer import CoreTimer

log = logging.getLogger("fedlab.warehouse")
STALENESS_KEPT = 100_000   # the demo's staleness figure: its minute, not a long run's every transaction


@dataclass(frozen=True)
class Inbound:
    """One item of the core thread's inbox, taken in arrival order: core events from the timer,
    the evaluator or a refused resend ("event"); notifications and answers from a source
    ("arrived", which FIFO order may hold back); or the note that sub-queries left for a source
    ("query_sent", which FIFO order needs)."""

    kind: str
    source: str | None
    events: list
    query_done: bool = False   # the answers of a sub-query round trip (also a failed one: none)


def delta_dir(data_dir: str) -> str:
    """Where the warehouse whose data is under `data_dir` keeps its Delta tables (DeltaViewStore).
    Joined as text: pathlib would turn "s3a://bucket" into "s3a:/bucket"."""
    return str(data_dir).rstrip("/") + "/delta"


class Warehouse:
    def __init__(self, catalog: Catalog, view_sql: str, data_dir: str | Path, sources: dict[str, str],
                 spark, settings: WarehouseSettings = WarehouseSettings(), history_dir: str | Path | None = None,
                 tls: TlsFiles | None = None, hadoop: Callable[[str], str | None] | None = None,
                 incarnation: Incarnation | None = None):
        """`sources`: each source's address; `data_dir`: a directory or an object-store URI
        (s3a://...) for the Delta tables; `spark`: a SparkSession, or a Future of one still
        starting (warehouse.spark_session.start_beside: a restart restores from Delta without it,
        and its batches wait for it); `settings`: the algorithm and its settings, Delta's
        intervals (warehouse.settings); `history_dir`: where the plain-file history goes (default
        <data_dir>/history); `tls`: mutual TLS on its server and its channels to the sources;
        `hadoop`: the Hadoop settings by name that reach s3a:// before the session is up
        (warehouse.spark_session.hadoop_settings; default: the session's); `incarnation`: the
        process's, which every view of a view group shares (default: a process of its own)."""
        self.catalog = catalog
        self.tls = tls
        # The user's view; the algorithm maintains its join (itself, unless it is an aggregate view,
        # fedmodel.aggregate_view, or an outer-join one, fedmodel.outer_join_view: its terms' padded
        # rows), whose states Delta and the history keep, and reads see the user's view: the join's
        # rows, or an aggregate or outer-join view's kept from its deltas (self.aggregate_state,
        # warehouse.core.aggregate_state, outer_join_state).
        self.view = parse_query(view_sql, catalog)
        join = self.view.join
        self.settings = settings
        self.plugin = registry.get(settings.algorithm)   # an unknown name fails here, before anything starts
        registry.check_view(settings.algorithm, join, settings.core.access)   # and a view it cannot keep
        self.core_settings = settings.algorithm_settings(self.plugin.access(settings.core.access))
        self.salem = settings.core.salem or SalemOptions()
        self.sources = dict(sources)
        self.spark = spark
        self.data_dir = str(data_dir)
        self.epoch = 0                 # salem: which propagation of the view delta this process is
        self.store = DeltaViewStore(spark, delta_dir(self.data_dir), list(join.output_names),
                                    list(join.output_types), retention=settings.journal_retention, hadoop=hadoop)
        self.algorithm = None   # the algorithm (warehouse.core.algorithm.Algorithm), once opened
        self.fifo: FifoOrder | None = None   # per-source message order, for algorithms that assume it
        self.history = ChangeHistory(Path(history_dir) if history_dir is not None else Path(self.data_dir) / "history",
                                     list(join.output_names), settings.history_retention)
        self.aggregate_state = None   # an aggregate or outer-join view's rows, from the join's deltas (set by open)
        self.messages = MessageLog(self.history.folder / WAREHOUSE_LOG, WAREHOUSE_NODE, settings.history_retention)
        self.lock = threading.RLock()                 # the core and what it writes (applied, queues)
        self._edge = threading.Lock()                 # the batch ledger: Notify takes it without the core
        self._inbox: list[Inbound] = []               # what arrived, in order, for the core thread
        self._inbox_wake = threading.Condition(threading.Lock())
        # What the next Delta batch holds and what sources are told is durable (set by open).
        self.batches: BatchLedger | None = None
        self.incarnation = incarnation or Incarnation()
        self.seq = 0
        # (applied time, seconds since commit) of the latest STALENESS_KEPT applied transactions
        self.staleness: deque[tuple[float, float]] = deque(maxlen=STALENESS_KEPT)
        self.staleness_seconds = BucketCounts()   # every applied transaction's, for its metrics
        self.lag = Lag()                          # how far behind each source it is
        self.resyncs: list[str] = []
        peer = Peer(catalog, self.messages, settings.subscriber, self.incarnation, self.plugin.assumptions.fifo,
                    self._queue, self._missing)
        self.dispatchers = {s: Dispatcher(s, rpc.SourceStub(client_channel(a, tls, _channel_options())), peer)
                            for s, a in self.sources.items()}
        self._stop = threading.Event()
        self._readers: list[threading.Event] = []    # reads waiting for the core's ViewReady
        self.timer = CoreTimer(lambda: self._queue("event", None, [TimerFired(time.monotonic())]))
        self.evaluator = Evaluator(catalog, lambda: started(self.spark),
                                   lambda evaluated: self._queue("event", None, [evaluated]))
        self.committer = Committer(self.store, self.history, settings.batch_interval, self._ledger,
                                   self._version_state)
        self.compactor = Compactor(self.store, settings.compact_interval, lambda: self.batches.last_batch)
        self._core_thread = threading.Thread(target=self._core, name="core", daemon=True)

    # ---- start and stop ----

    def open(self) -> None:
        """Restores from Delta, or materialises the view from source snapshots the first time."""
        began = time.monotonic()
        try:
            restored = self.store.load()
        except StoreError:   # nothing durable yet: this is the first start
            self._materialise()
        else:
            self._restore(restored, began=began)
        self.committer.durable_through(self.seq)   # what was restored or materialised is in Delta
        with self._edge:   # what was restored, which a restore's own applies may not have named
            for source, dsv in self.algorithm.applied_dsv().items():
                self.lag.applied(source, dsv)
        # A source whose notifications failed while no warehouse answered retries on a timer that
        # backed off meanwhile (up to a minute): asking each for everything after what this one
        # holds brings what was committed in the outage now, not when those timers run out.
        with self.lock:
            for source in self.sources:
                self.request_resend(RequestResend(source, self.algorithm.received_through(source) + 1))
        if self.plugin.assumptions.fifo:
            self.fifo = FifoOrder({s: self.algorithm.received_through(s) for s in self.sources})

    def start(self) -> None:
        """Starts its threads; its gRPC service is the view group's (warehouse.view_group), which
        hands it the notifications and the reads meant for its view."""
        self._core_thread.start()
        for part in self._parts():
            part.start()

    def close(self, commit: bool = True) -> None:
        self._stop.set()
        with self._inbox_wake:
            self._inbox_wake.notify_all()
        self.compactor.stop(crash=not commit)   # a crash cancels a compaction rather than waiting
        for part in self._parts():
            if part is not self.compactor:
                part.stop()
        if self._core_thread.is_alive():
            self._core_thread.join(timeout=10)
        if commit and self.algorithm is not None:   # a warehouse that never opened holds nothing
            self.committer.commit_now()
        self.messages.close()

    def _parts(self) -> list:
        return [*self.dispatchers.values(), self.timer, self.committer, self.compactor, self.evaluator]

    def source_stub(self, source: str):
        """The Source stub `source`'s calls go through (it changes with set_source_address)."""
        return self.dispatchers[source].stub

    def set_source_address(self, source: str, address: str) -> None:
        """Sends `source`'s sub-queries and resend requests to `address` from now on (a restarted
        Ray actor serves on a new port); what failed at the old address the core retries."""
        if source not in self.sources:
            raise ModelError(f"unknown source {source!r}")
        with self.lock:
            self.sources[source] = address
        self.dispatchers[source].set_stub(rpc.SourceStub(client_channel(address, self.tls, _channel_options())))

    def _materialise(self) -> None:
        snapshots, brv, dsv = {}, {}, {}
        join = self.view.join
        read = {join.base_of(r) for r in join.relations}
        for source, dispatcher in self.dispatchers.items():
            # Only the relations the view reads (a source with none of them sends all, and its DSV).
            wanted = [r.name for r in self.catalog.relations_at(source) if r.name in read]
            for chunk in dispatcher.stub.Snapshot(pb.SnapshotRequest(relations=wanted), timeout=600):
                rel = self.catalog.relation(chunk.relation)
                rows = from_pb_rows(rel, chunk.rows)
                snapshots.setdefault(rel.name, (list(rel.columns), list(rel.types), []))[2].extend(rows)
                brv[rel.name], dsv[source] = chunk.brv, chunk.dsv
        for rel in self.catalog.relations:
            snapshots.setdefault(rel.name, (list(rel.columns), list(rel.types), []))
            brv.setdefault(rel.name, 1)
        # The Strobe family maintains the view widened with every relation's key; its
        # view_rows() are the join's again.
        maintained = materialize(started(self.spark), maintained_sql(self.plugin.maintained_view(join)), snapshots)
        self.algorithm = registry.create(self.plugin.name, join, maintained, brv, dsv, self.core_settings)
        self.batches = BatchLedger(dsv)
        rows = self.algorithm.view_rows()
        self.aggregate_state = aggregate_of(self.view, rows)
        # History first: a crash before the store is initialised materialises (and writes) again,
        # while a store without its initial view in the history could never be checked.
        self.history.write_initial(rows, dsv)
        self.store.initialize(rows, self._version_state())

    def _restore(self, restored: Restored, began: float) -> None:
        """Starts from what the store's last batch left (warehouse.store.delta_store.Restored): the
        algorithm restored on its view and version state, the notifications it does not reflect
        maintained again; logs how long the restore took since `began` (time.monotonic())."""
        try:
            self.algorithm = registry.restore(self.plugin.name, self.view.join, restored.view, restored.state,
                                              self.core_settings)
        except ValueError as err:
            raise RuntimeError(f"{err} (start a new run)") from None
        self.epoch = restored.state.get("salem", {}).get("view_delta", {}).get("epoch", 0) + 1
        self.seq = max(restored.last_seq, 0)
        self.aggregate_state = aggregate_of(self.view, restored.view)
        # A crash between a batch's Delta commit and its line here: the change log has it.
        written = self.history.last_seq()
        if written < restored.last_seq:
            self.history.append(self.store.read_change_log(after_seq=written))
        self.batches = BatchLedger(self.algorithm.applied_dsv(), restored.pending, restored.last_batch)
        for n in restored.pending:
            self._handle(NotificationArrived(n, time.monotonic()))
        log.info("restored from Delta: %d view rows, %d notifications to re-apply, in %.1f s",
                 len(restored.view), len(restored.pending), time.monotonic() - began)

    # ---- the core ----

    def _core(self) -> None:
        """The core thread: everything queued since it last looked, in arrival order (none while
        its view group holds it: warehouse.view_group.ViewGroup.pause)."""
        while not self._stop.is_set():
            self.incarnation.running.wait()
            with self._inbox_wake:
                while not self._inbox and not self._stop.is_set():
                    self._inbox_wake.wait()
                items, self._inbox = self._inbox, []
            with self.lock:
                for item in items:
                    self._take(item)
                self._arm_timer(fired=any(isinstance(e, TimerFired) for item in items for e in item.events))

    def _take(self, item: Inbound) -> None:
        if item.kind == "query_sent":
            self.fifo.query_sent(item.source)
            return
        events = item.events
        if item.kind == "arrived" and self.fifo is not None:
            events = self.fifo.arrived(item.source, events, item.query_done)
        for event in events:
            self._handle(event)

    def _queue(self, kind: str, source: str | None, events: list, query_done: bool = False) -> None:
        with self._inbox_wake:
            self._inbox.append(Inbound(kind, source, events, query_done))
            self._inbox_wake.notify()

    def _handle(self, event) -> None:
        with self.lock:
            drive(self.algorithm, event, self)

    # ---- the ports (warehouse.core.ports): the core's actions carried out live ----

    def send_subquery(self, action: SendSubquery) -> None:
        self.dispatchers[action.subquery.source].send(action.subquery)

    def request_resend(self, action: RequestResend) -> None:
        self.dispatchers[action.source].send(action)

    def acknowledge(self, action: Acknowledge) -> None:
        # The core no longer needs some DSVs it never received (a resynchronisation read past them).
        with self._edge:
            self.batches.read_past(action.source, action.dsv)
            self.lag.applied(action.source, action.dsv)

    def apply_state(self, action: StateApplied) -> None:
        self.seq += 1
        now = time.time()
        with self._edge:
            self.batches.apply(AppliedTxn(self.seq, action.source, action.dsv, action.txn_id, action.commit_time,
                                          now, dict(action.versions), list(action.delta.items())))
            self.lag.applied(action.source, action.dsv)
        self.committer.note_due()
        if self.aggregate_state is not None:
            self.aggregate_state.apply(action.delta)
        if action.commit_time:
            self.staleness.append((now, now - action.commit_time))
            self.staleness_seconds.observe(now - action.commit_time)

    def keep_view_delta(self, action: ViewDeltaPropagated) -> None:
        with self._edge:
            self.batches.keep_timed([(*row, self.epoch) for row in action.rows])
        self.committer.note_due()

    def view_ready(self, action: ViewReady) -> None:
        for reader in self._readers:
            reader.set()
        self._readers.clear()

    def evaluate_view(self, action: EvaluateView) -> None:
        self.evaluator.submit(action)   # a Spark job of seconds: not under the core's lock

    def record(self, trace: list[dict]) -> None:
        """The core's trace explains a simulated run; live, only its resynchronisations are kept
        (the status reports them): the rest, compensation steps with their rows, would grow by a
        compensation's rows per transaction."""
        for entry in trace:
            if entry["event"] == "resynchronise":
                self.resyncs.append(f"{entry['source']}: DSV {entry['missing_from']} is gone "
                                    f"(oldest {entry['oldest_available']}); the view is rebuilt from snapshots")
                log.warning("lost notification can no longer be resent: %s", self.resyncs[-1])

    def notify(self, notes: list, sizes: list[int]) -> dict[str, Marks]:
        """Queues `notes` (each `sizes` bytes on the wire, for the message log) for the core;
        returns, per source among them, what it is told (warehouse.core.batches.Marks): the highest
        DSV up to which every notification is durable in Delta, what has reached this process (its
        receipts; kept in memory until a batch commit makes it durable), and the DSV the view in
        Delta reflects (below it no sub-query asks as of an earlier version: fedmodel.as_of)."""
        for note, size in zip(notes, sizes):
            self.messages.record("notification", "received", note.source, bytes=size, **notification_fields(note))
        now = time.monotonic()
        by_source: dict[str, list] = {}
        with self._edge:
            for n in notes:
                if self.batches.receive(n):
                    self.committer.note_due()
                self.lag.heard(n.source, n.dsv, n.commit_time)
                by_source.setdefault(n.source, []).append(NotificationArrived(n, now))
            marks = {s: self.batches.marks(s) for s in by_source}
        for source, events in by_source.items():   # the core takes a source's batch at once
            self._queue("arrived", source, events)
        return marks

    def _missing(self, source: str, from_dsv: int, through_dsv: int | None) -> tuple[int, int | None] | None:
        """The span of `source`'s DSVs from `from_dsv` (through `through_dsv`) that have not reached
        this process, for a dispatcher's resend request (warehouse.core.batches)."""
        with self._edge:
            return self.batches.missing(source, from_dsv, through_dsv)

    # ---- the timer ----

    def _arm_timer(self, fired: bool = False) -> None:
        """After the core handled events (`fired`: a TimerFired among them): when the next timer
        is due. Called with the core's lock held."""
        next_timer = getattr(self.algorithm, "next_timer", None)
        self.timer.arm(next_timer() if next_timer is not None else time.monotonic() + self.settings.tick, fired)

    @contextmanager
    def _ledger(self):
        """The batch ledger for the committer, with the core's lock and its own: a batch's version
        state and what the ledger holds are of one moment."""
        with self.lock, self._edge:
            yield self.batches

    # ---- reading ----

    def _version_state(self) -> dict:
        state = self.algorithm.version_state()
        if "salem" in state:   # the epoch of the view delta rows this process writes
            state["salem"]["view_delta"]["epoch"] = self.epoch
        return state

    def view_rows(self) -> dict[tuple, int]:
        """The user's view now."""
        with self.lock:
            return self.aggregate_state.rows() if self.aggregate_state is not None else self.algorithm.view_rows()

    def refresh(self, durable: bool = False, timeout: float = 60.0, point: RefreshRequested | None = None) -> dict:
        """Brings the view up to date with every notification received (ViewQueried: lazy
        maintenance on demand, Zhou-Larson 3.5) and waits for it, or with `point` rolls salem's
        view to that point in time (PointError, with the reason, for one it cannot reach); with
        `durable`, also waits for the Delta batch that holds that state. Returns {"applied_dsv",
        "seq", "batch", "high_water"}; TimeoutError when it takes longer than `timeout` seconds."""
        deadline = time.monotonic() + timeout
        if point is not None:
            with self.lock:
                if not self.plugin.point_in_time:
                    raise PointError(f"point-in-time refresh needs an algorithm that keeps a timed view delta "
                                     f"(salem); this warehouse runs {self.plugin.name}")
                self._handle(point)
                self._arm_timer()
        else:
            ready = threading.Event()
            with self.lock:
                self._readers.append(ready)
                self._handle(ViewQueried(time.monotonic()))
                self._arm_timer()
            if not ready.wait(timeout):
                with self.lock:
                    if ready in self._readers:   # nobody waits for it any more
                        self._readers.remove(ready)
                raise TimeoutError(f"the view did not catch up with what was received within {timeout:g} s")
        with self.lock:
            seq, applied = self.seq, self.algorithm.applied_dsv()
        if durable and not self.committer.wait_durable(seq, deadline):
            raise TimeoutError(f"the refreshed view was not durable in Delta within {timeout:g} s")
        with self.lock:
            high_water = {s: v["high_water"] for s, v in self.algorithm.version_state()["sources"].items() if "high_water" in v}
            return {"applied_dsv": applied, "seq": seq, "batch": self.batches.last_batch, "high_water": high_water}

    def status(self) -> dict:
        """What the Status call and the metrics (warehouse.metrics) report, read together; "behind":
        per source, (versions, seconds) the view is behind it (warehouse.lag)."""
        now = time.time()
        with self.lock, self._edge:
            return {"algorithm": self.plugin.name, "applied": self.seq, "in_flight": self.algorithm.in_flight,
                    "applied_dsv": self.algorithm.applied_dsv(), "view_rows": len(self.algorithm.view_rows()),
                    "durable": {s: self.batches.acked(s) for s in self.sources},
                    "behind": {s: self.lag.behind(s, now) for s in self.sources},
                    "counters": self.algorithm.counters.as_dict(),
                    **{counter: sum(getattr(d.rules, counter) for d in self.dispatchers.values())
                       for counter in ("withheld", "withheld_resends", "resent_lost")},
                    **self.committer.health(),
                    "resynchronisations": list(self.resyncs)}


def from_pb_rows(rel, payload: bytes) -> list[tuple]:
    from fedlab.fedmodel.codec import decode_rows

    columns, rows = decode_rows(payload)
    if rows and [c.lower() for c in columns] != [c.lower() for c in rel.columns]:
        raise ModelError(f"snapshot of {rel.name}: columns {columns} do not match the catalog")
    return rows


def _channel_options():
    return [("grpc.max_send_message_length", MAX_MESSAGE_BYTES), ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
