"""`SELECT *` and `t.*`: each becomes the columns it shows.

`*` shows every FROM item's columns, in FROM order, each relation's in its catalog order (a
derived table's in its select list's), a column that USING or NATURAL joins with one to its
left once, where the left one is: DuckDB's order, and that of the engine checking the view
(checker.oracle). PostgreSQL puts the joined columns first instead; a view of
`*` over USING can therefore list its columns in another order than PostgreSQL would.
`t.*` shows all of t's columns, joined or not.

>>> import sqlglot
>>> from fedlab.fedmodel.catalog import Catalog
>>> cat = Catalog.from_dict({"sources": {"x": {"a": {"columns": ["i", "j"], "key": ["i"]}},
...                                       "y": {"b": {"columns": ["k", "i"], "key": ["k"]}}}})
>>> expand(sqlglot.parse_one("SELECT * FROM a JOIN b USING (i)"), cat).sql()
'SELECT a.i, a.j, b.k FROM a JOIN b USING (i)'
>>> expand(sqlglot.parse_one("SELECT b.*, a.j FROM a JOIN b USING (i)"), cat).sql()
'SELECT b.k, b.i, a.j FROM a JOIN b USING (i)'
"""

from __future__ import annotations

from sqlglot import exp

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.rewrites.scope import columns_of, from_items
from fedlab.fedmodel.rewrites.using import equated


def expand(tree: exp.Select, catalog: Catalog) -> exp.Select:
    """`tree` (changed in place) with each star of its select list replaced by its columns."""
    stars = [e for e in tree.expressions
             if isinstance(e, exp.Star) or isinstance(e, exp.Column) and isinstance(e.this, exp.Star)]
    if not stars:
        return tree
    items = from_items(tree)
    joined = {}   # id(FROM item) -> its columns USING or NATURAL shows once, on the left
    for _, pairs in equated(tree, catalog):
        for _, _, right, column in pairs:
            joined.setdefault(id(right), set()).add(column.lower())
    expressions = []
    for e in tree.expressions:
        if e not in stars:
            expressions.append(e)
            continue
        star = e if isinstance(e, exp.Star) else e.this
        if any(star.args.values()):
            raise ModelError(f"view: {e.sql()} is not supported; list the view's columns")
        if isinstance(e, exp.Star):
            shown = [(item, joined.get(id(item), set())) for item in items]
        else:
            shown = [(item, set()) for item in items if item.alias_or_name.lower() == e.table.lower()]
            if not shown:
                raise ModelError(f"view: unknown relation {e.table!r} in {e.sql()}")
        expressions += [exp.column(c, table=item.alias_or_name)
                        for item, hidden in shown for c in columns_of(item, catalog) if c.lower() not in hidden]
    tree.set("expressions", expressions)
    return tree
