"""source_node.server, sender and node over real gRPC: bad input is refused and loses nothing,
answers go through the fault injector, and notifications reach a warehouse in DSV order and are
resent until acknowledged."""

from __future__ import annotations

import queue
import socket
import threading
import time

import grpc
import pytest
from fake_warehouse import FakeWarehouse

from fedlab.fedio.channels import client_channel
from fedlab.fedio.lockstep import LockstepStream
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.codec import decode_rows, encode_rows
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import from_pb, to_pb
from fedlab.fedmodel.subquery import Subquery, SubqueryRelation
from fedlab.fedmodel.transactions import Modification, TransactionRequest
from fedlab.fedmodel.wire import pb, rpc
from fedlab.live.remote_source import RemoteSource, read_history
from fedlab.source_node.faults import FaultInjector
from fedlab.source_node.node import SourceNode
from fedlab.source_node.settings import SourceSettings

CATALOG = Catalog.from_dict({"sources": {
    "ds1": {
        "R": {"columns": ["A", "B", "D"], "types": ["BIGINT", "VARCHAR", "DATE"], "key": ["A"]},
        "S": {"columns": ["B", "C"], "types": ["VARCHAR", "DOUBLE"], "key": ["B"]},
    },
    "ds2": {"U": {"columns": ["A"], "types": ["BIGINT"]}},
}})
INITIAL = {"R": [(1, "a", "2020-01-01"), (2, "b", None)], "S": [("a", 1.5), ("c", 2.5)]}
MAX_MESSAGE = 1 << 20  # small, so that the oversized message in the test is quick to build


@pytest.fixture
def node(tmp_path):
    n = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", INITIAL, faults=FaultInjector(seed=1),
                   settings=SourceSettings(resend_interval=0.3, max_message_bytes=MAX_MESSAGE))
    n.start()
    yield n
    n.stop()


@pytest.fixture
def stub(node):
    with client_channel(node.address, None) as channel:
        yield rpc.SourceStub(channel)


def commit(stub, txn_id: str, **ops) -> pb.CommitReply:
    return stub.Commit(to_pb(TransactionRequest(txn_id, **ops), CATALOG))


def snapshot(stub, *relations: str) -> dict:
    chunks = list(stub.Snapshot(pb.SnapshotRequest(relations=relations)))
    assert len({c.dsv for c in chunks}) == 1
    return {c.relation: (c.brv, sorted(decode_rows(c.rows)[1], key=repr)) for c in chunks}


# ---- commits, queries, snapshots ----

def test_commit_returns_the_versions_it_produced(stub):
    reply = commit(stub, "t1", inserts={"R": [(3, "c", "2021-05-05")]})
    assert reply.dsv == 2 and dict(reply.brv) == {"R": 2}
    reply = commit(stub, "t2", modifies={"S": [Modification(("a",), ("a", 9.0))]})
    assert reply.dsv == 3 and dict(reply.brv) == {"S": 2}


def test_commit_batch_answers_each_transaction_and_rejects_the_invalid_ones_alone(node, stub, warehouse):
    node.set_warehouse(warehouse.address)
    garbled = pb.CommitRequest(txn_id="garbled", ops=[pb.RelationOps(relation="R", inserts=b"\xff\xffnot arrow")])
    batch = [to_pb(TransactionRequest("t1", inserts={"R": [(3, "c", "2021-05-05")]}), CATALOG),
             to_pb(TransactionRequest("t2", deletes={"R": [(7,)]}), CATALOG),
             garbled,
             to_pb(TransactionRequest("t3", modifies={"R": [Modification((3,), (3, "d", None))]},
                                      inserts={"S": [("z", 0.5)]}), CATALOG)]
    reply = stub.CommitBatch(pb.CommitBatchRequest(transactions=batch))
    kinds = [o.WhichOneof("outcome") for o in reply.outcomes]
    assert kinds == ["committed", "error", "error", "committed"]
    assert "which is not there" in reply.outcomes[1].error and "garbled row payload" in reply.outcomes[2].error
    assert [(o.committed.dsv, dict(o.committed.brv)) for o in (reply.outcomes[0], reply.outcomes[3])] == \
           [(2, {"R": 2}), (3, {"R": 3, "S": 2})]
    assert snapshot(stub, "R") == {"R": (3, [(1, "a", "2020-01-01"), (2, "b", None), (3, "d", None)])}
    assert warehouse.wait_for("ds1", 2) == [2, 3]
    assert stub.CommitBatch(pb.CommitBatchRequest()).outcomes == []


def test_a_commits_stream_answers_group_after_group_as_commit_batch_does(stub):
    """The load driver's stream (fedio.lockstep): each group answered in turn, a rejected
    transaction alone, and the stream goes on after it."""
    stream = LockstepStream(stub.Commits)
    try:
        first = stream.exchange(pb.CommitBatchRequest(transactions=[
            to_pb(TransactionRequest("t1", inserts={"R": [(3, "c", None)]}), CATALOG),
            to_pb(TransactionRequest("t2", deletes={"R": [(7,)]}), CATALOG)]))
        assert [o.WhichOneof("outcome") for o in first.outcomes] == ["committed", "error"]
        assert first.outcomes[0].committed.dsv == 2 and "which is not there" in first.outcomes[1].error
        second = stream.exchange(pb.CommitBatchRequest(transactions=[
            to_pb(TransactionRequest("t3", inserts={"S": [("z", 0.5)]}), CATALOG)]))
        assert [(o.committed.dsv, dict(o.committed.brv)) for o in second.outcomes] == [(3, {"S": 2})]
    finally:
        stream.close()
    assert snapshot(stub, "S") == {"S": (2, [("a", 1.5), ("c", 2.5), ("z", 0.5)])}


def test_concurrent_clients_each_get_their_own_versions(node, stub):
    # Calls arriving together share group commits (source_node.commit_queue); each still gets the
    # DSV its own transaction produced, and one client's invalid transaction fails alone.
    replies: dict[str, object] = {}

    def client(c: int) -> None:
        for i in range(10):
            txn = f"c{c}-{i}"
            try:
                replies[txn] = commit(stub, txn, inserts={"S": [(txn, float(i))] + ([("a", 0.0)] if i == 5 else [])})
            except grpc.RpcError as err:
                replies[txn] = err.details()

    clients = [threading.Thread(target=client, args=(c,)) for c in range(8)]
    for t in clients:
        t.start()
    for t in clients:
        t.join(60)
    refused = {txn: r for txn, r in replies.items() if isinstance(r, str)}
    assert sorted(refused) == [f"c{c}-5" for c in range(8)] and all("duplicates key" in r for r in refused.values())
    committed = sorted(r.dsv for r in replies.values() if not isinstance(r, str))
    assert committed == list(range(2, 2 + 72)) and node.store.dsv == 73
    assert {n.txn_id for n in node.store.unacknowledged()} == set(replies) - set(refused)


def test_query_answers_every_subquery_of_the_batch(node, stub):
    sq1 = Subquery("q1", "ds1", (SubqueryRelation("R", None, ("B",), ("X",)),
                                 SubqueryRelation("S", "R", ("B",), ("B",), "C > 1")), (("a",), ("b",)))
    sq2 = Subquery("q2", "ds1", (SubqueryRelation("S", None, (), ()),), ())
    replies = list(stub.Query(iter([pb.SubqueryBatch(subqueries=[to_pb(sq1, CATALOG), to_pb(sq2, CATALOG)])])))
    assert [r.later for r in replies] == [0]   # no faults: one message
    answers = [from_pb(a, CATALOG) for a in replies[0].answers]
    assert answers == [node.store.answer(sq1), node.store.answer(sq2)]
    assert answers[0].rows_of("S").rows == (("a", 1.5),)


def test_open_query_streams_of_many_views_leave_the_source_free_for_its_other_calls(node, stub):
    """Each view keeping a Query stream open to the source holds one of its server threads for
    the stream's life (gRPC's thread per stream): forty of them, as forty views over it would, and
    the source still commits and answers."""
    hold = threading.Event()

    def idle_requests():
        hold.wait()
        return
        yield

    streams = [stub.Query(idle_requests()) for _ in range(40)]
    try:
        sq = Subquery("q1", "ds1", (SubqueryRelation("S", None, (), ()),), ())
        time.sleep(1)   # every stream has taken its thread
        assert stub.Health(pb.HealthRequest(), timeout=10).dsv == 1
        assert commit(stub, "t1", inserts={"S": [("d", 1.0)]}).dsv == 2
        replies = list(stub.Query(iter([pb.SubqueryBatch(subqueries=[to_pb(sq, CATALOG)])]), timeout=10))
        assert from_pb(replies[0].answers[0], CATALOG) == node.store.answer(sq)
    finally:
        hold.set()
        for stream in streams:
            assert list(stream) == []


def test_snapshot_streams_relations_at_one_state(stub):
    commit(stub, "t1", deletes={"S": [("c",)]})
    assert snapshot(stub) == {"R": (1, [(1, "a", "2020-01-01"), (2, "b", None)]), "S": (2, [("a", 1.5)])}
    assert snapshot(stub, "S") == {"S": (2, [("a", 1.5)])}


def test_health_reports_versions_and_the_outbox(stub):
    commit(stub, "t1", inserts={"S": [("z", 0.0)]})
    reply = stub.Health(pb.HealthRequest())
    assert (reply.source, reply.dsv, dict(reply.brv), reply.unacknowledged) == ("ds1", 2, {"R": 1, "S": 2}, 1)


# ---- bad input ----

def assert_refused(call, code, message: str):
    with pytest.raises(grpc.RpcError) as err:
        call()
    assert err.value.code() == code
    assert message in err.value.details()


def test_garbled_payload_is_invalid_argument_and_the_server_goes_on(node, stub):
    garbled = pb.CommitRequest(txn_id="bad", ops=[pb.RelationOps(relation="R", inserts=b"\xff\xff\xff\xffnot arrow")])
    assert_refused(lambda: stub.Commit(garbled), grpc.StatusCode.INVALID_ARGUMENT, "garbled row payload")
    assert node.store.dsv == 1
    assert commit(stub, "t1", inserts={"R": [(3, "c", None)]}).dsv == 2


@pytest.mark.parametrize("request_, message", [
    (pb.CommitRequest(txn_id="t", ops=[pb.RelationOps(relation="U", inserts=encode_rows(["A"], ["BIGINT"], [(1,)]))]),
     "does not own a relation named 'U'"),
    (pb.CommitRequest(txn_id="t", ops=[pb.RelationOps(
        relation="R", inserts=encode_rows(["A", "B", "D"], ["VARCHAR", "VARCHAR", "DATE"], [("x", "y", None)]))]),
     "R.A is BIGINT"),
    (pb.CommitRequest(txn_id="t", ops=[pb.RelationOps(relation="R", deletes=encode_rows(["A"], ["BIGINT"], [(7,)]))]),
     "which is not there"),
])
def test_invalid_transactions_are_invalid_argument_and_change_nothing(node, stub, request_, message):
    assert_refused(lambda: stub.Commit(request_), grpc.StatusCode.INVALID_ARGUMENT, message)
    assert (node.store.dsv, node.store.unacknowledged()) == (1, [])


def test_bad_subquery_and_snapshot_are_invalid_argument(stub):
    bad = pb.Subquery(id="q", relations=[pb.SubqueryRelation(relation="R", selection_sql="A >")])
    assert_refused(lambda: list(stub.Query(iter([pb.SubqueryBatch(subqueries=[bad])]))), grpc.StatusCode.INVALID_ARGUMENT,
                   "malformed SQL")
    assert_refused(lambda: list(stub.Snapshot(pb.SnapshotRequest(relations=["U"]))), grpc.StatusCode.INVALID_ARGUMENT,
                   "does not own a relation named 'U'")


def test_oversized_message_is_resource_exhausted_and_the_server_goes_on(node, stub):
    rows = [(i, "x" * 100, None) for i in range(MAX_MESSAGE // 100)]
    big = to_pb(TransactionRequest("big", inserts={"R": rows}), CATALOG)
    assert big.ByteSize() > MAX_MESSAGE
    assert_refused(lambda: stub.Commit(big), grpc.StatusCode.RESOURCE_EXHAUSTED, "")
    assert node.store.dsv == 1
    assert stub.Health(pb.HealthRequest()).dsv == 1


# ---- faults on answers ----

def answer_ids(replies) -> list[str]:
    return [a.id for reply in replies for a in reply.answers]


def test_dropped_and_duplicated_answers(node, stub):
    batch = pb.SubqueryBatch(subqueries=[to_pb(Subquery(f"q{i}", "ds1", (SubqueryRelation("S", None, (), ()),), ()),
                                               CATALOG) for i in range(3)])
    node.faults.configure(answer_drop=1.0)
    assert answer_ids(stub.Query(iter([batch]))) == []
    node.faults.configure(answer_drop=0.0, answer_duplicate=1.0)
    assert answer_ids(stub.Query(iter([batch]))) == ["q0", "q0", "q1", "q1", "q2", "q2"]


def test_delayed_answers_come_late_each_on_its_own(node, stub):
    batch = pb.SubqueryBatch(subqueries=[to_pb(Subquery(f"q{i}", "ds1", (SubqueryRelation("S", None, (), ()),), ()),
                                               CATALOG) for i in range(3)])
    node.faults.configure(answer_delay_mean=0.2, answer_duplicate=1.0)
    start = time.monotonic()
    replies = list(stub.Query(iter([batch])))
    assert time.monotonic() - start > 0.05   # the longest of six exponential delays of mean 0.2 s
    # The first message leaves once the answers are read, before any delay is over; each later one
    # brings the copies then due, until none is left.
    assert (replies[0].answers, replies[0].later) == ([], 6)
    assert [r.later for r in replies] == sorted({r.later for r in replies}, reverse=True) and replies[-1].later == 0
    assert all(r.answers for r in replies[1:])
    assert sorted(answer_ids(replies)) == ["q0", "q0", "q1", "q1", "q2", "q2"]


# ---- notifications to the warehouse ----

@pytest.fixture
def warehouse():
    w = FakeWarehouse()
    yield w
    w.stop()


def test_notifications_arrive_in_dsv_order_and_are_acknowledged(node, stub, warehouse):
    node.set_warehouse(warehouse.address)
    for i in range(5):
        commit(stub, f"t{i}", inserts={"S": [(f"k{i}", float(i))]})
    assert warehouse.wait_for("ds1", 5) == [2, 3, 4, 5, 6]
    assert all(b == sorted(b) for b in warehouse.batches)
    first = from_pb(warehouse.notifications[("ds1", 2)], CATALOG)
    assert first.change("S").inserted == (("k0", 0.0),) and first.change("S").brv == 2
    deadline = time.monotonic() + 5
    while node.store.unacknowledged() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert node.store.unacknowledged() == []


def test_unacknowledged_notifications_are_resent(tmp_path):
    warehouse = FakeWarehouse(ignore_first_delivery=True)
    node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", INITIAL, warehouse_address=warehouse.address,
                      settings=SourceSettings(resend_interval=0.3))
    node.start()
    try:
        for i in range(3):
            node.store.commit(TransactionRequest(f"t{i}", inserts={"S": [(f"k{i}", 0.0)]}))
            node.wake()
        assert warehouse.wait_for("ds1", 3) == [2, 3, 4]
        arrivals = [dsv for batch in warehouse.batches for dsv in batch]
        assert all(arrivals.count(dsv) >= 2 for dsv in (2, 3, 4))
    finally:
        node.stop()
        warehouse.stop()


def test_notifications_wait_for_a_warehouse_address_and_for_faults_to_clear(node, stub, warehouse):
    commit(stub, "t1", inserts={"S": [("k", 1.0)]})
    node.faults.configure(notification_drop=1.0)
    node.set_warehouse(warehouse.address)
    time.sleep(0.5)
    assert warehouse.batches == [] and len(node.store.unacknowledged()) == 1
    node.faults.configure(notification_drop=0.0)
    assert warehouse.wait_for("ds1", 1) == [2]


def test_sender_retries_until_the_warehouse_is_up(node, stub):
    warehouse = FakeWarehouse()
    port = warehouse.port
    warehouse.stop()  # nobody listens at this address yet
    node.set_warehouse(f"127.0.0.1:{port}")
    commit(stub, "t1", inserts={"S": [("k", 1.0)]})
    time.sleep(0.3)
    revived = FakeWarehouse(port=port)
    try:
        assert revived.wait_for("ds1", 1) == [2]
    finally:
        revived.stop()


def test_resend_pushes_logged_notifications_again(node, stub, warehouse):
    node.set_warehouse(warehouse.address)
    for i in range(3):
        commit(stub, f"t{i}", inserts={"S": [(f"k{i}", 1.0)]})
    warehouse.wait_for("ds1", 3)
    reply = stub.Resend(pb.ResendRequest(from_dsv=3))
    assert (reply.resent, reply.oldest_available) == (2, 2)
    deadline = time.monotonic() + 5
    while sum(b.count(3) for b in warehouse.batches) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    arrivals = [dsv for batch in warehouse.batches for dsv in batch]
    assert arrivals.count(3) == 2 and arrivals.count(4) == 2 and arrivals.count(2) == 1


def test_resend_with_an_upper_bound_sends_only_the_missing_range(node, stub, warehouse):
    node.set_warehouse(warehouse.address)
    for i in range(4):
        commit(stub, f"t{i}", inserts={"S": [(f"k{i}", 1.0)]})
    warehouse.wait_for("ds1", 4)
    reply = stub.Resend(pb.ResendRequest(from_dsv=2, through_dsv=3))
    assert reply.resent == 2
    deadline = time.monotonic() + 5
    while sum(b.count(3) for b in warehouse.batches) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.2)
    arrivals = [dsv for batch in warehouse.batches for dsv in batch]
    assert (arrivals.count(2), arrivals.count(3), arrivals.count(4), arrivals.count(5)) == (2, 2, 1, 1)


# ---- the checker reading a running source's history ----

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_checker_waits_for_a_source_that_is_not_listening_yet_only_when_asked(tmp_path):
    port = _free_port()
    where = f"127.0.0.1:{port}"
    with pytest.raises(ModelError, match="cannot read its history: UNAVAILABLE"):
        read_history(CATALOG, "ds1", RemoteSource(where))                 # no wait: at once
    with pytest.raises(ModelError, match="no connection within 0.5 s"):
        read_history(CATALOG, "ds1", RemoteSource(where, connect_wait=0.5))
    node = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", INITIAL, settings=SourceSettings(port=port))
    later = threading.Timer(1.0, node.start)   # a source pod coming back while the checker waits
    later.start()
    try:
        dsv, relations, log = read_history(CATALOG, "ds1", RemoteSource(where, connect_wait=30))
        assert (dsv, log) == (1, [])
        assert sorted(relations["R"][1]) == sorted(INITIAL["R"]) and sorted(relations["S"][1]) == sorted(INITIAL["S"])
    finally:
        later.join()
        node.stop()


def test_a_stream_answers_batch_after_batch_and_a_late_copy_comes_between_later_replies(node, stub):
    def batch(i: int) -> pb.SubqueryBatch:
        sq = Subquery(f"q{i}", "ds1", (SubqueryRelation("S", None, (), ()),), ())
        return pb.SubqueryBatch(id=i, subqueries=[to_pb(sq, CATALOG)])

    # The node's injector (seed 1) delays batch 2's answer by 0.23 s, which a twin of it tells.
    twin = FaultInjector(seed=1)
    twin.decide("answer")
    twin.configure(answer_delay_mean=1.0)
    delay, = twin.decide("answer")
    assert delay > 0.1
    requests = queue.SimpleQueue()
    replies = stub.Query(iter(requests.get, None))
    requests.put(batch(1))
    assert [(r.batch, r.later, [a.id for a in r.answers]) for r in [next(replies)]] == [(1, 0, ["q1"])]
    node.faults.configure(answer_delay_mean=1.0)
    requests.put(batch(2))
    assert [(r.batch, r.later, list(r.answers)) for r in [next(replies)]] == [(2, 1, [])]
    node.faults.configure(answer_delay_mean=0.0)
    requests.put(batch(3))
    requests.put(None)   # the warehouse sends no more: the delayed copy still comes
    rest = [(r.batch, r.later, [a.id for a in r.answers]) for r in replies]
    assert rest == [(3, 0, ["q3"]), (2, 0, ["q2"])]
