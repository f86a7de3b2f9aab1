"""source_node.actor: a named Ray actor that, killed and restarted by Ray, finds its data, versions
and unsent notifications again in its database file."""

from __future__ import annotations

import time

import grpc
import pytest
import ray
from fake_warehouse import FakeWarehouse

from fedio.channels import client_channel
from fedmodel.catalog import Catalog
from fedmodel.codec import decode_rows
from fedmodel.messages import to_pb
from fedmodel.transactions import TransactionRequest
from fedmodel.wire import pb, rpc
from source_node.actor import NAMESPACE, start_source_actor

pytestmark = pytest.mark.ray

CATALOG = Catalog.from_dict({"sources": {"actor_ds": {
    "R": {"columns": ["A", "B"], "types": ["BIGINT", "VARCHAR"], "key": ["A"]}}}})


def commit(address: str, request: TransactionRequest) -> pb.CommitReply:
    with client_channel(address, None) as channel:
        return rpc.SourceStub(channel).Commit(to_pb(request, CATALOG), timeout=10)   # R is alike at both


def snapshot_rows(address: str) -> list[tuple]:
    with client_channel(address, None) as channel:
        chunks = list(rpc.SourceStub(channel).Snapshot(pb.SnapshotRequest(), timeout=10))
    return sorted(row for c in chunks for row in decode_rows(c.rows)[1])


def restarted_health(actor, old_pid: int, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            health = ray.get(actor.health.remote(), timeout=timeout)
            if health["pid"] != old_pid:
                return health
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            pass
        time.sleep(0.1)
    raise TimeoutError("the source actor did not come back")


def test_killed_actor_restarts_with_its_data_versions_and_unsent_notification(ray_runtime, tmp_path):
    actor = start_source_actor(CATALOG, "actor_ds", tmp_path / "actor_ds.sqlite", {"R": [(1, "a")]})
    assert ray.get_actor("actor_ds", namespace=NAMESPACE) == actor   # named: found again after a restart
    assert commit(ray.get(actor.address.remote()), TransactionRequest("t1", inserts={"R": [(2, "b")]})).dsv == 2
    before = ray.get(actor.health.remote())
    assert (before["dsv"], before["brv"], before["unacknowledged"]) == (2, {"R": 2}, 1)
    ray.get(actor.set_faults.remote(answer_drop=0.5))

    ray.kill(actor, no_restart=False)
    after = restarted_health(actor, before["pid"])

    assert (after["dsv"], after["brv"], after["unacknowledged"]) == (2, {"R": 2}, 1)
    assert ray.get(actor.set_faults.remote())["answer"]["drop"] == 0.5, "run-time settings survive too"
    assert snapshot_rows(after["address"]) == [(1, "a"), (2, "b")]

    warehouse = FakeWarehouse()
    try:
        ray.get(actor.set_warehouse.remote(warehouse.address))
        assert warehouse.wait_for("actor_ds", 1) == [2]
    finally:
        warehouse.stop()
        ray.get(actor.stop.remote())
        ray.kill(actor, no_restart=True)


SUBS_CATALOG = Catalog.from_dict({"sources": {"actor_subs": CATALOG.to_dict()["sources"]["actor_ds"]}})


def test_a_restarted_actor_goes_on_serving_its_other_subscribers(ray_runtime, tmp_path):
    warehouse = FakeWarehouse()
    actor = start_source_actor(SUBS_CATALOG, "actor_subs", tmp_path / "actor_subs.sqlite", {"R": [(1, "a")]})
    try:
        ray.get(actor.subscribe.remote("w2", None, ["R"]))   # subscribed, nowhere to send yet
        address = ray.get(actor.address.remote())
        assert commit(address, TransactionRequest("t1", inserts={"R": [(2, "b")]})).dsv == 2
        before = ray.get(actor.health.remote())
        assert before["subscribers"] == {"warehouse": 1, "w2": 1}
        ray.get(actor.subscribe.remote("w2", warehouse.address, ["R"]))
        assert warehouse.wait_for("actor_subs", 1) == [2]

        ray.kill(actor, no_restart=False)
        after = restarted_health(actor, before["pid"])
        assert set(after["subscribers"]) == {"warehouse", "w2"}, "its subscribers survive the restart"
        assert commit(after["address"], TransactionRequest("t2", inserts={"R": [(3, "c")]})).dsv == 3
        assert warehouse.wait_for("actor_subs", 2) == [2, 3], "w2's sender is back, at its address"
        ray.get(actor.unsubscribe.remote("w2"))
        assert set(ray.get(actor.health.remote())["subscribers"]) == {"warehouse"}
    finally:
        warehouse.stop()
        ray.get(actor.stop.remote())
        ray.kill(actor, no_restart=True)


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
        address = ray.get(actor.address.remote())
        for name, relations, why in [("warehouse", ["R"], "'warehouse' is the source's own warehouse"),
                                     ("", ["R"], "name the subscriber"),
                                     ("w2", ["S"], "the source owns no relation named 'S'")]:
            with pytest.raises(grpc.RpcError) as refused:
                subscribe(address, name, warehouse.address, relations)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT and why in refused.value.details()
        assert set(ray.get(actor.health.remote())["subscribers"]) == {"warehouse"}, "a refused call subscribes none"
        subscribe(address, "w2", warehouse.address)
        assert commit(address, TransactionRequest("t1", inserts={"R": [(2, "b")]})).dsv == 2
        assert warehouse.wait_for("actor_subs", 1) == [2]
        ray.get(actor.stop.remote())
        ray.kill(actor, no_restart=True)   # gone for good, as with its Ray cluster

        actor = start_source_actor(SUBS_CATALOG, "actor_subs", db)
        address = ray.get(actor.address.remote())
        assert set(ray.get(actor.health.remote())["subscribers"]) == {"warehouse", "w2"}
        assert commit(address, TransactionRequest("t2", inserts={"R": [(3, "c")]})).dsv == 3
        assert warehouse.wait_for("actor_subs", 2) == [2, 3], "w2 is sent to at the address it subscribed with"
    finally:
        warehouse.stop()
        ray.get(actor.stop.remote())
        ray.kill(actor, no_restart=True)
