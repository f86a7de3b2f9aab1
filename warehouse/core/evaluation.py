"""Joining a computation's compensated results into its contribution (Sze-Ling 4.1: A1 ⋈ A2 ⋈ A3).

The query tree is folded bottom-up: each relation's rows, keyed by their join value towards the
parent, carry the *fragments* (the view columns and join values the rest of the tree needs) of
the subtree below them. Subtrees answered from the view (partial self-maintenance) contribute
ready-made fragments for the join values found there. Join edges that the tree did not follow
(cycles in the join graph, scan access) are checked on the finished fragments.

A view with outer joins holds the NULL-padded rows of its terms (fedmodel.outer_joins): below a
row, each child subtree contributes its partners and also its padding (every relation of the
subtree absent, its columns NULL), and a finished fragment is kept when the relations present in
it form a term. The join graph of such a view is a tree and each term a subtree of it, so this
derives every term holding the updated relation, each row once; a delta of R changes exactly
those terms, so the delta rule is the inner join's, term by term.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Callable, Collection, Mapping

from fedlab.fedmodel.viewdef import ColumnRef, ViewDef
from fedlab.warehouse.core.planner import QueryPlan

Fragment = dict  # view column index (int) or ColumnRef -> value; (ABSENT, relation): padded there
ABSENT = "absent"


def fold(view: ViewDef, qplan: QueryPlan, delta: list[tuple[tuple, int]],
         rows: Mapping[str, Mapping[tuple, tuple]], combos: Mapping[str, Mapping[tuple, list[Fragment]]],
         fragment_of: Callable[[str, tuple], Fragment],
         terms: Collection[frozenset] | None = None) -> list[tuple[tuple, int, list[Fragment]]]:
    """For each signed delta row, the complete fragments it joins with (one per derivation);
    with outer joins, the fragments of `terms` (default: all the view's terms)."""
    checked = [(ColumnRef(e.a, ca), ColumnRef(e.b, cb)) for e in qplan.non_tree_edges for ca, cb in e.pairs]
    memo: dict[str, dict[tuple, list[Fragment]]] = {}
    padding = {child: {(ABSENT, r): True for r in (child, *qplan.descendants(child))}
               for child in qplan.relations} if view.outer is not None else {}

    def below(relation: str, row: tuple) -> list[Fragment]:
        frags = [fragment_of(relation, row)]
        rel = view.relation(relation)
        for child in qplan.children(relation):
            slot = qplan.slot(child)
            value = tuple(row[rel.index(c)] for c in slot.parent_columns)
            partners = subtree(child).get(value, []) if None not in value else []
            frags = _product(frags, partners + [padding[child]] if padding else partners)
            if not frags:
                break
        return frags

    if view.outer is not None:
        wanted = set(view.outer.terms if terms is None else terms)

        def kept(f: Fragment) -> bool:
            return (frozenset(r for r in qplan.relations if (ABSENT, r) not in f) | {qplan.updated}) in wanted
    else:
        def kept(f: Fragment) -> bool:
            return all(f.get(a) is not None and f.get(a) == f.get(b) for a, b in checked)

    def subtree(relation: str) -> dict[tuple, list[Fragment]]:
        if relation not in memo:
            slot = qplan.slot(relation)
            rel = view.relation(relation)
            out: dict[tuple, list[Fragment]] = defaultdict(list)
            for row in rows.get(relation, {}).values():
                out[tuple(row[rel.index(c)] for c in slot.columns)].extend(below(relation, row))
            for value, frags in combos.get(relation, {}).items():
                out[value].extend(frags)
            memo[relation] = out
        return memo[relation]

    detached: list[Fragment] = [{}]
    for root in qplan.children(None):
        detached = _product(detached, subtree(root).get((), []))
    result = []
    for row, sign in delta:
        frags = [f for f in _product(below(qplan.updated, row), detached) if kept(f)]
        result.append((row, sign, frags))
    return result


def view_fragment(view: ViewDef, extra: set[ColumnRef]) -> Callable[[str, tuple], Fragment]:
    """Fragments that carry the view's columns (by declared relation) and the `extra` join values."""
    own: dict[str, list[tuple[object, int]]] = defaultdict(list)
    for i, o in enumerate(view.outputs):
        own[o.ref.relation].append((i, view.relation(o.ref.relation).index(o.ref.column)))
    for ref in extra:
        own[ref.relation].append((ref, view.relation(ref.relation).index(ref.column)))
    return lambda relation, row: {k: row[p] for k, p in own[relation]}


def plan_fragment(view: ViewDef, qplan: QueryPlan) -> Callable[[str, tuple], Fragment]:
    """View fragments that also carry the columns of the plan's non-tree join edges."""
    extra = {ColumnRef(e.a, ca) for e in qplan.non_tree_edges for ca, _ in e.pairs}
    extra |= {ColumnRef(e.b, cb) for e in qplan.non_tree_edges for _, cb in e.pairs}
    return view_fragment(view, extra)


def view_delta(view: ViewDef, folded) -> dict[tuple, int]:
    """Signed multiplicities of view rows from folded fragments."""
    delta: Counter = Counter()
    width = len(view.outputs)
    for _row, sign, frags in folded:
        for f in frags:
            delta[tuple(f.get(i) for i in range(width))] += sign   # absent: a padded relation's NULL
    return {r: c for r, c in delta.items() if c}


def derivations(view: ViewDef, qplan: QueryPlan, delta: list[tuple[tuple, int]],
                rows: Mapping[str, Mapping[tuple, tuple]]) -> list[tuple[tuple, tuple]]:
    """Each way the delta rows join the plan's other rows: the rows it derives from, one per view
    relation in `view.relations` order (None for one a term lacks), and its view row (Strobe's
    answers keep the derivation, Salem's propagation queries the change each row comes from)."""
    base = plan_fragment(view, qplan)

    def fragment(relation: str, row: tuple) -> Fragment:
        return {**base(relation, row), ("row", relation): row}

    width = len(view.outputs)
    return [(tuple(f.get(("row", r)) for r in view.relations), tuple(f.get(i) for i in range(width)))
            for _row, _sign, frags in fold(view, qplan, delta, rows, {}, fragment) for f in frags]


def _product(left: list[Fragment], right: list[Fragment]) -> list[Fragment]:
    return [{**a, **b} for a in left for b in right]
