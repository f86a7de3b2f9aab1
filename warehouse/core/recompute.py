"""The view computed from scratch over whole relations, with the same join folding the
incremental path uses: the simulator's initial materialisation and resynchronisation.
(The live warehouse does this as a Spark job; the checker uses its own independent oracle.)
"""

from __future__ import annotations

from fedmodel.viewdef import ViewDef
from warehouse.core.evaluation import fold, plan_fragment, view_delta
from warehouse.core.planner import plan


def recompute(view: ViewDef, relations: dict[str, list[tuple]]) -> dict[tuple, int]:
    """`relations`: the sources' relations' rows by name (an occurrence of a relation reads its rows)."""
    relations = {name: relations[view.base_of(name)] for name in view.relations}
    first = view.relations[0]
    qplan = plan(view, first, "join-graph")
    rows = {}
    for name in qplan.relations:
        rel, test = view.relation(name), view.selection_test(name)
        rows[name] = {rel.key_of(r): r for r in relations[name] if test(r)}
    test = view.selection_test(first)
    delta = [(r, 1) for r in relations[first] if test(r)]
    return view_delta(view, fold(view, qplan, delta, rows, {}, plan_fragment(view, qplan)))
