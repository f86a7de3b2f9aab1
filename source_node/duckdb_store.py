"""A source's durable state in one DuckDB file: the `--source-engine duckdb` choice.

DuckDB is an analytical engine: a commit costs 16-24 ms and a sub-query 12-38 ms, growing with
the data (docs/architecture.md 5), against well under a millisecond for SQLite, the default
(source_node.sqlite_store). It stays a tested choice, with the same contract
(source_node.durable_store.DurableStore, which holds everything engine-independent).

What is DuckDB's own: the store's tables in schema `_fedlab`, DATE values read back as ISO
strings (fedmodel.codec's form), sub-queries evaluated as one CTE per relation, and reading
ahead for a group (`_start_group`): a point lookup scans the table.
One connection serves writes and reads, so every use of it holds the writer's lock.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager, nullcontext
from typing import Sequence

import duckdb

from fedlab.fedmodel.catalog import Relation
from fedlab.fedmodel.codec import rows_to_arrow
from fedlab.fedmodel.subquery import Subquery
from fedlab.fedmodel.transactions import RelationChange, TransactionRequest
from fedlab.source_node.commit import read_ahead
from fedlab.source_node.durable_store import DurableStore, Query, quote, semijoin_chain

_META = "_fedlab"
_VALUES_MAX_ROWS = 32


class DuckDBStore(DurableStore):
    _refusals = (duckdb.Error,)

    # ---- the file ----

    def _connect(self) -> None:
        self._table_names = itertools.count()
        self._con = duckdb.connect(self.path)

    def close(self) -> None:
        with self._writer:
            self._con.close()

    def _is_new(self) -> bool:
        found = self._con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = 'source'",
            [_META]).fetchall()
        return found[0][0] == 0

    def _meta(self, table: str) -> str:
        return f"{_META}.{table}"

    def _create_table_sql(self, rel: Relation) -> str:
        columns = ", ".join(f"{quote(c)} {t}" for c, t in zip(rel.columns, rel.types))
        return f"CREATE TABLE {quote(rel.name)} ({columns}, PRIMARY KEY ({', '.join(map(quote, rel.key))}))"

    def _create_meta(self) -> None:
        self._con.execute(f"CREATE SCHEMA {_META}")
        self._con.execute(f"CREATE TABLE {_META}.source (source VARCHAR NOT NULL, dsv BIGINT NOT NULL)")
        self._con.execute(f"CREATE TABLE {_META}.versions (relation VARCHAR PRIMARY KEY, brv BIGINT NOT NULL)")
        self._con.execute(f"CREATE TABLE {_META}.outbox (dsv BIGINT PRIMARY KEY, notification VARCHAR NOT NULL)")

    def _legacy_acknowledged(self) -> int | None:
        # Such a file kept an acknowledged flag per outbox row.
        found = self._con.execute("SELECT count(*) FROM information_schema.columns WHERE table_schema = ? "
                                  "AND table_name = 'outbox' AND column_name = 'acknowledged'", [_META]).fetchall()
        if not found[0][0]:
            return None
        (acknowledged,), = self._con.execute(
            f"SELECT coalesce(min(dsv) - 1, (SELECT dsv FROM {_META}.source)) FROM {_META}.outbox "
            "WHERE NOT acknowledged").fetchall()
        self._con.execute(f"ALTER TABLE {_META}.outbox DROP COLUMN acknowledged")
        return acknowledged

    @contextmanager
    def _write_transaction(self):
        self._con.begin()
        try:
            yield
        except BaseException:
            self._con.rollback()
            raise
        self._con.commit()

    @contextmanager
    def _reading(self):
        with self._writer, self._write_transaction():
            yield lambda sql, params: self._con.execute(sql, list(params)).fetchall()

    # ---- writing ----

    def _insert(self, rel: Relation, rows: Sequence[tuple]) -> None:
        if rows:
            with self._table_of(rel.columns, rel.types, rows) as (table, params):
                self._con.execute(f"INSERT INTO {quote(rel.name)} SELECT * FROM {table}", params)

    def _delete_keys(self, rel: Relation, keys: list[tuple]) -> None:
        if keys:
            cols = ", ".join(quote(c) for c in rel.key)
            with self._table_of(rel.key, [rel.types[i] for i in rel.key_positions], keys) as (table, params):
                self._con.execute(f"DELETE FROM {quote(rel.name)} WHERE ({cols}) IN (SELECT {cols} FROM {table})", params)

    def _write_log(self, dsv: int, brv: dict[str, int], outbox: list[tuple[int, str]]) -> None:
        # Once per group, whatever it holds: each statement costs about a millisecond.
        for name, version in brv.items():
            self._con.execute(f"UPDATE {_META}.versions SET brv = ? WHERE relation = ?", [version, name])
        self._con.execute(f"UPDATE {_META}.source SET dsv = ?", [dsv])
        with self._table_of(["dsv", "notification"], ["BIGINT", "VARCHAR"], outbox) as (table, params):
            self._con.execute(f"INSERT INTO {_META}.outbox SELECT * FROM {table}", params)

    # ---- reading ahead for a group ----

    def _start_group(self, requests: Sequence[TransactionRequest]) -> None:
        """Reads every key the group names ahead (source_node.commit.read_ahead): a point lookup
        scans the table (DuckDB 2.0 uses no index for it under a compound key or a prepared
        parameter: 3-5 ms on SF 0.01 lineitem), so one scan for a whole group costs about what one
        lookup did."""
        super()._start_group(requests)
        self._known.update(read_ahead(self.catalog, self.source, requests, self._stored_with_keys))

    def _stored_with_keys(self, rel: Relation, keys: list[tuple]) -> list[tuple]:
        cols = ", ".join(quote(c) for c in rel.key)
        with self._table_of(rel.key, [rel.types[i] for i in rel.key_positions], keys) as (table, params):
            return self._select(rel, f"SELECT * FROM {quote(rel.name)} WHERE ({cols}) IN (SELECT {cols} FROM {table})",
                                params)

    # ---- sub-queries ----

    def _semijoins(self, query: Query, sq: Subquery, relations: list[Relation],
                   nets: dict[str, RelationChange]) -> list[list[tuple]]:
        if nets:
            # As of earlier versions (rare: a task's answers mostly need none): the chain over
            # whole relations, each rebuilt in Python (fedmodel.as_of).
            def scan(rel: Relation) -> list[tuple]:
                return self._decode(rel, query(f"SELECT * FROM {quote(rel.name)}", []))
            def matching(rel: Relation, positions: list[int], wanted: set[tuple]) -> list[tuple]:
                values = [(r, tuple(r[p] for p in positions)) for r in scan(rel)]
                return [r for r, v in values if None not in v and v in wanted]
            return semijoin_chain(self.catalog, sq, relations, scan, matching, nets)
        with self._probe(sq, relations[0]) as (probe, params):
            ctes = self._semijoin_ctes(sq, relations, probe)
            return [self._select(rel, f"WITH {', '.join(ctes[:i + 1])} SELECT * FROM __sq{i}", params)
                    for i, rel in enumerate(relations)]

    def _semijoin_ctes(self, sq: Subquery, relations: list[Relation], probe: str) -> list[str]:
        """One CTE `__sq<i>` per relation of the sub-query, each filtering its parent's CTE
        (the root: the probe table, with columns c0, c1, ...)."""
        position = {rel.name: i for i, rel in enumerate(relations)}
        ctes = []
        for i, (sr, rel) in enumerate(zip(sq.relations, relations)):
            conditions = []
            if i == 0 and sr.parent_columns:
                parent, parent_cols = probe, [f"c{j}" for j in range(len(sr.parent_columns))]
            elif i > 0:
                parent_rel = self.catalog.relation(sr.parent)
                parent = f"__sq{position[parent_rel.name]}"
                parent_cols = [parent_rel.columns[parent_rel.index(c)] for c in sr.parent_columns]
            if i > 0 or sr.parent_columns:
                # SQL inner-join semantics, as in the reference: a NULL join value matches nothing.
                match = " AND ".join(f"p.{quote(pc)} = r.{quote(rel.columns[rel.index(c)])}"
                                     for c, pc in zip(sr.columns, parent_cols))
                conditions.append(f"EXISTS (SELECT 1 FROM {parent} AS p WHERE {match})")
            if sr.selection_sql:
                # IS TRUE: a NULL outcome filters the row out, as in the reference; DuckDB 2.0
                # kept `5 IN (0, NULL)` rows when the probe came as a prepared-statement table.
                conditions.append(f"(({sr.selection_sql}) IS TRUE)")
            ctes.append(f"__sq{i} AS (SELECT r.* FROM {quote(rel.name)} AS r WHERE {' AND '.join(conditions) or 'true'})")
        return ctes

    def _probe(self, sq: Subquery, root: Relation):
        """The probe values as a table with columns c0, c1, ... typed like the root's join columns."""
        columns = [f"c{j}" for j in range(len(sq.probe_columns))]
        if not columns:
            return nullcontext(("", []))
        return self._table_of(columns, [root.types[root.index(c)] for c in sq.relations[0].columns], sq.probe)

    # ---- DuckDB helpers ----

    @contextmanager
    def _table_of(self, columns: Sequence[str], types: Sequence[str], rows: Sequence[Sequence]):
        """Yields (table expression, parameters) for `rows`, to select from in one statement.

        A few rows travel as a VALUES list of typed parameters, many as a registered Arrow table:
        binding parameters costs little for a few rows and grows fast with many, while registering
        a table costs milliseconds once and scans fast (both measured on DuckDB 2.0).
        """
        names = ", ".join(quote(c) for c in columns)
        if 0 < len(rows) <= _VALUES_MAX_ROWS:
            row = "(" + ", ".join(f"CAST(? AS {t})" for t in types) + ")"
            yield (f"(SELECT * FROM (VALUES {', '.join([row] * len(rows))}) AS v({names}))",
                   [v for r in rows for v in r])
            return
        name = f"__fedlab_rows{next(self._table_names)}"
        self._con.register(name, rows_to_arrow(columns, types, rows))
        try:
            yield name, []
        except duckdb.Error:
            # The transaction is aborted now and unregistering would fail too, hiding this error
            # (a duplicate key, say) behind "transaction is aborted": roll back first.
            self._con.rollback()
            self._con.begin()
            self._con.unregister(name)
            raise
        else:
            self._con.unregister(name)

    def _decode(self, rel: Relation, rows: list) -> list[tuple]:
        """DATE values as ISO strings (the form fedmodel.codec gives)."""
        dates = [i for i, t in enumerate(rel.types) if t == "DATE"]
        if not dates:
            return rows
        return [tuple(v.isoformat() if i in dates and v is not None else v for i, v in enumerate(r)) for r in rows]
