"""Subscribers at a source (source_node.subscriptions), on every store (the in-memory reference,
SQLite, DuckDB; PostgreSQL: tests/test_postgres_source.py): each subscriber's own outbox and
acknowledgement, a lagging one holding back only its own and keeping what it needs across a
restart, its relations only with contiguous DSVs, removal releasing what was kept for it, and a
file from before subscribers keeping its one warehouse's acknowledgement."""

from __future__ import annotations

import sqlite3

import duckdb
import pytest
from test_source_store import CATALOG, INITIAL, open_engine

from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.source_node.engines import FILE_ENGINES, file_name
from fedlab.source_node.memory_store import MemoryStore
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER


@pytest.fixture(params=["memory", *FILE_ENGINES])
def store(request, tmp_path):
    s = MemoryStore(CATALOG, "ds1", INITIAL) if request.param == "memory" else open_engine(request.param, tmp_path)
    yield s
    if request.param != "memory":
        s.close()


def commit_t(store, i: int):
    return store.commit(TransactionRequest(f"t{i}", inserts={"T": [(10 + i, "z")]}))


def test_a_new_source_has_the_default_subscriber_from_dsv_two(store):
    notes = [commit_t(store, i) for i in range(2)]
    assert store.unacknowledged() == store.unacknowledged(DEFAULT_SUBSCRIBER) == notes


def test_a_new_subscriber_starts_after_the_current_dsv(store):
    commit_t(store, 0)
    store.subscribe("w2")
    later = commit_t(store, 1)
    assert store.unacknowledged("w2") == [later]
    assert [n.dsv for n in store.unacknowledged()] == [2, 3]


def test_a_lagging_subscriber_holds_back_only_its_own_notifications(store):
    store.subscribe("w2")
    notes = [commit_t(store, i) for i in range(3)]
    store.acknowledge(4)
    assert store.unacknowledged() == []
    assert store.unacknowledged("w2") == notes, "the lagging one still has everything it lacks"
    assert store.retained_from() == 2
    assert store.notifications_from(2, subscriber="w2") == notes
    store.acknowledge(3, "w2")
    assert store.unacknowledged("w2") == notes[2:] and store.retained_from() == 4


def test_each_subscriber_keeps_its_acknowledgement_across_a_restart(tmp_path):
    for engine in FILE_ENGINES:
        store = open_engine(engine, tmp_path)
        store.subscribe("w2", ["t"])
        notes = [commit_t(store, i) for i in range(3)]
        store.acknowledge(4)
        store.acknowledge(2, "w2")
        store.close()
        reopened = open_engine(engine, tmp_path)
        assert reopened.unacknowledged() == []
        assert reopened.unacknowledged("w2") == notes[1:], engine
        reopened.close()


def test_a_subscriber_sees_only_its_relations_and_every_dsv(store):
    store.subscribe("t-only", ["t"])   # the source's name is T: names are matched regardless of case
    touches_r = store.commit(TransactionRequest("r1", inserts={"R": [(9, "q", 1.0, None)]}))
    touches_both = store.commit(TransactionRequest("rt", inserts={"R": [(8, "q", 1.0, None)], "T": [(20, "w")]}))
    copies = store.unacknowledged("t-only")
    assert [n.dsv for n in copies] == [2, 3], "a transaction touching none of its relations still comes: no gap"
    assert copies[0].changes == () and copies[0].txn_id == touches_r.txn_id
    assert [c.relation for c in copies[1].changes] == ["T"]
    assert copies[1].changes[0] == next(c for c in touches_both.changes if c.relation == "T")
    assert store.unacknowledged() == [touches_r, touches_both], "the default subscriber reads everything"
    assert store.notifications_from(2, subscriber="t-only") == copies


def test_removing_a_subscriber_releases_what_was_kept_for_it(store):
    store.subscribe("w2")
    commit_t(store, 0)
    commit_t(store, 1)
    store.acknowledge(3)
    assert store.retained_from() == 2, "w2 has acknowledged nothing"
    store.unsubscribe("w2")
    assert store.retained_from() == 4
    with pytest.raises(ModelError, match="no subscriber named 'w2'"):
        store.unacknowledged("w2")
    assert [n.dsv for n in store.notifications_from(2)] == [2, 3], "the log itself keeps the history"


def test_bad_subscriptions_are_one_clear_error(store):
    with pytest.raises(ModelError, match="owns no relation named 'U'") as err:
        store.subscribe("w2", ["T", "U"])
    assert "\n" not in str(err.value)
    with pytest.raises(ModelError, match="a subscriber needs a name"):
        store.subscribe("")
    with pytest.raises(ModelError, match=r"no subscriber named 'w9' \(subscribers: warehouse\)"):
        store.acknowledge(2, "w9")


def test_a_file_from_before_subscribers_keeps_its_warehouses_acknowledgement(tmp_path):
    """Such a file kept one acknowledged DSV (SQLite: a column of `source`; DuckDB: a flag per
    outbox row); it becomes the default subscriber's."""
    for engine in FILE_ENGINES:
        store = open_engine(engine, tmp_path)
        notes = [commit_t(store, i) for i in range(3)]
        store.close()
        path = str(tmp_path / file_name("ds1", engine))
        if engine == "sqlite":
            con = sqlite3.connect(path)
            con.execute("ALTER TABLE _fedlab_source ADD COLUMN acknowledged INTEGER NOT NULL DEFAULT 1")
            con.execute("UPDATE _fedlab_source SET acknowledged = 2")
            con.execute("DROP TABLE _fedlab_subscribers")
            con.commit()
        else:
            con = duckdb.connect(path)
            con.execute("ALTER TABLE _fedlab.outbox ADD COLUMN acknowledged BOOLEAN")
            con.execute("UPDATE _fedlab.outbox SET acknowledged = dsv <= 2")
            con.execute("DROP TABLE _fedlab.subscribers")
        con.close()
        reopened = open_engine(engine, tmp_path)
        assert reopened.unacknowledged() == notes[1:], engine
        assert reopened.commit(TransactionRequest("t9", inserts={"T": [(99, "z")]})).dsv == 5
        reopened.close()
        again = open_engine(engine, tmp_path)   # upgraded once: opened as a file of today's
        assert [n.dsv for n in again.unacknowledged()] == [3, 4, 5]
        again.close()
