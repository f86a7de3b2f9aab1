"""Two warehouses over one federation of real source actors (Ray, gRPC, SQLite), each subscribed
by its own name (source_node.subscriptions), maintaining the view by an algorithm of its own and
keeping it in its own Delta tables: one is killed while the other goes on; the sources keep what
the killed one lacks, it catches up when started again, and both views equal the oracle's
recomputation over the committed history and a Spark recomputation over fresh source snapshots.
The checker then judges each warehouse on its own from the run's files, and the sources' message
logs say which subscriber each answer went to."""

from __future__ import annotations

import pytest
import ray
from live_support import FIXTURE_A, MirroredLoad

from fedio.message_log import read as read_message_logs
from loadgen.checker.oracle import Oracle
from loadgen.live import check
from loadgen.live.federation import Federation
from loadgen.live.runfile import RunFile
from loadgen.simulation.scenario import parse_scenario
from warehouse.settings import WarehouseSettings

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]


def test_one_warehouse_killed_while_the_other_goes_on_and_both_stay_right(spark, ray_runtime, tmp_path):
    scenario = parse_scenario(FIXTURE_A, "live")
    fed = Federation(scenario.catalog, scenario.view.sql, scenario.initial, tmp_path / "run", spark,
                     WarehouseSettings())
    load = MirroredLoad(scenario, fed.commit)
    fed.start()
    try:
        second = fed.add_subscriber("w2", WarehouseSettings("versioned"))
        load.commit(40)
        assert fed.wait_until_applied(timeout=180), fed.warehouse.status()
        assert fed.wait_until_applied(timeout=180, warehouse=second), second.status()
        fed.kill_subscriber("w2")
        load.commit(40)
        assert fed.wait_until_applied(timeout=180), fed.warehouse.status()   # not held back by w2
        oracle = Oracle(scenario.catalog, scenario.view.sql, scenario.initial, load.history)
        expected = oracle.view_at(oracle.final_versions())
        assert fed.warehouse.view_rows() == expected == fed.recompute()
        behind = [ray.get(a.health.remote(), timeout=30)["subscribers"] for a in fed.actors.values()]
        assert sum(b["w2"] for b in behind) >= 40, behind   # every one committed since it was killed
        second = fed.restart_subscriber("w2")
        assert fed.wait_until_applied(timeout=180, warehouse=second), second.status()
        assert second.view_rows() == expected
    finally:
        fed.stop()
    run = RunFile.read(tmp_path / "run")
    assert run.subscribers == ["warehouse", "w2"] and run.of("w2").algorithm == "versioned"
    for name in run.subscribers:
        verdict = check.check(tmp_path / "run", subscriber=name)
        assert verdict.level == "complete" and verdict.transactions == 80, (name, verdict.to_dict())
    logs = [p for p in run.of("w2").message_logs().values() if p]
    answered = {e["peer"] for e in read_message_logs(logs) if e["kind"] == "answer" and e["event"] == "sent"}
    assert answered == {"warehouse", "w2"}, answered   # each warehouse's sub-queries, told apart
    at_sources = [e for e in read_message_logs(logs, "w2") if e["node"] != "warehouse"]
    assert at_sources and all(e["peer"] == "w2" for e in at_sources)
