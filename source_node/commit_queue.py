"""Group commit across all clients of a source: concurrent callers' transactions share commits.

The gRPC servicer's Commit and CommitBatch run on several threads at once, one per client call.
Each caller puts its transactions in one queue; whoever finds no commit under way becomes the
writer, takes everything queued (its own and what other callers queued meanwhile), commits it as
one group (the store's `commit_many`: one database transaction, each transaction still with its
own DSV, notification and outcome) and hands every caller its own outcomes. While a group is being
committed the next one gathers, so under load many small calls become few commits, and a lone
caller commits at once without waiting for company.

A caller that sends a group again because it never heard how an earlier attempt ended (its
deadline passed while the source was still committing) names the DSV after which that attempt
may have committed: its transactions found in the log from there on get their recorded
notifications and are not committed twice. The writer looks them up when it takes the group, so
an earlier attempt queued before the retry has committed by then. (FoundationDB calls this a
commit whose result is unknown and answers it the same way, with the transaction's id.)
"""

from __future__ import annotations

import threading
from typing import Sequence

from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import Notification, TransactionRequest


class _Call:
    def __init__(self, requests: Sequence[TransactionRequest], commit_time: float, retry_after: int | None):
        self.requests = list(requests)
        self.commit_time = commit_time
        self.retry_after = retry_after
        self.outcomes: list | None = None
        self.error: BaseException | None = None


class CommitQueue:
    def __init__(self, store):
        self.store = store
        self._cond = threading.Condition()
        self._queued: list[_Call] = []
        self._writing = False

    def commit_many(self, requests: Sequence[TransactionRequest], commit_time: float = 0.0,
                    retry_after: int | None = None) -> list[Notification | ModelError]:
        """The store's commit_many for this caller's `requests` (one outcome each, in order),
        committed in one group with whatever other callers queued alongside. With `retry_after`
        (a DSV), `requests` were sent before: those committed since that DSV are not committed again."""
        call = _Call(requests, commit_time, retry_after)
        with self._cond:
            self._queued.append(call)
            while self._writing and call.outcomes is None and call.error is None:
                self._cond.wait()
            if call.outcomes is None and call.error is None:
                self._writing = True
                group, self._queued = self._queued, []
            else:
                group = []
        if group:
            self._commit(group)
        if call.error is not None:
            raise call.error
        return call.outcomes

    def _commit(self, group: list[_Call]) -> None:
        """Commits `group` as one, then lets the next writer in (a waiting caller, if any)."""
        try:
            earlier = [self._committed_earlier(call) for call in group]
            fresh = [r for call, known in zip(group, earlier) for r in call.requests if r.txn_id not in known]
            # The group commits now: its notifications carry the latest of the callers' times.
            outcomes = iter(self.store.commit_many(fresh, commit_time=max(call.commit_time for call in group))
                            if fresh else [])
            for call, known in zip(group, earlier):
                call.outcomes = [known[r.txn_id] if r.txn_id in known else next(outcomes) for r in call.requests]
        except BaseException as err:   # the store failed (closed, say): every caller of the group hears it
            for call in group:
                call.error = err
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()

    def _committed_earlier(self, call: _Call) -> dict[str, Notification | ModelError]:
        """A retried call's transactions that an earlier attempt committed: txn_id -> notification;
        a ModelError for each when the log no longer reaches back to the call's DSV."""
        if call.retry_after is None:
            return {}
        wanted = {r.txn_id for r in call.requests}
        oldest = self.store.oldest_available()
        if oldest > max(call.retry_after, 1) + 1:   # DSV 1 is the initial state: the log starts after it
            return {t: ModelError(f"transaction {t}: sent again after DSV {call.retry_after}, but the log keeps "
                                  f"DSVs from {oldest} on: whether it committed cannot be told") for t in wanted}
        return {n.txn_id: n for n in self.store.notifications_from(call.retry_after + 1) if n.txn_id in wanted}
