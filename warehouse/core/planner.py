"""The access path of an update's incremental computation: which sub-queries go to which source.

Two access paths, a named choice so that a run can separate their effect from compensation's:

- `join-graph` (Sze-Ling section 4.1): from the updated relation, follow the view's join graph;
  each not-yet-queried neighbour of a queried relation starts a sub-query that also takes every
  not-yet-queried relation of the same source connected to it, so several relations of one source
  travel in one sub-query and no cartesian product is ever asked for (but never two occurrences
  of one relation: a source answers by relation, warehouse.core.occurrences). Sub-queries whose parent is
  answered go out in parallel. A join graph with several components (cartesian products in the
  view) queries each other component whole.
  Beyond the paper, the tree follows key edges first (an edge whose columns hold a key of one of
  its relations, as a foreign key's do): a probe through a many-to-many edge brings every row
  that shares the value, e.g. for a customer update of the Q5-like view, c_nationkey =
  s_nationkey asks for the suppliers of a nation and all their lineitems (21-28k rows at SF 0.1)
  where customer -> orders -> lineitem -> supplier asks for a few dozen. Such edges join the
  tree only where no key edge reaches a relation; otherwise they are checked on the result. A
  view without keys is planned as before.
- `scan` (the left and right scan of section 2.1, used by the Strobe family): one relation per
  sub-query, in FROM order, leftwards then rightwards from the updated relation; a step between
  relations with no join edge asks for the whole relation (the cartesian products of Example 5).

Example 5 (join graph reconstructed in docs/paper-notes.md, since Figure 1 is lost): for an update of
R1 the join-graph path sends 3 sub-queries where the scans send 5.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedlab.fedmodel.viewdef import JoinEdge, ViewDef, per_view

ACCESS_PATHS = ("join-graph", "scan")


@dataclass(frozen=True)
class PlannedRelation:
    """A relation's place in the query tree: it is probed with its parent's rows (None: all rows)."""

    relation: str
    source: str
    parent: str | None
    columns: tuple[str, ...]
    parent_columns: tuple[str, ...]
    waits_for: str | None = None  # a scan step waits for the previous step even if it probes another


@dataclass(frozen=True)
class PlanNode:
    """One sub-query: connected relations of one source, the first joined to its parent outside."""

    source: str
    relations: tuple[PlannedRelation, ...]

    @property
    def root(self) -> PlannedRelation:
        return self.relations[0]


@dataclass(frozen=True)
class QueryPlan:
    updated: str
    nodes: tuple[PlanNode, ...]         # every node after the node of its root's parent
    non_tree_edges: tuple[JoinEdge, ...]  # join edges the tree does not follow: checked on the result

    def slot(self, relation: str) -> PlannedRelation:
        for node in self.nodes:
            for pr in node.relations:
                if pr.relation == relation:
                    return pr
        raise KeyError(relation)

    @property
    def relations(self) -> tuple[str, ...]:
        return tuple(pr.relation for node in self.nodes for pr in node.relations)

    def children(self, relation: str | None) -> tuple[str, ...]:
        return tuple(pr.relation for node in self.nodes for pr in node.relations if pr.parent == relation)

    def descendants(self, relation: str) -> tuple[str, ...]:
        out, stack = [], list(self.children(relation))
        while stack:
            r = stack.pop(0)
            out.append(r)
            stack.extend(self.children(r))
        return tuple(out)

    def node_of(self, relation: str) -> PlanNode:
        for node in self.nodes:
            if any(pr.relation == relation for pr in node.relations):
                return node
        raise KeyError(relation)

    def node_below(self, relation: str) -> tuple[PlannedRelation, ...]:
        """`relation` and its descendants inside its own node: what a follow-up sub-query re-asks."""
        node = self.node_of(relation)
        keep = {relation}
        out = []
        for pr in node.relations:
            if pr.relation in keep or pr.parent in keep:
                keep.add(pr.relation)
                out.append(pr)
        return tuple(out)


@per_view
def plan(view: ViewDef, updated: str, access: str = "join-graph", only: tuple[str, ...] | None = None) -> QueryPlan:
    """The query tree for an update of `updated`; `only` limits it to those relations (a key path)."""
    if access == "join-graph":
        return _join_graph_plan(view, updated, only)
    if access == "scan":
        return _scan_plan(view, updated, only)
    raise ValueError(f"unknown access path {access!r} (one of {', '.join(ACCESS_PATHS)})")


def pin(qplan: QueryPlan, relations) -> QueryPlan:
    """The plan with each of `relations` in a node of its own: their rows are known, not queried.

    The Strobe paper's Q<U_p> (section 6, C-Strobe) substitutes a deleted tuple for its relation;
    a join-graph node that holds the relation is split there, and the relations below it in the
    node start nodes of their own, probed with the known row. Scan plans are unchanged.
    """
    known = set(relations) - {qplan.updated}
    nodes: list[PlanNode] = []
    for node in qplan.nodes:
        if not any(pr.relation in known for pr in node.relations):
            nodes.append(node)
            continue
        groups: list[list[PlannedRelation]] = []
        group_of: dict[str, list[PlannedRelation]] = {}
        for pr in node.relations:   # parents come before their children within a node
            parent_group = group_of.get(pr.parent)
            if pr.relation in known or parent_group is None or parent_group[0].relation in known:
                group = [pr]
                groups.append(group)
            else:
                group = parent_group
                group.append(pr)
            group_of[pr.relation] = group
        nodes += [PlanNode(node.source, tuple(g)) for g in groups]
    return QueryPlan(qplan.updated, tuple(nodes), qplan.non_tree_edges)


def _link(view: ViewDef, relation: str, parent: str | None, waits_for: str | None = None) -> PlannedRelation:
    source = view.relation(relation).source
    edge = view.edge(relation, parent) if parent else None
    if edge is None:
        return PlannedRelation(relation, source, parent, (), (), waits_for)
    return PlannedRelation(relation, source, parent, edge.columns_of(relation), edge.columns_of(parent), waits_for)


def _join_graph_plan(view: ViewDef, updated: str, only) -> QueryPlan:
    allowed = set(only if only is not None else view.relations)
    queried = {updated}
    nodes: list[PlanNode] = []
    tree_edges: set[frozenset] = set()

    def grow(first: str, parent: str | None, follows) -> None:
        source = view.relation(first).source
        members = [_link(view, first, parent)]
        queried.add(first)
        i = 0
        while i < len(members):
            cur = members[i].relation
            for n in view.neighbours(cur):
                if (n in allowed and n not in queried and view.relation(n).source == source and follows(cur, n)
                        and view.base_of(n) not in {view.base_of(m.relation) for m in members}):
                    queried.add(n)
                    members.append(_link(view, n, cur))
            i += 1
        nodes.append(PlanNode(source, tuple(members)))
        tree_edges.update(frozenset((m.relation, m.parent)) for m in members if m.parent)

    def expand_from(start: str, follows) -> None:
        queue = [start]
        while queue:
            cur = queue.pop(0)
            for n in view.neighbours(cur):
                if n in allowed and n not in queried and follows(cur, n):
                    before = len(nodes)
                    grow(n, cur, follows)
                    queue.extend(pr.relation for node in nodes[before:] for pr in node.relations)

    def key_edge(a: str, b: str) -> bool:
        return _key_edge(view, a, b)

    def any_edge(a: str, b: str) -> bool:
        return True

    def reach() -> None:
        for follows in (key_edge, any_edge):
            for relation in [updated] + [pr.relation for node in list(nodes) for pr in node.relations]:
                expand_from(relation, follows)

    reach()
    for component in view.components():
        rest = [r for r in component if r in allowed and r not in queried]
        if rest and updated not in component:
            grow(rest[0], None, any_edge)
            reach()
    return QueryPlan(updated, tuple(nodes), _non_tree(view, tree_edges, allowed | {updated}))


def _key_edge(view: ViewDef, a: str, b: str) -> bool:
    """The edge's columns at `a` or at `b` hold that relation's whole key (a key-foreign-key join)."""
    edge = view.edge(a, b)
    for name in (a, b):
        key = {k.lower() for k in view.relation(name).key}
        if key and key <= {c.lower() for c in edge.columns_of(name)}:
            return True
    return False


def _scan_plan(view: ViewDef, updated: str, only) -> QueryPlan:
    order = [r for r in view.relations if only is None or r in only or r == updated]
    i = order.index(updated)
    nodes: list[PlanNode] = []
    tree_edges: set[frozenset] = set()
    for direction in (order[:i][::-1], order[i + 1:]):
        scanned = [updated]
        for rel in direction:
            # Each step joins the result accumulated so far: probe with the latest scanned
            # relation it has an edge to; with none, the step is a cartesian product.
            parent = next((p for p in reversed(scanned) if view.edge(rel, p)), scanned[-1])
            link = _link(view, rel, parent, waits_for=scanned[-1] if scanned[-1] != parent else None)
            nodes.append(PlanNode(link.source, (link,)))
            if link.columns:
                tree_edges.add(frozenset((rel, parent)))
            scanned.append(rel)
    return QueryPlan(updated, tuple(nodes), _non_tree(view, tree_edges, set(order)))


def _non_tree(view: ViewDef, tree_edges: set[frozenset], relations: set[str]) -> tuple[JoinEdge, ...]:
    return tuple(e for e in view.edges
                 if frozenset((e.a, e.b)) not in tree_edges and e.a in relations and e.b in relations)
