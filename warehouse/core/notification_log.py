"""Every notification the warehouse has received, indexed for ordering and compensation.

Sze-Ling section 3 item 2: notifications are processed in data source version (DSV) order,
whatever their arrival order; duplicates are ignored. Compensation (section 5) looks updates up
by relation and base relation version number (BRV). A DSV gap that persists is a lost
notification (end of section 5.2).
"""

from __future__ import annotations

from fedmodel.transactions import Notification, RelationChange
from warehouse.core.events import Acknowledge


class NotificationLog:
    def __init__(self, start_dsv: dict[str, int]):
        """`start_dsv[source]` is the DSV of the state the view was materialised from."""
        self._by_source: dict[str, dict[int, Notification]] = {s: {} for s in start_dsv}
        self._contiguous = dict(start_dsv)
        self._by_relation: dict[str, dict[int, RelationChange]] = {}

    def add(self, n: Notification) -> bool:
        """Records `n`; False when it is a duplicate (or older than the log's start)."""
        received = self._by_source.setdefault(n.source, {})
        if n.dsv <= self._contiguous.get(n.source, 0) or n.dsv in received:
            return False
        received[n.dsv] = n
        for change in n.changes:
            self._by_relation.setdefault(change.relation, {})[change.brv] = change
        c = self._contiguous.get(n.source, 0)
        while c + 1 in received:
            c += 1
        self._contiguous[n.source] = c
        return True

    def contiguous(self, source: str) -> int:
        """The highest DSV such that every DSV up to it has been received."""
        return self._contiguous.get(source, 0)

    def acknowledgement(self, source: str) -> Acknowledge:
        """What the core tells `source` it holds: every DSV up to the contiguous mark, and beyond."""
        c = self.contiguous(source)
        return Acknowledge(source, c, tuple(sorted(d for d in self._by_source.get(source, {}) if d > c)))

    def waiting(self, source: str, started: int) -> int:
        """How many received notifications of `source` lie above DSV `started` (behind a gap)."""
        return sum(1 for d in self._by_source.get(source, {}) if d > started)

    def highest(self, source: str) -> int:
        received = self._by_source.get(source, {})
        return max(received, default=self._contiguous.get(source, 0))

    def has_gap(self, source: str) -> bool:
        return self.highest(source) > self.contiguous(source)

    def last_missing(self, source: str) -> int | None:
        """The end of the newest gap: the highest DSV below the highest received that has not
        been received; None without a gap."""
        received = self._by_source.get(source, {})
        return next((d for d in range(self.highest(source) - 1, self.contiguous(source), -1) if d not in received), None)

    def get(self, source: str, dsv: int) -> Notification | None:
        return self._by_source.get(source, {}).get(dsv)

    def change(self, relation: str, brv: int) -> RelationChange:
        """The update that took `relation` to version `brv`; it must have been received."""
        return self._by_relation[relation][brv]

    def has_change(self, relation: str, brv: int) -> bool:
        return brv in self._by_relation.get(relation, {})

    def forget_through(self, source: str, dsv: int) -> None:
        """Drops notifications of `source` up to `dsv` (applied and no longer needed)."""
        received = self._by_source.get(source, {})
        for d in [d for d in received if d <= dsv]:
            for change in received.pop(d).changes:
                self._by_relation.get(change.relation, {}).pop(change.brv, None)
