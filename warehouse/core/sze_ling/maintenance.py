"""Sze-Ling maintenance: events in, actions out (the pure core every adapter drives).

`SzeLingMaintenance.handle(event)` takes a notification, an answer, a timer or a refused resend
and returns the actions to carry out: sub-queries to send, resend requests, acknowledgements, and
the view states it applied. It reads no clock (time comes with the events), draws no random
numbers and opens no sockets, so the simulator can replay any interleaving through it.

With `Options()` it is Sze-Ling's algorithm; other settings give the baselines that share its
machinery, and with a `Deferral` it is lazy maintenance (warehouse.core.sze_ling.deferral: transactions
wait, then several are combined into one task; see warehouse.core.builtin_plugins).

Theorem 2 (complete consistency): a source's transactions start in DSV order, whatever order their
notifications arrive in; every started task is applied in start order, so each transaction gets
its own view state, which reflects exactly the transactions started before it. (A lazy job's
state reflects several transactions at once: strong consistency, not complete.)
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Iterable

from fedlab.fedmodel.round_trip import RoundTrip
from fedlab.fedmodel.subquery import Subquery
from fedlab.fedmodel.transactions import Notification
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.algorithm import Counters
from fedlab.warehouse.core.events import (
    AnswerArrived,
    EvaluateView,
    NotificationArrived,
    ResendRefused,
    SendSubquery,
    StateApplied,
    TimerFired,
    ViewEvaluated,
    ViewQueried,
    ViewReady,
)
from fedlab.warehouse.core.missing_notifications import MissingNotifications
from fedlab.warehouse.core.notification_log import NotificationLog
from fedlab.warehouse.core.snapshots import SnapshotRead
from fedlab.warehouse.core.sze_ling.computation import Computation, Context
from fedlab.warehouse.core.sze_ling.deferral import Deferral, PendingTasks, combine
from fedlab.warehouse.core.sze_ling.transaction_task import TransactionTask
from fedlab.warehouse.core.sze_ling.version_state import VersionState
from fedlab.warehouse.core.timings import QUERY_TIMEOUT, REORDER_ALLOWANCE, RESEND_TIMEOUT
from fedlab.warehouse.core.view_state import MaterializedView


@dataclass(frozen=True)
class Options:
    compensate: bool = True          # Lemmas 1-7
    ordered: bool = True             # DSV order, duplicates ignored, gaps recovered by resend
    self_maintenance: bool = True    # read the view where keys and FDs allow (4.2)
    key_shortcuts: bool = True       # delete / update the view by key (4.3)
    access: str = "join-graph"       # or "scan"
    query_timeout: float = QUERY_TIMEOUT          # warehouse.core.timings
    resend_timeout: float = RESEND_TIMEOUT
    reorder_allowance: float = REORDER_ALLOWANCE
    deferral: Deferral | None = None  # lazy maintenance: defer and combine (needs `ordered`)
    as_of: bool = False              # versioned: sub-queries read at the initial versions (fedmodel.as_of)

    def __post_init__(self):
        if self.deferral is not None and not self.ordered:
            raise ValueError("deferred maintenance combines transactions in DSV order: it needs ordered=True")


@dataclass
class MaintenanceCounters(Counters):
    subqueries: int = 0
    retries: int = 0
    resends: int = 0
    compensations: int = 0
    duplicates: int = 0
    rejected_answers: int = 0
    jobs: int = 0          # tasks started: one per transaction, or per combined group (lazy)
    resynchronisations: int = 0   # snapshots read because a lost notification was gone for good
    condensed: int = 0     # base delta rows that condensing combined transactions removed


class SzeLingMaintenance:
    def __init__(self, view: ViewDef, rows: dict[tuple, int], brv: dict[str, int], dsv: dict[str, int],
                 options: Options = Options(), force_queries: Iterable[str] = ()):
        """`rows` is the view materialised at the source states `dsv` (per source), `brv` (per relation)."""
        self.view = view
        self.options = options
        self.mview = MaterializedView(rows, strict=options.compensate)
        self.versions = VersionState.initial(brv, dsv)
        self.log = NotificationLog(dsv)
        self.tasks: list[TransactionTask] = []
        self.pending = PendingTasks()   # received in DSV order, not started (lazy only)
        self._read_waits_for: dict[str, int] | None = None   # a read waits until the view reflects these DSVs
        self.trace: list[dict] = []
        self.counters = MaintenanceCounters()
        self.force_queries = set(force_queries)
        self._ids = 0
        self._routes: dict[str, Computation] = {}
        self._sent_at: dict[str, tuple[float, Subquery, bool]] = {}   # id -> (last sent, it, retried)
        self._round_trip = RoundTrip(options.query_timeout)   # of sub-queries, time in the dispatcher's queue included
        # Answers read past the notifications received, by source, as a heap of (the DSV the
        # answer was read at, arrival, its computation): a notification from s releases those of s
        # it makes contiguous, without looking at the others.
        self._parked: dict[str, list[tuple[int, int, Computation]]] = {}
        self.missing = MissingNotifications(self.log, options.reorder_allowance, options.resend_timeout)
        self._arrivals = itertools.count()
        self._seq = 0
        self._resync: SnapshotRead | None = None   # the snapshot a resynchronisation reads
        self._ctx = Context(view, self.log, self.mview, self.versions.refreshed, options.compensate,
                            options.self_maintenance, self._new_id, self._record, options.as_of)

    # ---- events ----

    def handle(self, event) -> list:
        if isinstance(event, NotificationArrived):
            actions = self._on_notification(event.notification, event.now)
        elif isinstance(event, AnswerArrived):
            actions = self._on_answer(event.answer, event.now)
        elif isinstance(event, TimerFired):
            actions = self._on_timer(event.now)
        elif isinstance(event, ResendRefused):
            actions = self._on_resend_refused(event)
        elif isinstance(event, ViewQueried):
            actions = self._on_read()
        elif isinstance(event, ViewEvaluated):
            actions = self._on_snapshot_evaluated(event)
        else:
            raise TypeError(f"unknown event {event!r}")
        return actions + self._apply_ready(event.now)

    def _on_notification(self, n: Notification, now: float) -> list:
        self.missing.received(n.source, n.dsv, now)
        fresh = self.log.add(n)
        if not fresh:
            self.counters.duplicates += 1
        actions: list = [self.log.acknowledgement(n.source)]
        if self.options.deferral is not None:
            while (nxt := self.log.get(n.source, self._taken_dsv(n.source) + 1)) is not None:
                self.pending.add(nxt, now)
        elif self.options.ordered:
            while (nxt := self.log.get(n.source, self.versions.started_dsv.get(n.source, 0) + 1)) is not None:
                actions += self._start([nxt], now)
        else:
            # Conventional maintenance: whatever arrives is processed, in arrival order.
            actions += self._start([n], now)
        parked = self._parked.get(n.source, [])
        while parked and parked[0][0] <= self.log.contiguous(n.source):
            comp = heapq.heappop(parked)[2]
            if comp.retry_waiting():
                actions += self._advance(comp, now)
        return actions

    def _taken_dsv(self, source: str) -> int:
        """The DSV of `source` up to which notifications were started or queued (lazy)."""
        pending = self.pending.last_dsv(source)
        return pending if pending is not None else self.versions.started_dsv.get(source, 0)

    def _on_read(self) -> list:
        """A query reads the view: it waits until the view reflects every transaction received so
        far (ViewReady, from `_apply_ready`); meanwhile lazy jobs start at once and combine every
        pending transaction (Zhou-Larson 3.5, on-demand scheduling)."""
        self._read_waits_for = {s: self.log.contiguous(s) for s in self.versions.started_dsv}
        return []

    def _on_answer(self, answer, now: float) -> list:
        if self._resync is not None and self._resync.expects(answer):
            return self._on_snapshot_answer(answer)
        comp = self._routes.get(answer.id)
        if comp is None:
            self.counters.duplicates += 1
            return []
        if any(ra.brv < comp.alpha.get(ra.relation, 0) for ra in answer.relations):
            # Below the initial version numbers: the source already reported (notified) a later
            # state, so this is an error, not data. The sub-query stays outstanding and is
            # asked again at the timer.
            self.counters.rejected_answers += 1
            self.trace.append({"event": "rejected-answer", "computation": comp.label, "subquery": answer.id,
                               "source": answer.source, "dsv": answer.dsv,
                               "reason": "read at a version older than one the source already reported"})
            return []
        self._measure_round_trip(answer.id, now)
        self.missing.answered(answer.source, answer.dsv)
        self._routes.pop(answer.id, None)   # answered: a later copy is a duplicate, parked or not
        if comp.on_answer(answer):
            return self._advance(comp, now)
        heapq.heappush(self._parked.setdefault(answer.source, []), (answer.dsv, next(self._arrivals), comp))
        # Read at a state whose notifications have not all arrived: if that lasts until the
        # timer, one of them is probably lost (end of section 5.2) and is asked for again; the
        # sub-query itself is answered and not sent again.
        return []

    def _measure_round_trip(self, sid: str, now: float) -> None:
        """Smooths the round trip of answered sub-queries sent once (as TCP does: a retried one's
        answer may answer either copy), so that the retry timeout follows the load."""
        sent, _sq, retried = self._sent_at.pop(sid, (None, None, True))
        if not retried:
            self._round_trip.sample(now - sent)

    @property
    def query_timeout(self) -> float:
        """How long a sub-query waits for its answer before it is sent again: the configured
        timeout, or four smoothed round trips when the sources answer more slowly than that,
        doubled for every timer round that retried one since the last answer (fedmodel.round_trip)."""
        return self._round_trip.timeout()

    def _on_timer(self, now: float) -> list:
        actions: list = []
        timeout = self.query_timeout
        for sid, (sent, sq, _retried) in list(self._sent_at.items()):
            if now - sent >= timeout:
                self._sent_at[sid] = (now, sq, True)
                self.counters.retries += 1
                actions.append(SendSubquery(sq, getattr(self._routes.get(sid), "label", "")))
        if actions:
            self._round_trip.timed_out(now)
        if self._resync is not None:
            again = self._resync.overdue(now, timeout)
            self.counters.retries += len(again)
            actions += again
        if self.options.ordered:
            for source in self.versions.started_dsv:
                actions += self._ask_resend(source, now)
        return actions

    def next_timer(self) -> float | None:
        """The earliest time a TimerFired could make it act: a sub-query to send again, a
        snapshot's, a lost notification to ask for, a lazy job due; None while nothing waits on
        time. Adapters fire no timer before it (a timer fired early does nothing)."""
        timeout = self.query_timeout
        times = [sent + timeout for sent, _sq, _retried in self._sent_at.values()]
        if self._resync is not None:
            times.append(self._resync.next_due(timeout))
        if self.options.ordered:
            times.append(self.missing.next_due(self.versions.started_dsv))
        if self.options.deferral is not None:
            times.append(self.pending.next_due(self.options.deferral))
        return min((t for t in times if t is not None), default=None)

    def _ask_resend(self, source: str, now: float) -> list:
        """Asks for the DSVs of `source` the core lacks (warehouse.core.missing_notifications)."""
        asked = self.missing.ask(source, now)
        self.counters.resends += len(asked)
        return asked

    # ---- resynchronisation ----

    def _on_resend_refused(self, event: ResendRefused) -> list:
        """A lost notification can no longer be resent (its source truncated its log): the view
        is rebuilt from a snapshot of every source (warehouse.core.snapshots), which the adapter
        evaluates (EvaluateView). One snapshot at a time: one already being read goes on, and if
        it was read below this gap, the gap shows again after it and is refused again. A refusal
        of an ask sent before a snapshot read past the gap asks for nothing missing: ignored."""
        if event.from_dsv <= self.log.contiguous(event.source) or self._resync is not None:
            return []
        self.trace.append({"event": "resynchronise", "source": event.source, "missing_from": event.from_dsv,
                           "oldest_available": event.oldest_available})
        self.counters.resynchronisations += 1
        return self._read_snapshot(event.now)

    def _read_snapshot(self, now: float) -> list:
        self._resync = SnapshotRead(self.view, self._new_id, now)
        sent = self._resync.start()
        self.counters.subqueries += len(sent)
        return sent

    def _on_snapshot_answer(self, answer) -> list:
        again = self._resync.take(answer)
        self.counters.subqueries += len(again)
        if again or not self._resync.complete:
            return again
        return [EvaluateView(self.counters.resynchronisations, self.view, self._resync.relations())]

    def _on_snapshot_evaluated(self, event: ViewEvaluated) -> list:
        if self._resync is None or not self._resync.complete or event.round != self.counters.resynchronisations:
            self.counters.duplicates += 1   # not the evaluation this core waits for
            return []
        if event.rows is None:   # the job failed: read a fresh snapshot
            return self._read_snapshot(event.now)
        read, self._resync = self._resync, None
        return self._on_resynchronised(event.rows, read.brv(), read.dsv(), event.now)

    def _on_resynchronised(self, rows: dict[tuple, int], brv: dict[str, int], dsv: dict[str, int],
                           now: float) -> list:
        """Rebuilds from the view over a snapshot: `rows`, read at `dsv` (per source) and `brv`.

        Tasks in flight are dropped (their sub-queries' late answers are ignored); notifications
        past the snapshot are kept and started again. The new state skips transactions, so the run
        can no longer be completely consistent, and the StateApplied (transaction "resync") says so.
        """
        before = self.mview.snapshot()
        self.tasks.clear()
        self.pending.clear()
        self._routes.clear()
        self._sent_at.clear()
        self._parked.clear()
        self.missing.forget_answers()
        self.mview = MaterializedView(rows, strict=self.options.compensate)
        self._ctx.mview = self.mview
        self.versions.highest_processing.update(brv)
        self.versions.refreshed.update(brv)
        self.versions.started_dsv.update(dsv)
        self.versions.applied_dsv.update(dsv)
        pending = [n for s in dsv for d in range(dsv[s] + 1, self.log.highest(s) + 1)
                   if (n := self.log.get(s, d)) is not None]
        self.log = NotificationLog(dsv)
        self._ctx.log = self.log
        delta = Counter(rows)
        delta.subtract(before)
        actions: list = [StateApplied("*", 0, "resync", {r: c for r, c in delta.items() if c}, dict(dsv))]
        actions += [self.log.acknowledgement(s) for s in dsv]   # the snapshots cover what a gap hid
        for n in pending:
            actions += self._on_notification(n, now)
        return actions

    # ---- tasks ----

    def _start(self, parts: list[Notification], now: float) -> list:
        """Starts the task of one transaction, or of several combined into one (lazy)."""
        self._seq += 1
        self.counters.jobs += 1
        if len(parts) == 1:
            n = parts[0]
        else:
            n, saved = combine(self.view, parts)
            self.counters.condensed += saved
        started = self.versions.started_dsv
        for part in parts:
            started[part.source] = max(started.get(part.source, 0), part.dsv)
        order = self._relation_order(n)
        task = TransactionTask(self._seq, n, self._ctx, self.versions, self.options.access,
                               self.options.key_shortcuts and n.txn_id not in self.force_queries, order)
        task.alpha_dsv = dict(self.versions.started_dsv)
        task.parts = parts
        self.tasks.append(task)
        actions = []
        for comp in task.computations:
            actions += self._advance(comp, now)
        return actions

    def _relation_order(self, n: Notification) -> tuple[str, ...]:
        """The transaction's view relations, referenced (parent) relations first (see ri_irrelevant)."""
        touched = [r for r in self.view.relations if n.change(r) is not None]
        ri = self.view.catalog.ri
        ordered: list[str] = []
        while len(ordered) < len(touched):
            for r in touched:
                if r not in ordered and all(p.parent in ordered or p.parent not in touched or p.parent == r
                                            for p in ri if p.child == r):
                    ordered.append(r)
                    break
            else:  # a cycle of constraints: keep FROM order for the rest
                ordered += [r for r in touched if r not in ordered]
        return tuple(ordered)

    def _advance(self, comp: Computation, now: float) -> list:
        actions = []
        for sq in comp.advance():
            self._routes[sq.id] = comp
            self._sent_at[sq.id] = (now, sq, False)
            self.counters.subqueries += 1
            actions.append(SendSubquery(sq, comp.label))
        return actions

    def _apply_ready(self, now: float) -> list:
        """Applies finished tasks: in start order (Theorem 2), or as they finish (conventional);
        with deferral, starts the next job when fewer than `max_jobs` are in progress and one is
        due. Tells a waiting read when the view reflects what it waits for."""
        actions = []
        deferral = self.options.deferral
        while True:
            task = self.tasks[0] if self.options.ordered and self.tasks else next((t for t in self.tasks if t.done), None)
            if task is not None and task.done:
                self.tasks.remove(task)
                actions.append(self._apply(task))
            elif (deferral and len(self.tasks) < deferral.max_jobs
                  and (due := self.pending.due(deferral, now, self._read_waits_for is not None))):
                actions += self._start(self.pending.take(due), now)
            else:
                break
        applied = self.versions.applied_dsv
        if self._read_waits_for is not None and all(applied.get(s, 0) >= d for s, d in self._read_waits_for.items()):
            self._read_waits_for = None
            actions.append(ViewReady())
        return actions

    def _apply(self, task: TransactionTask) -> StateApplied:
        delta = task.apply(self.view, self.mview, self.versions.refreshed)
        applied = self.versions.applied_dsv
        for n in task.parts:
            applied[n.source] = max(applied.get(n.source, 0), n.dsv)
            if self.options.ordered:
                # No task needs its updates any more: later ones start at or above its versions
                # (interfering updates lie above alpha), and the view now reflects them (missing
                # updates lie above the refreshed version numbers).
                self.log.forget_through(n.source, n.dsv)
        versions = dict(task.alpha_dsv) if self.options.ordered else dict(applied)
        first, last = task.parts[0], task.parts[-1]
        # A combined state is as stale as its oldest transaction; it names every one it reflects.
        return StateApplied(last.source, last.dsv, last.txn_id, delta, versions, first.commit_time,
                            tuple(n.txn_id for n in task.parts) if len(task.parts) > 1 else ())

    # ---- helpers ----

    def _new_id(self) -> str:
        self._ids += 1
        return f"q{self._ids}"

    def _record(self, entry: dict) -> None:
        self.counters.compensations += 1
        self.trace.append({"event": "compensate", **entry})

    # ---- the Algorithm interface (warehouse.core.algorithm) ----

    @property
    def in_flight(self) -> int:
        started = self.versions.started_dsv
        return len(self.tasks) + sum(self.log.waiting(s, d) for s, d in started.items())

    @property
    def timeout(self) -> float:
        return max(self.query_timeout, self.options.resend_timeout)

    def view_rows(self) -> dict[tuple, int]:
        return self.mview.snapshot()

    def received_through(self, source: str) -> int:
        return self.log.contiguous(source)

    def applied_dsv(self) -> dict[str, int]:
        return dict(self.versions.applied_dsv)

    def version_state(self) -> dict:
        v = self.versions
        return {"relations": {r: {"processing": v.highest_processing[r], "refreshed": v.refreshed[r]}
                              for r in v.refreshed},
                "sources": {s: {"applied_dsv": d} for s, d in v.applied_dsv.items()}}
