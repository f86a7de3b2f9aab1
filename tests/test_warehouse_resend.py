"""A live warehouse asks a source again for lost notifications, and the source sends only what the
warehouse lacks: the resend request names the warehouse's process as its Notify replies do (its
view group's incarnation), so the source trusts what those replies said arrived
(source_node.resend_policy.ResendPolicy.asked). The warehouse is the live one (warehouse.service,
in a warehouse.view_group) on the suite's Spark session; the source is a real source node over
gRPC whose seeded fault injector loses DSVs 2 and 4 and lets 3 and 5 through.
"""

from __future__ import annotations

import time
from concurrent.futures import Future

import pytest

from fedlab.fedio.message_log import read
from fedlab.fedmodel.catalog import Catalog, Relation
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.message_log import WAREHOUSE_LOG
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.source_node.faults import FaultInjector
from fedlab.source_node.node import SourceNode
from fedlab.source_node.settings import SourceSettings
from fedlab.warehouse.core.registry import Settings
from fedlab.warehouse.incarnation import Incarnation
from fedlab.warehouse.service import Warehouse
from fedlab.warehouse.settings import WarehouseSettings
from fedlab.warehouse.view_group import ViewGroup

pytestmark = pytest.mark.spark

CATALOG = Catalog((Relation("R1", "ds1", ("k", "name"), ("BIGINT", "VARCHAR"), ("k",)),))
VIEW = "SELECT k, name FROM R1"
INITIAL = {"R1": [(1, "a")]}
COMMITTED = [(2, "b"), (3, "c"), (4, "d"), (5, "e")]   # DSVs 2-5
LOSES_2_AND_4 = 5   # the seed whose first four notification decisions at drop 0.5 are lost, sent, lost, sent


def wait_until(what, done, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what()
        time.sleep(0.02)


def test_a_resend_request_gets_only_what_the_warehouse_lacks(spark, tmp_path):
    faults = FaultInjector(seed=LOSES_2_AND_4, notification_drop=0.5)
    # No copy by the source's own timer within the test: every copy answers the resend request.
    source_log = tmp_path / "ds1.messages.jsonl"
    node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", INITIAL, faults=faults, message_log=source_log,
                      settings=SourceSettings(resend_interval=60.0))
    node.start()
    # Gaps are asked for after 2 s, both at once (warehouse.core.missing_notifications): the
    # request spans 2-4, and 3, received, is inside it.
    warehouse = Warehouse(CATALOG, VIEW, tmp_path / "warehouse", {"ds1": node.address}, spark,
                          WarehouseSettings(core=Settings(reorder_allowance=2.0)))
    group = ViewGroup({"v": warehouse})
    log = tmp_path / "warehouse" / "history" / WAREHOUSE_LOG
    try:
        group.open()
        address = f"127.0.0.1:{group.serve()}"
        # A new warehouse first asks for everything past its view's DSVs; served after the commits,
        # that request would send them all, and the faults would decide again.
        wait_until(lambda: "the warehouse's first resend request did not come",
                   lambda: any(m["kind"] == "resend_request" for m in read([source_log])))
        time.sleep(0.5)   # the source reads its log after it logs the request
        for k, name in COMMITTED:
            node.store.commit(TransactionRequest(f"t{k}", inserts={"R1": [(k, name)]}))
        node.set_warehouse(address)   # all four in one Notify batch: the warehouse finds both gaps at once
        wait_until(lambda: f"DSVs 3 and 5 did not arrive alone: {arrivals(log)}", lambda: arrivals(log) == [3, 5])
        faults.configure(notification_drop=0.0)   # the copies the request asks for get through
        expected = {row: 1 for row in INITIAL["R1"] + COMMITTED}
        wait_until(lambda: f"the view did not reach DSV 5: {warehouse.view_rows()}",
                   lambda: warehouse.view_rows() == expected)
    finally:
        group.close()
        node.stop()
    requests = [(m["from_dsv"], m["through_dsv"]) for m in read([log]) if m["kind"] == "resend_request"]
    assert (2, 4) in requests   # besides a new warehouse's first, from its view's DSV on
    assert arrivals(log) == [2, 3, 4, 5], "the source sent again what the warehouse had reported received"


def test_a_view_group_is_one_incarnation_its_views_were_built_with(tmp_path):
    """The views of one process are built with its incarnation, so no part of any view can hold
    an id the process no longer answers by; the group pauses them all through it, and refuses
    views built apart, in one line. Nothing here starts: the session never comes."""
    never: Future = Future()
    incarnation = Incarnation()
    views = {name: Warehouse(CATALOG, VIEW, tmp_path / name, {"ds1": "127.0.0.1:1"}, never, incarnation=incarnation)
             for name in ("a", "b")}
    group = ViewGroup(views)
    assert group.incarnation is incarnation
    assert {d.peer.incarnation.id for v in views.values() for d in v.dispatchers.values()} == {incarnation.id}
    group.pause()
    assert not any(v.incarnation.running.is_set() for v in views.values())
    group.resume()
    apart = Warehouse(CATALOG, VIEW, tmp_path / "c", {"ds1": "127.0.0.1:1"}, never)
    with pytest.raises(ModelError, match=r"^the views of one warehouse are built with one incarnation "
                                         r"\(warehouse.incarnation\)$"):
        ViewGroup({**views, "c": apart})


def arrivals(log) -> list[int]:
    return sorted(m["dsv"] for m in read([log]) if m["kind"] == "notification" and m["event"] == "received")
