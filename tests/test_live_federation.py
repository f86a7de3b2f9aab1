"""The walking skeleton, live: Ray source actors with gRPC and DuckDB, the warehouse on Spark with
Delta, a few hundred transactions, and the final view against two independent recomputations
(a Spark job over fresh source snapshots, and the DuckDB oracle over the committed history)."""

from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from live_support import MirroredLoad

from fedlab.fedio.channels import client_channel
from fedlab.checker.oracle import Oracle
from fedlab.live.federation import Federation
from fedlab.simulation.scenario import parse_scenario
from fedlab.loadgen.synthetic import random_scenario
from fedlab.warehouse.settings import WarehouseSettings
from fedlab.warehouse.store.sparktypes import from_spark

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]


def test_live_federation_keeps_the_view_equal_to_recomputation(spark, ray_runtime, tmp_path):
    scenario = parse_scenario(random_scenario(11, relations=(4, 4), sources=(3, 3)), "live")
    fed = Federation(scenario.catalog, scenario.view.sql, scenario.initial, tmp_path / "run", spark,
                     WarehouseSettings(compact_interval=1.0))
    load = MirroredLoad(scenario, fed.commit)
    fed.start()
    try:
        load.commit(300)
        assert fed.wait_until_applied(timeout=180), fed.warehouse.status()
        view = fed.warehouse.view_rows()
        assert view == fed.recompute()
        oracle = Oracle(scenario.catalog, scenario.view.sql, scenario.initial, load.history)
        assert view == oracle.view_at(oracle.final_versions())
        assert fed.read_view() == view
        status = fed.warehouse.status()
        assert status["applied"] == 300
        assert_bad_notifications_are_refused_and_the_warehouse_keeps_serving(fed)
        assert_a_delta_commit_that_keeps_failing_shows_in_status_until_it_holds(fed, load)
        view = fed.warehouse.view_rows()
        assert view == fed.recompute()
        # The compactor, every second beside the batches, folds them into the base: a fast run may
        # end before its first round after a batch, so it is given the time to.
        assert wait_for_a_compaction(spark, fed.warehouse.store, timeout=60)
    finally:
        fed.stop()
    assert_the_delta_view_and_its_compacted_base_are_the_view(spark, fed.warehouse.store, view)


def assert_a_delta_commit_that_keeps_failing_shows_in_status_until_it_holds(fed, load):
    """Storage that refuses the journal's commits (its log folder made read-only) fails batch after
    batch, each retried, and Status says how many and why, and that what is applied is not durable;
    once it accepts again the next batch holds, and what is durable catches up."""
    from fedlab.fedmodel.wire import pb, rpc

    stub = rpc.WarehouseStub(client_channel(fed.warehouse_address, None))
    status = lambda: stub.Status(pb.StatusRequest(), timeout=30)  # noqa: E731
    with read_only(Path(fed.warehouse.store.path("journal")) / "_delta_log"):
        load.commit(30)
        failing = wait_for(status, lambda s: s.commits_failing >= 2, timeout=120)
        assert failing.last_commit_error, failing
        assert failing.commit_failures >= failing.commits_failing
        assert any(failing.durable_dsv.get(s, 0) < dsv for s, dsv in failing.applied_dsv.items()), failing
    held = wait_for(status, lambda s: s.commits_failing == 0, timeout=120)
    caught_up = wait_for(status, lambda s: dict(s.durable_dsv) == dict(s.applied_dsv), timeout=120)
    assert set(caught_up.durable_dsv) == set(fed.actors), caught_up
    # The last error stays shown. A commit under way when the folder was made writable again may
    # have failed once more, with another Py4J object in its message: the kind is what must match.
    kind = failing.last_commit_error.split(":")[0]
    assert held.commit_failures >= failing.commit_failures and held.last_commit_error.split(":")[0] == kind


@contextmanager
def read_only(folder: Path):
    """`folder` refuses new files while inside: immutable for root (whom permissions do not stop),
    without write permission for anyone else."""
    as_root = os.geteuid() == 0
    if as_root:
        subprocess.run(["chattr", "+i", str(folder)], check=True)
    else:
        folder.chmod(0o555)
    try:
        yield
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)


def wait_for(ask, holds, timeout: float):
    """The first answer of `ask()` that `holds`, asked every 0.2 s; fails with the last after `timeout`."""
    deadline = time.monotonic() + timeout
    while not holds(answer := ask()):
        assert time.monotonic() < deadline, answer
        time.sleep(0.2)
    return answer


def wait_for_a_compaction(spark, store, timeout: float) -> bool:
    """Whether the view's base gets a commit that folded some batch (tagged past batch 0) in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tags = spark.sql(f"DESCRIBE HISTORY delta.`{store.path('view')}`").select("userMetadata").collect()
        if any(t[0] not in (None, "fedlab-batch=0") for t in tags):
            return True
        time.sleep(0.5)
    return False


def assert_the_delta_view_and_its_compacted_base_are_the_view(spark, store, view):
    """After close (its last batch committed) the Delta view is the core's, and one more
    compaction leaves the base table complete."""
    assert store.read_view() == view
    store.compact()
    base = spark.read.format("delta").load(store.path("view")).collect()
    assert {tuple(from_spark(v) for v in r[:-1]): r[-1] for r in base} == view


def assert_bad_notifications_are_refused_and_the_warehouse_keeps_serving(fed):
    import grpc

    from fedlab.fedmodel.wire import pb, rpc

    stub = rpc.WarehouseStub(client_channel(fed.warehouse_address, None))
    relation = fed.catalog.relations[0]
    garbled = pb.Notification(source=relation.source, dsv=10 ** 6, txn_id="bad", changes=[
        pb.RelationChange(relation=relation.name, brv=10 ** 6, inserted=b"\x00not arrow at all")])
    for bad in (garbled, pb.Notification(source="nowhere", dsv=2, txn_id="bad", changes=[
            pb.RelationChange(relation="no_such_relation", brv=2)])):
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Notify(iter([pb.NotificationBatch(notifications=[bad])]), timeout=30))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "\n" not in err.value.details()
    assert stub.Status(pb.StatusRequest(), timeout=30).applied == 300
    assert fed.warehouse.view_rows() == fed.read_view()
