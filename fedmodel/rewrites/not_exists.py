"""NOT EXISTS in WHERE: an anti-join, kept as the padded rows of a LEFT JOIN.

`SELECT a.j FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.i = a.i AND b.k > 5)` shows the
rows of a with no partner in b (those b rows passing `b.k > 5`): the rows of
`a LEFT JOIN b ON b.i = a.i AND b.k > 5` padded in b, which SQL writes `WHERE b.i IS NULL`
with b.i a column of the correlation. fedmodel.outer_joins reads that idiom as the view's rows
of the terms lacking b (`OuterJoins.padded`), while the maintained join keeps both terms; so b
is maintained, versioned and compensated as any relation of the join, under every algorithm
that takes outer joins (warehouse.core.outer_join_state: a row appears when its last partner
goes, and leaves when one comes).

Taken: NOT EXISTS ANDed with the other conditions, its subquery reading one base relation,
correlated by equalities with the outer relations, and selecting that relation's rows. The
outer FROM's commas become CROSS JOINs, so that the LEFT JOIN, appended last, joins all of it.
Refused with one line: NOT EXISTS under OR or inside an expression, beside EXISTS, in an
aggregate view; a subquery that reads several relations or anything but a base relation, that
aggregates, is cut or nests a subquery, without an equality to the outer query, or with a
condition on the outer relations alone (it would choose which outer rows the subquery sees).

>>> import sqlglot
>>> from fedlab.fedmodel.catalog import Catalog
>>> cat = Catalog.from_dict({"sources": {"x": {"a": {"columns": ["i", "j"], "key": ["i"]}},
...                                       "y": {"b": {"columns": ["i", "k"], "key": ["i", "k"]}}}})
>>> antijoins(sqlglot.parse_one("SELECT j FROM a WHERE j > 0 AND NOT EXISTS (SELECT 1 FROM b WHERE b.i = a.i)"), cat).sql()
'SELECT a.j FROM a LEFT JOIN b ON b.i = a.i WHERE a.j > 0 AND b.i IS NULL'
"""

from __future__ import annotations

from sqlglot import exp

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.outer_joins import conjuncts
from fedlab.fedmodel.rewrites import stars, using
from fedlab.fedmodel.rewrites.scope import from_items, qualify, rename, unused
from fedlab.fedmodel.viewdef import SELECT_PARTS, aggregated_by, refuse_clauses


def antijoins(tree: exp.Select, catalog: Catalog) -> exp.Select:
    """`tree` (changed in place) with each NOT EXISTS of its WHERE written as a LEFT JOIN and its
    padding test, as above; `tree` itself when it has none."""
    found = [node for node in tree.find_all(exp.Exists)
             if node.find_ancestor(exp.Select) is tree and isinstance(node.parent, exp.Not)]
    if not found:
        return tree
    where = tree.args.get("where")
    kept = conjuncts(where.this) if where is not None else []
    if not all(any(node.parent is c for c in kept) for node in found):
        raise ModelError("view: NOT EXISTS under OR or inside an expression is not supported; NOT EXISTS is "
                         "taken as a condition ANDed with the others")
    if any(not isinstance(e.parent, exp.Not) for e in tree.find_all(exp.Exists) if e.find_ancestor(exp.Select) is tree):
        raise ModelError("view: NOT EXISTS beside EXISTS is not supported")
    if aggregated_by(tree) is not None:
        raise ModelError("view: NOT EXISTS in an aggregate view is not supported")
    if tree.args.get("with_") or any(not isinstance(item, exp.Table) for item in from_items(tree)):
        raise ModelError("view: NOT EXISTS beside a WITH query or derived table is not supported; "
                         "name base relations in FROM")
    stars.expand(tree, catalog)
    using.to_on(tree, catalog)
    qualify(tree, catalog)
    for join in tree.args.get("joins") or []:
        if not any(join.args.get(part) for part in ("kind", "side", "on")):
            join.set("kind", "CROSS")   # a comma: the LEFT JOIN appended below must see its left
    tests = []
    for node in found:
        tests.append(_join_in(tree, node.this, catalog))
    rest = [c for c in kept if not any(node.parent is c for node in found)]
    tree.set("where", exp.Where(this=exp.and_(*rest, *tests)))
    return tree


def _join_in(tree: exp.Select, subquery: exp.Expression, catalog: Catalog) -> exp.Expression:
    """LEFT JOINs the subquery's relation to `tree` on its conditions; returns the padding test."""
    if not isinstance(subquery, exp.Select):
        raise ModelError(f"view: NOT EXISTS ({subquery.sql()}) is not supported: NOT EXISTS (SELECT ... FROM ...)")
    construct = aggregated_by(subquery)
    if construct is not None:
        raise ModelError(f"view: a subquery in NOT EXISTS that aggregates ({construct}) is not supported")
    refuse_clauses(subquery, SELECT_PARTS, " in NOT EXISTS")
    items = from_items(subquery)
    if len(items) != 1 or not isinstance(items[0], exp.Table):
        raise ModelError("view: a subquery in NOT EXISTS must read one base relation")
    where = subquery.args.get("where")
    if where is None or where.find(exp.Query):
        raise ModelError("view: a subquery in NOT EXISTS needs conditions relating it to the outer query, "
                         "and no subquery of its own")
    qualify(subquery, catalog, enclosing=tree)
    taken = {item.alias_or_name.lower() for item in from_items(tree)}
    inner = items[0]
    if inner.alias_or_name.lower() in taken:
        rename(subquery, inner, unused(inner.alias_or_name, taken))
    name = inner.alias_or_name.lower()
    conditions = conjuncts(subquery.args["where"].this)
    correlated = None
    for c in conditions:
        tables = {col.table.lower() for col in c.find_all(exp.Column)}
        if name not in tables:
            raise ModelError(f"view: {c.sql()} in NOT EXISTS reads the outer relations only; the subquery's "
                             "conditions must read its own relation")
        if (correlated is None and isinstance(c, exp.EQ) and len(tables) == 2
                and all(isinstance(side, exp.Column) for side in (c.this, c.expression))):
            correlated = c.this if c.this.table.lower() == name else c.expression
    if correlated is None:
        raise ModelError("view: NOT EXISTS needs an equality between its relation and the outer query's")
    tree.join(inner.copy(), on=exp.and_(*[c.copy() for c in conditions]), join_type="left", copy=False)
    return exp.Is(this=correlated.copy(), expression=exp.Null())
