"""source_node.commit_queue: concurrent callers share commits (fewer database transactions than
calls), each gets its own outcomes in order, a lone caller commits at once, and a store failure
reaches every caller of its group."""

from __future__ import annotations

import threading
import time

import pytest

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.source_node.commit_queue import CommitQueue
from fedlab.source_node.engines import open_store

CATALOG = Catalog.from_dict({"sources": {"ds1": {"T": {"columns": ["E", "G"], "types": ["BIGINT", "VARCHAR"],
                                                       "key": ["E"]}}}})


class CountingStore:
    """A store whose commit_many calls (its database transactions) are counted; the first waits
    until `release` is set, so that other callers queue up behind it meanwhile."""

    def __init__(self, store):
        self.store = store
        self.groups: list[list[str]] = []
        self.release = threading.Event()

    def commit_many(self, requests, commit_time=0.0):
        self.groups.append([r.txn_id for r in requests])
        if len(self.groups) == 1:
            assert self.release.wait(10)
        return self.store.commit_many(requests, commit_time)


@pytest.fixture
def store(tmp_path):
    s = open_store(CATALOG, "ds1", tmp_path / "ds1.sqlite", "sqlite", {"T": [(0, "initial")]})
    yield s
    s.close()


def test_concurrent_callers_share_commits_and_each_gets_its_own_outcomes(store):
    counting = CountingStore(store)
    queue = CommitQueue(counting)
    results: dict[int, list] = {}

    def call(i: int) -> None:
        # Caller i inserts keys 10i and 10i+1, and a duplicate of key 0 when i is odd.
        requests = [TransactionRequest(f"c{i}-a", inserts={"T": [(10 * i, "a")]}),
                    TransactionRequest(f"c{i}-b", inserts={"T": [(10 * i + 1, "b")] + ([(0, "dup")] if i % 2 else [])})]
        results[i] = queue.commit_many(requests, commit_time=float(i))

    first = threading.Thread(target=call, args=(1,))
    first.start()
    while not counting.groups:      # the first caller is committing, alone
        time.sleep(0.001)
    others = [threading.Thread(target=call, args=(i,)) for i in range(2, 9)]
    for t in others:
        t.start()
    while len(queue._queued) < 7:   # the others queue behind it
        time.sleep(0.001)
    counting.release.set()
    for t in [first, *others]:
        t.join(10)
    assert len(counting.groups) == 2 and sorted(counting.groups[1]) == sorted(
        f"c{i}-{x}" for i in range(2, 9) for x in "ab"), "16 transactions of 8 calls in 2 commits"
    for i, outcomes in results.items():
        a, b = outcomes
        assert a.txn_id == f"c{i}-a" and a.changes[0].inserted == ((10 * i, "a"),)
        if i % 2:
            assert isinstance(b, ModelError) and f"transaction c{i}-b" in str(b) and "duplicates key" in str(b)
        else:
            assert b.txn_id == f"c{i}-b"
    committed = [o.dsv for outcomes in results.values() for o in outcomes if not isinstance(o, ModelError)]
    assert sorted(committed) == list(range(2, 2 + 12)) and store.dsv == 13
    assert max(n.commit_time for n in store.unacknowledged()) == 8.0


def test_a_lone_caller_commits_at_once(store):
    queue = CommitQueue(store)
    note, = queue.commit_many([TransactionRequest("t", inserts={"T": [(5, "x")]})])
    assert note.dsv == 2 and store.dsv == 2


def test_a_store_failure_reaches_every_caller_of_its_group(store):
    class Failing:
        def commit_many(self, requests, commit_time=0.0):
            raise RuntimeError("store closed")

    queue = CommitQueue(Failing())
    with pytest.raises(RuntimeError, match="store closed"):
        queue.commit_many([TransactionRequest("t", inserts={"T": [(5, "x")]})])
    with pytest.raises(RuntimeError, match="store closed"):   # and the queue is not left stuck
        queue.commit_many([TransactionRequest("u", inserts={"T": [(6, "x")]})])


# ---- a group sent again because its outcome went unheard ----

def insert(txn_id: str, key: int) -> TransactionRequest:
    return TransactionRequest(txn_id, inserts={"T": [(key, txn_id)]})


def test_a_retried_group_answers_what_it_committed_before_and_commits_the_rest(store):
    queue = CommitQueue(store)
    first = queue.commit_many([insert("a", 1), insert("b", 2)])
    queue.commit_many([insert("other", 3)])   # another client's commit in between
    again = queue.commit_many([insert("a", 1), insert("b", 2), insert("c", 4)], retry_after=1)
    assert [n.dsv for n in again[:2]] == [n.dsv for n in first] == [2, 3], "recorded, not committed again"
    assert again[2].dsv == 5 and store.dsv == 5
    assert [n.txn_id for n in store.notifications_from(2)] == ["a", "b", "other", "c"]


def test_a_retried_group_that_never_committed_commits_now(store):
    queue = CommitQueue(store)
    note, = queue.commit_many([insert("a", 1)], retry_after=store.dsv)
    assert note.dsv == 2 and store.dsv == 2


def test_a_retry_the_log_no_longer_covers_is_rejected_and_commits_nothing(tmp_path):
    store = open_store(CATALOG, "ds1", tmp_path / "ds1.sqlite", "sqlite", {"T": []}, log_retention=2)
    queue = CommitQueue(store)
    for i in range(5):
        queue.commit_many([insert(f"t{i}", i)])
    outcome, = queue.commit_many([insert("t0", 0)], retry_after=1)
    assert isinstance(outcome, ModelError) and "whether it committed cannot be told" in str(outcome)
    assert store.dsv == 6
    store.close()
