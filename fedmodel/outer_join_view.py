"""An outer-join view (LEFT, RIGHT, FULL JOIN) over the terms the algorithms maintain.

`parse_view` reads a view with outer joins as the union of its join-disjunctive normal form's
terms, NULL-padded (fedmodel.outer_joins): a join of base rows per row, monotone in every
relation, which every algorithm that maintains joins keeps with its version numbers and
compensation. The user's view is a function of it (Larson & Zhou, ICDE 2007, section 3): a row
of a term is shown unless a row of a larger term holds the same base rows (it is subsumed), and
shows the user's columns. To tell that from a row alone, the maintained view, the *join* of an
`OuterJoinView`, selects the user's columns and then every relation's key and join columns:
- a relation is in a row's term when one of its join edges holds in the row (both sides not NULL
  and equal), since a term of several relations is a connected subtree of the join graph and a
  relation the term lacks is NULL throughout;
- a row in which no edge holds is of a one-relation term, the relation with a value in its key
  or join columns; a row with none (a relation's row of NULLs there) joins nothing, so no row
  subsumes it, and which term it is of does not matter;
- the relations of its term are the base rows it holds, by their keys.
warehouse.core.outer_join_state keeps the user's rows from the join's deltas, state by state; a
whole-view evaluation (live, a Spark job) reads the join as fedmodel.terms_sql writes it.

>>> from fedlab.fedmodel.catalog import Catalog
>>> cat = Catalog.from_dict({"sources": {"x": {"r": {"columns": ["i", "v"], "key": ["i"]}},
...                                       "y": {"s": {"columns": ["i", "w"], "key": ["w"]}}}})
>>> view = parse_outer_join("SELECT r.v, s.w FROM r LEFT JOIN s ON r.i = s.i", cat)
>>> view.join.column_names, sorted(view.term_of((5, None, 1, None)))
(('v', 'w', 'i', 's_i'), ['r'])
>>> row = (5, 7, 1, 1)
>>> sorted(view.term_of(row)), [sorted(view.identity(row)[0]), view.identity(row)[1]]
(['r', 's'], [['r', 's'], ((1,), (7,))])
"""

from __future__ import annotations

from dataclasses import dataclass

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.viewdef import ColumnRef, ViewDef, parse_view, per_view, with_columns


@dataclass(frozen=True)
class OuterJoinView:
    sql: str         # the user's SQL (with NOT EXISTS, before fedmodel.rewrites.not_exists)
    user: ViewDef    # the user's view as parsed: its columns, types and count
    join: ViewDef    # what the algorithms maintain: the terms' rows, the user's columns first

    @property
    def output_names(self) -> tuple[str, ...]:
        return self.user.output_names

    @property
    def output_types(self) -> tuple[str, ...]:
        return self.user.output_types

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.output_names + (("count",) if self.has_count else ())

    @property
    def has_count(self) -> bool:
        """Whether two rows can show alike: when the columns shown lack the key of a relation
        the rows may hold (an anti-join's rows are padded in its relation)."""
        padded = self.join.outer.padded
        return not all(set(self.user.relation(r).key) <= self.user.visible_columns(r)
                       for r in self.user.relations if r not in padded)

    @property
    def width(self) -> int:
        """The user's columns: the join's first ones."""
        return len(self.user.outputs)

    def term_of(self, row: tuple) -> frozenset:
        """The relations of the term a row of the join is of (see the module's docstring); empty
        for a row of NULLs in every key and join column."""
        held = frozenset(r for e, pairs in _edge_positions(self.join)
                         if all(row[a] is not None and row[a] == row[b] for a, b in pairs) for r in (e.a, e.b))
        if held:
            return held
        valued = [r for r in self.join.relations if any(row[p] is not None for p in _told_by(self.join, r))]
        return frozenset(valued[:1])

    def identity(self, row: tuple, term: frozenset | None = None) -> tuple[frozenset, tuple]:
        """The term and its base rows' keys, in the view's relation order: a row of a smaller
        term with the same keys for its relations is subsumed by this one."""
        term = self.term_of(row) if term is None else term
        return term, tuple(tuple(row[p] for p in _key_positions(self.join, r))
                           for r in self.join.relations if r in term)


def parse_outer_join(sql: str, catalog: Catalog, written: str | None = None) -> ViewDef | OuterJoinView:
    """The view `sql` defines when it joins select-project-join (a ViewDef, also for an outer join
    whose padded rows WHERE rejects), or with outer joins, an OuterJoinView; `written`: the SQL
    the user wrote, when `sql` is its rewriting."""
    user = parse_view(sql, catalog)
    if user.outer is None:
        return user
    shown = {o.ref for o in user.outputs}
    told = [(r, c) for r in user.relations for c in _telling(user, r)
            if ColumnRef(r, user.relation(r).columns[user.relation(r).index(c)]) not in shown]
    return OuterJoinView(written or sql, user, with_columns(user, told))


def _telling(view: ViewDef, relation: str) -> list[str]:
    """The columns of `relation` whose values tell a row's term and base rows: its key, then its
    join columns."""
    rel = view.relation(relation)
    return list(dict.fromkeys([*rel.key, *sorted(view.join_columns(relation), key=rel.index)]))


def _position(view: ViewDef, relation: str, column: str) -> int:
    """The join's column that is `relation.column` itself (not an equal one of another relation)."""
    ref = ColumnRef(relation, view.relation(relation).columns[view.relation(relation).index(column)])
    return next(i for i, o in enumerate(view.outputs) if o.ref == ref)


@per_view
def _key_positions(view: ViewDef, relation: str) -> tuple[int, ...]:
    return tuple(_position(view, relation, c) for c in view.relation(relation).key)


@per_view
def _told_by(view: ViewDef, relation: str) -> tuple[int, ...]:
    return tuple(_position(view, relation, c) for c in _telling(view, relation))


@per_view
def _edge_positions(view: ViewDef) -> tuple:
    return tuple((e, tuple((_position(view, e.a, ca), _position(view, e.b, cb)) for ca, cb in e.pairs))
                 for e in view.edges)
