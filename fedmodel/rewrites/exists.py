"""EXISTS in WHERE: a semi-join, kept as an aggregate view over the join it stands for.

`SELECT a.j FROM a WHERE a.j > 0 AND EXISTS (SELECT 1 FROM b WHERE b.i = a.i)` shows each row of
a that passes `a.j > 0` and has a partner in b, once however many partners it has. Base relations
are sets (fedmodel.catalog: each row has a key), so each such row of a is one group of the join
`a, b WHERE a.j > 0 AND b.i = a.i` grouped by a's key; the view is that join grouped by the outer
relations' keys and the columns shown, one row per group, and a count where groups share a row
(fedmodel.aggregate_view). Under SELECT DISTINCT the grouping is DISTINCT's. So the relations
inside EXISTS are maintained as any relation of a join, under every algorithm, with their
version numbers and compensation, and the view has the consistency the algorithm keeps for the
join (warehouse.core.aggregate_state).

The subquery's columns are qualified first, its own relations before the outer ones (a correlated
column names the outer query's), and a relation of the subquery named like one of the outer query
is renamed `<name>_2` (`_3`, ...). NOT EXISTS, an anti-join, which no join's groups give, is
fedmodel.rewrites.not_exists's. Refused with one line: EXISTS under OR, NOT or inside an expression, EXISTS in a view that
aggregates, a select list of anything but columns, a subquery that aggregates or is cut, nests a
subquery or reads anything but base relations, and EXISTS beside a WITH query, a derived table or
an outer join.

>>> import sqlglot
>>> from fedlab.fedmodel.catalog import Catalog
>>> cat = Catalog.from_dict({"sources": {"x": {"a": {"columns": ["i", "j"], "key": ["i"]}},
...                                       "y": {"b": {"columns": ["i", "k"], "key": ["i", "k"]}}}})
>>> semijoins(sqlglot.parse_one("SELECT j FROM a WHERE j > 0 AND EXISTS (SELECT 1 FROM b WHERE b.i = a.i)"), cat).sql()
'SELECT a.j FROM a CROSS JOIN b WHERE a.j > 0 AND b.i = a.i GROUP BY a.i, a.j'
"""

from __future__ import annotations

from sqlglot import exp

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.outer_joins import has_outer_join
from fedlab.fedmodel.rewrites import stars, using
from fedlab.fedmodel.rewrites.scope import from_items, qualify, rename, unused
from fedlab.fedmodel.viewdef import SELECT_PARTS, aggregated_by, refuse_clauses


def semijoins(tree: exp.Select, catalog: Catalog) -> exp.Select:
    """`tree` (changed in place) with each EXISTS of its WHERE joined in, grouped as above; `tree`
    itself when it has none."""
    found = [node for node in tree.find_all(exp.Exists) if node.find_ancestor(exp.Select) is tree]
    if not found:
        return tree
    conjuncts = _conjuncts(tree)
    for node in found:
        if isinstance(node.parent, exp.Not):   # fedmodel.rewrites.not_exists took the others
            raise ModelError("view: NOT EXISTS inside an expression is not supported")
        if not any(node is c for c in conjuncts):
            raise ModelError("view: EXISTS under OR, NOT or inside an expression is not supported; "
                             "EXISTS is taken as a condition ANDed with the others")
    if has_outer_join(tree):
        raise ModelError("view: EXISTS in a view with outer joins is not supported")
    if tree.args.get("with_") or any(not isinstance(item, exp.Table) for item in from_items(tree)):
        raise ModelError("view: EXISTS beside a WITH query or derived table is not supported; "
                         "name base relations in FROM")
    stars.expand(tree, catalog)
    using.to_on(tree, catalog)
    _refuse_aggregates(tree)
    outer = list(from_items(tree))
    qualify(tree, catalog)
    joined = [c for c in conjuncts if not isinstance(c, exp.Exists)]
    for node in found:
        joined += _join_in(tree, node.this, catalog)
    tree.set("where", exp.Where(this=exp.and_(*joined)) if joined else None)
    if not tree.args.get("distinct"):
        _group_by_rows(tree, outer, catalog)
    return tree


def _conjuncts(tree: exp.Select) -> list[exp.Expression]:
    where = tree.args.get("where")
    if where is None:
        return []
    return list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]


def _refuse_aggregates(tree: exp.Select) -> None:
    if tree.args.get("group") or tree.args.get("having") or any(
            isinstance(e, exp.AggFunc) for item in tree.expressions for e in item.walk()):
        raise ModelError("view: EXISTS in an aggregate view is not supported")
    for item in tree.expressions:
        target = item.unalias()
        if not isinstance(target, exp.Column):
            raise ModelError(f"view: {target.sql()} in the select list of a view with EXISTS is not "
                             "supported: select columns")


def _join_in(tree: exp.Select, subquery: exp.Expression, catalog: Catalog) -> list[exp.Expression]:
    """Adds the subquery's relations to `tree`'s FROM; returns its conditions, for the WHERE."""
    if not isinstance(subquery, exp.Select):
        raise ModelError(f"view: EXISTS ({subquery.sql()}) is not supported: EXISTS (SELECT ... FROM ...)")
    construct = aggregated_by(subquery)
    if construct is not None:
        raise ModelError(f"view: a subquery in EXISTS that aggregates ({construct}) is not supported")
    refuse_clauses(subquery, SELECT_PARTS, " in EXISTS")
    if any(not isinstance(item, exp.Table) for item in from_items(subquery)):
        raise ModelError("view: a subquery in EXISTS must read base relations only")
    where = subquery.args.get("where")
    if where is not None and where.find(exp.Query):
        raise ModelError("view: a subquery nested in EXISTS is not supported")
    using.to_on(subquery, catalog)
    qualify(subquery, catalog, enclosing=tree)
    taken = {item.alias_or_name.lower() for item in from_items(tree)}
    for item in from_items(subquery):
        if item.alias_or_name.lower() in taken:
            rename(subquery, item, unused(item.alias_or_name, taken))
        taken.add(item.alias_or_name.lower())
    tree.join(subquery.args["from_"].this, join_type="cross", copy=False)
    tree.set("joins", [*tree.args["joins"], *(subquery.args.get("joins") or [])])
    return [where.this] if where is not None else []


def _group_by_rows(tree: exp.Select, outer: list[exp.Table], catalog: Catalog) -> None:
    """GROUP BY each outer relation's key and each column shown: one group per outer row."""
    columns = [exp.column(k, table=t.alias_or_name) for t in outer for k in catalog.relation(t.name).key]
    columns += [item.unalias().copy() for item in tree.expressions]
    seen, grouped = set(), []
    for column in columns:
        name = (column.table.lower(), column.name.lower())
        if name not in seen:
            seen.add(name)
            grouped.append(column)
    tree.group_by(*grouped, copy=False)
