"""A source's durable state: its relations, version numbers and outbox in one DuckDB file.

Same contract as source_node.memory_store.MemoryStore (the reference): `commit`, `commit_many`,
`answer`, `notifications_from`, `oldest_available`, `acknowledge`, `unacknowledged`, `snapshot`,
and the attributes `dsv` and `brv`. What it adds is durability (DESIGN.md 4.5): a committed
transaction's rows, its version bumps (DSV +1, BRV +1 per touched relation; Sze-Ling section 3,
items 1 and 2, starting from 1 as in the paper's examples) and its notification in the outbox are
written in one DuckDB transaction (a transactional outbox), so after a crash either all of them
are there or none is, and unsent notifications are found again when the file is reopened.

Group commit: `commit_many` writes several source transactions in one DuckDB transaction, each
with its own DSV, BRVs and notification, because a DuckDB commit's fixed cost (BEGIN/COMMIT and
the per-statement overhead of the version and outbox writes) then is paid once per group, and
the rows under the keys the group names are read with one query per relation (`_prefetch`)
rather than one scan per key.

Layout of the file: one table per relation (the catalog's columns and types, PRIMARY KEY on the
relation's key) in the main schema; the store's own tables in schema `_fedlab`, out of the way of
relation names: `source` (this source's name and DSV), `versions` (the BRV of each relation) and
`outbox` (each committed transaction's notification as JSON, with an acknowledged flag).

DATE values read back as ISO strings (fedmodel.codec), so rows compare equal to the memory
store's. Every method holds the store's lock: one writer, and each answer or snapshot is read at
one state.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from contextlib import contextmanager, nullcontext
from typing import Sequence

import duckdb

from fedmodel.catalog import Catalog, Relation, check_row
from fedmodel.codec import rows_to_arrow
from fedmodel.errors import ModelError
from fedmodel.predicates import compile_sql
from fedmodel.subquery import Answer, RelationAnswer, Subquery
from fedmodel.transactions import (Notification, RelationChange, TransactionRequest, notification_from_dict,
                                   notification_to_dict)
from source_node.commit import GroupCommit, PlannedChange, plan_commit

_META = "_fedlab"
_VALUES_MAX_ROWS = 32


class DuckDBStore(GroupCommit):
    def __init__(self, catalog: Catalog, source: str, path: str | os.PathLike,
                 initial: dict[str, list[tuple]] | None = None, log_retention: int | None = None):
        """Opens the store at `path`, creating it (with the `initial` rows) when the file is new.

        Reopening an existing file restores its relations, versions and outbox; `initial` is then
        ignored. `log_retention` keeps only the newest that many notifications in the log.
        """
        self.catalog = catalog
        self.source = source
        self.path = str(path)
        self.log_retention = log_retention
        self._relations = catalog.relations_at(source)
        if not self._relations:
            raise ModelError(f"source {source!r} owns no relation in the catalog")
        self._lock = threading.RLock()
        self._table_names = itertools.count()
        self._con = duckdb.connect(self.path)
        try:
            if self._is_new():
                self._create(initial or {})
            self._dsv, self._brv = self._read_versions()
        except BaseException:
            self._con.close()
            raise

    # ---- versions ----

    @property
    def dsv(self) -> int:
        """The data source version number: 1 initially, +1 per committed transaction."""
        with self._lock:
            return self._dsv

    @property
    def brv(self) -> dict[str, int]:
        """Base relation version numbers: 1 initially, +1 per committed transaction touching the relation."""
        with self._lock:
            return dict(self._brv)

    # ---- transactions ----

    def commit_many(self, requests: Sequence[TransactionRequest],
                    commit_time: float = 0.0) -> list[Notification | ModelError]:
        """Commits `requests` in order as one group: one outcome per request, its notification or
        the ModelError that rejected it (leaving no trace; the others go on).

        Each request is validated against the state the earlier ones of the group left, and gets
        its own DSV, BRVs and notification, exactly as if committed one by one; the group is one
        DuckDB transaction, so nothing of it is visible or durable before all of it is.
        """
        with self._lock:
            try:
                outcomes, dsv, brv = self._commit_group(requests, commit_time)
            except _GroupFailed as failed:
                if len(requests) == 1:
                    return [ModelError(f"transaction {requests[0].txn_id}: {_first_line(failed.error)}")]
                # A constraint the planner did not foresee aborted the whole DuckDB transaction:
                # one by one, only the transaction that breaks it fails.
                return [outcome for r in requests for outcome in self.commit_many([r], commit_time)]
            self._dsv, self._brv = dsv, brv
            return outcomes

    def _commit_group(self, requests: Sequence[TransactionRequest],
                      commit_time: float) -> tuple[list[Notification | ModelError], int, dict[str, int]]:
        """The group's outcomes and the DSV and BRVs after it, written and committed; _GroupFailed
        (everything rolled back) when DuckDB refuses a statement."""
        dsv, brv = self._dsv, dict(self._brv)
        outcomes: list[Notification | ModelError] = []
        outbox = []
        try:
            with self._transaction():
                known = self._prefetch(requests)
                for request in requests:
                    try:
                        planned = plan_commit(self.catalog, self.source, request,
                                              lambda relation, key: self._lookup(relation, key, known), find=self._find)
                    except ModelError as err:
                        outcomes.append(err)   # plan_commit writes nothing: skipping it leaves no trace
                        continue
                    dsv += 1
                    note = self._write(request, planned, dsv, brv, commit_time)
                    _forget_written(self.catalog, known, planned)
                    outbox.append((note.dsv, json.dumps(notification_to_dict(note), default=_json_value), False))
                    outcomes.append(note)
                if outbox:
                    self._write_versions(dsv, brv, outbox)
        except duckdb.Error as err:
            raise _GroupFailed(err) from None
        return outcomes, dsv, brv

    def _lookup(self, relation: str, key: tuple, known: dict) -> tuple | None:
        """The stored row with `key`, or None: from `known` (see _prefetch) when it holds the key."""
        rel = self.catalog.relation(relation)
        if (rel.name, key) in known:
            return known[rel.name, key]
        where = " AND ".join(f"{_q(c)} = ?" for c in rel.key)
        rows = self._select(rel, f"SELECT * FROM {_q(rel.name)} WHERE {where}", list(key))
        return rows[0] if rows else None

    def _prefetch(self, requests: Sequence[TransactionRequest]) -> dict[tuple[str, tuple], tuple | None]:
        """(relation, key) -> the stored row or None, for every key the requests name (the keys
        plan_commit looks up), read with one query per relation.

        A point lookup scans the table (DuckDB 2.0 uses no index for it under a compound key or a
        prepared parameter: 3-5 ms on SF 0.01 lineitem), so one scan for a whole group costs about
        what one lookup did. Keys with a value DuckDB could refuse to cast (a DATE string, a type
        mismatch, NULL) are left to the planner's own lookup, so that its error comes first.
        """
        wanted: dict[str, set] = {}
        for request in requests:
            for name in request.relations:
                if not self.catalog.has_relation(name) or self.catalog.relation(name).source != self.source:
                    continue
                rel = self.catalog.relation(name)
                named = [*request.inserts.get(name, []), *request.deletes.get(name, []),
                         *(v for m in request.modifies.get(name, []) for v in (m.old, m.new))]
                wanted.setdefault(rel.name, set()).update(k for k in (_safe_key(rel, v) for v in named) if k)
        known: dict[tuple[str, tuple], tuple | None] = {}
        for name, keys in wanted.items():
            if not keys:
                continue
            rel = self.catalog.relation(name)
            cols = ", ".join(_q(c) for c in rel.key)
            keys = list(keys)
            with self._table_of(rel.key, [rel.types[i] for i in rel.key_positions], keys) as (table, params):
                rows = self._select(rel, f"SELECT * FROM {_q(rel.name)} WHERE ({cols}) IN (SELECT {cols} FROM {table})",
                                    params)
            known.update(((rel.name, k), None) for k in keys)
            known.update(((rel.name, rel.key_of(r)), r) for r in rows)
        return known

    def _find(self, relation: str, columns: tuple, values: tuple) -> list[tuple]:
        """Stored rows with `values` in `columns` (for the declared FDs and RI); NULL matches NULL,
        as in the memory store."""
        rel = self.catalog.relation(relation)
        where = " AND ".join(f"{_q(rel.columns[rel.index(c)])} IS NOT DISTINCT FROM ?" for c in columns)
        return self._select(rel, f"SELECT * FROM {_q(rel.name)} WHERE {where}", list(values))

    def _write(self, request: TransactionRequest, planned: list[PlannedChange], dsv: int,
               brv: dict[str, int], commit_time: float) -> Notification:
        """Writes one transaction's rows; bumps `brv` in place; returns its notification (DSV `dsv`)."""
        changes = []
        for p in planned:
            rel = self.catalog.relation(p.relation)
            # A modification is the old row's removal and the new row's insertion: removals go first.
            self._delete_keys(rel, [rel.key_of(r) for r in p.deleted] + [rel.key_of(m.old) for m in p.modified])
            self._insert(rel, [m.new for m in p.modified] + list(p.inserted))
            brv[rel.name] += 1
            changes.append(RelationChange(rel.name, brv[rel.name], p.inserted, p.deleted, p.modified))
        return Notification(self.source, dsv, request.txn_id, tuple(changes), commit_time)

    def _write_versions(self, dsv: int, brv: dict[str, int], outbox: list[tuple]) -> None:
        """The group's version numbers and notifications, written once at its end: nothing reads
        them inside the group, and each statement costs about a millisecond whatever it writes."""
        for name, version in brv.items():
            if version != self._brv[name]:
                self._con.execute(f"UPDATE {_META}.versions SET brv = ? WHERE relation = ?", [version, name])
        self._con.execute(f"UPDATE {_META}.source SET dsv = ?", [dsv])
        with self._table_of(["dsv", "notification", "acknowledged"], ["BIGINT", "VARCHAR", "BOOLEAN"],
                            outbox) as (table, params):
            self._con.execute(f"INSERT INTO {_META}.outbox SELECT * FROM {table}", params)
        if self.log_retention is not None:
            self._con.execute(f"DELETE FROM {_META}.outbox WHERE dsv <= ?", [dsv - self.log_retention])

    def _delete_keys(self, rel: Relation, keys: list[tuple]) -> None:
        if keys:
            cols = ", ".join(_q(c) for c in rel.key)
            with self._table_of(rel.key, [rel.types[i] for i in rel.key_positions], keys) as (table, params):
                self._con.execute(f"DELETE FROM {_q(rel.name)} WHERE ({cols}) IN (SELECT {cols} FROM {table})", params)

    def _insert(self, rel: Relation, rows: Sequence[tuple]) -> None:
        if rows:
            with self._table_of(rel.columns, rel.types, rows) as (table, params):
                self._con.execute(f"INSERT INTO {_q(rel.name)} SELECT * FROM {table}", params)

    # ---- sub-queries ----

    def answer(self, sq: Subquery) -> Answer:
        """The sub-query's semijoin chain (fedmodel.subquery.evaluate_semijoins) in SQL, read at one state.

        Relation i keeps its rows that pass its selection and whose join columns equal, in every
        position, those of some row kept for its parent (for the root: some probe value); with no
        probe columns the root keeps all its rows that pass its selection.
        """
        where = f"sub-query {sq.id}"
        if not sq.relations:
            raise ModelError(f"{where}: names no relation")
        relations = [owned_relation(self.catalog, self.source, sr.relation, where) for sr in sq.relations]
        with self._lock:
            try:
                with self._transaction(), self._probe(sq, relations[0], where) as (probe, params):
                    ctes = self._semijoin_ctes(sq, relations, probe, where)
                    rows = [self._select(rel, f"WITH {', '.join(ctes[:i + 1])} SELECT * FROM __sq{i}", params)
                            for i, rel in enumerate(relations)]
            except duckdb.Error as err:
                raise ModelError(f"{where}: {_first_line(err)}") from None
            return Answer(sq.id, self.source, self._dsv,
                          tuple(RelationAnswer(rel.name, self._brv[rel.name], tuple(r)) for rel, r in zip(relations, rows)))

    def _semijoin_ctes(self, sq: Subquery, relations: list[Relation], probe: str, where: str) -> list[str]:
        """One CTE `__sq<i>` per relation of the sub-query, each filtering its parent's CTE
        (the root: the probe table, with columns c0, c1, ...)."""
        position: dict[str, int] = {}
        ctes = []
        for i, (sr, rel) in enumerate(zip(sq.relations, relations)):
            if rel.name in position:
                raise ModelError(f"{where}: names relation {rel.name} twice")
            if len(sr.columns) != len(sr.parent_columns):
                raise ModelError(f"{where}: {rel.name} joins on {len(sr.columns)} columns "
                                 f"but its parent side has {len(sr.parent_columns)}")
            conditions = []
            if i == 0 and sr.parent_columns:
                parent, parent_cols = probe, [f"c{j}" for j in range(len(sr.parent_columns))]
            elif i > 0:
                if sr.parent is None or self.catalog.relation(sr.parent).name not in position:
                    raise ModelError(f"{where}: the parent of {rel.name} must be a relation listed before it")
                parent_rel = self.catalog.relation(sr.parent)
                parent = f"__sq{position[parent_rel.name]}"
                parent_cols = [parent_rel.columns[parent_rel.index(c)] for c in sr.parent_columns]
            if i > 0 or sr.parent_columns:
                # SQL inner-join semantics, as in the reference: a NULL join value matches nothing.
                match = " AND ".join(f"p.{_q(pc)} = r.{_q(rel.columns[rel.index(c)])}"
                                     for c, pc in zip(sr.columns, parent_cols))
                conditions.append(f"EXISTS (SELECT 1 FROM {parent} AS p WHERE {match})")
            if sr.selection_sql:
                compile_sql(sr.selection_sql, rel)  # rejects what is not a predicate over rel's columns
                # IS TRUE: a NULL outcome filters the row out, as in the reference; DuckDB 2.0
                # kept `5 IN (0, NULL)` rows when the probe came as a prepared-statement table.
                conditions.append(f"(({sr.selection_sql}) IS TRUE)")
            position[rel.name] = i
            ctes.append(f"__sq{i} AS (SELECT r.* FROM {_q(rel.name)} AS r WHERE {' AND '.join(conditions) or 'true'})")
        return ctes

    def _probe(self, sq: Subquery, root: Relation, where: str):
        """The probe values as a table with columns c0, c1, ... typed like the root's join columns."""
        columns = [f"c{j}" for j in range(len(sq.probe_columns))]
        if not columns:
            return nullcontext(("", []))
        for p in sq.probe:
            if len(p) != len(columns):
                raise ModelError(f"{where}: probe value {list(p)} has {len(p)} values, expected {len(columns)}")
        return self._table_of(columns, [root.types[root.index(c)] for c in sq.relations[0].columns], sq.probe)

    # ---- the log (outbox) ----

    def notifications_from(self, dsv: int, through: int | None = None) -> list[Notification]:
        """Logged notifications with DSV >= `dsv` (and <= `through`), in DSV order (what Resend
        sends again)."""
        if through is None:
            return self._notifications("dsv >= ?", [dsv])
        return self._notifications("dsv >= ? AND dsv <= ?", [dsv, through])

    def oldest_available(self) -> int:
        """The oldest DSV the log still holds (DSV + 1 when it is empty)."""
        with self._lock:
            (oldest,), = self._con.execute(f"SELECT min(dsv) FROM {_META}.outbox").fetchall()
            return oldest if oldest is not None else self._dsv + 1

    def acknowledge(self, dsv: int) -> None:
        """The warehouse durably holds every notification up to `dsv` (a cumulative acknowledgement)."""
        with self._lock:
            self._con.execute(f"UPDATE {_META}.outbox SET acknowledged = true WHERE dsv <= ? AND NOT acknowledged",
                              [dsv])

    def unacknowledged(self) -> list[Notification]:
        """Logged notifications not yet acknowledged, in DSV order (what the sender drains)."""
        return self._notifications("NOT acknowledged", [])

    def _notifications(self, condition: str, params: list) -> list[Notification]:
        with self._lock:
            docs = self._con.execute(f"SELECT notification FROM {_META}.outbox WHERE {condition} ORDER BY dsv",
                                     params).fetchall()
        return [notification_from_dict(json.loads(doc)) for doc, in docs]

    # ---- snapshots ----

    def snapshot(self) -> tuple[int, dict[str, tuple[int, list[tuple]]]]:
        """(DSV, {relation: (BRV, rows)}) for all of the source's relations, read at one state."""
        with self._lock, self._transaction():
            return self._dsv, {r.name: (self._brv[r.name], self._select(r, f"SELECT * FROM {_q(r.name)}"))
                               for r in self._relations}

    def close(self) -> None:
        with self._lock:
            self._con.close()

    # ---- the file ----

    def _is_new(self) -> bool:
        found = self._con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'source'",
            [_META]).fetchall()
        return found[0][0] == 0

    def _create(self, initial: dict[str, list[tuple]]) -> None:
        # One transaction: a crash while creating leaves a file that is still new.
        with self._transaction():
            for rel in self._relations:
                columns = ", ".join(f"{_q(c)} {t}" for c, t in zip(rel.columns, rel.types))
                self._con.execute(f"CREATE TABLE {_q(rel.name)} ({columns}, PRIMARY KEY ({', '.join(map(_q, rel.key))}))")
            self._con.execute(f"CREATE SCHEMA {_META}")
            self._con.execute(f"CREATE TABLE {_META}.source (source VARCHAR NOT NULL, dsv BIGINT NOT NULL)")
            self._con.execute(f"CREATE TABLE {_META}.versions (relation VARCHAR PRIMARY KEY, brv BIGINT NOT NULL)")
            self._con.execute(f"CREATE TABLE {_META}.outbox (dsv BIGINT PRIMARY KEY, notification VARCHAR NOT NULL, "
                              "acknowledged BOOLEAN NOT NULL)")
            self._con.execute(f"INSERT INTO {_META}.source VALUES (?, 1)", [self.source])
            for rel in self._relations:
                self._con.execute(f"INSERT INTO {_META}.versions VALUES (?, 1)", [rel.name])
            for name, rows in initial.items():
                rel = owned_relation(self.catalog, self.source, name, "initial rows")
                try:
                    self._insert(rel, [check_row(rel, r, f"initial rows of {rel.name}") for r in rows])
                except duckdb.Error as err:
                    raise ModelError(f"initial rows of {rel.name}: {_first_line(err)}") from None

    def _read_versions(self) -> tuple[int, dict[str, int]]:
        (owner, dsv), = self._con.execute(f"SELECT source, dsv FROM {_META}.source").fetchall()
        if owner != self.source:
            raise ModelError(f"{self.path} holds source {owner!r}, not {self.source!r}")
        stored = dict(self._con.execute(f"SELECT relation, brv FROM {_META}.versions").fetchall())
        brv = {r.name: stored.get(r.name) for r in self._relations}
        missing = [name for name, v in brv.items() if v is None]
        if missing:
            raise ModelError(f"{self.path} has no relation {', '.join(missing)} of the catalog; "
                             "a source's relations are fixed when its file is created")
        return dsv, brv

    # ---- DuckDB helpers ----

    @contextmanager
    def _transaction(self):
        """BEGIN ... COMMIT, or ROLLBACK on any error, so a failure leaves no partial state."""
        self._con.begin()
        try:
            yield
        except BaseException:
            self._con.rollback()
            raise
        self._con.commit()

    @contextmanager
    def _table_of(self, columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence]):
        """Yields (table expression, parameters) for `rows`, to select from in one statement.

        A few rows travel as a VALUES list of typed parameters, many as a registered Arrow table:
        binding parameters costs little for a few rows and grows fast with many, while registering
        a table costs milliseconds once and scans fast (both measured on DuckDB 2.0).
        """
        names = ", ".join(_q(c) for c in columns)
        if 0 < len(rows) <= _VALUES_MAX_ROWS:
            row = "(" + ", ".join(f"CAST(? AS {t})" for t in types) + ")"
            yield (f"(SELECT * FROM (VALUES {', '.join([row] * len(rows))}) AS v({names}))",
                   [v for r in rows for v in r])
            return
        name = f"__fedlab_rows{next(self._table_names)}"
        self._con.register(name, rows_to_arrow(columns, types, rows))
        try:
            yield name, []
        except duckdb.Error:
            # The transaction is aborted now and unregistering would fail too, hiding this error
            # (a duplicate key, say) behind "transaction is aborted": roll back first.
            self._con.rollback()
            self._con.begin()
            self._con.unregister(name)
            raise
        else:
            self._con.unregister(name)

    def _select(self, rel: Relation, sql: str, params: list | None = None) -> list[tuple]:
        """Rows of `rel`'s shape, DATE values as ISO strings (the form fedmodel.codec gives)."""
        rows = self._con.execute(sql, params or []).fetchall()
        dates = [i for i, t in enumerate(rel.types) if t == "DATE"]
        if not dates:
            return rows
        return [tuple(v.isoformat() if i in dates and v is not None else v for i, v in enumerate(r)) for r in rows]


_CASTS_SAFELY = {"BIGINT": lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63,
                 "DOUBLE": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                 "VARCHAR": lambda v: isinstance(v, str), "BOOLEAN": lambda v: isinstance(v, bool)}


def _safe_key(rel: Relation, values) -> tuple | None:
    """The key a request's row (or key) names, as plan_commit reads it; None unless every value is
    one DuckDB casts to its column's type without fail."""
    values = tuple(values)
    if len(values) == len(rel.columns):
        key = tuple(values[i] for i in rel.key_positions)
    elif len(values) == len(rel.key):
        key = values
    else:
        return None
    ok = all(_CASTS_SAFELY.get(rel.types[i], lambda v: False)(v) for i, v in zip(rel.key_positions, key))
    return key if ok else None


def _forget_written(catalog: Catalog, known: dict, planned: list[PlannedChange]) -> None:
    """Drops from `known` every key a transaction wrote: a later lookup of it reads the table."""
    for p in planned:
        rel = catalog.relation(p.relation)
        for row in (*p.deleted, *p.inserted, *(v for m in p.modified for v in (m.old, m.new))):
            known.pop((rel.name, rel.key_of(row)), None)


class _GroupFailed(Exception):
    """DuckDB refused a statement of a group: the group is rolled back."""

    def __init__(self, error: duckdb.Error):
        super().__init__(str(error))
        self.error = error


def owned_relation(catalog: Catalog, source: str, name: str, where: str) -> Relation:
    """The relation `name` if `source` owns it; otherwise ModelError (a source reads only its own)."""
    if not catalog.has_relation(name) or catalog.relation(name).source != source:
        raise ModelError(f"{where}: source {source} does not own a relation named {name!r}")
    return catalog.relation(name)


def _q(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _first_line(err: Exception) -> str:
    return str(err).strip().splitlines()[0]


def _json_value(value):
    """JSON for the values json does not know: dates (a DATE given as datetime.date) as ISO strings."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"cannot store {value!r} in a notification")
