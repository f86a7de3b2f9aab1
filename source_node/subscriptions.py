"""A source's subscribers: the warehouses it serves, each with its own outbox (docs/architecture.md 5).

A source serves any number of warehouses. Each subscribes by a stable name, naming the relations
its views read (None: all of the source's), and is kept as a replication slot is: its own
cumulative acknowledgement (the DSV up to which it holds every notification durably), its own
outbox of the notifications it has not acknowledged yet, and its own applied mark (the DSV its
durable view reflects, below which it asks no answer as of an earlier version: fedmodel.as_of).
A slow subscriber, or one that is down, holds back only its own outbox; what the log must keep
is what the slowest still needs (`retained_from`, `applied_floor`), and removing a subscriber
releases what was kept for it.

A source starts with one subscriber, DEFAULT_SUBSCRIBER, acknowledged up to DSV 1: the warehouse
a single-warehouse federation has always had, so that such a federation works as before.

A subscriber sees every transaction of the source, in DSV order, but only the changes to its
relations: a transaction that touched none of them reaches it with no changes, so that its DSVs
stay contiguous and a lost notification is still found by its gap (docs/architecture.md 4.2).

Pure bookkeeping, no I/O and no locks: the stores (source_node.memory_store for the simulator,
source_node.subscriber_outbox for the durable ones) hold it under their own lock and make the
acknowledgements and the registrations durable themselves.

>>> from fedlab.fedmodel.transactions import Notification, RelationChange
>>> subs = Subscriptions(["q", "r"])
>>> subs.add("fast", None, acknowledged=1)
>>> subs.add("slow", ["R"], acknowledged=1)
>>> subs.committed([Notification("s", 2, "t2", (RelationChange("r", 2), RelationChange("q", 2)))])
>>> subs.acknowledge("fast", 2)
True
>>> [n.relations for n in subs.unacknowledged("fast")], [n.relations for n in subs.unacknowledged("slow")]
([], [('r',)])
>>> subs.retained_from(2), subs.remove("slow"), subs.retained_from(2)
(2, None, 3)
>>> subs.add("late", ["p"], acknowledged=2)
Traceback (most recent call last):
fedlab.fedmodel.errors.ModelError: subscriber 'late': the source owns no relation named 'p' (it owns q, r)
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER
from fedlab.fedmodel.transactions import Notification

__all__ = ["DEFAULT_SUBSCRIBER", "Subscriber", "Subscriptions"]


@dataclass
class Subscriber:
    """One subscribing warehouse: what it reads, what it acknowledged, what it still lacks."""

    name: str
    relations: frozenset[str] | None   # the source's names of them; None: all of the source's
    acknowledged: int                   # every DSV up to it is durable at the subscriber
    applied: int                        # its durable view reflects every DSV up to it
    outbox: deque = field(default_factory=deque)   # its copies above `acknowledged`, in DSV order

    def sees(self, note: Notification) -> Notification:
        """`note` as this subscriber receives it: the changes to its relations only."""
        if self.relations is None or all(c.relation in self.relations for c in note.changes):
            return note
        kept = tuple(c for c in note.changes if c.relation in self.relations)
        return Notification(note.source, note.dsv, note.txn_id, kept, note.commit_time)


class Subscriptions:
    """The subscribers of one source (which owns the relations `owned`), by name."""

    def __init__(self, owned: Iterable[str]):
        self._owned = {name.lower(): name for name in owned}
        self._by_name: dict[str, Subscriber] = {}

    def relations_named(self, name: str, relations: Iterable[str] | None) -> list[str] | None:
        """`relations` as the source names them, sorted (None stays None: all of them);
        ModelError (one line) for a name it does not own."""
        if relations is None:
            return None
        relations = list(relations)
        unknown = [r for r in relations if r.lower() not in self._owned]
        if unknown:
            raise ModelError(f"subscriber {name!r}: the source owns no relation named {unknown[0]!r} "
                             f"(it owns {', '.join(sorted(self._owned.values()))})")
        return sorted({self._owned[r.lower()] for r in relations})

    def add(self, name: str, relations: Iterable[str] | None, acknowledged: int,
            backlog: Iterable[Notification] = ()) -> None:
        """Registers `name` (or changes its relations), acknowledged up to `acknowledged`, its
        outbox the notifications of `backlog` above that (the log's, in DSV order)."""
        if not name:
            raise ModelError("a subscriber needs a name")
        wanted = self.relations_named(name, relations)
        sub = Subscriber(name, None if wanted is None else frozenset(wanted), acknowledged, acknowledged)
        sub.outbox.extend(sub.sees(n) for n in backlog if n.dsv > acknowledged)
        self._by_name[name] = sub

    def remove(self, name: str) -> None:
        """Forgets `name` and what was kept for it."""
        self.get(name)
        del self._by_name[name]

    def get(self, name: str) -> Subscriber:
        """The subscriber `name`; ModelError (one line) when there is none."""
        sub = self._by_name.get(name)
        if sub is None:
            known = ", ".join(sorted(self._by_name)) or "none"
            raise ModelError(f"no subscriber named {name!r} (subscribers: {known})")
        return sub

    def __iter__(self):
        return iter(list(self._by_name.values()))

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def __bool__(self) -> bool:
        return bool(self._by_name)

    def committed(self, notes: Iterable[Notification]) -> None:
        """Newly committed notifications, in DSV order: each subscriber's copy joins its outbox."""
        notes = list(notes)
        for sub in self._by_name.values():   # (a source replaying its WAL offers some acknowledged ones again)
            sub.outbox.extend(sub.sees(n) for n in notes if n.dsv > sub.acknowledged)

    def acknowledge(self, name: str, dsv: int) -> bool:
        """`name` holds every notification up to `dsv` durably; True when that is news."""
        sub = self.get(name)
        if dsv <= sub.acknowledged:
            return False
        sub.acknowledged = dsv
        while sub.outbox and sub.outbox[0].dsv <= dsv:
            sub.outbox.popleft()
        return True

    def applied(self, name: str, dsv: int) -> None:
        """`name`'s durable view reflects every transaction up to `dsv`."""
        sub = self.get(name)
        sub.applied = max(sub.applied, dsv)

    def unacknowledged(self, name: str) -> list[Notification]:
        """`name`'s copies it has not acknowledged, in DSV order (what its sender drains)."""
        return list(self.get(name).outbox)

    def truncate_below(self, dsv: int) -> None:
        """The log no longer holds the DSVs below `dsv` (a retention cap): no outbox keeps them."""
        for sub in self._by_name.values():
            while sub.outbox and sub.outbox[0].dsv < dsv:
                sub.outbox.popleft()

    def retained_from(self, dsv: int) -> int:
        """The oldest DSV some subscriber has not acknowledged, what the log must keep from
        (`dsv` + 1, the source's next, without subscribers)."""
        return min((s.acknowledged + 1 for s in self._by_name.values()), default=dsv + 1)

    def applied_floor(self) -> int | None:
        """The lowest applied mark: the changes kept for answers as of earlier versions may go up
        to it (every subscriber's view reflects them); None without subscribers."""
        return min((s.applied for s in self._by_name.values()), default=None)
