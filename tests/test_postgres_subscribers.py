"""Subscribers at a PostgreSQL source (source_node.postgres_store with source_node.subscriber_outbox):
a lagging subscriber keeps its copies (of its relations only, every DSV) across a restart while
another acknowledges; with `prune_applied` the log keeps what the slowest lacks and lets it go once
that one is removed; an install from before subscribers keeps its one warehouse's acknowledgement."""

from __future__ import annotations

import psycopg
import pytest
from test_postgres_source import CATALOG, INITIAL, dsn, store, wait_for  # noqa: F401  (fixtures)

from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.source_node.engines import open_store

pytestmark = pytest.mark.postgres


def commit_both(store, i: int):
    return store.commit(TransactionRequest(f"t{i}", inserts={"acct": [(10 + i, "ann", 0.0)]}))


def test_a_lagging_subscriber_keeps_its_copies_across_a_restart(store, dsn):  # noqa: F811
    store.subscribe("owners", ["owner"])
    notes = [commit_both(store, i) for i in range(2)]
    with psycopg.connect(dsn) as con:   # another application's plain SQL
        con.execute("INSERT INTO owner VALUES ('cy', 'rome', '2021-01-01')")
    wait_for(store, 4)   # the node hears of it from its listener
    store.acknowledge(4)
    copies = store.unacknowledged("owners")
    assert [(n.dsv, [c.relation for c in n.changes]) for n in copies] == [(2, []), (3, []), (4, ["owner"])]
    assert store.unacknowledged() == [] and store.retained_from() == 2
    store.acknowledge(2, "owners")
    store.close()
    again = open_store(CATALOG, "ds1", dsn)
    try:
        assert again.unacknowledged("owners") == copies[1:] and again.unacknowledged() == []
        assert [n.txn_id for n in again.notifications_from(2)][:2] == [n.txn_id for n in notes]
    finally:
        again.close()


def test_pruning_keeps_what_the_slowest_lacks_until_it_is_removed(dsn):  # noqa: F811
    store = open_store(CATALOG, "ds1", dsn, "postgres", INITIAL, prune_applied=True)
    try:
        store.subscribe("slow")
        for i in range(3):
            commit_both(store, i)
        store.acknowledge(4)
        store.applied_through(4)
        assert store.oldest_available() == 2, "slow has acknowledged nothing: the log keeps it all"
        store.unsubscribe("slow")
        assert store.oldest_available() == 5
    finally:
        store.close()


def test_an_install_from_before_subscribers_keeps_its_warehouses_acknowledgement(store, dsn):  # noqa: F811
    notes = [commit_both(store, i) for i in range(3)]
    store.close()
    with psycopg.connect(dsn) as con:   # the layout of an install from before subscribers
        con.execute("CREATE TABLE fedlab.acknowledged (dsv bigint NOT NULL)")
        con.execute("INSERT INTO fedlab.acknowledged VALUES (2)")
        con.execute("DROP TABLE fedlab.subscribers")
    again = open_store(CATALOG, "ds1", dsn)
    try:
        assert again.unacknowledged() == notes[1:]
    finally:
        again.close()
    with psycopg.connect(dsn) as con:
        (legacy,), = con.execute("SELECT to_regclass('fedlab.acknowledged') IS NULL").fetchall()
    assert legacy, "upgraded once: the old mark is gone"
