"""Rewrites of a view's SQL into the select-project-join form fedmodel.viewdef maintains.

Views written for pg_ivm are often select-project-join views spelled otherwise: `SELECT *`,
`JOIN ... USING`, `NATURAL JOIN`, a WITH query or a derived table over base relations, two
columns of one name. `rewrite` turns each SELECT into one over base relations with a list of
distinctly named columns, one rule per module, applied in this order:
- ctes: a WITH query becomes a derived table wherever it is read;
- (each derived table's body is rewritten first, recursively, so that its columns are known)
- stars: `*` and `t.*` become the columns they show;
- using: USING and NATURAL become ON equalities;
- derived_tables: a derived table's relations and conditions join the outer query's;
- names: a second column of one name is renamed.
What no rule turns into a select-project-join view is left for the parser to refuse, or refused
here with one line when only the rule sees it (WITH RECURSIVE, an aggregate derived table).

Two rules are not in that order, and fedmodel.aggregate_view.parse_query applies them first:
not_exists, NOT EXISTS in WHERE, turns the view into a LEFT JOIN's padded rows (an outer-join
view, fedmodel.outer_joins); exists, EXISTS in WHERE, into an aggregate one over a join; the
rules above then take the join.
"""

from __future__ import annotations

from sqlglot import exp

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.rewrites import ctes, derived_tables, names, stars, using


def rewrite(tree: exp.Select, catalog: Catalog) -> exp.Select:
    """`tree` (changed in place) as a SELECT over base relations, whose select list has no stars
    and no two columns of one name.

    >>> import sqlglot
    >>> from fedlab.fedmodel.catalog import Catalog
    >>> cat = Catalog.from_dict({"sources": {"x": {"a": {"columns": ["i", "j"], "key": ["i"]}},
    ...                                       "y": {"b": {"columns": ["i", "k"], "key": ["i"]}}}})
    >>> rewrite(sqlglot.parse_one("WITH w AS (SELECT * FROM a WHERE j > 1) SELECT * FROM w JOIN b USING (i)"), cat).sql()
    'SELECT a.i AS i, a.j AS j, b.k FROM a JOIN b ON a.i = b.i WHERE a.j > 1'
    """
    ctes.inline(tree)
    for body in derived_tables.bodies(tree):
        rewrite(body, catalog)
    stars.expand(tree, catalog)
    using.to_on(tree, catalog)
    derived_tables.flatten(tree, catalog)
    names.distinct(tree)
    return tree
