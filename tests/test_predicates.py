"""fedmodel.predicates: a selection means the same compiled to Python (the warehouse core, the
in-memory sources) and written as SQL for the engines (the DuckDB sources)."""

from __future__ import annotations

import sqlite3

import duckdb
import pytest
import sqlglot

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.predicates import compile_sql
from fedlab.fedmodel.viewdef import parse_view

CATALOG = Catalog.from_dict({"sources": {
    "ds1": {"R1": {"columns": ["A", "N", "X"], "types": ["VARCHAR", "BIGINT", "DOUBLE"], "key": ["A"]}},
    "ds2": {"R2": {"columns": ["A", "C"], "types": ["VARCHAR", "VARCHAR"], "key": ["A"]}}}})
R1 = CATALOG.relation("R1")


@pytest.mark.parametrize("predicate", ["10 / N > 1", "NOT (10 / N > 1)", "X / N < 0", "10 / (N - N) IS NULL"])
def test_division_by_zero_is_null_so_a_predicate_that_divides_by_zero_is_not_true(predicate):
    rows = [("a", 0, 1.0), ("b", 5, -1.0)]
    compiled = [compile_sql(predicate, R1)(row) for row in rows]
    expected = {"10 / N > 1": [False, True], "NOT (10 / N > 1)": [False, False],
                "X / N < 0": [False, True], "10 / (N - N) IS NULL": [True, True]}[predicate]
    assert compiled == expected


def test_the_selection_sql_divides_by_zero_as_null_in_duckdb_too():
    view = parse_view("SELECT C FROM R1 JOIN R2 ON R1.A = R2.A WHERE 10 / R1.N > 1", CATALOG)
    sql = view.selection_sql("R1")
    assert sql == "10 / NULLIF(N, 0) > 1"
    db = duckdb.connect()
    db.execute("CREATE TABLE R1 (A VARCHAR, N BIGINT, X DOUBLE)")
    db.execute("INSERT INTO R1 VALUES ('a', 0, 1.0), ('b', 5, 1.0), ('c', 20, 1.0)")
    in_duckdb = [a for a, in db.execute(f"SELECT A FROM R1 WHERE ({sql}) IS TRUE ORDER BY A").fetchall()]
    in_python = [row[0] for row in [("a", 0, 1.0), ("b", 5, 1.0), ("c", 20, 1.0)] if view.selection_test("R1")(row)]
    assert in_duckdb == in_python == ["b"]
    # What the rewrite prevents: DuckDB 2.0 alone says 10 / 0 is infinity, greater than 1.
    assert db.execute("SELECT 10 / N > 1 FROM R1 WHERE A = 'a'").fetchone() == (True,)


@pytest.mark.parametrize("predicate, passing", [
    ("R1.N % 3 = -1", ["a"]),   # SQL's remainder has the dividend's sign: -7 % 3 is -1 (Python's % says 2)
    ("R1.N % -3 = 1", ["b"]),
    ("10 % R1.N = 3", ["a", "b"]),
    ("10 % R1.N > 0", ["a", "b"]),   # 10 % 0 is NULL, not an error (DuckDB and PostgreSQL raise)
    ("10 % (R1.N - R1.N) IS NULL", ["a", "b", "c"]),
    ("NOT (R1.N % 2 = 0)", ["a", "b"]),
])
def test_a_remainder_is_sqls_in_python_duckdb_and_sqlite_and_by_zero_null(predicate, passing):
    view = parse_view(f"SELECT C FROM R1 JOIN R2 ON R1.A = R2.A WHERE {predicate}", CATALOG)
    sql = view.selection_sql("R1")
    assert "NULLIF" in sql
    rows = [("a", -7, 1.0), ("b", 7, 1.0), ("c", 0, 1.0)]
    in_python = [row[0] for row in rows if view.selection_test("R1")(row)]
    engines = {"duckdb": duckdb.connect(), "sqlite": sqlite3.connect(":memory:")}
    for dialect, db in engines.items():
        db.execute("CREATE TABLE R1 (A VARCHAR, N BIGINT, X DOUBLE)")
        db.executemany("INSERT INTO R1 VALUES (?, ?, ?)", rows)
        where = sqlglot.transpile(sql, read="duckdb", write=dialect)[0]
        in_engine = [a for a, in db.execute(f"SELECT A FROM R1 WHERE ({where}) IS TRUE ORDER BY A").fetchall()]
        assert in_engine == in_python == passing, dialect


TYPED = Catalog.from_dict({"sources": {
    "ds1": {"T": {"columns": ["K", "F", "D", "S"], "types": ["BIGINT", "BOOLEAN", "DATE", "VARCHAR"], "key": ["K"]}},
    "ds2": {"U": {"columns": ["S", "F"], "types": ["VARCHAR", "VARCHAR"], "key": ["S"]}}}})


@pytest.mark.parametrize("where, message", [
    ("T.F = 'on'", "view: T.F = 'on' compares a boolean with text"),
    ("T.K IN (1, 'x')", "view: T.K IN (1, 'x') compares a number with text"),
    ("T.K BETWEEN 'a' AND 'b'", "view: T.K BETWEEN 'a' AND 'b' compares a number with text"),
    ("T.S LIKE 5", "view: T.S LIKE 5 needs text, got a number"),
    ("T.S + 1 > 2", "view: T.S + 1 needs a number, got text"),
    ("T.S OR T.F", "view: T.S OR T.F needs a boolean, got text"),
    ("T.K % 2.5 > 1", "view: T.K % 2.5 needs whole numbers (BIGINT), got 2.5"),
    ("T.K % (T.K / 2) > 1", "view: T.K % (T.K / 2) needs whole numbers (BIGINT), got (T.K / 2)"),
    ("T.S", "view: T.S is text, not a condition"),
])
def test_a_condition_on_values_of_different_types_is_refused_before_anything_runs(where, message):
    # DuckDB refuses them when it runs the query ("Could not convert string 'on' to BOOL");
    # Python would quietly compare True with 'on' and call it false.
    with pytest.raises(ModelError) as err:
        parse_view(f"SELECT T.K FROM T WHERE {where}", TYPED)
    assert str(err.value) == message


def test_a_join_of_columns_of_different_types_is_refused():
    with pytest.raises(ModelError, match=r"^view: T.F = U.F compares a boolean with text$"):
        parse_view("SELECT T.K FROM T JOIN U ON T.F = U.F", TYPED)


def test_conditions_of_matching_types_pass_and_text_compares_with_dates():
    view = parse_view("SELECT T.K FROM T JOIN U ON T.S = U.S WHERE T.F AND T.D >= '2020-01-01' AND T.K / 2 > 1.5 "
                      "AND NOT (U.F LIKE 'x%') AND T.S IS NOT NULL", TYPED)
    assert view.selection_test("T")((4, True, "2020-06-01", "s"))
    assert not view.selection_test("T")((2, True, "2020-06-01", "s"))


@pytest.mark.parametrize("predicate, passing", [
    ("T.F IS TRUE", [1]), ("T.F IS NOT TRUE", [2, 3]), ("T.F IS FALSE", [2]), ("T.F IS NULL", [3]),
])
def test_is_true_and_is_false_are_not_is_null(predicate, passing):
    view = parse_view(f"SELECT T.K FROM T WHERE {predicate}", TYPED)
    rows = [(1, True, None, None), (2, False, None, None), (3, None, None, None)]
    assert [row[0] for row in rows if view.selection_test("T")(row)] == passing


@pytest.mark.parametrize("predicate", ["R2.C NOT LIKE '%z'", "NOT R2.C LIKE '%z'", "R2.C LIKE '%z'",
                                       "R2.C NOT IN ('x', 'xz')", "R2.C IS NOT NULL", "R2.C NOT BETWEEN 'a' AND 'x'"])
def test_a_negated_predicate_means_in_python_what_it_means_in_the_engine(predicate):
    """sqlglot spells `NOT LIKE` as a Like with negate set: the compiled test once ignored it and
    kept exactly the rows the sources' SQL dropped (found by the view corpus, test_view_corpus)."""
    view = parse_view(f"SELECT R2.A FROM R1 JOIN R2 ON R1.A = R2.A WHERE {predicate}", CATALOG)
    rows = [("a", "x"), ("b", "xz"), ("c", None), ("d", "y")]
    db = duckdb.connect()
    db.execute("CREATE TABLE R2 (A VARCHAR, C VARCHAR)")
    db.executemany("INSERT INTO R2 VALUES (?, ?)", rows)
    in_duckdb = [a for a, in db.execute(f"SELECT A FROM R2 WHERE ({view.selection_sql('R2')}) IS TRUE ORDER BY A").fetchall()]
    in_python = [row[0] for row in rows if view.selection_test("R2")(row)]
    assert in_python == in_duckdb
