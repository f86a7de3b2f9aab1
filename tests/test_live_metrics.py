"""Every process of a live run serves its metrics (issue 71), and they agree with what the run
reports by other means: three source actors (Ray, gRPC, SQLite), a warehouse keeping two views
by two algorithms (Spark, Delta), and the load driving them, each at the address the run file
names. At the end each view's applied DSVs are the sources' own, nothing is behind, the counts
are the checker's, and `promtool check metrics` passes on every page; `fedlab top` shows them."""

from __future__ import annotations

import pytest
from live_support import FIXTURE_A, MirroredLoad
from test_metrics import page, promtool_check

from fedlab.checker.oracle import Oracle
from fedlab.cli import main
from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER
from fedlab.live.check import check
from fedlab.live.federation import Federation
from fedlab.live.runfile import RunFile
from fedlab.live.top import endpoints, scrape, select
from fedlab.loadgen.driver import DriveResult, drive
from fedlab.simulation.scenario import parse_scenario
from fedlab.warehouse.settings import WarehouseSettings

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]

PAIRS = "SELECT r2.K2, r3.D FROM r2 JOIN r3 ON r2.C = r3.C"


class Drawn:
    """MirroredLoad's random valid transactions as a stream for the driver: each is drawn against
    its source's mirror and committed to it as it is drawn (the driver commits each source's in
    stream order, so the live source gives it the mirror's DSV)."""

    def __init__(self, load: MirroredLoad):
        self.load = load

    def next(self):
        load = self.load
        while True:
            source = load.rng.choice(sorted(load.mirrors))
            request = load.workload.transaction(load.mirrors[source])
            if request is not None:
                load.history[source].append(load.mirrors[source].commit(request))
                return source, request


def test_every_process_of_a_live_run_serves_what_the_run_reports(spark, ray_runtime, tmp_path, capsys):
    scenario = parse_scenario(FIXTURE_A, "live")
    run_dir = tmp_path / "run"
    fed = Federation(scenario.catalog, scenario.view.sql, scenario.initial, run_dir, spark, WarehouseSettings())
    fed.add_view("pairs", PAIRS, WarehouseSettings("versioned"))
    load = MirroredLoad(scenario, fed.commit)
    fed.start()
    try:
        result = DriveResult()
        fed.serve_load_metrics(result)
        drive(fed.commit_batch, Drawn(load), sorted(load.mirrors), rate=40, duration=2.0, result=result)
        assert result.committed == load.committed > 40 and result.rejected == 0
        for view in fed.views.values():
            assert fed.wait_until_applied(timeout=180, warehouse=view), view.status()
            view.refresh(durable=True)
        processes = endpoints(RunFile.read(run_dir).metrics)
        assert sorted(processes) == ["load", "source x", "source y", "source z", f"warehouse {DEFAULT_SUBSCRIBER}"]
        scraped = {p: scrape(address) for p, address in processes.items()}
        versions = fed.source_versions()

        commits = 0
        for source, dsv in versions.items():
            served = scraped[f"source {source}"]
            assert list(select(served, "fedlab_source_dsv").values()) == [dsv]
            commits += sum(select(served, "fedlab_source_commits_total").values())
        assert commits == result.committed
        assert select(scraped["load"], "fedlab_load_committed_total") == {(): result.committed}
        assert select(scraped["load"], "fedlab_load_offered_total") == {(): result.offered}

        warehouse = scraped[f"warehouse {DEFAULT_SUBSCRIBER}"]
        for name, view in fed.views.items():
            status = view.status()
            for source, dsv in versions.items():
                one = {"view": name, "source": source}
                assert list(select(warehouse, "fedlab_warehouse_applied_dsv", **one).values()) == [dsv]
                assert list(select(warehouse, "fedlab_warehouse_durable_dsv", **one).values()) == [dsv]
                assert list(select(warehouse, "fedlab_warehouse_lag_versions", **one).values()) == [0]
                assert list(select(warehouse, "fedlab_warehouse_lag_seconds", **one).values()) == [0]
                assert list(select(warehouse, "fedlab_warehouse_subqueries_in_flight", **one).values()) == [0]
            applied = list(select(warehouse, "fedlab_warehouse_applied_transactions_total", view=name).values())
            assert applied == [status["applied"]] and status["applied"] > 0
            # each applied transaction's staleness observed once
            assert list(select(warehouse, "fedlab_warehouse_staleness_seconds_count", view=name).values()) == applied
            assert list(select(warehouse, "fedlab_warehouse_view_rows", view=name).values()) == [status["view_rows"]]
            assert list(select(warehouse, "fedlab_warehouse_tasks_in_flight", view=name).values()) == [0]
            assert sum(select(warehouse, "fedlab_warehouse_delta_commit_seconds_count", view=name).values()) >= 1
            assert sum(select(warehouse, "fedlab_warehouse_subquery_seconds_count", view=name).values()) > 0
            events = select(warehouse, "fedlab_warehouse_algorithm_events_total", view=name)
            assert {dict(k)["event"]: v for k, v in events.items()} == status["counters"]
        own = select(warehouse, "fedlab_warehouse_applied_transactions_total", view=DEFAULT_SUBSCRIBER)
        assert list(own.values()) == [commits]   # every source transaction, once
        compensations = select(warehouse, "fedlab_warehouse_compensation_steps_total", view=DEFAULT_SUBSCRIBER)
        assert list(compensations.values()) == [fed.warehouse.status()["counters"]["compensations"]]
        for address in processes.values():
            promtool_check(page(address))

        assert main(["top", str(run_dir), "--once", "--interval", "0.2"]) == 0
        shown = capsys.readouterr().out
        assert all(name in shown for name in ("sources", "lag", "views", "pairs", "load: offered", "up: source x")), shown

        for name, sql in ((DEFAULT_SUBSCRIBER, scenario.view.sql), ("pairs", PAIRS)):
            oracle = Oracle(scenario.catalog, sql, scenario.initial, load.history)
            assert fed.views[name].view_rows() == oracle.view_at(oracle.final_versions()), name
    finally:
        fed.stop()
    assert all(scrape(address) is None for address in processes.values())   # each closed with its process
    verdict = check(run_dir)
    assert verdict.level == "complete" and verdict.transactions == commits
