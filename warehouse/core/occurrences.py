"""A view that reads a relation twice (a self-join): each occurrence is a relation of its own.

`parse_view` names each occurrence of a relation the view reads more than once by its alias and
makes it a relation of the view (fedmodel.viewdef.occurrences, Catalog.with_occurrences: the same
source, columns, key and constraints). The algorithms then maintain the view as one over
distinct relations, and `Occurrences` translates at their edge, the same in the simulator and
live (warehouse.core.registry.create wraps every algorithm of such a view):
- a notification of a transaction that changed relation R reaches the algorithm as a change of
  every occurrence of R, each with R's rows and R's version number (BRV): an update of R is an
  update of all its occurrences at once, by one transaction;
- a sub-query names occurrences; the source is asked for their relations, and its answer is read
  back as the occurrences it was asked for. The planner never puts two occurrences of one
  relation in one sub-query (warehouse.core.planner), so a relation names one occurrence in an
  answer; which one travels in the sub-query's id (`<id>@<relation>=<occurrence>,...`), so no
  state is kept here and a retried or duplicated sub-query reads back the same way.

The update terms. Take V = R1 ⋈ R2 with R1 and R2 occurrences of one relation R, and a
transaction that changes R by ΔR: both occurrences change, ΔR1 = ΔR2 = ΔR, and

    ΔV = (R1 + ΔR1) ⋈ (R2 + ΔR2) - R1 ⋈ R2 = ΔR1 ⋈ R2_old + R1_new ⋈ ΔR2

the two terms of a transaction that updates two relations (Sze-Ling section 5.1; Zhou-Larson's
m-term delta, warehouse.core.sze_ling.deferral): the first joins ΔR1 with R2 at its version before
the transaction, the second ΔR2 with R1 at its version after it; the term ΔR1 ⋈ ΔR2 is in the
second (R1_new = R1_old + ΔR1), counted once. Each occurrence has its own version numbers, all
equal to R's, so the transaction task gives each term its initial versions as for any two
relations: R2's before-version in the first, R1's after-version in the second. An answer for R2
read at a later version holds ΔR and every update after it; compensation takes them back out
exactly as for another relation (Lemmas 5-7), and brings an answer for R1 read before the
transaction up to its after-version (Lemmas 2-4), since the notification log holds ΔR under
both names. So compensation stays exact: no term counts a change twice or misses one, for any
number of occurrences (k occurrences give k terms, term i with the occurrences before i after
and those after i before). A relation the view reads once keeps its name, and nothing here
changes for a view without a self-join.
"""

from __future__ import annotations

from dataclasses import replace

from fedlab.fedmodel.subquery import Answer, Subquery
from fedlab.fedmodel.transactions import Notification
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.events import AnswerArrived, EvaluateView, NotificationArrived, SendSubquery

_ID = "@"   # separates an algorithm's sub-query id from the occurrences it asked for


class Occurrences:
    """`algorithm` over `view`'s occurrences, seen from the sources as over their relations."""

    def __init__(self, algorithm, view: ViewDef):
        self.algorithm = algorithm
        self.view = view
        self._named = {}   # relation -> its occurrences in the view
        for name in view.relations:
            self._named.setdefault(view.base_of(name), []).append(name)

    def __getattr__(self, name):   # the rest of the Algorithm interface is the algorithm's own
        return getattr(self.algorithm, name)

    def handle(self, event) -> list:
        if isinstance(event, NotificationArrived):
            event = replace(event, notification=self.notification(event.notification))
        elif isinstance(event, AnswerArrived):
            event = replace(event, answer=self.answer(event.answer))
        return [self._action(a) for a in self.algorithm.handle(event)]

    def notification(self, n: Notification) -> Notification:
        """The notification with each change of a relation as a change of each of its occurrences."""
        return replace(n, changes=tuple(replace(c, relation=name) for c in n.changes
                                        for name in self._named.get(c.relation, [c.relation])))

    def subquery(self, sq: Subquery) -> Subquery:
        """The sub-query as its source is asked it: of relations, its id naming their occurrences."""
        base = self.view.base_of
        asked = [f"{base(r.relation)}={r.relation}" for r in sq.relations if base(r.relation) != r.relation]
        return replace(sq, id=sq.id + (_ID + ",".join(asked) if asked else ""),
                       relations=tuple(replace(r, relation=base(r.relation), parent=r.parent and base(r.parent))
                                       for r in sq.relations),
                       as_of=tuple((base(r), v) for r, v in sq.as_of))

    def answer(self, answer: Answer) -> Answer:
        """The answer as the algorithm asked its sub-query: of the occurrences its id names."""
        sid, _, asked = answer.id.partition(_ID)
        named = dict(pair.split("=") for pair in asked.split(",")) if asked else {}
        return replace(answer, id=sid, relations=tuple(replace(ra, relation=named.get(ra.relation, ra.relation))
                                                       for ra in answer.relations))

    def _action(self, action):
        if isinstance(action, SendSubquery):
            return replace(action, subquery=self.subquery(action.subquery))
        if isinstance(action, EvaluateView):   # occurrences of a relation read at one state are one relation
            return replace(action, relations={self.view.base_of(r): rows for r, rows in action.relations.items()})
        return action
