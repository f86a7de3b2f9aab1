"""The view computed from scratch over whole relations, with the same join folding the
incremental path uses: the simulator's initial materialisation and resynchronisation.
(The live warehouse does this as a Spark job; the checker uses its own independent oracle.)
A view with outer joins is folded from each relation in turn, for the terms whose first relation
it is, so that each term is derived once.
"""

from __future__ import annotations

from collections import Counter

from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.evaluation import fold, plan_fragment, view_delta
from fedlab.warehouse.core.planner import plan


def recompute(view: ViewDef, relations: dict[str, list[tuple]]) -> dict[tuple, int]:
    """`relations`: the sources' relations' rows by name (an occurrence of a relation reads its rows)."""
    relations = {name: relations[view.base_of(name)] for name in view.relations}
    if view.outer is None:
        return _from(view, view.relations[0], relations, None)
    out: Counter = Counter()
    for first in view.relations:
        terms = [t for t in view.outer.terms if min(t, key=view.relations.index) == first]
        if terms:
            out.update(_from(view, first, relations, terms))
    return dict(out)


def _from(view: ViewDef, first: str, relations: dict[str, list[tuple]], terms) -> dict[tuple, int]:
    """The view's rows (of `terms`, with outer joins) folded from each row of `first`."""
    qplan = plan(view, first, "join-graph")
    rows = {}
    for name in qplan.relations:
        rel, test = view.relation(name), view.selection_test(name)
        rows[name] = {rel.key_of(r): r for r in relations[name] if test(r)}
    test = view.selection_test(first)
    delta = [(r, 1) for r in relations[first] if test(r)]
    return view_delta(view, fold(view, qplan, delta, rows, {}, plan_fragment(view, qplan), terms))
