"""Aggregate views and self-joins live (fedmodel.aggregate_view,
warehouse.core.occurrences): Ray source actors, the warehouse on Spark with Delta, GROUP BY with
aggregates over a join that reads a relation twice, kept from the join's deltas under dropped
messages and a warehouse restart, judged by the checker (its DuckDB oracle evaluates the user's aggregate SQL)
and compared with a recomputation of that SQL over the committed history."""

from __future__ import annotations

import pytest
from live_support import MirroredLoad

from fedlab.checker.oracle import Oracle, comparable
from fedlab.live import delta_view
from fedlab.live.check import check
from fedlab.live.federation import Federation
from fedlab.simulation.scenario import parse_scenario

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]

SCENARIO = {
    "name": "live aggregate view",
    "sources": {
        "x": {"r1": {"columns": ["A", "B"], "types": ["BIGINT", "BIGINT"], "key": ["A"]}},
        "y": {"r2": {"columns": ["K2", "B", "C"], "types": ["BIGINT", "BIGINT", "DOUBLE"], "key": ["K2"]}},
    },
    # An aggregate over a self-join: pairs of r1 rows sharing a B, with r2's rows of that B.
    "view": "SELECT r1.B, COUNT(*) AS n, SUM(r2.C) AS total, MIN(r2.C) AS low, MAX(r1b.A) AS high, AVG(r2.C) AS mean "
            "FROM r1 JOIN r2 ON r1.B = r2.B JOIN r1 AS r1b ON r1b.B = r2.B GROUP BY r1.B",
    "initial": {"r1": [[1, 2], [2, 2], [3, 3]], "r2": [[1, 2, 0.5], [2, 3, 1.25], [3, 3, 2.0]]},
    "steps": [],
}


def test_an_aggregate_over_a_self_join_is_kept_live_through_lost_messages_and_a_warehouse_restart(spark, ray_runtime, tmp_path):
    scenario = parse_scenario(dict(SCENARIO), "live aggregate")
    run_dir = tmp_path / "run"
    fed = Federation(scenario.catalog, scenario.view.sql, scenario.initial, run_dir, spark)
    load = MirroredLoad(scenario, fed.commit, workload_seed=7, choice_seed=8)
    fed.start()
    try:
        for source in fed.actors:
            fed.control(source).set_faults(notification_drop=0.2, answer_drop=0.1)
        load.commit(12)
        fed.restart_warehouse()
        load.commit(12)
        for source in fed.actors:
            fed.control(source).set_faults(notification_drop=0.0, answer_drop=0.0)
        assert fed.wait_until_applied(timeout=90), fed.warehouse.status()
        fed.warehouse.refresh(durable=True)
        view = fed.warehouse.view_rows()
        assert fed.read_view() == view
    finally:
        fed.stop()
    oracle = Oracle(scenario.catalog, scenario.view.sql, scenario.initial, load.history)
    assert oracle.view_at(oracle.final_versions()) == {tuple(map(comparable, r)): c for r, c in view.items()}
    verdict = check(run_dir)
    assert verdict.level == "complete" and verdict.transactions == 24, verdict.first_violation
    shown = delta_view.read(str(run_dir / "warehouse" / "delta"), scenario.view)
    assert shown["columns"] == ["B", "n", "total", "low", "high", "mean"]
    assert dict(shown["rows"]) == view
