"""The durable source stores, SQLite (the default) and DuckDB, each test on both: versions, the
transactional outbox, atomic rejection, group commit (an invalid member rejected alone), reopening,
commits, groups and sub-query answers equal to the in-memory reference (MemoryStore) on random
data; and what is SQLite's own: sub-queries on their own connection that never wait for a commit
and read one state, and the indexes on probed columns."""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scenario_support import QUICK

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.predicates import compile_sql
from fedlab.fedmodel.subquery import Subquery, SubqueryRelation, evaluate_semijoins
from fedlab.fedmodel.transactions import Modification, TransactionRequest
from fedlab.source_node import sqlite_store
from fedlab.source_node.duckdb_store import DuckDBStore
from fedlab.source_node.durable_store import semijoin_chains
from fedlab.source_node.engines import FILE_ENGINES, file_name, open_store
from fedlab.source_node.memory_store import MemoryStore
from fedlab.source_node.sqlite_store import SQLiteStore

CATALOG = Catalog.from_dict({"sources": {
    "ds1": {
        "R": {"columns": ["A", "B", "C", "D"], "types": ["BIGINT", "VARCHAR", "DOUBLE", "DATE"], "key": ["A"]},
        "S": {"columns": ["B", "E", "F"], "types": ["VARCHAR", "BIGINT", "BOOLEAN"], "key": ["B", "E"]},
        "T": {"columns": ["E", "G"], "types": ["BIGINT", "VARCHAR"], "key": ["E"]},
    },
    "ds2": {"U": {"columns": ["A", "H"], "types": ["BIGINT", "VARCHAR"], "key": ["A"]}},
}})
INITIAL = {
    "R": [(1, "a", 0.5, "2020-01-01"), (2, "b", None, "2020-01-02"), (3, None, 2.5, None)],
    "S": [("a", 1, True), ("b", 2, False), ("a", 3, None)],
    "T": [(1, "x"), (2, "y")],
}


def open_engine(engine: str, folder, name: str = "ds1", catalog: Catalog = CATALOG, source: str = "ds1",
                initial: dict | None = INITIAL, **kw):
    """A store of `engine` in `folder`/<name>.<engine>."""
    return open_store(catalog, source, folder / file_name(name, engine), engine, initial, **kw)


@pytest.fixture(params=FILE_ENGINES)   # PostgreSQL: tests/test_postgres_source.py
def engine(request) -> str:
    return request.param


@pytest.fixture
def store(tmp_path, engine):
    s = open_engine(engine, tmp_path)
    yield s
    s.close()


def state(store) -> tuple:
    """Everything a store holds, comparable across stores: DSV, BRVs, rows as sets, the log, the outbox."""
    dsv, relations = store.snapshot()
    return (dsv, {name: (brv, frozenset(rows)) for name, (brv, rows) in relations.items()},
            store.notifications_from(0), store.unacknowledged(), store.oldest_available())


# ---- versions and the outbox ----

def test_versions_start_at_one_and_bump_per_transaction(store):
    assert store.dsv == 1 and store.brv == {"R": 1, "S": 1, "T": 1}
    store.commit(TransactionRequest("t1", inserts={"R": [(4, "c", 1.0, None)]}))
    store.commit(TransactionRequest("t2", inserts={"S": [("c", 4, True)]}, deletes={"T": [(1,)]}))
    note = store.commit(TransactionRequest("t3", modifies={"R": [Modification((4,), (4, "d", 2.0, "2021-01-01"))]}))
    assert store.dsv == 4 and note.dsv == 4
    assert store.brv == {"R": 3, "S": 2, "T": 2}
    assert [c.brv for c in note.changes] == [3]


def test_outbox_holds_each_notification_until_acknowledged(store):
    notes = [store.commit(TransactionRequest(f"t{i}", inserts={"T": [(10 + i, "z")]})) for i in range(3)]
    assert store.unacknowledged() == notes
    store.acknowledge(2)
    assert store.unacknowledged() == notes[1:]
    store.acknowledge(1)  # acknowledgements are cumulative: an older one changes nothing
    assert store.unacknowledged() == notes[1:]
    store.acknowledge(4)
    assert store.unacknowledged() == []
    assert store.notifications_from(3) == notes[1:], "acknowledged notifications stay in the log for Resend"


STORES = {
    "sqlite": lambda tmp_path, **kw: open_engine("sqlite", tmp_path, **kw),
    "duckdb": lambda tmp_path, **kw: open_engine("duckdb", tmp_path, **kw),
    "memory": lambda tmp_path, **kw: MemoryStore(CATALOG, "ds1", INITIAL, **kw),
}


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("retention, kept", [(2, [4, 5]), (0, [])])
def test_log_retention_keeps_the_newest_notifications(tmp_path, kind, retention, kept):
    store = STORES[kind](tmp_path, log_retention=retention)
    assert store.oldest_available() == 2
    for i in range(4):
        store.commit(TransactionRequest(f"t{i}", inserts={"T": [(10 + i, "z")]}))
    assert [n.dsv for n in store.notifications_from(0)] == kept
    assert store.oldest_available() == (kept[0] if kept else 6)
    getattr(store, "close", lambda: None)()


def test_a_log_kept_for_some_seconds_keeps_those_and_what_is_not_acknowledged(tmp_path, engine, monkeypatch):
    from fedlab.source_node import subscriber_outbox

    monkeypatch.setattr(subscriber_outbox, "TRIMS", 1)   # trimmed at every commit a keeping time after the last
    store = open_engine(engine, tmp_path, log_keep_seconds=0.3)
    for i in range(4):
        store.commit(TransactionRequest(f"t{i}", inserts={"T": [(10 + i, "z")]}))
    time.sleep(0.35)
    store.acknowledge(3)   # DSVs 2 and 3 are durable at the warehouse; 4 and 5 are not
    store.commit(TransactionRequest("t4", inserts={"T": [(14, "z")]}))
    assert store.oldest_available() == 4   # aged out and acknowledged: gone; aged but unacknowledged: kept
    time.sleep(0.35)
    store.acknowledge(6)
    store.commit(TransactionRequest("t5", inserts={"T": [(15, "z")]}))
    assert [n.dsv for n in store.notifications_from(0)] == [7]
    store.close()
    reopened = open_engine(engine, tmp_path)
    assert reopened.oldest_available() == 7 and reopened.dsv == 7
    reopened.close()


# ---- rejected transactions leave no partial state ----

VALID_PART = {"R": [(9, "v", 9.5, "2022-02-02")]}


BAD_TRANSACTIONS = [
    (TransactionRequest("t", inserts={**VALID_PART, "NOPE": [(1,)]}), "does not own a relation named 'NOPE'"),
    (TransactionRequest("t", inserts={**VALID_PART, "U": [(1, "h")]}), "does not own a relation named 'U'"),
    (TransactionRequest("t", inserts={**VALID_PART, "T": [("five", "g")]}), "T.E is BIGINT"),
    (TransactionRequest("t", inserts={**VALID_PART, "S": [("a", 1, False)]}), "duplicates key"),
    (TransactionRequest("t", inserts=VALID_PART, deletes={"T": [(99,)]}), "which is not there"),
    (TransactionRequest("t", inserts=VALID_PART, deletes={"R": [(1, "a", 0.5, "1999-01-01")]}), "which is not there"),
    # Passes validation but breaks the database's own constraint (a key column is NOT NULL): the
    # first relation's rows were already written when the database refuses, and are rolled back.
    (TransactionRequest("t", inserts={**VALID_PART, "S": [(None, 5, True)]}), "NOT NULL constraint"),
    # A key of the wrong type names no row: refused before any engine casts it (or finds 5 for '5').
    (TransactionRequest("t", inserts=VALID_PART, deletes={"T": [("five",)]}), "T.E is BIGINT, got 'five'"),
    (TransactionRequest("t", inserts=VALID_PART, deletes={"T": [("1",)]}), "T.E is BIGINT, got '1'"),
    # An integer beyond 64 bits: the catalog refuses it before any engine overflows.
    (TransactionRequest("t", inserts={**VALID_PART, "T": [(2 ** 64, "g")]}), "does not fit in 64 bits"),
]


@pytest.mark.parametrize("bad, message", BAD_TRANSACTIONS)
def test_rejected_transaction_leaves_no_partial_state(store, bad, message):
    store.commit(TransactionRequest("t0", inserts={"T": [(7, "w")]}))
    before = state(store)
    with pytest.raises(ModelError, match=message):
        store.commit(bad)
    assert state(store) == before
    store.commit(TransactionRequest("t1", inserts=VALID_PART))  # and the store goes on
    assert store.dsv == before[0] + 1


# ---- group commit ----

@pytest.mark.parametrize("bad, message", BAD_TRANSACTIONS)
def test_invalid_member_of_a_group_is_rejected_alone_and_leaves_no_trace(tmp_path, engine, bad, message):
    before = TransactionRequest("t1", inserts={"T": [(7, "w")]})
    after = TransactionRequest("t2", modifies={"T": [Modification((7,), (7, "v"))]}, inserts=VALID_PART)
    group = open_engine(engine, tmp_path, "group")
    alone = open_engine(engine, tmp_path, "alone")
    first, rejected, last = group.commit_many([before, bad, after], commit_time=5.0)
    assert isinstance(rejected, ModelError) and message in str(rejected)
    assert [first, last] == [alone.commit(before, commit_time=5.0), alone.commit(after, commit_time=5.0)]
    assert (first.dsv, last.dsv) == (2, 3), "the rejected member takes no DSV"
    assert state(group) == state(alone)
    group.close()
    alone.close()


def test_a_member_is_planned_on_the_rows_the_earlier_members_wrote(store):
    outcomes = store.commit_many([
        TransactionRequest("a", inserts={"T": [(7, "w")]}),
        TransactionRequest("b", deletes={"T": [(7, "w")]}),
        TransactionRequest("c", inserts={"T": [(7, "again")]}),
        TransactionRequest("d", modifies={"T": [Modification((7,), (7, "v"))]}),
        TransactionRequest("e", inserts={"T": [(7, "dup")]}),
        TransactionRequest("f", deletes={"T": [(7, "again")]}),
    ])
    assert [o.dsv if not isinstance(o, ModelError) else str(o) for o in outcomes] == [
        2, 3, 4, 5, "transaction e: inserting T[7, 'dup'] duplicates key [7]",
        "transaction f: deletes T[7, 'again'] which is not there"]
    assert outcomes[3].changes[0].modified == (Modification((7, "again"), (7, "v")),)
    assert (7, "v") in store.snapshot()[1]["T"][1]


def test_a_group_is_one_durable_state_with_a_notification_per_member(tmp_path, engine):
    store = open_engine(engine, tmp_path, log_retention=3)
    notes = store.commit_many([TransactionRequest(f"t{i}", inserts={"T": [(10 + i, "z")]}) for i in range(4)])
    assert [(n.txn_id, n.dsv, n.changes[0].brv) for n in notes] == [(f"t{i}", 2 + i, 2 + i) for i in range(4)]
    assert (store.dsv, store.brv) == (5, {"R": 1, "S": 1, "T": 5})
    before = state(store)
    assert [n.dsv for n in store.unacknowledged()] == [3, 4, 5], "log retention applies to the group's end"
    store.close()
    reopened = open_engine(engine, tmp_path, initial=None)
    assert state(reopened) == before
    reopened.close()


def test_many_row_group_refused_by_the_database_falls_back_to_one_by_one(store):
    # Enough rows for DuckDB's Arrow path of _table_of, which rolls back on its own when DuckDB refuses.
    many = TransactionRequest("many", inserts={"T": [(100 + i, "m") for i in range(50)]})
    bad = TransactionRequest("bad", inserts={"S": [(None, i, True) for i in range(50)]})
    outcomes = store.commit_many([many, bad, TransactionRequest("last", deletes={"T": [(100,)]})])
    assert [type(o).__name__ for o in outcomes] == ["Notification", "ModelError", "Notification"]
    assert "NOT NULL constraint" in str(outcomes[1])
    assert [n.txn_id for n in store.unacknowledged()] == ["many", "last"]
    assert len(store.snapshot()[1]["T"][1]) == 2 + 49


def test_referential_integrity_is_enforced_like_the_memory_store(tmp_path, engine):
    catalog = Catalog.from_dict({
        "sources": {"ds1": {"P": {"columns": ["K"], "types": ["BIGINT"]},
                            "C": {"columns": ["I", "K"], "types": ["BIGINT", "BIGINT"], "key": ["I"]}}},
        "constraints": {"ri": [{"child": "C", "columns": ["K"], "parent": "P", "parent_columns": ["K"]}]}})
    initial = {"P": [(1,)], "C": [(10, 1)]}
    durable = open_engine(engine, tmp_path, "ri", catalog, initial=initial)
    memory = MemoryStore(catalog, "ds1", initial)
    for bad in (TransactionRequest("t", inserts={"C": [(11, 2)]}), TransactionRequest("t", deletes={"P": [(1,)]})):
        for s in (durable, memory):
            with pytest.raises(ModelError, match="refers to no P row|leaves C rows"):
                s.commit(bad)
    assert durable.dsv == memory.dsv == 1
    durable.close()


# ---- reopening ----

def test_reopen_restores_relations_versions_and_outbox(tmp_path, engine):
    store = open_engine(engine, tmp_path)
    store.commit(TransactionRequest("t1", inserts={"R": [(4, "c", 1.0, "2023-03-03")]}))
    store.commit(TransactionRequest("t2", deletes={"S": [("a", 1)]}, modifies={"T": [Modification((2,), (2, "yy"))]}))
    store.acknowledge(2)
    before = state(store)
    store.close()
    reopened = open_engine(engine, tmp_path, initial={"T": [(100, "ignored on reopen")]})
    assert state(reopened) == before
    assert [n.dsv for n in reopened.unacknowledged()] == [3]
    assert reopened.commit(TransactionRequest("t3", inserts={"T": [(5, "q")]})).dsv == 4
    reopened.close()


def test_reopening_another_sources_file_is_refused(tmp_path, engine):
    open_engine(engine, tmp_path).close()
    other = Catalog.from_dict({"sources": {"ds9": {"R": {"columns": ["A"], "types": ["BIGINT"]}}}})
    with pytest.raises(ModelError, match="holds source 'ds1', not 'ds9'"):
        open_engine(engine, tmp_path, catalog=other, source="ds9", initial=None)


@pytest.mark.parametrize("initial, message", [
    ({"T": [(1, "x"), (1, "y")]}, "initial rows of T: duplicate key"),
    ({"T": [(i, f"t{i}") for i in range(100)] + [(7, "again")]}, "initial rows of T: duplicate key"),
    ({"T": [(1, "x")], "S": [(None, 1, True)]}, "initial rows of S.*NOT NULL constraint"),
    ({"T": [(1, 2)]}, "initial rows of T: T.G is VARCHAR, got 2"),
    ({"U": [(1, "h")]}, "does not own a relation named 'U'"),
])
def test_invalid_initial_rows_are_refused_with_one_line_and_leave_no_store(tmp_path, engine, initial, message):
    with pytest.raises(ModelError, match=message) as refused:
        open_engine(engine, tmp_path, initial=initial)
    assert "\n" not in str(refused.value)
    # Nothing was created: the same file then takes good initial rows.
    store = open_engine(engine, tmp_path)
    assert state(store)[:2] == (1, {n: (1, frozenset(rows)) for n, rows in INITIAL.items()})
    store.close()


# ---- opening a file with the engine that made it ----

def test_open_store_reads_the_engine_from_the_file(tmp_path):
    for engine, kind in (("sqlite", SQLiteStore), ("duckdb", DuckDBStore)):
        path = tmp_path / f"made-by-{engine}.db"   # the header decides, not the name
        open_store(CATALOG, "ds1", path, engine, INITIAL).close()
        reopened = open_store(CATALOG, "ds1", path)
        assert isinstance(reopened, kind) and reopened.dsv == 1
        reopened.close()


def test_a_file_of_the_other_engine_is_refused_with_one_line(tmp_path):
    open_engine("duckdb", tmp_path).close()
    with pytest.raises(ModelError, match=r"ds1.duckdb is a DuckDB database, not SQLite \(it was made with "
                                         r"--source-engine duckdb\)"):
        open_store(CATALOG, "ds1", tmp_path / "ds1.duckdb", "sqlite")
    (tmp_path / "junk").write_text("not a database at all")
    with pytest.raises(ModelError, match="neither a SQLite nor a DuckDB database"):
        open_store(CATALOG, "ds1", tmp_path / "junk")
    with pytest.raises(ModelError, match="no source database at"):
        open_store(CATALOG, "ds1", tmp_path / "missing.sqlite")


# ---- the same contract as the memory store, on random transactions ----

DOMAINS = {
    "BIGINT": [0, 1, 2, 3, 4, 5, None], "DOUBLE": [0.5, 1.0, 2.5, -1.25, None],
    "VARCHAR": ["a", "b", "c", "ab", None], "DATE": ["2020-01-01", "2020-01-02", "2020-01-03", None],
    "BOOLEAN": [True, False, None],
}


def random_row(rng: random.Random, rel) -> tuple:
    return tuple(rng.choice([v for v in DOMAINS[t] if v is not None or c not in rel.key])
                 for c, t in zip(rel.columns, rel.types))


def random_transaction(rng: random.Random, i: int, rows: dict) -> TransactionRequest:
    """Mostly valid transactions over the current `rows`; some insert a duplicate key or touch a missing row."""
    req = TransactionRequest(f"t{i}")
    for name in rng.sample(["R", "S", "T"], rng.randint(1, 2)):
        rel = CATALOG.relation(name)
        present = sorted(rows[name], key=repr)
        kind = rng.choice(["insert", "delete", "modify"] if present else ["insert"])
        if kind == "insert":
            req.inserts[name] = [random_row(rng, rel)]
        elif kind == "delete":
            row = rng.choice(present)
            req.deletes[name] = [rel.key_of(row) if rng.random() < 0.5 else row]
        else:
            old = rng.choice(present)
            new = random_row(rng, rel)
            req.modifies[name] = [Modification(rel.key_of(old), new)]
    return req


def twin_stores(engine: str, folder, seed: int, transactions: int = 25):
    """A durable store and the memory store after the same random transactions, checked equal all along."""
    rng = random.Random(seed)
    durable = open_engine(engine, folder, f"twin{seed}")
    memory = MemoryStore(CATALOG, "ds1", INITIAL)
    for i in range(transactions):
        req = random_transaction(rng, i, {n: list(r.values()) for n, r in memory.relations.items()})
        outcomes = []
        for s in (durable, memory):
            try:
                outcomes.append(s.commit(req, commit_time=float(i)))
            except ModelError as err:
                outcomes.append(type(err))
        assert outcomes[0] == outcomes[1], f"{req} -> {outcomes}"
    assert state(durable) == state(memory)
    return durable, memory


@pytest.mark.parametrize("seed", range(6))
def test_commits_match_the_memory_store(tmp_path, engine, seed):
    twin_stores(engine, tmp_path, seed)[0].close()


@pytest.mark.parametrize("seed", range(6))
def test_group_commits_match_the_memory_store_committing_one_by_one(tmp_path, engine, seed):
    """Random groups (sizes 1 to 12, members planned on the state the earlier ones leave, some
    invalid) committed with commit_many give the outcomes and state of one-by-one commits."""
    rng = random.Random(100 + seed)
    durable = open_engine(engine, tmp_path)
    memory = MemoryStore(CATALOG, "ds1", INITIAL)
    for g in range(6):
        group, expected = [], []
        for i in range(rng.randint(1, 12)):
            rows = {n: list(r.values()) for n, r in memory.relations.items()}
            req = random_transaction(rng, len(group) + 100 * g, rows)
            group.append(req)
            try:
                expected.append(memory.commit(req, commit_time=float(g)))
            except ModelError as err:
                expected.append(str(err))
        got = [str(o) if isinstance(o, ModelError) else o for o in durable.commit_many(group, commit_time=float(g))]
        assert got == expected
        assert state(durable) == state(memory)
    assert durable.commit_many([]) == [] and durable.dsv == memory.dsv
    durable.close()


def test_booleans_and_dates_come_back_as_the_memory_store_holds_them(store):
    store.commit(TransactionRequest("t", inserts={"S": [("z", 9, False)], "R": [(9, "z", 1.5, "2024-02-29")]}))
    _, relations = store.snapshot()
    assert {type(f) for _, _, f in relations["S"][1]} == {bool, type(None)}   # not 0 and 1
    assert (9, "z", 1.5, "2024-02-29") in relations["R"][1]


def test_memory_store_group_rejects_an_invalid_member_alone():
    memory = MemoryStore(CATALOG, "ds1", INITIAL)
    ok, bad, ok2 = memory.commit_many([TransactionRequest("a", inserts={"T": [(7, "w")]}),
                                       TransactionRequest("b", inserts={"T": [(7, "again")]}),
                                       TransactionRequest("c", deletes={"T": [(7,)]})])
    assert (ok.dsv, ok2.dsv, memory.dsv) == (2, 3, 3)
    assert isinstance(bad, ModelError) and "duplicates key" in str(bad)


@pytest.fixture(scope="module", params=[(e, seed) for e in FILE_ENGINES for seed in (11, 12)], ids=str)
def twins(request, tmp_path_factory):
    engine, seed = request.param
    durable, memory = twin_stores(engine, tmp_path_factory.mktemp(engine), seed)
    yield durable, memory
    durable.close()


# Columns that may be joined: equal types.
JOINABLE = {("R", "A"): "BIGINT", ("R", "B"): "VARCHAR", ("S", "B"): "VARCHAR", ("S", "E"): "BIGINT",
            ("T", "E"): "BIGINT", ("T", "G"): "VARCHAR"}


@st.composite
def predicates(draw, relation: str, depth: int = 0) -> str:
    rel = CATALOG.relation(relation)
    if depth < 2 and draw(st.integers(0, 3)) == 0:
        a, b = draw(predicates(relation, depth + 1)), draw(predicates(relation, depth + 1))
        return draw(st.sampled_from([f"({a}) AND ({b})", f"({a}) OR ({b})", f"NOT ({a})"]))
    i = draw(st.integers(0, len(rel.columns) - 1))
    col, typ = rel.columns[i], rel.types[i]
    values = [v for v in DOMAINS[typ] if v is not None]
    lit = draw(st.sampled_from(values))
    sql_lit = f"'{lit}'" if isinstance(lit, str) else str(lit).lower() if isinstance(lit, bool) else repr(lit)
    forms = [f"{col} IS NULL", f"{col} IS NOT NULL", f"{col} = {sql_lit}", f"{col} <> {sql_lit}"]
    if typ == "BOOLEAN":
        forms += [col, f"NOT {col}"]
    else:
        lits = [f"'{v}'" if isinstance(v, str) else repr(v) for v in draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))]
        null = ", NULL" if draw(st.booleans()) else ""
        forms += [f"{col} < {sql_lit}", f"{col} >= {sql_lit}", f"{col} IN ({', '.join(lits)}{null})",
                  f"{col} BETWEEN {min(lits)} AND {max(lits)}"]
    if typ in ("BIGINT", "DOUBLE"):
        forms += [f"{col} + 1 > {sql_lit}", f"-{col} <= {sql_lit}"]
    if typ == "VARCHAR":
        forms += [f"{col} LIKE '{lit[0]}%'", f"{col} LIKE '_{lit[-1]}'"]
    return draw(st.sampled_from(forms))


@st.composite
def subqueries(draw) -> Subquery:
    names = draw(st.permutations(["R", "S", "T"]))[:draw(st.integers(1, 3))]
    relations = []
    root_cols = draw(st.sampled_from([(), *[(c,) for (r, c) in JOINABLE if r == names[0]], *(
        [("B", "E")] if names[0] == "S" else [])]))
    for i, name in enumerate(names):
        selection = draw(predicates(name)) if draw(st.booleans()) else ""
        if i == 0:
            relations.append(SubqueryRelation(name, None, root_cols, tuple(f"P{j}" for j in range(len(root_cols))), selection))
            continue
        parent = draw(st.sampled_from(names[:i]))
        pairs = [(c, pc) for (r, c), t in JOINABLE.items() if r == name
                 for (pr, pc), pt in JOINABLE.items() if pr == parent and pt == t]
        if not pairs:
            break
        c, pc = draw(st.sampled_from(pairs))
        relations.append(SubqueryRelation(name, parent, (c,), (pc,), selection))
    root = CATALOG.relation(names[0])
    probe = draw(st.lists(st.tuples(*[st.sampled_from(DOMAINS[root.types[root.index(c)]]) for c in root_cols]),
                          max_size=6, unique=True)) if root_cols else []
    return Subquery("q", "ds1", tuple(relations), tuple(probe))


@settings(max_examples=40 if QUICK else 150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sq=subqueries())
def test_answer_equals_the_memory_store(twins, sq):
    durable, memory = twins
    assert comparable(durable.answer(sq)) == comparable(memory.answer(sq))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(subqueries(), min_size=1, max_size=4))
def test_a_batch_is_answered_as_each_sub_query_alone(twins, batch):
    """answer_all reads a Query batch in one transaction; each answer is the one its sub-query
    gets alone."""
    durable, memory = twins
    batch = [replace(sq, id=f"q{i}") for i, sq in enumerate(batch)]
    assert [comparable(a) for a in durable.answer_all(batch)] == [comparable(memory.answer(sq)) for sq in batch]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=st.lists(subqueries(), min_size=1, max_size=5))
def test_chains_walked_side_by_side_keep_what_each_keeps_alone(twins, batch):
    """semijoin_chains (a PostgreSQL source's batch: one read per relation and depth for all the
    sub-queries) against the reference semantics, evaluate_semijoins, over the same rows; the
    reads it makes are counted, never more than the chains alone would make."""
    _, memory = twins
    reads = []

    def scan(rel):
        reads.append(rel.name)
        return list(memory.relations[rel.name].values())

    def matching(rel, positions, wanted):
        reads.append(rel.name)
        return [r for r in memory.relations[rel.name].values() if tuple(r[p] for p in positions) in wanted]

    relations = [[CATALOG.relation(sr.relation) for sr in sq.relations] for sq in batch]
    together = semijoin_chains(CATALOG, [(sq, rels, None) for sq, rels in zip(batch, relations)], scan, matching)
    for sq, kept in zip(batch, together):
        alone = evaluate_semijoins(sq, CATALOG, lambda name: list(memory.relations[name].values()),
                                   lambda name, sql: compile_sql(sql, CATALOG.relation(name)))
        assert [sorted(rows, key=repr) for rows in kept] == [sorted(alone[sr.relation], key=repr) for sr in sq.relations]
    # at most one read per depth and (relation, join columns), or scan of a relation, however many chains
    distinct = {(depth, sr.relation, sr.columns if depth or sr.parent_columns else "scan")
                for sq in batch for depth, sr in enumerate(sq.relations)}
    assert len(reads) <= len(distinct)


@settings(max_examples=10 if QUICK else 30, deadline=None)
@given(seed=st.integers(0, 10_000), asked=st.lists(subqueries(), min_size=1, max_size=4))
def test_the_memory_stores_indexes_find_what_a_scan_finds_in_scan_order(seed, asked):
    """MemoryStore finds joining rows through hash indexes, built when first asked for and kept
    with every commit after: between random transactions, each answer holds the rows a scan of
    every relation keeps (the reference, evaluate_semijoins alone), in the scan's order."""
    rng = random.Random(seed)
    memory = MemoryStore(CATALOG, "ds1", INITIAL)
    for i in range(40):
        sq = asked[i % len(asked)]
        scanned = evaluate_semijoins(sq, CATALOG, lambda name: list(memory.relations[name].values()),
                                     lambda name, sql: compile_sql(sql, CATALOG.relation(name)))
        assert [list(r.rows) for r in memory.answer(sq).relations] == [scanned[sr.relation] for sr in sq.relations]
        try:
            memory.commit(random_transaction(rng, i, {n: list(r.values()) for n, r in memory.relations.items()}))
        except ModelError:
            pass


def comparable(answer) -> tuple:
    """An answer with each relation's rows in one order (the order of rows is no part of it)."""
    return (answer.id, answer.source, answer.dsv,
            [(r.relation, r.brv, sorted(r.rows, key=repr)) for r in answer.relations])


# ---- bad sub-queries ----

@pytest.mark.parametrize("sq, message", [
    (Subquery("q", "ds1", (SubqueryRelation("U", None, (), ()),), ()), "does not own a relation named 'U'"),
    (Subquery("q", "ds1", (SubqueryRelation("R", None, (), (), "A >"),), ()), "malformed SQL"),
    (Subquery("q", "ds1", (SubqueryRelation("R", None, (), (), "Z = 1"),), ()), "has no column 'Z'"),
    (Subquery("q", "ds1", (SubqueryRelation("R", None, ("A",), ("P",)),), (("one",),)), "probe value: R.A is BIGINT, got 'one'"),
    (Subquery("q", "ds1", (SubqueryRelation("R", None, ("A",), ("P",)),), ((1, 2),)), "probe value .1, 2. has 2 values"),
    (Subquery("q", "ds1", (SubqueryRelation("R", None, ("A", "B"), ("P",)),), ()), "R joins on 2 columns"),
    (Subquery("q", "ds1", (SubqueryRelation("R", None, (), ()), SubqueryRelation("R", "R", ("A",), ("A",))), ()),
     "names relation R twice"),
    (Subquery("q", "ds1", (SubqueryRelation("R", None, (), ()), SubqueryRelation("S", "T", ("E",), ("E",))), ()),
     "parent of S must be a relation listed before it"),
])
def test_bad_subquery_is_a_model_error(store, sq, message):
    with pytest.raises(ModelError, match=message):
        store.answer(sq)


# ---- SQLite: reads on their own connection, one state each, never waiting for a commit ----

T_ALL = Subquery("q", "ds1", (SubqueryRelation("T", None, (), ()),), ())


def test_subquery_returns_the_state_before_a_commit_in_progress(tmp_path, monkeypatch):
    store = open_engine("sqlite", tmp_path)
    writing, release = threading.Event(), threading.Event()
    write_log = store._write_log

    def slow_write_log(*args):   # the group's rows are written; its versions and outbox not yet
        write_log(*args)
        writing.set()
        release.wait(10)

    monkeypatch.setattr(store, "_write_log", slow_write_log)
    committer = threading.Thread(target=store.commit, args=(TransactionRequest("t", inserts={"T": [(7, "w")]}),))
    committer.start()
    assert writing.wait(10)
    answered = []
    reader = threading.Thread(target=lambda: answered.append(store.answer(T_ALL)))
    reader.start()
    reader.join(5)
    assert answered, "the sub-query waited for the commit in progress"
    before, = answered
    release.set()
    committer.join(10)
    after = store.answer(T_ALL)
    assert (before.dsv, before.relations[0].brv, sorted(before.relations[0].rows)) == (1, 1, [(1, "x"), (2, "y")])
    assert (after.dsv, after.relations[0].brv, sorted(after.relations[0].rows)) == (2, 2, [(1, "x"), (2, "y"), (7, "w")])
    store.close()


def test_subquery_reads_rows_and_versions_of_one_state_under_concurrent_commits(tmp_path):
    # Every commit inserts one T row, so in any one state T holds 2 + (BRV(T) - 1) rows.
    store = open_engine("sqlite", tmp_path)
    stop = threading.Event()

    def commit_on():
        i = 100
        while not stop.is_set():
            store.commit_many([TransactionRequest(f"t{i + j}", inserts={"T": [(i + j, "c")]}) for j in range(3)])
            i += 3

    committer = threading.Thread(target=commit_on)
    committer.start()
    try:
        seen = set()
        while len(seen) < 20:
            answer = store.answer(T_ALL)
            t = answer.relations[0]
            assert len(t.rows) == 2 + t.brv - 1 and answer.dsv == t.brv, (answer.dsv, t.brv, len(t.rows))
            dsv, relations = store.snapshot()
            assert len(relations["T"][1]) == 2 + relations["T"][0] - 1 and dsv == relations["T"][0]
            seen.add(t.brv)
    finally:
        stop.set()
        committer.join(10)
    store.close()


# ---- SQLite: an index on every probed column set ----

def index_columns(store: SQLiteStore, relation: str) -> list[tuple[str, ...]]:
    con = sqlite3.connect(store.path)
    try:
        names = [row[1] for row in con.execute(f'PRAGMA index_list("{relation}")')]
        return sorted(tuple(c for _, _, c in con.execute(f'PRAGMA index_info("{n}")')) for n in names)
    finally:
        con.close()


def test_a_probe_on_an_unindexed_column_set_creates_its_index(tmp_path):
    store = open_engine("sqlite", tmp_path)
    memory = MemoryStore(CATALOG, "ds1", INITIAL)
    assert ("G",) not in index_columns(store, "T")
    sq = Subquery("q", "ds1", (SubqueryRelation("T", None, ("G",), ("P",)),
                               SubqueryRelation("S", "T", ("E",), ("E",))), (("x",), ("y",)))
    assert comparable(store.answer(sq)) == comparable(memory.answer(sq))
    assert ("G",) in index_columns(store, "T") and ("E",) in index_columns(store, "S")
    store.close()
    # ... and the file keeps it: a reopened store does not create it again.
    reopened = open_engine("sqlite", tmp_path)
    assert comparable(reopened.answer(sq)) == comparable(memory.answer(sq))
    assert index_columns(reopened, "T").count(("G",)) == 1
    reopened.close()


def test_probed_column_sets_are_indexed_when_the_store_opens_and_key_prefixes_need_none(tmp_path):
    store = open_engine("sqlite", tmp_path, probes=[("S", ("B",)), ("R", ("b", "a")), ("U", ("A",)), ("T", ("E",))])
    assert index_columns(store, "S") == [("B", "E")], "B leads S's primary key (B, E): no second index"
    assert index_columns(store, "R") == [("A",), ("B", "A")], "named as the catalog spells them, in the order given"
    assert index_columns(store, "T") == [("E",)], "T's key is E"
    store.close()


def test_probes_use_an_index(tmp_path):
    store = open_engine("sqlite", tmp_path, probes=[("R", ("B",))])
    plan = " ".join(str(row) for row in store._con.execute(
        "EXPLAIN QUERY PLAN " + store._probe_statement(CATALOG.relation("R"), ["B"], 4), ["a", "b", None, None]))
    assert "SEARCH r USING" in plan and "INDEX" in plan, plan
    store.close()


def test_the_wal_is_checkpointed_by_a_thread_of_its_own_not_by_a_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_store, "CHECKPOINT_INTERVAL", 0.05)
    store = open_engine("sqlite", tmp_path)
    assert store._con.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
    size = (tmp_path / "ds1.sqlite").stat().st_size
    store.commit(TransactionRequest("t", inserts={"T": [(i, "x" * 500) for i in range(100, 400)]}))
    deadline = time.monotonic() + 5
    while (tmp_path / "ds1.sqlite").stat().st_size == size and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (tmp_path / "ds1.sqlite").stat().st_size > size, "the committed pages reached the database file"
    store.close()
    assert not (tmp_path / "ds1.sqlite-wal").exists()
