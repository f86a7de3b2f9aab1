"""WITH: each query a WITH clause names becomes a derived table where the view reads it.

`WITH w AS (SELECT ...) SELECT ... FROM w` reads w's rows as if its body were written in its
place, so the rule writes it there, `(SELECT ...) AS w`, once per reference (a WITH query read
twice under two aliases is a self-join of two derived tables), and the derived_tables rule
flattens each. A WITH query may read the ones named before it. WITH RECURSIVE is refused: its
fixpoint is no select-project-join view (pg_ivm refuses it too).

>>> import sqlglot
>>> inline(sqlglot.parse_one("WITH w AS (SELECT a.i FROM a) SELECT w.i, v.i FROM w JOIN w AS v ON w.i = v.i")).sql()
'SELECT w.i, v.i FROM (SELECT a.i FROM a) AS w JOIN (SELECT a.i FROM a) AS v ON w.i = v.i'
"""

from __future__ import annotations

from sqlglot import exp

from fedlab.fedmodel.errors import ModelError


def inline(tree: exp.Select) -> exp.Select:
    """`tree` (changed in place) with its WITH queries written where they are read."""
    with_ = tree.args.get("with_")
    if with_ is None:
        return tree
    if with_.args.get("recursive"):
        raise ModelError("view: WITH RECURSIVE is not supported; a recursive query is not a select-project-join view")
    bodies: dict[str, exp.CTE] = {}
    for cte in with_.expressions:
        _write_in_place(cte.this, bodies)
        bodies[cte.alias.lower()] = cte
    tree.set("with_", None)
    _write_in_place(tree, bodies)
    return tree


def _write_in_place(tree: exp.Expression, bodies: dict[str, exp.CTE]) -> None:
    """Replaces each relation of `tree` that `bodies` names with that WITH query's body."""
    for table in list(tree.find_all(exp.Table)):
        cte = bodies.get(table.name.lower())
        if cte is not None and not table.args.get("db"):
            columns = table.args["alias"].columns if table.args.get("alias") else cte.args["alias"].columns
            alias = exp.TableAlias(this=exp.to_identifier(table.alias_or_name), columns=[c.copy() for c in columns])
            table.replace(exp.Subquery(this=cte.this.copy(), alias=alias))
