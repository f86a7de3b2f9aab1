"""What the rewrites ask of one SELECT: its FROM items, the columns each shows, its own columns."""

from __future__ import annotations

from typing import Iterator

from sqlglot import exp

from fedmodel.catalog import Catalog
from fedmodel.errors import ModelError
from fedmodel.viewdef import base_relation


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
