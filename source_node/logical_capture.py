"""A PostgreSQL source captured from the write-ahead log (`capture: logical`), not by triggers.

source_node.postgres_store captures with triggers and a row lock in every writer's transaction
(Vinh 2020). Here the writers' path carries nothing: the node reads the committed transactions
from a logical replication slot, as Debezium, Materialize and RisingWave do, and gives them DSVs
in the order of their commit records (LSN order). What `install` adds to the database:
- REPLICA IDENTITY FULL on every relation, so that an update's or a delete's old row is in the WAL
  (a notification carries old images), and a BEFORE TRUNCATE trigger that refuses a TRUNCATE:
  the WAL does not carry the rows a TRUNCATE removed, so it cannot be captured;
- publication `fedlab` of the relations, and the slot `fedlab_<database>` that decodes them with
  pgoutput (source_node.pgoutput);
- `fedlab.source(source, dsv, lsn, brv)`: the checkpoint, the DSV and BRVs of every transaction
  whose commit record ends at or before `lsn`; the slot is confirmed to `lsn`, so it keeps the
  WAL of every later transaction;
- `fedlab.log(dsv, end_lsn, notification)`: the source's own log, written by the node as it
  decodes (what `fedlab check` judges, what Resend serves from when memory no longer holds it);
- `fedlab.subscribers`, as with triggers.

Which client, and why: psycopg 3 has no replication protocol, and the slot functions
(`pg_logical_slot_peek_binary_changes`) always decode from the slot's confirmed position, so
every read would decode the whole unacknowledged backlog again. psycopg2's replication
connection streams pgoutput over the replication protocol: each commit is decoded once, and the
node confirms a flush position of its choosing.

Durability (nothing committed is lost or numbered twice). The checkpoint moves to the highest
DSV every subscriber has acknowledged durably (source_node.subscriber_outbox): the row first,
then the slot's confirmation. A node that restarts, or a stream that PostgreSQL's restart broke,
reads again from the slot's confirmed position and skips the transactions whose commit record
ends at or before the checkpoint (or, in a running node, before the last one it numbered): the
WAL's commit order gives each the same DSV again.

Retained WAL is bounded by `max_retained_wal` bytes: when the slot keeps more (a subscriber far
behind), the source says so in one line and in Health, and moves the checkpoint to everything
decoded: the lagging subscriber's notifications are then served from `fedlab.log` rather than the
slot, so they are not lost, but only while the log keeps them.

The DSV of a read (docs/postgres.md, "Why the lock stays"): a snapshot is not always a prefix of
the commit order, so `snapshot_dsv` names one only when it is, and the read is taken again
otherwise (a race of microseconds between two commits).
"""

from __future__ import annotations

import logging
import re
import select
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Iterable

import psycopg
from psycopg.types.json import Jsonb

from fedlab.fedmodel.catalog import Relation
from fedlab.fedmodel.errors import ModelError, first_line
from fedlab.fedmodel.transactions import (Notification, RelationChange, TransactionRequest, notification_from_dict,
                                          notification_to_dict)
from fedlab.source_node import pgoutput
from fedlab.source_node.durable_store import quote
from fedlab.source_node.postgres_store import (SUBSCRIBERS, PostgresStore, _definition,
                                               condensed_captures)
from fedlab.source_node.recent_changes import SharedRecentChanges
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER

log = logging.getLogger(__name__)
TXN_PREFIX = "fedlab"          # a transactional message carrying the node's own transaction id
MARK_PREFIX = "fedlab-mark"    # a message alone: the stream has passed the WAL up to it
STREAM_WAIT = 30.0             # seconds a read waits for the stream to reach its state
HELD_COMMITS = 2_000           # commits a read checks for visibility (older ones, seconds old, it sees)
RETAINED_CHECK = 2.0           # seconds between looks at the WAL the slot retains
BPCHAR = 1042                  # char(n): its WAL text is blank-padded, its ::text is not

INSTALL = """
CREATE SCHEMA fedlab;
CREATE TABLE fedlab.source (source text NOT NULL, dsv bigint NOT NULL, lsn pg_lsn, brv jsonb NOT NULL);
CREATE TABLE fedlab.log (dsv bigint PRIMARY KEY, end_lsn pg_lsn NOT NULL, notification jsonb NOT NULL);
CREATE FUNCTION fedlab.refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'fedlab: TRUNCATE of % cannot be captured from the WAL (it does not carry the rows); DELETE them',
    TG_TABLE_NAME;
END $$;
"""
CAPTURE = """
ALTER TABLE {t} REPLICA IDENTITY FULL;
CREATE TRIGGER fedlab_truncate BEFORE TRUNCATE ON {t} FOR EACH STATEMENT EXECUTE FUNCTION fedlab.refuse_truncate();
"""


@dataclass
class WalTransaction:
    """One committed transaction as the slot delivered it: its rows in statement order."""
    xid: int
    commit_lsn: int = 0
    end_lsn: int = 0
    commit_time: float = 0.0
    txn_id: str | None = None
    rows: list[tuple[str, str, tuple]] = field(default_factory=list)   # (table, 'D' or 'I', text values)


class Assembler:
    """pgoutput messages in, committed transactions out (`feed` returns one at its Commit); also
    the highest LSN the stream has passed (`passed`): a commit's end, or a mark."""

    def __init__(self):
        self.relations: dict[int, pgoutput.RelationInfo] = {}
        self.named: dict[str, pgoutput.RelationInfo] = {}
        self.passed = 0
        self._open: WalTransaction | None = None

    def feed(self, message) -> WalTransaction | None:
        if isinstance(message, pgoutput.Begin):
            self._open = WalTransaction(message.xid)
        elif isinstance(message, pgoutput.RelationInfo):
            self.relations[message.relid] = self.named[message.name] = message
        elif isinstance(message, pgoutput.RowChange):
            name = self.relations[message.relid].name
            if message.old is not None:
                self._open.rows.append((name, "D", message.old))
            if message.new is not None:
                new = message.new
                if message.old is not None:   # a TOASTed value the update left: its old one
                    new = tuple(o if n is pgoutput.UNCHANGED else n for o, n in zip(message.old, new))
                self._open.rows.append((name, "I", new))
        elif isinstance(message, pgoutput.Message):
            if message.transactional and message.prefix == TXN_PREFIX and self._open is not None:
                self._open.txn_id = message.content.decode()
            elif not message.transactional:
                self.passed = max(self.passed, message.lsn)
        elif isinstance(message, pgoutput.Truncate):
            raise ModelError("a TRUNCATE reached the WAL stream; its rows cannot be captured")
        elif isinstance(message, pgoutput.Commit):
            done, self._open = self._open, None
            done.commit_lsn, done.end_lsn, done.commit_time = message.commit_lsn, message.end_lsn, message.commit_time
            self.passed = max(self.passed, message.end_lsn)
            return done
        return None


@dataclass(frozen=True)
class Numbered:
    """A decoded commit and the versions it was given."""
    dsv: int
    xid: int
    commit_lsn: int
    end_lsn: int
    brv: dict


def snapshot_dsv(snapshot: str, wal_end: int, commits: Iterable[Numbered],
                 before: tuple[int, dict]) -> tuple[int, dict] | None:
    """The (DSV, BRVs) of the state a snapshot (`pg_current_snapshot()` text, `xmin:xmax:xip,...`)
    sees, with `wal_end` the WAL insert position read after it and `commits` every commit the
    stream numbered with a commit record before `wal_end`, in DSV order (`before`: the versions
    before the first of them). None when what it sees is not a prefix of the commit order: a
    later commit visible and an earlier one not (the read must be taken again)."""
    low, high, running = snapshot.split(":")
    xmin, xmax = int(low), int(high)
    in_progress = {int(x) for x in running.split(",") if x}

    def visible(xid: int) -> bool:
        # The WAL's 32-bit xid as the full xid nearest xmax: one begun after the snapshot (at or
        # past xmax) can commit before the WAL position is read, and must stay invisible.
        full = xmax + (xid - xmax + (1 << 31)) % (1 << 32) - (1 << 31)
        return full < xmin or (full < xmax and full not in in_progress)

    dsv, brv = before
    missing = False
    for c in commits:
        if c.commit_lsn < wal_end and visible(c.xid):
            if missing:
                return None
            dsv, brv = c.dsv, c.brv
        else:
            missing = True
    return dsv, brv


class LogicalPostgresStore(PostgresStore):
    """PostgresStore's contract with capture from the WAL (see the module docstring)."""

    def __init__(self, *args, max_retained_wal: int | None = None, **kwargs):
        self.max_retained_wal = max_retained_wal
        self._replication = None
        self._stream_thread: threading.Thread | None = None
        super().__init__(*args, **kwargs)

    # ---- installing ----

    def _install(self, initial: dict[str, list[tuple]]) -> None:
        """Refuses a server or role that cannot decode (one line naming the setting), then
        creates what is missing; a slot that cannot be made takes the rest back with it."""
        (wal_level,), = self._con.execute("SHOW wal_level").fetchall()
        if wal_level != "logical":
            raise ModelError(f"source {self.source}: PostgreSQL at {self.path} has wal_level={wal_level}; "
                             f"capture logical needs wal_level=logical (postgresql.conf, then restart the server)")
        (user, allowed, database), = self._con.execute(
            "SELECT current_user, rolreplication OR rolsuper, current_database() FROM pg_roles "
            "WHERE rolname = current_user").fetchall()
        if not allowed:
            raise ModelError(f"source {self.source}: role {user} at {self.path} lacks REPLICATION; capture logical "
                             f"needs it (ALTER ROLE {user} REPLICATION)")
        self._slot = re.sub(r"[^a-z0-9_]", "_", f"fedlab_{database}".lower())[:63]
        generated = self._con.execute(
            "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "WHERE a.attrelid = ANY(%s::regclass[]) AND a.attgenerated <> '' ORDER BY 1, 2",
            [[quote(r.name) for r in self._relations if self._exists(r)]]).fetchall()
        if generated:
            table, column = generated[0]
            raise ModelError(f"source {self.source}: column {table}.{column} at {self.path} is generated, and "
                             f"PostgreSQL's logical decoding leaves generated columns out (keep it with a trigger, "
                             f"or capture by triggers)")
        (installed,), = self._con.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'fedlab'").fetchall()
        if installed:
            self._check_installed()
        else:
            (free,), = self._con.execute(
                "SELECT current_setting('max_replication_slots')::int - count(*) FROM pg_replication_slots").fetchall()
            if free < 1:
                raise ModelError(f"source {self.source}: PostgreSQL at {self.path} has no free replication slot "
                                 f"(max_replication_slots)")
            created = self._create(initial)
            try:   # after the publication: a slot decodes with the catalog as of its own start
                self._con.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", [self._slot])
            except psycopg.Error:
                with self._con.transaction():
                    self._con.execute("DROP PUBLICATION fedlab; DROP SCHEMA fedlab CASCADE")
                    for rel in created:
                        self._con.execute(f"DROP TABLE {quote(rel.name)}")
                raise
        # Every commit up to here is the state at DSV 1 (the install's own among them).
        self._con.execute("UPDATE fedlab.source SET lsn = pg_current_wal_insert_lsn() WHERE lsn IS NULL")
        (lsn,), = self._con.execute("SELECT lsn::text FROM fedlab.source").fetchall()
        self._con.execute("SELECT pg_replication_slot_advance(%s, %s) FROM pg_replication_slots "
                          "WHERE slot_name = %s AND confirmed_flush_lsn < %s::pg_lsn AND NOT active",
                          [self._slot, lsn, self._slot, lsn])

    def _exists(self, rel: Relation) -> bool:
        (there,), = self._con.execute("SELECT to_regclass(%s) IS NOT NULL", [quote(rel.name)]).fetchall()
        return there

    def _check_installed(self) -> None:
        (owner,), = self._con.execute("SELECT source FROM fedlab.source").fetchall()
        if owner != self.source:
            raise ModelError(f"{self.path} holds source {owner!r}, not {self.source!r}")
        (triggers,), = self._con.execute("SELECT to_regclass('fedlab.changes') IS NOT NULL").fetchall()
        if triggers:
            raise ModelError(f"source {self.source}: {self.path} was installed with capture triggers, not logical")
        (slot,), = self._con.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s",
                                     [self._slot]).fetchall()
        if not slot:
            raise ModelError(f"source {self.source}: replication slot {self._slot} at {self.path} is gone (dropped, "
                             f"or invalidated by max_slot_wal_keep_size); the source's changes since are lost")

    def _create(self, initial: dict[str, list[tuple]]) -> list[Relation]:
        """One transaction: the relations that do not exist (returned), the schema, the publication."""
        with self._con.transaction():
            self._con.execute("SELECT pg_advisory_xact_lock(hashtext('fedlab install'))")
            created = []
            for rel in self._relations:
                if not self._exists(rel):
                    self._con.execute(f"CREATE TABLE {quote(rel.name)} ({_definition(rel)})")
                    created.append(rel)
            self._load(initial)
            self._con.execute(INSTALL)
            self._con.execute("INSERT INTO fedlab.source VALUES (%s, 1, NULL, %s)",
                              [self.source, Jsonb({r.name: 1 for r in self._relations})])
            self._con.execute(SUBSCRIBERS)
            self._con.execute("INSERT INTO fedlab.subscribers VALUES (%s, NULL, 1)", [DEFAULT_SUBSCRIBER])
            for rel in self._relations:
                self._con.execute(CAPTURE.format(t=quote(rel.name)))
                self._con.execute(f"ANALYZE {quote(rel.name)}")
            self._con.execute(f"CREATE PUBLICATION fedlab FOR TABLE {', '.join(quote(r.name) for r in self._relations)}")
        return created

    # ---- opening: the checkpoint, then the slot from it ----

    def _open(self) -> None:
        (dsv, lsn, brv), = self._con.execute("SELECT dsv, lsn - '0/0', brv FROM fedlab.source").fetchall()
        brv = {r.name: brv[r.name] for r in self._relations}
        subscribers = self._con.execute("SELECT name, relations, acknowledged FROM fedlab.subscribers").fetchall()
        self._dsv, self._brv = dsv, dict(brv)
        self._numbered, self._numbered_brv, self._numbered_lsn = dsv, dict(brv), int(lsn)
        self._checkpoint = dsv
        self._forced = False                     # the bound is past: the checkpoint goes to all decoded
        self._bound_note = ""                    # what the bound last said
        self._stopped = ""                       # why capture stopped, when a commit could not be read
        self._retained_wal = 0
        self._held: deque[Numbered] = deque()    # the commits a read checks for visibility
        self._before = (dsv, dict(brv))          # the versions before the first of them
        self._progress = threading.Condition(self._state)
        self._passed = 0
        self.recent = SharedRecentChanges(self._relations, dsv, brv, [])
        oldest = min((acknowledged + 1 for _, _, acknowledged in subscribers), default=dsv + 1)
        # A subscriber behind the checkpoint (the retained-WAL bound moved it) is served from the log.
        self._hold(subscribers, self._read_log(oldest, dsv) if oldest <= dsv else [])
        behind = sorted(name for name, _, acknowledged in subscribers if acknowledged < dsv)
        if behind:
            self._bound_note = (f"source {self.source}: subscriber(s) {', '.join(behind)} behind the slot, which the "
                                f"retained-WAL bound moved to DSV {dsv}: served from fedlab.log, not the WAL")
        self._assembler = Assembler()
        self._layouts: dict[str, tuple[pgoutput.RelationInfo, list]] = {}
        import psycopg2

        try:
            self._replication = self._start_stream()
            self._read_backlog()
        except (psycopg2.OperationalError, psycopg.OperationalError) as err:   # the server went: the thread reads on
            log.warning("source %s: WAL stream: %s; opening it again", self.source, first_line(err))
            self._drop_stream()
        except psycopg2.Error as err:
            raise ModelError(f"source {self.source}: replication from slot {self._slot} at {self.path}: "
                             f"{first_line(err)}") from None
        self._stream_thread = threading.Thread(target=self._stream, name=f"wal-{self.source}", daemon=True)
        self._stream_thread.start()

    def _read_backlog(self) -> None:
        """Numbers what the slot kept since the checkpoint, up to the server's WAL now, so that the
        node opens with its DSV and outbox; past STREAM_WAIT the stream thread goes on with it."""
        (wal_end,), = self._con.execute("SELECT pg_current_wal_insert_lsn() - '0/0'").fetchall()
        self._flushed_mark()
        deadline = time.monotonic() + STREAM_WAIT
        while self._passed < int(wal_end):
            if time.monotonic() > deadline:
                log.warning("source %s: still reading the slot's backlog after %.0f s (DSV %d so far); going on "
                            "in the background", self.source, STREAM_WAIT, self._numbered)
                return
            self._pump(1.0)

    def _start_stream(self):
        """The slot's stream from its confirmed position. A slot still active waits: the
        walsender of a node just killed takes a moment to notice its client is gone."""
        import psycopg2
        import psycopg2.extras

        deadline = time.monotonic() + STREAM_WAIT
        while True:
            con = psycopg2.connect(self.path, connection_factory=psycopg2.extras.LogicalReplicationConnection)
            try:
                cur = con.cursor()
                cur.start_replication(slot_name=self._slot, decode=False,
                                      options={"proto_version": "1", "publication_names": "fedlab", "messages": "true"})
                return cur
            except psycopg2.errors.ObjectInUse:
                con.close()
                if time.monotonic() > deadline:
                    raise
                self._stop.wait(0.2)

    # ---- the stream ----

    def _stream(self) -> None:
        """Reads the slot, moves the checkpoint and watches the retained WAL until closed; a
        broken stream (PostgreSQL restarted) is opened again from the slot's confirmed position."""
        import psycopg2

        checked = float("-inf")
        while not self._stop.is_set():
            try:
                self._reconnect_writer()
                if self._replication is None:
                    self._assembler = Assembler()
                    self._replication = self._start_stream()
                    log.warning("source %s: WAL stream open again", self.source)
                self._pump(0.5)
                if time.monotonic() - checked >= RETAINED_CHECK:
                    checked = time.monotonic()
                    self._watch_retained()
                self._advance()
            except (psycopg2.Error, psycopg.Error) as err:
                if self._stop.is_set():
                    return
                log.warning("source %s: WAL stream: %s; opening it again", self.source, first_line(err))
                self._drop_stream()
                self._stop.wait(1.0)
            except Exception as err:   # not the connection: reading on would fail the same way
                with self._state:
                    self._stopped = f"source {self.source}: capture stopped: {type(err).__name__}: {first_line(err)}"
                log.exception(self._stopped)
                return

    def _pump(self, timeout: float) -> None:
        """Reads what the slot has sent (waiting up to `timeout` for the first), and takes it."""
        messages = []
        while len(messages) < 5000:
            message = self._replication.read_message()
            if message is None:
                if messages:
                    break
                ready, _, _ = select.select([self._replication], [], [], timeout)
                if not ready:
                    break
                continue
            decoded = pgoutput.decode(message.payload)
            if decoded is not None:
                messages.append(decoded)
        committed = [t for t in map(self._assembler.feed, messages) if t is not None]
        if committed:
            self._take(committed)
        with self._progress:
            self._passed = max(self._passed, self._assembler.passed)
            self._progress.notify_all()

    def _take(self, committed: list[WalTransaction]) -> None:
        """Numbers the transactions not numbered yet, logs them, then hands them to the outbox. The
        numbering holds only once the log has them: a stream broken before reads them again."""
        numbered, notes = [], []
        dsv, brv, end = self._numbered, dict(self._numbered_brv), self._numbered_lsn
        for t in committed:
            if t.end_lsn <= end:   # numbered before the stream was opened again
                continue
            dsv += 1
            note = self._notification(t, dsv, brv)
            brv.update({c.relation: c.brv for c in note.changes})
            end = t.end_lsn
            numbered.append(Numbered(dsv, t.xid, t.commit_lsn, t.end_lsn, dict(brv)))
            notes.append(note)
        if not notes:
            return
        with self._writer, self._con.transaction(), self._con.cursor() as cur:
            cur.executemany("INSERT INTO fedlab.log VALUES (%s, %s::pg_lsn, %s) ON CONFLICT (dsv) DO NOTHING",
                            [(n.dsv, _lsn_text(c.end_lsn), Jsonb(notification_to_dict(n)))
                             for n, c in zip(notes, numbered)])
        self._numbered, self._numbered_brv, self._numbered_lsn = dsv, brv, end
        with self._state:
            for note, entry in zip(notes, numbered):
                self._dsv = note.dsv
                self._brv = entry.brv
                self.recent.record(note)
                self._held.append(entry)
            while len(self._held) > HELD_COMMITS:
                gone = self._held.popleft()
                self._before = (gone.dsv, gone.brv)
            aged = self._committed(notes, self.log_retention)
        self._prune_after(notes[-1].dsv, aged)
        for callback in self._watchers:
            callback()

    def _notification(self, t: WalTransaction, dsv: int, brv: dict[str, int]) -> Notification:
        """A decoded transaction's notification, numbered `dsv`: its rows as the catalog types
        them, condensed per key, with the BRVs that follow `brv`."""
        captured = []
        for table, action, values in t.rows:
            rel = self._relation(table)
            captured.append((rel.name, action, self._typed(rel, table, values)))
        nets = condensed_captures(captured, lambda name: self.catalog.relation(name).key_of)
        changes = tuple(RelationChange(name, brv[name] + 1, net.inserted, net.deleted, net.modified)
                        for name, net in sorted(nets.items()))
        return Notification(self.source, dsv, t.txn_id or f"pg-{t.xid}", changes, t.commit_time)

    def _typed(self, rel: Relation, table: str, values: tuple) -> tuple:
        """A row of WAL text (PostgreSQL's output of each column) as the stores hold it."""
        row = []
        for at, kind, padded in self._layout(rel, table):
            text = values[at]
            row.append(None if text is None else _value(kind, text.rstrip(" ") if padded else text))
        return tuple(row)

    def _layout(self, rel: Relation, table: str) -> list[tuple[int, str, bool]]:
        """For each catalog column of `rel`: its place in the WAL's rows, its catalog type, and
        whether its WAL text is blank-padded (char(n)); worked out once per Relation message,
        since every row of the stream goes through it."""
        info = self._assembler.named[table]
        known = self._layouts.get(table)
        if known is None or known[0] is not info:
            place = {c.lower(): at for at, c in enumerate(info.columns)}
            known = self._layouts[table] = (info, [(place[c.lower()], kind, info.types[place[c.lower()]] == BPCHAR)
                                                   for c, kind in zip(rel.columns, rel.types)])
        return known[1]

    def _drop_stream(self) -> None:
        if self._replication is not None:
            try:
                self._replication.connection.close()
            except Exception:   # already broken: nothing to close
                pass
        self._replication = None

    # ---- the checkpoint and the retained WAL ----

    def _advance(self) -> None:
        """Moves the checkpoint (row, then slot) to the highest DSV every subscriber has
        acknowledged, or past the bound's to everything decoded and logged."""
        with self._state:
            target = self._dsv if self._forced else self._subscriptions.retained_from(self._dsv) - 1
            entry = None
            for c in self._held:
                if c.dsv > target:
                    break
                entry = c
            if entry is None or entry.dsv <= self._checkpoint:
                return
        with self._writer:
            self._con.execute("UPDATE fedlab.source SET dsv = %s, lsn = %s::pg_lsn, brv = %s",
                              [entry.dsv, _lsn_text(entry.end_lsn), Jsonb(entry.brv)])
        self._replication.send_feedback(flush_lsn=entry.end_lsn, reply=True)
        with self._state:
            self._checkpoint = entry.dsv
            self._forced = False

    def _watch_retained(self) -> None:
        """The WAL the slot keeps; past `max_retained_wal`, one line, and the checkpoint moves."""
        with self._writer:
            rows = self._con.execute("SELECT pg_current_wal_lsn() - restart_lsn FROM pg_replication_slots "
                                     "WHERE slot_name = %s", [self._slot]).fetchall()
        retained = int(rows[0][0] or 0) if rows else 0
        with self._state:
            self._retained_wal = retained
            if self.max_retained_wal is None or retained <= self.max_retained_wal or self._forced:
                return
            behind = sorted((s.acknowledged, s.name) for s in self._subscriptions
                            if s.acknowledged < self._dsv)
            who = f"subscriber {behind[0][1]} has acknowledged DSV {behind[0][0]} of {self._dsv}" if behind else \
                "no subscriber is behind (a long transaction holds it)"
            self._forced = True
            self._bound_note = (f"source {self.source}: slot {self._slot} retains {retained:,} bytes of WAL, past the "
                            f"bound of {self.max_retained_wal:,} (max_retained_wal); {who}: the slot moves on to "
                            f"DSV {self._dsv}, and what a subscriber lacks is served from fedlab.log, not the WAL")
        log.warning(self._bound_note)

    def capture_status(self) -> dict:
        """For Health: the WAL the slot retains, and (`warning`, "": none) why capture stopped, or
        the line the bound last gave while it acts or some subscriber lacks what only the log holds."""
        with self._state:
            lagging = any(s.acknowledged < self._checkpoint for s in self._subscriptions)
            warning = self._stopped or (self._bound_note if self._forced or lagging else "")
            return {"retained_wal": self._retained_wal, "warning": warning}

    # ---- the node's own transactions ----

    def _mark(self, cur, request: TransactionRequest) -> None:
        """The transaction's id travels in the WAL, as a transactional message (which also gives
        a transaction that changes nothing a commit the stream sees, and so a DSV)."""
        cur.execute("SELECT pg_logical_emit_message(true, %s, %s)", [TXN_PREFIX, request.txn_id])

    def _notifications_of(self, xids: list[str]) -> dict[str, Notification]:
        wanted = {xid: int(xid) & 0xFFFFFFFF for xid in xids}
        with self._progress:
            def found():
                by_xid = {c.xid: c.dsv for c in reversed(self._held) if c.xid in wanted.values()}
                return by_xid if len(by_xid) == len(set(wanted.values())) else None
            if not self._progress.wait_for(found, STREAM_WAIT):
                raise ModelError(f"source {self.source}: the WAL stream did not bring the node's commits "
                                 f"in {STREAM_WAIT:.0f} s")
            dsv_of = found()
        notes = {n.dsv: n for n in self.notifications_from(min(dsv_of.values()), max(dsv_of.values()))}
        return {xid: notes[dsv_of[small]] for xid, small in wanted.items()}

    # ---- reading at one state ----

    @contextmanager
    def _at_one_state(self):
        """Like PostgresStore's, with the versions from the stream (`snapshot_dsv`): the read
        waits until the stream has passed the WAL its snapshot could see, and is taken again when
        what it sees is not a prefix of the commit order."""
        for _ in range(100):
            with self._reading() as cur:
                (snapshot, wal_end), = cur.execute(
                    "SELECT pg_current_snapshot()::text, pg_current_wal_insert_lsn() - '0/0'").fetchall()
                wal_end = int(wal_end)
                with self._state:
                    behind = self._passed < wal_end
                if behind:
                    self._flushed_mark()
                with self._progress:
                    if not self._progress.wait_for(lambda: self._passed >= wal_end, STREAM_WAIT):
                        raise ModelError(f"source {self.source}: the WAL stream did not reach the read's state "
                                         f"in {STREAM_WAIT:.0f} s")
                    versions = snapshot_dsv(snapshot, wal_end, self._held, self._before)
                if versions is not None:
                    dsv, brv = versions
                    yield cur, dsv, dict(brv)
                    return
        raise ModelError(f"source {self.source}: no read saw a prefix of the commit order in 100 tries")

    def _flushed_mark(self) -> None:
        """A mark after the WAL written so far, which the stream reaches even when nothing else
        commits. PostgreSQL 15 leaves a non-transactional message in the WAL buffers until
        something flushes them (16 gave pg_logical_emit_message a flush argument), and logical
        decoding reads flushed WAL only: at the end of a CH load, reads of the idle sources waited
        about 10 s for that. So the statement also takes a transaction id, and its commit flushes
        the WAL (or the WAL writer does, within wal_writer_delay, when commits are asynchronous);
        pgoutput sends nothing of that transaction, which changed no published table."""
        with self._writer:
            self._con.execute("SELECT pg_logical_emit_message(false, %s, ''), pg_current_xact_id()", [MARK_PREFIX])

    # ---- the log ----

    def _read_log(self, start: int, through: int | None) -> list[Notification]:
        bound, params = ("AND dsv <= %s", [start, through]) if through is not None else ("", [start])
        rows = self._reader().execute(f"SELECT notification FROM fedlab.log WHERE dsv >= %s {bound} ORDER BY dsv",
                                      params).fetchall()
        return [notification_from_dict(doc) for doc, in rows]

    def _prune(self, through: int) -> None:
        with self._writer:
            self._con.execute("DELETE FROM fedlab.log WHERE dsv <= %s", [through])

    _trim_log = _prune

    def oldest_available(self) -> int:
        (oldest,), = self._reader().execute("SELECT min(dsv) FROM fedlab.log").fetchall()
        return oldest if oldest is not None else self.dsv + 1

    def close(self) -> None:
        self._stop.set()
        if self._stream_thread is not None:
            self._stream_thread.join(timeout=10)
        self._drop_stream()
        super().close()


def _value(kind: str, text: str):
    """PostgreSQL's text output of a value as the catalog's type holds it."""
    if kind == "BIGINT":
        return int(Decimal(text))
    if kind == "DOUBLE":
        return float(text)
    if kind == "BOOLEAN":
        return text == "t"
    if kind == "DATE":
        return text[:10]
    return text


def _lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"
