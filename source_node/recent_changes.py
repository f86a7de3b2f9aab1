"""A source's recent changes (fedmodel.as_of.RecentChanges, formula 12) shared between its writer,
which records each transaction after its commit, and the threads that answer sub-queries from them.

A reader may see a commit before its writer has recorded it, so an answer asked as of an earlier
version waits (up to a timeout) until the history reaches the state it was read at; after that it
answers at the current state, as when the history no longer reaches back (Sze-Ling compensates).
"""

from __future__ import annotations

import threading
from typing import Iterable

from fedlab.fedmodel.as_of import RecentChanges, asked_earlier
from fedlab.fedmodel.catalog import Relation
from fedlab.fedmodel.subquery import Subquery
from fedlab.fedmodel.transactions import Notification, RelationChange


class SharedRecentChanges:
    """RecentChanges behind one lock, with the wait for the writer."""

    def __init__(self, relations: Iterable[Relation], dsv: int, brv: dict[str, int],
                 notes: Iterable[Notification] = ()):
        self._history = RecentChanges(relations, dsv, brv, notes)
        self._recorded = threading.Condition()

    def record(self, n: Notification) -> None:
        with self._recorded:
            self._history.record(n)
            self._recorded.notify_all()

    def forget_through(self, dsv: int) -> None:
        with self._recorded:
            self._history.forget_through(dsv)

    def held(self) -> int:
        with self._recorded:
            return self._history.held()

    def nets(self, sq: Subquery, dsv: int, brv: dict[str, int], timeout: float = 5.0) -> dict[str, RelationChange] | None:
        """RecentChanges.nets once the writer has recorded the transactions up to `dsv` (None after
        `timeout`); only a sub-query asking for an earlier version waits."""
        with self._recorded:
            if asked_earlier(sq, brv):
                self._recorded.wait_for(lambda: self._history.dsv >= dsv, timeout)
            return self._history.nets(sq, dsv, brv)
