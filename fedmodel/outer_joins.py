"""Outer joins (LEFT, RIGHT, FULL) as the terms of their join-disjunctive normal form.

Galindo-Legaria (SIGMOD 1994, "Outerjoins as disjunctions") and Larson & Zhou (ICDE 2007,
"Efficient maintenance of materialized outer-join views", section 3) write a select-project-
outer-join expression whose predicates reject NULLs as the *minimum union* of terms: each term
is a set S of the view's relations, its rows the inner join of S under the predicates among S,
padded with NULLs for the relations outside S, and a row of a term is in the view unless a row of
a larger term holds the same base rows of S (it is *subsumed*). `r LEFT JOIN s ON r.i = s.i` has
the terms {r, s} and {r}: every matching pair, and each r row padded, shown only while no pair
holds it. The terms are found bottom-up over the FROM clause's join tree:

    terms(X)              = {{X}}
    terms(L JOIN R ON p)  = {A | B : A in terms(L), B in terms(R), A | B holds every relation p names}
    terms(L LEFT JOIN R)  = terms(L JOIN R) | terms(L)      (RIGHT: | terms(R); FULL: both)

and a condition of WHERE (or of an inner join's ON) keeps the terms holding every relation it
names, and is the selection of the relation it reads when it reads one: it must then reject
that relation's NULLs (a row padded there fails it), else it would keep padded rows, which a
selection pushed to the relation cannot say (`WHERE s.i IS NULL`, an anti-join, is refused).
A condition of an outer join's ON on its null-supplying side is that side's selection when the
side is one relation (`r LEFT JOIN s ON r.i = s.i AND s.v > 0` reads the s rows passing it);
one on a preserved side only decides which rows match, which no selection says: refused. The
one condition of WHERE that keeps padded rows and is taken is the anti-join idiom, `s.i IS NULL`
on a column s joins by toward the preserved side (not NULL wherever s is not padded): the view
is then the rows of the terms lacking s (`OuterJoins.padded`), and NOT EXISTS is written so
(fedmodel.rewrites.not_exists).

What the warehouse maintains (fedmodel.viewdef.ViewDef with `outer` set) is the terms' rows
without the subsumption: the union of inner joins, each changing only with its own relations, so
that every algorithm keeps it as it keeps a join (warehouse.core.evaluation pads the relations a
term lacks), with its version numbers and compensation; the view is then a function of it
(warehouse.core.outer_join_state: the primary delta is the terms', the secondary delta, rows
that stop or start being subsumed, follows from the term rows the warehouse holds). Kept simple:
the join graph must be a tree (no cycle, no cartesian product), so that each term is a connected
subtree of it; and a view with one term is an inner join (`r LEFT JOIN s ... WHERE s.v > 0`).

>>> import sqlglot
>>> tree = sqlglot.parse_one("SELECT 1 FROM r FULL JOIN s ON r.i = s.i LEFT JOIN t ON s.j = t.j")
>>> shape = from_tree(tree.args["from_"].this, tree.args["joins"])
>>> [t.name for t in shape.tables()], shape.sides()
(['r', 's', 't'], ['FULL', 'LEFT'])
>>> read = lambda c: {x.table for x in c.find_all(sqlglot.exp.Column)}
>>> sorted(sorted(t) for t in shape.terms(lambda table: table.name, read, []))
[['r'], ['r', 's'], ['r', 's', 't'], ['s'], ['s', 't']]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Union

from sqlglot import exp

from fedlab.fedmodel.errors import ModelError

SIDES = ("LEFT", "RIGHT", "FULL")


@dataclass(frozen=True)
class OuterJoins:
    """The terms of an outer-join view, each a frozenset of the view's relations (occurrence
    names), largest first: the NULL-padded rows of each are rows of the maintained view."""

    terms: tuple[frozenset, ...]
    # Relations the view's rows are padded in (`WHERE s.i IS NULL` on a column s joins by, the
    # anti-join idiom): its rows are those of the terms lacking them, once not subsumed; the
    # maintained join still holds every term, which decide what is subsumed.
    padded: frozenset = frozenset()

    def nullable(self, relation: str) -> bool:
        """Whether some term lacks `relation`: a row of the view may hold NULLs in its place."""
        return any(relation not in t for t in self.terms)

    def together(self, a: str, b: str) -> bool:
        """Whether every term holding `a` or `b` holds both: an equality between them then holds
        in every row (fedmodel.viewdef.ViewDef.equivalents follows only those)."""
        return all((a in t) == (b in t) for t in self.terms)


@dataclass(frozen=True)
class _Leaf:
    table: exp.Table


@dataclass(frozen=True)
class _Join:
    side: str                 # INNER, LEFT, RIGHT or FULL
    left: "Shape"
    right: "Shape"
    on: tuple[exp.Expression, ...]


Shape = Union[_Leaf, _Join]


class JoinTree:
    """A FROM clause as a tree of joins whose leaves are its tables."""

    def __init__(self, root: Shape):
        self.root = root

    def tables(self) -> list[exp.Table]:
        """The tables of FROM, in the order the SQL writes them."""
        return [leaf.table for leaf in _leaves(self.root)]

    def sides(self) -> list[str]:
        """The outer joins' sides, in the order the SQL writes them."""
        return _sides(self.root)

    def conjuncts(self) -> list[exp.Expression]:
        """Every ON condition's conjuncts (the parser reads them into edges and selections)."""
        return _on(self.root)

    def terms(self, name_of: Callable[[exp.Table], str], relations_of: Callable[[exp.Expression], set],
              where: Iterable[exp.Expression], rejects_nulls: Callable[[exp.Expression], bool] = lambda c: True
              ) -> set[frozenset]:
        """The terms of the view, sets of its relations' names (`name_of(table)`; `relations_of(c)`
        names those condition `c` reads), after WHERE's conjuncts `where`; ModelError (one line)
        for a condition no term can say (see the module's docstring). `rejects_nulls(c)`: whether
        condition `c`, on one relation, fails for a row of NULLs."""
        found = _Terms(name_of, relations_of, rejects_nulls)
        return found.kept(found.of(self.root), list(where), "WHERE")


def has_outer_join(tree: exp.Expression) -> bool:
    """Whether `tree` joins with LEFT, RIGHT or FULL anywhere (in a parenthesised join, a derived
    table's body)."""
    return any(str(j.args.get("side") or "").upper() in SIDES for j in tree.find_all(exp.Join))


def from_tree(first: exp.Expression, joins: list[exp.Join]) -> JoinTree:
    """The join tree of `FROM first <joins>`. A comma binds looser than JOIN, so the FROM list's
    comma-separated items are joined last (inner joins, their conditions in WHERE); a
    parenthesised join (`(r FULL JOIN s ON ...)`) is a subtree."""
    groups: list[Shape] = [_item(first)]
    for join in joins:
        side = str(join.args.get("side") or "").upper()
        kind = str(join.args.get("kind") or "").upper()
        if kind not in ("", "INNER", "CROSS", "OUTER") or (kind == "OUTER" and not side):
            raise ModelError(f"view: only inner and outer joins (LEFT, RIGHT, FULL) are supported, got {join.sql()}")
        right = _item(join.this)
        on = tuple(conjuncts(join.args["on"])) if join.args.get("on") else ()
        if not (side or kind or on):   # a comma
            groups.append(right)
        else:
            groups[-1] = _Join(side or "INNER", groups[-1], right, on)
    root = groups[0]
    for group in groups[1:]:
        root = _Join("INNER", root, group, ())
    return JoinTree(root)


def _item(node: exp.Expression) -> Shape:
    """A FROM item: a table, or a parenthesised join (sqlglot: a Subquery around a Table that
    carries the joins)."""
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Table) and node.this.args.get("joins"):
        if node.args.get("alias"):
            raise ModelError(f"view: an alias on a parenthesised join ({node.alias}) is not supported")
        first = node.this.copy()
        joins = first.args.get("joins")
        first.set("joins", None)
        return from_tree(first, joins).root
    if isinstance(node, exp.Paren):
        return _item(node.this)
    return _Leaf(node)


def _leaves(shape: Shape) -> list[_Leaf]:
    return [shape] if isinstance(shape, _Leaf) else _leaves(shape.left) + _leaves(shape.right)


def _sides(shape: Shape) -> list[str]:
    if isinstance(shape, _Leaf):
        return []
    return _sides(shape.left) + _sides(shape.right) + ([shape.side] if shape.side in SIDES else [])


def _on(shape: Shape) -> list[exp.Expression]:
    return [] if isinstance(shape, _Leaf) else _on(shape.left) + _on(shape.right) + list(shape.on)


class _Terms:
    """The bottom-up rules of the module's docstring, over one view's names."""

    def __init__(self, name_of, relations_of, rejects_nulls):
        self.name_of, self.relations_of, self.rejects_nulls = name_of, relations_of, rejects_nulls

    def of(self, shape: Shape) -> set[frozenset]:
        if isinstance(shape, _Leaf):
            return {frozenset({self.name_of(shape.table)})}
        left, right = self.of(shape.left), self.of(shape.right)
        if shape.side == "INNER":
            return self.kept({a | b for a in left for b in right}, list(shape.on), "ON")
        left_names = {self.name_of(leaf.table) for leaf in _leaves(shape.left)}
        right_names = {self.name_of(leaf.table) for leaf in _leaves(shape.right)}
        padded = {"LEFT": shape.right, "RIGHT": shape.left}.get(shape.side)
        matches = []
        for c in shape.on:
            read = self.relations_of(c)
            if read & left_names and read & right_names:
                matches.append(c)
            elif not (isinstance(padded, _Leaf) and read == {self.name_of(padded.table)}):
                raise ModelError(f"view: {c.sql()} in the ON of a {shape.side} JOIN reads one side only; an "
                                 "outer join's ON may relate its two sides and select the rows of a "
                                 "null-supplying relation, not choose which rows of a preserved side match")
            # else: a condition on the null-supplying relation is its selection (fedmodel.viewdef)
        both = {a | b for a in left for b in right if all(self.relations_of(c) <= a | b for c in matches)}
        return (both | (left if shape.side in ("LEFT", "FULL") else set())
                | (right if shape.side in ("RIGHT", "FULL") else set()))

    def kept(self, terms: set[frozenset], conditions: list[exp.Expression], clause: str) -> set[frozenset]:
        """The terms that hold every relation each condition reads (it is false on the NULLs of
        a relation a term lacks); a condition on one relation some term lacks must reject NULLs."""
        for c in conditions:
            read = self.relations_of(c)
            if len(read) == 1 and any(not read <= t for t in terms) and not self.rejects_nulls(c):
                raise ModelError(f"view: {c.sql()} in {clause} holds for the NULLs an outer join pads "
                                 f"{next(iter(read))} with (an anti-join); a condition on a null-supplying "
                                 "relation must reject NULLs")
            terms = {t for t in terms if read <= t}
        return terms


def conjuncts(e: exp.Expression) -> list[exp.Expression]:
    """The conjuncts of a condition, parentheses dropped."""
    while isinstance(e, exp.Paren):
        e = e.this
    if isinstance(e, exp.And):
        return conjuncts(e.this) + conjuncts(e.expression)
    return [e]
