"""`JOIN ... USING (c, ...)` and `NATURAL JOIN`: each becomes `JOIN ... ON l.c = r.c AND ...`.

USING (c) equates the right relation's c with the c of the relations to its left (back to the
last comma of the FROM list, which binds looser than JOIN); NATURAL JOIN does so for every
column name the two sides share. A USING column then has one value, which SQL names without a
relation: an unqualified c is the left relation's c (the stars rule shows it once, there). Under
a RIGHT or FULL JOIN it is COALESCE of both sides' c, no column of either: refused (write ON).

>>> import sqlglot
>>> from fedlab.fedmodel.catalog import Catalog
>>> cat = Catalog.from_dict({"sources": {"x": {"a": {"columns": ["i", "j"], "key": ["i"]}},
...                                       "y": {"b": {"columns": ["i", "j", "k"], "key": ["i"]}}}})
>>> to_on(sqlglot.parse_one("SELECT i, b.k FROM a JOIN b USING (i)"), cat).sql()
'SELECT a.i, b.k FROM a JOIN b ON a.i = b.i'
>>> to_on(sqlglot.parse_one("SELECT j FROM a NATURAL JOIN b AS c"), cat).sql()
'SELECT a.j FROM a JOIN b AS c ON a.i = c.i AND a.j = c.j'
"""

from __future__ import annotations

from sqlglot import exp

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.rewrites.scope import columns_of, from_items, own_columns

Pair = tuple[exp.Expression, str, exp.Expression, str]   # left FROM item, its column, right item, its column


def equated(tree: exp.Select, catalog: Catalog) -> list[tuple[exp.Join, list[Pair]]]:
    """Each USING or NATURAL join of `tree` with the columns it equates."""
    items = from_items(tree)
    found = []
    start = 0   # where the left side of the next join begins
    for n, join in enumerate(tree.args.get("joins") or [], start=1):
        natural = str(join.args.get("method") or "").upper() == "NATURAL"
        if not any(join.args.get(part) for part in ("kind", "side", "on", "using", "method")):
            start = n   # a comma
        if not (natural or join.args.get("using")):
            continue
        if str(join.args.get("side") or "").upper() in ("RIGHT", "FULL"):
            raise ModelError(f"view: {'NATURAL' if natural else 'USING'} with a {join.args['side'].upper()} JOIN "
                             "is not supported (its column is COALESCE of both sides); write ON")
        right = items[n]
        left = [(item, c) for item in items[start:n] for c in columns_of(item, catalog)]
        mine = {c.lower(): c for c in columns_of(right, catalog)}
        if natural:
            wanted = list(dict.fromkeys(c for _, c in left if c.lower() in mine))
        else:
            wanted = [u.name for u in join.args["using"]]
        pairs = []
        for name in wanted:
            owner = next(((item, c) for item, c in left if c.lower() == name.lower()), None)
            if owner is None:
                raise ModelError(f"view: no relation left of {join.sql()} has a column {name!r}")
            if name.lower() not in mine:
                raise ModelError(f"view: relation {right.alias_or_name} has no column {name!r}, in {join.sql()}")
            pairs.append((owner[0], owner[1], right, mine[name.lower()]))
        found.append((join, pairs))
    return found


def to_on(tree: exp.Select, catalog: Catalog) -> exp.Select:
    """`tree` (changed in place) with its USING and NATURAL joins written with ON, and each
    unqualified USING column qualified by the left relation."""
    owners: dict[str, tuple[str, str]] = {}   # a USING column -> its left relation and spelling
    for join, pairs in equated(tree, catalog):
        join.set("using", None)
        join.set("method", None)
        equalities = [exp.column(lc, table=left.alias_or_name).eq(exp.column(rc, table=right.alias_or_name))
                      for left, lc, right, rc in pairs]
        join.set("on", exp.and_(*equalities) if equalities else None)
        for left, lc, _, _ in pairs:
            owners.setdefault(lc.lower(), (left.alias_or_name, lc))
    for column in own_columns(tree):
        if not column.table and column.name.lower() in owners:
            table, name = owners[column.name.lower()]
            column.replace(exp.column(name, table=table))
    return tree
