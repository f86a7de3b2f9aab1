"""Periodic recomputation: the baseline a user picks when nothing else works (the Strobe paper's
Example 1 notes that commercial warehouses recompute their views, and section 1 why that is not
enough: a recomputation that reads sources at different moments is subject to the same anomalies).

Every `period` of time, at a timer event, the warehouse asks every source for each view relation
whole (a sub-query with no probe: all rows that pass the view's selection on it) and replaces the
view with the recomputation over the answers. The answers of one source form a snapshot only if
they were read at one state (one DSV); if not, that source is asked again, so every state is the
view at the vector of the DSVs its answers were read at, and the state claims that vector. A
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

from fedmodel.subquery import Answer, Subquery, SubqueryRelation
from fedmodel.viewdef import ViewDef
from warehouse.core.algorithm import Counters
from warehouse.core.events import (AnswerArrived, EvaluateView, NotificationArrived, ResendRefused,
                                   SendSubquery, StateApplied, TimerFired, ViewEvaluated,
                                   ViewQueried, ViewReady)
from warehouse.core.notification_log import NotificationLog
from warehouse.core.view_state import MaterializedView


@dataclass
class RecomputeCounters(Counters):
    subqueries: int = 0
    retries: int = 0
    rounds: int = 0
    rereads: int = 0       # a source asked again: its answers were read at different states
    duplicates: int = 0
    evaluations: int = 0   # recomputations that came back (ViewEvaluated) and replaced the view
    failed_evaluations: int = 0


class PeriodicRecompute:
    def __init__(self, view: ViewDef, rows: dict[tuple, int], brv: dict[str, int], dsv: dict[str, int],
                 period: float = 5.0):
        self.view = view
        self.period = period
        self.mview = MaterializedView(rows)
        self.transport = NotificationLog(dsv)
        self._applied_dsv = dict(dsv)
        self.refreshed = dict(brv)
        self.trace: list[dict] = []
        self.counters = RecomputeCounters()
        self.outstanding: dict[str, Subquery] = {}
        self.answers: dict[str, Answer] = {}   # relation -> its answer in this round
        self.last_round = 0.0
        self.asked_at = 0.0
        self.evaluating: dict | None = None   # the round whose EvaluateView is out: round, versions, refreshed
        self._ids = 0

    def handle(self, event) -> list:
        if isinstance(event, NotificationArrived):
            n = event.notification
            self.transport.add(n)
            self.transport.forget_through(n.source, self.transport.contiguous(n.source))
            return [self.transport.acknowledgement(n.source)]
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
        if self.outstanding:
            if now - self.asked_at < self.period:
                return []
            self.asked_at = now
            self.counters.retries += len(self.outstanding)
            return [SendSubquery(sq) for sq in self.outstanding.values()]
        if now - self.last_round < self.period:
            return []
        self.last_round = self.asked_at = now
        self.counters.rounds += 1
        self.answers.clear()
        return self._ask(self.view.relations)

    def _ask(self, relations) -> list:
        actions = []
        for name in relations:
            self._ids += 1
            rel = self.view.relation(name)
            sq = Subquery(f"r{self._ids}", rel.source,
                          (SubqueryRelation(rel.name, None, (), (), self.view.selection_sql(rel.name)),), ())
            self.outstanding[sq.id] = sq
            self.counters.subqueries += 1
            actions.append(SendSubquery(sq))
        return actions

    def _on_answer(self, answer: Answer) -> list:
        sq = self.outstanding.pop(answer.id, None)
        if sq is None:
            self.counters.duplicates += 1
            return []
        self.answers[sq.relations[0].relation] = answer
        mine = [r for r in self.view.relations if self.view.relation(r).source == answer.source]
        if any(r not in self.answers for r in mine):
            return []
        if len({self.answers[r].dsv for r in mine}) > 1:
            self.counters.rereads += 1
            for r in mine:
                del self.answers[r]
            return self._ask(mine)
        if self.outstanding:
            return []
        return self._evaluate()

    def _evaluate(self) -> list:
        versions = {**self._applied_dsv, **{a.source: a.dsv for a in self.answers.values()}}
        if versions == self._applied_dsv:
            return []   # nothing committed since the last round: no job to run
        relations = {r: list(a.rows_of(r).rows) for r, a in self.answers.items()}
        action = EvaluateView(self.counters.rounds, self.view, relations)
        self.evaluating = {"round": action.round, "versions": versions,
                           "refreshed": {r: a.rows_of(r).brv for r, a in self.answers.items()}}
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

    def received_through(self, source: str) -> int:
        return self.transport.contiguous(source)

    def applied_dsv(self) -> dict[str, int]:
        return dict(self._applied_dsv)

    def version_state(self) -> dict:
        return {"relations": {r: {"processing": v, "refreshed": v} for r, v in self.refreshed.items()},
                "sources": {s: {"applied_dsv": d} for s, d in self._applied_dsv.items()}}
