"""A derived table (or WITH query) whose body is select-project-join joins the query that reads it.

`SELECT d.c FROM (SELECT r.x AS c FROM r WHERE p) AS d JOIN s ON d.c = s.c` reads the rows of r
that pass p, so it is `SELECT r.x AS c FROM r JOIN s ON r.x = s.c WHERE p`: the body's relations
take the derived table's place in FROM, its conditions join the outer ones, and each `d.c`
becomes the body's expression for c (under the name c where the select list shows it). Columns
are qualified first, so that the relations the body brings cannot capture a name; a body
relation named like one already in FROM is renamed `<d>_<name>` (`_2`, `_3`, ... if that is
taken too). A body that aggregates (GROUP BY, aggregates, DISTINCT) or cut (ORDER BY, LIMIT,
...) has other rows than its relations' join, so it is refused, as pg_ivm refuses it. So is one in
a view with outer joins, in its body or around it: flattened, its conditions would move to the
outer WHERE, past the outer join that pads the rows they select.

>>> import sqlglot
>>> from fedlab.fedmodel.catalog import Catalog
>>> cat = Catalog.from_dict({"sources": {"x": {"a": {"columns": ["i", "j"], "key": ["i"]}}}})
>>> tree = sqlglot.parse_one("SELECT d.i, n FROM (SELECT a.i, j AS n FROM a WHERE a.j > 1) AS d JOIN a ON d.i = a.j")
>>> flatten(tree, cat).sql()
'SELECT d_a.i AS i, d_a.j AS n FROM a AS d_a JOIN a ON d_a.i = a.j WHERE d_a.j > 1'
"""

from __future__ import annotations

from sqlglot import exp

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.outer_joins import has_outer_join
from fedlab.fedmodel.rewrites.scope import columns_of, from_items, own_columns, qualify, rename, unused
from fedlab.fedmodel.viewdef import SELECT_PARTS, aggregated_by, clip, refuse_clauses


def bodies(tree: exp.Select) -> list[exp.Select]:
    """The bodies of `tree`'s derived tables; ModelError (one line) for one that is not select-project-join."""
    found = []
    for item in from_items(tree):
        if not (isinstance(item, exp.Subquery) and isinstance(item.this, exp.Query)):
            continue
        name, body = item.alias_or_name, item.this
        if not name:
            raise ModelError(f"view: a derived table needs a name (AS d), got {clip(body.sql())}")
        if not isinstance(body, exp.Select):
            raise ModelError(f"view: {type(body).__name__.upper()} in {name} is not supported; "
                             "a WITH query or derived table must be one SELECT ... FROM ...")
        construct = aggregated_by(body)
        if construct is not None:
            raise ModelError(f"view: {name} aggregates ({construct}); a WITH query or derived table "
                             "must be select-project-join")
        refuse_clauses(body, SELECT_PARTS | {"with_"}, f" in {name}")
        found.append(body)
    return found


def flatten(tree: exp.Select, catalog: Catalog) -> exp.Select:
    """`tree` (changed in place) with each derived table, its body already rewritten (no stars,
    distinct names), replaced by the body's relations and conditions."""
    derived = [item for item in from_items(tree) if isinstance(item, exp.Subquery) and isinstance(item.this, exp.Select)]
    if not derived:
        return tree
    if has_outer_join(tree):
        raise ModelError("view: a WITH query or derived table in a view with outer joins is not supported; "
                         "write its relations and conditions in FROM")
    qualify(tree, catalog)
    taken = {item.alias_or_name.lower() for item in from_items(tree)}
    for table in derived:
        _merge(tree, table, catalog, taken)
    return tree


def _merge(tree: exp.Select, derived: exp.Subquery, catalog: Catalog, taken: set[str]) -> None:
    body = derived.this
    qualify(body, catalog)
    for item in from_items(body):
        if item.alias_or_name.lower() in taken:
            rename(body, item, unused(f"{derived.alias_or_name}_{item.alias_or_name}", taken))
        taken.add(item.alias_or_name.lower())
    values = dict(zip((c.lower() for c in columns_of(derived, catalog)), (e.unalias() for e in body.expressions)))
    for column in list(own_columns(tree)):
        if column.table.lower() == derived.alias_or_name.lower():
            value = values.get(column.name.lower())
            if value is None:
                raise ModelError(f"view: {derived.alias_or_name} has no column {column.name!r}")
            shown = column.parent is tree   # a select-list item keeps the name the outer query shows
            column.replace(value.copy().as_(column.name) if shown else value.copy())
    holder, joins = derived.parent, list(tree.args.get("joins") or [])
    at = next((n + 1 for n, join in enumerate(joins) if join is holder), 0)
    derived.replace(body.args["from_"].this)
    tree.set("joins", joins[:at] + list(body.args.get("joins") or []) + joins[at:])
    if body.args.get("where"):
        tree.where(body.args["where"].this, copy=False)
