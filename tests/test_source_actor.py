"""source_node.actor: a named Ray actor that, killed and restarted by Ray, finds its data, versions
and unsent notifications again in its database file; its operator's calls go to its gRPC server
(source_node.control) while its main thread is held."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
import ray
import yaml
from fake_warehouse import FakeWarehouse

from fedlab.fedio.channels import client_channel
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.codec import decode_rows
from fedlab.fedmodel.messages import to_pb
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.fedmodel.wire import pb, rpc
from fedlab.source_node.actor import NAMESPACE, start_source_actor
from fedlab.source_node.control import SourceControl, wait_for_address

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parent.parent

CATALOG = Catalog.from_dict({"sources": {"actor_ds": {
    "R": {"columns": ["A", "B"], "types": ["BIGINT", "VARCHAR"], "key": ["A"]}}}})


def commit(address: str, request: TransactionRequest) -> pb.CommitReply:
    with client_channel(address, None) as channel:
        return rpc.SourceStub(channel).Commit(to_pb(request, CATALOG), timeout=10)   # R is alike at both


def snapshot_rows(address: str) -> list[tuple]:
    with client_channel(address, None) as channel:
        chunks = list(rpc.SourceStub(channel).Snapshot(pb.SnapshotRequest(), timeout=10))
    return sorted(row for c in chunks for row in decode_rows(c.rows)[1])


def control_of(source: str) -> SourceControl:
    return SourceControl(wait_for_address(source, timeout=30))


def restarted_health(source: str, old_pid: int, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            health = control_of(source).health()
            if health["pid"] != old_pid:
                return health
        except (grpc.RpcError, TimeoutError):
            pass
        time.sleep(0.1)
    raise TimeoutError("the source actor did not come back")


def stop(actor, source: str) -> None:
    try:
        control_of(source).stop()
    finally:
        ray.kill(actor, no_restart=True)


def test_the_actors_main_thread_is_held_until_its_node_stops(ray_runtime, tmp_path):
    """Held, so that Ray does not wake it every 10 ms: Ray delivers no call until the Stop call has
    stopped the node; bad fault rates are refused over gRPC with the reason."""
    actor = start_source_actor(CATALOG, "actor_ds", tmp_path / "actor_ds.sqlite", {"R": [(1, "a")]})
    try:
        control = control_of("actor_ds")
        stopped = actor.stop.remote()
        ready, _ = ray.wait([stopped], timeout=1.0)
        assert not ready, "a Ray call ran while the node serves"
        with pytest.raises(grpc.RpcError) as refused:
            control.set_faults(answer_dorp=0.5)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "answer_dorp" in refused.value.details()
        control.stop()
        ray.get(stopped, timeout=30)
        with pytest.raises(grpc.RpcError):
            control.health()
    finally:
        ray.kill(actor, no_restart=True)


def test_killed_actor_restarts_with_its_data_versions_and_unsent_notification(ray_runtime, tmp_path):
    actor = start_source_actor(CATALOG, "actor_ds", tmp_path / "actor_ds.sqlite", {"R": [(1, "a")]})
    assert ray.get_actor("actor_ds", namespace=NAMESPACE) == actor   # named: found again after a restart
    control = control_of("actor_ds")
    assert commit(control.address, TransactionRequest("t1", inserts={"R": [(2, "b")]})).dsv == 2
    before = control.health()
    assert (before["dsv"], before["brv"], before["unacknowledged"]) == (2, {"R": 2}, 1)
    control.set_faults(answer_drop=0.5)

    ray.kill(actor, no_restart=False)
    after = restarted_health("actor_ds", before["pid"])

    assert (after["dsv"], after["brv"], after["unacknowledged"]) == (2, {"R": 2}, 1)
    control = control_of("actor_ds")
    assert control.set_faults()["answer"]["drop"] == 0.5, "run-time settings survive too"
    assert snapshot_rows(after["address"]) == [(1, "a"), (2, "b")]

    warehouse = FakeWarehouse()
    try:
        control.set_warehouse(warehouse.address)
        assert warehouse.wait_for("actor_ds", 1) == [2]
    finally:
        warehouse.stop()
        stop(actor, "actor_ds")


SUBS_CATALOG = Catalog.from_dict({"sources": {"actor_subs": CATALOG.to_dict()["sources"]["actor_ds"]}})


def test_a_restarted_actor_goes_on_serving_its_other_subscribers(ray_runtime, tmp_path):
    warehouse = FakeWarehouse()
    actor = start_source_actor(SUBS_CATALOG, "actor_subs", tmp_path / "actor_subs.sqlite", {"R": [(1, "a")]})
    try:
        control = control_of("actor_subs")
        control.subscribe("w2", None, ["R"])   # subscribed, nowhere to send yet
        assert commit(control.address, TransactionRequest("t1", inserts={"R": [(2, "b")]})).dsv == 2
        before = control.health()
        assert before["subscribers"] == {"warehouse": 1, "w2": 1}
        control.subscribe("w2", warehouse.address, ["R"])
        assert warehouse.wait_for("actor_subs", 1) == [2]

        ray.kill(actor, no_restart=False)
        after = restarted_health("actor_subs", before["pid"])
        assert set(after["subscribers"]) == {"warehouse", "w2"}, "its subscribers survive the restart"
        assert commit(after["address"], TransactionRequest("t2", inserts={"R": [(3, "c")]})).dsv == 3
        assert warehouse.wait_for("actor_subs", 2) == [2, 3], "w2's sender is back, at its address"
        control = control_of("actor_subs")
        control.unsubscribe("w2")
        assert set(control.health()["subscribers"]) == {"warehouse"}
    finally:
        warehouse.stop()
        stop(actor, "actor_subs")


def subscribe(address: str, name: str, at: str, relations=("R",)) -> None:
    with client_channel(address, None) as channel:
        rpc.SourceStub(channel).Subscribe(pb.SubscribeRequest(name=name, address=at, relations=relations), timeout=10)


def test_a_warehouse_subscribed_by_the_subscribe_call_is_served_by_a_new_actor_on_the_same_database(ray_runtime, tmp_path):
    """A warehouse subscribes itself (a replication slot's way); the source's Ray cluster then
    restarts: a new actor on the same database file sends to it again, though nobody tells it to."""
    warehouse = FakeWarehouse()
    db = tmp_path / "actor_subs.sqlite"
    actor = start_source_actor(SUBS_CATALOG, "actor_subs", db, {"R": [(1, "a")]})
    try:
        address = control_of("actor_subs").address
        for name, relations, why in [("warehouse", ["R"], "'warehouse' is the source's own warehouse"),
                                     ("", ["R"], "name the subscriber"),
                                     ("w2", ["S"], "the source owns no relation named 'S'")]:
            with pytest.raises(grpc.RpcError) as refused:
                subscribe(address, name, warehouse.address, relations)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and why in refused.value.details()
        assert set(control_of("actor_subs").health()["subscribers"]) == {"warehouse"}, "a refused call subscribes none"
        subscribe(address, "w2", warehouse.address)
        assert commit(address, TransactionRequest("t1", inserts={"R": [(2, "b")]})).dsv == 2
        assert warehouse.wait_for("actor_subs", 1) == [2]
        stop(actor, "actor_subs")   # gone for good, as with its Ray cluster

        actor = start_source_actor(SUBS_CATALOG, "actor_subs", db)
        address = control_of("actor_subs").address
        assert set(control_of("actor_subs").health()["subscribers"]) == {"warehouse", "w2"}
        assert commit(address, TransactionRequest("t2", inserts={"R": [(3, "c")]})).dsv == 3
        assert warehouse.wait_for("actor_subs", 2) == [2, 3], "w2 is sent to at the address it subscribed with"
    finally:
        warehouse.stop()
        stop(actor, "actor_subs")


def test_the_cluster_role_follows_its_actor_to_a_new_port_and_exits_0_on_sigterm(ray_runtime, tmp_path):
    """`fedlab source --ray-address` (the chart's source role) reaches its detached actor over the
    address the actor published, finds it again when Ray restarts it on another port, and leaves
    it serving when stopped; Ray's own SIGTERM handler would make it exit 15."""
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump({"sources": {"role_ds": {
        "R": {"columns": ["A", "B"], "types": ["BIGINT", "VARCHAR"], "key": ["A"]}}}}))
    role = subprocess.Popen(
        [sys.executable, "-m", "fedlab.cli", "source", "--name", "role_ds", "--catalog", str(tmp_path / "catalog.yaml"),
         "--db", str(tmp_path / "role_ds.sqlite"), "--lost-after", "10",
         "--ray-address", ray.get_runtime_context().gcs_address],
        cwd=ROOT, env={**os.environ, "RAY_AUTH_MODE": "disabled"}, stdout=subprocess.PIPE, text=True)
    try:
        assert "actor at" in role.stdout.readline()
        before = control_of("role_ds").health()
        os.kill(before["pid"], signal.SIGKILL)
        after = restarted_health("role_ds", before["pid"])
        assert after["address"] != before["address"], "a restarted actor takes a free port again"
        time.sleep(12)   # past --lost-after: the role has found the new address, or exited 1
        assert role.poll() is None, "the role lost its restarted actor"
        role.send_signal(signal.SIGTERM)
        assert role.wait(timeout=30) == 0
        assert control_of("role_ds").health()["dsv"] == 1, "the detached actor outlives its role"
    finally:
        role.kill()
        with contextlib.suppress(ValueError):   # no such actor: the role made none
            stop(ray.get_actor("role_ds", namespace=NAMESPACE), "role_ds")
