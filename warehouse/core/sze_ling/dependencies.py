"""What keys, functional dependencies and referential integrity let the warehouse skip.

Sze-Ling section 4.2 (insertions), 4.3 (modifications, and deletions' three improvements):
- an update is irrelevant when an enforced referential-integrity constraint guarantees that no
  row of a joined relation refers to it (`ri_irrelevant`);
- a relation R_j whose key is in the view and which functionally determines others lets the
  warehouse read those relations from the view (partial self-maintenance, `lookup_subtree_ok`)
  or refresh the view by key without deriving view tuples (`key_path`, Example 7).
Functional dependencies are closed over keys (key -> all columns), declared FDs and the view's
join equalities, which make two columns one value in every view tuple.

A view with outer joins (fedmodel.outer_joins) takes none of the three: a new parent row with no
children still makes rows (its terms without them), a join equality holds only in the rows of the
terms holding both sides, and a row of a term lacking R_j holds NULLs where R_j's key is, which a
key with a NULL in it would find. Its deletions and modifications are computed as signed rows.
"""

from __future__ import annotations

from typing import Iterable

from fedlab.fedmodel.transactions import Notification
from fedlab.fedmodel.viewdef import ColumnRef, ViewDef, per_view
from fedlab.warehouse.core.planner import QueryPlan, plan


def closure(view: ViewDef, start: Iterable[ColumnRef], relations: Iterable[str]) -> set[ColumnRef]:
    """Attributes of `relations` determined by `start`, through their FDs and join equalities."""
    rels = set(relations)
    known = set(start)
    changed = True
    while changed:
        changed = False
        for r in rels:
            for fd in view.catalog.fds_of(r):
                if all(ColumnRef(r, c) in known for c in fd.lhs):
                    for c in fd.rhs:
                        if ColumnRef(r, c) not in known:
                            known.add(ColumnRef(r, c))
                            changed = True
        for e in view.edges:
            if e.a in rels and e.b in rels:
                for ca, cb in e.pairs:
                    a, b = ColumnRef(e.a, ca), ColumnRef(e.b, cb)
                    if (a in known) != (b in known):
                        known.update((a, b))
                        changed = True
    return known


def key_refs(view: ViewDef, relation: str) -> set[ColumnRef]:
    return {ColumnRef(relation, c) for c in view.relation(relation).key}


def determines(view: ViewDef, rj: str, targets: Iterable[str], within: Iterable[str]) -> bool:
    """True when R_j's key functionally determines the key of every target, inside `within`."""
    return _determines(view, rj, tuple(targets), tuple(within))


@per_view
def _determines(view: ViewDef, rj: str, targets: tuple[str, ...], within: tuple[str, ...]) -> bool:
    known = closure(view, key_refs(view, rj), within)
    return all(key_refs(view, t) <= known for t in targets)


@per_view
def key_in_view(view: ViewDef, relation: str) -> bool:
    return set(view.relation(relation).key) <= view.visible_columns(relation)


@per_view
def key_path(view: ViewDef, updated: str, access: str) -> QueryPlan | None:
    """The shortest query plan to a relation R_j with its key in the view that determines `updated`.

    Section 4.3: a deletion (or a modification of columns outside joins and selections) can then
    be applied as `DELETE FROM V WHERE key(R_j) = ...` (or `UPDATE V SET ... WHERE ...`) for the
    R_j rows that join the updated row, without deriving view tuples. The FD chain must run along
    the path itself, so that every view tuple holding such an R_j row holds the updated row.
    Returns a plan with no nodes when the updated relation's own key is in the view.
    """
    if view.outer is not None:
        return None
    for rj, path in _paths_by_distance(view, updated):
        if key_in_view(view, rj) and determines(view, rj, [updated], path):
            return plan(view, updated, access, only=tuple(path))
    return None


def _paths_by_distance(view: ViewDef, start: str):
    paths = {start: [start]}
    queue = [start]
    while queue:
        cur = queue.pop(0)
        yield cur, paths[cur]
        for n in view.neighbours(cur):
            if n not in paths:
                paths[n] = paths[cur] + [n]
                queue.append(n)


def ri_irrelevant(view: ViewDef, notification: Notification, relation: str, row: tuple,
                  inserted: bool, order: tuple[str, ...]) -> bool:
    """Section 4.2: is this insertion (or deletion) of a parent row certain to join no child row?

    With an enforced constraint "every row of X refers to a row of `relation`" and a view edge
    that is exactly that reference, a new parent has no children yet and a deleted parent has none
    left. That holds at the state the computation reads only if X is at a committed state on the
    right side of this transaction: untouched by it, or (for an insertion) processed after this
    relation, or (for a deletion) before it; and only if the parent's key was not also removed (or
    re-added) by the same transaction. `order` is the order of the transaction's relations.
    The constraint's parent columns must identify one parent row (determine the parent's key):
    when several parent rows share a value, a new one joins the children of the others, and a
    deleted one leaves behind view rows joined through it.
    """
    children = _referring_children(view, relation)
    if not children:
        return False
    rel = view.relation(relation)
    change = notification.change(relation)
    key = rel.key_of(row)
    other_side = change.removed if inserted else change.added
    if any(rel.key_of(r) == key for r in other_side):
        return False
    for child in children:
        if notification.change(child) is None:
            return True
        child_after = order.index(child) > order.index(relation)
        if child_after == inserted:
            return True
    return False


@per_view
def _referring_children(view: ViewDef, relation: str) -> tuple[str, ...]:
    """The view's relations X under a constraint "every row of X refers to a row of `relation`"
    that is exactly X's view edge to it, through parent columns that determine its key: the
    constraints ri_irrelevant may use, which depend on the view alone."""
    if view.outer is not None:
        return ()
    children = []
    for ri in view.catalog.ri:
        if ri.parent != relation or ri.child not in view.relations:
            continue
        edge = view.edge(ri.child, relation)
        if edge is None or set(zip(edge.columns_of(ri.child), edge.columns_of(relation))) != set(
                zip(ri.columns, ri.parent_columns)):
            continue
        if key_refs(view, relation) <= closure(view, {ColumnRef(relation, c) for c in ri.parent_columns}, [relation]):
            children.append(ri.child)
    return tuple(children)


@per_view
def lookup_subtree_ok(view: ViewDef, qplan: QueryPlan, rj: str) -> bool:
    """Section 4.2's two conditions for reading R_j and the rest of its subtree from the view.

    (1) R_j's key and its join columns towards its parent are in the view; (2) R_j determines
    every relation below it in the query tree. Also, the subtree must meet the rest of the view
    only through R_j's tree edge, so that any view tuple with R_j's join value shows every
    subtree combination with that value.
    """
    slot = qplan.slot(rj)
    if view.outer is not None or slot.parent is None or not key_in_view(view, rj):
        return False
    if not set(slot.columns) <= view.visible_columns(rj):
        return False
    below = qplan.descendants(rj)
    subtree = {rj, *below}
    if not determines(view, rj, below, subtree):
        return False
    for e in view.edges:
        crossing = (e.a in subtree) != (e.b in subtree)
        if crossing and {e.a, e.b} != {rj, slot.parent}:
            return False
    return True
