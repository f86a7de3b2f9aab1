"""The deterministic simulator: a scenario run through the maintenance core with in-process sources.

Time is simulated; nothing is random but what a `random` step draws from its own seed, and
each of its decisions is taken as the explicit step it amounts to (RandomSchedule), so that
`Run.steps`, every step taken, replays the same run as a file of explicit steps. The
warehouse is the same algorithm object the live service drives (warehouse.core.registry:
Sze-Ling's engine, a baseline or a plug-in), over the view it maintains; sources are in-memory stores
with the same contract as the DuckDB ones. Messages in flight (notifications, sub-queries,
answers, resend requests) sit in one list, oldest first, so that delivery, loss, duplication
and reordering are explicit steps. The simulator records a trace of every message and every
compensation step, and each view state the warehouse applied.

The warehouse keeps what the live one keeps in Delta (`Durable`): at each timer round, as the
live one at each batch commit, the view, its version state, the states applied since and every
notification received become durable, and only then are those notifications acknowledged to
their sources (before, a source only hears that they reached the core), by the live one's rules
(warehouse.core.batches). With the scenario's `fifo_repair`, an algorithm that assumes FIFO
channels takes each source's messages in the order the source sent them, through the live
warehouse's FifoOrder (a sub-query's round trip ends with its first answer or its loss). A warehouse restart
(`restart: {warehouse: true}`) loses everything else: the algorithm starts again from the
durable view and state (warehouse.core.registry.restore, as the live one restarts from Delta)
and takes the durable notifications it had not applied again; sub-queries and answers of the
lost process are gone, and the sources, whose calls failed, send everything unacknowledged again.
A run's states are the durable ones, as a live run's history is.

A step may carry its simulated time (`at`); a timed run (simulation.timed) decides each
step and its time from a clock and writes both, and the processes it models keep timers of their
own, so each part of a timer round is a step of its own too (`tick: batch`, `resends`, `core`).
Such a long run need not keep its trace and each state's view (`recording=False`): its states then
carry their versions only.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter, deque
from dataclasses import dataclass, field, replace

from fedlab.fedmodel.codec import encode_rows
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.subquery import Subquery
from fedlab.fedmodel.transactions import Modification, Notification, TransactionRequest
from fedlab.fedmodel.viewdef import ColumnRef
from fedlab.simulation.scenario import BATCH_FAILURES, Scenario, ScenarioError, Step, commit_step, parse_step
from fedlab.source_node.faults import KINDS as SOURCE_FAULTED
from fedlab.source_node.faults import FaultInjector
from fedlab.source_node.memory_store import MemoryStore
from fedlab.source_node.resend_policy import ResendPolicy
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER
from fedlab.warehouse.core import registry
from fedlab.warehouse.core.aggregate_state import user_view
from fedlab.warehouse.core.batches import Batch, BatchLedger
from fedlab.warehouse.core.events import (
    Acknowledge,
    AnswerArrived,
    EvaluateView,
    NotificationArrived,
    RefreshRequested,
    RequestResend,
    ResendRefused,
    SendSubquery,
    StateApplied,
    TimerFired,
    ViewDeltaPropagated,
    ViewEvaluated,
    ViewQueried,
    ViewReady,
)
from fedlab.warehouse.core.ports import drive
from fedlab.warehouse.core.recompute import recompute
from fedlab.warehouse.core.registry import Settings, not_reflected
from fedlab.warehouse.core.salem.timeline import PointError
from fedlab.warehouse.fifo_order import FifoOrder

QUIET_TIMERS = 6  # timer rounds with no progress before `run: all` gives up (e.g. a held source)


@dataclass
class Message:
    kind: str          # notification | subquery | answer | resend
    source: str
    payload: object

    @property
    def name(self) -> str:
        """What a deliver, drop or duplicate step names it by (scenario.MESSAGE_KINDS)."""
        if self.kind == "notification":
            return self.payload.txn_id
        return self.source if self.kind == "resend" else self.payload.id   # an answer's id is its sub-query's


class Flight:
    """The messages in flight, oldest first, found by kind and name (Message.name) without a
    scan: a long timed run holds thousands at once. Read and changed as a list is, by position
    or by the message itself."""

    def __init__(self):
        self._messages: dict[int, Message] = {}             # in the order they left
        self._named: dict[tuple[str, str], deque[int]] = {}  # (kind, name) -> their keys, oldest first
        self._next = itertools.count()
        self._key_of: dict[int, int] = {}                   # id(message) -> its key

    def append(self, msg: Message) -> None:
        key = next(self._next)
        self._messages[key] = msg
        self._key_of[id(msg)] = key
        self._named.setdefault((msg.kind, msg.name), deque()).append(key)

    def take(self, kind: str, name: str) -> Message | None:
        """The oldest message of that kind and name, out of the network (None if none is in flight)."""
        msg = self.oldest(kind, name)
        return self._drop(self._key_of[id(msg)]) if msg is not None else None

    def oldest(self, kind: str, name: str) -> Message | None:
        """The oldest message of that kind and name, left in flight (None if none is)."""
        keys = self._named.get((kind, name))
        return self._messages[keys[0]] if keys else None

    def count(self, kind: str, name: str) -> int:
        return len(self._named.get((kind, name), ()))

    def remove(self, msg: Message) -> None:
        self._drop(self._key_of[id(msg)])

    def pop(self, i: int = -1) -> Message:
        keys = list(self._messages)
        return self._drop(keys[i])

    def _drop(self, key: int) -> Message:
        msg = self._messages.pop(key)
        del self._key_of[id(msg)]
        keys = self._named[(msg.kind, msg.name)]
        keys.remove(key)
        if not keys:
            del self._named[(msg.kind, msg.name)]
        return msg

    def __getitem__(self, i: int) -> Message:
        return list(self._messages.values())[i]

    def __iter__(self):
        return iter(list(self._messages.values()))

    def __len__(self) -> int:
        return len(self._messages)

    def __bool__(self) -> bool:
        return bool(self._messages)


@dataclass
class Durable:
    """What the simulated warehouse has made durable (the live one's Delta tables)."""

    rows: dict            # the view
    state: dict           # its version state (the algorithm's version_state())
    notifications: dict = field(default_factory=dict)   # (source, DSV) -> every one received
    states: list = field(default_factory=list)          # the change log: every state applied
    last_batch: int = 0                                 # the id of the last batch committed


@dataclass
class Run:
    states: list = field(default_factory=list)
    trace: list = field(default_factory=list)
    counters: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)
    # Every step taken, as a file writes it (a `random` step's decisions in its place): as the
    # steps of a file with the same federation and view, it replays this run.
    steps: list = field(default_factory=list)


class _Untraced(list):
    """A run's trace that keeps nothing (Simulator's `recording=False`)."""

    def append(self, entry) -> None:
        pass

    def extend(self, entries) -> None:
        pass


class Simulator:
    def __init__(self, scenario: Scenario, algorithm: str | None = None, access: str | None = None,
                 sources: dict[str, MemoryStore] | None = None, subscriber: str = DEFAULT_SUBSCRIBER,
                 recording: bool = True):
        """A warehouse over `sources` (its own, from the scenario, if None), subscribed to each by
        the name `subscriber` (source_node.subscriptions), reading the view's relations only
        when it is not the default subscriber; a subscriber other than the default one subscribes
        now, so it must exist before the first commit (its view starts from the initial rows).
        `recording`: keep the trace and each state's view (False: each state's versions only)."""
        self.scenario = scenario
        self.recording = recording
        self.view = scenario.view
        catalog = scenario.catalog
        self.subscriber = subscriber
        self.sources = sources if sources is not None else {
            s: MemoryStore(catalog, s, {r.name: scenario.initial[r.name] for r in catalog.relations_at(s)},
                           scenario.log_retention.get(s))
            for s in catalog.sources}
        if subscriber != DEFAULT_SUBSCRIBER:
            for s, store in self.sources.items():
                store.subscribe(subscriber, self.view.join.relations_read_at(s))
        self.down = False   # the warehouse process is down: what its sources send it is lost
        self.algorithm_name = name = algorithm or scenario.algorithm
        plugin = registry.get(name)
        # The file's access path goes with the file's algorithm: one that reads whole relations
        # (recompute) takes none, and refuses only an access path asked for with it.
        self.access = access or (scenario.access if plugin.default_access is not None else None)
        join = self.view.join   # what the algorithm maintains (an aggregate view is kept from it)
        rows = recompute(join, scenario.initial)
        maintained = plugin.maintained_view(join)
        self.settings = Settings(access=self.access, force_queries=scenario.force_queries,
                                 global_transactions=scenario.global_transactions, period=scenario.period,
                                 deferral=scenario.deferral, salem=scenario.salem)
        self.algorithm = registry.create(name, join, rows if maintained is join else recompute(maintained, scenario.initial),
                                      {r.name: 1 for r in catalog.relations}, {s: 1 for s in catalog.sources},
                                      self.settings)
        self.now = 0.0
        self.incarnation = 1            # the warehouse process; a restart starts another
        self.durable = Durable(dict(rows), self.algorithm.version_state())
        # What the next batch holds and what sources are told is durable, as live.
        self.batches = BatchLedger({s: 1 for s in catalog.sources})
        self.batch_failure: str | None = None   # how the next batch's commit fails (fail_batch)
        # Each source's sender resends as the live one does (source_node.resend_policy), a timer
        # round being its short interval.
        self.policies = {s: ResendPolicy(self.algorithm.timeout) for s in self.sources}
        self.flight = Flight()
        self.held: dict[str, list[Subquery]] = {}
        self.queued_queries = False   # `queries: in-flight`: sub-queries, answers, resend requests travel too
        self.fifo_answers = False     # inside `run: all`, an answer does not overtake its source's messages
        # With the scenario's `fifo_repair`, an algorithm that assumes FIFO channels takes each
        # source's messages in the order it sent them, as the live warehouse (warehouse.fifo_order).
        self.fifo_repair = scenario.fifo_repair and plugin.assumptions.fifo
        self.fifo: FifoOrder | None = None
        self.round_trips: Counter = Counter()   # sub-query id -> copies sent whose round trip is not over
        self.asked: dict[str, Subquery] = {}    # sub-queries sent whose answer has not arrived (`again`)
        self.inbox: list | None = None          # arrived during the core's turn, not yet taken (as live: the inbox)
        self._start_fifo_order()
        self.run = Run() if recording else Run(trace=_Untraced())
        self.committed: dict[str, list[Notification]] = {s: [] for s in self.sources}  # for the checker
        # Every transaction id committed, and those of the file's commit steps (transaction_ids).
        self.txn_ids = {s.args["request"].txn_id for s in scenario.steps if s.kind == "commit"}
        self.current = user_view(self.view, rows)   # the view state by state, kept from the applied deltas

    # ---- the script ----

    def execute(self) -> Run:
        for step in self.scenario.steps:
            self.now = self._time_of(step)
            self._step(step)
        self.batch_failure = None   # the run ends with what it applied durable: a commit that succeeds
        self.commit_batch()
        return self.run

    def _time_of(self, step: Step) -> float:
        """When `step` is taken: at its `at`, or one unit after the last step."""
        if step.at is None:
            return self.now + 1
        if step.at < self.now:
            raise ScenarioError(f"{step.where}: at {step.at:g} is before the simulated time {self.now:g}")
        return step.at

    def _step(self, step: Step) -> None:
        a = step.args
        if step.kind != "random":   # a random step's decisions are recorded as they are taken
            self.run.steps.append(step.doc)
        if step.kind == "commit":
            self.commit(a["source"], a["request"], step.where)
        elif step.kind == "queries":
            self.queued_queries = a["in_flight"]
        elif step.kind == "receive":
            self.receive(a["name"], step)
        elif step.kind in ("deliver", "drop", "duplicate"):
            msg = self._take(a["message"], a["name"], step)
            if step.kind == "drop":
                self._lost(msg)
            else:
                for _ in range(2 if step.kind == "duplicate" else 1):
                    self._deliver(msg)
        elif step.kind == "hold":
            self.held.setdefault(a["source"], [])
        elif step.kind == "answer":
            queue = self.held.get(a["source"])
            if not queue:
                raise ScenarioError(f"{step.where}: no sub-query to {a['source']} is waiting")
            self._handle_all(self._answer_now(queue.pop(0)))
        elif step.kind == "release":
            for sq in self.held.pop(a["source"], []):
                self._handle_all(self._answer_now(sq))
        elif step.kind == "expect_view":
            got = self.view_rows()
            if sorted(got, key=repr) != sorted(a["rows"], key=repr):
                self.run.failures.append({"where": step.where, "expected": sorted(a["rows"], key=repr),
                                          "got": sorted(got, key=repr)})
        elif step.kind == "run":
            self.run_all()
        elif step.kind == "random":
            self.random_steps(**a)
        elif step.kind == "restart" and a.get("warehouse"):
            self.restart_warehouse(mid_batch=a["warehouse"] == "mid-batch")
        elif step.kind == "restart":
            self.restart(a["source"])
        elif step.kind == "read":
            self._handle(ViewQueried(self.now))
        elif step.kind == "tick":
            {"timers": self._fire_timers, "batch": self.commit_batch, "resends": self._send_overdue,
             "core": self._fire_core_timer}[a["fires"]]()
        elif step.kind == "fail_batch":
            self.batch_failure = a["failure"]
        elif step.kind == "refresh":
            self.refresh(RefreshRequested(a.get("as_of"), a.get("vector"), self.now))
        elif step.kind == "again":
            self.send_again(a["name"], step)
        elif step.kind == "narrow":
            self.narrow(a["source"], a["from"], a["to"], step)

    def refresh(self, request: RefreshRequested) -> None:
        """Salem's point-in-time refresh; a point it cannot reach is traced with its reason."""
        try:
            self._handle(request)
        except PointError as err:
            self.run.trace.append({"t": self.now, "event": "refresh-refused", "reason": str(err)})

    def commit(self, source: str, request: TransactionRequest, where: str = "commit") -> Notification:
        try:
            n = self.sources[source].commit(request, commit_time=self.now)
        except ModelError as err:
            raise ScenarioError(f"{where}: {err}") from None
        self.notified(source, n)
        return n

    def notified(self, source: str, n: Notification) -> None:
        """`n` committed at `source` (by this simulator or another warehouse's of the same
        sources): the source's sender sends this warehouse its subscriber's copy."""
        self.committed[source].append(n)
        self.txn_ids.add(n.txn_id)
        self.run.trace.append({"t": self.now, "event": "commit", "source": source, "dsv": n.dsv, "txn": n.txn_id})
        # Resends wait for a timer round: simulated steps are far shorter than a resend interval.
        self.policies[source].left(n.dsv, self.now)
        self._send(Message("notification", source, self.sources[source].as_seen_by(self.subscriber, n)))

    def receive(self, txn: str, step: Step) -> None:
        """A copy of `txn`'s notification reached the warehouse's process, before its core takes
        it (a `deliver` then hands it over): it is kept for the next batch, and its source hears
        what reached the process, as a live Notify reply tells it (warehouse.core.batches.Marks)."""
        msg = self.flight.oldest("notification", txn)
        if msg is None:
            raise ScenarioError(f"{step.where}: the notification of {txn} is not in flight")
        self.batches.receive(msg.payload)
        reached = self.batches.reached(msg.source)
        self.policies[msg.source].heard(self._incarnation, reached.dsv, reached.beyond, now=self.now)

    def _take(self, kind: str, name: str, step: Step) -> Message:
        """The oldest message in flight of that kind and name (Message.name), out of the network."""
        msg = self.flight.take(kind, name)
        if msg is not None:
            return msg
        described = {"notification": "the notification of", "subquery": "sub-query", "answer": "an answer to",
                     "resend": "a resend request to"}[kind]
        raise ScenarioError(f"{step.where}: {described} {name} is not in flight")

    # ---- running to quiescence ----

    def run_all(self) -> None:
        """Delivers everything in flight, oldest first; fires timers when nothing else can move."""
        self.fifo_answers = True
        try:
            self._run_all()
        finally:
            self.fifo_answers = False

    def _run_all(self) -> None:
        quiet = 0
        while quiet < QUIET_TIMERS:
            if self.flight:
                self._deliver(self.flight.pop(0))
                quiet = 0
                continue
            if self._settled():
                return
            before = len(self.run.states)
            self._fire_timers()
            quiet = 0 if len(self.run.states) > before else quiet + 1

    def _settled(self) -> bool:
        """Nothing in flight at the warehouse or held, and every notification a source still
        waits to have acknowledged has reached the warehouse (one above a gap that can no longer
        close stays unacknowledged)."""
        return (not self.algorithm.in_flight and not self.held
                and all(self.policies[s].held(n.dsv) for s, src in self.sources.items() for n in src.unacknowledged(self.subscriber)))

    def _fire_timers(self) -> None:
        self.commit_batch()
        self.now += self.algorithm.timeout
        for source, store in self.sources.items():
            for n in self.policies[source].due(store.unacknowledged(self.subscriber), self.now):
                self._send(Message("notification", source, n), resend=True)
        self._handle(TimerFired(self.now))

    def _send_overdue(self) -> None:
        """Each source's sender sends again what its resend policy says is overdue now (not the
        whole timer round: the timed mode's senders keep their own timers)."""
        for source, store in self.sources.items():
            policy = self.policies[source]
            due = policy.next_due()
            if due is not None and due > self.now:
                continue
            for n in policy.overdue(store.unacknowledged(self.subscriber), self.now):
                self._send(Message("notification", source, n), resend=True)

    def _fire_core_timer(self) -> None:
        """The warehouse's timer alone: the core is handed the time."""
        self._handle(TimerFired(self.now))

    def random_steps(self, steps: int, **schedule) -> None:
        """`steps` seeded random steps (`schedule`: RandomSchedule's arguments), each taken as the
        explicit step it decides, between `queries: in-flight` (at this step's own time) and
        `queries: at-once`, and each a unit of simulated time as a file's steps are: so Run.steps,
        which records them, replays this run. A drawn transaction the source would refuse is no
        step."""
        decide = RandomSchedule(self, **schedule)
        self._take_step({"queries": "in-flight"})
        for _ in range(steps):
            step = decide.next_step()
            if step is not None:
                self.now += 1
                self._take_step(step)
        self.now += 1
        self._take_step({"queries": "at-once"})

    def _take_step(self, doc: dict) -> None:
        """A step decided while running, read as a file's are (what is recorded is what replays)."""
        self._step(parse_step(self.scenario, doc, self.transaction_ids(), "random"))

    def take_step(self, doc: dict, where: str = "timed") -> None:
        """A step decided while running, at its time (`at`: a timed run's), recorded as taken."""
        step = parse_step(self.scenario, doc, self.transaction_ids(), where)
        self.now = self._time_of(step)
        self._step(step)

    def transaction_ids(self) -> set[str]:
        """The ids of the transactions committed so far and of the file's commit steps (the set
        itself: a commit step parsed against it adds its own)."""
        return self.txn_ids

    def restart(self, source: str) -> None:
        """The source's process restarts from its durable state (docs/architecture.md 4.5: its relations,
        versions and outbox survive). Answers it sent that are still in flight are lost with their
        connections, sub-queries it held unanswered are lost (and a hold ends), and its sender
        resends every notification the warehouse has not acknowledged (some may be in flight too)."""
        self.run.trace.append({"t": self.now, "event": "restart", "source": source})
        self.run.counters["restarts"] += 1
        for msg in [m for m in self.flight if m.kind == "answer" and m.source == source]:
            self.flight.remove(msg)
            self._lost(msg)
        for sq in self.held.pop(source, []):
            self._lost(Message("subquery", source, sq))
        self.sources[source].reopen()
        self.policies[source] = ResendPolicy(self.algorithm.timeout)   # a new process: a new sender
        for n in self.policies[source].due(self.sources[source].unacknowledged(self.subscriber), self.now):
            self._send(Message("notification", source, n), resend=True)

    def commit_batch(self) -> None:
        """What the live warehouse's batch commit does, by the same rules (warehouse.core.batches):
        the view, its version state, the states applied since and the notifications received
        that it does not reflect become durable (one Delta commit), the states are added to the
        run's history, and the sources hear what is durable."""
        batch = self.batches.take(self.algorithm.version_state())
        if batch is not None:
            failure, self.batch_failure = self.batch_failure, None
            if failure != "refused":
                self._make_durable(batch)
            if failure is None:
                self.batches.committed(batch)
            else:   # the live warehouse reads its store back: does it hold the batch?
                counted = self.batches.failed(batch, self.durable.last_batch)
                self.run.trace.append({"t": self.now, "event": "batch-failed", "batch": batch.id,
                                       "failure": failure, "counted_committed": counted})
                self.run.counters["batch_failures"] += 1
        self.run.states += self.durable.states[len(self.run.states):]
        for source, store in self.sources.items():
            store.acknowledge(self.batches.acked(source), self.subscriber)
            # The view in Delta reflects this far: no answer will be asked for below it.
            store.applied_through(self.batches.view_dsv(source), self.subscriber)

    def _make_durable(self, batch: Batch) -> None:
        """The batch's Delta commit, which is atomic: all of it is durable, or none."""
        self.durable.states += batch.applied
        self.durable.state = batch.state
        self.durable.notifications.update(((n.source, n.dsv), n) for n in batch.notifications)
        self.durable.rows = self.algorithm.view_rows()   # a copy of the core's
        self.durable.last_batch = batch.id

    def restart_warehouse(self, mid_batch: bool = False) -> None:
        """The warehouse's process crashes and starts again from its durable store (see the
        module docstring); `mid_batch`: it crashes between a batch's Delta commit and the rest
        (the history's lines, the acknowledgements): the history takes the missing states from
        the change log at the next batch, as the live warehouse does when it restarts."""
        if mid_batch and (batch := self.batches.take(self.algorithm.version_state())) is not None:
            self._make_durable(batch)
        self.run.trace.append({"t": self.now, "event": "restart", "source": "warehouse",
                               "mid_batch": mid_batch})
        self.run.counters["warehouse_restarts"] += 1
        try:
            self.algorithm = registry.restore(self.algorithm_name, self.view.join, dict(self.durable.rows), self.durable.state,
                                           self.settings)
        except ValueError as err:
            raise ScenarioError(f"restart: {err}") from None
        self.incarnation += 1
        applied = self.algorithm.applied_dsv()
        pending = not_reflected(self.durable.notifications.values(), self.durable.state)
        self.batches = BatchLedger(applied, pending, self.durable.last_batch)
        self.current = user_view(self.view, self.durable.rows)
        for msg in [m for m in self.flight if m.kind in ("subquery", "answer", "resend")]:
            self.flight.remove(msg)
            self._log("drop", msg)
        for queue in self.held.values():
            queue.clear()
        self.asked.clear()   # the new process's dispatchers know none of them
        for policy in self.policies.values():
            policy.forget()   # their calls to the lost process failed: all unacknowledged goes again
        self.fifo = None   # as live, the durable notifications go to the algorithm before FIFO order starts
        self._handle_all([NotificationArrived(n, self.now) for n in pending])
        self._start_fifo_order()

    # ---- message flow ----

    def _send(self, msg: Message, resend: bool = False) -> None:
        self.run.counters["messages"] += 1
        if msg.kind == "notification":
            for c in msg.payload.changes:
                self._count_rows(c.relation, (*c.inserted, *c.deleted, *(x for m in c.modified for x in (m.old, m.new))))
            if resend:
                self.run.counters["notification_resends"] += 1
            if self.down:
                self._lost(msg)
                return
        self._in_flight(msg)

    def _in_flight(self, msg: Message) -> None:
        """`msg` leaves for its destination: it is in flight until a step takes it."""
        self.flight.append(msg)

    def _deliver(self, msg: Message) -> None:
        self._log("deliver", msg)
        if msg.kind == "notification":
            self.batches.receive(msg.payload)   # durable at the next batch
            self._handle_all(self._arrived(msg.source, [NotificationArrived(msg.payload, self.now)]))
        elif msg.kind == "subquery":
            self._handle_all(self._query_arrives(msg.payload))
        elif msg.kind == "answer":
            self.asked.pop(msg.payload.id, None)
            self._handle_all(self._arrived(msg.source, [AnswerArrived(msg.payload, self.now)],
                                           self._round_trip_over(msg.payload.id)))
        elif msg.kind == "resend":
            store = self.sources[msg.source]
            if msg.payload[0] < store.oldest_available():
                self._handle(ResendRefused(msg.source, msg.payload[0], store.oldest_available(), self.now))
            asked = store.notifications_from(*msg.payload, subscriber=self.subscriber)
            for n in self.policies[msg.source].asked(asked, self._incarnation, self.now):
                self._send(Message("notification", msg.source, n), resend=True)

    def _query_arrives(self, sq: Subquery) -> list:
        """A sub-query reaches its source: queued while the source is held, else answered."""
        if sq.source in self.held:
            self.held[sq.source].append(sq)
            return []
        return self._answer_now(sq)

    def _answer_now(self, sq: Subquery) -> list:
        """The source answers at its current state; returns the warehouse event, if it is immediate."""
        answer = replace(self.sources[sq.source].answer(sq), read_time=self.now)   # the source's clock is the run's
        self.run.counters["messages"] += 1
        for ra in answer.relations:
            self._count_rows(ra.relation, ra.rows)
        if self.recording:
            self.run.trace.append({"t": self.now, "event": "answer", "source": sq.source, "subquery": sq.id,
                                   "dsv": answer.dsv,
                                   "relations": {ra.relation: {"queried_version": ra.brv, "rows": [list(r) for r in ra.rows]}
                                                 for ra in answer.relations}})
        # Per-source FIFO (the Strobe paper's section 3.3): an answer does not overtake a
        # notification (or answer) its source sent earlier and the network still carries.
        if self.queued_queries or (self.fifo_answers and any(
                m.source == sq.source and m.kind in ("notification", "answer") for m in self.flight)):
            self._in_flight(Message("answer", sq.source, answer))
            return []
        self.asked.pop(sq.id, None)
        return self._arrived(sq.source, [AnswerArrived(answer, self.now)], self._round_trip_over(sq.id))

    # ---- per-source FIFO processing (warehouse.fifo_order), for the algorithms that assume it ----

    def _start_fifo_order(self) -> None:
        """The warehouse process's FIFO order starts from what the algorithm has received, with
        no round trip under way (the live warehouse's open)."""
        self.round_trips.clear()
        if self.fifo_repair:
            self.fifo = FifoOrder({s: self.algorithm.received_through(s) for s in self.sources})

    def _arrived(self, source: str, events: list, query_done: bool = False) -> list:
        """What of the arrived `events` the algorithm may take now (all of them, without FIFO repair).
        With FIFO repair, what arrives while the core is still taking earlier released events goes
        after them, as it does live through the warehouse's inbox: an answer read after
        notification d was released must not reach the core before d does."""
        if self.fifo is None:
            return events
        released = self.fifo.arrived(source, events, query_done)
        if self.inbox is None:
            return released
        self.inbox.extend(released)   # an answer returned to the core's turn (_answer_now) goes after it
        return []

    def _round_trip_over(self, subquery_id: str) -> bool:
        """A copy of the sub-query's answer arrived, or the sub-query or its answer was lost: one of
        its round trips is over (a duplicated copy ends none: its round trip ended with the first)."""
        if not self.round_trips[subquery_id]:
            return False
        self.round_trips[subquery_id] -= 1
        return True

    def _lost(self, msg: Message) -> None:
        """`msg` is gone: a lost sub-query or answer ends its round trip, as a failed Query RPC does live."""
        self._log("drop", msg)
        if msg.kind in ("subquery", "answer") and self._round_trip_over(msg.payload.id):
            self._handle_all(self._arrived(msg.source, [], query_done=True))

    def _handle_all(self, events: list) -> None:
        """Hands `events` to the core one at a time, as the live warehouse's inbox does: what
        arrives while the core is taking an event (a resent notification delivered from one of its
        actions) waits until that turn is over."""
        if self.inbox is not None:   # reached from inside the core's turn: after what it is taking
            self.inbox.extend(events)
            return
        self.inbox = list(events)
        try:
            while self.inbox:
                self._handle(self.inbox.pop(0))
        finally:
            self.inbox = None

    def _handle(self, event) -> None:
        drive(self.algorithm, event, self)

    # ---- the ports (warehouse.core.ports): the core's actions carried out in simulation ----

    def send_subquery(self, action: SendSubquery) -> list:
        sq = action.subquery
        self.asked[sq.id] = sq
        self.run.trace.append({"t": self.now, "event": "subquery", "id": sq.id, "source": sq.source,
                               "relations": list(sq.relation_names), "probe": [list(p) for p in sq.probe],
                               "for": action.serves})
        return self._send_subquery(sq)

    def send_again(self, subquery_id: str, step: Step) -> None:
        """The dispatcher sends a sub-query again whose batch's reply lacked its answer
        (warehouse.dispatch_rules): a copy of the core's, now rather than at the core's timer."""
        sq = self.asked.get(subquery_id)
        if sq is None:
            raise ScenarioError(f"{step.where}: sub-query {subquery_id} was not sent, or its answer has arrived")
        self.run.trace.append({"t": self.now, "event": "subquery-again", "id": sq.id, "source": sq.source})
        self._handle_all(self._send_subquery(sq))

    def _send_subquery(self, sq: Subquery) -> list:
        if self.fifo is not None:
            self.fifo.query_sent(sq.source)
            self.round_trips[sq.id] += 1
        self.run.counters["subqueries"] += 1
        self.run.counters["messages"] += 1
        self._count_rows(None, sq.probe)
        if self.queued_queries:
            self._in_flight(Message("subquery", sq.source, sq))
            return []
        return self._query_arrives(sq)

    def narrow(self, source: str, asked: tuple, to: tuple, step: Step) -> None:
        """The dispatcher narrows a resend request to `source` still in flight, asking for
        `asked`, to the DSVs that have still not arrived, `to` (warehouse.dispatch_rules)."""
        msg = next((m for m in self.flight if m.kind == "resend" and m.source == source and m.payload == asked), None)
        if msg is None:
            raise ScenarioError(f"{step.where}: no resend request to {source} for {list(asked)} is in flight")
        msg.payload = to
        self.run.trace.append({"t": self.now, "event": "resend-narrowed", "source": source,
                               "from": list(asked), "to": list(to)})

    def request_resend(self, action: RequestResend) -> None:
        self.run.counters["resends"] += 1
        self.run.counters["messages"] += 1
        self.run.trace.append({"t": self.now, "event": "resend-request", "source": action.source,
                               "from_dsv": action.from_dsv, "through_dsv": action.through_dsv})
        msg = Message("resend", action.source, (action.from_dsv, action.through_dsv))
        if self.queued_queries:
            self._in_flight(msg)
        else:
            self._deliver(msg)

    def acknowledge(self, action: Acknowledge) -> None:
        # Reached the core; acknowledged (the outbox entry dropped) once durable: commit_batch.
        self.batches.read_past(action.source, action.dsv)
        self.policies[action.source].heard(self._incarnation, action.dsv, action.beyond, now=self.now)

    def apply_state(self, action: StateApplied) -> None:
        state = {"transaction": action.txn_id, "source": action.source, "dsv": action.dsv, "versions": action.versions}
        if self.recording:
            self.current.apply(action.delta)
            state["view"] = self.current.rows()
            self.run.trace.append({"t": self.now, "event": "apply", "txn": action.txn_id,
                                   "versions": action.versions, "view": _rows(self.view, state["view"])})
        self.batches.apply(state)

    def view_ready(self, action: ViewReady) -> None:
        if self.recording:
            self.run.trace.append({"t": self.now, "event": "read", "view": _rows(self.view, self.current.rows())})

    def evaluate_view(self, action: EvaluateView) -> list:
        # Periodic recomputation's and resynchronisation's job: the live warehouse runs it in
        # Spark; here it is the core's own evaluation, done at once (simulated time does not move).
        self.run.counters["view_evaluations"] += 1
        return [ViewEvaluated(action.round, recompute(action.view, action.relations), self.now)]

    def keep_view_delta(self, action: ViewDeltaPropagated) -> None:
        """Salem's view delta lives in the core (which counts its rows); only the live warehouse
        also keeps it durable, in Delta, for Spark readers."""

    def record(self, trace: list[dict]) -> None:
        self.run.trace.extend({"t": self.now, **entry} for entry in trace)

    def _log(self, what: str, msg: Message) -> None:
        label = msg.payload.txn_id if msg.kind == "notification" else getattr(msg.payload, "id", msg.payload)
        self.run.trace.append({"t": self.now, "event": what, "kind": msg.kind, "source": msg.source, "what": label})

    def _count_rows(self, relation: str | None, rows) -> None:
        rows = list(rows)
        self.run.counters["rows_transferred"] += len(rows)
        if rows and relation is not None:
            rel = self.scenario.catalog.relation(relation)
            if all(len(r) == len(rel.columns) for r in rows):
                self.run.counters["bytes_transferred"] += len(encode_rows(rel.columns, rel.types, rows))
                return
        self.run.counters["bytes_transferred"] += sum(len(repr(r)) for r in rows)

    @property
    def _incarnation(self) -> str:
        """The warehouse process the sources hear from (source_node.resend_policy)."""
        return f"simulated warehouse #{self.incarnation}"

    # ---- results ----

    def final_view(self) -> dict[tuple, int]:
        """The user's view over the core's view now (row -> multiplicity)."""
        return user_view(self.view, self.algorithm.view_rows()).rows()

    def view_rows(self) -> list[tuple]:
        return _rows(self.view, self.final_view())

    def history(self) -> dict[str, list[Notification]]:
        """Every committed transaction per source, in DSV order (sources' logs may be truncated)."""
        return {s: list(notes) for s, notes in self.committed.items()}


def _rows(view, counts: dict) -> list[tuple]:
    """View rows as the scenario format writes them: values, then the count when the view has one."""
    out = []
    for row, count in sorted(counts.items(), key=repr):
        if view.has_count:
            out.append((*row, count))
        else:
            out.extend([row] * count)
    return out


class RandomSchedule:
    """The decisions of a `random` step, each as the explicit step it amounts to (docs/scenarios.md).

    Which message leaves the network next is the schedule's draw (live, each copy's delay decides
    it). Whether a notification or an answer is lost or arrives twice is its source's decision,
    as live: a FaultInjector per source (source_node.faults), seeded with the schedule's seed and
    the source's name, at the schedule's drop and duplicate rates. Sub-queries and resend requests
    go from the warehouse, which injects no faults; the network can still lose or repeat them (a
    cut connection, a retried call), and only such faults exercise the warehouse's recovery
    (sub-queries sent again, gaps asked for again), so the schedule decides them itself, at the
    same rates and by the injector's rule (a duplicate is a message not lost that arrives twice).
    """

    def __init__(self, sim: Simulator, *, seed: int, drop: float, reorder: float, duplicate: float,
                 commit_rate: float, restart: float, warehouse_restart: float, batch_failure: float,
                 transactions: str):
        """Every rate as a parsed `random` step names it (simulation.scenario.RANDOM_RATES
        holds their defaults, in one place)."""
        self.sim = sim
        self.rng = random.Random(seed)
        self.workload = RandomTransactions(sim.scenario, self.rng, single_update=transactions == "single-update")
        self.faults = {s: FaultInjector(f"{seed}:{s}", drop=drop, duplicate=duplicate) for s in sim.sources}
        self.drop, self.reorder, self.duplicate, self.commit_rate = drop, reorder, duplicate, commit_rate
        self.restart, self.warehouse_restart, self.batch_failure = restart, warehouse_restart, batch_failure

    def next_step(self) -> dict | None:
        """The next step; None when the drawn transaction is one its source would refuse."""
        rng, sim = self.rng, self.sim
        # Drawn only when asked for, so that schedules without restarts stay as they were.
        if self.restart and rng.random() < self.restart:
            return {"restart": {"source": rng.choice(sorted(sim.sources))}}
        if self.warehouse_restart and rng.random() < self.warehouse_restart:
            return {"restart": {"warehouse": "mid-batch" if rng.random() < 0.5 else True}}
        if self.batch_failure and rng.random() < self.batch_failure:
            return {"fail_batch": rng.choice(BATCH_FAILURES)}
        if rng.random() < self.commit_rate:
            return self._commit(rng.choice(sorted(sim.sources)))
        if not sim.flight:
            return {"tick": "timers"}
        msg = sim.flight[rng.randrange(len(sim.flight)) if rng.random() < self.reorder else 0]
        return {("drop", "deliver", "duplicate")[self._copies(msg)]: {msg.kind: msg.name}}

    def _commit(self, source: str) -> dict | None:
        """A random transaction at `source`, named r1, r2, ... past the ids the run already has."""
        request = self.workload.transaction(self.sim.sources[source])
        if request is None:
            return None
        taken = self.sim.transaction_ids()
        txn = next(t for t in (f"r{n}" for n in itertools.count(1)) if t not in taken)
        return commit_step(source, replace(request, txn_id=txn))

    def _copies(self, msg: Message) -> int:
        """How many copies of `msg` arrive: 0 (lost), 1, or 2 (duplicated)."""
        if msg.kind in SOURCE_FAULTED:
            return len(self.faults[msg.source].decide(msg.kind))
        return 0 if self.rng.random() < self.drop else 2 if self.rng.random() < self.duplicate else 1


class RandomTransactions:
    """Random valid transactions over one source: inserts, deletes, modifications, 1-5 operations.

    Values come from small per-column domains seeded with the scenario's own values (join
    columns share one domain), so that updates join often; keys stay unique because rows are
    planned against the source's current state. A transaction the source rejects (a declared
    FD or RI it would break) is simply not committed.
    """

    def __init__(self, scenario: Scenario, rng: random.Random, single_update: bool = False):
        """`single_update`: every transaction is one insertion or one deletion (the Strobe paper's
        single update transactions, section 3.1); otherwise 1-5 operations of any kind."""
        self.scenario = scenario
        self.rng = rng
        self.single_update = single_update
        self.fresh = 0
        view = scenario.view.join
        self.domains: dict[tuple[str, str], list] = {}
        classes: dict = {}
        for rel in scenario.catalog.relations:
            for col in rel.columns:
                ref = ColumnRef(rel.name, col)
                cls = view.equivalents(ref, outer=True) if rel.name in view.relations else frozenset({ref})
                domain = classes.setdefault(cls, set())
                self.domains[(rel.name, col)] = domain
        for name, rows in scenario.initial.items():
            rel = scenario.catalog.relation(name)
            for row in rows:
                for col, v in zip(rel.columns, row):
                    self.domains[(rel.name, col)].add(v)

    def transaction(self, store: MemoryStore) -> TransactionRequest | None:
        self.fresh += 1
        txn = f"r{self.fresh}"
        tables = {name: dict(rows) for name, rows in store.relations.items()}
        inserts, deletes, modifies = {}, {}, {}
        kinds = ("insert", "delete") if self.single_update else ("insert", "delete", "modify")
        for _ in range(1 if self.single_update else self.rng.randint(1, 5)):
            name = self.rng.choice(sorted(tables))
            rel = self.scenario.catalog.relation(name)
            table = tables[name]
            kind = self.rng.choice(kinds if table else ("insert",))
            if kind == "insert":
                row = self._row(rel, table)
                table[rel.key_of(row)] = row
                inserts.setdefault(name, []).append(row)
            else:
                old = table.pop(self.rng.choice(sorted(table, key=repr)))
                if kind == "delete":
                    deletes.setdefault(name, []).append(old)
                else:
                    new = self._changed(rel, old, table)
                    table[rel.key_of(new)] = new
                    modifies.setdefault(name, []).append(Modification(old, new))
        request = TransactionRequest(txn, inserts, deletes, modifies)
        if _touches_twice(request, self.scenario):
            return None
        try:
            from fedlab.source_node.commit import plan_commit
            plan_commit(store.catalog, store.source, request, lambda r, k: store.relations[r].get(k), store._find)
        except ModelError:
            return None
        return request

    def _value(self, rel, col, fresh: bool):
        domain = self.domains[(rel.name, col)]
        typ = rel.types[rel.index(col)]
        if domain and not fresh and self.rng.random() < 0.8:
            return self.rng.choice(sorted(domain, key=repr))
        self.fresh += 1
        value = self.fresh * 1000 + self.rng.randint(0, 999) if typ == "BIGINT" else (
            float(self.fresh) if typ == "DOUBLE" else f"{col.lower()}_{self.fresh}")
        domain.add(value)
        return value

    def _row(self, rel, table) -> tuple:
        for _ in range(20):
            row = tuple(self._value(rel, c, fresh=False) for c in rel.columns)
            if rel.key_of(row) not in table:
                return row
        return tuple(self._value(rel, c, fresh=c in rel.key) for c in rel.columns)

    def _changed(self, rel, old: tuple, table) -> tuple:
        row = list(old)
        cols = self.rng.sample(range(len(rel.columns)), self.rng.randint(1, len(rel.columns)))
        for i in cols:
            if rel.columns[i] in rel.key and self.rng.random() < 0.7:
                continue
            row[i] = self._value(rel, rel.columns[i], fresh=False)
        new = tuple(row)
        return new if rel.key_of(new) not in table else old


def _touches_twice(request: TransactionRequest, scenario: Scenario) -> bool:
    """Whether one key is both removed and re-added within a relation (kept out for simplicity)."""
    for name in request.relations:
        rel = scenario.catalog.relation(name)
        removed = [rel.key_of(r) for r in request.deletes.get(name, [])] + [rel.key_of(m.old) for m in request.modifies.get(name, [])]
        added = [rel.key_of(r) for r in request.inserts.get(name, [])] + [rel.key_of(m.new) for m in request.modifies.get(name, [])]
        if len(set(removed)) != len(removed) or len(set(added)) != len(added):
            return True
    return False
