"""What the durable stores share of their subscribers (source_node.subscriptions): each one's
outbox in memory, and its registration and acknowledgements made durable through the engine.

source_node.durable_store (SQLite, DuckDB) and source_node.postgres_store hold the outbox twice:
durably in their log table, and in memory the notifications some subscriber has not acknowledged
yet (`_retained`, whole), with each subscriber's own copies (only the changes to its relations).
A subscriber's sender asks for its copies every round, so they are kept in memory rather than
read and parsed from the log each time; the log is read only for a range older than what memory
holds. A subscriber's name, relations and acknowledged DSV are a table of the store too (its
`subscribers`), so that a restarted source keeps for each what it still lacks, as a replication
slot does; removing one releases what was held for it alone.

The store supplies `_state` (the lock of what it holds in memory), `_dsv`, `recent` (its
SharedRecentChanges), `catalog`, `source`, `log_keep_seconds` and the hooks below; it fills
`_retained` and `_subscriptions` when it opens (`_hold`) and hands every commit to `_committed`.

The log (the outbox's durable copy) keeps every notification by default: `fedlab check` judges a
run from it. With `log_keep_seconds` it keeps those committed in that many seconds, and any a
subscriber has not acknowledged: what a resend may still ask for, and what a checker judging the
warehouse's history of about half as long needs (fedmodel.change_history). A store's first
commits after it opens are aged from then.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Iterable, Sequence

from fedlab.fedmodel.transactions import Notification
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER, Subscriptions

TRIMS = 20   # the log is trimmed for age this many times over its keeping time


class SubscriberOutbox:
    """The subscriber half of the store contract (see source_node.durable_store)."""

    def _hold(self, subscribers: Iterable[tuple[str, list | None, int]], log: Sequence[Notification]) -> None:
        """At open: the durable `subscribers` (name, relations or None, acknowledged DSV) and the
        log from the oldest DSV one of them has not acknowledged."""
        self._retained: deque = deque(log)
        self._subscriptions = Subscriptions(r.name for r in self.catalog.relations_at(self.source))
        self._aged: deque[tuple[float, int]] = deque()   # (when, its last DSV) of each commit since: log_keep_seconds
        self._aged_trimmed = float("-inf")               # when the log was last trimmed for age
        for name, relations, acknowledged in subscribers:
            self._subscriptions.add(name, relations, acknowledged, self._retained)

    def _committed(self, notes: Sequence[Notification], log_retention: int | None) -> int | None:
        """Newly committed notifications, in DSV order (with the state lock held); with
        `log_retention` the log keeps only the newest that many, and memory no more. Returns the
        DSV through which the log is due to be trimmed for its age (`log_keep_seconds`; the
        caller trims it outside the lock: `_trim_log`), None when no trimming is due."""
        if self._subscriptions:   # with none, no one needs them held
            self._retained.extend(notes)
        self._subscriptions.committed(notes)
        if log_retention is not None and notes:
            kept_from = notes[-1].dsv - log_retention + 1
            self._release_below(kept_from)
            self._subscriptions.truncate_below(kept_from)
        if self.log_keep_seconds is None or not notes:
            return None
        now = time.monotonic()
        self._aged.append((now, notes[-1].dsv))
        if now - self._aged_trimmed < self.log_keep_seconds / TRIMS:
            return None
        self._aged_trimmed = now
        through = 0
        while self._aged and self._aged[0][0] <= now - self.log_keep_seconds:
            through = self._aged.popleft()[1]
        through = min(through, self._subscriptions.retained_from(self._dsv) - 1)
        return through if through > 0 else None

    def notifications_from(self, dsv: int, through: int | None = None,
                           subscriber: str | None = None) -> list[Notification]:
        """Logged notifications with DSV >= `dsv` (and <= `through`), in DSV order, as `subscriber`
        sees them (None: whole; what Resend sends again). A gap a subscriber asks for is not
        acknowledged yet, so it is served from what is held in memory; the log is read only when
        the range starts below it (a warehouse core asking for what its Notify edge already received)."""
        with self._state:
            held = self._retained if subscriber is None else self._subscriptions.get(subscriber).outbox
            if held and held[0].dsv <= dsv:
                return [n for n in held if n.dsv >= dsv and (through is None or n.dsv <= through)]
        notes = self._read_log(dsv, through)
        if subscriber is None:
            return notes
        with self._state:
            sub = self._subscriptions.get(subscriber)
        return [sub.sees(n) for n in notes]

    def subscribe(self, name: str, relations: Sequence[str] | None = None) -> None:
        """Registers the subscriber `name` reading `relations` of this source (None: all), durably:
        a new one starts after the current DSV (its view starts from a snapshot taken at or after
        it); one already registered keeps its acknowledgement and takes the new relations.
        ModelError (one line) for a relation the source does not own."""
        with self._state:   # a commit cannot come between the DSV read and the registration
            relations = self._subscriptions.relations_named(name, relations)
            old = self._subscriptions.get(name) if name in self._subscriptions else None
            acknowledged = old.acknowledged if old is not None else self._dsv
            self._subscriptions.add(name, relations, acknowledged, self._retained)
        try:
            self._save_subscriber(name, relations, acknowledged)
        except BaseException:
            with self._state:
                self._subscriptions.remove(name)
                if old is not None:
                    self._subscriptions.add(name, old.relations, old.acknowledged, self._retained)
            raise

    def unsubscribe(self, name: str) -> None:
        """Removes the subscriber `name`: what was held for it alone is released, as dropping a
        replication slot releases the log it kept."""
        with self._state:
            self._subscriptions.get(name)
        self._delete_subscriber(name)
        with self._state:
            self._subscriptions.remove(name)
            self._release_below(self._subscriptions.retained_from(self._dsv))
        self._released()

    def has_subscriber(self, name: str) -> bool:
        with self._state:
            return name in self._subscriptions

    def acknowledge(self, dsv: int, subscriber: str = DEFAULT_SUBSCRIBER) -> None:
        """`subscriber` durably holds every notification up to `dsv` (a cumulative acknowledgement)."""
        with self._state:
            if dsv <= self._subscriptions.get(subscriber).acknowledged:
                return
        self._save_acknowledged(subscriber, dsv)
        with self._state:
            if subscriber in self._subscriptions:   # not removed meanwhile
                self._subscriptions.acknowledge(subscriber, dsv)
                self._release_below(self._subscriptions.retained_from(self._dsv))

    def unacknowledged(self, subscriber: str = DEFAULT_SUBSCRIBER) -> list[Notification]:
        """`subscriber`'s copies of the notifications it has not acknowledged, in DSV order (what
        its sender drains)."""
        with self._state:
            return self._subscriptions.unacknowledged(subscriber)

    def retained_from(self) -> int:
        """The oldest DSV some subscriber still needs: what memory holds from (the source's next
        DSV when none does)."""
        with self._state:
            return self._subscriptions.retained_from(self._dsv)

    def applied_through(self, dsv: int, subscriber: str = DEFAULT_SUBSCRIBER) -> None:
        """`subscriber`'s durable view reflects every transaction up to `dsv`: the changes kept for
        answers as of earlier versions (fedmodel.as_of) go once every subscriber's view reflects them."""
        with self._state:
            self._subscriptions.applied(subscriber, dsv)
        self._released()

    def _released(self) -> None:
        """A subscriber moved its applied mark or went: what no subscriber needs any more goes."""
        with self._state:
            floor = self._subscriptions.applied_floor()
            if floor is None:   # no one left to ask for answers as of earlier versions
                floor = self._dsv
        self.recent.forget_through(floor)

    def _release_below(self, dsv: int) -> None:
        """Forgets the notifications held in memory below `dsv` (with the state lock held)."""
        while self._retained and self._retained[0].dsv < dsv:
            self._retained.popleft()

    # ---- what the engine supplies ----

    def _trim_log(self, through: int) -> None:
        """Deletes the log's notifications up to DSV `through` (all acknowledged)."""
        raise NotImplementedError

    def _read_log(self, dsv: int, through: int | None) -> list[Notification]:
        """The log's notifications from `dsv` (through `through`), in DSV order."""
        raise NotImplementedError

    def _save_subscriber(self, name: str, relations: list[str] | None, acknowledged: int) -> None:
        """Writes (or replaces) the subscriber's row durably."""
        raise NotImplementedError

    def _delete_subscriber(self, name: str) -> None:
        raise NotImplementedError

    def _save_acknowledged(self, name: str, dsv: int) -> None:
        """Records durably that `name` acknowledged every notification up to `dsv`."""
        raise NotImplementedError
