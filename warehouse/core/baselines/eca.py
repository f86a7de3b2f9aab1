"""ECA and ECA-Key (Zhuge, Garcia-Molina, Hammer & Widom, "View Maintenance in a Warehousing
Environment", SIGMOD 1995): the Eager Compensating Algorithm for a view over one source that
holds several relations, and its streamlined version for views that hold every relation's key.

ECA: for each update U_i the warehouse sends Q_i = V<U_i> - sum over Q_j in UQS of Q_j<U_i>, a
compensating term for every query still unanswered when U_i arrives, and puts Q_i in UQS. V<U>
replaces U's relation by U's tuple (signed: + for an insertion, - for a deletion); Q_j<U_i>
replaces, in every term of Q_j that still reads U_i's relation, that relation by U_i's tuple
(the term's sign times U_i's; a term that no longer reads the relation does not change). The
answers A_i are signed bags of view rows, added to COLLECT; when UQS is empty, MV = MV + COLLECT:
strong consistency for one source whose messages arrive in order (the Strobe paper's Figure 7.2).

ECA-Key: the view holds every relation's key (the view widened as for the Strobe family,
warehouse.core.baselines.keyed_view). A deletion sends no query: key_delete removes its tuples
from what was collected and from MV, both at quiescence, in arrival order with the answers (the
paper's COLLECT, which starts as MV and becomes MV when UQS is empty). An insertion sends V<U_i>
without compensation; answers are added as a set (a tuple already there is not added again).
As the Strobe paper notes (section 5.2, after Example 3), this mishandles the deletion of a
tuple that takes part in an ongoing insertion's query: the query substitutes the inserted tuple
itself, so its answer still derives rows from it after the deletion (Strobe's pending(Q)
corrects that). ECA-Key is reproduced as written, that case included (tests/test_eca.py).

Decisions where the paper or this testbed leaves room, each tested in tests/test_eca.py:
- Atomic evaluation. In the paper the source evaluates Q_i, all its terms, in one go at one
  state. Here each sub-query is read at its own source state (the answer's DSV), and a term with
  pinned relations may need several sub-queries (warehouse.core.planner.pin). A query's answer
  is accepted only when all its sub-answers from one source carry the same DSV; otherwise all of
  that query's sub-queries are asked again, its terms unchanged: the compensation stays right
  because the query stays in UQS until it is answered, so every update that arrives meanwhile
  compensates it.
- Transactions. A notification is one source transaction, read as its updates in the order
  warehouse.core.baselines.strobe.updates_of gives (deletions before insertions, relation by
  relation). Each update is an update of the paper: it gets its own Q_i, which compensates the
  queries of the transaction's earlier updates as well (they are in UQS). MV moves only when UQS
  is empty after a whole notification, so one state covers whole transactions: strong for
  source-local transactions too.
- Several sources. Both run on views over several sources (Example 1 of the Strobe paper shows
  them failing there); one source is the assumption they claim, not one they enforce.
- ECA keeps the user's view as a bag (counts, no widening), so a broken assumption can drive a
  count below zero; the view then shows it and the checker reports it (no exception).
- Delivery, as for the Strobe family: notifications are acknowledged through the transport and
  processed in arrival order, never deduplicated, a lost one never asked for; an unanswered
  sub-query is sent again after `query_timeout`. A read (ViewQueried) is answered at once: the
  view moves only at quiescence.
- The version vector a state claims: per source, the highest DSV of a notification processed.
- Restarts: neither claims it can restart from the durable store. ECA-Key keeps the widened
  view, which the store does not hold; ECA keeps the user's view, but a restart delivers
  notifications again that it processes twice, never deduplicating (as SWEEP).
- ECA-Key traces each deletion of a tuple whose own insertion query is unanswered
  ("deleted-during-its-query"), the case the Strobe paper says it mishandles; it does nothing else
  about it.
- Cost: ECA's compensating terms multiply. Each update substitutes its tuple into every term in
  UQS that still reads its relation and that the tuple joins, so a query holds up to one term per
  combination of in-flight tuples of distinct relations; terms of one shape are added up and
  dropped at zero, nothing else is saved (tests/test_eca.py keeps its random views to four
  relations for time).

The classes are `EagerCompensating` (ECA's own expansion: the name `ECA` is its plug-in's) and
`ECAKey`; the plug-ins `ECA` and `ECA_KEY` (entry points `eca`, `eca-key`) declare their claims.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fedlab.fedmodel.subquery import Answer
from fedlab.fedmodel.transactions import Notification
from fedlab.warehouse.core.baselines.source_evaluate import Evaluation, joining
from fedlab.warehouse.core.baselines.strobe import Insert, KeyDelete, StrobeCounters, StrobeFamily, Update, updates_of
from fedlab.warehouse.core.registry import Assumptions, Plugin, Settings
from fedlab.warehouse.core.view_state import MaterializedView


@dataclass(frozen=True)
class Term:
    """sign * V with `relation` replaced by `row` and each relation of `pinned` by its tuple."""

    sign: int
    relation: str
    row: tuple
    pinned: tuple[tuple[str, tuple], ...] = ()   # (relation, tuple), sorted

    @property
    def substituted(self) -> set[str]:
        return {self.relation, *(r for r, _ in self.pinned)}

    @property
    def shape(self) -> tuple:
        """The term without its sign: equal shapes add up."""
        return self.relation, self.row, self.pinned

    def describe(self) -> list:
        return [self.sign, self.relation, list(self.row), {r: list(t) for r, t in self.pinned}]


def sign_of(u: Update) -> int:
    return 1 if u.insert else -1


@dataclass(eq=False)   # one query is one object in UQS
class EcaQuery:
    """Q_i in UQS: its terms, fixed when it was sent, and the evaluations of the current attempt."""

    update: Update
    terms: tuple[Term, ...]
    evaluations: list[Evaluation] = field(default_factory=list)
    read_at: dict[str, int] = field(default_factory=dict)   # source -> the DSV its sub-answers were read at

    @property
    def done(self) -> bool:
        return all(e.done for e in self.evaluations)


@dataclass
class EcaCounters(StrobeCounters):
    reasks: int = 0            # queries asked again: their sub-answers came from two states of one source


class EcaFamily(StrobeFamily):
    """What ECA and ECA-Key share: updates taken one by one, queries evaluated as if atomically
    at one state per source, and MV moved only when UQS is empty."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.counters = EcaCounters()
        self.covered: list[Notification] = []   # notifications processed since the last state

    def _receive(self, n: Notification, fresh: bool, now: float) -> list:
        self.covered.append(n)
        actions: list = []
        for u in updates_of(self.view, n):
            actions += self._update(u, now)
        return actions

    def _update(self, u: Update, now: float) -> list:
        raise NotImplementedError

    def _collected(self) -> Counter:
        """Applies what was collected to MV; returns the delta."""
        raise NotImplementedError

    def _at_quiescence(self) -> list:
        if self.uqs or not self.covered:
            return []
        state = self._state(self._collected(), self.covered)
        self.covered = []
        return [state]

    # ---- queries, as if evaluated atomically ----

    def _send_query(self, query: EcaQuery, now: float) -> list:
        """Sends Q_i; it stays in UQS until answered."""
        self.trace.append({"event": "eca-query", "transaction": query.update.notification.txn_id,
                           "update": [query.update.relation, list(query.update.row), sign_of(query.update)],
                           "terms": [t.describe() for t in query.terms]})
        self._new_attempt(query)
        return self._ask(query, now)

    def _new_attempt(self, query: EcaQuery) -> None:
        label = query.update.notification.txn_id
        query.evaluations = [self._evaluation(t.relation, [t.row], label, {r: (row,) for r, row in t.pinned})
                             for t in query.terms]
        query.read_at = {}

    def _on_answer(self, answer: Answer, now: float) -> list:
        route = self._routes.get(answer.id)
        if route is not None:
            query = route[0]
            first = query.read_at.setdefault(answer.source, answer.dsv)
            if first != answer.dsv:
                return self._ask_again(query, answer, first, now)
        return super()._on_answer(answer, now)

    def _ask_again(self, query: EcaQuery, answer: Answer, first: int, now: float) -> list:
        """Two sub-answers of one query read at two states of a source: every sub-query again."""
        for sid in [sid for sid, (q, _) in self._routes.items() if q is query]:
            del self._routes[sid]
            self.unanswered.answered(sid)
        self.counters.reasks += 1
        self.trace.append({"event": "re-ask", "transaction": query.update.notification.txn_id,
                           "source": answer.source, "dsvs": [first, answer.dsv]})
        self._new_attempt(query)
        actions: list = []
        for ev in query.evaluations:
            actions += self._send(query, ev, ev.start(), now)
        return actions + self._finish(query, now)

    @property
    def in_flight(self) -> int:
        return len(self.covered)


class EagerCompensating(EcaFamily):
    """ECA (the Eager Compensating Algorithm): compensating queries, signed answers collected
    into a bag until UQS is empty."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The user's view as a bag with counts: no keys needed, none added.
        self.view = self.user_view
        self.mview = MaterializedView(self.mview.snapshot(), strict=False)
        self.collect: Counter = Counter()

    def _update(self, u: Update, now: float) -> list:
        if not self._passes(u):
            return []   # V<U_i> and every Q_j<U_i> are empty
        terms: dict[tuple, int] = {(u.relation, u.row, ()): sign_of(u)}
        for query in self.uqs:
            for term in query.terms:
                compensating = self._substitute(term, u)
                if compensating is not None:
                    terms[compensating.shape] = terms.get(compensating.shape, 0) - compensating.sign
        kept = tuple(Term(sign, *shape) for shape, sign in terms.items() if sign)
        self.counters.compensations += sum(1 for t in kept if t.pinned)
        if not kept:
            return []
        return self._send_query(EcaQuery(u, kept), now)

    def _substitute(self, term: Term, u: Update) -> Term | None:
        """term<U>: U's tuple for U's relation; None where the term is empty or does not read it."""
        if u.relation in term.substituted:
            return None
        known = {term.relation: (term.row,), **{r: (row,) for r, row in term.pinned}}
        if not joining(self.view, u.relation, [u.row], known):
            return None
        pinned = tuple(sorted((*term.pinned, (u.relation, u.row)), key=repr))
        return Term(term.sign * sign_of(u), term.relation, term.row, pinned)

    def _answered(self, query: EcaQuery, now: float) -> list:
        for term, ev in zip(query.terms, query.evaluations):
            for row in ev.answer().values():
                self.collect[row] += term.sign
        return []

    def _collected(self) -> Counter:
        delta = Counter({row: c for row, c in self.collect.items() if c})
        self.mview.apply(delta)
        self.collect = Counter()
        return delta


class ECAKey(EcaFamily):
    """ECA-Key: local key deletions, uncompensated insertion queries, answers kept as a set."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.action_list: list = []   # COLLECT's changes in arrival order: key_delete(U), insert(A)

    def _update(self, u: Update, now: float) -> list:
        if not u.insert:
            self._note_the_known_anomaly(u)
            self.action_list.append(KeyDelete(u))
            return []
        if not self._passes(u):
            return []
        return self._send_query(EcaQuery(u, (Term(1, u.relation, u.row),)), now)

    def _note_the_known_anomaly(self, u: Update) -> None:
        """Traces a deletion of a tuple whose own insertion query is unanswered: its answer will
        still derive rows from that tuple (the Strobe paper, 5.2). Nothing is done about it."""
        key = self.view.relation(u.relation).key_of(u.row)
        for query in self.uqs:
            root = query.update
            if root.relation == u.relation and self.view.relation(root.relation).key_of(root.row) == key:
                self.trace.append({"event": "deleted-during-its-query", "relation": u.relation,
                                   "deleted": list(u.row), "transaction": u.notification.txn_id,
                                   "queried_by": root.notification.txn_id})

    def _answered(self, query: EcaQuery, now: float) -> list:
        rows = frozenset(row for ev in query.evaluations for row in ev.answer().values())
        self.action_list.append(Insert(rows))
        return []

    def _collected(self) -> Counter:
        delta = self._apply_actions(self.action_list)
        self.action_list = []
        return delta


# ---- the plug-ins (warehouse.core.registry) ----

def _factory(cls):
    def make(view, rows, brv, dsv, settings: Settings):
        return cls(view, rows, brv, dsv, settings.access or "join-graph", **settings.timings("query_timeout"))
    make.__name__ = f"make_{cls.__name__}"
    return make


PAPER = "Zhuge, Garcia-Molina, Hammer & Widom 1995"
ECA = Plugin(
    name="eca", paper=PAPER, level="strong",
    description="compensating queries for the queries still unanswered; signed answers applied when none is pending",
    factory=_factory(EagerCompensating),
    # It keeps the view the durable store holds, but a restart delivers notifications again
    # (the durable ones not applied, and the sources' unacknowledged ones), which it processes
    # twice: it never deduplicates (no_loss). Tried: tests/test_eca.py.
    assumptions=Assumptions(fifo=True, no_loss=True, single_source=True, restartable=False))
ECA_KEY = Plugin(
    name="eca-key", paper=PAPER, level="strong",
    description="ECA for views that hold every key: deletions applied locally by key, insertions queried uncompensated",
    factory=_factory(ECAKey),
    assumptions=Assumptions(fifo=True, no_loss=True, keys_in_view=True, single_source=True, restartable=False))
