"""The checker along the chain of a run's states, against the full evaluation it replaces.

`fedlab check` no longer evaluates the view at every state's version vector (Oracle.views_at,
whose result is the states times the view): it places each base row at the positions of the
chain of claimed vectors where it exists (checker.chain), evaluates the view once over
the whole history (Oracle.changes_along), and replays the warehouse's deltas beside the true
view's (checker.replay). These tests pin that the two agree: the placement against its
definition, the view along any chain (claims in order, going back, beyond the final versions)
against the view at each of its states, in both backends; the verdict of states given by their
deltas (as `fedlab check` reads them) against that of states given by their whole views (as the
simulator keeps them), and the first violation against the first state the full evaluation
finds wrong, on the hand-built histories of tests/test_checker_levels.py, whose federation (the
Strobe paper's Fixture A, extended) these tests share; and a synthetic run of 20,000 states,
checked in about a second (printed, not asserted).
"""

from __future__ import annotations

import doctest
import random
import time
from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_checker_levels import BOTH, CATALOG, EMPTY, HISTORY, INITIAL, U1, U2, U3, U4, V1, V3, VIEW, state

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.transactions import Modification, Notification, RelationChange
from fedlab.checker.chain import state_intervals
from fedlab.checker.levels import classify
from fedlab.checker.oracle import Oracle, backend_named
from fedlab.checker.replay import add, state_delta, views

SELF_JOIN = "SELECT a.A, b.A FROM r1 a JOIN r1 b ON a.B = b.B"   # r1 read twice, at one DSV of x
FOREVER = 2 ** 62


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def backend(request):
    dsn = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else None
    with backend_named(request.param, dsn) as backend:
        yield backend


# ---- the state-index mapping ----

INTERVALS = st.lists(st.tuples(st.integers(1, 6), st.integers(1, 7)).map(sorted)
                     .map(lambda i: (i[0], FOREVER if i[1] == 7 else i[1])), max_size=8)


@given(INTERVALS, st.lists(st.integers(1, 6), min_size=1, max_size=12))
def test_a_row_is_placed_exactly_at_the_positions_whose_dsv_lies_in_its_interval(intervals, dsvs):
    versioned = pa.table([pa.array(range(len(intervals)), pa.int64()), pa.array([i[0] for i in intervals], pa.int64()),
                          pa.array([i[1] for i in intervals], pa.int64())], names=["row", "__vfrom", "__vto"])
    placed = state_intervals(versioned, dsvs).to_pydict()
    spans = list(zip(placed["row"], placed["__from"], placed["__to"]))
    at = {(row, k) for row, start, end in spans for k in range(start, end)}
    assert len(at) == sum(end - start for _, start, end in spans)   # no position twice
    assert at == {(row, k) for row, (vfrom, vto) in enumerate(intervals)
                  for k, dsv in enumerate(dsvs) if vfrom <= dsv < vto}


def test_a_row_alive_on_both_sides_of_a_step_back_keeps_one_interval():
    versioned = pa.table({"__vfrom": [1], "__vto": [FOREVER]})
    assert state_intervals(versioned, [1, 3, 2, 4]).to_pydict() == {"__from": [0], "__to": [4]}


# ---- the view along a chain ----

VECTORS = st.fixed_dictionaries({"x": st.integers(1, 4), "y": st.integers(1, 3), "z": st.integers(1, 3)})


@settings(max_examples=40, deadline=None)
@given(st.lists(VECTORS, min_size=1, max_size=8), st.sampled_from([VIEW, SELF_JOIN]))
def test_the_view_along_any_chain_is_the_view_at_each_of_its_states(backend, chain, view):
    # Fixture A's sources end at x3 y2 z2: x4 and y3 lie beyond them, where the view stays final.
    oracle = Oracle(CATALOG, view, INITIAL, HISTORY, backend)
    changes = oracle.changes_along(chain)
    assert [changes[0], *views(changes[0], changes[1:])] == oracle.views_at(chain)


def test_the_view_changes_along_a_chain_where_its_rows_start_and_end(backend):
    chain = [{"x": 1, "y": 1, "z": 1}, {"x": 2, "y": 1, "z": 1}, {"x": 2, "y": 2, "z": 1},
             {"x": 3, "y": 2, "z": 2}]
    oracle = Oracle(CATALOG, VIEW, INITIAL, HISTORY, backend)
    assert oracle.changes_along(chain) == [{}, {}, {}, {(5, 2, 3, 4): 1}]
    # (1, 2) of r1 exists at x1 only; (1, 2, 3, 4) needs it and U1's (2, 3) of r2 from y2 on: never.
    back = [{"x": 1, "y": 2, "z": 1}, {"x": 2, "y": 2, "z": 1}, {"x": 1, "y": 2, "z": 1}]
    assert oracle.changes_along(back) == [{(1, 2, 3, 4): 1}, {(1, 2, 3, 4): -1}, {(1, 2, 3, 4): 1}]


def test_the_chain_and_oracle_doctests_pass():
    import fedlab.checker.chain
    import fedlab.checker.oracle

    for module in (fedlab.checker.chain, fedlab.checker.oracle):
        assert doctest.testmod(module).failed == 0


# ---- verdicts: states given by their deltas, by their views, and the full evaluation agree ----

HISTORIES = {   # name: (states, the level they keep), each state as tests/test_checker_levels.py builds it
    "complete": ([state(U2, 2, 1, 1, EMPTY), state(U1, 2, 2, 1, EMPTY), state(U4, 2, 2, 2, EMPTY),
                  state(U3, 3, 2, 2, V3)], "complete"),
    "strong, two transactions in one state": (
        [state(U2, 2, 2, 1, EMPTY), state(U4, 2, 2, 2, EMPTY), state(U3, 3, 2, 2, V3)], "strong"),
    "a wrong state, repaired later": (
        [state(U1, 1, 2, 1, V1), state(U3, 3, 2, 1, BOTH), state(U2, 3, 2, 1, V3), state(U4, 3, 2, 2, V3)],
        "convergence"),
    "a wrong state, never repaired": (
        [state(U1, 1, 2, 1, V1), state(U2, 2, 2, 1, V1), state(U4, 2, 2, 2, V1), state(U3, 3, 2, 2, BOTH)], "none"),
    "a lost source": ([state(U1, 1, 2, 1, V1), state(U4, 1, 2, 2, V1)], "none"),
    "a doubled transaction": (
        [state(U1, 1, 2, 1, V1), state(U2, 2, 2, 1, EMPTY), state(U4, 2, 2, 2, EMPTY), state(U4, 2, 2, 2, EMPTY),
         state(U3, 3, 2, 2, V3)], "strong"),
    "claims that go back": (
        [state(U2, 2, 1, 1, EMPTY), state(U4, 1, 1, 2, EMPTY), state(U1, 2, 2, 2, EMPTY), state(U3, 3, 2, 2, V3)],
        "strong"),
    "a state at a source state it does not claim": (
        [state(U2, 2, 1, 1, EMPTY), state(U1, 2, 2, 1, V1), state(U4, 2, 2, 2, EMPTY), state(U3, 3, 2, 2, V3)],
        "strong"),
}


@pytest.fixture
def oracle(backend):
    return Oracle(CATALOG, VIEW, INITIAL, HISTORY, backend)


def by_deltas(states: list[dict], start: dict) -> list[dict]:
    """The states as `fedlab check` reads them from the change log: each with its delta, no view."""
    deltas, before = [], start
    for s in states:
        deltas.append({**{k: v for k, v in s.items() if k != "view"}, "delta": state_delta(s, before)})
        before = s["view"]
    return deltas


def rows(counts: Counter) -> list:
    return sorted(([*row, count] for row, count in counts.items() if count), key=repr)


@pytest.mark.parametrize("name", HISTORIES)
def test_states_given_by_their_deltas_get_the_verdict_of_states_given_by_their_views(oracle, name):
    states, level = HISTORIES[name]
    by_views = classify(oracle, states, states[-1]["view"])
    assert by_views.level == level
    assert classify(oracle, by_deltas(states, EMPTY), states[-1]["view"]).to_dict() == by_views.to_dict()


@pytest.mark.parametrize("name", HISTORIES)
def test_the_first_violation_is_the_first_state_the_full_evaluation_finds_wrong(oracle, name):
    states, _ = HISTORIES[name]
    final = oracle.final_versions()
    # The full evaluation: the view at every state's claim and at the final source state.
    views = [s["view"] for s in states] + [states[-1]["view"]]
    truth = oracle.views_at([s["versions"] for s in states] + [final])
    wrong = [i for i, (view, true) in enumerate(zip(views, truth)) if view != true]
    f = classify(oracle, by_deltas(states, EMPTY), states[-1]["view"]).first_violation
    if not wrong:
        assert f is None
        return
    i = wrong[0]
    assert (f["state"], f["transaction"]) == (i, states[i]["transaction"] if i < len(states) else "(final)")
    assert f["versions"] == (final if i == len(states) else states[i]["versions"])
    assert (f["view"], f["expected"]) == (rows(Counter(views[i])), rows(Counter(truth[i])))
    assert f["missing"] == rows(Counter(truth[i]) - Counter(views[i]))
    assert f["extra"] == rows(Counter(views[i]) - Counter(truth[i]))


def test_a_wrong_initial_view_is_the_first_violation_whether_states_carry_deltas_or_views(oracle):
    states, _ = HISTORIES["complete"]
    wrong_start = {(1, 2, 3, 4): 1}   # the view at x1 y2, not at x1 y1 z1 where the warehouse says it started
    start = {"x": 1, "y": 1, "z": 1}
    by_views = classify(oracle, states, V3, start, wrong_start)
    verdict = classify(oracle, by_deltas(states, wrong_start), V3, start, wrong_start)
    assert verdict.to_dict() == by_views.to_dict()
    f = verdict.first_violation
    assert (verdict.level, f["state"], f["transaction"], f["extra"]) == ("convergence", None, "(initial view)",
                                                                        [[1, 2, 3, 4, 1]])


# ---- at scale ----

SCALE_CATALOG = Catalog.from_dict({"sources": {
    "x": {"r1": {"columns": ["A", "B"], "types": ["BIGINT", "BIGINT"], "key": ["A"]}},
    "y": {"r2": {"columns": ["B", "C"], "types": ["BIGINT", "BIGINT"], "key": ["B"]}}}})
SCALE_VIEW = "SELECT r1.A, r2.C FROM r1 JOIN r2 ON r1.B = r2.B"


def synthetic_run(transactions: int, seed: int = 7):
    """A run of `transactions` modifications at two sources, alternating at random, each applied
    as a state of its own with the view delta a naive join of the changed row gives: (the
    sources' initial rows, their logs, the states)."""
    rng = random.Random(seed)
    r1 = {a: (a, rng.randrange(20)) for a in range(100)}
    r2 = {b: (b, rng.randrange(50)) for b in range(20)}
    initial = {"r1": list(r1.values()), "r2": list(r2.values())}
    log, states, dsv = {"x": [], "y": []}, [], {"x": 1, "y": 1}
    for t in range(transactions):
        source = rng.choice("xy")
        dsv[source] += 1
        delta = Counter()
        if source == "x":
            old = r1[rng.randrange(100)]
            new = r1[old[0]] = (old[0], rng.randrange(20))
            delta[(old[0], r2[old[1]][1])] -= 1
            delta[(new[0], r2[new[1]][1])] += 1
            change = RelationChange("r1", dsv[source], modified=(Modification(old, new),))
        else:
            old = r2[rng.randrange(20)]
            new = r2[old[0]] = (old[0], rng.randrange(50))
            for a, b in r1.values():
                if b == old[0]:
                    delta[(a, old[1])] -= 1
                    delta[(a, new[1])] += 1
            change = RelationChange("r2", dsv[source], modified=(Modification(old, new),))
        log[source].append(Notification(source, dsv[source], f"t{t}", (change,)))
        states.append({"transaction": f"t{t}", "source": source, "dsv": dsv[source], "versions": dict(dsv),
                       "delta": {row: count for row, count in delta.items() if count}})
    return initial, log, states


def test_twenty_thousand_states_are_checked_along_the_chain():
    initial, log, states = synthetic_run(20000)
    oracle = Oracle(SCALE_CATALOG, SCALE_VIEW, initial, log)
    start = oracle.view_at({})
    final = dict(start)
    for s in states:
        add(final, s["delta"])
    began = time.perf_counter()
    verdict = classify(oracle, states, final, {"x": 1, "y": 1}, start)
    print(f"\n20,000 states checked in {time.perf_counter() - began:.1f} s")
    assert (verdict.level, verdict.states, verdict.lost, verdict.doubled) == ("complete", 20000, [], [])
    # One wrong state, 12,345, whose extra row stays: found there, with its diff, and in every later state.
    wrong = [*states[:12345], {**states[12345], "delta": {**states[12345]["delta"], (999, 999): 1}}, *states[12346:]]
    began = time.perf_counter()
    verdict = classify(oracle, wrong, {**final, (999, 999): 1}, {"x": 1, "y": 1}, start)
    print(f"... and with a wrong state in {time.perf_counter() - began:.1f} s")
    f = verdict.first_violation
    assert (verdict.level, f["state"], f["transaction"], f["missing"], f["extra"]) == (
        "none", 12345, "t12345", [], [[999, 999, 1]])
