"""Salem et al. 2000 over the federation: Propagate (Figure 5), or rolling propagation with an
interval per relation (section 3.4), into a timed view delta, applied separately, so that the
view can be rolled forward to any point up to the high-water mark.

Each relation has a forward cursor, a point of the time line (warehouse.core.salem.timeline): the
view delta holds every change of the view whose relations' changes all lie at or before their
cursors, and the high-water mark is the earliest cursor (Theorem 4.3's minimum of t_comp).
A propagation step is one ComputeDelta(V, tau_old, tau_new) (warehouse.core.salem.compute_delta)
with tau_old the cursors and tau_new the cursors moved:
- Propagate (Figure 5): every cursor moves together to the latest point no unknown commit can
  precede (or `step_commits` commits past the mark: the propagation interval as a tuning knob);
  up to `steps_in_flight` steps are under way at once, each from where the one before leaves the
  cursors (their deltas add up, Lemma 4.2), and the mark moves as they finish, in order;
- rolling (`intervals`: relation -> seconds of the time line): the relation with the earliest
  cursor moves by its own interval (at least one commit, never past that point), as Figure 10
  chooses it; its forward query sees the other relations intended at their cursors, and is
  compensated at once by ComputeDelta. Figure 10 instead defers compensations to combine them
  (querylist, CompTime); as printed that is incomplete and, completed, fails for 3-way joins
  (docs/paper-notes.md), so it is not what runs here. Moving one cursor grows the box of propagated
  changes in one dimension only, so the forward queries never overlap and what each one
  covers is its own slab: the delta is exact, and the minimum-timestamp rule holds up to the
  mark (the oracle test, Definition 4.2, on random 2- to 4-way joins).
The change tables Δ^R are the notifications (the warehouse's capture of each source's log, as
DPropR's in section 5), kept from the high-water mark on; forward queries read the sources'
relations by sub-queries.

The apply process rolls the view forward with the view delta: σ_{a,b}(Δ) for a the view's point
and b any point up to the high-water mark (Definition 4.2). `continuous` apply rolls it one
commit at a time as soon as the mark passes it, which makes every commit a view state (complete,
in the time line's order); `on-demand` apply leaves the view where it is until RefreshRequested
names a point (point-in-time refresh), which may be decided long after that point passed.

Lost notifications are found by DSV gaps and asked again as Sze-Ling maintenance asks
(warehouse.core.missing_notifications; Salem's log capture does not need it); a sub-query unanswered for `query_timeout` is sent again. A source
whose log can no longer resend a lost notification stops the line there: the view delta past it
could not be computed (traced as `resend-refused`).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from fedlab.fedmodel.subquery import Answer, Subquery, SubqueryRelation
from fedlab.fedmodel.transactions import Notification
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.algorithm import Counters
from fedlab.warehouse.core.events import (
    AnswerArrived,
    NotificationArrived,
    RefreshRequested,
    ResendRefused,
    SendSubquery,
    StateApplied,
    TimerFired,
    ViewDeltaPropagated,
    ViewQueried,
    ViewReady,
)
from fedlab.warehouse.core.missing_notifications import MissingNotifications
from fedlab.warehouse.core.notification_log import NotificationLog
from fedlab.warehouse.core.salem.compute_delta import Call, ComputeDelta, Interval
from fedlab.warehouse.core.salem.timeline import INITIAL, PointError, Timeline, describe
from fedlab.warehouse.core.timings import QUERY_TIMEOUT, REORDER_ALLOWANCE, RESEND_TIMEOUT
from fedlab.warehouse.core.view_state import MaterializedView

APPLY_MODES = ("continuous", "on-demand")


@dataclass(frozen=True)
class SalemOptions:
    apply: str = "continuous"
    step_commits: int | None = None   # Propagate: at most this many commits per step (None: all stable ones)
    steps_in_flight: int = 4          # Propagate: steps under way at once (rolling: one)
    intervals: tuple[tuple[str, float], ...] = ()   # rolling: (relation, seconds) for each relation
    query_timeout: float = QUERY_TIMEOUT          # warehouse.core.timings
    resend_timeout: float = RESEND_TIMEOUT
    reorder_allowance: float = REORDER_ALLOWANCE
    # How long after its commit time a source's commit may still be invisible to its reads: an
    # answer read at time T vouches only for the commits stamped before T - clock_allowance
    # (Timeline.heard). Live, a commit is stamped when its call arrives and is visible a group
    # commit later (milliseconds); in the simulator commits are atomic at whole time steps.
    clock_allowance: float = 0.5
    probe_interval: float = 0.1        # a quiet source is asked how far it is at most this often

    def __post_init__(self):
        if self.apply not in APPLY_MODES:
            raise ValueError(f"unknown apply mode {self.apply!r} (one of {', '.join(APPLY_MODES)})")
        if self.step_commits is not None and self.step_commits < 1:
            raise ValueError(f"step_commits must be at least 1, not {self.step_commits}")
        if any(not seconds > 0 for _, seconds in self.intervals):
            raise ValueError("a rolling interval must be a positive number of seconds")
        if self.steps_in_flight < 1:
            raise ValueError(f"steps_in_flight must be at least 1, not {self.steps_in_flight}")
        if self.intervals and self.step_commits is not None:
            raise ValueError("step_commits is Propagate's; rolling propagation takes intervals per relation")


@dataclass
class Step:
    """One propagation step under way: its ComputeDelta, and the cursors it moves, to where."""

    delta: ComputeDelta
    moves: dict[str, tuple]


@dataclass
class SalemCounters(Counters):
    subqueries: int = 0
    retries: int = 0
    resends: int = 0
    probes: int = 0           # sub-queries asked only to learn how far a quiet source's line reaches
    steps: int = 0            # propagation steps completed (ComputeDelta calls on the view)
    queries: int = 0          # propagation queries run: forward and compensation
    delta_rows: int = 0       # timed view delta rows produced
    duplicates: int = 0
    refreshes: int = 0


class Salem:
    def __init__(self, view: ViewDef, rows: dict[tuple, int], brv: dict[str, int], dsv: dict[str, int],
                 options: SalemOptions = SalemOptions()):
        self.view = view
        self.options = options
        self.mview = MaterializedView(rows)
        self.log = NotificationLog(dsv)
        self.timeline = Timeline(dsv)
        self.refreshed = dict(brv)            # each relation's BRV at the view's point
        if options.intervals and set(dict(options.intervals)) != set(view.relations):
            raise ValueError(f"rolling propagation needs an interval for each relation of the view "
                             f"({', '.join(view.relations)})")
        self.materialized = INITIAL           # the point the view is at
        self.cursors = {r: INITIAL for r in view.relations}   # each relation's forward progress
        self.view_delta: dict[tuple, Counter] = {}   # timestamp key -> view row -> count, past `materialized`
        self.steps: list[Step] = []          # under way, in start order
        self.ahead = dict(self.cursors)       # the cursors once every step under way is done
        self.propagated: list = []            # view delta rows not yet handed to the adapter
        self.sent: dict[str, tuple[float, Subquery]] = {}
        self.probed_at: dict[str, float] = {}   # source -> when its last probe went out
        self.missing = MissingNotifications(self.log, options.reorder_allowance, options.resend_timeout)
        self.stopped: set[str] = set()        # sources whose lost notifications cannot be resent
        self.trace: list[dict] = []
        self.counters = SalemCounters()
        self._ids = 0

    # ---- events ----

    def handle(self, event) -> list:
        if isinstance(event, NotificationArrived):
            return self._on_notification(event.notification, event.now)
        if isinstance(event, AnswerArrived):
            return self._on_answer(event.answer, event.now)
        if isinstance(event, TimerFired):
            return self._on_timer(event.now)
        if isinstance(event, RefreshRequested):
            return self.refresh(self.point(event))
        if isinstance(event, ResendRefused):
            self.stopped.add(event.source)
            self.trace.append({"event": "resend-refused", "source": event.source, "from_dsv": event.from_dsv})
            return []
        if isinstance(event, ViewQueried):
            return [ViewReady()]   # a read sees the view at its point, which is a consistent state
        raise TypeError(f"unknown event {event!r}")

    def _on_notification(self, n: Notification, now: float) -> list:
        self.missing.received(n.source, n.dsv, now)
        if not self.log.add(n):
            self.counters.duplicates += 1
        for dsv in range(self.timeline.known_through(n.source) + 1, self.log.contiguous(n.source) + 1):
            note = self.log.get(n.source, dsv)
            self.timeline.add(n.source, dsv, note.commit_time, note.txn_id,
                              {c.relation: c.brv for c in note.changes})
        return [self.log.acknowledgement(n.source), *self._progress(now)]

    def _on_answer(self, answer: Answer, now: float) -> list:
        sent = self.sent.pop(answer.id, None)
        if sent is None:
            self.counters.duplicates += 1
            return []
        self.missing.answered(answer.source, answer.dsv)
        self.timeline.heard(answer.source, answer.dsv, answer.read_time - self.options.clock_allowance)
        step = next((s for s in self.steps if s.delta.expects(answer)), None)
        actions = self._send(step.delta.take(answer), now) if step else []
        return actions + self._progress(now)

    def _on_timer(self, now: float) -> list:
        actions = []
        for sid, (at, sq) in list(self.sent.items()):
            if now - at >= self.options.query_timeout:
                self.sent[sid] = (now, sq)
                self.counters.retries += 1
                actions.append(SendSubquery(sq, "salem"))
        for source in self.timeline.start:
            asked = self.missing.ask(source, now)
            self.counters.resends += len(asked)
            actions += asked
        return actions + self._progress(now)

    # ---- the propagate process ----

    @property
    def high_water(self) -> tuple:
        return min(self.cursors.values())

    def _progress(self, now: float) -> list:
        actions = []
        while True:
            for step in self.steps:
                actions += self._send(step.delta.ready(self.log.contiguous), now)
            while self.steps and self.steps[0].delta.done:   # the mark moves in step order
                self._finish_step(self.steps.pop(0))
            if len(self.steps) >= (1 if self.options.intervals else self.options.steps_in_flight):
                break
            moves = self._next_moves()
            if not moves:
                actions += self._probe(now)
                break
            actions += self._start_step(moves, now)
        if self.propagated:
            actions.append(ViewDeltaPropagated(tuple(self.propagated)))
            self.propagated = []
        if self.options.apply == "continuous":
            actions += self.refresh(self.high_water)
        return actions

    def _next_moves(self) -> dict[str, tuple]:
        """The cursors the next step moves, from where the steps under way leave them, to where:
        all of them to the target (Propagate), or the earliest one by its interval (rolling); {}
        when nothing stable lies past them."""
        stable = self.timeline.stable_point()
        start = min(self.ahead.values())
        if not self.options.intervals:
            if stable <= start:
                return {}
            target = stable
            if self.options.step_commits is not None:
                target = self.timeline.commits_between(start, stable)[:self.options.step_commits][-1].key
            return {r: target for r in self.cursors}
        relation = min(self.ahead, key=lambda r: self.ahead[r])
        ahead = self.timeline.commits_between(start, stable)
        if not ahead:
            return {}
        since = ahead[0].time if start == INITIAL else start[0]
        within = [c for c in ahead if c.time <= since + dict(self.options.intervals)[relation]] or ahead[:1]
        return {relation: within[-1].key}

    def _start_step(self, moves: dict[str, tuple], now: float) -> list:
        """ComputeDelta(V, cursors, cursors moved), the cursors as the steps under way leave them:
        consecutive steps' intervals meet, so their deltas add up (Lemma 4.2)."""
        step = Step(ComputeDelta(self.view, self._changes, self._new_id), moves)
        old = self._positions(self.ahead)
        self.ahead.update(moves)
        self.steps.append(step)
        view = Call((None,) * len(self.view.relations), 1, old, self._positions(self.ahead))
        return self._send(step.delta.start(view), now)

    def _finish_step(self, step: Step) -> None:
        self.counters.steps += 1
        self.counters.queries += step.delta.queries
        self.counters.delta_rows += len(step.delta.rows)
        for row, count, ts in step.delta.rows:
            self.view_delta.setdefault(ts, Counter())[row] += count
        self.propagated += step.delta.rows
        self.trace.append({"event": "propagated", "moved": {r: describe(p) for r, p in step.moves.items()},
                           "queries": step.delta.queries, "delta_rows": len(step.delta.rows)})
        self.cursors.update(step.moves)
        for source, dsv in self.timeline.vector(self.high_water).items():
            self.log.forget_through(source, dsv)   # every cursor's next interval starts past them

    def _positions(self, cursors: dict[str, tuple]) -> dict[int, int]:
        """Per view position, the DSV of its relation's source at its relation's cursor."""
        return {i: self.timeline.vector(cursors[r])[self.view.relation(r).source] for i, r in enumerate(self.view.relations)}

    def _changes(self, relation: str, interval: Interval) -> dict[tuple, list]:
        """R_{x,y}: the received changes of `relation` at its source's DSVs in (x, y], each row
        with its (count, timestamp key) per change."""
        source = self.view.relation(relation).source
        out: dict[tuple, list] = {}
        for dsv in range(interval[0] + 1, interval[1] + 1):
            change = self.log.get(source, dsv).change(relation)
            if change is None:
                continue
            key = self.timeline.commit(source, dsv).key
            for row in change.removed:
                out.setdefault(row, []).append((-1, key))
            for row in change.added:
                out.setdefault(row, []).append((1, key))
        return out

    def _probe(self, now: float) -> list:
        """Asks each source that holds the line back for nothing, at most every `probe_interval`:
        its answer's DSV and read time tell the warehouse how far its commits reach (Timeline.heard);
        a lost probe is sent again like any sub-query."""
        actions = []
        for source in self.timeline.lagging():
            if source in self.stopped or now - self.probed_at.get(source, float("-inf")) < self.options.probe_interval:
                continue
            rel = next(self.view.relation(r) for r in self.view.relations if self.view.relation(r).source == source)
            column = (rel.key or rel.columns)[:1]
            sq = Subquery(self._new_id(), source, (SubqueryRelation(rel.name, None, column, column),), ())
            self.probed_at[source] = now
            self.counters.probes += 1
            actions += self._send([sq], now)
        return actions

    def _send(self, subqueries: list[Subquery], now: float) -> list:
        self.counters.subqueries += len(subqueries)
        for sq in subqueries:
            self.sent[sq.id] = (now, sq)
        return [SendSubquery(sq, "salem") for sq in subqueries]

    def _new_id(self) -> str:
        self._ids += 1
        return f"p{self._ids}"

    # ---- the apply process: point-in-time refresh ----

    def point(self, request: RefreshRequested) -> tuple:
        """The point a refresh names: a wall time, a vector of DSVs (a source it leaves out where
        the view is), or (neither) the high-water mark."""
        if request.as_of is not None:
            return self.timeline.point_at_time(request.as_of, self.high_water)
        if request.vector is not None:
            return self.timeline.point_of({**self.applied_dsv(), **dict(request.vector)})
        return self.high_water

    def refresh(self, point: tuple) -> list[StateApplied]:
        """Rolls the view forward to `point`, one commit at a time (each a view state):
        σ_{a,b}(Δ) applied for consecutive commits a, b. PointError outside [view's point, high-water mark]."""
        if point > self.high_water:
            raise PointError(f"{describe(point)} is beyond the high-water mark ({describe(self.high_water)})")
        if point < self.materialized:
            raise PointError(f"{describe(point)} is before the view's current state ({describe(self.materialized)})")
        applied = []
        for commit in self.timeline.commits_between(self.materialized, point):
            delta = {row: c for row, c in self.view_delta.pop(commit.key, Counter()).items() if c}
            self.mview.apply(delta)
            self.materialized = commit.key
            self.refreshed.update(commit.brv)
            applied.append(StateApplied(commit.source, commit.dsv, commit.txn_id, delta,
                                        self.timeline.vector(commit.key), commit.time))
        if applied and self.options.apply == "on-demand":
            self.counters.refreshes += 1
        return applied

    # ---- the Algorithm interface ----

    @property
    def in_flight(self) -> int:
        reflected = self.timeline.vector(self.high_water if self.options.apply == "on-demand" else self.materialized)
        return sum(max(0, self.log.highest(s) - reflected[s]) for s in reflected if s not in self.stopped)

    @property
    def timeout(self) -> float:
        return max(self.options.query_timeout, self.options.resend_timeout)

    def view_rows(self) -> dict[tuple, int]:
        return self.mview.snapshot()

    def received_through(self, source: str) -> int:
        return self.log.contiguous(source)

    def applied_dsv(self) -> dict[str, int]:
        return self.timeline.vector(self.materialized)

    def version_state(self) -> dict:
        """Sze-Ling's shape, each source with the DSV the view delta reaches, and (scope `salem`)
        the wall times a reader of the view delta may roll the view to: from the view's point
        (`materialized_us`) to below `reach_us`, in microseconds."""
        high_water = self.timeline.vector(self.high_water)
        return {"relations": {r: {"processing": v, "refreshed": v} for r, v in self.refreshed.items()},
                "sources": {s: {"applied_dsv": d, "high_water": high_water[s]} for s, d in self.applied_dsv().items()},
                "salem": {"view_delta": {"materialized_us": _micros(self.materialized[0]),
                                         "reach_us": _micros(self.timeline.reach(self.high_water))}}}


def _micros(seconds: float) -> int:
    """Whole microseconds; the unbounded ends as 0 and the largest BIGINT."""
    if seconds == float("-inf"):
        return 0
    if seconds == float("inf"):
        return 2 ** 63 - 1
    return math.floor(seconds * 1_000_000)
