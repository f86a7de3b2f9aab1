"""A PostgreSQL source captured from the WAL (source_node.logical_capture, source_node.pgoutput).

Against the suite's real server (wal_level=logical), each test in a database of its own, writers
from outside over their own connections. What is checked: every committed transaction becomes one
notification, numbered in commit order, whatever killed or restarted in between (the node, the
stream, PostgreSQL itself), never twice; a read names the DSV of the state it saw; a server or
role that cannot decode is refused in one line with nothing installed; the retained-WAL bound
is said and acted on without losing a subscriber's notifications.
"""

from __future__ import annotations

import struct
import threading
import time

import psycopg
import pytest
from psycopg.types.string import TextLoader
from postgres_support import drop_slots, fresh_database
from test_postgres_source import CATALOG, INITIAL, replay, wait_for

from fedlab.checker.pg_server import PostgresServer
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import Modification, TransactionRequest
from fedlab.source_node import pgoutput
from fedlab.source_node.engines import open_store
from fedlab.source_node.logical_capture import Numbered, snapshot_dsv


def _dbname(dsn: str) -> str:
    return dsn.rsplit("dbname=", 1)[1]


@pytest.fixture
def dsn(postgres_dsn, request):
    name = "wal_" + request.node.name.lower()[:40].replace("[", "_").replace("]", "")
    yield fresh_database(postgres_dsn, name)
    with psycopg.connect(postgres_dsn, autocommit=True) as con:   # a slot left keeps the server's WAL
        drop_slots(con, name)


def logical(dsn, **kwargs):
    return open_store(CATALOG, "ds1", dsn, "postgres", INITIAL, capture="logical", **kwargs)


@pytest.fixture
def store(dsn):
    s = logical(dsn)
    yield s
    s.close()


def table_state(dsn) -> dict:
    with psycopg.connect(dsn) as con:
        con.adapters.register_loader("date", TextLoader)   # as the stores hold a DATE
        return {t: sorted(con.execute(f'SELECT * FROM "{t}"').fetchall()) for t in ("acct", "owner")}


def writers(dsn, count: int, each: int, start: int = 1000) -> None:
    """`count` applications committing `each` transactions at once: an insert and an update of a
    row they all touch (so that their commits queue on its lock)."""
    def write(k: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as con:
            for i in range(each):
                with con.transaction():
                    con.execute("INSERT INTO acct VALUES (%s, 'w', 1.0)", [start + 1000 * k + i])
                    con.execute("UPDATE acct SET balance = balance + 1 WHERE id = 2")
    threads = [threading.Thread(target=write, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def whole_log(store) -> list:
    notes = store.notifications_from(2)
    assert [n.dsv for n in notes] == list(range(2, store.dsv + 1)), "a DSV missing or twice"
    return notes


# ---- pure: the decoder and the DSV of a snapshot ----

def _text(values) -> bytes:
    out = struct.pack("!h", len(values))
    for v in values:
        out += b"n" if v is None else b"t" + struct.pack("!i", len(v)) + v.encode()
    return out


def test_pgoutput_messages_decode_as_the_protocol_documents():
    micros = 10 * 1_000_000
    assert pgoutput.decode(b"B" + struct.pack("!qqI", 500, micros, 77)) == pgoutput.Begin(500, 946_684_810.0, 77)
    relation = (b"R" + struct.pack("!I", 9) + b"public\0acct\0" + struct.pack("!bh", ord("f"), 2)
                + b"\x01id\0" + struct.pack("!Ii", 20, -1) + b"\x00owner\0" + struct.pack("!Ii", 1042, 6))
    assert pgoutput.decode(relation) == pgoutput.RelationInfo(9, "public", "acct", ("id", "owner"), (20, 1042))
    assert pgoutput.decode(b"I" + struct.pack("!I", 9) + b"N" + _text(["1", None])) == \
        pgoutput.RowChange("I", 9, None, ("1", None))
    update = b"U" + struct.pack("!I", 9) + b"O" + _text(["1", "ann"]) + b"N" + _text(["1", "bob"])
    assert pgoutput.decode(update) == pgoutput.RowChange("U", 9, ("1", "ann"), ("1", "bob"))
    assert pgoutput.decode(b"D" + struct.pack("!I", 9) + b"O" + _text(["1", "bob"])) == \
        pgoutput.RowChange("D", 9, ("1", "bob"), None)
    assert pgoutput.decode(b"M" + struct.pack("!bq", 1, 640) + b"fedlab\0" + struct.pack("!i", 3) + b"t-1") == \
        pgoutput.Message(True, 640, "fedlab", b"t-1")
    assert pgoutput.decode(b"C" + struct.pack("!bqqq", 0, 600, 648, micros)) == pgoutput.Commit(600, 648, 946_684_810.0)
    assert pgoutput.decode(b"T" + struct.pack("!ibII", 2, 0, 9, 10)) == pgoutput.Truncate((9, 10))
    with pytest.raises(ValueError, match="unknown message kind"):
        pgoutput.decode(b"Z")


def test_a_snapshot_is_named_by_the_prefix_of_the_commit_order_it_sees():
    commits = [Numbered(d, xid, commit_lsn=100 * d, end_lsn=100 * d + 8, brv={"r": d}) for d, xid in
               [(2, 700), (3, 702), (4, 701)]]
    before = (1, {"r": 1})
    assert snapshot_dsv("703:703:", 10_000, commits, before) == (4, {"r": 4})          # all finished
    assert snapshot_dsv("701:703:701", 10_000, commits, before) == (3, {"r": 3})       # 701 running
    assert snapshot_dsv("700:703:700,701,702", 10_000, commits, before) == before      # none yet
    assert snapshot_dsv("703:703:", 350, commits, before) == (3, {"r": 3})             # DSV 4 after the WAL read
    assert snapshot_dsv("702:703:702", 10_000, commits, before) is None                # 4 seen without 3
    assert snapshot_dsv("701:701:", 10_000, commits, before) == (2, {"r": 2})          # 702 began after it
    # The WAL's 32-bit xids in a snapshot of a later epoch
    epoch = 5 << 32
    assert snapshot_dsv(f"{epoch + 702}:{epoch + 703}:{epoch + 702}", 10_000, commits, before) is None
    assert snapshot_dsv(f"{epoch + 701}:{epoch + 701}:", 10_000, commits, before) == (2, {"r": 2})


# ---- against the server ----

def test_concurrent_writers_become_notifications_and_every_read_names_its_state(store, dsn):
    """Four applications commit 40 transactions each; snapshots and a sub-query batch read while
    they do. The notifications, replayed in DSV order from the first state, meet every old image
    and reach each read's rows at the DSV the read was given, and the tables at the end."""
    first = store.snapshot()
    reads = []
    done = threading.Event()

    def read():
        while not done.is_set():
            reads.append(store.snapshot())
    reader = threading.Thread(target=read)
    reader.start()
    writers(dsn, 4, 40)
    done.set()
    reader.join()
    wait_for(store, 161)
    notes = whole_log(store)
    assert store.dsv == 161 and store.brv == {"acct": 161, "owner": 1}
    assert all(n.txn_id.startswith("pg-") for n in notes)
    initial = {name: rows for name, (_, rows) in first[1].items()}
    assert len({dsv for dsv, _ in reads}) > 2, "the reads all saw one state"
    for dsv, relations in reads + [store.snapshot()]:
        state = replay(initial, [n for n in notes if n.dsv <= dsv])
        for name, (brv, rows) in relations.items():
            assert state.get(name, []) == sorted(map(tuple, rows)), f"DSV {dsv}: {name}"
            assert brv == max([1] + [c.brv for n in notes if n.dsv <= dsv for c in n.changes if c.relation == name])
    assert replay(initial, notes) == table_state(dsn)


def test_the_node_commits_with_its_ids_and_a_change_of_nothing_gets_a_dsv(store, dsn):
    """The node's own transactions carry their ids through the WAL (a transactional message); a
    modification to the same values writes no row, yet is a transaction with a DSV, as in the
    other stores; an invalid one is rejected and never appears."""
    noted = store.commit_many([
        TransactionRequest("t-1", inserts={"acct": [(7, "cy", 5.0)]}),
        TransactionRequest("t-2", modifies={"acct": [Modification((7, "cy", 5.0), (7, "cy", 5.0))]}),
        TransactionRequest("t-3", inserts={"acct": [(7, "dup", 1.0)]}),
        TransactionRequest("t-4", deletes={"acct": [(1, "ann", 10.0)]}, inserts={"owner": [("cy", "rome", "2021-03-04")]}),
    ])
    assert [n.dsv if not isinstance(n, ModelError) else "rejected" for n in noted] == [2, 3, "rejected", 4]
    assert [n.txn_id for n in whole_log(store)] == ["t-1", "t-2", "t-4"]
    assert noted[1].changes == ()
    assert {c.relation: (c.brv, c.deleted, c.inserted) for c in noted[3].changes} == {
        "acct": (3, ((1, "ann", 10.0),), ()), "owner": (2, (), (("cy", "rome", "2021-03-04"),))}


def test_a_restarted_node_numbers_the_slot_again_without_loss_or_double(dsn):
    """The node stops with notifications unacknowledged; applications commit while it is down;
    it opens again: the DSVs go on where the commit order puts them, the subscriber's outbox
    holds what it had not acknowledged, and after an acknowledgement and another restart nothing
    acknowledged comes back."""
    store = logical(dsn)
    writers(dsn, 2, 10)
    wait_for(store, 21)
    store.acknowledge(11)
    time.sleep(3)   # the checkpoint moves to 11
    store.close()
    writers(dsn, 2, 5, start=50_000)   # while the node is down
    store = logical(dsn)
    try:
        wait_for(store, 31)
        assert store.dsv == 31
        assert [n.dsv for n in store.unacknowledged()] == list(range(12, 32))
        notes = whole_log(store)
        assert replay({k: v for k, v in INITIAL.items()}, notes) == table_state(dsn)
        store.acknowledge(31)
        time.sleep(3)
    finally:
        store.close()
    store = logical(dsn)
    try:
        assert store.dsv == 31 and store.unacknowledged() == []
        with psycopg.connect(dsn) as con:
            (checkpoint,), = con.execute("SELECT dsv FROM fedlab.source").fetchall()
        assert checkpoint == 31
    finally:
        store.close()


def test_a_server_without_logical_wal_or_a_role_without_replication_is_refused_with_nothing_installed(dsn):
    with PostgresServer.start(wal_level="replica") as server:
        target = server.database("plain")
        with pytest.raises(ModelError) as refused:
            open_store(CATALOG, "ds1", target, "postgres", INITIAL, capture="logical")
        assert str(refused.value) == (f"source ds1: PostgreSQL at {target} has wal_level=replica; capture logical "
                                      f"needs wal_level=logical (postgresql.conf, then restart the server)")
        with psycopg.connect(target) as con:
            assert con.execute("SELECT to_regnamespace('fedlab'), to_regclass('acct')").fetchall() == [(None, None)]
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute("DROP ROLE IF EXISTS plain_writer")
        con.execute("CREATE ROLE plain_writer LOGIN")
        con.execute(f'GRANT ALL ON DATABASE "{_dbname(dsn)}" TO plain_writer')
        con.execute("GRANT ALL ON SCHEMA public TO plain_writer")
    as_writer = dsn.replace("user=fedlab", "user=plain_writer")
    with pytest.raises(ModelError) as refused:
        open_store(CATALOG, "ds1", as_writer, "postgres", INITIAL, capture="logical")
    assert str(refused.value) == (f"source ds1: role plain_writer at {as_writer} lacks REPLICATION; capture logical "
                                  f"needs it (ALTER ROLE plain_writer REPLICATION)")
    with psycopg.connect(dsn) as con:
        assert con.execute("SELECT to_regnamespace('fedlab'), to_regclass('acct')").fetchall() == [(None, None)]


def test_a_truncate_is_refused_and_a_capture_cannot_change_under_a_database(store, dsn):
    with psycopg.connect(dsn) as con:
        with pytest.raises(psycopg.errors.RaiseException, match="TRUNCATE of acct cannot be captured from the WAL"):
            con.execute("TRUNCATE acct")
    with pytest.raises(ModelError, match="was installed with capture logical, not triggers"):
        open_store(CATALOG, "ds1", dsn, "postgres", capture="triggers")
    store.close()   # one node per database: its slot has one reader
    again = open_store(CATALOG, "ds1", dsn, "postgres")   # as installed
    try:
        assert type(again).__name__ == "LogicalPostgresStore"
    finally:
        again.close()


def test_past_the_retained_wal_bound_the_source_says_so_and_the_lagging_subscriber_keeps_its_copies(dsn):
    """A subscriber that never acknowledges, a bound of one byte: the source says so (Health's
    warning), the slot moves on, and the subscriber's copies survive a restart, from the log."""
    store = logical(dsn, max_retained_wal=1)
    try:
        store.subscribe("slow")
        writers(dsn, 1, 30)
        deadline = time.monotonic() + 20
        while not store.capture_status()["warning"] and time.monotonic() < deadline:
            time.sleep(0.2)
        warning = store.capture_status()["warning"]
        assert "past the bound of 1 (max_retained_wal)" in warning and "subscriber" in warning, warning
        wait_for(store, 31)
        time.sleep(3)
        with psycopg.connect(dsn) as con:
            (checkpoint,), = con.execute("SELECT dsv FROM fedlab.source").fetchall()
        assert checkpoint > 1   # the slot went on without the acknowledgements
    finally:
        store.close()
    store = logical(dsn, max_retained_wal=1)
    try:
        assert [n.dsv for n in store.unacknowledged("slow")] == list(range(2, store.dsv + 1))
        assert "served from fedlab.log" in store.capture_status()["warning"]   # still: it has not caught up
        store.acknowledge(store.dsv, "slow")
        store.acknowledge(store.dsv)
        assert store.capture_status()["warning"] == ""
    finally:
        store.close()


@pytest.mark.parametrize("capture", ["logical", "triggers"])
def test_postgresql_killed_and_restarted_under_writers_loses_and_doubles_nothing(capture):
    """PostgreSQL itself stops at once (pg_ctl -m immediate: a crash) while applications write,
    and starts again; the node's stream (or, with triggers, its listener) opens again and numbers
    every commit the server kept exactly once, in commit order, and the node commits again."""
    with PostgresServer.start() as server:
        # Commits durable when they are seen, as a production server's are: the suite's servers
        # commit asynchronously, and a crash loses the last commits, which the trigger capture's
        # reader may have seen already (logical decoding reads flushed WAL only).
        with psycopg.connect(server.dsn, autocommit=True) as con:
            con.execute("ALTER SYSTEM SET synchronous_commit = on")
            con.execute("SELECT pg_reload_conf()")
        dsn = server.database("crash")
        store = open_store(CATALOG, "ds1", dsn, "postgres", INITIAL, capture=capture)
        try:
            stop = threading.Event()
            committed = []

            def write():
                i = 0
                while not stop.is_set():
                    try:
                        with psycopg.connect(dsn, autocommit=True) as con:
                            while not stop.is_set():
                                con.execute("INSERT INTO acct VALUES (%s, 'w', 1.0)", [10_000 + i])
                                committed.append(10_000 + i)
                                i += 1
                    except psycopg.OperationalError:
                        time.sleep(0.2)
            writer = threading.Thread(target=write)
            writer.start()
            time.sleep(1.5)
            server._run("pg_ctl", "-D", str(server.data), "-m", "immediate", "-w", "stop")
            time.sleep(1)
            server._run("pg_ctl", "-D", str(server.data), "-l", "server.log", "-w", "-t", "60", "-o",
                        server.options, "start")
            time.sleep(1.5)
            stop.set()
            writer.join()
            with psycopg.connect(dsn) as con:
                (kept,), = con.execute("SELECT count(*) FROM acct WHERE id >= 10000").fetchall()
            assert kept >= len(committed) * 0.5 and kept > 0
            wait_for(store, 1 + kept, timeout=60)
            assert store.dsv == 1 + kept
            # The first use of the node's connection since the crash finds it gone: that request is
            # refused with the server's reason, as any client's is, and the next one commits.
            request = TransactionRequest("after", inserts={"acct": [(5, "eve", 1.0)]})
            noted, = store.commit_many([request])
            if isinstance(noted, ModelError):
                assert "server closed the connection" in str(noted), noted
                noted, = store.commit_many([request])
            assert not isinstance(noted, ModelError) and noted.dsv == 2 + kept, noted
            notes = whole_log(store)
            assert replay(dict(INITIAL), notes) == table_state(dsn)
        finally:
            store.close()


def test_a_generated_column_is_refused_since_the_wal_stream_leaves_it_out(dsn):
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute('CREATE TABLE acct (id bigint PRIMARY KEY, owner text, balance double precision)')
        con.execute('CREATE TABLE owner (name text PRIMARY KEY, city text, '
                    'since date GENERATED ALWAYS AS (DATE \'2020-01-01\') STORED)')
    with pytest.raises(ModelError) as refused:
        open_store(CATALOG, "ds1", dsn, "postgres", capture="logical")
    assert str(refused.value) == (f"source ds1: column owner.since at {dsn} is generated, and PostgreSQL's logical "
                                  f"decoding leaves generated columns out (keep it with a trigger, or capture by "
                                  f"triggers)")
    with psycopg.connect(dsn) as con:
        assert con.execute("SELECT to_regnamespace('fedlab')").fetchall() == [(None,)]


def test_a_read_while_nothing_commits_does_not_wait_for_someone_else_to_flush_the_wal(store, dsn, postgres_dsn,
                                                                                     monkeypatch):
    """Another database's asynchronous commit moves the WAL past what the stream has passed, and
    then nothing commits. The read's mark must reach the stream by itself: PostgreSQL 15 leaves a
    non-transactional message unflushed, and logical decoding reads flushed WAL only (at the end of
    a CH load, reads of the idle sources waited about 10 s for that)."""
    monkeypatch.setattr("fedlab.source_node.logical_capture.STREAM_WAIT", 3.0)
    elsewhere = fresh_database(postgres_dsn, "wal_elsewhere")
    with psycopg.connect(elsewhere, autocommit=True) as con:
        con.execute("CREATE TABLE IF NOT EXISTS noise (n int)")
        for _ in range(3):
            con.execute("SET synchronous_commit = off")
            con.execute("INSERT INTO noise VALUES (1)")
            dsv, relations = store.snapshot()
            assert dsv == 1 and sorted(map(tuple, relations["acct"][1])) == table_state(dsn)["acct"]
