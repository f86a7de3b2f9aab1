"""The checker's second oracle: `fedlab check --oracle postgres` evaluates the same view SQL in
PostgreSQL, and must reach the verdict the DuckDB oracle reaches; where the two backends' SQL could
differ (NULLs in joins, selections and grouping, string order, integer division, dates compared
with string literals), both must give the view computed here by hand.

The session's server comes from tests/postgres_support.py; one test lets the checker start and
remove a server of its own.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from test_check_cli import T1, T2, T3, make_run

from fedlab import preflight
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.transactions import Modification, Notification, RelationChange
from fedlab.checker import pg_server
from fedlab.checker.oracle import Oracle, backend_named
from fedlab.cli import main


def check(run, *flags, capsys):
    code = main(["check", str(run), "--json", *flags])
    out = capsys.readouterr()
    return code, out.out, out.err


def verdict_of(run, capsys, *flags):
    code, out, err = check(run, *flags, capsys=capsys)
    assert err == ""
    v = json.loads(out)
    return code, v.pop("oracle"), v


LOST_T1 = [("t2", "ds2", 2, {"ds1": 1, "ds2": 2}, []),
           ("t3", "ds1", 3, {"ds1": 3, "ds2": 2}, [[[1, "a", 10], -1], [[1, "c", 10], 1]])]


@pytest.mark.parametrize("history", ["complete", "lost t1"])
def test_both_oracles_reach_the_same_verdict(tmp_path, capsys, postgres_dsn, history):
    run = make_run(tmp_path, [T1, T2, T3] if history == "complete" else LOST_T1)
    code, oracle, by_duckdb = verdict_of(run, capsys)
    assert oracle == "duckdb"
    code_pg, oracle, by_postgres = verdict_of(run, capsys, "--oracle", "postgres", "--pg-dsn", postgres_dsn)
    assert oracle == "postgres"
    assert (code_pg, by_postgres) == (code, by_duckdb)
    # Not two backends agreeing on nothing: the verdict is the one the history calls for.
    expected = ("complete", []) if history == "complete" else ("none", ["ds1:2"])
    assert (by_postgres["level"], by_postgres["lost"]) == expected


@pytest.fixture
def started(monkeypatch) -> list:
    """Every private server the checker starts (it still starts them)."""
    servers, start = [], pg_server.PostgresServer.start.__func__

    def spy(cls):
        servers.append(start(cls))
        return servers[-1]
    monkeypatch.setattr(pg_server.PostgresServer, "start", classmethod(spy))
    return servers


def test_the_dsn_may_come_from_the_environment(tmp_path, capsys, postgres_dsn, monkeypatch, started):
    run = make_run(tmp_path, [T1, T2, T3])
    monkeypatch.setenv("FEDLAB_PG_DSN", postgres_dsn)
    code, oracle, v = verdict_of(run, capsys, "--oracle", "postgres")
    assert (code, oracle, v["level"]) == (0, "postgres", "complete")
    assert started == []   # it used the server it was given


def test_without_a_dsn_a_private_server_is_started_and_removed(tmp_path, capsys, monkeypatch, started):
    monkeypatch.delenv("FEDLAB_PG_DSN", raising=False)
    run = make_run(tmp_path, LOST_T1)
    code, oracle, v = verdict_of(run, capsys, "--oracle", "postgres")
    assert (code, oracle, v["level"], v["lost"]) == (1, "postgres", "none", ["ds1:2"])
    assert len(started) == 1 and not started[0].root.exists()


# ---- bad input: exit 2, one line ----

@pytest.mark.parametrize("flags, message", [
    (["--oracle", "postgres", "--pg-dsn", "host=/nonexistent port=1 user=nobody dbname=none"],
     "postgres oracle: cannot connect with the given DSN: "),
    (["--oracle", "postgres", "--pg-dsn", "this is no dsn"], "postgres oracle: cannot connect with the given DSN: "),
    (["--oracle", "oracle"], "unknown oracle 'oracle' (one of duckdb, postgres)"),
    (["--pg-dsn", "host=/tmp"], "--pg-dsn is for --oracle postgres"),
])
def test_a_bad_oracle_choice_exits_2_with_one_line(tmp_path, capsys, flags, message):
    run = make_run(tmp_path, [T1, T2, T3])
    code, out, err = check(run, *flags, capsys=capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"fedlab check: {message}") and len(err.strip().splitlines()) == 1


def test_without_postgresql_installed_the_private_server_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("FEDLAB_PG_DSN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    monkeypatch.setattr(preflight, "POSTGRES_SEARCHED", str(tmp_path / "nothing" / "*" / "bin"))
    run = make_run(tmp_path, [T1, T2, T3])
    code, out, err = check(run, "--oracle", "postgres", capsys=capsys)
    assert (code, out) == (2, "")
    assert err.startswith("fedlab check: postgres oracle: cannot start a private server: "
                          "PostgreSQL is not installed (no initdb, pg_ctl, postgres on PATH or in ")
    assert "install postgresql-15" in err
    assert len(err.strip().splitlines()) == 1


# ---- where the two backends' SQL could differ ----

CATALOG = Catalog.from_dict({"sources": {
    "hr": {"emp": {"columns": ["id", "name", "dept", "salary", "hired", "active"],
                   "types": ["BIGINT", "VARCHAR", "BIGINT", "DOUBLE", "DATE", "BOOLEAN"], "key": ["id"]}},
    "org": {"dept": {"columns": ["did", "dname"], "types": ["BIGINT", "VARCHAR"], "key": ["did"]}}}})
# NULLs join nothing and fail every comparison; 'B' < 'b' holds in byte order, not in en-US;
# integer / integer is a fraction in DuckDB (sqlglot writes the cast for PostgreSQL).
VIEW = ("SELECT dept.dname, emp.salary, emp.hired, emp.dept / 4 AS quarter FROM emp JOIN dept ON emp.dept = dept.did "
        "WHERE emp.name < 'b' AND emp.active AND emp.hired >= '2020-01-01'")
EMPLOYEES = [
    (1, "B", 10, 100.5, "2021-03-01", True),     # in
    (2, "a", 10, None, "2020-01-01", True),      # in, and ...
    (3, "ab", 10, None, "2020-01-01", True),     # ... the same view row: count 2
    (4, None, 10, 1.0, "2021-01-01", True),      # NULL name
    (5, "a", None, 2.0, "2021-01-01", True),     # NULL dept: joins nothing
    (6, "a", 20, 3.0, "2019-12-31", True),       # hired too early, until hr's DSV 2
    (7, "a", 20, 4.0, "2021-01-01", None),       # NULL active
    (8, "a", 20, 5.0, None, True),               # NULL hired
    (9, "é", 20, 6.0, "2021-01-01", True),       # after 'b' in byte order
]
DEPTS = [(10, "eng"), (20, None)]
HISTORY = {
    "hr": [Notification("hr", 2, "rehire", (RelationChange("emp", 2, modified=(
        Modification(EMPLOYEES[5], (6, "a", 20, 3.0, "2020-06-01", True)),)),))],
    "org": [Notification("org", 2, "rename", (RelationChange("dept", 2, modified=(
        Modification((20, None), (20, "ops")),)),))],
}
AT_START = {("eng", 100.5, "2021-03-01", 2.5): 1, ("eng", None, "2020-01-01", 2.5): 2}


@pytest.mark.parametrize("database", ["duckdb", "postgres", "postgres en-US"])
def test_nulls_selections_and_string_order_mean_the_same_in_both_engines(postgres_dsn, database):
    dsn = {"duckdb": None, "postgres": postgres_dsn, "postgres en-US": _icu_database(postgres_dsn)}[database]
    with backend_named(database.split()[0], dsn) as backend:
        oracle = Oracle(CATALOG, VIEW, {"emp": EMPLOYEES, "dept": DEPTS}, HISTORY, backend)
        views = oracle.views_at([{"hr": 1, "org": 1}, {"hr": 2, "org": 1}, {"hr": 2, "org": 2}])
    assert views == [AT_START,
                     {**AT_START, (None, 3.0, "2020-06-01", 5.0): 1},
                     {**AT_START, ("ops", 3.0, "2020-06-01", 5.0): 1}]


def _icu_database(dsn: str) -> str:
    """A database on the session's server whose default collation sorts 'b' before 'B'."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'icu_en_us'").fetchone():
            conn.execute("CREATE DATABASE icu_en_us TEMPLATE template0 LOCALE_PROVIDER icu "
                         "ICU_LOCALE 'en-US' LOCALE 'C'")
    return dsn.replace("dbname=postgres", "dbname=icu_en_us")


@pytest.mark.parametrize("database", ["duckdb", "postgres"])
def test_division_by_zero_is_null_in_both_engines_as_in_the_maintenance_path(postgres_dsn, database):
    # fedmodel.predicates: x / 0 is NULL. On their own PostgreSQL raises and DuckDB says infinity.
    view = "SELECT emp.id FROM emp JOIN dept ON emp.dept = dept.did WHERE 100 / (emp.dept - 10) > 1"
    with backend_named(database, postgres_dsn if database == "postgres" else None) as backend:
        oracle = Oracle(CATALOG, view, {"emp": EMPLOYEES, "dept": DEPTS}, {}, backend)
        assert oracle.view_at({}) == {(6,): 1, (7,): 1, (8,): 1, (9,): 1}
