"""The oracle: the view's SQL evaluated by DuckDB over source states rebuilt from their histories.

It shares no code with the maintenance path. From each source's committed transactions (full
row images, from the source's own log) it builds every relation as a *versioned* table: each row
with the half-open interval of its source's data source versions [vfrom, vto) in which it
existed. The user's view SQL, rewritten with sqlglot so that every relation is read at the state
each asked-for version vector names, then yields the view at all those states in one query,
grouping identical rows into a count.
"""

from __future__ import annotations

import datetime
from collections import Counter

import duckdb
import pyarrow as pa
import sqlglot
from sqlglot import exp

from fedmodel.catalog import Catalog
from fedmodel.codec import arrow_schema
from fedmodel.transactions import Notification

_FOREVER = 2 ** 62
_connection = None


def _db():
    """One DuckDB connection per process: the data travel as registered Arrow tables."""
    global _connection
    if _connection is None:
        _connection = duckdb.connect(config={"threads": 1})  # tiny states: threads only add overhead
    return _connection


class Oracle:
    def __init__(self, catalog: Catalog, view_sql: str, initial: dict[str, list[tuple]],
                 history: dict[str, list[Notification]]):
        """`history[source]` lists the source's committed transactions in DSV order, from DSV 2."""
        self.catalog = catalog
        self.history = history
        self.tables = {rel.name: _versioned(rel, initial.get(rel.name, []), history.get(rel.source, []))
                       for rel in catalog.relations}
        self.sql = _temporal(view_sql, catalog)

    def views_at(self, vectors: list[dict[str, int]]) -> list[dict[tuple, int]]:
        """The view at each state where source s is at DSV `vector[s]` (default: its initial DSV 1)."""
        sources = list(self.catalog.sources)
        states = pa.table({"__i": list(range(len(vectors))),
                           **{f"__{s}": [v.get(s, 1) for v in vectors] for s in sources}})
        db = _db()
        for name, table in self.tables.items():
            db.register(name, table)
        db.register("__states", states)
        try:
            rows = db.execute(self.sql).fetchall()
        finally:
            for name in [*self.tables, "__states"]:
                db.unregister(name)
        results = [Counter() for _ in vectors]
        for row in rows:
            results[row[0]][tuple(_plain(v) for v in row[1:-1])] += row[-1]
        return [dict(r) for r in results]

    def view_at(self, vector: dict[str, int]) -> dict[tuple, int]:
        return self.views_at([vector])[0]

    def final_versions(self) -> dict[str, int]:
        return {s: 1 + len(self.history.get(s, [])) for s in self.catalog.sources}


def _versioned(rel, initial: list[tuple], history: list[Notification]) -> pa.Table:
    """The relation's rows with the DSV interval of its source in which each existed."""
    live = {rel.key_of(r): (tuple(r), 1) for r in initial}
    closed = []
    for n in history:
        change = n.change(rel.name)
        if change is None:
            continue
        for row in change.removed:
            old, since = live.pop(rel.key_of(row))
            closed.append((*old, since, n.dsv))
        for row in change.added:
            live[rel.key_of(row)] = (tuple(row), n.dsv)
    rows = closed + [(*row, since, _FOREVER) for row, since in live.values()]
    schema = arrow_schema(rel.columns, rel.types)
    columns = [pa.array([r[i] for r in rows], type=f.type) if not pa.types.is_date32(f.type)
               else pa.array([datetime.date.fromisoformat(r[i]) if r[i] else None for r in rows], type=f.type)
               for i, f in enumerate(schema)]
    columns += [pa.array([r[-2] for r in rows], pa.int64()), pa.array([r[-1] for r in rows], pa.int64())]
    return pa.table(columns, names=[*rel.columns, "__vfrom", "__vto"])


def _temporal(view_sql: str, catalog: Catalog) -> str:
    """The view SQL read at every state of `__states`: `SELECT __i, <view>, count`."""
    tree = sqlglot.parse_one(view_sql, dialect="duckdb")
    conditions = []
    for table in tree.find_all(exp.Table):
        alias = table.alias_or_name
        source = catalog.relation(table.name).source
        at = f'__s."__{source}"'
        conditions.append(f'"{alias}".__vfrom <= {at} AND {at} < "{alias}".__vto')
    select = [exp.column("__i", table="__s").as_("__i"), *tree.expressions]
    tree.set("expressions", select)
    tree = tree.join(exp.to_table("__states").as_("__s"), join_type="cross")
    tree = tree.where(" AND ".join(conditions), dialect="duckdb")
    return f"SELECT *, COUNT(*) AS __count FROM ({tree.sql(dialect='duckdb')}) AS v GROUP BY ALL"


def _plain(v):
    return v.isoformat() if isinstance(v, datetime.date) else v
