"""A source that is a PostgreSQL database other applications write with plain SQL (Vinh 2020).

The embedded stores (source_node.durable_store) are written only through the source node. Here
the relations are ordinary tables that any client may change with INSERT, UPDATE, DELETE or
TRUNCATE over its own connection, concurrently; the node sees every committed change because the
database records it (Vinh 2020, section 3: statement-level triggers with transition tables fill
change tables), and the store reads its outbox from there.

What `install` puts into the database (schema `fedlab`, one source per database):
- `changes(xid, seq, relation, action, row)`: every row a statement deleted ('D') or inserted
  ('I'), an UPDATE as both, a TRUNCATE as the deletion of every row; written by AFTER ... FOR
  EACH STATEMENT triggers (`fedlab_ins`, `fedlab_upd`, `fedlab_del`, BEFORE TRUNCATE
  `fedlab_truncate`) on each relation, tagged with the writing transaction's id. A transaction
  that rolls back takes its change rows with it: they never appear.
- `pending(xid)`: one row per transaction that changed something; inserting it queues a
  DEFERRABLE INITIALLY DEFERRED constraint trigger, `stamp`, which runs as the transaction
  commits.
- `stamp` gives the transaction its versions (Sze-Ling section 3, items 1 and 2): it updates the
  one row of `source` (DSV + 1), then `versions` (BRV + 1 for each relation it changed), and writes
  `log(dsv, xid, txn_id, commit_time, brv)`. The row lock the UPDATE of `source` takes is held
  until the transaction ends, so a second committing transaction waits at that UPDATE until the
  first has committed (or rolled back), and reads the DSV it left: DSVs follow commit order, with
  no gaps. (This needs the writers' READ COMMITTED, PostgreSQL's default: a REPEATABLE READ or
  SERIALIZABLE writer that commits while another does gets a serialization failure and retries,
  as such writers must.) It ends with NOTIFY fedlab, which wakes the node's listener.
- `subscribers(name, relations, acknowledged)`: the warehouses it serves, what each reads and
  what each holds durably (source_node.subscriber_outbox; kept apart from `source`, so that an
  acknowledgement never waits behind a commit's lock).

A transaction's notification is built from its change rows in statement order, condensed per key
(fedmodel.condense: the first row's image before, the last one's after), with the BRVs `stamp`
gave. An answer or a snapshot reads in one REPEATABLE READ transaction: its rows, DSV and BRVs
are of one committed state. The node's own Commit RPC writes through the same tables in one
database transaction per source transaction (its id travels in the transaction-local setting
`fedlab.txn_id`); the triggers capture it like any other writer's.

Types: BIGINT, DOUBLE (double precision), VARCHAR (text), DATE, BOOLEAN; a DATE comes back as its
ISO string, as the other stores hold it.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from contextlib import contextmanager
from typing import Callable, Collection, Iterable, Sequence

import psycopg
from psycopg.types.json import Jsonb
from psycopg.types.string import TextLoader

from fedlab.fedmodel.catalog import Catalog, Relation, validate_row
from fedlab.fedmodel.condense import condense
from fedlab.fedmodel.errors import ModelError, first_line
from fedlab.fedmodel.subquery import Answer, Subquery
from fedlab.fedmodel.transactions import Notification, RelationChange, TransactionRequest
from fedlab.source_node.commit import GroupCommit, plan_commit, read_ahead
from fedlab.source_node.durable_store import answer_at, owned_relation, quote, semijoin_chains, validate_subquery
from fedlab.source_node.recent_changes import SharedRecentChanges
from fedlab.source_node.subscriber_outbox import SubscriberOutbox
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER

log = logging.getLogger(__name__)
_TYPES = {"BIGINT": "bigint", "DOUBLE": "double precision", "VARCHAR": "text", "DATE": "date", "BOOLEAN": "boolean"}
# PostgreSQL types read as a catalog type's without a cast (which would keep an index from a probe)
_READ_ALIKE = {"bigint": {"bigint", "integer", "smallint"}, "text": {"text", "character varying"}}
_PROBE_CHUNK = 500            # wanted values per statement
CONNECT_WAIT = 60.0           # seconds an opening store waits for a server that is not up
# What libpq says of a server that is down or coming up (not of a wrong name or password)
_RESTARTING = ("not yet accepting connections", "starting up", "shutting down", "No such file or directory",
               "Connection refused")
LISTEN_TIMEOUT = 1.0          # seconds between looks at the log even without a NOTIFY
LISTEN_SPACING = 0.05         # seconds at least between two reads of the log for NOTIFYs

SUBSCRIBERS = "CREATE TABLE fedlab.subscribers (name text PRIMARY KEY, relations jsonb, acknowledged bigint NOT NULL)"
INSTALL = """
CREATE SCHEMA fedlab;
CREATE TABLE fedlab.source (source text NOT NULL, dsv bigint NOT NULL);
CREATE TABLE fedlab.versions (relation text PRIMARY KEY, brv bigint NOT NULL);
CREATE TABLE fedlab.changes (xid xid8 NOT NULL, seq bigserial, relation text NOT NULL, action "char" NOT NULL,
                             row jsonb NOT NULL, PRIMARY KEY (xid, seq));
CREATE TABLE fedlab.pending (xid xid8 PRIMARY KEY);
CREATE TABLE fedlab.log (dsv bigint PRIMARY KEY, xid xid8 NOT NULL, txn_id text NOT NULL,
                         commit_time double precision NOT NULL, brv jsonb NOT NULL);
CREATE INDEX log_xid ON fedlab.log (xid);

CREATE FUNCTION fedlab.capture() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  captured bigint := 0;
  n bigint;
BEGIN
  IF TG_OP IN ('DELETE', 'UPDATE') THEN
    INSERT INTO fedlab.changes (xid, relation, action, row)
      SELECT pg_current_xact_id(), TG_TABLE_NAME, 'D', to_jsonb(o) FROM old_rows o;
    GET DIAGNOSTICS n = ROW_COUNT;
    captured := captured + n;
  END IF;
  IF TG_OP IN ('INSERT', 'UPDATE') THEN
    INSERT INTO fedlab.changes (xid, relation, action, row)
      SELECT pg_current_xact_id(), TG_TABLE_NAME, 'I', to_jsonb(r) FROM new_rows r;
    GET DIAGNOSTICS n = ROW_COUNT;
    captured := captured + n;
  END IF;
  IF captured > 0 THEN
    INSERT INTO fedlab.pending VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION fedlab.capture_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  n bigint;
BEGIN
  EXECUTE format('INSERT INTO fedlab.changes (xid, relation, action, row) '
                 'SELECT pg_current_xact_id(), %L, ''D'', to_jsonb(t) FROM %I.%I t',
                 TG_TABLE_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME);
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    INSERT INTO fedlab.pending VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING;
  END IF;
  RETURN NULL;
END $$;

CREATE FUNCTION fedlab.stamp() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  d bigint;
  b bigint;
  versions jsonb := '{}';
  r record;
BEGIN
  UPDATE fedlab.source SET dsv = dsv + 1 RETURNING dsv INTO d;   -- its row lock orders the commits
  FOR r IN SELECT DISTINCT relation FROM fedlab.changes WHERE xid = NEW.xid ORDER BY relation LOOP
    UPDATE fedlab.versions SET brv = brv + 1 WHERE relation = r.relation RETURNING brv INTO b;
    versions := versions || jsonb_build_object(r.relation, b);
  END LOOP;
  INSERT INTO fedlab.log VALUES (d, NEW.xid,
    coalesce(nullif(current_setting('fedlab.txn_id', true), ''), 'pg-' || NEW.xid::text),
    extract(epoch FROM clock_timestamp()), versions);
  DELETE FROM fedlab.pending WHERE xid = NEW.xid;
  PERFORM pg_notify('fedlab', d::text);
  RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER stamp AFTER INSERT ON fedlab.pending
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fedlab.stamp();
"""

CAPTURE = """
CREATE TRIGGER fedlab_ins AFTER INSERT ON {t} REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION fedlab.capture();
CREATE TRIGGER fedlab_upd AFTER UPDATE ON {t} REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION fedlab.capture();
CREATE TRIGGER fedlab_del AFTER DELETE ON {t} REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION fedlab.capture();
CREATE TRIGGER fedlab_truncate BEFORE TRUNCATE ON {t} FOR EACH STATEMENT EXECUTE FUNCTION fedlab.capture_truncate();
"""


class PostgresStore(GroupCommit, SubscriberOutbox):
    """The store contract of source_node.durable_store over a PostgreSQL database at `dsn`."""

    def __init__(self, catalog: Catalog, source: str, dsn: str, initial: dict[str, list[tuple]] | None = None,
                 log_retention: int | None = None, prune_applied: bool = False,
                 log_keep_seconds: float | None = None):
        """Connects, and installs the tables, triggers and versions (see the module docstring) the
        first time, creating the relations that do not exist (with the `initial` rows) and taking
        the rows already there as the state at DSV 1.

        `prune_applied`: delete the change rows and log entries of the transactions every
        subscriber has acknowledged and applied (bounded growth; `fedlab check` then cannot judge
        the run, whose history is gone); `log_retention` keeps only the newest that many;
        `log_keep_seconds` those of that many seconds and the unacknowledged (source_node.subscriber_outbox)."""
        self.catalog = catalog
        self.source = source
        self.path = dsn
        self.log_retention = log_retention
        self.log_keep_seconds = log_keep_seconds
        self.prune_applied = prune_applied
        self._pruned = 0               # the log is pruned through this DSV
        self._relations = catalog.relations_at(source)
        if not self._relations:
            raise ModelError(f"source {source!r} owns no relation in the catalog")
        self._writer = threading.Lock()          # the writer's connection, one user at a time
        self._state = threading.Lock()           # versions and the outbox held in memory
        self._catching = threading.Lock()        # one reader of new log entries at a time
        self._local = threading.local()
        self._connections: list[psycopg.Connection] = []
        self._watchers: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        try:
            self._con = self._connect(wait=CONNECT_WAIT)   # a node restarted with its server waits for it
            self._install(initial or {})
            self._pg_types = self._column_types()
            self._open()
        except psycopg.Error as err:
            self.close()
            raise ModelError(f"source {source}: PostgreSQL at {dsn}: {first_line(err)}") from None
        except BaseException:
            self.close()
            raise

    def _open(self) -> None:
        """Reads the versions, the subscribers and their outbox, and starts the listener."""
        with self._reading() as cur:
            self._dsv, self._brv = self._versions(cur)
            subscribers = cur.execute("SELECT name, relations, acknowledged FROM fedlab.subscribers").fetchall()
        oldest = min((acknowledged + 1 for _, _, acknowledged in subscribers), default=self._dsv + 1)
        self._hold(subscribers, self._read_log(oldest, None))
        # For answers as of earlier versions: what a subscriber may not have applied yet,
        # from the unacknowledged on (and the log the pruning left: the rest of it).
        held = self._read_log(self.oldest_available(), oldest - 1) if self.prune_applied else []
        held += self._retained
        self.recent = SharedRecentChanges(self._relations, self._dsv, self._brv, held)
        self._listener = threading.Thread(target=self._listen, name=f"listen-{self.source}", daemon=True)
        self._listener.start()

    # ---- versions ----

    @property
    def dsv(self) -> int:
        with self._state:
            return self._dsv

    @property
    def brv(self) -> dict[str, int]:
        with self._state:
            return dict(self._brv)

    # ---- transactions through the node ----

    def commit_many(self, requests: Sequence[TransactionRequest], commit_time: float = 0.0) -> list:
        """Commits each request as one database transaction, in order; one outcome per request:
        its notification, or the ModelError that rejected it (the database rolled it back).
        `commit_time` is not used: the database's clock at commit is. The DSVs the commits got
        are read once for the whole group: a statement is a round trip, and under writers from
        outside each one waits for the server's CPU."""
        written: list[str | ModelError] = []   # a transaction id, or what rejected the request
        self._reconnect_writer()
        for request in requests:
            with self._writer:
                try:
                    written.append(self._write(request))
                except ModelError as err:
                    written.append(err)
                except psycopg.Error as err:
                    written.append(ModelError(f"transaction {request.txn_id}: {first_line(err)}"))
            self._reconnect_writer()   # (a server restart: this request was refused, the next one goes through)
        xids = [w for w in written if isinstance(w, str)]
        if not xids:
            return written
        notes = self._notifications_of(xids)
        return [notes[w] if isinstance(w, str) else w for w in written]

    def _notifications_of(self, xids: list[str]) -> dict[str, Notification]:
        """The notifications of the node's own committed transactions, by transaction id (xid8)."""
        with self._writer:
            dsv_of = dict(self._con.execute("SELECT xid::text, dsv FROM fedlab.log WHERE xid = ANY(%s::xid8[])",
                                            [xids]).fetchall())
        self._catch_up()
        notes = {n.dsv: n for n in self.notifications_from(min(dsv_of.values()), max(dsv_of.values()))}
        return {xid: notes[dsv] for xid, dsv in dsv_of.items()}

    def _write(self, request: TransactionRequest) -> str:
        """Plans and writes one request in one database transaction; returns its transaction id.
        The rows the planner looks up are read ahead, one statement per relation, and the writes
        go to the server in one pipeline: a round trip is what a commit costs here."""
        with self._con.transaction():
            with self._con.cursor() as cur:
                known = read_ahead(self.catalog, self.source, [request],
                                   lambda rel, keys: self._matching(cur, rel, list(rel.key_positions), keys))

            def lookup(relation: str, key: tuple) -> tuple | None:
                return known[relation, key] if (relation, key) in known else self._lookup(relation, key)

            planned = plan_commit(self.catalog, self.source, request, lookup, self._find)
            with self._con.pipeline(), self._con.cursor() as cur:
                self._mark(cur, request)
                for p in planned:
                    rel = self.catalog.relation(p.relation)
                    gone = [rel.key_of(r) for r in p.deleted] + [rel.key_of(m.old) for m in p.modified]
                    where = " AND ".join(f"{quote(c)} = %s" for c in rel.key)
                    for key in gone:
                        cur.execute(f"DELETE FROM {quote(rel.name)} WHERE {where}", list(key))
                    marks = ", ".join(["%s"] * len(rel.columns))
                    cur.executemany(f"INSERT INTO {quote(rel.name)} VALUES ({marks})",
                                    [list(r) for r in [m.new for m in p.modified] + list(p.inserted)])
                xid = self._con.execute("SELECT pg_current_xact_id()::text")
            (xid,), = xid.fetchall()
        return xid

    def _mark(self, cur, request: TransactionRequest) -> None:
        """Tags the node's transaction with its id for the capture, and makes sure it gets a DSV:
        a transaction whose net effect is nothing (a modification to the same values) writes no
        row, so no trigger queues its stamp, yet it gets its DSV as in the embedded stores (the
        Commit RPC answers with it)."""
        cur.execute("SELECT set_config('fedlab.txn_id', %s, true)", [request.txn_id])
        cur.execute("INSERT INTO fedlab.pending VALUES (pg_current_xact_id()) ON CONFLICT DO NOTHING")

    def _lookup(self, relation: str, key: tuple) -> tuple | None:
        rel = self.catalog.relation(relation)
        rows = self._select(rel, " AND ".join(f"{quote(c)} = %s" for c in rel.key), key)
        return rows[0] if rows else None

    def _find(self, relation: str, columns: tuple, values: tuple) -> list[tuple]:
        rel = self.catalog.relation(relation)
        return self._select(rel, " AND ".join(f"{quote(rel.columns[rel.index(c)])} IS NOT DISTINCT FROM %s"
                                              for c in columns), values)

    def _select(self, rel: Relation, where: str, params: Sequence) -> list[tuple]:
        return self._con.execute(f"SELECT {self._selected(rel)} FROM {quote(rel.name)} WHERE {where}",
                                 list(params)).fetchall()

    # ---- the log: change tables, read as notifications ----

    def watch(self, callback: Callable[[], None]) -> None:
        """Calls `callback` whenever transactions committed by anyone have been added to the outbox."""
        self._watchers.append(callback)

    def _listen(self) -> None:
        """LISTEN fedlab: a NOTIFY (and every LISTEN_TIMEOUT seconds anyway) reads the new log.
        Every commit notifies; the notifications that queued while the log was read are taken
        together, and reads are at least LISTEN_SPACING apart, so that writers from outside at
        hundreds of commits a second cost a read per batch of them, not one each."""
        con = self._listening()
        read = float("-inf")
        while not self._stop.is_set():
            try:
                self._reconnect_writer()
                if con is not None and con.broken:   # the server restarted
                    con = self._listening()
                if con is not None:
                    for _ in con.notifies(timeout=LISTEN_TIMEOUT, stop_after=1):
                        pass
                    if self._stop.wait(max(0.0, read + LISTEN_SPACING - time.monotonic())):
                        return
                    for _ in con.notifies(timeout=0):   # those that came meanwhile: this read covers them
                        pass
                    read = time.monotonic()
                else:
                    self._stop.wait(LISTEN_TIMEOUT)
                if self._catch_up():
                    for callback in self._watchers:
                        callback()
            except psycopg.Error:
                if self._stop.is_set():
                    return
                log.exception("source %s: reading the change log failed; trying again", self.source)
                self._stop.wait(LISTEN_TIMEOUT)

    def _listening(self) -> psycopg.Connection | None:
        """A connection that LISTENs for commits; None (the listener polls) when there is none."""
        try:
            con = self._connect(wait=CONNECT_WAIT)
            con.execute("LISTEN fedlab")
            return con
        except psycopg.Error as err:
            log.warning("source %s: cannot listen for commits (%s); polling instead", self.source, first_line(err))
            return None

    def _reconnect_writer(self) -> None:
        """A new writer's connection when a server restart broke it: the node's commits, the
        acknowledgements and the bookkeeping go through it."""
        with self._writer:
            if gone(self._con):
                try:
                    self._con = self._connect()
                except psycopg.Error as err:
                    log.warning("source %s: %s; trying again", self.source, first_line(err))

    def _catch_up(self) -> bool:
        """Reads the log entries past those held; True if there were any."""
        with self._catching:
            with self._state:
                after = self._dsv
            notes = self._read_log(after + 1, None)
            if not notes:
                return False
            with self._state:
                taken = []
                for n in notes:
                    if n.dsv == self._dsv + 1:
                        self._dsv = n.dsv
                        self._brv.update({c.relation: c.brv for c in n.changes})
                        taken.append(n)
                        self.recent.record(n)
                aged = self._committed(taken, self.log_retention)
            self._prune_after(notes[-1].dsv, aged)
            return True

    def _read_log(self, start: int, through: int | None) -> list[Notification]:
        """The notifications of DSVs start..through (all from start with None), from the tables,
        in one statement (a round trip; no transaction needed: a DSV is logged only after every
        earlier one is committed, so a statement's snapshot holds a prefix of the log)."""
        bound, params = ("AND l.dsv <= %s", [start, through]) if through is not None else ("", [start])
        entries = self._reader().execute(
            f"SELECT l.dsv, l.txn_id, l.commit_time, l.brv, "
            f"coalesce(array_agg(c.relation ORDER BY c.seq) FILTER (WHERE c.seq IS NOT NULL), '{{}}'), "
            f"coalesce(array_agg(c.action ORDER BY c.seq) FILTER (WHERE c.seq IS NOT NULL), '{{}}'), "
            f"coalesce(array_agg(c.row ORDER BY c.seq) FILTER (WHERE c.seq IS NOT NULL), '{{}}') "
            f"FROM fedlab.log l LEFT JOIN fedlab.changes c ON c.xid = l.xid "
            f"WHERE l.dsv >= %s {bound} GROUP BY l.dsv ORDER BY l.dsv", params).fetchall()
        return [self._notification(*entry) for entry in entries]

    def _notification(self, dsv: int, txn_id: str, commit_time: float, brv: dict, relations: list,
                      actions: list, rows: list) -> Notification:
        """One transaction's notification: its captured rows per relation, condensed per key."""
        captured = []
        for name, action, doc in zip(relations, actions, rows):
            rel = self._relation(name)
            captured.append((rel.name, action, self._row(rel, doc)))
        nets = condensed_captures(captured, lambda name: self.catalog.relation(name).key_of)
        changes = []
        for name, version in sorted(brv.items()):
            rel = self._relation(name)
            net = nets.get(rel.name) or RelationChange(rel.name, version)
            changes.append(RelationChange(rel.name, version, net.inserted, net.deleted, net.modified))
        return Notification(self.source, dsv, txn_id, tuple(changes), commit_time)

    def _relation(self, table: str) -> Relation:
        return owned_relation(self.catalog, self.source, table, "change log")

    def _row(self, rel: Relation, doc: dict) -> tuple:
        """A captured row (to_jsonb: column -> value) as the stores hold it."""
        by_name = {k.lower(): v for k, v in doc.items()}
        values = [by_name.get(c.lower()) for c in rel.columns]
        return tuple(float(v) if t == "DOUBLE" and isinstance(v, int) and not isinstance(v, bool) else
                     self._as_text(rel, c, v) if t == "VARCHAR" and isinstance(v, str) else v
                     for c, v, t in zip(rel.columns, values, rel.types))

    def _prune(self, through: int) -> None:
        """Deletes the log's notifications up to DSV `through`, and their change rows."""
        with self._writer, self._con.transaction():
            self._con.execute("DELETE FROM fedlab.changes c USING fedlab.log l WHERE c.xid = l.xid AND l.dsv <= %s",
                              [through])
            self._con.execute("DELETE FROM fedlab.log WHERE dsv <= %s", [through])

    _trim_log = _prune

    def _prune_after(self, newest: int, aged: int | None) -> None:
        """Trims the log once DSVs through `newest` are taken: to the newest `log_retention`, and
        through `aged` (what `_committed` found past `log_keep_seconds`). Outside the state lock."""
        if self.log_retention is not None:
            self._prune(newest - self.log_retention)
        if aged is not None:
            self._prune(aged)

    def oldest_available(self) -> int:
        with self._reading() as cur:
            (oldest,), = cur.execute("SELECT min(dsv) FROM fedlab.log").fetchall()
            return oldest if oldest is not None else self._versions(cur)[0] + 1

    def _save_subscriber(self, name: str, relations: list[str] | None, acknowledged: int) -> None:
        with self._writer, self._con.transaction():
            self._con.execute("INSERT INTO fedlab.subscribers VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE "
                              "SET relations = excluded.relations, acknowledged = excluded.acknowledged",
                              [name, None if relations is None else Jsonb(relations), acknowledged])

    def _delete_subscriber(self, name: str) -> None:
        with self._writer, self._con.transaction():
            self._con.execute("DELETE FROM fedlab.subscribers WHERE name = %s", [name])

    def _save_acknowledged(self, name: str, dsv: int) -> None:
        with self._writer, self._con.transaction():
            self._con.execute("UPDATE fedlab.subscribers SET acknowledged = %s WHERE name = %s AND acknowledged < %s",
                              [dsv, name, dsv])

    def _released(self) -> None:
        """Also, with `prune_applied`, the change rows and log entries every subscriber has
        acknowledged and applied go (none of them will ask for them again)."""
        super()._released()
        if not self.prune_applied:
            return
        with self._state:
            floor = self._subscriptions.applied_floor()
            through = min(self._dsv if floor is None else floor, self._subscriptions.retained_from(self._dsv) - 1)
            if through <= self._pruned:
                return
            self._pruned = through
        self._prune(through)

    # ---- reading at one state ----

    def answer(self, sq: Subquery) -> Answer:
        """The sub-query's semijoin chain (fedmodel.subquery.evaluate_semijoins), read in one
        REPEATABLE READ transaction: rows, DSV and BRVs of one committed state; the relations
        `sq.as_of` names rebuilt at those versions from that state and the changes since
        (formula 12, fedmodel.as_of) while the recent changes reach back to them."""
        return self.answer_all([sq])[0]

    def answer_all(self, subqueries: Sequence[Subquery]) -> list[Answer]:
        """`answer` for each of a batch, all in one REPEATABLE READ transaction, the chains walked
        side by side (durable_store.semijoin_chains): a statement is a round trip to the server,
        and under writers from outside each one waits for the server's CPU, so a batch pays a few
        per relation rather than a few per sub-query."""
        checked = [(sq, validate_subquery(self.catalog, self.source, sq)) for sq in subqueries]
        read_time = time.time()   # before the read: every commit stamped earlier is in it (up to the warehouse's allowance)
        where = f"sub-queries {', '.join(sq.id for sq in subqueries[:3])}{', ...' if len(subqueries) > 3 else ''}"
        try:
            with self._at_one_state() as (cur, dsv, brv):
                # (nets waits for the listener to read another writer's commit this state holds.)
                batch = [(sq, relations, self.recent.nets(sq, dsv, brv)) for sq, relations in checked]
                rows = semijoin_chains(self.catalog, batch,
                                       lambda rel: cur.execute(f"SELECT {self._selected(rel)} FROM {quote(rel.name)}").fetchall(),
                                       lambda rel, positions, wanted: self._matching(cur, rel, positions, wanted))
        except psycopg.Error as err:
            raise ModelError(f"{where}: {first_line(err)}") from None
        return [answer_at(self.source, dsv, brv, read_time, sq, relations, nets, read)
                for (sq, relations, nets), read in zip(batch, rows)]

    def _matching(self, cur, rel: Relation, positions: list[int], wanted: set[tuple]) -> list[tuple]:
        """`rel`'s rows whose columns at `positions` hold one of `wanted` (a NULL matches nothing)."""
        columns = [rel.columns[p] for p in positions]
        wanted = sorted({v for v in wanted if None not in v}, key=repr)
        if not wanted or not columns:
            return cur.execute(f"SELECT {self._selected(rel)} FROM {quote(rel.name)}").fetchall() if wanted else []
        casts = [_TYPES[rel.types[rel.index(c)]] for c in columns]
        row = "(" + ", ".join(f"%s::{t}" for t in casts) + ")"
        names = ", ".join(f"v{j}" for j in range(len(columns)))
        match = " AND ".join(f"r.{quote(c)}{self._cast(rel, c)} = v.v{j}" for j, c in enumerate(columns))
        found = []
        for start in range(0, len(wanted), _PROBE_CHUNK):
            chunk = wanted[start:start + _PROBE_CHUNK]
            found += cur.execute(f"SELECT {self._selected(rel, 'r.')} FROM {quote(rel.name)} r "
                                 f"JOIN (VALUES {', '.join([row] * len(chunk))}) AS v({names}) ON {match}",
                                 [x for v in chunk for x in v]).fetchall()
        return found

    def snapshot(self, relations: Collection[str] = ()) -> tuple[int, dict[str, tuple[int, list[tuple]]]]:
        """(DSV, {relation: (BRV, rows)}) for the named relations of the source (all when none are
        named), read at one state."""
        with self._at_one_state() as (cur, dsv, brv):
            return dsv, {r.name: (brv[r.name], cur.execute(f"SELECT {self._selected(r)} FROM {quote(r.name)}").fetchall())
                         for r in self._relations if not relations or r.name in relations}

    @contextmanager
    def _at_one_state(self):
        """(cursor, DSV, BRVs) inside one REPEATABLE READ transaction, the versions of the state
        its reads see."""
        with self._reading() as cur:
            yield (cur, *self._versions(cur))

    def _versions(self, cur) -> tuple[int, dict[str, int]]:
        (dsv,), = cur.execute("SELECT dsv FROM fedlab.source").fetchall()
        stored = {name.lower(): v for name, v in cur.execute("SELECT relation, brv FROM fedlab.versions").fetchall()}
        return dsv, {r.name: stored[r.name.lower()] for r in self._relations}

    # ---- columns of other applications' types ----

    def _column_types(self) -> dict[tuple[str, str], str]:
        """(table, column) -> its PostgreSQL type, for the source's relations (lower case), each
        relation found as the store's statements find it (the search path)."""
        rows = self._con.execute(
            "SELECT lower(c.relname), lower(a.attname), format_type(a.atttypid, NULL) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid WHERE a.attrelid = ANY(%s::regclass[]) AND a.attnum > 0 "
            "AND NOT a.attisdropped", [[quote(r.name) for r in self._relations]]).fetchall()
        return {(table, column): kind for table, column, kind in rows}

    def _cast(self, rel: Relation, column: str) -> str:
        """The cast that reads `column` as its catalog type ("" when its PostgreSQL type is that
        type already, as in the tables the store creates): a relation an application made may hold
        numeric, char(n) or timestamp columns (loadgen/ch/catalog.py: read as double precision
        and text, a char's padding dropped)."""
        wanted = _TYPES[rel.types[rel.index(column)]]
        found = self._pg_types.get((rel.name.lower(), column.lower()), wanted)
        return "" if found in _READ_ALIKE.get(wanted, {wanted}) else f"::{wanted}"

    def _selected(self, rel: Relation, prefix: str = "") -> str:
        return ", ".join(f"{prefix}{quote(c)}{self._cast(rel, c)}" for c in rel.columns)

    def _as_text(self, rel: Relation, column: str, value: str) -> str:
        """A captured VARCHAR (to_jsonb's text) as `_cast` reads it: a char(n) without its padding,
        a timestamp in PostgreSQL's ISO output (a space, not to_jsonb's 'T', between date and time)."""
        found = self._pg_types.get((rel.name.lower(), column.lower()))
        if found == "character":
            return value.rstrip(" ")
        if found and found.startswith("timestamp"):
            return value.replace("T", " ", 1)
        return value

    # ---- connections ----

    def _connect(self, wait: float = 0.0) -> psycopg.Connection:
        """A new connection; for `wait` seconds a server that is not there (restarting) is tried again."""
        deadline = time.monotonic() + wait
        while True:
            try:
                con = psycopg.connect(self.path, autocommit=True)
                break
            except psycopg.OperationalError as err:
                if time.monotonic() > deadline or not any(sign in str(err) for sign in _RESTARTING):
                    raise
                time.sleep(0.5)
        con.adapters.register_loader("date", TextLoader)   # a DATE as its ISO string
        self._connections.append(con)
        return con

    def _reader(self) -> psycopg.Connection:
        """This thread's connection for reading: a statement alone reads one committed state, and
        a transaction (`_reading`) begins REPEATABLE READ, READ ONLY in its BEGIN."""
        con = getattr(self._local, "con", None)
        if con is None or gone(con):
            con = self._local.con = self._connect()
            con.isolation_level, con.read_only = psycopg.IsolationLevel.REPEATABLE_READ, True
        return con

    @contextmanager
    def _reading(self):
        """A cursor inside one REPEATABLE READ, READ ONLY transaction on this thread's connection."""
        con = self._reader()
        with con.transaction():
            yield con.cursor()

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.join(timeout=LISTEN_TIMEOUT + 5)
        for con in self._connections:
            con.close()
        self._connections.clear()

    # ---- installing ----

    def _install(self, initial: dict[str, list[tuple]]) -> None:
        """One transaction: creates what is missing, or checks that the database is this source's."""
        with self._con.transaction():
            self._con.execute("SELECT pg_advisory_xact_lock(hashtext('fedlab install'))")
            (installed,), = self._con.execute(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'fedlab'").fetchall()
            if installed:
                (owner,), = self._con.execute("SELECT source FROM fedlab.source").fetchall()
                if owner != self.source:
                    raise ModelError(f"{self.path} holds source {owner!r}, not {self.source!r}")
                (triggers,), = self._con.execute("SELECT to_regclass('fedlab.changes') IS NOT NULL").fetchall()
                if not triggers:
                    raise ModelError(f"source {self.source}: {self.path} was installed with capture logical, "
                                     f"not triggers")
                # The node finds its own commit's DSV by xid (installs before the index had none).
                self._con.execute("CREATE INDEX IF NOT EXISTS log_xid ON fedlab.log (xid)")
                # Installs before subscribers kept one acknowledged DSV for their one warehouse:
                # it becomes the default subscriber, acknowledged as far.
                (legacy,), = self._con.execute("SELECT to_regclass('fedlab.acknowledged') IS NOT NULL").fetchall()
                if legacy:
                    self._con.execute(SUBSCRIBERS)
                    self._con.execute("INSERT INTO fedlab.subscribers SELECT %s, NULL, max(dsv) FROM fedlab.acknowledged",
                                      [DEFAULT_SUBSCRIBER])
                    self._con.execute("DROP TABLE fedlab.acknowledged")
                return
            for rel in self._relations:
                self._con.execute(f"CREATE TABLE IF NOT EXISTS {quote(rel.name)} ({_definition(rel)})")
            self._load(initial)
            self._con.execute(INSTALL)
            self._con.execute("INSERT INTO fedlab.source VALUES (%s, 1)", [self.source])
            self._con.execute(SUBSCRIBERS)
            self._con.execute("INSERT INTO fedlab.subscribers VALUES (%s, NULL, 1)", [DEFAULT_SUBSCRIBER])
            for rel in self._relations:
                self._con.execute("INSERT INTO fedlab.versions VALUES (%s, 1)", [rel.name])
                self._con.execute(CAPTURE.format(t=quote(rel.name)))
                # Statistics of the rows just loaded: without them the planner guesses, and a
                # join the answers or other applications make is planned for a few rows (a point
                # update through an index took 10 ms, not 0.2, until autovacuum came by).
                self._con.execute(f"ANALYZE {quote(rel.name)}")

    def _load(self, initial: dict[str, list[tuple]]) -> None:
        """Inserts the initial rows, each checked against its relation (in the install's transaction)."""
        for name, rows in initial.items():
            rel = owned_relation(self.catalog, self.source, name, "initial rows")
            checked = [validate_row(rel, r, f"initial rows of {rel.name}") for r in rows]
            marks = ", ".join(["%s"] * len(rel.columns))
            with self._con.cursor() as cur:
                cur.executemany(f"INSERT INTO {quote(rel.name)} ({_columns(rel)}) VALUES ({marks})",
                                [list(r) for r in checked])


def gone(con: psycopg.Connection) -> bool:
    """Whether an idle connection is no use: broken, or closed by its server (a restart), which
    makes its socket readable though no statement is running (libpq only finds out on next use)."""
    if con.broken or con.closed:
        return True
    try:
        readable, _, _ = select.select([con.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def installed_capture(dsn: str) -> str | None:
    """How the source in the database at `dsn` was installed to capture ("triggers" or "logical",
    source_node.logical_capture), None when it was not; ModelError when it cannot be reached."""
    try:
        with psycopg.connect(dsn, autocommit=True) as con:
            (schema, changes), = con.execute("SELECT to_regnamespace('fedlab') IS NOT NULL, "
                                             "to_regclass('fedlab.changes') IS NOT NULL").fetchall()
    except psycopg.Error as err:
        raise ModelError(f"PostgreSQL at {dsn}: {first_line(err)}") from None
    return None if not schema else "triggers" if changes else "logical"


def condensed_captures(captured: Iterable[tuple[str, str, tuple | dict]],
                       key_of: Callable[[str], Callable]) -> dict[str, RelationChange]:
    """Rows the capture triggers wrote, (relation, 'D' or 'I', row) in statement order, as one
    change per relation condensed per key (fedmodel.condense; `key_of(relation)` gives its key
    function): what a transaction's notification carries, and what an asynchronous maintenance
    pass over several transactions consumes (bench.postgres_maintenance)."""
    steps: dict[str, list[RelationChange]] = {}
    for relation, action, row in captured:
        step = RelationChange(relation, 0, deleted=(row,)) if action == "D" else RelationChange(relation, 0, inserted=(row,))
        steps.setdefault(relation, []).append(step)
    return {relation: condense(history, key_of(relation)) for relation, history in steps.items()}


def _definition(rel: Relation) -> str:
    columns = ", ".join(f"{quote(c)} {_TYPES[t]}{' NOT NULL' if c in rel.key else ''}"
                        for c, t in zip(rel.columns, rel.types))
    return f"{columns}, PRIMARY KEY ({', '.join(map(quote, rel.key))})"


def _columns(rel: Relation, prefix: str = "") -> str:
    return ", ".join(prefix + quote(c) for c in rel.columns)

