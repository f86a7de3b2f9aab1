"""The checker's classification (checker.levels) on hand-built histories, with no files and
no federation: one history per consistency level, each the strongest that holds, and one per kind
of violation, each asserting what the checker reports (level, first violation, lost, doubled).
Every history is judged by both oracles, DuckDB and PostgreSQL, which must agree.

tests/test_check_cli.py covers the same levels through `fedlab check` on files; the histories here
are the ones it does not build: sources applied in an order other than their commits, a state
that equals the view at a source state other than the one it claims (strong: section 4.2 asks
for some order-preserving mapping, not the claimed one), one that equals none, views that go back
and forth between source states, a source's states shown backwards, claims that go back between
states of one view, a state showing part of a global transaction, a repeated application that
leaves the view unchanged, a source never heard from. The last test checks the search for an
order-preserving mapping itself against trying every choice.

The federation is the Strobe paper's Fixture A (Examples 1, 3), three sources x, y, z, extended by
two transactions so that a source has two and one is invisible in the view:
  r1(A, B) at x = {(1, 2)}, r2(B, C) at y = {}, r3(C, D) at z = {(3, 4)};  V = r1 |><| r2 |><| r3
  U1 at y (DSV 2): insert r2 (2, 3)     V at x1 y2 = {(1, 2, 3, 4)}
  U2 at x (DSV 2): delete r1 (1, 2)     V at x2 y2 = {}
  U3 at x (DSV 3): insert r1 (5, 2)     V at x3 y2 = {(5, 2, 3, 4)}
  U4 at z (DSV 2): insert r3 (7, 8)     joins nothing; V at y1 is {} whatever x and z
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.transactions import Notification, RelationChange
from fedlab.checker.levels import _at_or_above, _reachable_frontiers, _walk_back, classify
from fedlab.checker.oracle import Oracle, backend_named

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
    with backend_named(request.param, dsn) as backend:
        yield Oracle(CATALOG, VIEW, INITIAL, HISTORY, backend)


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
    # Strobe's outcome of Example 3: U1 and U2 reach the view together; U1 has no state of its own,
    # but the state whose claim moves past it reflects it: not lost.
    v = judge(oracle, [state(U2, 2, 2, 1, EMPTY), state(U4, 2, 2, 2, EMPTY), state(U3, 3, 2, 2, V3)])
    assert (v.level, v.first_violation, v.lost, v.doubled) == ("strong", None, [], [])


def test_strong_when_a_lost_transaction_never_touched_the_view(oracle):
    # U4 never reaches the warehouse, so the last state claims z at 1; the final view equals the
    # view at the final source states all the same (U4 joins nothing), so mapping the last state
    # there keeps the mapping monotone: strong by section 4.2, not complete (U4 is lost).
    v = judge(oracle, [state(U2, 2, 1, 1, EMPTY), state(U1, 2, 2, 1, EMPTY), state(U3, 3, 2, 1, V3)])
    assert (v.level, v.first_violation, v.lost, v.doubled) == ("strong", None, ["z:2"], [])


def test_strong_when_a_state_is_the_view_at_a_source_state_it_does_not_claim(oracle):
    # U1 is applied over the state before U2, as conventional maintenance does (Example 1), and a
    # later state repairs it: the state is the view at x1, not at the x2 it claims. Section 4.2
    # asks for some order-preserving mapping, not the claimed one, and x1 y1, x1 y2, x2 y2, x3 y2
    # is one: strong, though the claims did not hold (the checker rated this weak before).
    v = judge(oracle, [state(U2, 2, 1, 1, EMPTY), state(U1, 2, 2, 1, V1),
                       state(U4, 2, 2, 2, EMPTY), state(U3, 3, 2, 2, V3)])
    assert (v.level, v.claims_held, v.claims_ordered, v.lost, v.doubled) == ("strong", False, True, [], [])
    assert v.explained_level() == ("strong (the states' claimed version vectors did not all hold; "
                                   "a monotone mapping exists)")
    f = v.first_violation
    assert (f["state"], f["transaction"], f["versions"]) == (1, "U1", {"x": 2, "y": 2, "z": 1})
    assert (f["expected"], f["missing"], f["extra"]) == ([], [], [[1, 2, 3, 4, 1]])
    assert f["matches"] == {"x": 1, "y": 2, "z": 1}   # its image under the mapping found
    assert v.order_violation is None


def test_weak_when_the_views_go_back_and_forth_between_source_states(oracle):
    # x's old row comes back after its new one was shown (a stale answer applied late), while the
    # states claim to move forward: each state is the view at some source state, but V1 only at
    # x1 and V3 only at x3, so no mapping keeps x's order.
    v = judge(oracle, [state(U1, 2, 2, 1, V1), state(U3, 3, 2, 1, V3),
                       state(U2, 3, 2, 1, V1), state(U4, 3, 2, 2, V3)])
    assert (v.level, v.claims_held, v.lost, v.doubled) == ("weak", False, [], [])
    assert v.explained_level() == ("weak (the states' claimed version vectors did not all hold; "
                                   "no monotone mapping exists)")
    f = v.first_violation
    assert (f["state"], f["transaction"], f["versions"], f["matches"]) == (
        0, "U1", {"x": 2, "y": 2, "z": 1}, {"x": 1, "y": 2, "z": 1})
    o = v.order_violation
    assert (o["state"], o["transaction"]) == (2, "U2")
    assert o["matches"] == [{"x": 1, "y": 2, "z": 1}, {"x": 1, "y": 2, "z": 2}]
    assert o["not_below"] == [{"x": 3, "y": 2, "z": 1}]   # where the states before it map, at the lowest


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
    # Each state is right for the state it claims, but x is shown at DSV 3 before DSV 2, and no
    # other source state has those views in order.
    v = judge(oracle, [state(U1, 1, 2, 1, V1), state(U3, 3, 2, 1, V3),
                       state(U2, 2, 2, 1, EMPTY), state(U4, 3, 2, 2, V3)])
    assert (v.level, v.first_violation, v.lost, v.doubled) == ("weak", None, [], [])
    assert (v.claims_held, v.claims_ordered) == (True, False)
    assert v.explained_level() == "weak (the states' claimed version vectors held but are out of order; no monotone mapping exists)"
    assert (v.order_violation["state"], v.order_violation["not_below"]) == (2, [{"x": 3, "y": 2, "z": 1}])


def test_claims_that_go_back_between_states_of_one_view_are_strong(oracle):
    # The second state claims x1 after the first claimed x2: the claims go back in x, but both
    # states hold the empty view, the view at x1 y1 z1 too, so mapping both there keeps order.
    v = judge(oracle, [state(U2, 2, 1, 1, EMPTY), state(U4, 1, 1, 2, EMPTY),
                       state(U1, 2, 2, 2, EMPTY), state(U3, 3, 2, 2, V3)])
    assert (v.level, v.first_violation, v.order_violation) == ("strong", None, None)
    assert (v.claims_held, v.claims_ordered) == (True, False)


def test_a_state_showing_part_of_a_global_transaction_is_only_weak(oracle):
    # U2 (x) and U1 (y) as the two parts of one global transaction G (section 3.1): V1 is the
    # view only at x1 y2, after G's part at y and before its part at x, a state no serial schedule
    # of the sources passes through. The Strobe paper's Example 5 (T-Strobe) is such a run.
    states = [state(U1, 1, 2, 1, V1), state(U2, 2, 2, 1, EMPTY), state(U4, 2, 2, 2, EMPTY), state(U3, 3, 2, 2, V3)]
    assert judge(oracle, states).level == "complete"   # as separate local transactions
    v = classify(oracle, states, states[-1]["view"], global_transactions={"U1": "G", "U2": "G"})
    assert (v.level, v.claims_held, v.claims_ordered, v.first_violation) == ("weak", True, False, None)
    o = v.order_violation
    assert (o["state"], o["matches"], o["split"][0]) == (0, [], {"x": 1, "y": 2, "z": 1})


# ---- the search for an order-preserving mapping ----

VECTORS = st.tuples(st.integers(1, 3), st.integers(1, 3))


@given(st.lists(st.lists(VECTORS, max_size=4, unique=True), min_size=1, max_size=5))
@example([[(2, 1), (1, 2)], [(3, 1)]])   # the smallest vector by sum, (1, 2), leads nowhere
def test_the_mapping_search_finds_a_mapping_exactly_when_one_exists(candidates):
    start = (1, 1)
    exists = any(all(_at_or_above(after, before) for before, after in zip((start, *chain), chain))
                 for chain in itertools.product(*candidates))
    frontiers = _reachable_frontiers(candidates, start)
    assert (len(frontiers) == len(candidates)) == exists
    if exists:
        mapping = _walk_back(frontiers)
        assert all(v in c for v, c in zip(mapping, candidates))
        assert all(_at_or_above(after, before) for before, after in zip((start, *mapping), mapping))
