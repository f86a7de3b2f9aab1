"""Every notification the warehouse has received, indexed for ordering and compensation.

Sze-Ling section 3 item 2: notifications are processed in data source version (DSV) order,
whatever their arrival order; duplicates are ignored (warehouse.core.receipts tells them).
Compensation (section 5) looks updates up by relation and base relation version number (BRV). A
DSV gap that persists is a lost notification (end of section 5.2).
"""

from __future__ import annotations

from fedlab.fedmodel.transactions import Notification, RelationChange
from fedlab.warehouse.core.events import Acknowledge
from fedlab.warehouse.core.receipts import Receipts


class NotificationLog:
    def __init__(self, start_dsv: dict[str, int]):
        """`start_dsv[source]` is the DSV of the state the view was materialised from."""
        self._by_source: dict[str, dict[int, Notification]] = {s: {} for s in start_dsv}
        self.receipts = Receipts(start_dsv)
        self._forgotten: dict[str, int] = {}     # every DSV up to it was dropped (forget_through)
        self._by_relation: dict[str, dict[int, RelationChange]] = {}
        # (relation, column positions) -> values in those columns -> the BRVs whose change holds a
        # row with them: compensation replays only the updates that can touch its result.
        self._touching: dict[tuple[str, tuple[int, ...]], dict[tuple, set[int]]] = {}

    def add(self, n: Notification) -> bool:
        """Records `n`; False when it is a duplicate (or older than the log's start)."""
        if not self.receipts.add(n.source, n.dsv):
            return False
        self._by_source.setdefault(n.source, {})[n.dsv] = n
        for change in n.changes:
            self._by_relation.setdefault(change.relation, {})[change.brv] = change
            for (relation, positions), index in self._touching.items():
                if relation == change.relation:
                    _index(index, positions, change)
        return True

    def contiguous(self, source: str) -> int:
        """The highest DSV such that every DSV up to it has been received."""
        return self.receipts.contiguous(source)

    def acknowledgement(self, source: str) -> Acknowledge:
        """What the core tells `source` it holds: every DSV up to the contiguous mark, and beyond."""
        return self.receipts.acknowledgement(source)

    def waiting(self, source: str, started: int) -> int:
        """How many received notifications of `source` lie above DSV `started` (behind a gap)."""
        return (max(0, self.contiguous(source) - started)
                + sum(1 for d in self.receipts.beyond(source) if d > started))

    def highest(self, source: str) -> int:
        return self.receipts.highest(source)

    def has_gap(self, source: str) -> bool:
        return bool(self.receipts.beyond(source))

    def last_missing(self, source: str) -> int | None:
        """The end of the newest gap: the highest DSV below the highest received that has not
        been received; None without a gap."""
        beyond = self.receipts.beyond(source)
        return next((d for d in range(self.highest(source) - 1, self.contiguous(source), -1) if d not in beyond), None)

    def get(self, source: str, dsv: int) -> Notification | None:
        return self._by_source.get(source, {}).get(dsv)

    def change(self, relation: str, brv: int) -> RelationChange:
        """The update that took `relation` to version `brv`; it must have been received."""
        return self._by_relation[relation][brv]

    def versions_touching(self, relation: str, positions: tuple[int, ...], values, lo: int, hi: int) -> list[int]:
        """The BRVs in (lo, hi] of `relation` whose update adds or removes a row whose columns at
        `positions` hold one of `values`: the only updates that can change a result restricted to
        those values (every other one is skipped by compensation anyway)."""
        key = (relation, positions)
        if key not in self._touching:
            self._touching[key] = index = {}
            for change in self._by_relation.get(relation, {}).values():
                _index(index, positions, change)
        index = self._touching[key]
        return sorted({brv for v in values for brv in index.get(v, ()) if lo < brv <= hi})

    def forget_through(self, source: str, dsv: int) -> None:
        """Drops notifications of `source` up to `dsv` (applied and no longer needed)."""
        received = self._by_source.get(source, {})
        # Applies come in DSV order: what is left to drop starts above the last one dropped.
        start = self._forgotten.get(source)
        if start is None:   # (not as get's default: that would scan every received DSV at each call)
            start = min(received, default=dsv + 1) - 1
        for d in range(start + 1, dsv + 1):
            if d not in received:
                continue
            for change in received.pop(d).changes:
                self._by_relation.get(change.relation, {}).pop(change.brv, None)
                for (relation, positions), index in self._touching.items():
                    if relation == change.relation:
                        for row in (*change.added, *change.removed):
                            value = tuple(row[p] for p in positions)
                            brvs = index.get(value, set())
                            brvs.discard(change.brv)
                            if not brvs:
                                index.pop(value, None)
        self._forgotten[source] = max(dsv, self._forgotten.get(source, dsv))


def _index(index: dict[tuple, set[int]], positions: tuple[int, ...], change: RelationChange) -> None:
    for row in (*change.added, *change.removed):
        index.setdefault(tuple(row[p] for p in positions), set()).add(change.brv)
