"""Two warehouses over one federation of real source actors (Ray, gRPC, SQLite), each subscribed
by its own name (source_node.subscriptions): the federation's own keeps two views from one
subscription (warehouse.view_group), each by an algorithm of its own in Delta tables of its own,
and the other keeps the first view by the second algorithm.

The first warehouse is held as a frozen process is while the second keeps up; the second is then
killed while the first goes on; the sources keep what it lacks, and it catches up when started
again. The first is restarted as a crash would, both its views from
Delta. Every view equals the oracle's recomputation over the committed history (and a Spark
recomputation over fresh source snapshots). The checker then judges each view on its own from
the run's files; the sources' message logs say which subscriber each answer went to, and show
that the two views of one warehouse were sent each notification once, over one connection."""

from __future__ import annotations

import json

import grpc
import psutil
import pytest
from live_support import FIXTURE_A, MirroredLoad

from fedlab.fedio.message_log import read as read_message_logs
from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER
from fedlab.checker.oracle import Oracle
from fedlab.cli import main
from fedlab.live import check
from fedlab.live.federation import Federation
from fedlab.live.runfile import RunFile
from fedlab.simulation.scenario import parse_scenario
from fedlab.warehouse.settings import WarehouseSettings

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]

PAIRS = "SELECT r2.K2, r3.D FROM r2 JOIN r3 ON r2.C = r3.C"   # a second view, over two of the three sources


def test_warehouses_and_views_over_one_federation_each_stay_right_through_kills(spark, ray_runtime, tmp_path, capsys):
    scenario = parse_scenario(FIXTURE_A, "live")
    fed = Federation(scenario.catalog, scenario.view.sql, scenario.initial, tmp_path / "run", spark,
                     WarehouseSettings())
    fed.add_view("pairs", PAIRS, WarehouseSettings("versioned"))
    load = MirroredLoad(scenario, fed.commit)
    fed.start()
    try:
        second = fed.add_subscriber("w2", WarehouseSettings("versioned"))
        assert list(fed.groups) == [DEFAULT_SUBSCRIBER, "w2"] and list(fed.views) == [DEFAULT_SUBSCRIBER, "pairs", "w2"]
        load.commit(40)
        for view in fed.views.values():
            assert fed.wait_until_applied(timeout=180, warehouse=view), view.status()
        connections = _connections_to(fed.addresses)
        # The first warehouse held, as a frozen process is: the second keeps up meanwhile, and
        # the first takes nothing until it resumes (a subscriber lagging behind the others).
        fed.groups[DEFAULT_SUBSCRIBER].pause()
        held = {name: fed.views[name].status()["applied"] for name in (DEFAULT_SUBSCRIBER, "pairs")}
        load.commit(20)
        assert fed.wait_until_applied(timeout=180, warehouse=second), second.status()
        assert {name: fed.views[name].status()["applied"] for name in held} == held
        fed.groups[DEFAULT_SUBSCRIBER].resume()
        fed.kill_subscriber("w2")
        load.commit(20)
        for name in (DEFAULT_SUBSCRIBER, "pairs"):   # not held back by w2
            assert fed.wait_until_applied(timeout=180, warehouse=fed.views[name]), fed.views[name].status()
        fed.restart_warehouse()   # both its views, as a crash would: each restores from its Delta tables
        load.commit(20)
        behind = [fed.control(source).health(timeout=30)["subscribers"] for source in fed.actors]
        assert sum(b["w2"] for b in behind) >= 40, behind   # every one committed since it was killed
        second = fed.restart_subscriber("w2")
        for view in fed.views.values():
            assert fed.wait_until_applied(timeout=180, warehouse=view), view.status()
        expected = {}
        for name, sql in [(DEFAULT_SUBSCRIBER, scenario.view.sql), ("pairs", PAIRS)]:
            oracle = Oracle(scenario.catalog, sql, scenario.initial, load.history)
            expected[name] = oracle.view_at(oracle.final_versions())
            assert fed.views[name].view_rows() == expected[name], name
        assert second.view_rows() == expected[DEFAULT_SUBSCRIBER] == fed.recompute()
        assert fed.read_view("pairs") == expected["pairs"]
        assert main(["refresh", str(tmp_path / "run"), "--view", "pairs"]) == 0   # durable in its Delta tables
        with pytest.raises(grpc.RpcError) as refused:   # a warehouse of two views: a reader names one
            fed.read_view()
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "warehouse, pairs" in refused.value.details()
    finally:
        fed.stop()
    # Every view's channel to a source, the other warehouse's too, is one connection (gRPC's
    # subchannel pool: same target, same options), beside the load client's.
    assert all(n == 2 for n in connections.values()), connections
    capsys.readouterr()
    assert main(["view", str(tmp_path / "run"), "--view", "pairs", "--json", "--limit", "0"]) == 0
    assert {tuple(r[:-1]): r[-1] for r in json.loads(capsys.readouterr().out)["rows"]} == expected["pairs"]
    run = RunFile.read(tmp_path / "run")
    assert run.subscribers == [DEFAULT_SUBSCRIBER, "pairs", "w2"]
    assert run.of("pairs").subscriber == DEFAULT_SUBSCRIBER and run.of("pairs").algorithm == "versioned"
    assert run.of("w2").subscriber == "w2" and run.of("w2").algorithm == "versioned"
    for name in run.subscribers:
        verdict = check.check(tmp_path / "run", subscriber=name)
        assert verdict.level == "complete" and verdict.transactions == 100, (name, verdict.to_dict())
    logs = [p for p in run.of("w2").message_logs().values() if p]
    answered = {e["peer"] for e in read_message_logs(logs) if e["kind"] == "answer" and e["event"] == "sent"}
    assert answered == {"warehouse", "w2"}, answered   # each warehouse's sub-queries, told apart
    at_sources = [e for e in read_message_logs(logs, "w2") if e["node"] != "warehouse"]
    assert at_sources and all(e["peer"] == "w2" for e in at_sources)
    # One subscription for two views: each notification sent once (and again only when resent),
    # and each view received every copy that came.
    sent = [e for e in read_message_logs([p for s, p in run.message_logs().items() if s in scenario.catalog.sources and p])
            if e["kind"] == "notification" and e["event"] == "sent" and e["peer"] == DEFAULT_SUBSCRIBER]
    assert len({(e["node"], e["dsv"]) for e in sent}) == 100
    received = [{(e["peer"], e["dsv"]) for e in read_message_logs([run.of(name).message_logs()["warehouse"]])
                 if e["kind"] == "notification" and e["event"] == "received"} for name in (DEFAULT_SUBSCRIBER, "pairs")]
    assert received[0] == received[1] and len(received[0]) == 100


def _connections_to(addresses: dict[str, str]) -> dict[str, int]:
    """Per source, this process's TCP connections to its server."""
    ports = {int(a.rsplit(":", 1)[1]): s for s, a in addresses.items()}
    counts = dict.fromkeys(addresses, 0)
    for c in psutil.Process().net_connections(kind="tcp"):
        if c.raddr and c.raddr.port in ports and c.status == psutil.CONN_ESTABLISHED:
            counts[ports[c.raddr.port]] += 1
    return counts
