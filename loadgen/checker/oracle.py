"""The oracle: the view's SQL evaluated by DuckDB over source states rebuilt from their histories.

It shares no code with the maintenance path: it replays each source's committed transactions
(full row images from the sources' own logs) into DuckDB tables and runs the user's view SQL,
grouping identical rows into a count.
"""

from __future__ import annotations

import datetime
from collections import Counter

import duckdb

from fedmodel.catalog import Catalog
from fedmodel.transactions import Notification


class Oracle:
    def __init__(self, catalog: Catalog, view_sql: str, initial: dict[str, list[tuple]],
                 history: dict[str, list[Notification]]):
        """`history[source]` lists the source's committed transactions in DSV order, from DSV 2."""
        self.catalog = catalog
        self.sql = f"SELECT *, COUNT(*) AS __count FROM ({view_sql}) AS v GROUP BY ALL"
        self.history = history
        self.db = duckdb.connect(config={"threads": 1})  # tiny states: threads only add overhead
        for rel in catalog.relations:
            cols = ", ".join(f'"{c}" {t}' for c, t in zip(rel.columns, rel.types))
            self.db.execute(f'CREATE TABLE "{rel.name}" ({cols})')
            rows = initial.get(rel.name, [])
            if rows:
                marks = ", ".join("?" for _ in rel.columns)
                self.db.executemany(f'INSERT INTO "{rel.name}" VALUES ({marks})', [list(r) for r in rows])
        self.position = {s: 1 for s in catalog.sources}

    def view_at(self, versions: dict[str, int]) -> dict[tuple, int]:
        """The view at the state where each source is at DSV `versions[source]` (default: initial)."""
        for source in self.catalog.sources:
            target = versions.get(source, 1)
            while self.position[source] < target:
                self._apply(self.history[source][self.position[source] - 1], forward=True)
                self.position[source] += 1
            while self.position[source] > target:
                self.position[source] -= 1
                self._apply(self.history[source][self.position[source] - 1], forward=False)
        result = Counter()
        for row in self.db.execute(self.sql).fetchall():
            result[tuple(_plain(v) for v in row[:-1])] += row[-1]
        return dict(result)

    def final_versions(self) -> dict[str, int]:
        return {s: 1 + len(self.history.get(s, [])) for s in self.catalog.sources}

    def _apply(self, n: Notification, forward: bool) -> None:
        for change in n.changes:
            rel = self.catalog.relation(change.relation)
            removed, added = (change.removed, change.added) if forward else (change.added, change.removed)
            where = " AND ".join(f'"{c}" = ?' for c in rel.key)
            if removed:
                self.db.executemany(f'DELETE FROM "{rel.name}" WHERE {where}', [list(rel.key_of(r)) for r in removed])
            marks = ", ".join("?" for _ in rel.columns)
            if added:
                self.db.executemany(f'INSERT INTO "{rel.name}" VALUES ({marks})', [list(r) for r in added])


def _plain(v):
    return v.isoformat() if isinstance(v, datetime.date) else v
