"""Maintenance sub-queries and their answers, as the pure core and both kinds of source see them.

A sub-query names a connected set of relations at one source as a small tree (Sze-Ling 4.1): the
root joins the probe values; each later relation joins its parent. The answer holds, for each
relation, the rows (passing the view's selection on it) that join the probe through the tree:
a chain of semijoins, read atomically at one source state, each relation tagged with its base
relation version number (the queried version number of Lemma 1). As in SQL, a NULL join value
joins nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from fedlab.fedmodel.catalog import Catalog


@dataclass(frozen=True)
class SubqueryRelation:
    relation: str
    parent: str | None            # None: the root, joined to the probe
    columns: tuple[str, ...]      # this relation's join columns
    parent_columns: tuple[str, ...]  # the parent's columns (for the root: the probe's columns)
    selection_sql: str = ""


@dataclass(frozen=True)
class Subquery:
    id: str
    source: str
    relations: tuple[SubqueryRelation, ...]
    probe: tuple[tuple, ...]      # distinct probe values; with no probe columns, "all rows"
    # (relation, BRV) pairs: read those relations as of those versions (fedmodel.as_of), the
    # others at the current state; the answer's BRVs say which it got.
    as_of: tuple[tuple[str, int], ...] = ()

    @property
    def probe_columns(self) -> tuple[str, ...]:
        return self.relations[0].parent_columns

    @property
    def relation_names(self) -> tuple[str, ...]:
        return tuple(r.relation for r in self.relations)


@dataclass(frozen=True)
class RelationAnswer:
    relation: str
    brv: int
    rows: tuple[tuple, ...]


@dataclass(frozen=True)
class Answer:
    id: str
    source: str
    dsv: int
    relations: tuple[RelationAnswer, ...]
    # The source's clock when it read state `dsv` (warehouse.core.salem.timeline): when the
    # answer was read, not what it says, so two answers of one state are equal whatever it is.
    read_time: float = field(default=0.0, compare=False)

    def rows_of(self, relation: str) -> RelationAnswer:
        for r in self.relations:
            if r.relation == relation:
                return r
        raise KeyError(relation)


def evaluate_semijoins(sq: Subquery, catalog: Catalog, rows_of: Callable[[str], Sequence[tuple]],
                       selection: Callable[[str, str], Callable[[Sequence], bool]],
                       matching: Callable[[str, tuple[int, ...], set[tuple]], list[tuple] | None] | None = None
                       ) -> dict[str, list[tuple]]:
    """Evaluates a sub-query's semijoin chain over in-memory relations (the reference semantics).

    `rows_of(relation)` gives a relation's current rows; `selection(relation, sql)` a row test;
    `matching(relation, positions, wanted)`, when given, the rows whose values at `positions` are
    one of `wanted` (an index: exactly the rows of `rows_of` that join, in its order), or None to
    have them scanned.
    """
    result: dict[str, list[tuple]] = {}
    for i, sr in enumerate(sq.relations):
        rel = catalog.relation(sr.relation)
        test = selection(sr.relation, sr.selection_sql)
        pos = tuple(rel.index(c) for c in sr.columns)
        if i == 0:
            wanted = set(sq.probe) if sr.parent_columns else None
        else:
            parent = catalog.relation(sr.parent)
            ppos = [parent.index(c) for c in sr.parent_columns]
            wanted = {tuple(p[j] for j in ppos) for p in result[sr.parent]}
        found = matching(sr.relation, pos, wanted) if matching is not None and wanted is not None else None
        if found is not None:
            result[sr.relation] = [r for r in found if test(r)]
            continue
        result[sr.relation] = [
            r for r in rows_of(sr.relation)
            if (wanted is None or _joinable(tuple(r[j] for j in pos), wanted)) and test(r)
        ]
    return result


def _joinable(value: tuple, wanted: set) -> bool:
    """SQL inner-join semantics: a NULL join value matches nothing."""
    return None not in value and value in wanted
