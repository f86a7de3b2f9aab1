"""Aggregate views (fedmodel.aggregate_view, warehouse.core.aggregate_state): GROUP BY with
aggregates and DISTINCT kept from the join's deltas, each state compared with the DuckDB oracle's
evaluation of the user's SQL (an independent recomputation)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedlab.fedmodel.aggregate_view import AggregateView, parse_query
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.simulation.matrix import broken_assumptions
from fedlab.simulation.scenario import LEVELS, load_scenario
from fedlab.simulation.simulate import simulate
from fedlab.warehouse.core import registry
from fedlab.warehouse.core.aggregate_state import AggregateState

CATALOG = Catalog.from_dict({"sources": {
    "x": {"R1": {"columns": ["A", "B"], "types": ["BIGINT", "BIGINT"], "key": ["A"]}},
    "y": {"R2": {"columns": ["K", "B", "C"], "types": ["BIGINT", "BIGINT", "BIGINT"], "key": ["K"]}}}})
SCENARIOS = sorted((Path(__file__).parent / "scenarios").glob("aggregate_*.yaml"))


def aggregate_view(sql: str) -> AggregateView:
    parsed = parse_query(sql, CATALOG)
    assert isinstance(parsed, AggregateView)
    return parsed


def test_groups_appear_change_and_disappear_and_min_max_survive_deleting_the_extreme():
    s = aggregate_view("SELECT R1.A, COUNT(*), SUM(C), MIN(C), MAX(C), AVG(C) FROM R1 JOIN R2 ON R1.B = R2.B GROUP BY R1.A")
    assert [o.name for o in s.join.outputs] == ["A", "C"] and s.join.has_count   # R2's key is not shown
    state = AggregateState(s, {(1, 5): 1, (1, 7): 2})
    assert state.rows() == {(1, 3, 19, 5, 7, 19 / 3): 1}
    assert state.apply({(1, 7): -2}) == {(1, 3, 19, 5, 7, 19 / 3): -1, (1, 1, 5, 5, 5, 5.0): 1}
    assert state.apply({(1, 5): -1, (2, 4): 1}) == {(1, 1, 5, 5, 5, 5.0): -1, (2, 1, 4, 4, 4, 4.0): 1}
    assert state.apply({(2, 9): 1, (2, 4): -1}) == {(2, 1, 4, 4, 4, 4.0): -1, (2, 1, 9, 9, 9, 9.0): 1}
    assert state.rows() == {(2, 1, 9, 9, 9, 9.0): 1}


def test_a_change_that_leaves_every_group_as_it_was_changes_nothing():
    state = AggregateState(aggregate_view("SELECT R1.A, MAX(C) FROM R1 JOIN R2 ON R1.B = R2.B GROUP BY R1.A"),
                         {(1, 5): 1, (1, 7): 1})
    assert state.apply({(1, 5): -1, (1, 6): 1}) == {}


def test_nulls_are_skipped_by_aggregates_and_counted_by_count_star():
    state = AggregateState(aggregate_view("SELECT R1.A, COUNT(*), COUNT(C), SUM(C), MIN(C) FROM R1 JOIN R2 ON R1.B = R2.B "
                                 "GROUP BY R1.A"), {(1, None): 2})
    assert state.rows() == {(1, 2, 0, None, None): 1}
    assert state.apply({(1, 4): 1}) == {(1, 2, 0, None, None): -1, (1, 3, 1, 4, 4): 1}


def test_an_aggregate_without_group_by_has_its_row_over_an_empty_join():
    s = aggregate_view("SELECT COUNT(*), SUM(C), MAX(C) FROM R1 JOIN R2 ON R1.B = R2.B")
    assert [o.name for o in s.join.outputs] == ["C"]
    state = AggregateState(s, {})
    assert state.rows() == {(0, None, None): 1}
    assert state.apply({(4,): 1}) == {(0, None, None): -1, (1, 4, 4): 1}
    assert state.apply({(4,): -1}) == {(1, 4, 4): -1, (0, None, None): 1}


def test_distinct_shows_a_row_while_any_join_row_gives_it():
    state = AggregateState(aggregate_view("SELECT DISTINCT R2.C FROM R1 JOIN R2 ON R1.B = R2.B"), {(5,): 2})
    assert state.rows() == {(5,): 1}
    assert state.apply({(5,): -1}) == {}
    assert state.apply({(5,): -1, (6,): 3}) == {(5,): -1, (6,): 1}


@pytest.mark.parametrize("sql, says", [
    ("SELECT R1.A, COUNT(*) FROM R1 GROUP BY R1.A HAVING COUNT(*) > 1", "HAVING is not supported"),
    ("SELECT R1.B, COUNT(*) FROM R1 GROUP BY R1.A", "R1.B in the select list must be in GROUP BY or aggregated"),
    ("SELECT R1.A, STDDEV(R1.B) FROM R1 GROUP BY R1.A", "an aggregate (STDDEV)"),
    ("SELECT COUNT(DISTINCT R1.B) FROM R1", "COUNT(DISTINCT ...) is not supported in COUNT(DISTINCT R1.B)"),
    ("SELECT SUM(*) FROM R1", "SUM(*) is not an aggregate"),
])
def test_what_an_aggregate_view_cannot_be_is_refused_in_one_line(sql, says):
    with pytest.raises(ModelError) as err:
        parse_query(sql, CATALOG)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_select_project_join_view_stays_one():
    view = parse_query("SELECT R1.A, R2.C FROM R1 JOIN R2 ON R1.B = R2.B", CATALOG)
    assert not isinstance(view, AggregateView) and view.join is view


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
@pytest.mark.parametrize("algorithm", registry.names())
def test_every_algorithm_keeps_an_aggregate_view_at_the_level_it_keeps_its_join(path, algorithm):
    result = simulate(load_scenario(path), algorithm)
    # Its claim, unless the scenario breaks an assumption (FIFO delivery, but several sources and
    # multi-update transactions): the matrix's fifo cell.
    if not broken_assumptions(algorithm, "fifo"):
        claim = registry.get(algorithm).level
        assert LEVELS.index(result["consistency"]) >= LEVELS.index(claim), result["checker"]["first_violation"]
    assert sorted(map(tuple, result["view"])) == sorted(load_scenario(path).expect_view)

