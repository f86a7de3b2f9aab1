"""A source's durable state in one SQLite file (WAL mode): the default source engine.

A source is an OLTP database (docs/architecture.md 5): a commit and a key lookup must cost what a
transactional engine costs. SQLite from the standard library, in WAL mode with primary keys and
an index on every probed column set, measured 0.06-0.08 ms per TPC-H transaction and 0.25-0.40 ms
per two-relation sub-query, flat from SF 0.01 to SF 1. With this store's validation, notification
and outbox around it: 0.25-0.35 ms of CPU per transaction of the `mixed` stream and about 0.5 ms
per "orders of a customer, then their lineitems" sub-query, the same at SF 0.01 and 0.1 (DuckDB:
15-18 ms and 13-25 ms). The contract and everything engine-independent (versions, group commit,
the outbox) are source_node.durable_store's.

Connections. One writer connection, used under the writer's lock, commits the groups (BEGIN
IMMEDIATE ... COMMIT). Reads (sub-queries, snapshots, the log for Resend and History) run on a
connection of their own per thread, each inside one read transaction (BEGIN; the versions; the
rows; COMMIT): WAL gives that transaction one snapshot, so an answer's rows, DSV and BRVs are of
one state, and it never waits for a commit in progress (nor a commit for it). The connections are
opened with isolation_level=None (Python 3.11's sqlite3 has no `autocommit` attribute): every
BEGIN and COMMIT is written here, none implied. synchronous=NORMAL: a commit survives a crash of
the process (what the chaos tests inject); the last commits before a power loss may not. The WAL
is copied back into the database file by a thread of its own every second (a PASSIVE checkpoint,
which waits for no reader or writer) rather than by whichever commit fills it: that commit would
wait for the copy and its fsync (10-25 ms measured, against 0.05 ms for a COMMIT otherwise).

Indexes. Every column set rows are looked up by has an index: the key (the primary key; tables
are WITHOUT ROWID, clustered on it, so a probe on a key prefix such as lineitem's l_orderkey reads
neighbouring rows), the columns of the catalog's RI constraints and FDs (the commit's checks), the
column sets the view's sub-queries probe, when given (source_node.probes), and any other column
set the first time a sub-query probes it (created through the writer, then used by every reader).

Sub-queries run the semijoin chain of fedmodel.subquery.evaluate_semijoins step by step: each
relation's rows whose join columns equal one of the wanted values (a VALUES list joined to the
relation through its index, a few hundred values per statement), then its selection applied in
Python with the compiled predicate the reference uses (fedmodel.predicates), so that every
predicate the view parser accepts means the same here, NULLs included; the join values are checked
again with Python's equality, since SQLite would also match the text '5' to the integer 5.

Types: STRICT tables; BIGINT and BOOLEAN are INTEGER (a BOOLEAN comes back as a Python bool),
DOUBLE is REAL, VARCHAR and DATE are TEXT (a DATE as its ISO string, compared as such).
"""

from __future__ import annotations

import datetime
import logging
import os
import sqlite3
import threading
from contextlib import contextmanager
from typing import Iterable, Sequence

from fedlab.fedmodel.catalog import Catalog, Relation
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.subquery import Subquery
from fedlab.fedmodel.transactions import RelationChange
from fedlab.source_node.durable_store import DurableStore, Query, quote, semijoin_chain

log = logging.getLogger(__name__)
_TYPES = {"BIGINT": "INTEGER", "DOUBLE": "REAL", "VARCHAR": "TEXT", "DATE": "TEXT", "BOOLEAN": "INTEGER"}
_META = "_fedlab_"
_PROBE_CHUNK = 256          # wanted values per statement (SQLite binds at most 32766 parameters)
_CACHED_STATEMENTS = 1024   # prepared statements kept per connection (Python's default: 128)
_MMAP_BYTES = 1 << 30       # how much of a source's file its connections read through a mapping
CHECKPOINT_INTERVAL = 1.0   # seconds between checkpoints


class SQLiteStore(DurableStore):
    _refusals = (sqlite3.Error, OverflowError)   # OverflowError: an integer beyond 64 bits
    _null_safe_equal = "IS"

    def __init__(self, catalog: Catalog, source: str, path: str | os.PathLike,
                 initial: dict[str, list[tuple]] | None = None, log_retention: int | None = None,
                 probes: Iterable[tuple[str, Sequence[str]]] = (), log_keep_seconds: float | None = None):
        """`probes`: (relation, columns) pairs sub-queries will probe (source_node.probes.probed_columns);
        those of this source's relations are indexed now rather than at the first sub-query."""
        if str(path) == ":memory:":
            raise ModelError("a SQLite store needs a file: its readers open connections of their own")
        super().__init__(catalog, source, path, initial, log_retention, log_keep_seconds)
        try:
            self._indexes = self._existing_indexes()
            for rel, columns in [*self._constraint_columns(), *probes]:
                if self.catalog.has_relation(rel) and self.catalog.relation(rel).source == source:
                    self._ensure_index(self.catalog.relation(rel), columns)
        except BaseException:
            self.close()
            raise

    # ---- connections ----

    def _connect(self) -> None:
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._probe_sql: dict[tuple, str] = {}
        self._conversions: dict[tuple, list[tuple[int, str]]] = {}
        self._booleans: dict[str, frozenset[int]] = {}
        self._con = self._open()
        try:
            mode, = self._con.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode != "wal":
                raise ModelError(f"{self.path}: SQLite cannot use WAL mode here (journal mode {mode})")
            self._con.execute("PRAGMA synchronous = NORMAL")
            self._con.execute("PRAGMA wal_autocheckpoint = 0")   # the checkpointer's job, not a commit's
            self._checkpointer = _Checkpointer(self._open(), f"checkpoint-{self.source}")
        except BaseException:
            self._con.close()
            raise

    def _open(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                              cached_statements=_CACHED_STATEMENTS)
        con.execute("PRAGMA busy_timeout = 10000")   # another process's checkpoint, at most
        # Pages read through one shared mapping of the file instead of copied into each
        # connection's 2 MB page cache, which a source at SF 1 (a 1 GB file) kept missing.
        con.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
        return con

    def _reader(self) -> sqlite3.Connection:
        """This thread's read connection (opened on first use; closed by `close`)."""
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._open()
            con.execute("PRAGMA query_only = 1")
            self._local.con = con
            with self._readers_lock:
                self._readers.append(con)
        return con

    def close(self) -> None:
        self._checkpointer.stop()
        with self._writer:
            self._con.close()
        with self._readers_lock:
            for con in self._readers:
                con.close()
            self._readers.clear()

    @contextmanager
    def _write_transaction(self):
        self._con.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        self._con.execute("COMMIT")
        self._checkpointer.written()

    @contextmanager
    def _reading(self):
        con = self._reader()
        con.execute("BEGIN")
        try:
            yield lambda sql, params: con.execute(sql, params).fetchall()
        finally:
            con.execute("COMMIT")   # ends a read transaction: nothing to write

    # ---- the file ----

    def _is_new(self) -> bool:
        found = self._con.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
                                  [_META + "source"]).fetchone()
        return found[0] == 0

    def _meta(self, table: str) -> str:
        return _META + table

    def _create_table_sql(self, rel: Relation) -> str:
        columns = ", ".join(f"{quote(c)} {_TYPES[t]}{' NOT NULL' if c in rel.key else ''}"
                            for c, t in zip(rel.columns, rel.types))
        return (f"CREATE TABLE {quote(rel.name)} ({columns}, PRIMARY KEY ({', '.join(map(quote, rel.key))})) "
                "STRICT, WITHOUT ROWID")

    def _create_meta(self) -> None:
        self._con.execute(f"CREATE TABLE {_META}source (source TEXT NOT NULL, dsv INTEGER NOT NULL) STRICT")
        self._con.execute(f"CREATE TABLE {_META}versions (relation TEXT PRIMARY KEY, brv INTEGER NOT NULL) "
                          "STRICT, WITHOUT ROWID")
        self._con.execute(f"CREATE TABLE {_META}outbox (dsv INTEGER PRIMARY KEY, notification TEXT NOT NULL) STRICT")

    def _legacy_acknowledged(self) -> int | None:
        # Such a file kept it as a column of `source`.
        columns = [c for _, c, *_ in self._con.execute(f"PRAGMA table_info({_META}source)").fetchall()]
        if "acknowledged" not in columns:
            return None
        (acknowledged,), = self._con.execute(f"SELECT acknowledged FROM {_META}source").fetchall()
        self._con.execute(f"ALTER TABLE {_META}source DROP COLUMN acknowledged")
        return acknowledged

    # ---- writing ----

    def _insert(self, rel: Relation, rows: Sequence[tuple]) -> None:
        if ("insert", rel.name) not in self._statements:
            marks = ", ".join("?" * len(rel.columns))
            self._statements["insert", rel.name] = f"INSERT INTO {quote(rel.name)} VALUES ({marks})"
        self._con.executemany(self._statements["insert", rel.name], [self._encode_values(rel, rel.columns, r) for r in rows])

    def _delete_keys(self, rel: Relation, keys: list[tuple]) -> None:
        if ("delete", rel.name) not in self._statements:
            where = " AND ".join(f"{quote(c)} = ?" for c in rel.key)
            self._statements["delete", rel.name] = f"DELETE FROM {quote(rel.name)} WHERE {where}"
        self._con.executemany(self._statements["delete", rel.name], [self._encode_values(rel, rel.key, k) for k in keys])

    def _write_log(self, dsv: int, brv: dict[str, int], outbox: list[tuple[int, str]]) -> None:
        self._con.executemany(f"UPDATE {_META}versions SET brv = ? WHERE relation = ?",
                              [(version, name) for name, version in brv.items()])
        self._con.execute(f"UPDATE {_META}source SET dsv = ?", [dsv])
        self._con.executemany(f"INSERT INTO {_META}outbox VALUES (?, ?)", outbox)

    # ---- values ----

    def _encode_values(self, rel: Relation, columns: Sequence[str], values: Sequence) -> Sequence:
        """A DATE given as a date becomes its ISO string; a DOUBLE given as an integer a float (so
        that an integer beyond 64 bits is stored as the memory store holds it)."""
        key = (rel.name, tuple(columns))
        if key not in self._conversions:   # which of these columns may need one, found once
            self._conversions[key] = [(j, rel.types[rel.index(c)]) for j, c in enumerate(columns)
                                      if rel.types[rel.index(c)] in ("DATE", "DOUBLE")]
        conversions = self._conversions[key]
        if not conversions:
            return values
        out = list(values)
        for j, typ in conversions:
            v = out[j]
            if typ == "DATE" and isinstance(v, datetime.date):
                out[j] = v.isoformat()
            elif typ == "DOUBLE" and isinstance(v, int) and not isinstance(v, bool):
                out[j] = float(v)
        return out

    def _decode(self, rel: Relation, rows: list) -> list[tuple]:
        """BOOLEAN values back from 0/1 to Python bools, so rows equal the memory store's."""
        if rel.name not in self._booleans:
            self._booleans[rel.name] = frozenset(i for i, t in enumerate(rel.types) if t == "BOOLEAN")
        booleans = self._booleans[rel.name]
        if not booleans:
            return rows
        return [tuple(bool(v) if i in booleans and v is not None else v for i, v in enumerate(r)) for r in rows]

    # ---- sub-queries ----

    def _prepare_probes(self, sq: Subquery, relations: list[Relation]) -> None:
        for i, (sr, rel) in enumerate(zip(sq.relations, relations)):
            if sr.columns and (i > 0 or sr.parent_columns):
                self._ensure_index(rel, sr.columns)

    def _semijoins(self, query: Query, sq: Subquery, relations: list[Relation],
                   nets: dict[str, RelationChange]) -> list[list[tuple]]:
        return semijoin_chain(self.catalog, sq, relations,
                              lambda rel: self._decode(rel, query(f"SELECT * FROM {quote(rel.name)}", [])),
                              lambda rel, positions, wanted: self._matching(query, rel, positions, wanted), nets)

    def _matching(self, query: Query, rel: Relation, positions: list[int], wanted: set[tuple]) -> list[tuple]:
        """`rel`'s rows whose values in `positions` are one of `wanted` (a NULL matches nothing)."""
        wanted = {v for v in wanted if None not in v}
        if not wanted or not positions:
            # A join on no column (a cartesian step) keeps every row if the parent kept any.
            return self._decode(rel, query(f"SELECT * FROM {quote(rel.name)}", [])) if wanted else []
        columns = [rel.columns[p] for p in positions]
        values = list({tuple(self._encode_values(rel, columns, v)) for v in wanted})
        key = rel.key_positions
        found: dict[tuple, tuple] = {}   # by key: two values SQLite finds equal ('5', 5) find one row
        for start in range(0, len(values), _PROBE_CHUNK):
            chunk = values[start:start + _PROBE_CHUNK]
            # Padding to a power of two keeps the prepared statements few; a NULL row matches nothing.
            size = 1 << (len(chunk) - 1).bit_length()
            params = [x for v in chunk for x in v] + [None] * (len(columns) * (size - len(chunk)))
            for row in self._decode(rel, query(self._probe_statement(rel, columns, size), params)):
                if tuple(row[p] for p in positions) in wanted:
                    found[tuple(row[i] for i in key)] = row
        return list(found.values())

    def _probe_statement(self, rel: Relation, columns: list[str], size: int) -> str:
        """SELECT the rows of `rel` whose `columns` equal a row of a `size`-row VALUES list; CROSS
        JOIN makes SQLite loop over the values and look each up in the relation's index."""
        key = (rel.name, tuple(columns), size)
        if key not in self._probe_sql:
            row = "(" + ", ".join("?" * len(columns)) + ")"
            match = " AND ".join(f"r.{quote(c)} = v.column{j + 1}" for j, c in enumerate(columns))
            self._probe_sql[key] = (f"SELECT r.* FROM (VALUES {', '.join([row] * size)}) AS v "
                                    f"CROSS JOIN {quote(rel.name)} AS r ON {match}")
        return self._probe_sql[key]

    # ---- indexes ----

    def _existing_indexes(self) -> dict[str, tuple[tuple[str, ...], ...]]:
        """Each relation's indexed column lists (its key first), as the file holds them."""
        out = {}
        for rel in self._relations:
            lists = [tuple(rel.key)]
            for _, name, *_ in self._con.execute(f"PRAGMA index_list({quote(rel.name)})").fetchall():
                lists.append(tuple(c for _, _, c in self._con.execute(f"PRAGMA index_info({quote(name)})").fetchall()))
            out[rel.name] = tuple(lists)
        return out

    def _constraint_columns(self) -> list[tuple[str, tuple[str, ...]]]:
        """The column sets the commit's FD and RI checks look rows up by (plan_commit's `find`)."""
        out = [(fd.relation, fd.lhs) for fd in self.catalog.fds]
        for ri in self.catalog.ri:
            out += [(ri.child, ri.columns), (ri.parent, ri.parent_columns)]
        return out

    def _ensure_index(self, rel: Relation, columns: Sequence[str]) -> None:
        """Creates an index on `columns` of `rel` unless one already leads with them (in any order)."""
        columns = tuple(rel.columns[rel.index(c)] for c in columns)
        if self._indexed(rel, columns):
            return
        with self._writer:
            if self._indexed(rel, columns):   # another thread created it meanwhile
                return
            name = quote(f"{_META}{rel.name}_{'_'.join(columns)}")
            with self._write_transaction():
                self._con.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {quote(rel.name)} "
                                  f"({', '.join(map(quote, columns))})")
            self._indexes[rel.name] += (columns,)

    def _indexed(self, rel: Relation, columns: tuple[str, ...]) -> bool:
        wanted = {c.lower() for c in columns}
        return any({c.lower() for c in index[:len(columns)]} == wanted for index in self._indexes[rel.name])


class _Checkpointer:
    """Checkpoints the WAL on its own thread and connection, at most every CHECKPOINT_INTERVAL
    seconds and only after something was written: an idle source's checkpointer sleeps."""

    def __init__(self, con: sqlite3.Connection, name: str):
        self._con = con
        self._stop = threading.Event()
        self._dirty = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def written(self) -> None:
        """A write transaction committed."""
        self._dirty.set()

    def _run(self) -> None:
        while True:
            self._dirty.wait()
            if self._stop.is_set():
                return
            self._dirty.clear()
            try:
                self._con.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error:   # the next round tries again; the WAL keeps everything meanwhile
                log.exception("checkpoint of %s", self._thread.name)
            if self._stop.wait(CHECKPOINT_INTERVAL):
                return

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        self._thread.join()
        self._con.close()
