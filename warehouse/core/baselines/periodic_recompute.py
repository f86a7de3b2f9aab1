"""Periodic recomputation: the baseline a user picks when nothing else works (the Strobe paper's
Example 1 notes that commercial warehouses recompute their views, and section 1 why that is not
enough: a recomputation that reads sources at different moments is subject to the same anomalies).

Every `period` of time, at a timer event, the warehouse reads a snapshot of every source
(warehouse.core.snapshots: each view relation whole, one state per source) and replaces the view
with the recomputation over it, so every state is the view at the vector of the DSVs its
snapshot was read at, and the state claims that vector. A
round that finds every source where the view already is applies nothing. Notifications only tell
the warehouse how far behind the view is (they are acknowledged as they come); a sub-query
unanswered for a period is sent again.

The recomputation itself is the adapter's (docs/architecture.md 5: periodic recomputation is a
Spark job over source snapshots): the round ends with an EvaluateView action carrying the gathered
relations, and the view is replaced when ViewEvaluated comes back with that round's number. The
live warehouse runs a Spark job on its own thread meanwhile, the simulator answers at once with
warehouse.core.recompute. A job that failed ends its round without a state; the next round starts
a period after this one did, with fresh answers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from fedlab.fedmodel.subquery import Answer
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.algorithm import Counters
from fedlab.warehouse.core.baselines.applied_versions import AppliedVersions
from fedlab.warehouse.core.events import (
    AnswerArrived,
    EvaluateView,
    NotificationArrived,
    ResendRefused,
    StateApplied,
    TimerFired,
    ViewEvaluated,
    ViewQueried,
    ViewReady,
)
from fedlab.warehouse.core.snapshots import SnapshotRead
from fedlab.warehouse.core.timings import RECOMPUTE_PERIOD
from fedlab.warehouse.core.view_state import MaterializedView


@dataclass
class RecomputeCounters(Counters):
    subqueries: int = 0
    retries: int = 0
    rounds: int = 0
    rereads: int = 0       # a source asked again: its answers were read at different states
    duplicates: int = 0
    evaluations: int = 0   # recomputations that came back (ViewEvaluated) and replaced the view
    failed_evaluations: int = 0


class PeriodicRecompute(AppliedVersions):
    def __init__(self, view: ViewDef, rows: dict[tuple, int], brv: dict[str, int], dsv: dict[str, int],
                 period: float = RECOMPUTE_PERIOD):
        self.view = view
        self.period = period
        self.mview = MaterializedView(rows)
        super().__init__(brv, dsv)
        self.trace: list[dict] = []
        self.counters = RecomputeCounters()
        self.read: SnapshotRead | None = None   # this round's
        self.last_round = 0.0
        self.evaluating: dict | None = None   # the round whose EvaluateView is out: round, versions, refreshed
        self._ids = 0

    def handle(self, event) -> list:
        if isinstance(event, NotificationArrived):
            _, acknowledgement = self._take_in(event.notification)
            return [acknowledgement]
        if isinstance(event, AnswerArrived):
            return self._on_answer(event.answer)
        if isinstance(event, TimerFired):
            return self._on_timer(event.now)
        if isinstance(event, ViewEvaluated):
            return self._on_evaluated(event)
        if isinstance(event, ResendRefused):
            return []   # the next round repairs any loss
        if isinstance(event, ViewQueried):
            return [ViewReady()]   # a read sees the last round
        raise TypeError(f"unknown event {event!r}")

    def _on_timer(self, now: float) -> list:
        if self.evaluating is not None:
            return []   # a job may outlast a period; its adapter reports it either way
        if self.read is not None and not self.read.complete:
            retries = self.read.overdue(now, self.period)
            self.counters.retries += len(retries)
            return retries
        if now - self.last_round < self.period:
            return []
        self.last_round = now
        self.counters.rounds += 1
        self.read = SnapshotRead(self.view, self._new_id, now)
        return self._count(self.read.start())

    def next_timer(self) -> float | None:
        """When a TimerFired could next act: the next round, or a sub-query of this one to send
        again; None while a round's evaluation is out (ViewEvaluated ends it)."""
        if self.evaluating is not None:
            return None
        if self.read is not None and not self.read.complete:
            return self.read.next_due(self.period)
        return self.last_round + self.period

    def _new_id(self) -> str:
        self._ids += 1
        return f"r{self._ids}"

    def _count(self, sent: list) -> list:
        self.counters.subqueries += len(sent)
        return sent

    def _on_answer(self, answer: Answer) -> list:
        if self.read is None or not self.read.expects(answer):
            self.counters.duplicates += 1
            return []
        again = self.read.take(answer)
        if again:
            self.counters.rereads += 1
            return self._count(again)
        return self._evaluate() if self.read.complete else []

    def _evaluate(self) -> list:
        versions = {**self._applied_dsv, **self.read.dsv()}
        if versions == self._applied_dsv:
            return []   # nothing committed since the last round: no job to run
        action = EvaluateView(self.counters.rounds, self.view, self.read.relations())
        self.evaluating = {"round": action.round, "versions": versions, "refreshed": self.read.brv()}
        self.trace.append({"event": "evaluate-view", "round": action.round, "versions": dict(versions)})
        return [action]

    def _on_evaluated(self, event: ViewEvaluated) -> list:
        if self.evaluating is None or event.round != self.evaluating["round"]:
            self.counters.duplicates += 1   # not the round this core is waiting for
            return []
        pending, self.evaluating = self.evaluating, None
        if event.rows is None:
            self.counters.failed_evaluations += 1
            self.trace.append({"event": "evaluation-failed", "round": event.round})
            return []
        self.counters.evaluations += 1
        delta = Counter(event.rows)
        delta.subtract(self.mview.snapshot())
        self.mview = MaterializedView(dict(event.rows))
        self._applied_dsv = pending["versions"]
        self.refreshed.update(pending["refreshed"])
        return [StateApplied("*", event.round, f"recompute-{event.round}",
                             {r: c for r, c in delta.items() if c}, dict(pending["versions"]))]

    # ---- the Algorithm interface ----

    @property
    def in_flight(self) -> int:
        return sum(max(0, self.transport.highest(s) - self._applied_dsv.get(s, 0)) for s in self._applied_dsv)

    @property
    def timeout(self) -> float:
        return self.period

    def view_rows(self) -> dict[tuple, int]:
        return self.mview.snapshot()
