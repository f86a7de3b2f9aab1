"""Strobe's key condition: the view holds the key of every base relation (Zhuge et al. 1996,
sections 1 and 5.1: "if a user-specified view does not contain sufficient key information, the
warehouse can simply add the key attributes to the view definition").

`widen(view)` appends to the select list every key column that no view column shows, directly or
through a join equality; the Strobe family maintains the widened view, whose rows are unique, so
`key_delete` can find them. `project(view, rows)` turns widened rows back into the user's rows:
the added columns come last, so a user row is a prefix of a widened one and multiplicities add
up (the user's `count` column). The user, the checker's oracle (which evaluates the user's SQL)
and the reports see the projection; `fedlab simulate --json` also names the maintained columns.
"""

from __future__ import annotations

from collections import Counter

from fedlab.fedmodel.viewdef import ViewDef, with_columns


def widen(view: ViewDef) -> ViewDef:
    """The view with every relation's key in its select list (the view itself if it has them).

    >>> from fedlab.fedmodel.catalog import Catalog
    >>> from fedlab.fedmodel.viewdef import parse_view
    >>> cat = Catalog.from_dict({"sources": {"x": {"R1": {"columns": ["A", "B"], "key": ["A"]}},
    ...                                       "y": {"R2": {"columns": ["B", "C"], "key": ["C"]}}}})
    >>> v = widen(parse_view("SELECT R1.B FROM R1 JOIN R2 ON R1.B = R2.B", cat))
    >>> v.column_names, v.has_count
    (('B', 'A', 'C'), False)
    """
    missing = [(r, c) for r in view.relations for c in view.relation(r).key
               if c.lower() not in {v.lower() for v in view.visible_columns(r)}]
    return with_columns(view, missing) if missing else view


def project(view: ViewDef, rows: dict[tuple, int]) -> dict[tuple, int]:
    """Widened rows (or a signed delta of them) as rows of the user's `view`, counts summed."""
    width = len(view.outputs)
    out: Counter = Counter()
    for row, count in rows.items():
        out[row[:width]] += count
    return {r: c for r, c in out.items() if c}
