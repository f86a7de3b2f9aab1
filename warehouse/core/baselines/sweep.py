"""SWEEP and Nested SWEEP (Agrawal, El Abbadi, Singh & Yurek 1997): view changes swept source by
source, with the interference of concurrent updates removed locally, by no query.

The warehouse keeps the notifications it has received and not yet applied in one queue (UMQ),
in arrival order. SWEEP takes them one at a time: the view change of an update ΔR_k starts as
ΔR_k and is swept through the view's other relations one sub-query each, along the planner's
`scan` plan (leftwards, then rightwards; a step with no join edge asks for the whole relation).
An answer from R_j reflects R_j as it is when the source reads it, which under FIFO delivery
means: with every update of R_j that sits in the queue behind the one being processed, for those
were committed before the answer was read, so sent and received before it. Their effect is
removed from the answer before the partial change is joined with it (an inserted row is taken
out of the answer, a deleted one put back): local compensation. Each notification gets a view
state of its own, so under FIFO without loss the view is completely consistent.

Nested SWEEP computes one composite view change for several notifications and applies it as
one state: strongly consistent, and a burst of updates costs one sweep per changed relation
instead of one per update.

Decisions where the paper leaves room (each pinned in tests/test_sweep.py):
- Views are join trees (chains, stars), not only chains: the sweep order is the planner's `scan`
  plan (warehouse.core.planner), and join edges the plan does not follow are checked on the
  finished change. With `join-graph` access the sweep follows that plan's relations instead
  (no cartesian products). Whatever the access path, a sub-query names one relation: a source
  holding several relations of the view is swept one relation at a time (the compensation is
  only local if each answer is one relation's rows that join known values: the partners of a
  row deleted by a queued update would be missing from a two-relation answer).
- The view is the user's view kept as a bag with counts (no key widening); every change is a
  signed multiset (a deleted row counts -1), applied to a MaterializedView.
- A notification is one source transaction and may change several relations: it gets one state,
  whose change is the sum over its changed relations k, in view order, of ΔR_k swept through
  the others, the relations it changed before k taken at their new state and those after k at
  their old state. So an answer is compensated for the notification's own later changes as well
  as for every update queued behind it. In general a round of notifications F (SWEEP: one;
  Nested SWEEP: several) changes the view by Σ_k ΔF_k ⋈ R_{<k}(after F) ⋈ R_{>k}(before F): the
  answer for R_j subtracts the queued changes of R_j beyond F when j comes before k, and those
  of F and beyond when j comes after k (`Term.cut`).
- Compensation uses the queue as it is when the answer arrives, not the DSV the answer carries:
  the paper's sources send no versions, and the claim rests on FIFO delivery.
- A sweep whose partial change becomes empty stops: the rest of its join is empty and no
  sub-query is sent for it. A notification that changes no view relation still gets its
  (unchanged) state.
- Delivery: as the Strobe family: notifications are acknowledged through the transport
  (NotificationLog), never deduplicated, never asked for again; a duplicate is processed again
  and a lost one never. An unanswered sub-query is sent again after `query_timeout` (2.0), and
  an answer to a sub-query no longer outstanding is ignored.
- ViewQueried: ViewReady once the view reflects every notification received when the query
  came (at once if it already does); a steady stream cannot starve a read.
- Version vector of a state: per source, the highest DSV applied (the queue is in arrival order,
  so under FIFO that is every notification of the source up to it).
- Restart: not claimed (`restartable=False`). The view and version_state() would be enough to
  start again, but the claim does not survive the simulator's warehouse restarts: a crash
  between a batch's Delta commit and its acknowledgements makes the sources send again
  notifications the durable store already holds, which SWEEP, never deduplicating, processes
  twice; and notifications the lost process had received but not made durable come back only
  when their sources resend them, after answers that already reflect them (FIFO broken across
  the crash). Measured with restarts at rate 0.03 over 60 federations: SWEEP 6, Nested SWEEP 8
  schedules with no consistency at all.
- Nested SWEEP's composite: its first round takes every notification queued when it starts (a
  prefix of the queue, so of each source's stream); when a round's sweeps are all done, the
  notifications that arrived meanwhile are folded in as the next round, swept over the state
  after the earlier rounds. Recursion ends when a round finds nothing new arrived, or after
  `depth` rounds (4): under a steady stream a composite is then applied and the rest waits for
  the next one. Fewer queries: each round sweeps each changed relation once, however many of
  its notifications changed it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fedlab.fedmodel.subquery import Answer, Subquery, SubqueryRelation
from fedlab.fedmodel.transactions import Notification
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.algorithm import Counters
from fedlab.warehouse.core.baselines.applied_versions import AppliedVersions
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
from fedlab.warehouse.core.planner import PlannedRelation, plan
from fedlab.warehouse.core.registry import Assumptions, Plugin, Settings
from fedlab.warehouse.core.timings import QUERY_TIMEOUT
from fedlab.warehouse.core.view_state import MaterializedView

Derivation = tuple   # one base row per relation swept so far, in the term's order


@dataclass
class SweepCounters(Counters):
    subqueries: int = 0
    retries: int = 0
    duplicates: int = 0        # answers to sub-queries no longer outstanding
    compensations: int = 0     # answers corrected locally for queued updates
    states: int = 0
    folded: int = 0            # Nested SWEEP: notifications folded into a composite after its first round


@dataclass(eq=False)
class Term:
    """ΔF_k swept through the other relations: one term of a round's view change."""

    relation: str
    order: tuple[str, ...]                 # relation k, then the plan's relations in sweep order
    steps: tuple[PlannedRelation, ...]
    start: int                             # the round is UMQ[start:end]
    end: int
    partial: Counter                       # Derivation -> signed count
    step: int = 0
    outstanding: str | None = None         # the id of its sub-query in flight
    probe: frozenset | None = None         # its join values (None: all rows)
    non_tree: tuple = ()                   # join edges the plan does not follow: checked at the end

    @property
    def done(self) -> bool:
        return self.step >= len(self.steps) or not self.partial

    def cut(self, view: ViewDef, relation: str) -> int:
        """From which queue position the queued changes of `relation` are removed from its answer:
        before k in view order it is wanted after the round, after k before it."""
        before = view.relations.index(relation) < view.relations.index(self.relation)
        return self.end if before else self.start


@dataclass
class Composite:
    """The notifications UMQ[0:end] whose change is being computed, as rounds of terms."""

    end: int
    rounds: int = 1
    terms: list[Term] = field(default_factory=list)
    delta: Counter = field(default_factory=Counter)


class Sweep(AppliedVersions):
    """SWEEP: one notification at a time, one view state each (complete under FIFO, no loss)."""

    depth = 1           # rounds per composite
    whole_queue = False  # a composite's first round takes the whole queue (Nested SWEEP)

    def __init__(self, view: ViewDef, rows: dict[tuple, int], brv: dict[str, int], dsv: dict[str, int],
                 access: str = "scan", query_timeout: float = QUERY_TIMEOUT):
        super().__init__(brv, dsv)
        self.view = view
        self.access = access
        self.query_timeout = query_timeout
        self.mview = MaterializedView(rows, strict=False)   # a broken assumption may drive counts negative
        self.umq: list[Notification] = []
        self.composite: Composite | None = None
        self.trace: list[dict] = []
        self.counters = SweepCounters()
        self._names = {r.lower(): r for r in view.relations}
        self._routes: dict[str, Term] = {}
        self.unanswered = Unanswered(query_timeout)
        self._ids = 0
        self._received = 0          # notifications received, ever
        self._applied = 0           # of those, applied
        self._reads: list[int] = []  # ViewQueried waiting until this many are applied

    # ---- events ----

    def handle(self, event) -> list:
        if isinstance(event, NotificationArrived):
            n = event.notification
            _, acknowledgement = self._take_in(n)   # a copy is queued again: SWEEP assumes none comes
            actions: list = [acknowledgement]
            self.umq.append(n)
            self._received += 1
            actions += self._advance(event.now)
        elif isinstance(event, AnswerArrived):
            actions = self._on_answer(event.answer, event.now)
        elif isinstance(event, TimerFired):
            actions = self._retry(event.now)
        elif isinstance(event, ResendRefused):
            actions = []   # never asks for a resend
        elif isinstance(event, ViewQueried):
            if self._applied >= self._received:
                return [ViewReady()]
            self._reads.append(self._received)
            actions = []
        else:
            raise TypeError(f"unknown event {event!r}")
        return actions

    # ---- composites, rounds and terms ----

    def _advance(self, now: float) -> list:
        """Starts what can start and applies what is done, until it waits for an answer."""
        actions: list = []
        while True:
            if self.composite is None:
                if not self.umq:
                    return actions
                self.composite = Composite(0)
                actions += self._start_round(len(self.umq) if self.whole_queue else 1, now)
            c = self.composite
            if any(t.outstanding for t in c.terms):
                return actions
            if c.rounds < self.depth and len(self.umq) > c.end:
                c.rounds += 1
                self.counters.folded += len(self.umq) - c.end
                self.trace.append({"event": "fold", "round": c.rounds,
                                   "transactions": [n.txn_id for n in self.umq[c.end:]]})
                actions += self._start_round(len(self.umq), now)
                continue
            actions += self._apply(c)

    def _start_round(self, end: int, now: float) -> list:
        c = self.composite
        start, c.end = c.end, end
        changes: dict[str, Counter] = {}
        for n in self.umq[start:end]:
            for relation, rows in self._changes(n).items():
                changes.setdefault(relation, Counter()).update(rows)
        actions: list = []
        for relation in self.view.relations:
            rows = {r: k for r, k in changes.get(relation, {}).items() if k}
            if not rows:
                continue
            qplan = plan(self.view, relation, self.access)
            steps = tuple(pr for node in qplan.nodes for pr in node.relations)
            term = Term(relation, (relation, *(pr.relation for pr in steps)), steps, start, end,
                        Counter({(row,): k for row, k in rows.items()}), non_tree=qplan.non_tree_edges)
            c.terms.append(term)
            actions += self._next(term, now)
        return actions

    def _next(self, term: Term, now: float) -> list:
        """Sends the term's next sub-query, or finishes it."""
        while not term.done:
            pr = term.steps[term.step]
            probe = self._probe(term, pr)
            if probe is not None and not probe:
                term.partial = Counter()   # no join value: the join is empty
                break
            self._ids += 1
            sq = Subquery(f"s{self._ids}", pr.source,
                          (SubqueryRelation(pr.relation, None, pr.columns, pr.parent_columns,
                                            self.view.selection_sql(pr.relation)),),
                          () if probe is None else tuple(sorted(probe, key=repr)))
            term.outstanding, term.probe = sq.id, probe
            self._routes[sq.id] = term
            self.unanswered.sent(sq, now)
            self.counters.subqueries += 1
            return [SendSubquery(sq, f"{'+'.join(n.txn_id for n in self.umq[term.start:term.end])}/{term.relation}")]
        self._finish(term)
        return []

    def _probe(self, term: Term, pr: PlannedRelation) -> frozenset | None:
        if not pr.columns:
            return None
        i = term.order.index(pr.parent)
        rel = self.view.relation(pr.parent)
        values = {tuple(d[i][rel.index(c)] for c in pr.parent_columns) for d in term.partial}
        return frozenset(v for v in values if None not in v)

    def _on_answer(self, answer: Answer, now: float) -> list:
        term = self._routes.pop(answer.id, None)
        if term is None:
            self.counters.duplicates += 1
            return []
        self.unanswered.answered(answer.id)
        pr = term.steps[term.step]
        rows = Counter(answer.rows_of(pr.relation).rows)
        self._compensate(term, pr, rows)
        term.partial = self._join(term, pr, rows)
        term.step += 1
        term.outstanding = None
        return self._next(term, now) + self._advance(now)

    def _compensate(self, term: Term, pr: PlannedRelation, rows: Counter) -> None:
        """Removes from the answer the queued changes of its relation that the term must not see."""
        rel = self.view.relation(pr.relation)
        cut = term.cut(self.view, pr.relation)
        removed: Counter = Counter()
        for n in self.umq[cut:]:
            for row, k in self._changes(n).get(pr.relation, {}).items():
                if term.probe is None or tuple(row[rel.index(c)] for c in pr.columns) in term.probe:
                    removed[row] += k
        removed = Counter({r: k for r, k in removed.items() if k})
        if removed:
            rows.subtract(removed)
            self.counters.compensations += 1
            self.trace.append({"event": "local-compensation", "relation": pr.relation, "for": term.relation,
                               "transactions": [n.txn_id for n in self.umq[cut:]],
                               "removed": sorted(([list(r), k] for r, k in removed.items()), key=repr)})

    def _join(self, term: Term, pr: PlannedRelation, rows: Counter) -> Counter:
        rel = self.view.relation(pr.relation)
        by_value: dict[tuple, list] = {}
        for row, k in rows.items():
            if k:
                by_value.setdefault(tuple(row[rel.index(c)] for c in pr.columns), []).append((row, k))
        out: Counter = Counter()
        if pr.columns:
            i, prel = term.order.index(pr.parent), self.view.relation(pr.parent)
        for d, count in term.partial.items():
            value = tuple(d[i][prel.index(c)] for c in pr.parent_columns) if pr.columns else ()
            for row, k in by_value.get(value, ()):
                out[d + (row,)] += count * k
        return Counter({d: k for d, k in out.items() if k})

    def _finish(self, term: Term) -> None:
        """The term's full derivations, checked on the edges the plan did not follow, as view rows."""
        pos = {r: i for i, r in enumerate(term.order)}

        def value(d, relation, column):
            return d[pos[relation]][self.view.relation(relation).index(column)]

        delta = self.composite.delta
        for d, k in term.partial.items():
            if all(value(d, e.a, ca) is not None and value(d, e.a, ca) == value(d, e.b, cb)
                   for e in term.non_tree for ca, cb in e.pairs):
                delta[tuple(value(d, o.ref.relation, o.ref.column) for o in self.view.outputs)] += k
        term.partial = Counter()

    def _apply(self, c: Composite) -> list:
        covered, self.umq = self.umq[:c.end], self.umq[c.end:]
        self.composite = None
        delta = {r: k for r, k in c.delta.items() if k}
        self.mview.apply(delta)
        for n in covered:
            self._applied_dsv[n.source] = max(self._applied_dsv.get(n.source, 0), n.dsv)
            for change in n.changes:
                self.refreshed[change.relation] = max(self.refreshed.get(change.relation, 0), change.brv)
        self._applied += len(covered)
        self.counters.states += 1
        last = covered[-1]
        actions: list = [StateApplied(last.source, last.dsv, last.txn_id, delta, dict(self._applied_dsv),
                                      last.commit_time, tuple(n.txn_id for n in covered))]
        if any(r <= self._applied for r in self._reads):
            self._reads = [r for r in self._reads if r > self._applied]
            actions.append(ViewReady())
        return actions

    def _changes(self, n: Notification) -> dict[str, Counter]:
        """The notification's signed changes to view relations, rows passing the view's selection."""
        out: dict[str, Counter] = {}
        for change in n.changes:
            relation = self._names.get(change.relation.lower())
            if relation is None:
                continue
            test = self.view.selection_test(relation)
            rows = out.setdefault(relation, Counter())
            rows.update(r for r in change.added if test(r))
            rows.subtract(r for r in change.removed if test(r))
        return out

    def _retry(self, now: float) -> list:
        again = self.unanswered.overdue(now)
        self.counters.retries += len(again)
        return again

    # ---- the Algorithm interface ----

    @property
    def in_flight(self) -> int:
        return len(self.umq)

    @property
    def timeout(self) -> float:
        return self.query_timeout

    def next_timer(self) -> float | None:
        return self.unanswered.next_due()

    def view_rows(self) -> dict[tuple, int]:
        return self.mview.snapshot()


class NestedSweep(Sweep):
    """Nested SWEEP: a composite view change for the notifications queued when it starts and, round
    by round, those that arrive while it is computed (at most `depth` rounds); one state each."""

    whole_queue = True

    def __init__(self, *args, depth: int = 4, **kwargs):
        super().__init__(*args, **kwargs)
        self.depth = depth


PAPER = "Agrawal, El Abbadi, Singh & Yurek 1997, Efficient View Maintenance at Data Warehouses (SIGMOD)"
ASSUMPTIONS = Assumptions(fifo=True, no_loss=True, restartable=False)


def _make(cls):
    def factory(view: ViewDef, rows: dict, brv: dict, dsv: dict, settings: Settings = Settings()):
        return cls(view, rows, brv, dsv, settings.access or "scan", **settings.timings("query_timeout"))
    return factory


SWEEP = Plugin("sweep", PAPER, "complete",
               "one update at a time, swept source by source; queued updates compensated locally",
               _make(Sweep), ASSUMPTIONS, "scan")
NESTED_SWEEP = Plugin("nested-sweep", PAPER, "strong",
                      "SWEEP that folds updates arriving during a sweep into one composite view change",
                      _make(NestedSweep), ASSUMPTIONS, "scan")
