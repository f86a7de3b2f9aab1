"""The message log (its format fedmodel.message_log, its files fedio.message_log) and its wiring at
a source node (no Ray, no Spark): one line per message event, written where the event happened,
naming the message, its rows and its size on the wire."""

from __future__ import annotations

import time

import pytest
from fake_warehouse import FakeWarehouse

from fedlab.fedio import message_log as log_files
from fedlab.fedio.channels import client_channel
from fedlab.fedio.message_log import MessageLog
from fedlab.fedmodel import message_log
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.message_log import source_log_path
from fedlab.fedmodel.messages import to_pb
from fedlab.fedmodel.subquery import Subquery, SubqueryRelation
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.fedmodel.wire import pb, rpc
from fedlab.source_node.faults import FaultInjector
from fedlab.source_node.node import SourceNode
from fedlab.source_node.settings import SourceSettings

CATALOG = Catalog.from_dict({"sources": {"ds1": {
    "R": {"columns": ["A", "B"], "types": ["BIGINT", "BIGINT"], "key": ["A"]},
    "S": {"columns": ["B", "C"], "types": ["BIGINT", "BIGINT"], "key": ["B"]}}}})
INITIAL = {"R": [(1, 10), (2, 20)], "S": [(10, 1), (20, 2), (30, 3)]}
SUBQUERY = Subquery("q1", "ds1", (SubqueryRelation("S", None, ("B",), ("X",)),), ((10,), (30,)))


def lines(path, **match) -> list[dict]:
    return [e for e in log_files.read([path]) if all(e.get(k) == v for k, v in match.items())]


def test_a_partial_last_line_is_skipped_and_totals_count_the_wire_cost(tmp_path):
    log = MessageLog(tmp_path / "m.jsonl", "ds1")
    log.record("notification", "sent", "warehouse", bytes=100, rows=3, dsv=2)
    log.record("notification", "dropped", "warehouse", dsv=3)
    log.close()
    with open(tmp_path / "m.jsonl", "a") as out:
        out.write('{"t": 1, "node": "ds1", "kind": "answ')   # a crash while writing
    assert message_log.totals(log_files.read([tmp_path / "m.jsonl", tmp_path / "absent.jsonl"])) == {
        "notification": {"sent": 1, "dropped": 1, "rows": 3, "bytes": 100}}
    with pytest.raises(ValueError):
        MessageLog(tmp_path / "n.jsonl", "ds1").record("notification", "lost", "warehouse")


def test_with_a_retention_a_log_keeps_its_last_lines_and_the_totals_of_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(log_files, "WRITE_AFTER", 0.01)
    path = tmp_path / "m.jsonl"
    log = MessageLog(path, "ds1", retention=0.4)
    sent = 0
    for dsv in range(2, 40):
        log.record("notification", "sent", "w2" if dsv % 3 else "warehouse", bytes=10, rows=1, dsv=dsv)
        sent += 1
        time.sleep(0.05)
    log.close()
    kept = list(log_files.read([path]))
    assert 4 <= len(kept) < 20 and [e["dsv"] for e in kept] == list(range(40 - len(kept), 40))
    gone = log_files.trimmed([path])
    everything = message_log.added(message_log.totals(kept), gone)
    assert everything == {"notification": {"sent": sent, "rows": sent, "bytes": 10 * sent}}
    # a subscriber's share of what was trimmed, as of what was kept (fedmodel.message_log.concerns)
    w2 = message_log.added(message_log.totals(log_files.read([path], "w2")), log_files.trimmed([path], "w2"))
    assert w2["notification"]["sent"] == sum(1 for dsv in range(2, 40) if dsv % 3)
    # closed segments a retention old are gone: a few files, whatever the run's length
    assert len(list(tmp_path.iterdir())) <= 8, sorted(p.name for p in tmp_path.iterdir())
    # a node started again on its log closes what it finds as a segment of its own and goes on
    again = MessageLog(path, "ds1", retention=0.4)
    again.record("notification", "sent", "warehouse", bytes=10, rows=1, dsv=40)
    again.close()
    assert [e["dsv"] for e in log_files.read([path])][-1] == 40
    total = message_log.added(message_log.totals(log_files.read([path])), log_files.trimmed([path]))
    assert total["notification"]["sent"] == sent + 1


def test_a_source_logs_beside_its_database_file(tmp_path):
    assert source_log_path(tmp_path / "sales.sqlite") == tmp_path / "sales.messages.jsonl"
    node = SourceNode(CATALOG, "ds1", tmp_path / "sales.sqlite", INITIAL)
    node.stop()
    assert node.messages.path == tmp_path / "sales.messages.jsonl"


def test_each_answer_copy_and_fault_names_the_versions_it_was_read_at(tmp_path):
    node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", INITIAL, faults=FaultInjector(seed=3, answer_duplicate=1.0))
    node.start()
    try:
        node.store.commit(TransactionRequest("t1", inserts={"S": [(40, 4)]}))
        stub = rpc.SourceStub(client_channel(node.address, None))
        batch = pb.SubqueryBatch(subqueries=[to_pb(SUBQUERY, CATALOG)])
        assert sum(len(r.answers) for r in stub.Query(iter([batch]), timeout=10)) == 2
        node.faults.configure(answer_duplicate=0.0, answer_drop=1.0)
        assert sum(len(r.answers) for r in stub.Query(iter([batch]), timeout=10)) == 0
        stub.Resend(pb.ResendRequest(from_dsv=2), timeout=10)
    finally:
        node.stop()
    path = tmp_path / "ds1.messages.jsonl"
    received = lines(path, kind="subquery", event="received")
    assert [(e["id"], e["rows"], e["relations"], e["bytes"]) for e in received] == \
        [("q1", 2, ["S"], batch.subqueries[0].ByteSize())] * 2
    sent = lines(path, kind="answer", event="sent")
    assert len(sent) == 2 and all(e["id"] == "q1" and e["dsv"] == 2 and e["versions"] == {"S": 2} and e["rows"] == 2
                                  for e in sent)
    assert [e["copies"] for e in lines(path, kind="answer", event="duplicated")] == [2]
    assert [(e["id"], e["versions"]) for e in lines(path, kind="answer", event="dropped")] == [("q1", {"S": 2})]
    assert [e["from_dsv"] for e in lines(path, kind="resend_request", event="received")] == [2]


def test_each_notification_copy_sent_and_dropped_is_logged_with_its_dsv(tmp_path):
    warehouse = FakeWarehouse()
    node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", INITIAL, warehouse_address=warehouse.address,
                      faults=FaultInjector(seed=1, notification_drop=1.0),
                      settings=SourceSettings(resend_interval=0.2))
    node.start()
    try:
        node.store.commit(TransactionRequest("t1", inserts={"R": [(3, 30)]}, deletes={"S": [(30,)]}))
        node.wake()
        path = tmp_path / "ds1.messages.jsonl"
        deadline = time.monotonic() + 10
        while len(lines(path, event="dropped")) < 2:   # dropped, and dropped again when resent
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert warehouse.notifications == {}
        node.faults.configure(notification_drop=0.0)
        assert warehouse.wait_for("ds1", 1) == [2]
    finally:
        node.stop()
        warehouse.stop()
    sent = lines(path, kind="notification", event="sent")
    assert sent and all((e["dsv"], e["txn_id"], e["rows"], e["peer"]) == (2, "t1", 2, "warehouse") for e in sent)
    assert sent[0]["bytes"] == warehouse.notifications[("ds1", 2)].ByteSize()
    assert all(e["dsv"] == 2 for e in lines(path, kind="notification", event="dropped"))
