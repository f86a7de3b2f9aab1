"""A source that is a PostgreSQL database written with plain SQL (source_node.postgres_store).

Every test runs against the real server the suite shares (tests/postgres_support.py), each in a
database of its own. What is checked: every committed transaction, whoever wrote it and however,
becomes one notification with the next DSV in commit order; what rolls back never appears; the
notifications replayed in DSV order from the first state give every later state of the tables.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import threading

import psycopg
import pytest
from postgres_support import fresh_database

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.subquery import Subquery, SubqueryRelation
from fedlab.fedmodel.transactions import Modification, TransactionRequest
from fedlab.source_node.engines import open_store
from fedlab.warehouse.settings import WarehouseSettings

CATALOG = Catalog.from_dict({"sources": {
    "ds1": {"acct": {"columns": ["id", "owner", "balance"], "types": ["BIGINT", "VARCHAR", "DOUBLE"], "key": ["id"]},
            "owner": {"columns": ["name", "city", "since"], "types": ["VARCHAR", "VARCHAR", "DATE"], "key": ["name"]}}}})
INITIAL = {"acct": [(1, "ann", 10.0), (2, "bob", 20.0)], "owner": [("ann", "oslo", "2020-01-02")]}


@pytest.fixture
def dsn(postgres_dsn, request):
    return fresh_database(postgres_dsn, "src_" + request.node.name.lower()[:40].replace("[", "_").replace("]", ""))


@pytest.fixture
def store(dsn):
    s = open_store(CATALOG, "ds1", dsn, "postgres", INITIAL)
    yield s
    s.close()


def rows(dsn, table):
    with psycopg.connect(dsn) as con:
        return sorted(con.execute(f'SELECT * FROM "{table}"').fetchall())


def replay(initial: dict, notes) -> dict:
    """The tables after `notes`, applied in DSV order to `initial`, checking every removed image."""
    state = {r: {row[0]: tuple(row) for row in rows_} for r, rows_ in initial.items()}
    for n in notes:
        for c in n.changes:
            table = state.setdefault(c.relation, {})
            for row in c.removed:
                assert table.pop(row[0]) == tuple(row), f"DSV {n.dsv}: {c.relation} did not hold {row}"
            for row in c.added:
                assert row[0] not in table, f"DSV {n.dsv}: {c.relation} already held key {row[0]}"
                table[row[0]] = tuple(row)
    return {r: sorted(t.values()) for r, t in state.items()}


def wait_for(store, dsv, timeout=10.0):
    import time

    deadline = time.monotonic() + timeout
    while store.dsv < dsv and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store.dsv >= dsv


def test_plain_sql_transactions_become_notifications_in_commit_order(store, dsn):
    assert store.dsv == 1 and store.brv == {"acct": 1, "owner": 1}
    with psycopg.connect(dsn) as con:   # one transaction, three statements, one row touched twice
        con.execute("INSERT INTO acct VALUES (3, 'cid', 5)")
        con.execute("UPDATE acct SET balance = balance + 1 WHERE id IN (1, 3)")
        con.execute("DELETE FROM acct WHERE id = 2")
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute("UPDATE owner SET city = 'rome'")
    wait_for(store, 3)
    first, second = store.notifications_from(2)
    assert (first.dsv, second.dsv) == (2, 3)
    acct = first.change("acct")
    assert acct.brv == 2 and acct.inserted == ((3, "cid", 6.0),) and acct.deleted == ((2, "bob", 20.0),)
    assert [(m.old, m.new) for m in acct.modified] == [((1, "ann", 10.0), (1, "ann", 11.0))]
    assert first.change("owner") is None and first.txn_id.startswith("pg-")
    assert second.change("owner").modified[0].new == ("ann", "rome", "2020-01-02")   # a DATE as its ISO string
    assert store.brv == {"acct": 2, "owner": 2}
    assert [n.dsv for n in store.unacknowledged()] == [2, 3]


def test_a_rolled_back_or_killed_transaction_never_appears(store, dsn):
    with psycopg.connect(dsn) as con:
        con.execute("INSERT INTO acct VALUES (7, 'x', 1)")
        con.rollback()
    victim = psycopg.connect(dsn)
    victim.execute("INSERT INTO acct VALUES (8, 'y', 1)")   # open, uncommitted
    (pid,), = victim.execute("SELECT pg_backend_pid()").fetchall()
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute("SELECT pg_terminate_backend(%s)", [pid])
        con.execute("INSERT INTO acct VALUES (9, 'z', 1)")
    victim.close()
    wait_for(store, 2)
    notes = store.notifications_from(2)
    assert [(n.dsv, n.change("acct").inserted) for n in notes] == [(2, ((9, "z", 1.0),))]   # no gap, no 7 or 8
    assert rows(dsn, "acct") == [(1, "ann", 10.0), (2, "bob", 20.0), (9, "z", 1.0)]


def test_concurrent_writers_get_dsvs_in_commit_order(store, dsn):
    """Four clients move money between accounts as fast as they can, each transaction reading and
    writing rows others write too; replaying the notifications in DSV order must meet every old
    image where it was and end at the tables' state: only a DSV order that is the commit order can."""
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute("INSERT INTO acct SELECT g, 'o' || g, 100 FROM generate_series(3, 12) g")
    wait_for(store, 2)
    start_dsv, start = store.dsv, {"acct": rows(dsn, "acct"), "owner": rows(dsn, "owner")}

    def client(seed):
        rng = random.Random(seed)
        with psycopg.connect(dsn) as con:
            for _ in range(40):
                a, b = rng.sample(range(1, 13), 2)
                try:
                    con.execute("UPDATE acct SET balance = balance - 1 WHERE id = %s", [a])
                    con.execute("UPDATE acct SET balance = balance + 1 WHERE id = %s", [b])
                    if rng.random() < 0.2:
                        con.execute("DELETE FROM acct WHERE id = %s", [a])
                        con.execute("INSERT INTO acct VALUES (%s, 'again', 0) ON CONFLICT DO NOTHING", [a])
                    con.commit()
                except psycopg.errors.DeadlockDetected:
                    con.rollback()

    threads = [threading.Thread(target=client, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with psycopg.connect(dsn) as con:
        (final_dsv,), = con.execute("SELECT dsv FROM fedlab.source").fetchall()
    wait_for(store, final_dsv)
    notes = store.notifications_from(start_dsv + 1)
    assert [n.dsv for n in notes] == list(range(start_dsv + 1, final_dsv + 1))   # every DSV, once, no gap
    assert len(notes) > 100
    assert replay(start, notes) == {"acct": rows(dsn, "acct"), "owner": rows(dsn, "owner")}


def test_psql_writes_reach_the_outbox(store, dsn):
    psql = shutil.which("psql")
    assert psql, "psql is part of the PostgreSQL client the tests need"
    done = subprocess.run([psql, dsn, "-v", "ON_ERROR_STOP=1", "-c", "INSERT INTO acct VALUES (42, 'psql', 1.5)"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    wait_for(store, 2)
    assert store.notifications_from(2)[0].change("acct").inserted == ((42, "psql", 1.5),)


def test_the_node_commits_through_the_same_triggers_and_rejects_invalid_transactions(store, dsn):
    ok, bad = store.commit_many([TransactionRequest("t1", inserts={"acct": [(5, "eve", 1.0)]},
                                                    deletes={"acct": [(2,)]}),
                                 TransactionRequest("t2", deletes={"acct": [(99,)]})])
    assert (ok.dsv, ok.txn_id) == (2, "t1") and ok.change("acct").deleted == ((2, "bob", 20.0),)
    assert isinstance(bad, ModelError) and "99" in str(bad)
    assert rows(dsn, "acct") == [(1, "ann", 10.0), (5, "eve", 1.0)]
    assert store.dsv == 2
    # A modification to the values the row has changes nothing, and is a transaction all the same.
    same = store.commit(TransactionRequest("t3", modifies={"acct": [Modification((1,), (1, "ann", 10.0))]}))
    assert (same.dsv, same.txn_id, same.changes, store.dsv) == (3, "t3", (), 3)


def test_a_member_the_database_refuses_is_rolled_back_alone(store, dsn):
    """A statement the database refuses (here a CHECK an application added, which the catalog
    does not know) fails in the write pipeline: that transaction is rolled back and rejected with
    the database's reason, and the group goes on."""
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute("ALTER TABLE acct ADD CHECK (balance >= 0)")
    first, refused, last = store.commit_many([TransactionRequest("t1", inserts={"acct": [(5, "eve", 1.0)]}),
                                              TransactionRequest("t2", inserts={"acct": [(6, "fay", -1.0)]},
                                                                 deletes={"acct": [(1,)]}),
                                              TransactionRequest("t3", deletes={"acct": [(2,)]})])
    assert isinstance(refused, ModelError) and "t2" in str(refused) and "check constraint" in str(refused)
    assert (first.dsv, last.dsv, store.dsv) == (2, 3, 3)
    assert rows(dsn, "acct") == [(1, "ann", 10.0), (5, "eve", 1.0)]


def test_random_groups_match_the_memory_store_committing_one_by_one(postgres_dsn):
    """The node's commit path here reads the planner's rows ahead, writes in a pipeline and reads
    a group's DSVs once: random groups, some members invalid (a duplicate key, a missing row),
    give the memory store's outcomes, notifications and rows (the embedded stores' own test,
    tests/test_source_store.py, on this engine)."""
    from test_source_store import CATALOG as MIXED
    from test_source_store import INITIAL as MIXED_INITIAL
    from test_source_store import random_transaction

    from fedlab.source_node.memory_store import MemoryStore

    def changes(note):
        return sorted((c.relation, c.brv, sorted(c.inserted, key=repr), sorted(c.deleted, key=repr),
                       sorted(c.modified, key=repr)) for c in note.changes)

    rng = random.Random(7)
    store = open_store(MIXED, "ds1", fresh_database(postgres_dsn, "src_random_groups"), "postgres", MIXED_INITIAL)
    memory = MemoryStore(MIXED, "ds1", MIXED_INITIAL)
    try:
        for g in range(8):
            group, expected = [], []
            for i in range(rng.randint(1, 10)):
                group.append(random_transaction(rng, 100 * g + i, {n: list(r.values()) for n, r in memory.relations.items()}))
                try:
                    note = memory.commit(group[-1])
                    expected.append((note.dsv, note.txn_id, changes(note)))
                except ModelError as err:
                    expected.append(str(err))
            got = [str(o) if isinstance(o, ModelError) else (o.dsv, o.txn_id, changes(o)) for o in store.commit_many(group)]
            assert got == expected
            dsv, relations = store.snapshot()
            assert dsv == memory.dsv
            assert {name: set(rows) for name, (_, rows) in relations.items()} == \
                {name: set(rows.values()) for name, rows in memory.relations.items()}
    finally:
        store.close()


def test_a_retried_group_is_not_committed_twice_among_outside_writers(store, dsn):
    """The commit queue's retry (source_node.commit_queue) over PostgreSQL's log, with an outside
    writer's transaction between the first attempt and the retry."""
    from fedlab.source_node.commit_queue import CommitQueue
    queue = CommitQueue(store)
    first = queue.commit_many([TransactionRequest("t1", inserts={"acct": [(5, "eve", 1.0)]})])
    with psycopg.connect(dsn) as con:
        con.execute("UPDATE acct SET balance = 11.0 WHERE id = 1")
    again = queue.commit_many([TransactionRequest("t1", inserts={"acct": [(5, "eve", 1.0)]}),
                               TransactionRequest("t2", inserts={"acct": [(6, "fay", 2.0)]})], retry_after=1)
    assert [n.dsv for n in again] == [first[0].dsv, 4] == [2, 4]
    assert rows(dsn, "acct") == [(1, "ann", 11.0), (2, "bob", 20.0), (5, "eve", 1.0), (6, "fay", 2.0)]


def test_answers_and_snapshots_read_one_committed_state(store):
    store.commit(TransactionRequest("t1", inserts={"owner": [("bob", "pisa", "2021-05-06")]}))
    sq = Subquery("q1", "ds1", (SubqueryRelation("acct", None, ("owner",), ("name",), ""),
                                SubqueryRelation("owner", "acct", ("name",), ("owner",), "")),
                  (("ann",), ("bob",)))
    answer = store.answer(sq)
    assert answer.dsv == 2
    assert sorted(answer.rows_of("acct").rows) == [(1, "ann", 10.0), (2, "bob", 20.0)]
    assert sorted(answer.rows_of("owner").rows) == [("ann", "oslo", "2020-01-02"), ("bob", "pisa", "2021-05-06")]
    assert answer.rows_of("owner").brv == 2 and answer.rows_of("acct").brv == 1
    dsv, relations = store.snapshot()
    assert dsv == 2 and relations["owner"][0] == 2 and len(relations["owner"][1]) == 2


def test_a_batch_of_subqueries_is_answered_at_one_state_while_writers_commit(store, dsn):
    """A Query batch is read in one REPEATABLE READ transaction. Each answer equals the
    sub-query answered alone at that state, and all of them carry that state's DSV, while an
    application commits alongside."""
    by_owner = [Subquery(f"q{i}", "ds1", (SubqueryRelation("acct", None, ("owner",), ("name",), ""),),
                         ((name,),)) for i, name in enumerate(["ann", "bob", "cy", "ann"])]
    everything = Subquery("all", "ds1", (SubqueryRelation("acct", None, (), ()),), ())
    stop, writing = threading.Event(), threading.Event()

    def application():
        with psycopg.connect(dsn, autocommit=True) as con:
            key = 100
            while not stop.is_set():
                con.execute("INSERT INTO acct VALUES (%s, %s, 1.0)", [key, random.choice(["ann", "bob", "cy"])])
                key += 1
                if key == 102:
                    writing.set()

    writer = threading.Thread(target=application)
    writer.start()
    try:
        # The batches are read while the application commits: on a loaded machine its connection
        # can take longer than the twenty batches, which then met no commit at all.
        assert writing.wait(30)
        for _ in range(20):
            answers = store.answer_all(by_owner + [everything])
            dsv = answers[0].dsv
            assert {a.dsv for a in answers} == {dsv}
            table = answers[-1].rows_of("acct").rows       # the whole relation at that state
            for sq, answer in zip(by_owner, answers):
                owner = sq.probe[0][0]
                assert sorted(answer.rows_of("acct").rows) == sorted(r for r in table if r[1] == owner)
    finally:
        stop.set()
        writer.join(10)
    wait_for(store, 3)   # the application did commit meanwhile


def test_a_restarted_store_finds_its_versions_and_unacknowledged_outbox(store, dsn):
    for i in range(3):
        store.commit(TransactionRequest(f"t{i}", inserts={"acct": [(10 + i, "n", 0.0)]}))
    store.acknowledge(3)
    store.close()
    again = open_store(CATALOG, "ds1", dsn)   # the engine is known from the DSN
    try:
        assert again.dsv == 4 and again.brv["acct"] == 4
        assert [n.dsv for n in again.unacknowledged()] == [4]
        assert [n.txn_id for n in again.notifications_from(2)] == ["t0", "t1", "t2"]
        assert again.oldest_available() == 2
    finally:
        again.close()


def test_a_database_that_holds_another_source_is_refused(dsn):
    open_store(CATALOG, "ds1", dsn, "postgres", INITIAL).close()
    other = Catalog.from_dict({"sources": {"ds2": CATALOG.to_dict()["sources"]["ds1"]}})
    with pytest.raises(ModelError, match="holds source 'ds1', not 'ds2'"):
        open_store(other, "ds2", dsn, "postgres")


def heard_every_commit(fed, timeout: float = 30.0) -> None:
    """Waits until each source node reports the DSV its database holds: a node learns of another
    application's commit from its listener, a moment after the commit returns, and until then
    `wait_until_applied` would wait only for what the node had heard of."""
    import time

    deadline = time.monotonic() + timeout
    for source in fed.catalog.sources:
        with psycopg.connect(fed.postgres.dsn_for(source)) as con:
            (committed,), = con.execute("SELECT dsv FROM fedlab.source").fetchall()
        while fed.source_versions()[source] < committed:
            assert time.monotonic() < deadline, (source, committed, fed.source_versions())
            time.sleep(0.1)


LIVE = {"name": "postgres sources", "steps": [],
        "sources": {"x": {"r1": {"columns": ["A", "B"], "types": ["BIGINT", "BIGINT"], "key": ["A"]}},
                    "y": {"r2": {"columns": ["B", "C"], "types": ["BIGINT", "BIGINT"], "key": ["B"]}}},
        "view": "SELECT r1.A, r2.C FROM r1 JOIN r2 ON r1.B = r2.B",
        "initial": {"r1": [[1, 2], [2, 9]], "r2": [[2, 3]]}}


@pytest.mark.spark
@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("capture", ["triggers", "logical"])
def test_psql_writes_reach_the_view_and_the_run_checks_complete_after_it_ended(capture, spark, ray_runtime):
    """A federation whose sources are databases of a private PostgreSQL server (its data in the run
    directory), captured by triggers or from the WAL: the load's commits through the source nodes
    and an application's plain SQL over psql, a source actor killed and restarted by Ray in
    between, all reach the view; after the run `fedlab check` starts the server again from the run
    directory and finds the run complete."""
    import os
    import tempfile
    import time
    from pathlib import Path

    import ray

    from fedlab.live.check import check
    from fedlab.live.federation import Federation
    from fedlab.simulation.scenario import parse_scenario

    scenario = parse_scenario(dict(LIVE), "postgres sources")
    base = Path(tempfile.mkdtemp(prefix="fedlab-pg-run-"))
    os.chmod(base, 0o755)   # the server's user must reach its data directory in the run directory
    run_dir = base / "run"
    fed = Federation(scenario.catalog, scenario.view.sql, scenario.initial, run_dir, spark, source_engine="postgres",
                     capture=capture)
    fed.start()
    try:
        fed.commit("x", TransactionRequest("t1", inserts={"r1": [(5, 2)]}))
        ray.kill(fed.actors["y"], no_restart=False)   # Ray restarts it on the same database
        time.sleep(1)
        done = subprocess.run([shutil.which("psql"), fed.postgres.dsn_for("y"), "-v", "ON_ERROR_STOP=1", "-c",
                               'INSERT INTO r2 VALUES (9, 7); UPDATE r2 SET "C" = 4 WHERE "B" = 2'],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        heard_every_commit(fed)
        assert fed.wait_until_applied(timeout=60), fed.warehouse.status()
        assert fed.read_view() == {(1, 4): 1, (5, 4): 1, (2, 7): 1}
    finally:
        fed.stop()
    assert not (base / "run" / "postgres" / "postmaster.pid").exists()   # the server is down
    verdict = check(run_dir)
    assert (verdict.level, verdict.transactions, verdict.lost, verdict.doubled) == ("complete", 2, [], [])
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.spark
@pytest.mark.ray
@pytest.mark.slow
def test_pgbench_writing_from_outside_reaches_the_view_complete(spark, ray_runtime):
    """Short: pgbench with the outside writers' scripts (new orders with their
    line items, quantities raised, orders deleted with their lines) at 100 transactions per
    second on the sales database beside the source node, under answer and notification faults.
    The view ends equal to its recomputation from the sources, and `fedlab check` finds every
    transaction pgbench committed, complete."""
    import os
    import tempfile
    from pathlib import Path

    from fedlab.live.check import check
    from fedlab.live.environment import set_faults
    from fedlab.live.federation import Federation
    from fedlab.live.outside_writers import OutsideWriters, written_source
    from fedlab.loadgen.tpch import load_view, sample_orders, tpch_catalog, tpch_data

    catalog = tpch_catalog()
    base = Path(tempfile.mkdtemp(prefix="fedlab-pg-run-"))
    os.chmod(base, 0o755)   # the server's user must reach its data directory in the run directory
    run_dir = base / "run"
    fed = Federation(catalog, load_view("demo4"), sample_orders(tpch_data(0.01), 500), run_dir, spark,
                     source_engine="postgres")
    fed.start()
    try:
        set_faults(fed, {"drop": 0.05, "delay_mean": 0.05})
        source = written_source(catalog)
        writers = OutsideWriters.start(fed.postgres.bin_dir, fed.postgres.dsn_for(source), 100, 8, 0.01)
        outside = writers.finish()
        assert "error" not in outside and outside["committed"] > 300 and outside["failed"] == 0, outside
        set_faults(fed, {})
        heard_every_commit(fed)
        with psycopg.connect(fed.postgres.dsn_for(source)) as con:
            (dsv,), = con.execute("SELECT dsv FROM fedlab.source").fetchall()
        # (a delete that found no order of its own to delete changed nothing: no transaction)
        assert outside["committed"] * 0.7 <= dsv - 1 <= outside["committed"]
        assert fed.wait_until_applied(timeout=120), fed.warehouse.status()
        assert fed.read_view() == fed.recompute()
    finally:
        fed.stop()
    verdict = check(run_dir)
    assert (verdict.level, verdict.transactions, verdict.lost, verdict.doubled) == ("complete", dsv - 1, [], [])
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.spark
@pytest.mark.ray
@pytest.mark.slow
def test_concurrent_applications_a_rollback_and_a_killed_backend_under_versioned_maintenance(spark, ray_runtime):
    """Live, with the `versioned` algorithm (answers as of the tasks' versions,
    rebuilt from the change tables' notifications): four applications write both databases at once
    over their own connections, in single statements and multi-statement transactions; one
    transaction rolls back and one backend is terminated in the middle of its transaction. The view
    ends equal to a recomputation over the sources, the warehouse compensated nothing, and
    `fedlab check` finds every committed transaction with a state of its own."""
    import os
    import tempfile
    from pathlib import Path

    from fedlab.live.check import check
    from fedlab.live.federation import Federation
    from fedlab.simulation.scenario import parse_scenario

    scenario = parse_scenario(dict(LIVE), "postgres sources, versioned")
    base = Path(tempfile.mkdtemp(prefix="fedlab-pg-versioned-"))
    os.chmod(base, 0o755)
    run_dir = base / "run"
    fed = Federation(scenario.catalog, scenario.view.sql, scenario.initial, run_dir, spark,
                     WarehouseSettings("versioned"), source_engine="postgres")
    fed.start()
    committed = []

    def application(i: int) -> None:
        rng = random.Random(i)
        with psycopg.connect(fed.postgres.dsn_for("x"), autocommit=True) as x, \
                psycopg.connect(fed.postgres.dsn_for("y"), autocommit=True) as y:
            for k in range(8):
                a, b = 100 * i + k, 100 * i + k
                if rng.random() < 0.5:
                    x.execute("INSERT INTO r1 VALUES (%s, %s)", [a, rng.choice([2, 9, b])])
                else:
                    with y.transaction():   # one transaction, two statements
                        y.execute("INSERT INTO r2 VALUES (%s, %s)", [b, k])
                        y.execute('UPDATE r2 SET "C" = "C" + 1 WHERE "B" = %s', [b])
                committed.append(i)

    try:
        threads = [threading.Thread(target=application, args=(i,)) for i in range(1, 5)]
        for t in threads:
            t.start()
        with psycopg.connect(fed.postgres.dsn_for("y"), autocommit=True) as y:
            try:
                with y.transaction():
                    y.execute("INSERT INTO r2 VALUES (999, 1)")
                    raise RuntimeError("the application gives up")
            except RuntimeError:
                pass
            victim = psycopg.connect(fed.postgres.dsn_for("y"))
            victim.execute("INSERT INTO r2 VALUES (998, 1)")   # its transaction stays open
            y.execute("SELECT pg_terminate_backend(%s)", [victim.info.backend_pid])
        for t in threads:
            t.join()
        heard_every_commit(fed)
        assert fed.wait_until_applied(timeout=90), fed.warehouse.status()
        view, recomputed = fed.read_view(), fed.recompute()
        counters = fed.warehouse.status()["counters"]
        snapshots, _ = fed.snapshots()
    finally:
        fed.stop()
    assert view == recomputed
    assert not {998, 999} & {b for b, _c in snapshots["r2"][2]}   # rolled back, killed
    assert counters["subqueries"] > 0 and counters["compensations"] == 0
    verdict = check(run_dir)
    assert (verdict.level, verdict.transactions, verdict.lost, verdict.doubled) == ("complete", len(committed), [], [])
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.spark
@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.parametrize("capture", ["triggers", "logical"])
def test_message_faults_and_a_warehouse_restart_over_postgres_sources_stay_complete(capture, spark, ray_runtime):
    """Resend, gap detection and chaos behave as with the embedded engine, whichever the capture.
    Notifications and answers of PostgreSQL sources are dropped, duplicated and delayed, and the
    warehouse restarts from Delta mid-load; every committed transaction gets its own state."""
    import os
    import tempfile
    from pathlib import Path

    from live_support import MirroredLoad

    from fedlab.live.check import check
    from fedlab.live.environment import NO_FAULTS, set_faults
    from fedlab.live.federation import Federation
    from fedlab.simulation.scenario import parse_scenario

    scenario = parse_scenario(dict(LIVE), "postgres sources under chaos")
    base = Path(tempfile.mkdtemp(prefix="fedlab-pg-chaos-"))
    os.chmod(base, 0o755)
    run_dir = base / "run"
    fed = Federation(scenario.catalog, scenario.view.sql, scenario.initial, run_dir, spark, source_engine="postgres",
                     capture=capture)
    fed.start()
    load = MirroredLoad(scenario, fed.commit)
    try:
        set_faults(fed, {"drop": 0.2, "duplicate": 0.2, "delay_mean": 0.1})
        load.commit(15, pause=0.02)
        fed.restart_warehouse()
        load.commit(15, pause=0.02)
        fed.wait_until_applied(timeout=5)
        set_faults(fed, NO_FAULTS)
        assert fed.wait_until_applied(timeout=120), fed.warehouse.status()
        assert fed.read_view() == fed.recompute()
    finally:
        fed.stop()
    verdict = check(run_dir)
    assert (verdict.level, verdict.transactions, verdict.lost, verdict.doubled) == ("complete", 30, [], [])
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("argv, message", [
    (["--outside-writers", "10"], "--outside-writers: pgbench writes PostgreSQL sources; add --source-engine postgres"),
    (["--outside-writers", "-5", "--source-engine", "postgres"],
     "--outside-writers: a rate in transactions per second above 0, got -5"),
])
def test_the_demo_refuses_outside_writers_it_cannot_run_in_one_line(argv, message, tmp_path, capsys):
    from fedlab.cli import main

    assert main(["demo", *argv, "--run-dir", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().out == f"fedlab demo: {message}\n"
    assert not (tmp_path / "run").exists()
