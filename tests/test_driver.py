"""loadgen.driver.drive with a fake batch commit: each source's transactions arrive in stream order
in groups of at most `max_batch`, a backlog is taken as one group, and every offered transaction
is counted once, committed or rejected."""

from __future__ import annotations

import threading
import time

from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.loadgen.driver import drive


class RoundRobinStream:
    """Transactions t0, t1, ... for sources a, b, a, b, ..."""

    def __init__(self, sources):
        self.sources, self.i = sources, 0

    def next(self):
        source = self.sources[self.i % len(self.sources)]
        self.i += 1
        return source, TransactionRequest(f"t{self.i - 1}", inserts={"R": [(self.i,)]})


class SlowSource:
    """A fake commit_batch: records each group, takes 20 ms per group (at 500 txn/s per source a
    backlog of 10 builds meanwhile), rejects every seventh transaction, and fails outright on the
    second group of the source it is told to."""

    def __init__(self, fail_group_of: str | None = None):
        self.groups: dict[str, list[list[str]]] = {}
        self.fail_group_of = fail_group_of
        self.lock = threading.Lock()

    def __call__(self, source, requests):
        time.sleep(0.02)
        ids = [r.txn_id for r in requests]
        with self.lock:
            self.groups.setdefault(source, []).append(ids)
        if source == self.fail_group_of and len(self.groups[source]) == 2:
            raise ConnectionError("source unreachable")
        return [ModelError("duplicates key") if int(i[1:]) % 7 == 0 else object() for i in ids]


def test_each_source_gets_its_transactions_in_stream_order_in_bounded_groups():
    fake = SlowSource()
    result = drive(fake, RoundRobinStream(["a", "b"]), ["a", "b"], rate=1000, duration=0.5, max_batch=8)
    for source, parity in (("a", 0), ("b", 1)):
        sent = [i for group in fake.groups[source] for i in group]
        assert sent == [f"t{n}" for n in range(parity, result.offered, 2)]
        assert all(1 <= len(group) <= 8 for group in fake.groups[source])
        assert any(len(group) == 8 for group in fake.groups[source]), "a backlog is committed as full groups"
    assert result.committed + result.rejected == result.offered
    assert result.rejected == len(range(0, result.offered, 7))
    assert result.reasons == {"ModelError: duplicates key": result.rejected}
    assert result.rejections() == [f"{result.rejected} x ModelError: duplicates key (first: t0 at a)"]


def test_a_failed_group_counts_all_its_transactions_rejected():
    fake = SlowSource(fail_group_of="b")
    result = drive(fake, RoundRobinStream(["a", "b"]), ["a", "b"], rate=400, duration=0.3)
    failed = fake.groups["b"][1]
    invalid = [n for n in range(result.offered) if n % 7 == 0 and f"t{n}" not in failed]
    assert result.rejected == len(failed) + len(invalid)
    assert result.committed == result.offered - result.rejected
    assert result.reasons["ConnectionError: source unreachable"] == len(failed)   # the group's reason, counted
    assert result.examples["ConnectionError: source unreachable"] == f"{failed[0]} at b"
    assert f"{len(failed)} x ConnectionError: source unreachable (first: {failed[0]} at b)" in result.rejections()


def test_a_group_whose_outcome_went_unheard_is_sent_again_and_committed_once(tmp_path):
    """A real source whose store is busy while the driver's stream to it breaks (its channel
    closed) with a group on it: the committer does not count the group rejected, and its retry,
    on a new channel, does not commit it twice."""
    from fedlab.fedio.channels import client_channel
    from fedlab.fedmodel.catalog import Catalog
    from fedlab.fedmodel.wire import rpc
    from fedlab.loadgen.driver import grpc_committer
    from fedlab.source_node.node import SourceNode

    catalog = Catalog.from_dict({"sources": {"ds1": {"T": {"columns": ["E"], "types": ["BIGINT"], "key": ["E"]}}}})
    node = SourceNode(catalog, "ds1", tmp_path / "ds1.sqlite", {"T": []})
    node.start()
    channels = [client_channel(node.address, None)]
    stubs = {"ds1": rpc.SourceStub(channels[0])}

    def reconnect(source):
        channels.append(client_channel(node.address, None))
        stubs[source] = rpc.SourceStub(channels[-1])
    try:
        commit_batch = grpc_committer(catalog, stubs, reconnect=reconnect)
        held = threading.Event()

        def hold_the_store():   # the first attempt waits in the store while its stream breaks
            with node.store._writer:
                held.set()
                time.sleep(0.5)
                channels[0].close()
                time.sleep(0.8)
        threading.Thread(target=hold_the_store).start()
        held.wait()
        outcomes = commit_batch("ds1", [TransactionRequest(f"t{i}", inserts={"T": [(i,)]}) for i in range(3)])
        assert len(channels) == 2, "the group was not sent again"
        assert [o.dsv for o in outcomes] == [2, 3, 4]
        assert node.store.dsv == 4 and [n.txn_id for n in node.store.notifications_from(2)] == ["t0", "t1", "t2"]
        later, = commit_batch("ds1", [TransactionRequest("t3", inserts={"T": [(3,)]})])
        assert later.dsv == 5
    finally:
        for channel in channels:
            channel.close()
        node.stop()
