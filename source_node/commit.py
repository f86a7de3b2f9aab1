"""Validating a client's transaction against a source's state, the same for every kind of store.

`plan_commit` turns a `TransactionRequest` into the per-relation changes to write, or raises
ModelError naming the first problem (a relation the source does not own, a type mismatch, a
duplicate key, a row to delete or modify that is not there). Nothing is written until it returns,
so a rejected transaction leaves no partial state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fedmodel.catalog import Catalog, check_row
from fedmodel.errors import ModelError
from fedmodel.transactions import Modification, TransactionRequest


@dataclass(frozen=True)
class PlannedChange:
    relation: str
    inserted: tuple[tuple, ...]
    deleted: tuple[tuple, ...]
    modified: tuple[Modification, ...]


def plan_commit(catalog: Catalog, source: str, request: TransactionRequest,
                lookup: Callable[[str, tuple], tuple | None]) -> list[PlannedChange]:
    """`lookup(relation, key)` returns the stored row with that key, or None."""
    where = f"transaction {request.txn_id}"
    if not request.relations:
        raise ModelError(f"{where}: it changes nothing")
    planned = []
    for name in request.relations:
        if not catalog.has_relation(name) or catalog.relation(name).source != source:
            raise ModelError(f"{where}: source {source} does not own a relation named {name!r}")
        rel = catalog.relation(name)
        # The relation's state as this transaction sees it, key -> row (None: deleted here).
        touched: dict[tuple, tuple | None] = {}

        def current(key):
            return touched[key] if key in touched else lookup(rel.name, key)

        def existing(row_or_key, what):
            values = tuple(row_or_key)
            key = values if len(values) == len(rel.key) and len(values) != len(rel.columns) else None
            if key is None:
                check_row(rel, values, where)
                key = rel.key_of(values)
            row = current(key)
            if row is None or (len(values) == len(rel.columns) and row != values):
                raise ModelError(f"{where}: {what} {rel.name}{list(values)} which is not there")
            return row

        deleted, modified, inserted = [], [], []
        for r in request.deletes.get(name, []):
            row = existing(r, "deletes")
            touched[rel.key_of(row)] = None
            deleted.append(row)
        for m in request.modifies.get(name, []):
            old = existing(m.old, "modifies")
            new = check_row(rel, m.new, where)
            touched[rel.key_of(old)] = None
            if current(rel.key_of(new)) is not None:
                raise ModelError(f"{where}: modifying {rel.name}{list(old)} would duplicate key {list(rel.key_of(new))}")
            touched[rel.key_of(new)] = new
            modified.append(Modification(old, new))
        for r in request.inserts.get(name, []):
            row = check_row(rel, r, where)
            if current(rel.key_of(row)) is not None:
                raise ModelError(f"{where}: inserting {rel.name}{list(row)} duplicates key {list(rel.key_of(row))}")
            touched[rel.key_of(row)] = row
            inserted.append(row)
        planned.append(PlannedChange(rel.name, tuple(inserted), tuple(deleted), tuple(modified)))
    return planned
