"""The checker along the chain of a run's states, against the full evaluation it replaces.

`fedlab check` no longer evaluates the view at every state's version vector (Oracle.views_at,
whose result is the states times the view): it places each base row at the positions of the
chain of claimed vectors where it exists (loadgen.checker.chain), evaluates the view once over
the whole history (Oracle.changes_along), and replays the warehouse's deltas beside the true
view's (loadgen.checker.replay). These tests pin that the two agree: the placement against its
definition, the view along any chain (claims in order, going back, beyond the final versions)
against the view at each of its states, in both engines.

The federation is the Strobe paper's Fixture A as tests/test_checker_levels.py extends it.
"""

from __future__ import annotations

import doctest

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.checker.chain import state_intervals
from loadgen.checker.oracle import Oracle, engine_named
from loadgen.checker.replay import views
from test_checker_levels import CATALOG, HISTORY, INITIAL, VIEW

SELF_JOIN = "SELECT a.A, b.A FROM r1 a JOIN r1 b ON a.B = b.B"   # r1 read twice, at one DSV of x
FOREVER = 2 ** 62


@pytest.fixture(scope="module", params=["duckdb", "postgres"])
def engine(request):
    dsn = request.getfixturevalue("postgres_dsn") if request.param == "postgres" else None
    with engine_named(request.param, dsn) as engine:
        yield engine


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
def test_the_view_along_any_chain_is_the_view_at_each_of_its_states(engine, chain, view):
    # Fixture A's sources end at x3 y2 z2: x4 and y3 lie beyond them, where the view stays final.
    oracle = Oracle(CATALOG, view, INITIAL, HISTORY, engine)
    changes = oracle.changes_along(chain)
    assert [changes[0], *views(changes[0], changes[1:])] == oracle.views_at(chain)


def test_the_view_changes_along_a_chain_where_its_rows_start_and_end(engine):
    chain = [{"x": 1, "y": 1, "z": 1}, {"x": 2, "y": 1, "z": 1}, {"x": 2, "y": 2, "z": 1},
             {"x": 3, "y": 2, "z": 2}]
    oracle = Oracle(CATALOG, VIEW, INITIAL, HISTORY, engine)
    assert oracle.changes_along(chain) == [{}, {}, {}, {(5, 2, 3, 4): 1}]
    # (1, 2) of r1 exists at x1 only; (1, 2, 3, 4) needs it and U1's (2, 3) of r2 from y2 on: never.
    back = [{"x": 1, "y": 2, "z": 1}, {"x": 2, "y": 2, "z": 1}, {"x": 1, "y": 2, "z": 1}]
    assert oracle.changes_along(back) == [{(1, 2, 3, 4): 1}, {(1, 2, 3, 4): -1}, {(1, 2, 3, 4): 1}]


def test_the_chain_and_oracle_doctests_pass():
    import loadgen.checker.chain
    import loadgen.checker.oracle

    for module in (loadgen.checker.chain, loadgen.checker.oracle):
        assert doctest.testmod(module).failed == 0
