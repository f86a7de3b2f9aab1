"""warehouse.query_stream against a real source node over gRPC: batches and their replies in
lockstep, a late copy taken by the stream's reader thread while nobody sends, and a stream that
fails reporting what it still owed."""

from __future__ import annotations

import threading
import time

import pytest

from fedlab.fedio.channels import client_channel
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.messages import to_pb
from fedlab.fedmodel.subquery import Subquery, SubqueryRelation
from fedlab.fedmodel.wire import pb, rpc
from fedlab.source_node.faults import FaultInjector
from fedlab.source_node.node import SourceNode
from fedlab.warehouse.query_stream import QueryStream, StreamClosed

CATALOG = Catalog.from_dict({"sources": {"ds1": {"S": {"columns": ["B", "C"], "types": ["VARCHAR", "DOUBLE"],
                                                        "key": ["B"]}}}})


def batch(i: int) -> pb.SubqueryBatch:
    return pb.SubqueryBatch(subqueries=[to_pb(Subquery(f"q{i}", "ds1", (SubqueryRelation("S", None, (), ()),), ()),
                                              CATALOG)])


class Replies:
    def __init__(self):
        self.replies: list[tuple] = []    # (tag, answer ids, later, thread name)
        self.failed: list[tuple] = []     # (tags, error code)
        self.cond = threading.Condition()

    def on_reply(self, tag, reply):
        with self.cond:
            self.replies.append((tag, [a.id for a in reply.answers], reply.later, threading.current_thread().name))
            self.cond.notify_all()

    def on_failed(self, tags, err):
        with self.cond:
            self.failed.append((tags, err.code().name if err is not None else None))
            self.cond.notify_all()

    def wait(self, predicate, timeout: float = 10.0):
        with self.cond:
            assert self.cond.wait_for(predicate, timeout), (self.replies, self.failed)


@pytest.fixture
def node(tmp_path):
    n = SourceNode(CATALOG, "ds1", tmp_path / "ds1.sqlite", {"S": [("a", 1.0)]}, faults=FaultInjector(seed=1))
    n.start()
    yield n
    n.stop()


def test_batches_are_answered_in_lockstep_by_the_sending_thread(node):
    seen = Replies()
    stream = QueryStream(rpc.SourceStub(client_channel(node.address, None)), "ds1", "warehouse", seen.on_reply, seen.on_failed)
    for i in range(3):
        stream.exchange(batch(i), f"t{i}")
    me = threading.current_thread().name
    assert seen.replies == [(f"t{i}", [f"q{i}"], 0, me) for i in range(3)]
    stream.close()


def test_a_delayed_copy_is_read_by_the_streams_thread_while_nothing_is_sent(node):
    seen = Replies()
    stream = QueryStream(rpc.SourceStub(client_channel(node.address, None)), "ds1", "warehouse", seen.on_reply, seen.on_failed)
    node.faults.configure(answer_delay_mean=0.3, answer_duplicate=1.0)
    stream.exchange(batch(1), "t1")                      # returns at the first reply, before the delays
    assert seen.replies[0][0] == "t1" and seen.replies[0][2] > 0
    seen.wait(lambda: seen.replies[-1][2] == 0)         # the copies came with nobody waiting for them
    assert sorted(a for _, ids, _, _ in seen.replies for a in ids) == ["q1", "q1"]
    assert seen.replies[-1][3] == "late-answers-ds1"
    node.faults.configure(answer_delay_mean=0.0, answer_duplicate=0.0)
    stream.exchange(batch(2), "t2")                      # the reader thread now reads every reply
    assert seen.replies[-1][:3] == ("t2", ["q2"], 0)
    stream.close()


def test_a_stream_that_fails_names_what_it_owed_and_refuses_the_next_batch(node):
    seen = Replies()
    stream = QueryStream(rpc.SourceStub(client_channel(node.address, None)), "ds1", "warehouse", seen.on_reply, seen.on_failed)
    node.faults.configure(answer_delay_mean=30.0)       # the copy would come in half a minute
    stream.exchange(batch(1), "t1")
    node.stop(grace=0)
    seen.wait(lambda: seen.failed)
    assert seen.failed[0][0] == ["t1"]
    deadline = time.monotonic() + 5
    with pytest.raises(StreamClosed):
        stream.exchange(batch(2), "t2")
    assert time.monotonic() < deadline and seen.failed == seen.failed[:1]
