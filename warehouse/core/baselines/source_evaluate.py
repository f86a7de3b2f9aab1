"""The Strobe paper's `source_evaluate(Q)` (Zhuge et al. 1996, section 5.1): a query
Q = V<U...> answered piece by piece by the sources, and its answer as the derivations it holds.

Q substitutes known tuples for some relations: the rows of one relation that an update inserted
(Strobe's V<U_i>; T-Strobe's union over a transaction's insertions is one evaluation per
relation) and, in C-Strobe's compensating queries Q<U_p> (section 6), deleted rows of some other
relations: those are *pinned* and never queried. The other relations are fetched along
the access path (warehouse.core.planner: `scan`, one relation per sub-query as in the paper, or
`join-graph`) by the same Computation that Sze-Ling maintenance uses, with compensation and view
reads switched off: here an answer is taken as read, and the Strobe algorithms correct it
themselves (pending sets, key_delete, compensating queries).

The answer maps each derivation - the tuple it takes from every relation, in the view's relation
order - to its view row. C-Strobe's key_delete* must match a tuple "on both key and non-key
attributes", and the view need not show the non-key ones, so the derivation is kept.
"""

from __future__ import annotations

from typing import Callable

from fedlab.fedmodel.subquery import Answer, Subquery
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.evaluation import derivations
from fedlab.warehouse.core.planner import pin, plan
from fedlab.warehouse.core.sze_ling.computation import Computation, Context

Derivation = tuple  # one base row per view relation, in view.relations order


class Evaluation:
    def __init__(self, view: ViewDef, relation: str, rows, access: str, new_id: Callable[[], str],
                 label: str, pinned: dict[str, tuple[tuple, ...]] | None = None):
        """V<rows of `relation`, pinned rows> over the other relations, fetched along `access`."""
        self.view = view
        self.relation = relation
        self.pinned = dict(pinned or {})
        qplan = plan(view, relation, access)
        if self.pinned:
            qplan = pin(qplan, self.pinned)
        ctx = Context(view, None, None, {}, False, False, new_id, lambda _entry: None)
        self.computation = Computation(ctx, qplan, [(row, 1) for row in rows], {}, label, self.pinned)

    def start(self) -> list[Subquery]:
        return self.computation.advance()

    def on_answer(self, answer: Answer) -> list[Subquery]:
        """Takes one sub-answer; returns the sub-queries it makes possible (the next scan step)."""
        self.computation.on_answer(answer)
        return self.computation.advance()

    @property
    def done(self) -> bool:
        return self.computation.done

    def answer(self) -> dict[Derivation, tuple]:
        """The answer A: derivation -> view row; a set, as the paper's answers are."""
        comp = self.computation
        return dict(derivations(self.view, comp.plan, comp.delta, comp.rows))


def joining(view: ViewDef, relation: str, rows, known: dict[str, tuple[tuple, ...]]) -> tuple[tuple, ...]:
    """The rows of `relation` that join some known row of every known relation adjacent to it:
    the others cannot be in Q's answer, and when none is left Q is empty and no source need be
    asked (the warehouse evaluates the known part of a query itself, Example 6)."""
    rel = view.relation(relation)

    def joins(row) -> bool:
        for e in view.edges_of(relation):
            other = e.other(relation)
            if other in known:
                mine = tuple(row[rel.index(c)] for c in e.columns_of(relation))
                orel = view.relation(other)
                theirs = {tuple(r[orel.index(c)] for c in e.columns_of(other)) for r in known[other]}
                if None in mine or mine not in theirs:
                    return False
        return True

    return tuple(row for row in rows if joins(row))
