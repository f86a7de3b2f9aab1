"""`fedlab bench-postgres`: Vinh 2020's Table 1 measured here, synchronous against asynchronous
maintenance of a join view in PostgreSQL, and what change capture costs a writer per statement.

    fedlab bench-postgres                         # 5,000 customers, 100,000 sales, median of 200
    fedlab bench-postgres --repeat 30 --out runs/pg

Vinh 2020, section 5.2: a view over base tables is maintained either synchronously, by triggers
inside each writing transaction, or asynchronously on request, by a pass over the changes that
statement-level triggers captured (section 4.4), condensed per key (4.3.1), with each base table's
pre-update state rebuilt from its post-update state by formula 12 (4.3.2):
pre = (post EXCEPT dnew) UNION dold. Table 1 reports, per action on each base table, one record
by one statement and ten records by ten statements (cumulative), synchronous 22-1174 ms against
asynchronous 28-89 ms, and the combined asynchronous pass after a mix of actions 3% to 27% of the
synchronous total (section 5.3).

Here, on a private server (checker.pg_server) with one fresh database per kind of
maintenance, holding the same rows and receiving the same statements, seed for seed:
- customers(cust_id key, country, name) and sales(sale_id key, cust_id, qty, price); the view
  mv = customers JOIN sales ON cust_id, projected on (cust_id, country, qty), kept as a table with
  a count column (the projection repeats rows: multiplicities matter, docs/paper-notes.md);
- `plain`: no trigger, the writer's cost per statement;
- `sync`: statement-level triggers with transition tables merge each statement's view delta into
  mv (the changed rows joined with the other table as it is); the writer's time;
- `async`: fedlab's change capture, installed by source_node.postgres_store's PostgresStore (its
  INSTALL and CAPTURE), the writer's cost per statement; after each commit, one maintenance pass
  (`maintain`) in one REPEATABLE READ snapshot: the captured rows in commit and statement order,
  condensed per key (fedmodel.condense), the view delta by the Zhou-Larson terms with signed rows,
  ΔV = ΔC ⋈ S_post + C_pre ⋈ ΔS, C_pre by formula 12 (docs/paper-notes.md: formulas 13 and 14 as printed are
  wrong for mixed histories), merged into mv; then the change rows it read are deleted. Its time.
  Table 1's combined case: one pass after a round of six transactions (each table: insert,
  delete, update), against the same six transactions' time under synchronous maintenance.

Every figure is a median over `repeat` transactions, timed at the client (round trips on a unix
socket included; the server runs with fsync off, as the test servers do). The three databases
take turns transaction by transaction, so that a load on the machine that comes and goes weighs
on every mode alike; each setting starts vacuumed (autovacuum is off). After each setting the
materialized table must equal the view recomputed by a plain SELECT, or the bench stops with
MaintenanceMismatch. Inserts put back rows the deletes took, so that the tables keep their sizes
and an inserted customer has sales to join.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from collections import deque
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import RelationChange
from fedlab.source_node.postgres_store import PostgresStore, condensed_captures

TABLES = ("sales", "customers")
ACTIONS = ("insert", "delete", "update")
CASES = (1, 10)                    # records per transaction, one statement each (Table 1's two cases)
MODES = ("plain", "sync", "async")
SOURCE = "bench"
CATALOG = Catalog.from_dict({"sources": {SOURCE: {
    "customers": {"columns": ["cust_id", "country", "name"], "types": ["BIGINT", "VARCHAR", "VARCHAR"],
                  "key": ["cust_id"]},
    "sales": {"columns": ["sale_id", "cust_id", "qty", "price"], "types": ["BIGINT", "BIGINT", "BIGINT", "DOUBLE"],
              "key": ["sale_id"]}}}})
COUNTRIES = ("AR", "AU", "BR", "CA", "CN", "DE", "DK", "ES", "FR", "GB", "IN", "IT", "JP", "KR", "MX", "NL", "NZ",
             "PL", "SA", "SG", "UA", "US", "VN")   # 23, as the paper's countries table
# What an UPDATE changes: a column the view projects, never the join column.
UPDATED = {"customers": ("country", lambda row: COUNTRIES[(COUNTRIES.index(row[1]) + 1) % len(COUNTRIES)]),
           "sales": ("qty", lambda row: row[2] % 10 + 1)}
# Every table fits in the server's memory: a random read costs about what a sequential one does,
# not PostgreSQL's default 4 times as much, which has a delta of a few hundred rows merged into
# mv by a scan of all of mv instead of its primary key.
OPTIONS = "-c random_page_cost=1.1"
PAPER = {"sync_ms": (22, 1174), "async_ms": (28, 89), "async_share": (0.03, 0.27)}   # Table 1, section 5.3


class MaintenanceMismatch(ModelError):
    """The materialized table differs from the view recomputed by a plain SELECT."""


# ---- the view and its deltas, in SQL ----

def _view(customers: str, sales: str, weight: str) -> str:
    """mv's rows from the given states of customers (alias c) and sales (alias s), each row
    weighted (1, or the sign of a delta row)."""
    return (f"SELECT c.cust_id, c.country, s.qty, {weight} AS n "
            f"FROM {customers} c JOIN {sales} s ON s.cust_id = c.cust_id")


def _counted(rows: str) -> str:
    return (f"SELECT cust_id, country, qty, sum(n) AS cnt FROM ({rows}) v "
            f"GROUP BY cust_id, country, qty HAVING sum(n) <> 0")


def _signed(minus: str | None = None, plus: str | None = None) -> str:
    """A delta as rows with their sign: -1 for those gone, +1 for those added."""
    parts = [f"SELECT *, {sign} AS sign FROM {rows}" for sign, rows in ((-1, minus), (1, plus)) if rows]
    return f"({' UNION ALL '.join(parts)})"


def _apply(delta: str, ctes: str = "") -> str:
    """The statement that adds a signed view delta to mv's counts, deleting a row whose count
    reaches 0, in one statement: MERGE (PostgreSQL 15). Two concurrent writers adding the same new
    view row would make the second fail where INSERT ... ON CONFLICT waits; each database here has
    one writer, and the pass runs alone."""
    return (f"{ctes} MERGE INTO mv m USING ({_counted(delta)}) d "
            f"ON m.cust_id = d.cust_id AND m.country = d.country AND m.qty = d.qty "
            f"WHEN MATCHED AND m.cnt + d.cnt = 0 THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET cnt = m.cnt + d.cnt "
            f"WHEN NOT MATCHED THEN INSERT VALUES (d.cust_id, d.country, d.qty, d.cnt)")


RECOMPUTED = _counted(_view("customers", "sales", "1"))

SCHEMA = """
CREATE TABLE customers (cust_id bigint PRIMARY KEY, country text NOT NULL, name text NOT NULL);
CREATE TABLE sales (sale_id bigint PRIMARY KEY, cust_id bigint NOT NULL, qty bigint NOT NULL,
                    price double precision NOT NULL);
CREATE INDEX sales_cust_id ON sales (cust_id);
"""
VIEW_TABLE = """
CREATE TABLE mv (cust_id bigint, country text, qty bigint, cnt bigint NOT NULL, PRIMARY KEY (cust_id, country, qty));
"""


def _synchronous(table: str) -> str:
    """Triggers that maintain mv inside the writing statement: its transition tables joined with
    the other table, whose state is both the pre- and the post-update one (only `table` changed)."""
    other = "sales" if table == "customers" else "customers"

    def maintained(signed: str) -> str:
        states = {table: signed, other: other}
        return _apply(_view(states["customers"], states["sales"], f"{table[0]}.sign")) + ";"

    return f"""
CREATE FUNCTION mv_sync_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN {maintained(_signed(plus="new_rows"))}
  ELSIF TG_OP = 'DELETE' THEN {maintained(_signed(minus="old_rows"))}
  ELSE {maintained(_signed("old_rows", "new_rows"))}
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER mv_ins AFTER INSERT ON {table} REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION mv_sync_{table}();
CREATE TRIGGER mv_upd AFTER UPDATE ON {table} REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION mv_sync_{table}();
CREATE TRIGGER mv_del AFTER DELETE ON {table} REFERENCING OLD TABLE AS old_rows
  FOR EACH STATEMENT EXECUTE FUNCTION mv_sync_{table}();
"""


# The pass's input: every captured row its snapshot sees, in commit order, then statement order.
CAPTURED = ("SELECT c.relation, c.action, c.row FROM fedlab.changes c JOIN fedlab.log l ON l.xid = c.xid "
            "ORDER BY l.dsv, c.seq")
# The condensed sets arrive as jsonb arrays: unnest tells the planner how many rows they hold
# (jsonb_populate_recordset would claim 100, and the planner then scans all of sales). Formula 12
# for customers is restricted to the customers the sales delta joins: the rule holds row by row,
# so it holds for the restriction, and the join needs no other.
_PASS_INPUT = "WITH " + ", ".join(
    [f"{d}_{t} AS (SELECT r.* FROM unnest(%({d}_{t})s::jsonb[]) e, jsonb_populate_record(NULL::{t}, e) r)"
     for t in TABLES for d in ("dold", "dnew")]
    + ["pre_customers AS ((SELECT * FROM customers WHERE cust_id IN "
       "(SELECT cust_id FROM dold_sales UNION ALL SELECT cust_id FROM dnew_sales) "
       "EXCEPT ALL SELECT * FROM dnew_customers) UNION ALL SELECT * FROM dold_customers)"])
# ΔV = ΔC ⋈ S_post + C_pre ⋈ ΔS (docs/paper-notes.md: the Zhou-Larson terms, signed rows).
ASYNCHRONOUS = _apply(_view(_signed("dold_customers", "dnew_customers"), "sales", "c.sign") + " UNION ALL "
                      + _view("pre_customers", _signed("dold_sales", "dnew_sales"), "s.sign"), _PASS_INPUT)


def condensed(captured: list[tuple[str, str, dict]]) -> dict[str, list[dict]]:
    """dold and dnew of each table (section 4.3.2) from its captured rows, oldest first: per key,
    the row before the first change if it was a deletion, the row after the last if it was an
    insertion (section 4.3.1, fedmodel.condense); a key whose row came back unchanged is in neither.

    >>> history = [("sales", "D", {"sale_id": 1, "qty": 2}), ("sales", "I", {"sale_id": 1, "qty": 3}),
    ...            ("sales", "D", {"sale_id": 1, "qty": 3}), ("sales", "I", {"sale_id": 1, "qty": 4}),
    ...            ("customers", "I", {"cust_id": 7}), ("customers", "D", {"cust_id": 7})]
    >>> condensed(history)
    {'dold_sales': [{'sale_id': 1, 'qty': 2}], 'dnew_sales': [{'sale_id': 1, 'qty': 4}], 'dold_customers': [], 'dnew_customers': []}
    """
    def key_of(table: str):
        key = CATALOG.relation(table).key
        return lambda row: tuple(row[c] for c in key)

    nets = condensed_captures(captured, key_of)
    sets = {}
    for table in TABLES:
        net = nets.get(table) or RelationChange(table, 0)
        sets[f"dold_{table}"], sets[f"dnew_{table}"] = list(net.removed), list(net.added)
    return sets


# ---- one database per kind of maintenance ----

class MaintainedDatabase:
    """One mode's database (`plain`, `sync` or `async`): the writer's connection, and for async the
    maintenance pass's own."""

    def __init__(self, mode: str, dsn: str, customers: int, sales: int, seed: int):
        """Creates and fills the tables (the same rows for the same seed), mv and its maintenance."""
        import psycopg

        self.mode = mode
        self.writer = psycopg.connect(dsn, autocommit=True, options=OPTIONS)
        self.writer.execute(SCHEMA)
        self.writer.execute("SELECT setseed(%s)", [1 / (seed + 1)])
        self.writer.execute("INSERT INTO customers SELECT i, (%s::text[])[1 + i %% %s], 'customer ' || i "
                            "FROM generate_series(1, %s) i", [list(COUNTRIES), len(COUNTRIES), customers])
        self.writer.execute("INSERT INTO sales SELECT i, 1 + floor(random() * %s)::bigint, "
                            "1 + floor(random() * 10)::bigint, round((random() * 100)::numeric, 2)::float8 "
                            "FROM generate_series(1, %s) i", [customers, sales])
        if mode != "plain":
            self.writer.execute(VIEW_TABLE)
            self.writer.execute(f"INSERT INTO mv {RECOMPUTED}")
        if mode == "sync":
            for table in TABLES:
                self.writer.execute(_synchronous(table))
        self._manager = None
        if mode == "async":
            PostgresStore(CATALOG, SOURCE, dsn).close()   # installs the capture; the pass reads it
            self._manager = psycopg.connect(dsn, autocommit=True, options=OPTIONS)
            self._manager.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        # Vacuumed between settings instead: an autovacuum worker busy in one mode's database
        # during a setting would weigh on that mode alone, and its ANALYZE would replan it.
        for (table,) in self.writer.execute("SELECT format('%I.%I', schemaname, tablename) FROM pg_tables "
                                            "WHERE schemaname IN ('public', 'fedlab')").fetchall():
            self.writer.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        self.writer.execute("VACUUM ANALYZE")

    def write(self, statements: list[tuple[str, list]]) -> float:
        """Runs `statements` as one transaction; the writer's milliseconds, through the commit."""
        start = time.perf_counter()
        with self.writer.transaction():
            for sql, params in statements:
                self.writer.execute(sql, params)
        return (time.perf_counter() - start) * 1000

    def maintain(self) -> float:
        """One asynchronous maintenance pass over everything captured and committed; its milliseconds."""
        from psycopg.types.json import Jsonb

        start = time.perf_counter()
        # One snapshot: the captured rows and the post-update state are of the same commits, and
        # the DELETE removes exactly the rows read (later commits' rows are invisible to it).
        with self._manager.transaction():
            captured = self._manager.execute(CAPTURED).fetchall()
            if captured:
                params = {name: [Jsonb(row) for row in rows] for name, rows in condensed(captured).items()}
                self._manager.execute(ASYNCHRONOUS, params)
                self._manager.execute("DELETE FROM fedlab.changes")
        return (time.perf_counter() - start) * 1000

    def check(self, setting: str) -> int:
        """mv against the view recomputed by a plain SELECT (and, for async, no change row left);
        the view's row count, or MaintenanceMismatch naming the rows that differ."""
        differing = self.writer.execute(
            f"SELECT 'only in mv', * FROM (TABLE mv EXCEPT ALL {RECOMPUTED}) a "
            f"UNION ALL SELECT 'only recomputed', * FROM ({RECOMPUTED} EXCEPT ALL TABLE mv) b").fetchall()
        if differing:
            shown = "; ".join(f"{side} (cust_id, country, qty, cnt) = {tuple(row)}" for side, *row in differing[:5])
            raise MaintenanceMismatch(f"{self.mode} maintenance, after {setting}: mv differs from the recomputed "
                                      f"view in {len(differing)} rows: {shown}")
        if self.mode == "async":
            (left,), = self.writer.execute("SELECT count(*) FROM fedlab.changes").fetchall()
            if left:
                raise MaintenanceMismatch(f"async maintenance, after {setting}: {left} change rows not consumed")
        (rows,), = self.writer.execute("SELECT count(*) FROM mv").fetchall()
        return rows

    def close(self) -> None:
        for con in (self.writer, self._manager):
            if con is not None:
                con.close()

    def __enter__(self) -> "MaintainedDatabase":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---- the statements each transaction runs ----

class Workload:
    """The statements of each measured transaction, the same seed for seed in every database.
    Deletions take present rows at random and keep them; insertions put the oldest taken back."""

    def __init__(self, customers: int, sales: int, seed: int):
        self._rng = random.Random(seed)
        self._present = {"customers": list(range(1, customers + 1)), "sales": list(range(1, sales + 1))}
        self._position = {t: {k: i for i, k in enumerate(keys)} for t, keys in self._present.items()}
        self._taken: dict[str, deque] = {t: deque() for t in TABLES}

    def transaction(self, con, table: str, action: str, records: int) -> list[tuple[str, list]]:
        """`records` statements of `action` on `table`, one record each (reading the rows needed
        first, on `con`, outside the measured transaction)."""
        rel = CATALOG.relation(table)
        key = rel.key[0]
        if action == "insert":
            rows = [self._taken[table].popleft() for _ in range(records)]
            for row in rows:
                self._add(table, row[0])
            marks = ", ".join(["%s"] * len(rel.columns))
            return [(f"INSERT INTO {table} VALUES ({marks})", list(row)) for row in rows]
        keys = self._rng.sample(self._present[table], records)
        found = {row[0]: row for row in con.execute(f"SELECT * FROM {table} WHERE {key} = ANY(%s)", [keys])}
        if action == "delete":
            for k in keys:
                self._remove(table, k)
                self._taken[table].append(found[k])
            return [(f"DELETE FROM {table} WHERE {key} = %s", [k]) for k in keys]
        column, changed = UPDATED[table]
        return [(f"UPDATE {table} SET {column} = %s WHERE {key} = %s", [changed(found[k]), k]) for k in keys]

    def _add(self, table: str, key: int) -> None:
        self._position[table][key] = len(self._present[table])
        self._present[table].append(key)

    def _remove(self, table: str, key: int) -> None:
        keys, position = self._present[table], self._position[table]
        at = position.pop(key)
        last = keys.pop()    # the last key fills the gap: constant time in a list random.sample draws from
        if last != key:
            keys[at], position[last] = last, at


# ---- measuring ----

def measure(database: Callable[[str], str], customers: int = 5000, sales: int = 100_000, repeat: int = 200,
            seed: int = 1, progress: Callable[[str], None] = lambda line: None) -> dict:
    """Every figure of the table (see the module docstring); `database(mode)` creates an empty
    database for a mode and returns its DSN."""
    if repeat < 1:
        raise ModelError("the repetitions must be at least 1")
    if customers < 2 * repeat * max(CASES) or sales < customers:
        raise ModelError(f"{repeat} repetitions take up to {repeat * max(CASES)} customers away at once: the bench "
                         f"needs at least twice that many customers, and at least as many sales as customers")
    started = time.monotonic()
    figures, checks, combined = {}, [], {}
    with ExitStack() as stack:
        runs = {}
        for mode in MODES:
            progress(f"{mode}: filling a database ({customers:,} customers, {sales:,} sales)")
            runs[mode] = (stack.enter_context(MaintainedDatabase(mode, database(mode), customers, sales, seed)),
                          Workload(customers, sales, seed))
        (version,), = runs["plain"][0].writer.execute("SHOW server_version").fetchall()
        for table in TABLES:
            for records in CASES:
                for action in ("delete", "insert", "update"):   # insertions put back what deletions took
                    figures[table, records, action] = _setting(runs, table, action, records, repeat, checks, progress)
        for records in CASES:
            combined[records] = _combined(runs, records, repeat, checks, progress)
    return _result(figures, combined, checks, customers, sales, repeat, version, time.monotonic() - started)


def _setting(runs: dict, table: str, action: str, records: int, repeat: int, checks: list, progress) -> dict:
    """The medians of one setting: each mode's writer, and the asynchronous pass. The modes take
    turns, transaction by transaction, so that a load on the machine that comes and goes weighs
    on all of them alike."""
    for db, _ in runs.values():
        db.writer.execute("VACUUM")   # the dead rows of the settings before would weigh on this one, unevenly
    times = {name: [] for name in (*MODES, "pass")}
    for _ in range(repeat):
        for mode, (db, workload) in runs.items():
            times[mode].append(db.write(workload.transaction(db.writer, table, action, records)))
            if mode == "async":
                times["pass"].append(db.maintain())
    setting = f"{table} {action} x{records}"
    for mode in ("sync", "async"):
        checks.append({"mode": mode, "setting": setting, "view_rows": runs[mode][0].check(setting),
                       "mismatched_rows": 0})
    figure = {name: _median(ms) for name, ms in times.items()}
    progress(f"{table} {action}, {records} record{'s' * (records > 1)}: writer with no trigger {figure['plain']} ms, "
             f"synchronous {figure['sync']} ms, with capture {figure['async']} ms; pass {figure['pass']} ms; "
             f"views checked")
    return figure


def _combined(runs: dict, records: int, repeat: int, checks: list, progress) -> dict:
    """Table 1's combined case: rounds of six transactions (each table: insert, delete, update, on
    different rows) in every database, each round followed by one asynchronous pass; the medians
    of the synchronous writer's round and of the pass, taken side by side. The first round's
    insertions put back rows deleted beforehand, the last round's deletions are put back after."""
    for db, workload in runs.values():
        db.writer.execute("VACUUM")
        for table in TABLES:
            db.write(workload.transaction(db.writer, table, "delete", records))
    runs["async"][0].maintain()
    rounds, passes = [], []
    for _ in range(repeat):
        for mode, (db, workload) in runs.items():
            spent = sum(db.write(workload.transaction(db.writer, table, action, records))
                        for table in TABLES for action in ACTIONS)
            if mode == "sync":
                rounds.append(spent)
            elif mode == "async":
                passes.append(db.maintain())
    for db, workload in runs.values():
        for table in TABLES:
            db.write(workload.transaction(db.writer, table, "insert", records))
    runs["async"][0].maintain()
    setting = f"combined x{records}"
    for mode in ("sync", "async"):
        checks.append({"mode": mode, "setting": setting, "view_rows": runs[mode][0].check(setting),
                       "mismatched_rows": 0})
    figure = {"sync_round_ms": _median(rounds), "pass_ms": _median(passes)}
    progress(f"combined, six transactions of {records} record{'s' * (records > 1)}: synchronous "
             f"{figure['sync_round_ms']} ms in all, then one pass {figure['pass_ms']} ms; views checked")
    return figure


def _median(ms: list[float]) -> float:
    return round(statistics.median(ms), 3)


def _result(figures: dict, combined: dict, checks: list, customers: int, sales: int, repeat: int, version: str,
            seconds: float) -> dict:
    rows = []
    for table in TABLES:
        for records in CASES:
            for action in ACTIONS:
                figure = figures[table, records, action]
                rows.append({"table": table, "records": records, "action": action,
                             "sync_ms": figure["sync"], "async_ms": figure["pass"],
                             "capture_ms_per_statement": round(figure["async"] / records, 3),
                             "no_trigger_ms_per_statement": round(figure["plain"] / records, 3)})
    cases = {}
    for records in CASES:
        mine = [r for r in rows if r["records"] == records]
        sync, passes = sum(r["sync_ms"] for r in mine), sum(r["async_ms"] for r in mine)
        both = combined[records]
        cases[str(records)] = {"sync_total_ms": both["sync_round_ms"], "async_combined_ms": both["pass_ms"],
                               "sync_over_async_combined": round(both["sync_round_ms"] / both["pass_ms"], 2),
                               "sync_settings_total_ms": round(sync, 3), "async_passes_total_ms": round(passes, 3),
                               "sync_over_async_passes": round(sync / passes, 2)}
    result = {"machine": {"cpus": os.cpu_count(), "postgresql": version},
              "sizes": {"customers": customers, "sales": sales}, "repeat": repeat, "rows": rows, "cases": cases,
              "checks": checks, "seconds": round(seconds, 1), "paper": PAPER}
    result["finding"] = finding(result)
    return result


# ---- the report ----

def finding(result: dict) -> str:
    """One sentence: the paper's claim against these figures."""
    sync = [r["sync_ms"] for r in result["rows"]]
    passes = [r["async_ms"] for r in result["rows"]]
    share = {k: 1 / c["sync_over_async_combined"] for k, c in result["cases"].items()}
    low, high = PAPER["async_share"]
    held = "holds" if max(share.values()) <= high else "does not hold here"
    compared = ", ".join(f"{_compared(s)} with {k} record{'s' * (k != '1')}" for k, s in share.items())
    return (f"Paper (Table 1, PostgreSQL 11.6, C triggers): synchronous {PAPER['sync_ms'][0]}-{PAPER['sync_ms'][1]} ms "
            f"against asynchronous {PAPER['async_ms'][0]}-{PAPER['async_ms'][1]} ms, the combined pass "
            f"{low:.0%}-{high:.0%} of the synchronous total; here synchronous {min(sync):g}-{max(sync):g} ms against "
            f"asynchronous {min(passes):g}-{max(passes):g} ms, the combined pass {share['1']:.0%} (1 record) and "
            f"{share['10']:.0%} (10 records) of the synchronous total, so the claim {held}: asynchronous "
            f"maintenance is {compared}.")


def _compared(share: float) -> str:
    # Within 25% either way the two differ by less than runs of this bench differ from each other.
    return "cheaper" if share < 0.8 else "dearer" if share > 1.25 else "about as costly (within 25%)"


def _capture_cost(result: dict) -> str:
    """What capture adds to a writer's statement, against section 5.2's "almost without a difference"."""
    said = []
    for records in CASES:
        extra = [r["capture_ms_per_statement"] - r["no_trigger_ms_per_statement"]
                 for r in result["rows"] if r["records"] == records]
        said.append(f"{min(extra):+.3f} to {max(extra):+.3f} ms with {records} record{'s' * (records > 1)} "
                    f"per transaction")
    return (f"Change capture costs a writer {' and '.join(said)} per statement over no trigger (the stamp at "
            f"commit included, once per transaction); the paper: almost no difference.")


def report(result: dict) -> str:
    """The figures laid out as Table 1, then the ratios and the finding."""
    head = ["synchronous (writer)", "asynchronous (pass)", "capture, writer/stmt", "no trigger, writer/stmt"]
    keys = ["sync_ms", "async_ms", "capture_ms_per_statement", "no_trigger_ms_per_statement"]
    sizes, machine = result["sizes"], result["machine"]
    lines = [f"PostgreSQL {machine['postgresql']}, {machine['cpus']} cores; customers {sizes['customers']:,} rows, "
             f"sales {sizes['sales']:,}; mv = customers JOIN sales (count column); "
             f"median of {result['repeat']}, milliseconds",
             f"{'':<10}" + "".join(f"{h:<26}" for h in head),
             f"{'table':<10}" + "".join("".join(f"{a:<8}" for a in ACTIONS) + "  " for _ in head)]
    for records in CASES:
        lines.append("1 record / 1 statement" if records == 1 else
                     f"{records} records / {records} statements in one transaction (synchronous: cumulative)")
        for table in TABLES:
            row = {r["action"]: r for r in result["rows"] if r["table"] == table and r["records"] == records}
            lines.append(f"{table:<10}" + "".join("".join(f"{row[a][k]:<8.3f}" for a in ACTIONS) + "  " for k in keys))
    for records, c in result["cases"].items():
        lines.append(f"{records} record{'s' * (records != '1')}: the six transactions synchronous "
                     f"{c['sync_total_ms']:g} ms, then one asynchronous pass {c['async_combined_ms']:g} ms: "
                     f"sync/async {c['sync_over_async_combined']:g}x (the six settings above: synchronous "
                     f"{c['sync_settings_total_ms']:g} ms, six passes {c['async_passes_total_ms']:g} ms, "
                     f"{c['sync_over_async_passes']:g}x)")
    lines.append(_capture_cost(result))
    lines.append(result["finding"])
    return "\n".join(lines)


# ---- the command ----

def add_arguments(parser) -> None:
    parser.add_argument("--out", metavar="DIR", help="where postgres_maintenance.json goes "
                                                     "(default runs/bench-postgres-TIMESTAMP)")
    parser.add_argument("--repeat", type=int, default=200, metavar="N",
                        help="transactions measured per setting, the median reported (default 200)")
    parser.add_argument("--customers", type=int, default=5000, help="rows of customers (default 5000)")
    parser.add_argument("--sales", type=int, default=100_000, help="rows of sales (default 100000)")


def main(args) -> int:
    from fedlab.checker.pg_server import PostgresServer

    out = Path(args.out or f"runs/bench-postgres-{time.strftime('%Y%m%d-%H%M%S')}")

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        progress("starting a private PostgreSQL server")
        with PostgresServer.start() as server:
            result = measure(server.database, args.customers, args.sales, args.repeat, progress=progress)
    except ModelError as err:
        print(f"fedlab bench-postgres: {err}", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    (out / "postgres_maintenance.json").write_text(json.dumps(result, indent=2))
    print(report(result))
    print(f"figures: {out / 'postgres_maintenance.json'}")
    return 0
