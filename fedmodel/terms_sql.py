"""The rows the algorithms maintain for a view, as one SQL query: what a whole-view evaluation
(the live warehouse's initial materialisation and recomputation, Spark jobs over source
snapshots) must produce.

For a view of inner joins that is the view's own SQL (`ViewDef.rewritten`). A view with outer
joins is maintained as the NULL-padded rows of the terms of its join-disjunctive normal form
(fedmodel.outer_joins; Galindo-Legaria 1994, Larson & Zhou ICDE 2007 section 3), each row once and
none subsumed, which no outer-join SQL evaluates: its SQL would drop the subsumed rows the
warehouse counts (warehouse.core.outer_join_state). So it is written as the terms' `UNION ALL`,
each term the inner join of its relations (their equalities and selections) with a typed NULL for
every column of a relation it lacks: the rows warehouse.core.recompute folds, the same rows in the
same columns. An anti-join's test of padding (`OuterJoins.padded`) picks the rows the user sees
after subsumption and is not in the terms.

>>> from fedlab.fedmodel.catalog import Catalog
>>> from fedlab.fedmodel.outer_join_view import parse_outer_join
>>> cat = Catalog.from_dict({"sources": {"x": {"r": {"columns": ["i", "v"], "types": ["BIGINT"] * 2, "key": ["i"]}},
...                                       "y": {"s": {"columns": ["i", "w"], "types": ["BIGINT"] * 2, "key": ["w"]}}}})
>>> view = parse_outer_join("SELECT r.v, s.w FROM r LEFT JOIN s ON r.i = s.i AND s.w > 0", cat)
>>> print(maintained_sql(view.join).replace(" UNION ALL ", "\\nUNION ALL\\n"))
SELECT r.v AS v, s.w AS w, r.i AS i, s.i AS s_i FROM r AS r, s AS s WHERE r.i = s.i AND s.w > 0
UNION ALL
SELECT r.v AS v, CAST(NULL AS BIGINT) AS w, r.i AS i, CAST(NULL AS BIGINT) AS s_i FROM r AS r
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from fedlab.fedmodel.viewdef import ViewDef


def maintained_sql(view: ViewDef) -> str:
    """The SQL (DuckDB's dialect, which sqlglot reads for Spark) of the rows the algorithms keep
    for `view`, the join of a user's view (`view.join`): its own SQL, or with outer joins its
    terms' padded rows as a UNION ALL."""
    if view.outer is None:
        return view.rewritten
    return " UNION ALL ".join(_term(view, term).sql(dialect="duckdb") for term in view.outer.terms)


def _term(view: ViewDef, term: frozenset) -> exp.Select:
    """One term's rows: its relations' inner join, the columns of the others NULL."""
    present = [r for r in view.relations if r in term]
    columns = [exp.column(o.ref.column, table=o.ref.relation) if o.ref.relation in term
               else exp.cast(exp.null(), view.relation(o.ref.relation).type_of(o.ref.column))
               for o in view.outputs]
    select = exp.select(*(exp.alias_(c, o.name) for c, o in zip(columns, view.outputs)))
    select = select.from_(exp.alias_(exp.to_table(view.base_of(present[0])), present[0], table=True))
    for relation in present[1:]:
        select = select.join(exp.alias_(exp.to_table(view.base_of(relation)), relation, table=True))
    conditions = [exp.column(ca, table=e.a).eq(exp.column(cb, table=e.b))
                  for e in view.edges if e.a in term and e.b in term for ca, cb in e.pairs]
    conditions += [_qualified(view.selection_sql(r), r) for r in present if view.selection_sql(r)]
    return select.where(*conditions) if conditions else select


def _qualified(selection: str, relation: str) -> exp.Expression:
    """A relation's selection (SQL over its own column names) with each column qualified by it."""
    tree = sqlglot.parse_one(selection, dialect="duckdb")
    for column in tree.find_all(exp.Column):
        column.set("table", exp.to_identifier(relation))
    return tree
