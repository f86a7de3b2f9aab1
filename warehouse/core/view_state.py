"""The materialized view as the core holds it: a bag of view rows with multiplicities.

The core keeps the view in memory so that partial self-maintenance (Sze-Ling 4.2) can read it
and key-based refreshes (4.3, Example 7: `UPDATE V SET F = f2 WHERE C = c1`) can find their rows;
the Delta table is its durable copy, written in batches. Rows never carry the count column;
the count is the multiplicity.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence


class MaterializedView:
    def __init__(self, rows: dict[tuple, int] | None = None, strict: bool = True):
        """`strict`: a count below zero is a bug (raise); a baseline without compensation may
        legitimately drive counts negative, and the checker then reports the anomaly."""
        self.strict = strict
        self.counts: Counter = Counter()
        # positions -> values there -> the rows holding them, in the order they came (a dict: the
        # same operations give the same order in every process, which a set of strings would not)
        self._indexes: dict[tuple[int, ...], dict[tuple, dict[tuple, None]]] = {}
        self.apply(dict(rows or {}))

    def apply(self, delta: dict[tuple, int]) -> None:
        """Adds signed multiplicities; a row whose count reaches zero leaves the view."""
        for row, change in delta.items():
            if not change:
                continue
            before = self.counts.get(row, 0)
            after = before + change
            if after < 0 and self.strict:
                raise ValueError(f"view row {row} would reach count {after}: a delta was applied twice or lost")
            if after:
                self.counts[row] = after
            else:
                del self.counts[row]
            if (before == 0) != (after == 0):  # indexes hold every row with a nonzero count
                for positions, index in self._indexes.items():
                    bucket = index.setdefault(tuple(row[i] for i in positions), {})
                    if after:
                        bucket[row] = None
                    else:
                        bucket.pop(row, None)

    def rows_where(self, positions: Sequence[int], values: tuple) -> list[tuple]:
        """View rows whose columns at `positions` equal `values` (an index per position list)."""
        positions = tuple(positions)
        index = self._indexes.get(positions)
        if index is None:
            index = {}
            for row in self.counts:
                index.setdefault(tuple(row[i] for i in positions), {})[row] = None
            self._indexes[positions] = index
        return list(index.get(tuple(values), ()))

    def delete_where(self, positions: Sequence[int], keys: Iterable[tuple]) -> dict[tuple, int]:
        """The delta of `DELETE FROM V WHERE cols = key` for each key."""
        delta: Counter = Counter()
        for key in dict.fromkeys(keys):
            for row in self.rows_where(positions, key):
                delta[row] -= self.counts[row]
        return dict(delta)

    def update_where(self, positions: Sequence[int], keys: Iterable[tuple], assign: dict[int, object]) -> dict[tuple, int]:
        """The delta of `UPDATE V SET col_i = v_i WHERE cols = key` for each key."""
        delta: Counter = Counter()
        for key in dict.fromkeys(keys):
            for row in self.rows_where(positions, key):
                new = tuple(assign.get(i, v) for i, v in enumerate(row))
                if new != row:
                    delta[row] -= self.counts[row]
                    delta[new] += self.counts[row]
        return {r: c for r, c in delta.items() if c}

    def __len__(self) -> int:
        return len(self.counts)

    def snapshot(self) -> dict[tuple, int]:
        return dict(self.counts)
