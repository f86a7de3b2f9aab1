"""The Strobe family (Zhuge, Garcia-Molina, Wiener 1996): Strobe (5.2), T-Strobe (5.3), G-Strobe (5.4).

All three keep an action list AL of view changes and apply it as one warehouse transaction only
at quiescence, when the unanswered query set UQS is empty: each applied state is then the view
at a source state, although not every source state gets a view state of its own. An insertion
U_i starts a query Q_i = V<U_i>, evaluated by the sources (warehouse.core.baselines.source_evaluate); a
deletion U received while Q is unanswered joins pending(Q), and key_delete(A, U) removes its
tuples from Q's answer before insert(A) goes on AL; the deletion itself puts key_delete(MV, U) on
AL. C-Strobe (section 6) lives in warehouse.core.baselines.c_strobe and shares `StrobeFamily`.

Decisions where the paper leaves room (docs/paper-notes.md), each tested in tests/test_strobe.py:
- Keys: the maintained view is the user's view widened with every relation's key
  (warehouse.core.baselines.keyed_view); states and view_rows() are projected back to the user's columns.
- Updates: the paper's updates are single-tuple inserts and deletes. A notification (one source
  transaction, net changes) is read as its updates in order: relation by relation as the
  notification lists them, deletions (with the old images of modifications) before insertions
  (with the new images), so a modification is a deletion followed by an insertion (5.1).
- Strobe knows no transactions: it processes each update on its own and applies AL whenever UQS
  is empty, also between two updates of one transaction (Example 4), so with multi-update
  transactions it only converges. T-Strobe and G-Strobe take a notification as UL(T).
- Global transactions (Example 5): our sources commit locally; a scenario may declare that
  several local commits form one global transaction (their id and number of parts, which the
  paper's messages carry, 5.4). T-Strobe and G-Strobe hold a part until every part has arrived
  and process them as one UL(T); a source's later notifications wait behind its held part, so
  each source's updates are processed in its order. T-Strobe applies AL whenever UQS is empty;
  G-Strobe only when all three of its conditions hold: UQS is empty (1); every notification of a
  source below a received one has arrived - the sequence numbers the paper proposes for
  condition 2, our DSVs, which also make it ignore a notification it already has (2); every
  received transaction is complete and processed (3).
- Example 5's misprints: r2's key is C (the text underlines B, but r2 holds two rows with B = 3)
  and step 4's key_delete(WC, U_2) is key_delete(MV, U_2) (tests/scenarios/strobe_example5_*).
- Delivery: the paper assumes FIFO channels and no loss. The algorithms process notifications
  in arrival order and neither order, deduplicate nor ask for lost ones (G-Strobe's sequence
  numbers aside): a duplicate is processed again, a resent one where it lands. Acknowledgements
  are the transport's (every DSV received so far, contiguously, so a source's outbox resends
  what was lost), and an unanswered sub-query is sent again after `query_timeout` as the
  conventional baseline does, so that the consistency matrix measures what the algorithm does
  with late, lost and repeated messages rather than a stalled transport.
- The version vector a state claims (for the checker): per source, the highest DSV of a
  notification whose updates the algorithm has processed - what it believes the view reflects.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fedlab.fedmodel.subquery import Subquery
from fedlab.fedmodel.transactions import Notification
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.algorithm import Counters
from fedlab.warehouse.core.baselines.applied_versions import AppliedVersions
from fedlab.warehouse.core.baselines.keyed_view import project, widen
from fedlab.warehouse.core.baselines.source_evaluate import Derivation, Evaluation
from fedlab.warehouse.core.baselines.unanswered import Unanswered
from fedlab.warehouse.core.events import (
    AnswerArrived,
    NotificationArrived,
    ResendRefused,
    SendSubquery,
    StateApplied,
    TimerFired,
    ViewQueried,
    ViewReady,
)
from fedlab.warehouse.core.timings import QUERY_TIMEOUT
from fedlab.warehouse.core.view_state import MaterializedView


@dataclass(frozen=True)
class Update:
    """One tuple action (section 3): `row` inserted into or deleted from `relation`."""

    relation: str
    row: tuple
    insert: bool
    notification: Notification


def updates_of(view: ViewDef, n: Notification) -> list[Update]:
    """The notification's updates on view relations, in the order the module docstring gives."""
    out = []
    names = {r.lower(): r for r in view.relations}
    for change in n.changes:
        relation = names.get(change.relation.lower())
        if relation is None:
            continue
        out += [Update(relation, row, False, n) for row in change.removed]
        out += [Update(relation, row, True, n) for row in change.added]
    return out


@dataclass
class StrobeCounters(Counters):
    subqueries: int = 0
    retries: int = 0
    duplicates: int = 0        # answers to sub-queries no longer outstanding
    key_deletes: int = 0       # key_delete applied to an answer (pending sets)
    compensations: int = 0     # C-Strobe's compensating queries


@dataclass(frozen=True)
class KeyDelete:
    """key_delete(MV, U): delete the view tuples whose key for U's relation is U's key."""

    update: Update


@dataclass(frozen=True)
class Insert:
    """insert(MV, A): add A's tuples, without adding duplicate tuples."""

    rows: frozenset


@dataclass(eq=False)   # one query is one object in UQS
class Query:
    """Q_i in UQS: its evaluations (one per relation with insertions) and pending(Q_i)."""

    evaluations: list[Evaluation]
    pending: list[Update] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return all(e.done for e in self.evaluations)


class StrobeFamily(AppliedVersions):
    """What the Strobe algorithms share: the widened view, query routing and retries, applying
    actions to MV, and the Algorithm interface (warehouse.core.algorithm)."""

    def __init__(self, view: ViewDef, rows: dict[tuple, int], brv: dict[str, int], dsv: dict[str, int],
                 access: str = "scan", query_timeout: float = QUERY_TIMEOUT, global_transactions: dict | None = None):
        """`rows` is the widened view (keyed_view.widen) materialised at `dsv` / `brv`.

        `global_transactions` maps a local transaction id to (global id, number of parts).
        """
        self.user_view = view
        self.view = widen(view)
        self.access = access
        self.query_timeout = query_timeout
        self.global_transactions = dict(global_transactions or {})
        self.mview = MaterializedView(rows)
        super().__init__(brv, dsv)
        self.uqs: list = []
        self.trace: list[dict] = []
        self.counters = StrobeCounters()
        self._routes: dict[str, tuple[object, Evaluation]] = {}
        self.unanswered = Unanswered(query_timeout)
        self._ids = 0
        self.now = 0.0

    # ---- events ----

    def handle(self, event) -> list:
        self.now = event.now
        if isinstance(event, NotificationArrived):
            fresh, acknowledgement = self._take_in(event.notification)
            actions: list = [acknowledgement, *self._receive(event.notification, fresh, event.now)]
        elif isinstance(event, AnswerArrived):
            actions = self._on_answer(event.answer, event.now)
        elif isinstance(event, TimerFired):
            actions = self._retry(event.now)
        elif isinstance(event, ResendRefused):
            actions = []   # never asks for a resend
        elif isinstance(event, ViewQueried):
            actions = [ViewReady()]   # the view moves at quiescence only; a read sees the last one
        else:
            raise TypeError(f"unknown event {event!r}")
        return actions + self._at_quiescence()

    def _receive(self, n: Notification, fresh: bool, now: float) -> list:
        raise NotImplementedError

    def _answered(self, query, now: float) -> list:
        """Every evaluation of `query` has its answer."""
        raise NotImplementedError

    def _at_quiescence(self) -> list:
        raise NotImplementedError

    # ---- queries ----

    def _evaluation(self, relation: str, rows, label: str, pinned: dict | None = None) -> Evaluation:
        return Evaluation(self.view, relation, rows, self.access, self._new_id, label, pinned)

    def _ask(self, query, now: float) -> list:
        """Sends `query`'s first sub-queries; it stays in UQS until answered."""
        self.uqs.append(query)
        actions: list = []
        for ev in query.evaluations:
            actions += self._send(query, ev, ev.start(), now)
        return actions + self._finish(query, now)

    def _on_answer(self, answer, now: float) -> list:
        route = self._routes.pop(answer.id, None)
        if route is None:
            self.counters.duplicates += 1
            return []
        self.unanswered.answered(answer.id)
        query, ev = route
        return self._send(query, ev, ev.on_answer(answer), now) + self._finish(query, now)

    def _finish(self, query, now: float) -> list:
        if query.done and query in self.uqs:
            self.uqs.remove(query)
            return self._answered(query, now)
        return []

    def _send(self, query, ev: Evaluation, subqueries: list[Subquery], now: float) -> list:
        for sq in subqueries:
            self._routes[sq.id] = (query, ev)
            self.unanswered.sent(sq, now)
            self.counters.subqueries += 1
        return [SendSubquery(sq) for sq in subqueries]

    def _retry(self, now: float) -> list:
        again = self.unanswered.overdue(now)
        self.counters.retries += len(again)
        return again

    # ---- the view ----

    def _position(self, relation: str) -> int:
        return self.view.relations.index(relation)

    def key_delete(self, answer: dict[Derivation, tuple], u: Update) -> dict[Derivation, tuple]:
        """key_delete(A, U): the answer without the tuples whose key for U's relation is U's key."""
        rel, i = self.view.relation(u.relation), self._position(u.relation)
        kept = {d: row for d, row in answer.items() if rel.key_of(d[i]) != rel.key_of(u.row)}
        if len(kept) != len(answer):
            self.counters.key_deletes += 1
            self.trace.append({"event": "key-delete", "deleted": [u.relation, list(u.row)],
                               "transaction": u.notification.txn_id,
                               "removed": sorted((list(answer[d]) for d in answer if d not in kept), key=repr)})
        return kept

    def _apply_actions(self, actions: list) -> Counter:
        """Applies key_delete(MV, U) and insert(MV, A) actions in order; returns the delta."""
        total: Counter = Counter()
        for action in actions:
            if isinstance(action, KeyDelete):
                rel = self.view.relation(action.update.relation)
                positions = [self.view.output_position(rel.name, c) for c in rel.key]
                step = self.mview.delete_where(positions, [rel.key_of(action.update.row)])
            else:
                step = {row: 1 for row in action.rows if row not in self.mview.counts}
            self.mview.apply(step)
            total.update(step)
        return total

    def _state(self, delta: Counter, covered: list[Notification]) -> StateApplied:
        """The new view state; it claims every covered notification (and all claimed before)."""
        for n in covered:
            self._applied_dsv[n.source] = max(self._applied_dsv.get(n.source, 0), n.dsv)
            for change in n.changes:
                self.refreshed[change.relation] = max(self.refreshed.get(change.relation, 0), change.brv)
        last = covered[-1]
        return StateApplied(last.source, last.dsv, last.txn_id, project(self.user_view, delta),
                            dict(self._applied_dsv), last.commit_time, tuple(n.txn_id for n in covered))

    # ---- helpers ----

    def _new_id(self) -> str:
        self._ids += 1
        return f"q{self._ids}"

    def _passes(self, u: Update) -> bool:
        return self.view.selection_test(u.relation)(u.row)

    # ---- the Algorithm interface ----

    @property
    def timeout(self) -> float:
        return self.query_timeout

    def next_timer(self) -> float | None:
        """A timer acts only to send an unanswered sub-query again (warehouse.core.algorithm)."""
        return self.unanswered.next_due()

    def view_rows(self) -> dict[tuple, int]:
        return project(self.user_view, self.mview.snapshot())

    def maintained_rows(self) -> dict[tuple, int]:
        """The widened view's rows, as the algorithm keeps them."""
        return self.mview.snapshot()


class Strobe(StrobeFamily):
    """Strobe (section 5.2): strongly consistent for single-update transactions (Appendix A)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.action_list: list = []
        self.covered: list[Notification] = []   # notifications with updates processed since the last apply

    def _receive(self, n: Notification, fresh: bool, now: float) -> list:
        actions: list = []
        updates = updates_of(self.view, n)
        if not updates:
            self._cover(n)
        for u in updates:
            self._cover(n)
            if u.insert:
                if self._passes(u):
                    actions += self._ask(Query([self._evaluation(u.relation, [u.row], n.txn_id)]), now)
            else:
                for q in self.uqs:
                    q.pending.append(u)
                self.action_list.append(KeyDelete(u))
            # Each update is a transaction to Strobe: AL may be applied between two of them (Example 4).
            actions += self._at_quiescence()
        return actions

    def _cover(self, n: Notification) -> None:
        if not any(c is n for c in self.covered):
            self.covered.append(n)

    def _answered(self, query: Query, now: float) -> list:
        answer = {}
        for ev in query.evaluations:
            answer.update(ev.answer())
        for u in query.pending:
            answer = self.key_delete(answer, u)
        self.action_list.append(Insert(frozenset(answer.values())))
        return []

    def _at_quiescence(self) -> list:
        if self.uqs or not self.covered:
            return []
        delta = self._apply_actions(self.action_list)
        state = self._state(delta, self.covered)
        self.action_list, self.covered = [], []
        return [state]

    @property
    def in_flight(self) -> int:
        return len(self.covered)


class TStrobe(Strobe):
    """T-Strobe (section 5.3): a transaction's update list UL(T) is processed as one unit;
    strongly consistent for source-local transactions, weakly for global ones (Example 5)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.holding: list[Notification] = []   # received, not yet processed (global parts, and what waits behind them)

    def _receive(self, n: Notification, fresh: bool, now: float) -> list:
        self.holding.append(n)
        return self._process_ready(now)

    def _process_ready(self, now: float) -> list:
        actions: list = []
        while (ready := self._ready()) is not None:
            for n in ready:
                self.holding.remove(n)
            actions += self._process_transaction(ready, now)
            actions += self._at_quiescence()
        return actions

    def _ready(self) -> list[Notification] | None:
        """The first held transaction that can be processed: all its parts are in, each first
        of its source among the held notifications."""
        blocked: set[str] = set()
        for n in self.holding:
            if n.source in blocked:
                continue
            part_of = self.global_transactions.get(n.txn_id)
            if part_of is None:
                return [n]
            parts = list({m.txn_id: m for m in self.holding
                          if self.global_transactions.get(m.txn_id, (None,))[0] == part_of[0]}.values())
            if len(parts) == part_of[1] and all(self._first_of_source(m) for m in parts):
                return parts
            blocked.add(n.source)
        return None

    def _first_of_source(self, n: Notification) -> bool:
        return next(m for m in self.holding if m.source == n.source) is n

    def _process_transaction(self, notes: list[Notification], now: float) -> list:
        for n in notes:
            self._cover(n)
        ul = cancel_inserted_then_deleted([u for n in notes for u in updates_of(self.view, n)], self.view)
        for u in ul:
            if not u.insert:
                for q in self.uqs:
                    q.pending.append(u)
                self.action_list.append(KeyDelete(u))
        inserted: dict[str, list[tuple]] = {}
        for u in ul:
            if u.insert and self._passes(u):
                inserted.setdefault(u.relation, []).append(u.row)
        if not inserted:
            return []
        label = "+".join(n.txn_id for n in notes)
        # Q_i = the union of V<U_j> over IL(T): one evaluation per relation inserted into.
        return self._ask(Query([self._evaluation(r, rows, label) for r, rows in inserted.items()]), now)

    @property
    def in_flight(self) -> int:
        return len(self.covered) + len(self.holding)


class GStrobe(TStrobe):
    """G-Strobe (section 5.4): T-Strobe that applies AL only when its three conditions hold;
    strongly consistent for global transactions."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.released = {s: self.transport.contiguous(s) for s in self._applied_dsv}

    def _receive(self, n: Notification, fresh: bool, now: float) -> list:
        if not fresh:
            return []   # a sequence number it already has (condition 2's sequence numbers)
        source = n.source
        while (nxt := self.transport.get(source, self.released.get(source, 0) + 1)) is not None:
            self.released[source] = nxt.dsv
            self.holding.append(nxt)
        return self._process_ready(now)

    def _kept_after(self, source: str) -> int:
        return self.released.get(source, 0)   # the log holds what waits for its predecessors

    def _at_quiescence(self) -> list:
        complete = not self.holding and all(not self.transport.has_gap(s) for s in self.released)
        return super()._at_quiescence() if complete else []

    @property
    def in_flight(self) -> int:
        waiting = sum(self.transport.highest(s) - self.released.get(s, 0) for s in self.released)
        return super().in_flight + waiting


def cancel_inserted_then_deleted(ul: list[Update], view: ViewDef) -> list[Update]:
    """T-Strobe's first step: drop each insertion U_j and deletion U_k of the same key with U_j < U_k.

    (Our notifications carry net changes, deletions first, so this finds nothing in them; it is
    kept for update lists built otherwise.)
    """
    out = list(ul)
    for j, uj in enumerate(ul):
        if not uj.insert or uj not in out:
            continue
        rel = view.relation(uj.relation)
        for uk in ul[j + 1:]:
            if not uk.insert and uk in out and uk.relation == uj.relation and rel.key_of(uk.row) == rel.key_of(uj.row):
                out.remove(uj)
                out.remove(uk)
                break
    return out
