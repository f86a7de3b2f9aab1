"""Answers as of an earlier version (fedmodel.as_of, Vinh 2020 formula 12).

Every store (the memory reference, SQLite, DuckDB, PostgreSQL) goes through the same random
histories of insertions, deletions and modifications (keys and join columns changing on the
way), and every earlier state of every relation is recorded as it was. A sub-query asked as of
any mix of earlier versions must answer exactly the semijoin chain evaluated on those recorded
states (fedmodel.subquery.evaluate_semijoins, the reference semantics), with the versions it was
asked for. What the recent changes no longer reach is answered at the current state, saying so
in its versions; a version not reached yet is refused with one line; PostgreSQL's change tables
stay bounded once the warehouse has acknowledged and applied what they hold.
"""

from __future__ import annotations

import random

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_support import fresh_database
from test_source_store import CATALOG, INITIAL, random_transaction, subqueries

from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import from_pb, to_pb
from fedlab.fedmodel.predicates import compile_sql
from fedlab.fedmodel.subquery import Subquery, SubqueryRelation, evaluate_semijoins
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.fedmodel.wire import federation_pb2 as pb
from fedlab.simulation.scenario import parse_scenario
from fedlab.simulation.simulate import simulate
from fedlab.source_node.engines import file_name, open_store
from fedlab.source_node.memory_store import MemoryStore

ENGINES = ("memory", "sqlite", "duckdb", "postgres")


def open_engine(engine: str, request, folder, name: str, **kw):
    if engine == "memory":
        return MemoryStore(CATALOG, "ds1", INITIAL)
    if engine == "postgres":
        location = fresh_database(request.getfixturevalue("postgres_dsn"), name)
    else:
        location = folder / file_name(name, engine)
    return open_store(CATALOG, "ds1", location, engine, INITIAL, **kw)


def recorded_history(store, seed: int, transactions: int = 30) -> dict[str, dict[int, frozenset]]:
    """Commits random transactions (the same for a seed on every engine); returns every state each
    relation went through, by its BRV, as the store's snapshot showed it after each commit."""
    rng = random.Random(seed)
    reference = MemoryStore(CATALOG, "ds1", INITIAL)   # only to draw transactions valid on the state
    states: dict[str, dict[int, frozenset]] = {}

    def snap():
        for name, (brv, rows) in store.snapshot()[1].items():
            states.setdefault(name, {})[brv] = frozenset(rows)

    snap()
    for i in range(transactions):
        req = random_transaction(rng, i, {n: list(r.values()) for n, r in reference.relations.items()})
        try:
            reference.commit(req)
        except ModelError:
            continue
        store.commit(req)
        snap()
    return states


@pytest.fixture(scope="module", params=ENGINES)
def histories(request, tmp_path_factory):
    store = open_engine(request.param, request, tmp_path_factory.mktemp("as_of"), f"as_of_{request.param}")
    states = recorded_history(store, seed=7)
    yield store, states
    if request.param != "memory":
        store.close()


@st.composite
def earlier(draw, sq: Subquery, brv: dict[str, int]) -> Subquery:
    """`sq` asking each of its relations (or some) as of a version from 1 to the current one."""
    names = [r.relation for r in sq.relations]
    asked = draw(st.lists(st.sampled_from(names), unique=True, min_size=1, max_size=len(names)))
    return Subquery(sq.id, sq.source, sq.relations, sq.probe,
                    tuple((r, draw(st.integers(1, brv[r]))) for r in sorted(asked)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_an_answer_as_of_earlier_versions_is_the_answer_those_states_gave(histories, data):
    store, states = histories
    sq = data.draw(earlier(data.draw(subqueries()), dict(store.brv)))
    versions = {**store.brv, **dict(sq.as_of)}
    expected = evaluate_semijoins(sq, CATALOG, lambda r: states[r][versions[r]],
                                  lambda r, sql: compile_sql(sql, CATALOG.relation(r)))
    got = store.answer(sq)
    assert got.dsv == store.dsv
    assert {a.relation: (a.brv, sorted(a.rows, key=repr)) for a in got.relations} == \
        {r.relation: (versions[r.relation], sorted(expected[r.relation], key=repr)) for r in sq.relations}


def test_the_history_of_every_engine_is_the_same(request, tmp_path):
    """The recorded states (the reference of the test above) agree across engines: the same
    random transactions made the same histories."""
    seen = []
    for engine in ENGINES:
        store = open_engine(engine, request, tmp_path, f"same_{engine}")
        seen.append(recorded_history(store, seed=7, transactions=12))
        if engine != "memory":
            store.close()
    assert all(s == seen[0] for s in seen[1:])


WHOLE_R = (SubqueryRelation("R", None, (), ()),)


@pytest.mark.parametrize("engine", ENGINES)
def test_versions_the_warehouse_applied_are_forgotten_and_answered_at_the_current_state(engine, request, tmp_path):
    store = open_engine(engine, request, tmp_path, f"forget_{engine}")
    store.commit(TransactionRequest("t1", inserts={"R": [(7, "g", 1.0, None)]}))
    store.commit(TransactionRequest("t2", deletes={"R": [(1,)]}))
    current = set(store.answer(Subquery("q", "ds1", WHOLE_R, ())).relations[0].rows)
    at_1 = store.answer(Subquery("q", "ds1", WHOLE_R, (), (("R", 1),))).relations[0]
    assert at_1.brv == 1 and set(at_1.rows) == set(INITIAL["R"])
    store.applied_through(2)     # the warehouse's view reflects t1: nobody asks below R's BRV 2
    below = store.answer(Subquery("q", "ds1", WHOLE_R, (), (("R", 1),))).relations[0]
    assert below.brv == 3 and set(below.rows) == current
    at_2 = store.answer(Subquery("q", "ds1", WHOLE_R, (), (("R", 2),))).relations[0]
    assert at_2.brv == 2 and set(at_2.rows) == {*INITIAL["R"], (7, "g", 1.0, None)}
    with pytest.raises(ModelError, match=r"^sub-query q: R is at version 3, it cannot be read as of 4$"):
        store.answer(Subquery("q", "ds1", WHOLE_R, (), (("R", 4),)))
    if engine != "memory":
        store.close()


@pytest.mark.parametrize("engine", ["sqlite", "duckdb", "postgres"])
def test_a_reopened_store_answers_as_of_the_versions_of_its_unacknowledged_notifications(engine, request, tmp_path):
    store = open_engine(engine, request, tmp_path, f"reopen_{engine}")
    store.commit(TransactionRequest("t1", inserts={"R": [(7, "g", 1.0, None)]}))
    store.acknowledge(2)
    store.commit(TransactionRequest("t2", deletes={"R": [(1,)]}))
    location = store.path
    store.close()
    store = open_store(CATALOG, "ds1", location, engine)
    at_2 = store.answer(Subquery("q", "ds1", WHOLE_R, (), (("R", 2),))).relations[0]
    assert at_2.brv == 2 and set(at_2.rows) == {*INITIAL["R"], (7, "g", 1.0, None)}
    below = store.answer(Subquery("q", "ds1", WHOLE_R, (), (("R", 1),))).relations[0]
    assert below.brv == 3     # t1 was acknowledged before the restart: its changes are gone
    store.close()


def test_change_tables_stay_bounded_once_the_warehouse_acknowledged_and_applied_them(postgres_dsn):
    dsn = fresh_database(postgres_dsn, "as_of_prune")
    store = open_store(CATALOG, "ds1", dsn, "postgres", INITIAL, prune_applied=True)
    sizes = []
    for i in range(60):
        store.commit(TransactionRequest(f"t{i}", inserts={"T": [(100 + i, "w")]}, deletes={"T": [(100 + i - 1,)]}
                                        if i else {}))
        store.acknowledge(store.dsv)
        store.applied_through(store.dsv - 3)     # the view lags three transactions behind
        with psycopg.connect(dsn) as con:
            sizes.append(con.execute("SELECT (SELECT count(*) FROM fedlab.changes) + (SELECT count(*) FROM fedlab.log)")
                         .fetchone()[0])
    assert max(sizes[10:]) == sizes[-1] <= 3 * 2 + 3   # three transactions' rows and log entries
    at = store.answer(Subquery("q", "ds1", (SubqueryRelation("T", None, (), ()),), (), (("T", store.brv["T"] - 2),)))
    assert at.relations[0].brv == store.brv["T"] - 2 and (157, "w") in at.relations[0].rows
    store.close()


def test_as_of_travels_on_the_wire_and_a_bad_one_is_refused():
    sq = Subquery("q", "ds1", WHOLE_R, (), (("R", 3),))
    assert from_pb(to_pb(sq, CATALOG), CATALOG) == sq
    bad = to_pb(sq, CATALOG)
    bad.as_of["S"] = 2
    with pytest.raises(ModelError, match="as_of names 'S' at version 2; it must name a relation of the sub-query"):
        from_pb(bad, CATALOG)
    assert isinstance(bad, pb.Subquery)


# ---- the warehouse's side: versioned maintenance in the simulator ----

def restart_under_a_task(restart: bool) -> dict:
    """t1's sub-query to ds2 waits (held) while t2 changes R2 there and its notification is
    acknowledged; with `restart`, ds2's process then restarts and keeps no recent changes."""
    steps = [{"commit": {"source": "ds1", "id": "t1", "insert": {"R1": [["a2", "b1"]]}}},
             {"hold": {"queries_to": "ds2"}},
             {"deliver": {"notification": "t1"}},
             {"commit": {"source": "ds2", "id": "t2", "delete": {"R2": [["b1", "c1"]]}, "insert": {"R2": [["b2", "c2"]]}}},
             {"deliver": {"notification": "t2"}},
             {"tick": "timers"}]   # a batch makes t2 durable, so ds2 has it acknowledged
    steps += [{"restart": {"source": "ds2"}}] if restart else [{"release": {"queries_to": "ds2"}}]
    doc = {"name": "versioned under a source restart", "algorithm": "versioned",
           "sources": {"ds1": {"R1": {"columns": ["A", "B"], "key": ["A"]}},
                       "ds2": {"R2": {"columns": ["B", "C"], "key": ["B"]}}},
           "view": "SELECT A, C FROM R1 JOIN R2 ON R1.B = R2.B",
           "initial": {"R1": [["a1", "b1"]], "R2": [["b1", "c1"]]},
           "steps": steps + [{"run": "all"}]}
    return simulate(parse_scenario(doc, "versioned restart"))


@pytest.mark.parametrize("restart, compensations", [(False, 0), (True, 1)])
def test_versioned_compensates_only_what_a_restarted_source_no_longer_reaches(restart, compensations):
    result = restart_under_a_task(restart)
    assert result["consistency"] == "complete"
    assert [s["view"] for s in result["states"]][-2:] == [[["a1", "c1", 1], ["a2", "c1", 1]], []]
    assert result["counters"]["algorithm_compensations"] == compensations
