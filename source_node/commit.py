"""Validating a client's transaction against a source's state, the same for every kind of store.

`plan_commit` turns a `TransactionRequest` into the per-relation net changes to write, or raises
ModelError naming the first problem (a relation the source does not own, a type mismatch, a
duplicate key, a row to delete or modify that is not there). Nothing is written until it returns,
so a rejected transaction leaves no partial state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from fedlab.fedmodel.catalog import Catalog, Relation, validate_row, validate_value
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import Modification, Notification, TransactionRequest


class GroupCommit:
    """`commit` as a group of one, for a store whose `commit_many` (transactions in order, one
    outcome each: its notification or the ModelError that rejected it) is its one commit path."""

    def commit(self, request: TransactionRequest, commit_time: float = 0.0) -> Notification:
        """Validates and commits one transaction; returns its notification (also put in the outbox).

        Raises ModelError, leaving no trace, when the transaction is invalid.
        """
        outcome, = self.commit_many([request], commit_time)
        if isinstance(outcome, ModelError):
            raise outcome
        return outcome


@dataclass(frozen=True)
class PlannedChange:
    relation: str
    inserted: tuple[tuple, ...]
    deleted: tuple[tuple, ...]
    modified: tuple[Modification, ...]


def plan_commit(catalog: Catalog, source: str, request: TransactionRequest,
                lookup: Callable[[str, tuple], tuple | None],
                find: Callable[[str, tuple, tuple], list] | None = None) -> list[PlannedChange]:
    """`lookup(relation, key)` returns the stored row with that key, or None;
    `find(relation, columns, values)` the stored rows with those values in those columns.

    With `find`, the source also enforces the catalog's declared functional dependencies and
    referential integrity over the state after the transaction: the warehouse relies on them
    (Sze-Ling 4.2), so a source that declares them must not commit a violation.
    """
    where = f"transaction {request.txn_id}"
    if not request.relations:
        raise ModelError(f"{where}: it changes nothing")
    planned = []
    for name in request.relations:
        if not catalog.has_relation(name) or catalog.relation(name).source != source:
            raise ModelError(f"{where}: source {source} does not own a relation named {name!r}")
        rel = catalog.relation(name)
        # The relation's state as this transaction sees it, key -> row (None: deleted here), and
        # as it was stored before it: each key looked up once (a lookup can be a round trip).
        touched: dict[tuple, tuple | None] = {}
        stored: dict[tuple, tuple | None] = {}

        def before(key):
            if key not in stored:
                stored[key] = lookup(rel.name, key)
            return stored[key]

        def current(key):
            return touched[key] if key in touched else before(key)

        def existing(row_or_key, what):
            values = tuple(row_or_key)
            key = values if len(values) == len(rel.key) and len(values) != len(rel.columns) else None
            if key is None:
                validate_row(rel, values, where)
                key = rel.key_of(values)
            else:
                # A key of the wrong type names no row in any store; saying so beats "not there"
                # (or an engine's cast error, or its casting '5' to the 5 it then finds).
                for value, i in zip(key, rel.key_positions):
                    validate_value(value, rel.types[i], f"{where}: {rel.name}.{rel.columns[i]}")
            row = current(key)
            if row is None or (len(values) == len(rel.columns) and row != values):
                raise ModelError(f"{where}: {what} {rel.name}{list(values)} which is not there")
            return row

        for r in request.deletes.get(name, []):
            touched[rel.key_of(existing(r, "deletes"))] = None
        for m in request.modifies.get(name, []):
            old = existing(m.old, "modifies")
            new = validate_row(rel, m.new, where)
            touched[rel.key_of(old)] = None
            if current(rel.key_of(new)) is not None:
                raise ModelError(f"{where}: modifying {rel.name}{list(old)} would duplicate key {list(rel.key_of(new))}")
            touched[rel.key_of(new)] = new
        for r in request.inserts.get(name, []):
            row = validate_row(rel, r, where)
            if current(rel.key_of(row)) is not None:
                raise ModelError(f"{where}: inserting {rel.name}{list(row)} duplicates key {list(rel.key_of(row))}")
            touched[rel.key_of(row)] = row
        planned.append(_net_change(rel.name, {k: before(k) for k in touched}, touched))
    if find is not None:
        _validate_constraints(catalog, source, planned, find, where)
    return planned


def named_keys(catalog: Catalog, source: str, requests: Sequence[TransactionRequest]) -> dict[str, set[tuple]]:
    """relation -> the keys `requests` name in it (inserted, deleted, modified from and to): what
    plan_commit will look up, for a store that reads them all ahead in one statement per relation.
    A key with a value an engine could refuse to cast to its column (a DATE string, a type
    mismatch, NULL, an integer past 64 bits) is left out, so that the planner's own lookup, and
    its error, comes first."""
    wanted: dict[str, set[tuple]] = {}
    for request in requests:
        for name in request.relations:
            if not catalog.has_relation(name) or catalog.relation(name).source != source:
                continue
            rel = catalog.relation(name)
            named = [*request.inserts.get(name, []), *request.deletes.get(name, []),
                     *(v for m in request.modifies.get(name, []) for v in (m.old, m.new))]
            wanted.setdefault(rel.name, set()).update(k for k in (_safe_key(rel, v) for v in named) if k)
    return wanted


def read_ahead(catalog: Catalog, source: str, requests: Sequence[TransactionRequest],
               stored_with_keys: Callable[[Relation, list[tuple]], list[tuple]]) -> dict[tuple[str, tuple], tuple | None]:
    """(relation, key) -> the stored row or None, for every key `requests` name (`named_keys`),
    read with one `stored_with_keys(relation, keys)` per relation: what a store whose every read
    is costly (a scan in DuckDB, a round trip in PostgreSQL) answers plan_commit's lookups from."""
    known: dict[tuple[str, tuple], tuple | None] = {}
    for name, keys in named_keys(catalog, source, requests).items():
        if not keys:
            continue
        rel = catalog.relation(name)
        keys = list(keys)
        known.update(((rel.name, k), None) for k in keys)
        known.update(((rel.name, rel.key_of(r)), r) for r in stored_with_keys(rel, keys))
    return known


_CASTS_SAFELY = {"BIGINT": lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63,
                 "DOUBLE": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                 "VARCHAR": lambda v: isinstance(v, str), "BOOLEAN": lambda v: isinstance(v, bool)}


def _safe_key(rel: Relation, values) -> tuple | None:
    """The key a request's row (or key) names, as plan_commit reads it; None unless every value
    casts to its column's type without fail."""
    values = tuple(values)
    if len(values) == len(rel.columns):
        key = tuple(values[i] for i in rel.key_positions)
    elif len(values) == len(rel.key):
        key = values
    else:
        return None
    ok = all(_CASTS_SAFELY.get(rel.types[i], lambda v: False)(v) for i, v in zip(rel.key_positions, key))
    return key if ok else None


def _net_change(relation: str, before: dict, after: dict) -> PlannedChange:
    """The transaction's net effect per key: what the notification reports (section 3, item 2).

    A row present before and after under the same key with other values is a modification;
    a key change is a deletion plus an insertion, since the row is another row to the view.
    """
    deleted, inserted, modified = [], [], []
    for key, new in after.items():
        old = before[key]
        if old is not None and new is not None and old != new:
            modified.append(Modification(old, new))
        elif old is not None and new is None:
            deleted.append(old)
        elif old is None and new is not None:
            inserted.append(new)
    return PlannedChange(relation, tuple(inserted), tuple(deleted), tuple(modified))


def validate_initial_state(catalog: Catalog, rows: dict[str, list[tuple]], where: str) -> None:
    """Raises ModelError naming the relation, the constraint and the row when the initial `rows`
    (relation -> rows) break a declared functional dependency or referential integrity.

    The warehouse relies on the constraints from its first view on (Sze-Ling 4.2), so a source
    must not start from a state that breaks one, as it must not commit one: the initial rows are
    checked as one transaction per source inserting them all into empty relations, by the check
    every commit passes.
    """
    for source in catalog.sources:
        inserts = [PlannedChange(rel.name, tuple(rows.get(rel.name, ())), (), ())
                   for rel in catalog.relations_at(source)]
        _validate_constraints(catalog, source, inserts, lambda relation, columns, values: [], where)


def _validate_constraints(catalog: Catalog, source: str, planned: list[PlannedChange], find, where: str) -> None:
    """Declared FDs and RI must hold after the transaction (checked against rows it touches). The
    stored rows are read only where the transaction's own rows leave the answer open: `find` can
    be a round trip to the database, and a child's parent is often inserted beside it."""
    # The rows the transaction removes, relation -> key -> the row as stored before it.
    removed = {p.relation: {catalog.relation(p.relation).key_of(r): r
                            for r in p.deleted + tuple(m.old for m in p.modified)} for p in planned}
    added = {p.relation: list(p.inserted) + [m.new for m in p.modified] for p in planned}
    # The added rows indexed by (relation, columns) -> values, and each FD group checked once:
    # a transaction as large as a whole initial state is checked in time linear in its rows.
    added_by: dict[tuple[str, tuple], dict[tuple, list]] = {}

    def added_with(relation: str, columns: tuple, values: tuple) -> list:
        if (relation, columns) not in added_by:
            rel = catalog.relation(relation)
            pos = [rel.index(c) for c in columns]
            index = added_by[(relation, columns)] = {}
            for r in added.get(relation, []):
                index.setdefault(tuple(r[i] for i in pos), []).append(r)
        return added_by[(relation, columns)].get(tuple(values), [])

    def after(relation: str, columns: tuple, values: tuple) -> list:
        rel = catalog.relation(relation)
        gone = removed.get(rel.name, {})
        stored = [r for r in find(rel.name, columns, values) if rel.key_of(r) not in gone]
        return stored + added_with(rel.name, columns, values)

    def exists_after(relation: str, columns: tuple, values: tuple) -> bool:
        return bool(added_with(relation, columns, values) or after(relation, columns, values))

    for fd in catalog.fds:
        rel = catalog.relation(fd.relation)
        checked = set()   # a group whose first added row agrees with all its rows holds the FD
        for row in added.get(rel.name, []):
            lhs = tuple(row[rel.index(c)] for c in fd.lhs)
            if lhs in checked:
                continue
            checked.add(lhs)
            rhs = tuple(row[rel.index(c)] for c in fd.rhs)
            for other in after(rel.name, fd.lhs, lhs):
                if tuple(other[rel.index(c)] for c in fd.rhs) != rhs:
                    raise ModelError(f"{where}: {rel.name}{list(row)} violates the functional dependency "
                                     f"{list(fd.lhs)} -> {list(fd.rhs)}")
    for ri in catalog.ri:
        child, parent = catalog.relation(ri.child), catalog.relation(ri.parent)
        if child.source != source:
            continue
        for row in added.get(child.name, []):
            ref = tuple(row[child.index(c)] for c in ri.columns)
            if None not in ref and not exists_after(parent.name, ri.parent_columns, ref):
                raise ModelError(f"{where}: {child.name}{list(row)} refers to no {parent.name} row "
                                 f"with {list(ri.parent_columns)} = {list(ref)}")
        for old in removed.get(parent.name, {}).values():
            ref = tuple(old[parent.index(c)] for c in ri.parent_columns)
            if not exists_after(parent.name, ri.parent_columns, ref) and after(child.name, ri.columns, ref):
                raise ModelError(f"{where}: removing {parent.name}{list(old)} leaves {child.name} rows "
                                 f"referring to {list(ref)}")
