"""A source node serving two warehouses (source_node.node.SourceNode.subscribe): each gets every
DSV, with the changes to its relations only, and acknowledges for itself; one that stops holds back
only its own notifications, which the source keeps and sends once it is back; a Resend names its
subscriber; removing one stops its sender and releases what was kept for it."""

from __future__ import annotations

import time

import grpc
import pytest
from fake_warehouse import FakeWarehouse
from test_source_server import CATALOG, INITIAL

from fedlab.fedio.channels import client_channel
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.fedmodel.wire import pb, rpc
from fedlab.source_node.node import SourceNode
from fedlab.source_node.settings import SourceSettings


def settle(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "not settled"
        time.sleep(0.02)


def commit(node: SourceNode, i: int, relation: str = "S") -> None:
    row = (f"k{i}", float(i)) if relation == "S" else (100 + i, "z", None)
    node.store.commit(TransactionRequest(f"t{i}", inserts={relation: [row]}))
    node.wake()


@pytest.fixture
def two(tmp_path):
    first, second = FakeWarehouse(), FakeWarehouse()
    node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", INITIAL, warehouse_address=first.address,
                      settings=SourceSettings(resend_interval=0.2))
    node.subscribe("w2", second.address, ["S"])
    node.start()
    yield node, first, second
    node.stop()
    first.stop()
    second.stop()


def test_each_warehouse_gets_every_dsv_and_acknowledges_for_itself(two):
    node, first, second = two
    commit(node, 0, "R")
    commit(node, 1, "S")
    assert first.wait_for("ds1", 2) == [2, 3] and second.wait_for("ds1", 2) == [2, 3]
    assert [c.relation for c in second.notifications[("ds1", 2)].changes] == [], "w2 reads S only"
    assert [c.relation for c in first.notifications[("ds1", 2)].changes] == ["R"]
    settle(lambda: node.store.unacknowledged() == node.store.unacknowledged("w2") == [])


def test_a_stopped_warehouse_holds_back_only_its_own(two, tmp_path):
    node, first, second = two
    commit(node, 0)
    second.wait_for("ds1", 1)
    settle(lambda: node.store.unacknowledged("w2") == [])
    port = second.port
    second.stop()
    for i in range(1, 4):
        commit(node, i)
    assert first.wait_for("ds1", 4) == [2, 3, 4, 5], "the other goes on"
    settle(lambda: node.store.unacknowledged() == [])
    settle(lambda: [n.dsv for n in node.store.unacknowledged("w2")] == [3, 4, 5])
    back = FakeWarehouse(port=port)   # the same address: the sender's retries find it
    try:
        assert back.wait_for("ds1", 3) == [3, 4, 5], "what it lacked, and only that"
    finally:
        back.stop()


def test_a_resend_names_its_subscriber(two):
    node, first, second = two
    commit(node, 0, "R")
    second.wait_for("ds1", 1)
    stub = rpc.SourceStub(client_channel(node.address, None))
    reply = stub.Resend(pb.ResendRequest(from_dsv=2, subscriber="w2"), timeout=10)
    assert reply.resent == 1
    with pytest.raises(grpc.RpcError) as err:
        stub.Resend(pb.ResendRequest(from_dsv=2, subscriber="w9"), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == "resend: no subscriber named 'w9' (subscribers: w2, warehouse)"


def test_unsubscribing_stops_its_sender_and_releases_its_backlog(two):
    node, first, second = two
    second.stop()
    for i in range(3):
        commit(node, i)
    first.wait_for("ds1", 3)
    settle(lambda: node.store.unacknowledged() == [])
    assert node.store.retained_from() == 2, "w2 lacks everything"
    node.unsubscribe("w2")
    assert node.store.retained_from() == node.store.dsv + 1 and "w2" not in node.senders


def test_a_removed_default_subscriber_stays_removed_after_a_restart_until_a_warehouse_is_set(tmp_path):
    warehouse = FakeWarehouse()
    node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", INITIAL)
    node.unsubscribe("warehouse")
    node.stop()
    node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", INITIAL, warehouse_address=warehouse.address)
    node.start()
    try:
        assert node.senders == {} and node.store.retained_from() == node.store.dsv + 1
        commit(node, 0)
        assert node.store.retained_from() == node.store.dsv + 1, "no one to keep it for"
        node.set_warehouse(warehouse.address)   # subscribed again, from now on
        commit(node, 1)
        assert warehouse.wait_for("ds1", 1) == [3]
    finally:
        node.stop()
        warehouse.stop()


def test_a_warehouse_that_subscribed_itself_is_sent_to_again_by_the_restarted_node(tmp_path):
    """Through the Subscribe call, as a joining warehouse does: the node opened again on the same
    database sends to it at its address, though nobody tells it; one removed is forgotten."""
    first, second = FakeWarehouse(), FakeWarehouse()
    node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", INITIAL, warehouse_address=first.address)
    node.start()
    try:
        with client_channel(node.address, None) as channel:
            rpc.SourceStub(channel).Subscribe(pb.SubscribeRequest(name="w2", address=second.address, relations=["S"]),
                                              timeout=10)
        commit(node, 0)
        assert second.wait_for("ds1", 1) == [2]
        node.stop()
        node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", warehouse_address=first.address)
        node.start()
        commit(node, 1)
        assert second.wait_for("ds1", 2)[-1] == 3, "w2 is sent to at the address it subscribed with"
        node.unsubscribe("w2")
        node.stop()
        node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", warehouse_address=first.address)
        assert set(node.senders) == {"warehouse"}
    finally:
        node.stop()
        first.stop()
        second.stop()
