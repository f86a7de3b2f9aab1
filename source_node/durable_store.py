"""What a source's store does on any embedded SQL database: versions, group commit, the outbox.

The engine-independent half of source_node.sqlite_store.SQLiteStore (the default) and
source_node.duckdb_store.DuckDBStore, with the contract of source_node.memory_store.MemoryStore
(the reference): `commit`, `commit_many`, `answer`, `notifications_from`, `oldest_available`,
`subscribe`, `unsubscribe`, `acknowledge`, `unacknowledged`, `applied_through`, `snapshot`,
`close`, and the properties `dsv` and `brv`.

What it adds to the reference is durability (docs/architecture.md 4.5): a committed transaction's rows, its
version bumps (DSV +1, BRV +1 per touched relation: Sze-Ling section 3, items 1 and 2, starting
from 1 as in the paper's examples) and its notification in the outbox are written in one database
transaction (a transactional outbox), so after a crash either all of them are there or none is,
and unsent notifications are found again when the file is reopened.

Group commit: `commit_many` writes several source transactions in one database transaction, each
planned on the state the earlier ones left and given its own DSV, BRVs and notification, because
a commit's fixed cost is then paid once per group. An invalid member is rejected alone by the
planner (source_node.commit.plan_commit), which writes nothing; a statement the database itself
refuses (a constraint the planner does not check) rolls the group back, which is then committed
one by one so that only the guilty transaction fails.

The outbox lives twice: as a table (its durable copy, read by Resend and History) and, for the
notifications some subscriber has not acknowledged yet, in memory, loaded when the file is
opened, appended at commit and dropped once the slowest subscriber acknowledged them; the
subscribers, their relations and acknowledgements are a table too
(source_node.subscriber_outbox).

Layout of a file: one table per relation (the catalog's columns, PRIMARY KEY on the relation's
key) and the store's own tables, named by the engine out of the way of relation names: `source`
(this source's name and DSV), `versions` (the BRV of each relation), `outbox` (each committed
transaction's notification as JSON) and `subscribers` (each one's name, relations as a JSON list
or NULL for all, and acknowledged DSV).
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import AbstractContextManager
from typing import Callable, Collection, Sequence

from fedlab.fedmodel import json_text
from fedlab.fedmodel.as_of import answered_versions, reading_as_of
from fedlab.fedmodel.catalog import Catalog, Relation, validate_row
from fedlab.fedmodel.errors import ModelError, first_line
from fedlab.fedmodel.predicates import compile_sql
from fedlab.fedmodel.subquery import Answer, RelationAnswer, Subquery
from fedlab.fedmodel.transactions import (
    Notification,
    RelationChange,
    TransactionRequest,
    notification_from_dict,
    notification_to_dict,
)
from fedlab.source_node.commit import GroupCommit, PlannedChange, plan_commit
from fedlab.source_node.recent_changes import SharedRecentChanges
from fedlab.source_node.subscriber_outbox import SubscriberOutbox
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER

Query = Callable[[str, Sequence], list]   # runs one SELECT, returns its rows


class DurableStore(GroupCommit, SubscriberOutbox):
    """A subclass supplies the engine: how to connect, create and read its tables, write rows,
    acknowledge, and evaluate a sub-query's semijoins. Its `_con` is the writer's connection."""

    # The engine's exceptions for a statement it refused (a constraint, a value it cannot store).
    _refusals: tuple[type[Exception], ...] = ()
    # The engine's null-safe equality operator ("NULL matches NULL", as in the memory store).
    _null_safe_equal = "IS NOT DISTINCT FROM"

    def __init__(self, catalog: Catalog, source: str, path: str | os.PathLike,
                 initial: dict[str, list[tuple]] | None = None, log_retention: int | None = None,
                 log_keep_seconds: float | None = None):
        """Opens the store at `path`, creating it (with the `initial` rows) when the file is new.

        Reopening an existing file restores its relations, versions and outbox; `initial` is then
        ignored. `log_retention` keeps only the newest that many notifications in the log;
        `log_keep_seconds` those of that many seconds and the unacknowledged (source_node.subscriber_outbox).
        """
        self.catalog = catalog
        self.source = source
        self.path = str(path)
        self.log_retention = log_retention
        self.log_keep_seconds = log_keep_seconds
        self._relations = catalog.relations_at(source)
        if not self._relations:
            raise ModelError(f"source {source!r} owns no relation in the catalog")
        self._writer = threading.RLock()   # one writer at a time on the writer's connection
        self._state = threading.Lock()     # the versions and the outbox held in memory
        self._statements: dict[tuple, str] = {}
        self._known: dict[tuple[str, tuple], tuple | None] = {}
        self._found: dict[tuple[str, tuple, tuple], list[tuple]] = {}
        self._connect()
        try:
            if self._is_new():
                self._create(initial or {})
            self._validate_owner()
            with self._writer, self._write_transaction():
                self._upgrade()
            with self._reading() as query:
                self._dsv, self._brv = self._versions(query)
                subscribers = [(name, None if relations is None else json_text.loads(relations), acknowledged)
                               for name, relations, acknowledged in
                               query(f"SELECT name, relations, acknowledged FROM {self._meta('subscribers')}", [])]
                oldest = min((acknowledged + 1 for _, _, acknowledged in subscribers), default=self._dsv + 1)
                self._hold(subscribers, self._parse(query(
                    f"SELECT notification FROM {self._meta('outbox')} WHERE dsv >= ? ORDER BY dsv", [oldest])))
            # For answers as of earlier versions: what a subscriber may not have applied yet.
            self.recent = SharedRecentChanges(self._relations, self._dsv, self._brv, self._retained)
        except BaseException:
            self.close()
            raise

    # ---- versions ----

    @property
    def dsv(self) -> int:
        """The data source version number: 1 initially, +1 per committed transaction."""
        with self._state:
            return self._dsv

    @property
    def brv(self) -> dict[str, int]:
        """Base relation version numbers: 1 initially, +1 per committed transaction touching the relation."""
        with self._state:
            return dict(self._brv)

    # ---- transactions ----

    def commit_many(self, requests: Sequence[TransactionRequest],
                    commit_time: float = 0.0) -> list[Notification | ModelError]:
        """Commits `requests` in order as one group: one outcome per request, its notification or
        the ModelError that rejected it (leaving no trace; the others go on).

        Each request is validated against the state the earlier ones of the group left, and gets
        its own DSV, BRVs and notification, exactly as if committed one by one; the group is one
        database transaction, so nothing of it is visible or durable before all of it is.
        """
        with self._writer:
            try:
                outcomes, dsv, brv = self._commit_group(requests, commit_time)
            except _GroupFailed as failed:
                if len(requests) == 1:
                    return [ModelError(f"transaction {requests[0].txn_id}: {first_line(failed.error)}")]
                # A constraint the planner did not foresee aborted the whole database transaction:
                # one by one, only the transaction that breaks it fails.
                return [outcome for r in requests for outcome in self.commit_many([r], commit_time)]
            notes = [o for o in outcomes if isinstance(o, Notification)]
            with self._state:
                self._dsv, self._brv = dsv, brv
                aged = self._committed(notes, self.log_retention)
            for note in notes:
                self.recent.record(note)
            if aged is not None:
                self._trim_log(aged)
            return outcomes

    def _commit_group(self, requests: Sequence[TransactionRequest],
                      commit_time: float) -> tuple[list[Notification | ModelError], int, dict[str, int]]:
        """The group's outcomes and the DSV and BRVs after it, written and committed; _GroupFailed
        (everything rolled back) when the database refuses a statement."""
        dsv, brv = self._dsv, dict(self._brv)
        outcomes: list[Notification | ModelError] = []
        notes: list[Notification] = []
        try:
            with self._write_transaction():
                self._start_group(requests)
                for request in requests:
                    try:
                        planned = plan_commit(self.catalog, self.source, request, self._group_lookup, self._group_find)
                    except ModelError as err:
                        outcomes.append(err)   # plan_commit writes nothing: skipping it leaves no trace
                        continue
                    dsv += 1
                    note = self._write(request, planned, dsv, brv, commit_time)
                    self._written(planned)
                    notes.append(note)
                    outcomes.append(note)
                if notes:
                    self._write_log(dsv, {n: v for n, v in brv.items() if v != self._brv[n]},
                                    [(n.dsv, json_text.dumps(notification_to_dict(n))) for n in notes])
                    if self.log_retention is not None:
                        self._con.execute(f"DELETE FROM {self._meta('outbox')} WHERE dsv <= ?",
                                          [dsv - self.log_retention])
        except self._refusals as err:
            raise _GroupFailed(err) from None
        return outcomes, dsv, brv

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

    # What a group has read, so that a stored row two of its transactions touch is read once (and
    # an engine may read ahead for the whole group: DuckDB).

    def _start_group(self, requests: Sequence[TransactionRequest]) -> None:
        """Forgets the last group's reads (an engine may read ahead for all of `requests`)."""
        self._known: dict[tuple[str, tuple], tuple | None] = {}
        self._found: dict[tuple[str, tuple, tuple], list[tuple]] = {}

    def _group_lookup(self, relation: str, key: tuple) -> tuple | None:
        """plan_commit's `lookup` within a group: the stored row with `key`, or None."""
        name = self.catalog.relation(relation).name
        if (name, key) not in self._known:
            self._known[name, key] = self._lookup(name, key)
        return self._known[name, key]

    def _group_find(self, relation: str, columns: tuple, values: tuple) -> list[tuple]:
        """plan_commit's `find` within a group (see _find)."""
        if (relation, columns, values) not in self._found:
            self._found[relation, columns, values] = self._find(relation, columns, values)
        return self._found[relation, columns, values]

    def _written(self, planned: list[PlannedChange]) -> None:
        """A member's rows were written: the keys it wrote and every find are read again."""
        self._found.clear()
        for p in planned:
            rel = self.catalog.relation(p.relation)
            for row in (*p.deleted, *p.inserted, *(v for m in p.modified for v in (m.old, m.new))):
                self._known.pop((rel.name, rel.key_of(row)), None)

    def _lookup(self, relation: str, key: tuple) -> tuple | None:
        """The stored row with `key`, or None (on the writer's connection: it sees the group's writes)."""
        rel = self.catalog.relation(relation)
        rows = self._select(rel, self._statement("lookup", rel, rel.key), self._encode_values(rel, rel.key, key))
        return rows[0] if rows else None

    def _find(self, relation: str, columns: tuple, values: tuple) -> list[tuple]:
        """Stored rows with `values` in `columns` (for the declared FDs and RI); NULL matches NULL,
        as in the memory store."""
        rel = self.catalog.relation(relation)
        return self._select(rel, self._statement("find", rel, tuple(columns)), self._encode_values(rel, columns, values))

    def _statement(self, kind: str, rel: Relation, columns: tuple[str, ...]) -> str:
        """The SQL of a lookup by key or a find by `columns` of `rel`, built once."""
        if (kind, rel.name, columns) not in self._statements:
            equal = "=" if kind == "lookup" else self._null_safe_equal
            where = " AND ".join(f"{quote(rel.columns[rel.index(c)])} {equal} ?" for c in columns)
            self._statements[kind, rel.name, columns] = f"SELECT * FROM {quote(rel.name)} WHERE {where}"
        return self._statements[kind, rel.name, columns]

    def _select(self, rel: Relation, sql: str, params: Sequence = ()) -> list[tuple]:
        """Rows of `rel` read on the writer's connection, as the memory store holds them."""
        return self._decode(rel, self._con.execute(sql, list(params)).fetchall())

    # ---- sub-queries ----

    def answer(self, sq: Subquery) -> Answer:
        """The sub-query's semijoin chain (fedmodel.subquery.evaluate_semijoins), read at one state.

        Relation i keeps its rows that pass its selection and whose join columns equal, in every
        position, those of some row kept for its parent (for the root: some probe value); with no
        probe columns the root keeps all its rows that pass its selection. The answer's DSV is
        that of the state the rows were read at; its BRVs are that state's, or, for the relations
        `sq.as_of` names, the earlier versions they were rebuilt at (fedmodel.as_of) while the
        recent changes reach back to them.
        """
        return self.answer_all([sq])[0]

    def answer_all(self, subqueries: Sequence[Subquery]) -> list[Answer]:
        """`answer` for each of a batch, all read at one state in one read transaction: the
        transaction and the version reads are paid once per batch, not once per sub-query."""
        checked = [(sq, validate_subquery(self.catalog, self.source, sq)) for sq in subqueries]
        for sq, relations in checked:
            self._prepare_probes(sq, relations)
        read_time = time.time()   # before the read: every commit stamped earlier is in it (up to the warehouse's allowance)
        answers, where = [], f"sub-query {subqueries[0].id}" if subqueries else ""
        try:
            with self._reading() as query:
                dsv, brv = self._versions(query)
                for sq, relations in checked:
                    where = f"sub-query {sq.id}"
                    nets = self.recent.nets(sq, dsv, brv)
                    rows = self._semijoins(query, sq, relations, nets or {})
                    answers.append(answer_at(self.source, dsv, brv, read_time, sq, relations, nets, rows))
        except self._refusals as err:
            raise ModelError(f"{where}: {first_line(err)}") from None
        return answers

    def _prepare_probes(self, sq: Subquery, relations: list[Relation]) -> None:
        """Before a sub-query is read (an engine may index the column sets it probes)."""

    # ---- the log (outbox) and its subscribers (source_node.subscriber_outbox) ----

    def _read_log(self, dsv: int, through: int | None) -> list[Notification]:
        condition, params = ("dsv >= ?", [dsv]) if through is None else ("dsv >= ? AND dsv <= ?", [dsv, through])
        with self._reading() as query:
            return self._parse(query(f"SELECT notification FROM {self._meta('outbox')} WHERE {condition} "
                                     "ORDER BY dsv", params))

    def _trim_log(self, through: int) -> None:
        with self._writer, self._write_transaction():
            self._con.execute(f"DELETE FROM {self._meta('outbox')} WHERE dsv <= ?", [through])

    def oldest_available(self) -> int:
        """The oldest DSV the log still holds (DSV + 1 when it is empty)."""
        with self._reading() as query:
            (oldest,), = query(f"SELECT min(dsv) FROM {self._meta('outbox')}", [])
            return oldest if oldest is not None else self._versions(query)[0] + 1

    def _save_subscriber(self, name: str, relations: list[str] | None, acknowledged: int) -> None:
        with self._writer, self._write_transaction():
            self._con.execute(f"DELETE FROM {self._meta('subscribers')} WHERE name = ?", [name])
            self._con.execute(f"INSERT INTO {self._meta('subscribers')} VALUES (?, ?, ?)",
                              [name, None if relations is None else json_text.dumps(relations), acknowledged])

    def _delete_subscriber(self, name: str) -> None:
        with self._writer, self._write_transaction():
            self._con.execute(f"DELETE FROM {self._meta('subscribers')} WHERE name = ?", [name])

    def _save_acknowledged(self, name: str, dsv: int) -> None:
        with self._writer, self._write_transaction():
            self._con.execute(f"UPDATE {self._meta('subscribers')} SET acknowledged = ? "
                              "WHERE name = ? AND acknowledged < ?", [dsv, name, dsv])

    def watch(self, callback: Callable[[], None]) -> None:
        """Would call `callback` when others commit: an embedded store is written only through
        this object, and the node hands the sender its commits itself (a PostgreSQL store calls it)."""

    # ---- snapshots ----

    def snapshot(self, relations: Collection[str] = ()) -> tuple[int, dict[str, tuple[int, list[tuple]]]]:
        """(DSV, {relation: (BRV, rows)}) for the named relations of the source (all when none are
        named), read at one state."""
        with self._reading() as query:
            dsv, brv = self._versions(query)
            return dsv, {r.name: (brv[r.name], self._decode(r, query(f"SELECT * FROM {quote(r.name)}", [])))
                         for r in self._relations if not relations or r.name in relations}

    # ---- the file ----

    def _create(self, initial: dict[str, list[tuple]]) -> None:
        # One transaction: a crash while creating leaves a file that is still new.
        with self._writer, self._write_transaction():
            for rel in self._relations:
                self._con.execute(self._create_table_sql(rel))
            self._create_meta()
            self._con.execute(f"INSERT INTO {self._meta('source')} (source, dsv) VALUES (?, 1)", [self.source])
            self._create_subscribers(1)
            for rel in self._relations:
                self._con.execute(f"INSERT INTO {self._meta('versions')} VALUES (?, 1)", [rel.name])
            for name, rows in initial.items():
                rel = owned_relation(self.catalog, self.source, name, "initial rows")
                where = f"initial rows of {rel.name}"
                checked = [validate_row(rel, r, where) for r in rows]
                keys = set()
                for row in checked:
                    if rel.key_of(row) in keys:
                        raise ModelError(f"{where}: duplicate key {list(rel.key_of(row))}")
                    keys.add(rel.key_of(row))
                try:
                    self._insert(rel, checked)
                except self._refusals as err:
                    raise ModelError(f"{where}: {first_line(err)}") from None

    def _upgrade(self) -> None:
        """A file written before subscribers kept one acknowledged DSV for its one warehouse:
        that warehouse becomes DEFAULT_SUBSCRIBER, acknowledged as far (in the open's write
        transaction, once: the engine drops the old mark)."""
        acknowledged = self._legacy_acknowledged()
        if acknowledged is not None:
            self._create_subscribers(acknowledged)

    def _create_subscribers(self, acknowledged: int) -> None:
        """The table `subscribers`, holding DEFAULT_SUBSCRIBER acknowledged up to `acknowledged`."""
        self._con.execute(f"CREATE TABLE {self._meta('subscribers')} "
                          "(name VARCHAR PRIMARY KEY, relations VARCHAR, acknowledged BIGINT NOT NULL)")
        self._con.execute(f"INSERT INTO {self._meta('subscribers')} VALUES (?, NULL, ?)",
                          [DEFAULT_SUBSCRIBER, acknowledged])

    def _validate_owner(self) -> None:
        with self._reading() as query:
            (owner,), = query(f"SELECT source FROM {self._meta('source')}", [])
        if owner != self.source:
            raise ModelError(f"{self.path} holds source {owner!r}, not {self.source!r}")

    def _versions(self, query: Query) -> tuple[int, dict[str, int]]:
        """The DSV and BRVs as stored, read with `query` (so at the state it reads)."""
        (dsv,), = query(f"SELECT dsv FROM {self._meta('source')}", [])
        stored = dict(query(f"SELECT relation, brv FROM {self._meta('versions')}", []))
        brv = {r.name: stored.get(r.name) for r in self._relations}
        missing = [name for name, v in brv.items() if v is None]
        if missing:
            raise ModelError(f"{self.path} has no relation {', '.join(missing)} of the catalog; "
                             "a source's relations are fixed when its file is created")
        return dsv, brv

    @staticmethod
    def _parse(docs: list) -> list[Notification]:
        return [notification_from_dict(json_text.loads(doc)) for doc, in docs]

    # ---- what the engine supplies ----

    def _connect(self) -> None:
        """Opens the writer's connection `_con` (and whatever the readers need)."""
        raise NotImplementedError

    def close(self) -> None:
        """Closes every connection (everything committed is in the file)."""
        raise NotImplementedError

    def _is_new(self) -> bool:
        """True when the file holds no store yet."""
        raise NotImplementedError

    def _meta(self, table: str) -> str:
        """The SQL name of the store's own table `table` (source, versions, outbox)."""
        raise NotImplementedError

    def _create_table_sql(self, rel: Relation) -> str:
        raise NotImplementedError

    def _create_meta(self) -> None:
        """Creates the tables `source`, `versions` and `outbox` (see the module docstring)."""
        raise NotImplementedError

    def _legacy_acknowledged(self) -> int | None:
        """In a file written before subscribers: its one acknowledged DSV, the old mark dropped;
        None in any other."""
        raise NotImplementedError

    def _write_transaction(self) -> AbstractContextManager:
        """BEGIN ... COMMIT on the writer's connection, or ROLLBACK on any error."""
        raise NotImplementedError

    def _reading(self) -> AbstractContextManager[Query]:
        """Yields a Query that reads one committed state of the store, whatever commits meanwhile."""
        raise NotImplementedError

    def _insert(self, rel: Relation, rows: Sequence[tuple]) -> None:
        raise NotImplementedError

    def _delete_keys(self, rel: Relation, keys: list[tuple]) -> None:
        raise NotImplementedError

    def _write_log(self, dsv: int, brv: dict[str, int], outbox: list[tuple[int, str]]) -> None:
        """Writes the group's DSV, its changed BRVs and its (dsv, notification JSON) outbox entries."""
        raise NotImplementedError

    def _semijoins(self, query: Query, sq: Subquery, relations: list[Relation],
                   nets: dict[str, RelationChange]) -> list[list[tuple]]:
        """The rows each relation keeps, in the sub-query's order (read with `query`), each
        relation in `nets` as of the version its condensed change starts from
        (fedmodel.as_of.reading_as_of over semijoin_chain)."""
        raise NotImplementedError

    def _decode(self, rel: Relation, rows: list) -> list[tuple]:
        """Rows as the engine gives them back -> rows as the memory store holds them."""
        return rows

    def _encode_values(self, rel: Relation, columns: Sequence[str], values: Sequence) -> list:
        """Values of `rel`'s `columns` as statement parameters."""
        return list(values)


def validate_subquery(catalog: Catalog, source: str, sq: Subquery) -> list[Relation]:
    """The sub-query's relations, once it is known to be one `source` can answer: ModelError (one
    line) for a relation it does not own or names twice, a parent not listed before its child,
    join column lists of different lengths, a probe value of the wrong width or type, or a
    selection that is not a predicate over its relation's columns."""
    where = f"sub-query {sq.id}"
    if not sq.relations:
        raise ModelError(f"{where}: names no relation")
    relations: list[Relation] = []
    for i, sr in enumerate(sq.relations):
        rel = owned_relation(catalog, source, sr.relation, where)
        if rel in relations:
            raise ModelError(f"{where}: names relation {rel.name} twice")
        if len(sr.columns) != len(sr.parent_columns):
            raise ModelError(f"{where}: {rel.name} joins on {len(sr.columns)} columns "
                             f"but its parent side has {len(sr.parent_columns)}")
        for c in sr.columns:
            rel.index(c)
        if i > 0:
            if sr.parent is None or not catalog.has_relation(sr.parent) or catalog.relation(sr.parent) not in relations:
                raise ModelError(f"{where}: the parent of {rel.name} must be a relation listed before it")
            parent = catalog.relation(sr.parent)
            for c in sr.parent_columns:
                parent.index(c)
        compile_sql(sr.selection_sql, rel)   # rejects what is not a predicate over rel's columns
        relations.append(rel)
    root, columns = relations[0], sq.relations[0].columns
    if not columns:
        return relations   # no probe: the root's rows that pass its selection
    # The probe is a relation over the root's join columns: its values are checked as its rows.
    probe = Relation(root.name, source, columns, tuple(root.types[root.index(c)] for c in columns), columns)
    for value in sq.probe:
        if len(value) != len(columns):
            raise ModelError(f"{where}: probe value {list(value)} has {len(value)} values, expected {len(columns)}")
        validate_row(probe, value, f"{where}: probe value")
    return relations


def answer_at(source: str, dsv: int, brv: dict[str, int], read_time: float, sq: Subquery,
              relations: list[Relation], nets: dict | None, rows: list[list[tuple]]) -> Answer:
    """The answer to `sq` read at the state `dsv`/`brv`: each relation's kept rows at its version,
    the one the state holds or, for a relation read as of an earlier one, that (fedmodel.as_of)."""
    versions = answered_versions(sq, brv, nets)
    return Answer(sq.id, source, dsv, tuple(RelationAnswer(rel.name, versions[rel.name], tuple(r))
                                            for rel, r in zip(relations, rows)), read_time)


def semijoin_chain(catalog: Catalog, sq: Subquery, relations: list[Relation], scan: Callable[[Relation], list],
                   matching: Callable[[Relation, list[int], set[tuple]], list],
                   nets: dict[str, RelationChange] | None = None) -> list[list[tuple]]:
    """fedmodel.subquery.evaluate_semijoins over a database, relation by relation: the rows whose
    join columns hold a value the parent kept (the root: a probe value; with no probe columns, all
    its rows), then its selection, applied with the compiled predicate the reference uses (so
    every predicate the view parser accepts means the same here, NULLs included). `scan(rel)`
    reads all of a relation's rows, `matching(rel, positions, wanted)` those whose columns at
    `positions` hold one of `wanted`. The relations in `nets` are read as of the version their
    condensed change starts from (fedmodel.as_of)."""
    return semijoin_chains(catalog, [(sq, relations, nets)], scan, matching)[0]


def semijoin_chains(catalog: Catalog, batch: Sequence[tuple[Subquery, list[Relation], dict | None]],
                    scan: Callable[[Relation], list],
                    matching: Callable[[Relation, list[int], set[tuple]], list]) -> list[list[list[tuple]]]:
    """`semijoin_chain` for each (sub-query, its relations, its nets) of a batch read at one
    state, the chains walked side by side: at each depth, the values every chain wants of one
    relation's columns are read in one `matching` call, and a relation scanned once. A batch of
    a thousand sub-queries reads a relation in a few statements rather than a thousand (what a
    PostgreSQL source pays per statement is a round trip to its server). A sub-query read as of
    earlier versions (nets) reads through its own rebuilding scan and matching, alone."""
    results: list[list[list[tuple]]] = [[] for _ in batch]
    _walk_together(catalog, [(sq, relations, out) for (sq, relations, nets), out in zip(batch, results) if not nets],
                   scan, matching)
    for (sq, relations, nets), out in zip(batch, results):
        if nets:
            _walk_together(catalog, [(sq, relations, out)], *reading_as_of(scan, matching, nets))
    return results


def _walk_together(catalog: Catalog, chains: list[tuple[Subquery, list[Relation], list]], scan, matching) -> None:
    """Fills each chain's output list with its relations' kept rows, depth by depth."""
    kept: list[dict[str, list[tuple]]] = [{} for _ in chains]
    for depth in range(max((len(sq.relations) for sq, _, _ in chains), default=0)):
        wants = []                                   # (chain, relation, positions, wanted or None)
        for k, (sq, relations, _) in enumerate(chains):
            if depth >= len(sq.relations):
                continue
            sr, rel = sq.relations[depth], relations[depth]
            if depth == 0:
                wanted = set(sq.probe) if sr.parent_columns else None
            else:
                parent = catalog.relation(sr.parent)
                at = [parent.index(c) for c in sr.parent_columns]
                wanted = {tuple(r[j] for j in at) for r in kept[k][parent.name]}
            wants.append((k, rel, tuple(rel.index(c) for c in sr.columns), wanted))
        asked: dict[tuple[str, tuple[int, ...]], set[tuple]] = {}
        for _, rel, positions, wanted in wants:
            if wanted is not None:
                asked.setdefault((rel.name, positions), set()).update(v for v in wanted if None not in v)
        found: dict[tuple[str, tuple[int, ...]], dict[tuple, list[tuple]]] = {}
        for (name, positions), values in asked.items():
            index = found[name, positions] = {}
            for r in matching(catalog.relation(name), list(positions), values) if values else []:
                index.setdefault(tuple(r[p] for p in positions), []).append(r)
        scanned: dict[str, list[tuple]] = {}
        for k, rel, positions, wanted in wants:
            sr = chains[k][0].relations[depth]
            if wanted is None:
                if rel.name not in scanned:
                    scanned[rel.name] = scan(rel)
                rows = scanned[rel.name]
            else:
                index = found[rel.name, positions]
                rows = [r for v in wanted if None not in v for r in index.get(v, ())]
            test = compile_sql(sr.selection_sql, rel)
            kept[k][rel.name] = [r for r in rows if test(r)]
            chains[k][2].append(kept[k][rel.name])


def owned_relation(catalog: Catalog, source: str, name: str, where: str) -> Relation:
    """The relation `name` if `source` owns it; otherwise ModelError (a source reads only its own)."""
    if not catalog.has_relation(name) or catalog.relation(name).source != source:
        raise ModelError(f"{where}: source {source} does not own a relation named {name!r}")
    return catalog.relation(name)


def quote(identifier: str) -> str:
    """An SQL identifier, quoted (relation and column names keep their case)."""
    return '"' + identifier.replace('"', '""') + '"'


class _GroupFailed(Exception):
    """The database refused a statement of a group: the group is rolled back."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error
