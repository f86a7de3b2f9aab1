"""Reading every view relation whole, at one state per source: a snapshot of the federation.

Periodic recomputation reads one every round (warehouse.core.baselines.periodic_recompute); Sze-Ling
maintenance reads one to resynchronise when a lost notification can no longer be resent
(warehouse.core.sze_ling.maintenance). Each relation is asked for whole (a sub-query with no probe:
the rows that pass the view's selection on it). A source's answers form a snapshot only if they
were read at one state (one DSV), so a source whose answers disagree is asked again. The read is
complete when every relation has its answer and each source's answers agree; it then names the
relations' rows, their BRVs and each source's DSV. The view over it is the adapter's to evaluate
(an EvaluateView action): a Spark job live, warehouse.core.recompute in the simulator.
"""

from __future__ import annotations

from typing import Callable, Iterable

from fedlab.fedmodel.subquery import Answer, Subquery, SubqueryRelation
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.events import SendSubquery


class SnapshotRead:
    def __init__(self, view: ViewDef, new_id: Callable[[], str], now: float):
        self.view = view
        self._new_id = new_id
        self.outstanding: dict[str, Subquery] = {}
        self.answers: dict[str, Answer] = {}   # relation -> its answer
        self.asked_at = now

    def start(self) -> list[SendSubquery]:
        return self._ask(self.view.relations)

    def expects(self, answer: Answer) -> bool:
        return answer.id in self.outstanding

    def take(self, answer: Answer) -> list[SendSubquery]:
        """One of its answers (`expects(answer)`); the sub-queries to send again: all of the
        answer's source's when its answers were read at different states."""
        sq = self.outstanding.pop(answer.id)
        self.answers[sq.relations[0].relation] = answer
        mine = [r for r in self.view.relations if self.view.relation(r).source == answer.source]
        if any(r not in self.answers for r in mine) or len({self.answers[r].dsv for r in mine}) == 1:
            return []
        for r in mine:
            del self.answers[r]
        return self._ask(mine)

    def overdue(self, now: float, timeout: float) -> list[SendSubquery]:
        """The unanswered sub-queries again, once `timeout` has passed since they were sent."""
        if not self.outstanding or now - self.asked_at < timeout:
            return []
        self.asked_at = now
        return [SendSubquery(sq) for sq in self.outstanding.values()]

    def next_due(self, timeout: float) -> float | None:
        """When `overdue` may next send again (None: nothing outstanding)."""
        return self.asked_at + timeout if self.outstanding else None

    @property
    def complete(self) -> bool:
        return not self.outstanding and len(self.answers) == len(self.view.relations)

    def relations(self) -> dict[str, list[tuple]]:
        return {r: list(a.rows_of(r).rows) for r, a in self.answers.items()}

    def brv(self) -> dict[str, int]:
        return {r: a.rows_of(r).brv for r, a in self.answers.items()}

    def dsv(self) -> dict[str, int]:
        return {a.source: a.dsv for a in self.answers.values()}

    def _ask(self, relations: Iterable[str]) -> list[SendSubquery]:
        actions = []
        for name in relations:
            rel = self.view.relation(name)
            sq = Subquery(self._new_id(), rel.source,
                          (SubqueryRelation(rel.name, None, (), (), self.view.selection_sql(rel.name)),), ())
            self.outstanding[sq.id] = sq
            actions.append(SendSubquery(sq))
        return actions
