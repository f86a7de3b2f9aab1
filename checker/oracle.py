"""The oracle: the view's SQL evaluated over source states rebuilt from their histories, by an SQL
backend (DuckDB, the default, or PostgreSQL: checker.postgres) so that a verdict need not
rest on one backend.

It shares no code with the maintenance path. From each source's committed transactions (full
row images, from the source's own log) it builds every relation the view reads as a *versioned*
table: each row with the half-open interval of its source's data source versions [vfrom, vto) in
which it existed. The user's view SQL is rewritten with sqlglot in one of two ways:
- at given states (`views_at`, `temporal_sql`): every relation read at the state each asked-for
  version vector names, the view at all those states in one query; its result is the sum of the
  views' sizes, fit for a few states (the checker's search for matching source states);
- along a chain of states (`changes_along`, `chain_sql`): each row's DSV interval mapped to the
  positions of the chain at which it exists (checker.chain), the view evaluated once over
  the rows of the whole history, each view row with the positions at which it exists; its result
  is the view's history (each row once per life), however many states there are: how the
  checker reads the view at every state of a run.
Either way identical rows are grouped into a count. An aggregate view (GROUP BY with aggregates, or
DISTINCT), or one with EXISTS (a row lives while some partner does) or with an outer join (a row
padded with NULLs lives while its base rows have no partner), is not a union of per-row lives,
so it is only evaluated at given states: each state's groups apart (GROUP BY the state as
well), and its history along a chain is the difference of the views at successive states; an
aggregate without GROUP BY, which SQL answers with one row even over no rows, gets that row at a
state where the join is empty (the view's SQL evaluated once over empty relations). An outer join
must pair the rows of one state before it pads: a relation's rows are read once per state they
exist at, each tagged with the state (`__i`), and every join's condition also equates the
states of its two sides (`padded_sql`), since a condition on the states in WHERE, applied after
the join, would let a row of another state count as a partner. A live run's history of an
outer-join view holds the join its warehouse maintains, the terms' padded rows, none subsumed:
read with `terms`, an outer join's SQL means those rows (`terms_sql`, derived from the SQL's
meaning, not from the maintenance path's term rules), which live while their base rows do and
so are evaluated along a chain as a join's are. The tables and the rewrites are built once,
here, for every backend; a backend only loads the tables, runs the query in its dialect and
returns the rows.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
from collections import Counter
from dataclasses import replace
from typing import Iterator, Protocol

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.merge_subqueries import merge_subqueries
from sqlglot.optimizer.qualify import qualify

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.codec import arrow_schema
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import Notification
from fedlab.checker.chain import state_intervals

ORACLES = ("duckdb", "postgres")
_FOREVER = 2 ** 62
_connection = None


class OracleError(ModelError):
    """The oracle's backend is unreachable or failed (fedlab check exits 2)."""


class Backend(Protocol):
    dialect: str   # sqlglot's name for the backend's SQL dialect

    def query(self, sql: str, tables: dict[str, pa.Table]) -> list[tuple]:
        """The rows of `sql` with each of `tables` readable under its name."""


class DuckDBBackend:
    """DuckDB in this process: the tables are read as registered Arrow tables, without copying."""

    dialect = "duckdb"

    def query(self, sql: str, tables: dict[str, pa.Table]) -> list[tuple]:
        db = _db()
        for name, table in tables.items():
            db.register(name, table)
        try:
            return db.execute(sql).fetchall()
        finally:
            for name in tables:
                db.unregister(name)


def _db():
    """One DuckDB connection per process."""
    global _connection
    if _connection is None:
        _connection = duckdb.connect(config={"threads": 1})  # tiny states: threads only add overhead
    return _connection


@contextlib.contextmanager
def backend_named(name: str, pg_dsn: str | None = None) -> Iterator[Backend]:
    """The backend `name` (one of ORACLES), closed afterwards. PostgreSQL: the server at `pg_dsn`,
    or without one a throwaway server started for the purpose and removed afterwards."""
    if name == "duckdb":
        yield DuckDBBackend()
    elif name == "postgres":
        from fedlab.checker.postgres import postgres_backend

        with postgres_backend(pg_dsn) as backend:
            yield backend
    else:
        raise OracleError(f"unknown oracle {name!r} (one of {', '.join(ORACLES)})")


class Oracle:
    def __init__(self, catalog: Catalog, view_sql: str, initial: dict[str, list[tuple]],
                 history: dict[str, list[Notification]], backend: Backend | None = None, terms: bool = False,
                 start: dict[str, int] | None = None):
        """`initial`: every relation at its source's DSV `start[source]` (default 1, the source's
        first state); `history[source]` lists the source's committed transactions from the next
        DSV on, in DSV order (the view is known at the states from there: a checker judging a long
        run a window at a time asks for a window's). `terms`: an outer join's SQL stands for the
        padded rows of all its terms, none subsumed (`terms_sql`): what a warehouse keeps of an
        outer-join view, not the view its user sees."""
        self.catalog = catalog
        self.view_sql, self.initial = view_sql, initial
        self.history = history
        self.start = {s: (start or {}).get(s, 1) for s in catalog.sources}
        self.backend = backend or DuckDBBackend()
        read = {table.name.lower() for table in _view_tree(view_sql, catalog).find_all(exp.Table)}
        self.tables = {rel.name.lower(): _versioned(rel, initial.get(rel.name, []), history.get(rel.source, []),
                                                    self.start[rel.source])
                       for rel in catalog.relations if rel.name.lower() in read}
        self._source_of = {rel.name.lower(): rel.source for rel in catalog.relations}
        tree = _view_tree(view_sql, catalog)
        self.terms = terms
        self.padded = _outer_join(tree) and not terms   # rows padded as the user's outer joins pad them
        self.sql = (padded_sql(view_sql, catalog, self.backend.dialect) if self.padded
                    else temporal_sql(view_sql, catalog, self.backend.dialect, terms))
        self.aggregate_kind = _aggregate_kind(tree)
        # A row of a view with EXISTS exists while some partner does, and a row an outer join pads
        # while none does, not only while its own base rows do: each is found state by state, as
        # an aggregate view's are. A term's row lives while its base rows do.
        along_chain = not self.aggregate_kind and tree.find(exp.Exists) is None and not self.padded
        self.chain_sql = chain_sql(view_sql, catalog, self.backend.dialect, terms) if along_chain else None
        self._empty_row = _empty_row(tree, self.tables, self.backend) if self.aggregate_kind == "grand total" else None

    def views_at(self, vectors: list[dict[str, int]]) -> list[dict[tuple, int]]:
        """The view at each state where source s is at DSV `vector[s]` (default: its initial DSV 1)."""
        if self.padded:
            rows = self.backend.query(self.sql, {
                name: _by_state(table, [v.get(self._source_of[name], 1) for v in vectors])
                for name, table in self.tables.items()})
        else:
            states = pa.table({"__i": pa.array(range(len(vectors)), pa.int64()),
                               **{_state_column(i): pa.array([v.get(s, 1) for v in vectors], pa.int64())
                                  for i, s in enumerate(self.catalog.sources)}})
            rows = self.backend.query(self.sql, {**self.tables, "__states": states})
        results = [Counter() for _ in vectors]
        for row in rows:
            results[row[0]][tuple(_plain(v) for v in row[1:-1])] += row[-1]
        if self._empty_row is not None:
            for result in results:
                if not result:
                    result[self._empty_row] = 1
        return [dict(r) for r in results]

    def view_at(self, vector: dict[str, int]) -> dict[tuple, int]:
        return self.views_at([vector])[0]

    def changes_along(self, vectors: list[dict[str, int]]) -> list[dict[tuple, int]]:
        """The view along a chain of states (source s at DSV `vector[s]`, default 1): first the
        view at `vectors[0]`, then at each next vector the change from the one before (rows to
        signed counts, none zero). Equal, once summed, to `views_at(vectors)`, at the cost of the
        view's history over the chain rather than of every view (checker.chain: cheapest
        when no source's DSV goes back along the chain)."""
        if self.chain_sql is None:
            return _differences(self.views_at(vectors))
        tables = {name: state_intervals(table, [v.get(self._source_of[name], 1) for v in vectors])
                  for name, table in self.tables.items()}
        changes = [Counter() for _ in vectors]
        for start, end, *row, count in self.backend.query(self.chain_sql, tables):
            view_row = tuple(_plain(v) for v in row)
            changes[start][view_row] += count
            if end < len(vectors):
                changes[end][view_row] -= count
        # A row may end where an equal one, of other base rows, starts: no change there.
        return [{row: count for row, count in change.items() if count} for change in changes]

    def with_part_of(self, source: str, dsv: int, relations: tuple[str, ...]) -> "Oracle":
        """The oracle of the history that ends, at `source`, with transaction `dsv` changing only
        `relations`: at `source` DSV `dsv` it gives the view a state showing that part would hold.
        (What follows at `source` is left out: it may undo rows the left-out part wrote.)"""
        log = list(self.history[source][:dsv - self.start[source]])
        log[-1] = replace(log[-1], changes=tuple(c for c in log[-1].changes if c.relation in relations))
        return Oracle(self.catalog, self.view_sql, self.initial, {**self.history, source: log}, self.backend, self.terms,
                      self.start)

    def transaction(self, source: str, dsv: int) -> Notification | None:
        """`source`'s transaction `dsv`, when the history holds it."""
        log = self.history.get(source, [])
        at = dsv - self.start[source] - 1
        return log[at] if 0 <= at < len(log) else None

    def final_versions(self) -> dict[str, int]:
        return {s: self.start[s] + len(self.history.get(s, [])) for s in self.catalog.sources}


def _versioned(rel, initial: list[tuple], history: list[Notification], start: int = 1) -> pa.Table:
    """The relation's rows with the DSV interval of its source in which each existed, from `start`
    (the DSV `initial` is at) on."""
    live = {rel.key_of(r): (tuple(r), start) for r in initial}
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
    # Lower-case names, quoted everywhere: DuckDB's identifiers ignore case, PostgreSQL's fold it.
    return pa.table(columns, names=[*(c.lower() for c in rel.columns), "__vfrom", "__vto"])


def _aggregate_kind(tree: exp.Select) -> str | None:
    """"grouped" (GROUP BY or DISTINCT), "grand total" (aggregates, no GROUP BY) or None."""
    if tree.args.get("group") or tree.args.get("distinct"):
        return "grouped"
    return "grand total" if any(tree.find_all(exp.AggFunc)) else None


def _empty_row(tree: exp.Select, tables: dict[str, pa.Table], backend: Backend) -> tuple:
    """The one row an aggregate without GROUP BY has over relations with no rows."""
    empty = {name: table.slice(0, 0) for name, table in tables.items()}
    sql = tree.copy()
    for identifier in sql.find_all(exp.Identifier):
        identifier.set("this", identifier.this.lower())
    (row,) = backend.query(sql.sql(dialect=backend.dialect, identify=True), empty)
    return tuple(_plain(v) for v in row)


def _differences(views: list[dict[tuple, int]]) -> list[dict[tuple, int]]:
    """The first view, then each one's change from the one before (rows to signed counts)."""
    changes, before = [], Counter()
    for view in views:
        change = Counter(view)
        change.subtract(before)
        changes.append({r: c for r, c in change.items() if c})
        before = Counter(view)
    return changes


def temporal_sql(view_sql: str, catalog: Catalog, dialect: str, terms: bool = False) -> str:
    """The view SQL read at every state of `__states`, in `dialect`: `SELECT __i, <view>, count`;
    with `terms`, an outer join's terms (`terms_sql`).

    Each relation is joined with the state table on its source's column (`__s<n>`, n its source's
    place in the catalog) so that only the rows alive at that DSV take part. Identifiers are
    lower-cased and quoted, matching the tables' names in every backend. The view's columns are
    renamed by position (`__c<k>`), since a view may select two columns of the same name.
    Division by zero is NULL, as the project defines it (fedmodel.predicates, whose rewrite this
    one repeats so as to share no code with it), whatever the backend does on its own: each divisor
    of `/` and `%` is wrapped in NULLIF(divisor, 0), where PostgreSQL would raise and DuckDB 2.0
    return infinity (`/`) or raise (`%`).

    >>> from fedlab.fedmodel.catalog import Catalog
    >>> cat = Catalog.from_dict({"sources": {"x": {"R1": {"columns": ["A", "B"], "key": ["A"]}}}})
    >>> temporal_sql("SELECT R1.A FROM R1 WHERE R1.B > 2", cat, "postgres")  # doctest: +NORMALIZE_WHITESPACE
    'SELECT "__i", "__c0", COUNT(*) AS "__count" FROM (SELECT "__s"."__i" AS "__i", "r1"."a" AS "__c0"
     FROM "r1" CROSS JOIN "__states" AS "__s" WHERE "r1"."b" > 2 AND "r1"."__vfrom" <= "__s"."__s0"
     AND "__s"."__s0" < "r1"."__vto") AS "v" GROUP BY "__i", "__c0"'
    """
    tree = _view_tree(view_sql, catalog)
    state = [exp.column("__i", table="__s").as_("__i")]
    if terms and _outer_join(tree):
        return _counted([(_at_states(branch, catalog, present), state) for branch, present in terms_sql(tree)], dialect)
    return _counted([(_at_states(tree, catalog, None), state)], dialect)


def _at_states(tree: exp.Select, catalog: Catalog, present: set[str] | None) -> exp.Select:
    """`tree` joined with the states, each of its tables (those named in `present`, when given:
    the others are read empty) read at the state of its row."""
    sources = list(catalog.sources)
    conditions = []
    for table in list(tree.find_all(exp.Table)):
        alias = table.alias_or_name
        if present is not None and alias not in present:
            continue
        at = exp.column(_state_column(sources.index(catalog.relation(table.name).source)), table="__s")
        alive = [exp.column("__vfrom", table=alias) <= at, at < exp.column("__vto", table=alias)]
        scope = table.find_ancestor(exp.Select)
        if scope is tree:
            conditions += alive
        else:   # a relation of an EXISTS subquery: its rows alive at the outer query's state
            scope.where(*alive, copy=False)
    tree = tree.join(exp.to_table("__states").as_("__s"), join_type="cross").where(*conditions)
    if _aggregate_kind(tree) and not tree.args.get("distinct"):   # each state's groups apart
        tree = tree.group_by(exp.column("__i", table="__s"))
    return tree


def terms_sql(tree: exp.Select) -> list[tuple[exp.Select, set[str]]]:
    """The rows of an outer-join SQL's terms, each padded, each once and none subsumed (what a
    warehouse maintains for an outer-join view: its history), as SELECTs to be read UNION ALL:
    one per non-empty set S of the tables of FROM, with S (their aliases). Derived here from
    the SQL's meaning alone, by none of the maintenance path's term rules: a row of the SQL over
    a database in which every table outside S is empty, with every table of S present, is a row
    of the term S (with the others empty no larger term has rows to subsume it, and a row with S
    present is of no other term), and every row of term S is one; for an S that is no term
    there is none. So each branch reads the tables outside S as empty tables, and its caller
    keeps the rows in which those of S are present (alive at a state, or along a chain). Such a
    row is a combination of S's rows that meets the conditions among them: an inner join's, so
    it lives while its base rows do. Left out first, as they pick the rows a user sees after
    subsumption and not the terms: the anti-join's tests of padding, `x.c IS NULL` on a column an
    ON equates (`... LEFT JOIN b ON b.i = a.i WHERE b.i IS NULL`: its join keeps both terms).

    >>> tree = sqlglot.parse_one("SELECT r.a, s.b FROM r LEFT JOIN s ON r.a = s.a WHERE s.a IS NULL")
    >>> [(b.sql(), sorted(p)) for b, p in terms_sql(tree)]  # doctest: +NORMALIZE_WHITESPACE
    [('SELECT r.a, s.b FROM r LEFT JOIN (SELECT * FROM s AS __none WHERE FALSE) AS s ON r.a = s.a', ['r']),
     ('SELECT r.a, s.b FROM (SELECT * FROM r AS __none WHERE FALSE) AS r LEFT JOIN s ON r.a = s.a', ['s']),
     ('SELECT r.a, s.b FROM r LEFT JOIN s ON r.a = s.a', ['r', 's'])]
    """
    tree = _without_padding_tests(tree)
    aliases = [table.alias_or_name for table in tree.find_all(exp.Table)]
    branches = []
    for size in range(1, len(aliases) + 1):
        for present in itertools.combinations(aliases, size):
            branch = tree.copy()
            for table in list(branch.find_all(exp.Table)):
                if table.alias_or_name not in present:
                    empty = exp.select("*").from_(exp.to_table(table.name).as_("__none")).where(exp.false())
                    table.replace(empty.subquery(table.alias_or_name))
            branches.append((branch, set(present)))
    return branches


def _without_padding_tests(tree: exp.Select) -> exp.Select:
    """`tree` without WHERE's conjuncts `x.c IS NULL` on a column some ON condition equates."""
    equated = {(c.table.lower(), c.name.lower()) for join in tree.find_all(exp.Join) if join.args.get("on")
               for eq in join.args["on"].find_all(exp.EQ) for c in eq.find_all(exp.Column)}
    where = tree.args.get("where")
    if where is None:
        return tree
    conjuncts, kept = [where.this], []
    while conjuncts:
        c = conjuncts.pop(0).unnest()
        if isinstance(c, exp.And):
            conjuncts[:0] = [c.this, c.expression]
        elif not (isinstance(c, exp.Is) and isinstance(c.this, exp.Column) and isinstance(c.expression, exp.Null)
                  and (c.this.table.lower(), c.this.name.lower()) in equated):
            kept.append(c)
    tree = tree.copy()
    tree.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
    return tree


def padded_sql(view_sql: str, catalog: Catalog, dialect: str) -> str:
    """The SQL of a view with outer joins read at every state, in `dialect`: `SELECT __i, <view>,
    count`, over relations holding each row once per state it exists at, tagged `__i` (`_by_state`).

    Each join (ON for an inner or outer one, WHERE for a comma or CROSS JOIN) also equates the
    state of its right item with that of the items to its left, COALESCE of their tables' `__i`:
    in a row any table that is not padded has the row's state. The view's state is the COALESCE
    of all of them. Otherwise `temporal_sql`'s rewrite (lower-cased identifiers, columns by
    position, NULLIF divisors).

    >>> cat = Catalog.from_dict({"sources": {"x": {"R1": {"columns": ["A", "B"], "key": ["A"]}},
    ...                                       "y": {"R2": {"columns": ["B", "C"], "key": ["B"]}}}})
    >>> padded_sql("SELECT R1.A, R2.C FROM R1 LEFT JOIN R2 ON R1.B = R2.B", cat, "duckdb")  # doctest: +NORMALIZE_WHITESPACE
    'SELECT "__i", "__c0", "__c1", COUNT(*) AS "__count" FROM (SELECT COALESCE("r1"."__i", "r2"."__i") AS "__i",
     "r1"."a" AS "__c0", "r2"."c" AS "__c1" FROM "r1" LEFT JOIN "r2" ON "r1"."b" = "r2"."b" AND "r2"."__i" =
     "r1"."__i") AS "v" GROUP BY "__i", "__c0", "__c1"'
    """
    tree = _view_tree(view_sql, catalog)

    def state(items: list[exp.Expression]) -> exp.Expression:
        aliases = [t.alias_or_name for item in items
                   for t in ([item] if isinstance(item, exp.Table) else item.find_all(exp.Table))]
        columns = [exp.column("__i", table=a) for a in aliases]
        return columns[0] if len(columns) == 1 else exp.Coalesce(this=columns[0], expressions=columns[1:])

    def pair(first: exp.Expression, joins: list[exp.Join]) -> None:
        left = [first]
        for join in joins:
            same = exp.EQ(this=state([join.this]), expression=state(left))
            if join.args.get("on"):
                join.set("on", exp.and_(join.args["on"], same))
            else:   # a comma or a CROSS JOIN: an inner join, whose condition may be in WHERE
                tree.where(same, copy=False)
            left.append(join.this)
        for item in [first, *(j.this for j in joins)]:
            if isinstance(item, exp.Subquery) and isinstance(item.this, exp.Table):   # a parenthesised join
                pair(item.this, item.this.args.get("joins") or [])

    from_ = tree.args["from_"]
    pair(from_.this, tree.args.get("joins") or [])
    items = [from_.this, *(j.this for j in tree.args.get("joins") or [])]
    return _counted([(tree, [state(items).as_("__i")])], dialect)


def _outer_join(tree: exp.Select) -> bool:
    """Whether the view joins with LEFT, RIGHT or FULL."""
    return any(str(j.args.get("side") or "").upper() in ("LEFT", "RIGHT", "FULL") for j in tree.find_all(exp.Join))


def _by_state(table: pa.Table, dsvs: list[int]) -> pa.Table:
    """`table`'s rows at each state `i` (its source at DSV `dsvs[i]`), tagged `__i`, once per state."""
    parts = []
    for i, dsv in enumerate(dsvs):
        alive = pc.and_(pc.less_equal(table["__vfrom"], dsv), pc.less(dsv, table["__vto"]))
        rows = table.filter(alive)
        parts.append(rows.append_column("__i", pa.array([i] * rows.num_rows, pa.int64())))
    return pa.concat_tables(parts) if parts else table.append_column("__i", pa.array([], pa.int64()))


def chain_sql(view_sql: str, catalog: Catalog, dialect: str, terms: bool = False) -> str:
    """The view SQL over relations whose rows carry the positions of a chain of states at which
    they exist (`__from`, `__to`, half-open: checker.chain), in `dialect`:
    `SELECT __from, __to, <view>, count`; with `terms`, an outer join's terms (`terms_sql`), each
    row where all the tables of its term are present.

    A view row, one combination of base rows, exists exactly where all of them do: from the
    greatest of their starts to the least of their ends, when that is not empty. The rewrite is
    otherwise `temporal_sql`'s (lower-cased identifiers, columns by position, NULLIF divisors).

    >>> cat = Catalog.from_dict({"sources": {"x": {"R1": {"columns": ["A", "B"], "key": ["A"]}},
    ...                                       "y": {"R2": {"columns": ["B", "C"], "key": ["B"]}}}})
    >>> chain_sql("SELECT R1.A, R2.C FROM R1 JOIN R2 ON R1.B = R2.B", cat, "postgres")  # doctest: +NORMALIZE_WHITESPACE
    'SELECT "__from", "__to", "__c0", "__c1", COUNT(*) AS "__count" FROM (SELECT GREATEST("r1"."__from",
     "r2"."__from") AS "__from", LEAST("r1"."__to", "r2"."__to") AS "__to", "r1"."a" AS "__c0", "r2"."c" AS "__c1"
     FROM "r1" JOIN "r2" ON "r1"."b" = "r2"."b" WHERE GREATEST("r1"."__from", "r2"."__from") < LEAST("r1"."__to",
     "r2"."__to")) AS "v" GROUP BY "__from", "__to", "__c0", "__c1"'
    """
    tree = _view_tree(view_sql, catalog)
    if terms and _outer_join(tree):
        # GREATEST and LEAST skip NULLs (PostgreSQL's, DuckDB's): a term's tables must be present.
        return _counted([_along(branch.where(*(exp.column("__from", table=a).is_(exp.null()).not_()
                                               for a in sorted(present))), sorted(present))
                         for branch, present in terms_sql(tree)], dialect)
    return _counted([_along(tree, [table.alias_or_name for table in tree.find_all(exp.Table)])], dialect)


def _along(tree: exp.Select, aliases: list[str]) -> tuple[exp.Select, list[exp.Alias]]:
    """`tree`'s rows where all of `aliases`' tables' rows exist: from the greatest of their starts
    to the least of their ends."""
    start = _extreme(exp.Greatest, [exp.column("__from", table=a) for a in aliases])
    end = _extreme(exp.Least, [exp.column("__to", table=a) for a in aliases])
    return tree.where(start < end), [start.copy().as_("__from"), end.copy().as_("__to")]


def _view_tree(view_sql: str, catalog: Catalog) -> exp.Select:
    """The view's SQL parsed and flattened, each divisor wrapped in NULLIF(divisor, 0) (see temporal_sql).

    The rewrites above need one SELECT over base relations with its columns listed, so a view
    that reads WITH queries or derived tables, or selects `*`, is first made one by sqlglot's
    optimizer (qualify: stars expanded as DuckDB does, USING and NATURAL as ON; merge_subqueries:
    derived tables flattened), each WITH query first written as a derived table where it is read
    (sqlglot merges a WITH query read twice no further): code the maintenance path's own rewrites
    (fedmodel.rewrites) do not share. A view already so written is left as it is.
    """
    tree = sqlglot.parse_one(view_sql, dialect="duckdb")
    if _needs_flattening(tree):
        for cte in reversed(tree.args["with_"].expressions if tree.args.get("with_") else []):
            for table in list(tree.find_all(exp.Table)):   # reversed: a later WITH query reads earlier ones
                if table.name.lower() == cte.alias.lower() and table.find_ancestor(exp.CTE) is not cte:
                    table.replace(cte.this.copy().subquery(table.alias_or_name))
        tree.set("with_", None)
        schema = {rel.name.lower(): {c.lower(): t for c, t in zip(rel.columns, rel.types)} for rel in catalog.relations}
        tree = merge_subqueries(qualify(tree, schema=schema, dialect="duckdb"))
    for division in list(tree.find_all(exp.Div, exp.Mod)):
        division.set("expression", exp.Nullif(this=division.expression, expression=exp.Literal.number(0)))
    return tree


def _needs_flattening(tree: exp.Select) -> bool:
    """Whether the view reads a WITH query or a derived table, or selects a star."""
    return bool(tree.args.get("with_") or tree.find(exp.Subquery)
                or any(isinstance(e, exp.Star) or isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
                       for e in tree.expressions)
                or any(j.args.get("using") or j.args.get("method") for j in tree.args.get("joins") or []))


def _extreme(function: type[exp.Func], columns: list[exp.Column]) -> exp.Expression:
    """GREATEST or LEAST of the columns; a view over one relation needs neither."""
    return columns[0] if len(columns) == 1 else function(this=columns[0], expressions=columns[1:])


def _counted(branches: list[tuple[exp.Select, list[exp.Alias]]], dialect: str) -> str:
    """The branches' rows (one SELECT, or several read UNION ALL), each branch's view columns
    renamed by position after its `leading` ones, identical rows grouped into a count,
    identifiers lower-cased and quoted, rendered in `dialect`."""
    for tree, leading in branches:
        view_columns = [f"__c{k}" for k in range(len(tree.expressions))]
        tree.set("expressions", [*leading, *(e.unalias().as_(name) for e, name in zip(tree.expressions, view_columns))])
    body = branches[0][0]
    for tree, _ in branches[1:]:
        body = exp.union(body, tree, distinct=False)
    grouped = [*(column.alias for column in branches[0][1]), *view_columns]
    outer = (exp.select(*grouped, exp.Count(this=exp.Star()).as_("__count"))
             .from_(body.subquery("v")).group_by(*grouped))
    for identifier in outer.find_all(exp.Identifier):
        identifier.set("this", identifier.this.lower())
    return outer.sql(dialect=dialect, identify=True)


def _state_column(index: int) -> str:
    return f"__s{index}"


def _plain(v):
    if isinstance(v, float):
        return comparable(v)
    return v.isoformat() if isinstance(v, datetime.date) else v


def comparable(v):
    """A value as the checker compares it: a float to 12 significant digits, since a sum of DOUBLE
    values (an aggregate view's SUM or AVG) depends in its last bits on the order it was added in,
    which neither the warehouse nor the SQL backend promises; anything else as it is.

    >>> comparable(0.1 + 0.2) == comparable(0.3), comparable(2.5), comparable("x")
    (True, 2.5, 'x')
    """
    return float(f"{v:.12g}") if isinstance(v, float) else v
