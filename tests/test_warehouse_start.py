"""A restarting warehouse restores from Delta while its Spark session is still starting
(warehouse.spark_session.start_beside): the core takes notifications and applies them at once,
but a source hears a DSV acknowledged only once a Delta batch holds it, which waits for the
session. The warehouse here is the live one (warehouse.service) on the suite's Spark session,
handed over only when the test says; its one source is unreachable, and a one-relation view
needs no sub-query of it.
"""

from __future__ import annotations

import time
from concurrent.futures import Future

import pytest

from fedlab.fedmodel.catalog import Catalog, Relation
from fedlab.fedmodel.transactions import Notification, RelationChange
from fedlab.warehouse.service import Warehouse, delta_dir
from fedlab.warehouse.store.delta_store import DeltaViewStore

pytestmark = pytest.mark.spark

CATALOG = Catalog((Relation("R1", "ds1", ("k", "name"), ("BIGINT", "VARCHAR"), ("k",)),))
VIEW = "SELECT k, name FROM R1"


def wait_until(what: str, done, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_warehouse_restored_before_its_spark_session_acknowledges_only_what_delta_holds(spark, tmp_path):
    data = tmp_path / "warehouse"
    starting: Future = Future()   # the session, not up yet
    warehouse = Warehouse(CATALOG, VIEW, data, {"ds1": "127.0.0.1:1"}, starting)
    # what a first start left: the history's initial view, then the store's (Warehouse._materialise)
    warehouse.history.write_initial({(1, "a"): 1}, {"ds1": 1})
    DeltaViewStore(spark, delta_dir(str(data)), ["k", "name"], ["BIGINT", "VARCHAR"]).initialize(
        {(1, "a"): 1}, {"relations": {"R1": {"processing": 1, "refreshed": 1}}, "sources": {"ds1": {"applied_dsv": 1}}})
    warehouse.open()              # restored from Delta without Spark
    warehouse.start()
    try:
        assert warehouse.view_rows() == {(1, "a"): 1}
        note = Notification("ds1", 2, "t2", (RelationChange("R1", 2, inserted=((2, "b"),)),), time.time())
        marks = warehouse.notify([note], [1])["ds1"]
        assert (marks.acked, marks.reached.dsv) == (1, 2)
        wait_until("the core did not apply DSV 2", lambda: warehouse.view_rows() == {(1, "a"): 1, (2, "b"): 1})
        time.sleep(1.0)           # batches are due every MIN_BATCH_SPACING: none can commit
        assert warehouse.notify([note], [1])["ds1"].acked == 1
        assert warehouse.status()["commit_failures"] == 0
        starting.set_result(spark)
        wait_until("DSV 2 was not acknowledged once Delta held it", lambda: warehouse.status()["durable"]["ds1"] == 2)
        restored = DeltaViewStore(spark, delta_dir(str(data)), ["k", "name"], ["BIGINT", "VARCHAR"]).load()
        assert restored.view == {(1, "a"): 1, (2, "b"): 1} and restored.state["sources"]["ds1"]["applied_dsv"] == 2
    finally:
        if not starting.done():
            starting.set_result(spark)
        warehouse.close()
