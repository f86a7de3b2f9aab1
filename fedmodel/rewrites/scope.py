"""What the rewrites ask of one SELECT: its FROM items, the columns each shows, its own columns."""

from __future__ import annotations

from typing import Iterator

from sqlglot import exp

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.viewdef import base_relation


def from_items(select: exp.Select) -> list[exp.Expression]:
    """The relations and derived tables of `select`'s FROM and joins, in order."""
    from_ = select.args.get("from_")
    return ([from_.this] if from_ else []) + [j.this for j in select.args.get("joins") or []]


def columns_of(item: exp.Expression, catalog: Catalog) -> list[str]:
    """The columns a FROM item shows, in order: a relation's, as the catalog spells them; a
    derived table's, as its column list (`AS d(x, y)`) and then its select list name them."""
    if isinstance(item, exp.Subquery) and isinstance(item.this, exp.Select):
        listed = [c.name for c in item.args["alias"].columns] if item.args.get("alias") else []
        selected = [e.alias_or_name for e in item.this.expressions]
        if len(listed) > len(selected):
            raise ModelError(f"view: {item.alias_or_name}({', '.join(listed)}) names {len(listed)} columns "
                             f"of a query that has {len(selected)}")
        return listed + selected[len(listed):]
    return list(base_relation(item, catalog).columns)


def own_columns(select: exp.Select) -> Iterator[exp.Column]:
    """The columns `select`'s select list, ON and WHERE name, not those of a query nested in them."""
    parts = [*select.expressions, *(j.args.get("on") for j in select.args.get("joins") or []),
             select.args.get("where")]
    for part in parts:
        if part is not None:
            for node in list(part.walk(prune=lambda n: isinstance(n, exp.Query))):
                if isinstance(node, exp.Column) and not isinstance(node.this, exp.Star):
                    yield node


def qualify(select: exp.Select, catalog: Catalog, enclosing: exp.Select | None = None) -> None:
    """Names the FROM item of each of `select`'s unqualified columns: the one that shows it, or,
    when none of `select`'s does and `select` is nested in `enclosing`, the enclosing query's
    (a correlated column, as SQL resolves it)."""
    def shown_by(query):
        return [(item.alias_or_name, {c.lower() for c in columns_of(item, catalog)}) for item in from_items(query)]

    shown, outer = shown_by(select), shown_by(enclosing) if enclosing is not None else []
    for column in list(own_columns(select)):
        if column.table:
            continue
        owners = ([name for name, columns in shown if column.name.lower() in columns]
                  or [name for name, columns in outer if column.name.lower() in columns])
        if not owners:
            raise ModelError(f"view: no relation in FROM has a column {column.name!r}")
        if len(owners) > 1:
            raise ModelError(f"view: column {column.name!r} is ambiguous ({' or '.join(owners)}); qualify it")
        column.set("table", exp.to_identifier(owners[0]))


def rename(body: exp.Select, item: exp.Expression, name: str) -> None:
    """Gives the body's FROM `item` the alias `name`, in its columns too."""
    old = item.alias_or_name.lower()
    for column in own_columns(body):
        if column.table.lower() == old:
            column.set("table", exp.to_identifier(name))
    item.set("alias", exp.TableAlias(this=exp.to_identifier(name)))


def unused(name: str, taken: set[str]) -> str:
    """`name`, or `name_2`, `name_3`, ..., the first not `taken`."""
    n, candidate = 1, name
    while candidate.lower() in taken:
        n += 1
        candidate = f"{name}_{n}"
    return candidate
