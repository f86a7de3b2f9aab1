"""The checker's classification (loadgen.checker.levels) on hand-built histories, with no files and
no federation: one history per consistency level, each the strongest that holds, and one per kind
of violation, each asserting what the checker reports (level, first violation, lost, doubled).
Every history is judged by both oracles, DuckDB and PostgreSQL, which must agree.

tests/test_check_cli.py covers the same levels through `fedlab check` on files; the histories here
are the ones it does not build: sources applied in an order other than their commits, a state
that equals the view at a source state other than the one it claims, one that equals none, a
source's states shown backwards, a repeated application that leaves the view unchanged, a source
never heard from.

The federation is the Strobe paper's Fixture A (Examples 1, 3), three sources x, y, z, extended by
two transactions so that a source has two and one is invisible in the view:
  r1(A, B) at x = {(1, 2)}, r2(B, C) at y = {}, r3(C, D) at z = {(3, 4)};  V = r1 |><| r2 |><| r3
  U1 at y (DSV 2): insert r2 (2, 3)     V at x1 y2 = {(1, 2, 3, 4)}
  U2 at x (DSV 2): delete r1 (1, 2)     V at x2 y2 = {}
  U3 at x (DSV 3): insert r1 (5, 2)     V at x3 y2 = {(5, 2, 3, 4)}
  U4 at z (DSV 2): insert r3 (7, 8)     joins nothing; V at y1 is {} whatever x and z
"""

from __future__ import annotations

import pytest

from fedmodel.catalog import Catalog
from fedmodel.transactions import Notification, RelationChange
from loadgen.checker.levels import classify
from loadgen.checker.oracle import Oracle, engine_named

CATALOG = Catalog.from_dict({"sources": {
    "x": {"r1": {"columns": ["A", "B"], "types": ["BIGINT", "BIGINT"], "key": ["A"]}},
    "y": {"r2": {"columns": ["B", "C"], "types": ["BIGINT", "BIGINT"], "key": ["B"]}},
    "z": {"r3": {"columns": ["C", "D"], "types": ["BIGINT", "BIGINT"], "key": ["C"]}}}})
VIEW = "SELECT r1.A, r1.B, r2.C, r3.D FROM r1 JOIN r2 ON r1.B = r2.B JOIN r3 ON r2.C = r3.C"
INITIAL = {"r1": [(1, 2)], "r2": [], "r3": [(3, 4)]}
HISTORY = {
    "x": [Notification("x", 2, "U2", (RelationChange("r1", 2, deleted=((1, 2),)),)),
          Notification("x", 3, "U3", (RelationChange("r1", 3, inserted=((5, 2),)),))],
    "y": [Notification("y", 2, "U1", (RelationChange("r2", 2, inserted=((2, 3),)),))],
    "z": [Notification("z", 2, "U4", (RelationChange("r3", 2, inserted=((7, 8),)),))],
}
U1, U2, U3, U4 = ("U1", "y", 2), ("U2", "x", 2), ("U3", "x", 3), ("U4", "z", 2)
EMPTY, V1, V3 = {}, {(1, 2, 3, 4): 1}, {(5, 2, 3, 4): 1}
BOTH = {(1, 2, 3, 4): 1, (5, 2, 3, 4): 1}   # the view at no source state: x never holds both rows


@pytest.fixture(params=["duckdb", "postgres"])
def oracle(request):
    dsn = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else None
    with engine_named(request.param, dsn) as engine:
        yield Oracle(CATALOG, VIEW, INITIAL, HISTORY, engine)


def state(transaction, x, y, z, view) -> dict:
    """The view state the warehouse produced applying `transaction`, claiming source versions x, y, z."""
    txn_id, source, dsv = transaction
    return {"transaction": txn_id, "source": source, "dsv": dsv, "versions": {"x": x, "y": y, "z": z}, "view": view}


def judge(oracle, states):
    return classify(oracle, states, states[-1]["view"])


# ---- each level as the strongest that holds ----

def test_complete_keeps_each_sources_order_not_a_global_one(oracle):
    # x's delete applied before y's insert although nothing orders them: complete all the same.
    v = judge(oracle, [state(U2, 2, 1, 1, EMPTY), state(U1, 2, 2, 1, EMPTY),
                       state(U4, 2, 2, 2, EMPTY), state(U3, 3, 2, 2, V3)])
    assert (v.level, v.first_violation, v.lost, v.doubled) == ("complete", None, [], [])
    assert (v.transactions, v.states) == (4, 4)


def test_strong_when_two_transactions_are_applied_as_one_state(oracle):
    # Strobe's outcome of Example 3: U1 and U2 reach the view together; U1 has no state of its own.
    v = judge(oracle, [state(U2, 2, 2, 1, EMPTY), state(U4, 2, 2, 2, EMPTY), state(U3, 3, 2, 2, V3)])
    assert (v.level, v.first_violation, v.lost, v.doubled) == ("strong", None, ["y:2"], [])


def test_strong_when_a_lost_transaction_never_touched_the_view(oracle):
    # U4 never reaches the warehouse, so the last state claims z at 1; the final view equals the
    # view at the final source states all the same (U4 joins nothing), so mapping the last state
    # there keeps the mapping monotone: strong by section 4.2, not complete (U4 is lost).
    v = judge(oracle, [state(U2, 2, 1, 1, EMPTY), state(U1, 2, 2, 1, EMPTY), state(U3, 3, 2, 1, V3)])
    assert (v.level, v.first_violation, v.lost, v.doubled) == ("strong", None, ["z:2"], [])


def test_weak_when_a_state_is_the_view_at_a_source_state_it_does_not_claim(oracle):
    # U1 is applied over the state before U2, as conventional maintenance does (Example 1), and a
    # later state repairs it: the state is consistent, but with x1, not the x2 it claims.
    v = judge(oracle, [state(U2, 2, 1, 1, EMPTY), state(U1, 2, 2, 1, V1),
                       state(U4, 2, 2, 2, EMPTY), state(U3, 3, 2, 2, V3)])
    assert (v.level, v.lost, v.doubled) == ("weak", [], [])
    f = v.first_violation
    assert (f["state"], f["transaction"], f["versions"]) == (1, "U1", {"x": 2, "y": 2, "z": 1})
    assert (f["expected"], f["missing"], f["extra"]) == ([], [], [[1, 2, 3, 4, 1]])
    assert f["matches"] == {"x": 1, "y": 2, "z": 1}


def test_convergence_when_a_state_matches_no_source_state(oracle):
    # U3 overtakes U2 and is applied without compensation: for one state the view holds a row of
    # x1 and one of x3, which no state of x ever held together; U2 then removes the stale row.
    v = judge(oracle, [state(U1, 1, 2, 1, V1), state(U3, 3, 2, 1, BOTH),
                       state(U2, 3, 2, 1, V3), state(U4, 3, 2, 2, V3)])
    assert (v.level, v.lost, v.doubled) == ("convergence", [], [])
    f = v.first_violation
    assert (f["state"], f["transaction"], f["versions"]) == (1, "U3", {"x": 3, "y": 2, "z": 1})
    assert (f["expected"], f["extra"], f["missing"]) == ([[5, 2, 3, 4, 1]], [[1, 2, 3, 4, 1]], [])
    assert f["matches"] is None


def test_none_when_a_delete_never_reaches_the_view(oracle):
    # The Strobe paper's Example 1: conventional maintenance keeps (1, 2, 3, 4) after U2 deleted it.
    v = judge(oracle, [state(U1, 1, 2, 1, V1), state(U2, 2, 2, 1, V1),
                       state(U4, 2, 2, 2, V1), state(U3, 3, 2, 2, BOTH)])
    assert (v.level, v.lost, v.doubled) == ("none", [], [])
    f = v.first_violation
    assert (f["state"], f["transaction"], f["expected"], f["extra"]) == (1, "U2", [], [[1, 2, 3, 4, 1]])
    assert "matches" not in f   # no search for a matching state once convergence fails


# ---- each kind of violation ----

def test_a_source_never_heard_from_is_lost_and_the_final_view_is_the_violation(oracle):
    v = judge(oracle, [state(U1, 1, 2, 1, V1), state(U4, 1, 2, 2, V1)])
    assert (v.level, v.lost, v.doubled) == ("none", ["x:2", "x:3"], [])
    f = v.first_violation
    assert (f["state"], f["transaction"], f["versions"]) == (2, "(final)", {"x": 3, "y": 2, "z": 2})
    assert (f["view"], f["expected"]) == ([[1, 2, 3, 4, 1]], [[5, 2, 3, 4, 1]])
    assert (f["missing"], f["extra"]) == ([[5, 2, 3, 4, 1]], [[1, 2, 3, 4, 1]])


def test_a_transaction_applied_twice_is_doubled_even_when_the_view_does_not_show_it(oracle):
    # U4 joins nothing, so its repeat leaves every state right; only the count of states shows it.
    v = judge(oracle, [state(U1, 1, 2, 1, V1), state(U2, 2, 2, 1, EMPTY), state(U4, 2, 2, 2, EMPTY),
                       state(U4, 2, 2, 2, EMPTY), state(U3, 3, 2, 2, V3)])
    assert (v.level, v.first_violation, v.lost, v.doubled) == ("strong", None, [], ["z:2"])


def test_states_that_show_a_sources_states_out_of_order_are_only_weak(oracle):
    # Each state is right for the state it claims, but x is shown at DSV 3 before DSV 2.
    v = judge(oracle, [state(U1, 1, 2, 1, V1), state(U3, 3, 2, 1, V3),
                       state(U2, 2, 2, 1, EMPTY), state(U4, 3, 2, 2, V3)])
    assert (v.level, v.first_violation, v.lost, v.doubled) == ("weak", None, [], [])
