"""pg_ivm's own regression views, verbatim: which fedlab maintains, and why it refuses the rest.

Every view that pg_ivm 1.15 (github.com/sraoss/pg_ivm at 377a37d) creates as an incrementally
maintained view in its regression tests (sql/pg_ivm.sql, sql/outer_join.sql, sql/create_immv.sql,
sql/refresh_immv.sql; the expected output says which it creates), each once, over a catalog of the
tables those files create. pg_ivm's tables are bags without keys; fedlab's relations are sets (a
relation without a declared key is keyed by all its columns: fedmodel.catalog), the one difference.
The column lists of pg_ivm's `create_immv('name(a, b)', ...)` rename the view's columns; fedlab
names them from the SQL, so only the SQL is taken.

A view fedlab maintains is simulated under dropped, reordered and duplicated messages and checked
state by state against the DuckDB oracle's recomputation of the SQL as written; a refused one
stops with one line naming its construct. docs/algorithms.md reports the counts this file holds.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import sqlglot
from scenario_support import under_random_faults
from sqlglot import exp

from fedlab.fedmodel.errors import ModelError
from fedlab.simulation.scenario import parse_scenario
from fedlab.simulation.simulate import simulate

B, T = "BIGINT", "VARCHAR"


def _rel(columns: list[str], key: list[str] | None = None, types: list[str] | None = None) -> dict:
    return {"columns": columns, "types": types or [B] * len(columns), **({"key": key} if key else {})}


# The tables of sql/pg_ivm.sql (base_t as most of its tests create it), spread over two sources.
PG_IVM = {
    "sources": {
        "ds1": {"mv_base_a": _rel(["x", "i", "y", "j"]), "base_r": _rel(["i", "v"]), "ri1": _rel(["i"], ["i"]),
                "rls_tbl": _rel(["id", "data", "owner"], types=[B, T, T]), "base_a": _rel(["i", "j"], ["i"]),
                "tbl_update_same": _rel(["i"]), "tbl_self_ref": _rel(["a", "b"], ["a"])},
        "ds2": {"mv_base_b": _rel(["x", "i", "y", "k"]), "base_s": _rel(["i", "v"]), "ri2": _rel(["i", "v"], ["i"]),
                "num_tbl": _rel(["id", "num"], types=[B, T]), "base_b": _rel(["i", "j"], ["i"]),
                "base_t": _rel(["i", "v"])}},
    "initial": {"mv_base_a": [[1, i, 1, 10 * i] for i in range(1, 6)],
                "mv_base_b": [[1, i, 1, 100 + i] for i in range(1, 5)],
                "base_r": [[1, 10], [2, 20], [3, 30]], "base_s": [[1, 100], [2, 200], [4, 400]],
                "base_t": [[1, 10], [1, 11], [2, 20]], "ri1": [[1], [2], [3]], "ri2": [[1, 10], [2, 20]],
                "rls_tbl": [[1, "foo", "ivm_user"], [2, "bar", "postgres"]], "num_tbl": [[1, "one"], [2, "two"]],
                "base_a": [[1, 10], [2, 20]], "base_b": [[1, 10], [3, 30]],
                "tbl_update_same": [[1], [2]], "tbl_self_ref": [[1, 1], [2, 1]]}}

# The tables of sql/outer_join.sql.
OUTER_JOIN = {
    "sources": {"ds1": {"base_r": _rel(["i"]), "base_t": _rel(["j"])},
                "ds2": {"base_s": _rel(["i", "j"]), "base_u": _rel(["j", "i"])}},
    "initial": {"base_r": [[1], [2], [3]], "base_s": [[1, 1], [2, 1], [4, 3]], "base_t": [[1], [3], [4]],
                "base_u": [[1, 1], [5, 2]]}}

# The table of sql/create_immv.sql and sql/refresh_immv.sql.
CREATE_IMMV = {"sources": {"ds1": {"t": _rel(["i"], ["i"])}}, "initial": {"t": [[1], [2], [3], [4], [5]]}}

CATALOGS = {"pg_ivm.sql": PG_IVM, "outer_join.sql": OUTER_JOIN, "create_immv.sql": CREATE_IMMV}

FUNCTION_IN_FROM = "a function in FROM"

# (the file, pg_ivm's name of the view, its SQL as the file writes it, None if fedlab maintains it
# or what its refusal says)
VIEWS = [
    ("pg_ivm.sql", "mv_ivm_1", "SELECT i,j,k FROM mv_base_a a INNER JOIN mv_base_b b USING(i)", None),
    ("pg_ivm.sql", "mv_ivm_func", "SELECT * FROM ivm_func()", FUNCTION_IN_FROM),
    ("pg_ivm.sql", "mv_ivm_no_tbl", "SELECT 1", "missing FROM clause"),
    ("pg_ivm.sql", "mv_ivm_duplicate", "SELECT j FROM mv_base_a", None),
    ("pg_ivm.sql", "mv_ivm_distinct", "SELECT DISTINCT j FROM mv_base_a", None),
    ("pg_ivm.sql", "mv_ivm_agg", "SELECT i, SUM(j), COUNT(i), AVG(j) FROM mv_base_a GROUP BY i", None),
    ("pg_ivm.sql", "mv_ivm_agg", "SELECT i, SUM(j), COUNT(*) FROM mv_base_a GROUP BY i", None),
    ("pg_ivm.sql", "mv_ivm_group", "SELECT SUM(j), COUNT(j), AVG(j) FROM mv_base_a", None),
    ("pg_ivm.sql", "mv_ivm_avg_bug", "SELECT i, SUM(j), COUNT(j), AVG(j) FROM mv_base_A GROUP BY i", None),
    ("pg_ivm.sql", "mv_ivm_min_max", "SELECT i, MIN(j), MAX(j) FROM mv_base_a GROUP BY i", None),
    ("pg_ivm.sql", "mv_ivm_min_max", "SELECT MIN(j), MAX(j) FROM mv_base_a", None),
    ("pg_ivm.sql", "mv_ivm_min", "SELECT MIN(j) FROM mv_base_a", None),
    ("pg_ivm.sql", "mv_ivm_agg", "SELECT i, SUM(j) FROM mv_base_a GROUP BY i", None),
    ("pg_ivm.sql", "mv_self", "SELECT t1.v, t2.v FROM base_t AS t1 JOIN base_t AS t2 ON t1.i = t2.i", None),
    ("pg_ivm.sql", "mv", "SELECT r.v, s.v FROM base_r AS r JOIN base_s AS s USING(i)", None),
    ("pg_ivm.sql", "mv_ri", "SELECT ri1.i, ri2.i FROM ri1 JOIN ri2 USING(i)", None),
    ("pg_ivm.sql", "mv_ivm_exists_subquery",
     "SELECT a.i, a.j FROM mv_base_a a WHERE EXISTS(SELECT 1 FROM mv_base_b b WHERE a.i = b.i)", None),
    ("pg_ivm.sql", "mv_ivm_exists_subquery2",
     "SELECT a.i,a.j FROM mv_base_a a WHERE EXISTS(SELECT 1 FROM mv_base_b b WHERE a.i = b.i) AND a.i > 2", None),
    ("pg_ivm.sql", "mv_ivm_exists_subquery_distinct",
     "SELECT DISTINCT a.i, a.j FROM mv_base_a a WHERE EXISTS(SELECT 1 FROM mv_base_b b WHERE a.i = b.i)", None),
    ("pg_ivm.sql", "mv_ivm_subquery", "SELECT a.i,a.j FROM mv_base_a a,( SELECT * FROM mv_base_b) b WHERE a.i = b.i",
     None),
    ("pg_ivm.sql", "mv_ivm_join_subquery",
     "SELECT i, j, k FROM ( SELECT i, a.j, b.k FROM mv_base_b b INNER JOIN mv_base_a a USING(i)) tmp", None),
    ("pg_ivm.sql", "mv_ivm_join_subquery",
     "SELECT i, j, k FROM ( SELECT i, a.j, b.k FROM mv_base_b b INNER JOIN (SELECT * FROM mv_base_a) a USING(i)) tmp",
     None),
    ("pg_ivm.sql", "mv_cte", "WITH b AS ( SELECT * FROM mv_base_b) SELECT a.i,a.j FROM mv_base_a a, b WHERE a.i = b.i",
     None),
    ("pg_ivm.sql", "mv_cte",
     "WITH a AS (SELECT * FROM mv_base_a), b AS ( SELECT * FROM mv_base_b) SELECT a.i,a.j FROM a, b WHERE a.i = b.i",
     None),
    ("pg_ivm.sql", "mv_cte", "WITH b AS ( SELECT * FROM mv_base_b) SELECT v.i,v.j FROM (WITH a AS (SELECT * FROM "
     "mv_base_a) SELECT a.i,a.j FROM a, b WHERE a.i = b.i) v", None),
    ("pg_ivm.sql", "mv_cte", "SELECT * FROM (WITH a AS (SELECT * FROM mv_base_a), b AS ( SELECT * FROM mv_base_b) "
     "SELECT a.i,a.j FROM a, b WHERE a.i = b.i) v", None),
    ("pg_ivm.sql", "mv_cte", "WITH b AS ( SELECT * FROM (SELECT * FROM mv_base_b) b2) SELECT v.i,v.j FROM (WITH a AS "
     "(SELECT * FROM mv_base_a) SELECT a.i,a.j FROM a, b WHERE a.i = b.i) v", None),
    ("pg_ivm.sql", "mv_cte",
     "WITH x AS ( SELECT i, a.j, b.k FROM mv_base_b b INNER JOIN mv_base_a a USING(i)) SELECT * FROM x", None),
    ("pg_ivm.sql", "mv_ivm_nested_cte", "WITH v AS ( WITH a AS (SELECT * FROM mv_base_a) SELECT i, a.j, b.k FROM "
     "mv_base_b b INNER JOIN a USING(i)) SELECT * FROM v", None),
    ("pg_ivm.sql", "mv_cte_multi", "WITH t AS (SELECT * FROM base_t) SELECT t1.v, t2.v FROM t AS t1 JOIN t AS t2 "
     "ON t1.i = t2.i", None),
    ("pg_ivm.sql", "mv", "SELECT * FROM base_t", None),
    ("pg_ivm.sql", "mv", "SELECT i, sum(v) FROM base_t GROUP BY i", None),
    ("pg_ivm.sql", "mv", "SELECT i, min(v), max(v) FROM base_t GROUP BY i", None),
    ("pg_ivm.sql", "mv_mytype", "SELECT * FROM t_mytype", "unknown relation 't_mytype'"),
    ("pg_ivm.sql", "ivm_rls", "SELECT * FROM rls_tbl", None),
    ("pg_ivm.sql", "ivm_rls2", "SELECT * FROM rls_tbl JOIN num_tbl USING(id)", None),
    ("pg_ivm.sql", "mv_update_same", "SELECT * FROM tbl_update_same", None),
    ("pg_ivm.sql", "mv_self_ref", "SELECT * FROM tbl_self_ref", None),
    ("pg_ivm.sql", "mv_idx1", "SELECT i, sum(j) FROM base_a GROUP BY i", None),
    ("pg_ivm.sql", "mv_idx2", "SELECT DISTINCT j FROM base_a", None),
    ("pg_ivm.sql", "mv_idx3", "SELECT a.i, b.i FROM base_a a, base_b b", None),
    ("pg_ivm.sql", "mv_idx4", "SELECT j FROM base_a", None),
    ("pg_ivm.sql", "mv_idx5", "SELECT a.i, b.j FROM base_a a, base_b b", None),
    ("pg_ivm.sql", "mv_idx6", "SELECT a.i, b.i FROM (SELECT * FROM base_a) a, (SELECT * FROM base_b) b", None),
    ("pg_ivm.sql", "mv_idx7", "SELECT i FROM base_a, generate_series(1,10)", FUNCTION_IN_FROM),
    *[("outer_join.sql", "mv", f"SELECT r.i, s.i, s.j, t.j FROM base_r AS r {first} JOIN base_s AS s ON r.i=s.i "
       f"{second} JOIN base_t AS t ON s.j=t.j", None)
      for first in ("FULL", "LEFT", "RIGHT", "INNER") for second in ("FULL", "LEFT", "RIGHT", "INNER")
      if (first, second) != ("INNER", "INNER")],
    ("outer_join.sql", "mv", "SELECT DISTINCT r.i, s.i, s.j, t.j FROM base_r AS r FULL JOIN base_s AS s ON r.i=s.i "
     "FULL JOIN base_t AS t ON s.j=t.j", "the select list names 'i' twice"),
    ("outer_join.sql", "mv", "SELECT r.i, s.i, s.j, t.j, u.i, u.j FROM (base_r AS r FULL JOIN base_s AS s ON r.i=s.i) "
     "FULL JOIN (base_t AS t FULL JOIN base_u AS u ON t.j=u.j) ON r.i=t.j", None),
    ("outer_join.sql", "mv", "SELECT r.i, s.i FROM base_r AS r FULL JOIN base_s AS s ON r.i=s.i WHERE s.i > 0", None),
    ("outer_join.sql", "mv", "SELECT r.i, r2.i FROM base_r AS r FULL JOIN base_r as r2 ON r.i=r2.i", None),
    ("outer_join.sql", "mv", "SELECT r.i, s.i, t.j, u.j FROM (base_r r LEFT JOIN (base_s s CROSS JOIN (base_t t "
     "FULL JOIN base_u u ON ((t.j = u.j)))) ON ((r.i = s.i)))", "a cartesian product"),
    ("outer_join.sql", "mv", "SELECT r.i, s.i FROM base_r AS r FULL JOIN base_s AS s ON r.i=s.i", None),
    ("create_immv.sql", "mv", "SELECT * FROM t", None),
    ("create_immv.sql", "mv2", "SELECT * FROM t WHERE i%2 = 0", None),
]

MAINTAINED = [(f, name, sql) for f, name, sql, refusal in VIEWS if refusal is None]
REFUSED = [(f, name, sql, refusal) for f, name, sql, refusal in VIEWS if refusal is not None]


def scenario(catalog_file: str, sql: str, seed: int) -> dict:
    return under_random_faults("pg_ivm", CATALOGS[catalog_file], sql, seed)


def test_each_view_is_taken_once():
    assert len({(f, sql) for f, _, sql, _ in VIEWS}) == len(VIEWS) == 68


@pytest.mark.parametrize("catalog_file, name, sql", MAINTAINED, ids=[f"{n}:{s[:50]}" for _, n, s in MAINTAINED])
def test_a_pg_ivm_view_fedlab_maintains_is_complete_under_faults(catalog_file, name, sql):
    result = simulate(parse_scenario(scenario(catalog_file, sql, seed=len(sql)), name))
    assert result["consistency"] == "complete", (sql, result["checker"]["first_violation"])
    assert result["checker"]["transactions"] == len(result["states"]) > 0


@pytest.mark.parametrize("catalog_file, name, sql, refusal", REFUSED, ids=[f"{n}:{s[:50]}" for _, n, s, _ in REFUSED])
def test_a_pg_ivm_view_fedlab_refuses_stops_with_one_line_naming_why(catalog_file, name, sql, refusal):
    with pytest.raises(ModelError) as err:
        parse_scenario(scenario(catalog_file, sql, seed=1), name)
    message = str(err.value)
    assert refusal in message and "\n" not in message, message


def _between(node: exp.Expression, top: exp.Expression, kinds: tuple) -> bool:
    """Whether a node of one of `kinds` lies between `node` and its ancestor `top`."""
    node = node.parent
    while node is not None and node is not top:
        if isinstance(node, kinds):
            return True
        node = node.parent
    return False


def _base_reads(tree: exp.Expression) -> list[str]:
    """The base relations a view reads outside EXISTS, once per occurrence, through its WITH queries."""
    ctes = {c.alias_or_name.lower(): c.this for c in tree.find_all(exp.CTE)}

    def reads(node: exp.Expression) -> list[str]:
        names = [t.name.lower() for t in node.find_all(exp.Table)
                 if isinstance(t.this, exp.Identifier) and not _between(t, node, (exp.CTE, exp.Exists))]
        return [read for name in names for read in (reads(ctes[name]) if name in ctes else [name])]
    return reads(tree)


def _outer(tree: exp.Expression) -> bool:
    return any(j.side for j in tree.find_all(exp.Join))


def _refused_outer(tree: exp.Expression) -> bool:
    """An outer join with DISTINCT or an aggregate over it, or beside a product (a join without ON)."""
    return (tree.find(exp.Distinct, exp.AggFunc) is not None
            or any(not j.side and not j.args.get("on") and not j.args.get("using") for j in tree.find_all(exp.Join)))


# Each row of docs/algorithms.md's "SQL accepted" table, by how its first cell begins, and whether a
# view uses its construct, told by sqlglot from the SQL as pg_ivm's file writes it (not by
# fedlab's rewrites).
CONSTRUCTS = {
    "inner joins": lambda t: len(_base_reads(t)) > 1 and (not _outer(t) or any(not j.side for j in t.find_all(exp.Join))),
    "selections on one relation": lambda t: any(
        not (isinstance(p.this, exp.Column) and isinstance(p.expression, exp.Column))
        for p in t.find_all(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.In, exp.Between, exp.Is)),
    "GROUP BY with": lambda t: t.find(exp.AggFunc) is not None and not _outer(t),
    "SELECT DISTINCT": lambda t: t.find(exp.Distinct) is not None and not _outer(t),
    "self-joins": lambda t: len(set(_base_reads(t))) < len(_base_reads(t)),
    "`SELECT *`": lambda t: (any(not isinstance(s.parent, exp.Count) for s in t.find_all(exp.Star))
                             or any(j.args.get("using") or j.kind == "NATURAL" for j in t.find_all(exp.Join))
                             or len({e.alias_or_name for e in t.expressions}) < len(t.expressions)),
    "WITH queries and derived tables": lambda t: any(not _between(n, t, (exp.Exists,))
                                                     for n in t.find_all(exp.CTE, exp.Subquery)),
    "outer joins (LEFT": lambda t: _outer(t) and not _refused_outer(t),
    "outer joins with a cycle": lambda t: _outer(t) and _refused_outer(t),
    "NOT EXISTS (SELECT": lambda t: any(isinstance(e.parent, exp.Not) for e in t.find_all(exp.Exists)),
    "EXISTS (SELECT": lambda t: any(not isinstance(e.parent, exp.Not) for e in t.find_all(exp.Exists)),
    "TABLESAMPLE": lambda t: any(not isinstance(x.this, exp.Identifier) for x in t.find_all(exp.Table)),
}


def test_the_sql_table_counts_the_views_using_each_construct_and_how_many_fedlab_maintains():
    """The "pg_ivm's tests" column of the "SQL accepted" table: for its row's construct, how many of
    pg_ivm's views using it fedlab maintains, of how many; '-' where none uses it."""
    text = (Path(__file__).parent.parent / "docs" / "algorithms.md").read_text()
    header = "| SQL | here | pg_ivm | pg_ivm's tests | Materialize | example |"
    lines = text[text.index(header):].split("\n\n")[0].splitlines()[2:]
    cells = {line.split(" | ")[0][2:]: line.split(" | ")[3] for line in lines}
    counted = {}
    for construct, uses in CONSTRUCTS.items():
        using = [refusal for _, _, sql, refusal in VIEWS if uses(sqlglot.parse_one(sql, read="postgres"))]
        counted[construct] = f"{using.count(None)} of {len(using)}" if using else "-"
    for first_cell, cell in cells.items():
        construct = [c for c in CONSTRUCTS if first_cell.startswith(c)]
        assert cell == (counted[construct[0]] if construct else "-"), (first_cell, cell, counted)
    assert all(any(first.startswith(c) for first in cells) for c in CONSTRUCTS)


def test_the_docs_report_the_counts_this_file_holds():
    """docs/algorithms.md's "SQL accepted" section says how many of pg_ivm's views fedlab maintains
    (its outer joins among them) and why it refuses the rest: a table row per reason of this
    file, with its count."""
    text = (Path(__file__).parent.parent / "docs" / "algorithms.md").read_text()
    said = re.search(r"pg_ivm's own regression views: fedlab maintains (\d+) of (\d+)", text)
    assert said and (int(said[1]), int(said[2])) == (len(MAINTAINED), len(VIEWS))
    outer = [sql for f, _, sql in MAINTAINED if f == "outer_join.sql"]
    assert int(re.search(r"(\d+) outer-join views of outer_join.sql", text)[1]) == len(outer)
    table = text[text.index(f"The {len(REFUSED)} refused:"):]
    rows = re.findall(r"^\| `([^`]+)`[^|]*\| (\d+) \|$", table[:table.index("\n\n", table.index("| ---"))], re.M)
    assert Counter({reason: int(n) for reason, n in rows}) == Counter(refusal for *_, refusal in REFUSED)
