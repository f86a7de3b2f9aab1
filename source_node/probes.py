"""The column sets a view's maintenance sub-queries probe, so that a source indexes them before
the first sub-query arrives (source_node.sqlite_store).

A sub-query (fedmodel.subquery) looks a relation's rows up by the columns of one join edge of the
view: the join-graph plan and the left/right scans both follow the view's edges (Sze-Ling 4.1;
warehouse/core/planner.py), so each edge's columns on each side are what sources are asked by.
Refresh by key and key deletes look rows up by a relation's key, which its primary key indexes;
a sub-query probing any other column set still gets its index, the first time.
"""

from __future__ import annotations

from fedlab.fedmodel.viewdef import ViewDef


def probed_columns(view: ViewDef) -> list[tuple[str, tuple[str, ...]]]:
    """(relation, columns) for each side of each join edge of `view`, each pair once (an
    occurrence of a relation read twice probes its relation: warehouse.core.occurrences).

    >>> from fedlab.fedmodel.catalog import Catalog
    >>> from fedlab.fedmodel.viewdef import parse_view
    >>> cat = Catalog.from_dict({"sources": {"s1": {"R": {"columns": ["A", "B"]}},
    ...                                      "s2": {"S": {"columns": ["B", "C"]}}}})
    >>> probed_columns(parse_view("SELECT A, C FROM R JOIN S ON R.B = S.B", cat))
    [('R', ('B',)), ('S', ('B',))]
    """
    out: list[tuple[str, tuple[str, ...]]] = []
    for edge in view.edges:
        for relation in (edge.a, edge.b):
            probe = (view.base_of(relation), edge.columns_of(relation))
            if probe not in out:
                out.append(probe)
    return out
