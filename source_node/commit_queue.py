"""Group commit across all clients of a source: concurrent callers' transactions share commits.

The gRPC servicer's Commit and CommitBatch run on several threads at once, one per client call.
Each caller puts its transactions in one queue; whoever finds no commit under way becomes the
writer, takes everything queued (its own and what other callers queued meanwhile), commits it as
one group (the store's `commit_many`: one database transaction, each transaction still with its
own DSV, notification and outcome) and hands every caller its own outcomes. While a group is being
committed the next one gathers, so under load many small calls become few commits, and a lone
caller commits at once without waiting for company.
"""

from __future__ import annotations

import threading
from typing import Sequence

from fedmodel.errors import ModelError
from fedmodel.transactions import Notification, TransactionRequest


class _Call:
    def __init__(self, requests: Sequence[TransactionRequest], commit_time: float):
        self.requests = list(requests)
        self.commit_time = commit_time
        self.outcomes: list | None = None
        self.error: BaseException | None = None


class CommitQueue:
    def __init__(self, store):
        self.store = store
        self._cond = threading.Condition()
        self._queued: list[_Call] = []
        self._writing = False

    def commit_many(self, requests: Sequence[TransactionRequest],
                    commit_time: float = 0.0) -> list[Notification | ModelError]:
        """The store's commit_many for this caller's `requests` (one outcome each, in order),
        committed in one group with whatever other callers queued alongside."""
        call = _Call(requests, commit_time)
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
            # The group commits now: its notifications carry the latest of the callers' times.
            outcomes = self.store.commit_many([r for call in group for r in call.requests],
                                              commit_time=max(call.commit_time for call in group))
            for call in group:
                call.outcomes, outcomes = outcomes[:len(call.requests)], outcomes[len(call.requests):]
        except BaseException as err:   # the store failed (closed, say): every caller of the group hears it
            for call in group:
                call.error = err
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()
