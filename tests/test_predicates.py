"""fedmodel.predicates: a selection means the same compiled to Python (the warehouse core, the
in-memory sources) and written as SQL for the engines (the DuckDB sources)."""

from __future__ import annotations

import duckdb
import pytest

from fedmodel.catalog import Catalog
from fedmodel.predicates import compile_sql
from fedmodel.viewdef import parse_view

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
