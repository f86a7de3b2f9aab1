"""The Prometheus endpoints (fedio.metrics_endpoint) of a source and of the load, scraped over HTTP
and read back by `fedlab top`'s own scraper (live.top), against what the source and the driver
report by other means; the lag a view keeps per source (warehouse.lag); and the quantiles `fedlab
top` reads from a histogram's buckets. No Ray, no Spark: the warehouse's endpoint is
tests/test_live_metrics.py's."""

from __future__ import annotations

import subprocess
import time
import urllib.request

import pytest
from prerequisites import require

from fedlab.fedio.channels import client_channel
from fedlab.fedio.metrics_endpoint import BucketCounts, MetricsEndpoint, new_registry
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.messages import to_pb
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.fedmodel.wire import rpc
from fedlab.live.top import quantile, scrape, select
from fedlab.preflight import PROMTOOL, promtool_path
from fedlab.loadgen.driver import DriveResult, drive, grpc_committer
from fedlab.loadgen.metrics import LoadCollector
from fedlab.source_node.control import SourceControl
from fedlab.source_node.node import SourceNode
from fedlab.source_node.settings import SourceSettings
from fedlab.warehouse.lag import Lag

CATALOG = Catalog.from_dict({"sources": {"ds1": {"T": {"columns": ["E"], "types": ["BIGINT"], "key": ["E"]}}}})


def promtool_check(text: str) -> None:
    """`promtool check metrics` (Prometheus's own linter of the exposition) passes on `text`."""
    require(PROMTOOL)
    checked = subprocess.run([promtool_path(), "check", "metrics"], input=text, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def page(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as reply:
        return reply.read().decode()


class Inserts:
    """Inserts of E = 0, 1, 2, ... at ds1, every fifth a key inserted before (rejected)."""

    def __init__(self):
        self.i = 0

    def next(self):
        self.i += 1
        e = self.i - 1 if self.i % 5 else 0
        return "ds1", TransactionRequest(f"t{self.i}", inserts={"T": [(e,)]})


def test_a_source_and_its_load_serve_what_they_report_by_other_means(tmp_path):
    node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", {"T": []},
                      settings=SourceSettings(metrics_port=0))
    node.start()
    result = DriveResult()
    registry = new_registry()
    registry.register(LoadCollector(result))
    load = MetricsEndpoint.serve(registry, "127.0.0.1", 0)
    try:
        control = SourceControl(node.address)
        control.set_faults(notification_drop=0.25, answer_delay_mean=0.5)
        stub = rpc.SourceStub(client_channel(node.address, None))
        drive(grpc_committer(CATALOG, {"ds1": stub}), Inserts(), ["ds1"], rate=200, duration=0.5, result=result)
        health = control.health()
        source = scrape(health["metrics"])
        assert health["metrics"] == f"127.0.0.1:{node.metrics_port}"
        assert select(source, "fedlab_source_dsv", source="ds1") == {(("source", "ds1"),): health["dsv"]}
        assert sum(select(source, "fedlab_source_commits_total").values()) == result.committed == health["dsv"] - 1
        # No warehouse takes them: the default subscriber's outbox keeps every one.
        backlog = select(source, "fedlab_source_outbox_backlog", subscriber="warehouse")
        assert list(backlog.values()) == [health["subscribers"]["warehouse"]] == [result.committed]
        assert select(source, "fedlab_source_fault_probability", message="notification", fault="drop") == {
            (("fault", "drop"), ("message", "notification"), ("source", "ds1")): 0.25}
        assert list(select(source, "fedlab_source_fault_delay_mean_seconds", message="answer").values()) == [0.5]
        assert select(source, "process_cpu_seconds_total")

        served = scrape(load.address)
        assert select(served, "fedlab_load_offered_total") == {(): result.offered}
        assert select(served, "fedlab_load_committed_total") == {(): result.committed}
        assert result.rejected > 0
        assert select(served, "fedlab_load_rejected_total") == {(("reason", kind),): n for kind, n in _kinds(result).items()}
        promtool_check(page(health["metrics"]))
        promtool_check(page(load.address))
    finally:
        load.close()
        node.stop()
    assert scrape(load.address) is None   # closed: `fedlab top` shows it down


def _kinds(result: DriveResult) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for reason, n in result.reasons.items():
        kinds[reason.split(":", 1)[0]] = kinds.get(reason.split(":", 1)[0], 0) + n
    return kinds


def test_a_sender_counts_copies_sent_again_and_what_was_acknowledged(tmp_path):
    """The sender's counts (source_node.sender.Delivered), through the endpoint, against a real
    Notify stream to a stand-in that ignores the first copy of every DSV: each goes again."""
    from fake_warehouse import FakeWarehouse

    warehouse = FakeWarehouse(ignore_first_delivery=True)
    node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", {"T": []}, warehouse_address=warehouse.address,
                      settings=SourceSettings(metrics_port=0, resend_interval=0.05))
    node.start()
    try:
        stub = rpc.SourceStub(client_channel(node.address, None))
        for e in range(3):
            stub.Commit(to_pb(TransactionRequest(f"t{e}", inserts={"T": [(e,)]}), CATALOG), timeout=10)
        warehouse.wait_for("ds1", 3)
        deadline = time.monotonic() + 10
        while node.senders["warehouse"].delivered.acknowledged_dsv < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        served = scrape(f"127.0.0.1:{node.metrics_port}")
        sent = sum(select(served, "fedlab_source_notifications_sent_total").values())
        resent = sum(select(served, "fedlab_source_notifications_resent_total").values())
        assert sent == sum(len(batch) for batch in warehouse.batches)
        assert resent == sent - 3 >= 3   # every DSV at least twice
        assert list(select(served, "fedlab_source_acknowledged_dsv").values()) == [4]
        assert list(select(served, "fedlab_source_outbox_backlog").values()) == [0]
    finally:
        node.stop()
        warehouse.stop()


def test_a_view_is_behind_by_what_it_heard_of_and_has_not_applied():
    lag = Lag()
    lag.applied("a", 3)   # as restored
    assert lag.behind("a", now=100.0) == (0, 0.0) and lag.behind("b", now=100.0) == (0, 0.0)
    lag.heard("a", 3, commit_time=10.0)   # applied already: a copy
    assert lag.behind("a", now=100.0) == (0, 0.0)
    lag.heard("a", 5, commit_time=96.0)   # 4 not heard of yet (lost, or on its way)
    lag.heard("a", 4, commit_time=95.0)
    lag.heard("a", 4, commit_time=95.0)
    assert lag.behind("a", now=100.0) == (2, 5.0)
    lag.applied("a", 4)
    assert lag.behind("a", now=100.0) == (1, 4.0)
    lag.heard("b", 2, commit_time=99.0)
    assert lag.behind("b", now=100.0) == (2, 1.0)
    lag.applied("a", 5)
    lag.applied("a", 4)   # an older report changes nothing
    assert lag.behind("a", now=100.0) == (0, 0.0)
    for dsv in range(6, 1000):
        lag.heard("a", dsv, commit_time=float(dsv))
    lag.applied("a", 1_000_000)   # read past by a resynchronisation
    assert lag.behind("a", now=2000.0) == (0, 0.0)


def test_quantiles_read_from_buckets_as_prometheus_reads_them():
    counts = BucketCounts((0.1, 1.0, 10.0))
    for value in (0.05, 0.5, 0.5, 0.5, 5.0, 50.0):
        counts.observe(value)
    buckets, total = counts.cumulative()
    assert buckets == [("0.1", 1), ("1.0", 4), ("10.0", 5), ("+Inf", 6)] and total == pytest.approx(56.55)
    as_floats = [(float(b), float(n)) for b, n in buckets]
    assert quantile(0.5, as_floats) == pytest.approx(0.1 + 0.9 * (3 - 1) / 3)
    assert quantile(0.75, as_floats) == pytest.approx(1.0 + 9.0 * (4.5 - 4) / 1)
    assert quantile(0.99, as_floats) == 10.0   # in +Inf: the last finite bound
    assert quantile(0.5, [(1.0, 0.0), (float("inf"), 0.0)]) is None
