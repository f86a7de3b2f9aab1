"""The sender against a warehouse that acknowledges in two levels (tests/fake_warehouse.py
TwoLevelWarehouse, over real gRPC): what the warehouse reports received waits for the long safety
timer instead of the short resend timer, goes at once to a restarted warehouse (a new
incarnation) that lacks it, and stays in the outbox until it is acknowledged as durable; what is
acknowledged never goes again, and a lost notification still goes on the short timer."""

from __future__ import annotations

import time

import pytest
from fake_warehouse import TwoLevelWarehouse

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.source_node.faults import FaultInjector
from fedlab.source_node.memory_store import MemoryStore
from fedlab.source_node.sender import NotificationSender

CATALOG = Catalog.from_dict({"sources": {"ds1": {"S": {"columns": ["B", "C"], "types": ["VARCHAR", "DOUBLE"],
                                                       "key": ["B"]}}}})
SHORT = 0.1   # resend_interval: a notification not reported received goes again this soon


@pytest.fixture
def store():
    return MemoryStore(CATALOG, "ds1")


def start_sender(store, warehouse, safety_interval: float) -> NotificationSender:
    sender = NotificationSender(store, CATALOG, FaultInjector(seed=1), warehouse.address,
                                resend_interval=SHORT, safety_interval=safety_interval)
    sender.start()
    return sender


def commit(store, sender, *keys: str) -> None:
    for key in keys:
        store.commit(TransactionRequest(f"t-{key}", inserts={"S": [(key, 1.0)]}))
        sender.wake()


def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.01)


def unacknowledged(store) -> list[int]:
    return [n.dsv for n in store.unacknowledged()]


@pytest.fixture
def run(store):
    """Starts a TwoLevelWarehouse (with the given DSVs losing their first delivery) and a sender
    for `store` with the given safety interval; stops both at the end."""
    started = []

    def start(safety_interval: float, lose_first=()):
        warehouse = TwoLevelWarehouse(lose_first=lose_first)
        sender = start_sender(store, warehouse, safety_interval)
        started.append((warehouse, sender))
        return warehouse, sender

    yield start
    for warehouse, sender in started:
        sender.stop()
        warehouse.stop()


def test_received_notifications_are_not_resent_on_the_short_timer(store, run):
    warehouse, sender = run(safety_interval=60)
    commit(store, sender, "a", "b", "c")
    warehouse.wait_for("ds1", 3)
    time.sleep(10 * SHORT)
    assert [warehouse.arrivals(d) for d in (2, 3, 4)] == [1, 1, 1]
    assert unacknowledged(store) == [2, 3, 4]   # received is not durable: the outbox keeps them


def test_received_notifications_are_resent_after_the_safety_interval(store, run):
    warehouse, sender = run(safety_interval=1.0)
    commit(store, sender, "a", "b", "c")
    warehouse.wait_for("ds1", 3)
    time.sleep(5 * SHORT)
    assert [warehouse.arrivals(d) for d in (2, 3, 4)] == [1, 1, 1]
    wait_until(lambda: all(warehouse.arrivals(d) >= 2 for d in (2, 3, 4)))
    assert unacknowledged(store) == [2, 3, 4]


def test_a_restarted_warehouse_gets_what_it_lost_at_once(store, run):
    warehouse, sender = run(safety_interval=60)
    commit(store, sender, "a", "b", "c")            # DSVs 2, 3, 4
    warehouse.wait_for("ds1", 3)
    warehouse.make_durable("ds1", 3)
    commit(store, sender, "d")                      # DSV 5; its reply acknowledges 2 and 3
    wait_until(lambda: unacknowledged(store) == [4, 5])
    warehouse.restart()                             # 4 and 5 were only in its memory
    commit(store, sender, "e")                      # DSV 6; its reply names the new incarnation
    # Only the new incarnation can make 4 and 5 go again before the 60 s safety timer.
    wait_until(lambda: warehouse.arrivals(4) == 2 and warehouse.arrivals(5) == 2)
    assert sorted(d for (_, d) in warehouse.notifications) == [2, 3, 4, 5, 6]
    assert [warehouse.arrivals(d) for d in (2, 3, 6)] == [1, 1, 1]   # acknowledged, or new: sent once


def test_acknowledged_notifications_are_never_resent(store, run):
    warehouse, sender = run(safety_interval=3 * SHORT)
    commit(store, sender, "a", "b")                 # DSVs 2, 3
    warehouse.wait_for("ds1", 2)
    warehouse.make_durable("ds1", 3)
    commit(store, sender, "c")                      # DSV 4; its reply acknowledges 2 and 3
    wait_until(lambda: unacknowledged(store) == [4])
    warehouse.restart()
    wait_until(lambda: warehouse.arrivals(4) >= 3)   # the safety timer, twice
    assert [warehouse.arrivals(d) for d in (2, 3)] == [1, 1]


def test_a_lost_notification_still_goes_on_the_short_timer(store, run):
    warehouse, sender = run(safety_interval=60, lose_first=[3])
    commit(store, sender, "a", "b", "c")            # DSV 3's first copy is lost: the mark stays at 2
    warehouse.wait_for("ds1", 3, timeout=10 * SHORT + 1)
    time.sleep(5 * SHORT)
    assert warehouse.arrivals(2) == 1 and warehouse.arrivals(3) == 2
    assert warehouse.arrivals(4) <= 2   # above the mark until 3 came: perhaps once more, never after
