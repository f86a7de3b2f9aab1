"""The SQL users bring: each view of a corpus is maintained or refused.

The corpus follows pg_ivm's regression categories and the SQL reference: select-project-join
views in their spellings (`*`, USING, NATURAL, WITH queries and derived tables among them, rewritten
by fedmodel.rewrites), outer joins, EXISTS (a semi-join), NOT EXISTS (an anti-join) and aggregate ones (GROUP BY with
aggregates, DISTINCT: maintained: a random schedule of commits with dropped, reordered and
duplicated messages under `fedlab simulate`, every applied state checked by the DuckDB oracle's
recomputation), and everything else (HAVING, DISTINCT ON, aggregates of DISTINCT values, outer
joins beyond a tree of equalities, subqueries other than EXISTS and NOT EXISTS, aggregate or recursive WITH queries, set operations, window functions, sampling, locking, row limits,
functions in FROM, ...) refused before anything starts with one line that names the
construct.
"""

from __future__ import annotations

from collections import Counter

import duckdb
import pytest
from scenario_support import under_random_faults

from fedlab.fedmodel.aggregate_view import AggregateView, parse_query
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.checker.oracle import Oracle
from fedlab.simulation.scenario import parse_scenario
from fedlab.simulation.simulate import simulate

SOURCES = {"ds1": {"a": {"columns": ["i", "j", "s"], "types": ["BIGINT", "BIGINT", "VARCHAR"], "key": ["i"]}},
           "ds2": {"b": {"columns": ["i", "k"], "types": ["BIGINT", "BIGINT"], "key": ["i"]}},
           "ds3": {"c": {"columns": ["k", "t"], "types": ["BIGINT", "VARCHAR"], "key": ["k"]}}}
INITIAL = {"a": [[1, 10, "x"], [2, 20, "y"], [3, 30, "xz"]], "b": [[1, 5], [2, 6], [3, 5]], "c": [[5, "p"], [6, "q"]]}

MAINTAINED = [
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i",
    "SELECT a.i, b.k FROM a INNER JOIN b ON a.i = b.i",
    "SELECT a.i, b.k FROM a, b WHERE a.i = b.i",
    "SELECT a.i, b.k FROM b JOIN a ON b.i = a.i",
    "SELECT x.i, y.k FROM a AS x JOIN b AS y ON x.i = y.i",
    "SELECT x.i, y.k FROM a x, b y WHERE y.i = x.i",
    "SELECT a.i AS id, b.k AS kk FROM a JOIN b ON a.i = b.i",
    "SELECT a.i, a.i AS again, b.k FROM a JOIN b ON a.i = b.i",
    "SELECT a.j, b.k FROM a JOIN b ON a.i = b.i",
    "SELECT a.s FROM a JOIN b ON a.i = b.i",
    "SELECT b.k FROM a JOIN b ON a.i = b.i",
    "SELECT a.i, b.k, c.t FROM a JOIN b ON a.i = b.i JOIN c ON b.k = c.k",
    "SELECT a.j, c.t FROM a JOIN b ON a.i = b.i JOIN c ON b.k = c.k",
    "SELECT c.t FROM a JOIN b ON a.i = b.i JOIN c ON b.k = c.k",
    "SELECT a.i, c.t FROM a, b, c WHERE a.i = b.i AND b.k = c.k",
    "SELECT a.i, c.t FROM c JOIN b ON c.k = b.k JOIN a ON b.i = a.i",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE a.j > 10",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE a.j >= 10 AND b.k <> 6",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE a.j < 25 OR a.j = 30",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE NOT a.j = 20",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE a.j IN (10, 30)",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE a.j NOT IN (10, 30)",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE a.j BETWEEN 10 AND 25",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE a.s LIKE 'x%'",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE a.s NOT LIKE '%z'",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE a.s IS NOT NULL",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE a.s IS NULL",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i AND a.j > 10",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE (a.j > 10 AND (b.k = 5 OR b.k = 6))",
    "SELECT a.i, c.t FROM a JOIN b ON a.i = b.i JOIN c ON b.k = c.k WHERE c.t IN ('p', 'q')",
    "SELECT a.i, c.t FROM a JOIN b ON a.i = b.i JOIN c ON b.k = c.k WHERE c.t = 'p' AND a.s <> 'y'",
    "SELECT a.i, b.k FROM a CROSS JOIN b",
    "SELECT a.i, c.t FROM a, c",
    "SELECT a.i, a.j FROM a",
    "SELECT a.s FROM a WHERE a.j > 15",
    "SELECT i, k FROM a JOIN c ON a.j = c.k",
    "SELECT a.i, b.i AS bi FROM a JOIN b ON a.i = b.i",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i AND a.j = b.k",
    "SELECT A.I, B.K FROM A JOIN B ON A.I = B.I",
    "SELECT a.i, b.k FROM a JOIN b ON (a.i = b.i)",
    # aggregate views (fedmodel.aggregate_view): pg_ivm's mv_ivm_agg, mv_ivm_min_max, mv_ivm_avg, mv_ivm_distinct
    "SELECT count(*) FROM a",
    "SELECT a.i, count(b.k) FROM a JOIN b ON a.i = b.i GROUP BY a.i",
    "SELECT sum(a.j) FROM a",
    "SELECT avg(a.j) FROM a",
    "SELECT min(a.j) FROM a",
    "SELECT max(a.s) FROM a",
    "SELECT a.i FROM a GROUP BY a.i",
    # EXISTS: a semi-join (fedmodel.rewrites.exists; pg_ivm's mv_ivm_exists_subquery*)
    "SELECT a.i, a.j FROM a WHERE EXISTS (SELECT 1 FROM b WHERE a.i = b.i)",
    "SELECT a.j FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.i = a.i) AND a.j > 10",
    "SELECT DISTINCT a.j FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.i = a.i)",
    "SELECT b.k FROM b WHERE EXISTS (SELECT 1 FROM a JOIN c ON a.j > 0 WHERE a.i = b.i AND c.k = b.k)",
    "SELECT * FROM b WHERE EXISTS (SELECT 1 FROM a WHERE a.i = b.i) AND EXISTS (SELECT 1 FROM c WHERE c.k = b.k)",
    "SELECT a.i, c.t FROM a JOIN b ON a.i = b.i JOIN c ON b.k = c.k WHERE EXISTS (SELECT 1 FROM b WHERE b.k = c.k AND b.i > 1)",
    "SELECT s FROM a WHERE EXISTS (SELECT * FROM b WHERE i = a.i AND k > 5)",   # i: b's, as SQL scopes it
    "SELECT count(*) FROM b GROUP BY b.k",   # a grouping column not shown: two groups, one row twice
    "SELECT b.k, count(*) FROM a JOIN b ON a.i = b.i GROUP BY b.k, a.j",
    "SELECT DISTINCT a.j FROM a",
    "SELECT a.i, sum(a.j), count(*) FROM a GROUP BY a.i",
    "SELECT b.k, avg(a.j), min(a.s), max(a.s) FROM a JOIN b ON a.i = b.i GROUP BY b.k",
    "SELECT c.t, count(*) AS n FROM a JOIN b ON a.i = b.i JOIN c ON b.k = c.k GROUP BY c.t",
    "SELECT DISTINCT b.k FROM a JOIN b ON a.i = b.i",
    "SELECT DISTINCT a.s, c.t FROM a JOIN b ON a.i = b.i JOIN c ON b.k = c.k",
    "SELECT b.k, sum(a.j * 2 + 1) AS weighted FROM a JOIN b ON a.i = b.i GROUP BY b.k",
    "SELECT count(a.s), count(*) FROM a WHERE a.j > 10",
    "SELECT b.k, c.t, max(a.j) FROM a JOIN b ON a.i = b.i JOIN c ON b.k = c.k GROUP BY b.k, c.t",
    # self-joins (pg_ivm's mv_self): each occurrence a relation of the view (warehouse.core.occurrences)
    "SELECT x.i, y.j FROM a x JOIN a y ON x.i = y.j",
    "SELECT a.i, a2.i AS i2 FROM a, a AS a2",
    "SELECT x.i, y.i AS yi FROM a x JOIN a y ON x.s = y.s WHERE x.j > 10 AND y.s LIKE 'x%'",
    "SELECT a.i, a2.s, b.k FROM a JOIN b ON a.i = b.i JOIN a AS a2 ON b.k = a2.i",
    "SELECT x.i, z.i AS zi FROM a x JOIN a y ON x.j = y.j JOIN a z ON y.i = z.i",
    "SELECT b.k, count(*) FROM a JOIN a AS a2 ON a.j = a2.j JOIN b ON b.i = a2.i GROUP BY b.k",
    "SELECT DISTINCT x.s FROM a x JOIN a y ON x.i = y.i",
    # spellings rewritten into select-project-join views (fedmodel.rewrites)
    "SELECT * FROM a",
    "SELECT * FROM a JOIN b ON a.i = b.i",
    "SELECT * FROM a WHERE a.j > 10",
    "SELECT a.* FROM a JOIN b ON a.i = b.i",
    "SELECT a.*, b.k FROM a JOIN b ON a.i = b.i",
    "SELECT b.*, c.* FROM b JOIN c ON b.k = c.k",
    "SELECT a.i FROM a JOIN b USING (i)",
    "SELECT * FROM a JOIN b USING (i)",
    "SELECT * FROM b JOIN c USING (k) WHERE k > 5",
    "SELECT i, k, t FROM a JOIN b USING (i) JOIN c USING (k)",
    "SELECT * FROM a JOIN a AS a2 USING (i, j)",
    "SELECT a.i, b.k FROM a NATURAL JOIN b",
    "SELECT * FROM a NATURAL JOIN b NATURAL JOIN c",
    "WITH x AS (SELECT * FROM a) SELECT x.i FROM x",
    "WITH b AS (SELECT * FROM b WHERE k > 5) SELECT a.i, b.k FROM a JOIN b ON a.i = b.i",
    "WITH x AS (SELECT a.i, a.j FROM a WHERE a.j > 10), y AS (SELECT x.i, b.k FROM x JOIN b ON x.i = b.i) "
    "SELECT y.i, y.k, c.t FROM y JOIN c ON y.k = c.k",
    "WITH x AS (SELECT a.i, a.j FROM a) SELECT x.i, y.i AS yi FROM x JOIN x AS y ON x.i = y.j",
    "WITH x AS (SELECT a.i, b.k FROM a JOIN b USING (i)) SELECT * FROM x JOIN c USING (k)",
    "SELECT x.i FROM (SELECT * FROM a) x",
    "SELECT x.i FROM (SELECT a.i FROM a WHERE a.j > 1) AS x JOIN b ON x.i = b.i",
    "SELECT q.i, q.k FROM (SELECT p.i, b.k FROM (SELECT a.i FROM a WHERE a.j > 10) AS p JOIN b ON p.i = b.i) AS q",
    "SELECT * FROM (SELECT a.i, a.s FROM a WHERE a.j > 10) AS d JOIN b USING (i)",
    "SELECT d.n, c.t FROM (SELECT b.k AS n FROM b) AS d(n) JOIN c ON d.n = c.k",
    "SELECT a.i, b.i FROM a JOIN b ON a.i = b.i",
    "SELECT a.i, b.i, a.j AS i_1 FROM a JOIN b ON a.i = b.i",
    "SELECT a.i, b.k FROM a JOIN b ON a.i = b.i WHERE a.j % 3 = 1",
    "SELECT a.i FROM a WHERE (a.j - 25) % 7 <> 0",
    # outer joins (fedmodel.outer_joins: the terms' padded rows; pg_ivm's outer_join.sql)
    "SELECT a.i, b.k FROM a LEFT JOIN b ON a.i = b.i",
    "SELECT a.i, b.k FROM a LEFT OUTER JOIN b ON a.i = b.i",
    "SELECT a.i, b.k FROM a RIGHT JOIN b ON a.i = b.i",
    "SELECT a.i, b.k FROM a FULL OUTER JOIN b ON a.i = b.i",
    "SELECT a.j, c.t FROM a LEFT JOIN b ON a.i = b.i LEFT JOIN c ON b.k = c.k",
    "SELECT a.s, b.k, c.t FROM a FULL JOIN b ON a.i = b.i RIGHT JOIN c ON b.k = c.k",
    "SELECT a.i, b.k, c.t FROM a JOIN b ON a.i = b.i LEFT JOIN c ON b.k = c.k",
    "SELECT a.i, b.k, c.t FROM c RIGHT JOIN (a LEFT JOIN b ON a.i = b.i) ON b.k = c.k",
    "SELECT a.i, b.k FROM a LEFT JOIN b ON a.i = b.i AND b.k > 5",
    "SELECT a.i, b.k FROM a LEFT JOIN b ON a.i = b.i WHERE a.j > 10",
    "SELECT a.i, b.k FROM a FULL JOIN b ON a.i = b.i WHERE b.k = 5",
    "SELECT a.i, b.k FROM a LEFT JOIN b ON a.i = b.i WHERE b.k > 5",
    "SELECT a.i, c.t FROM a, b LEFT JOIN c ON b.k = c.k WHERE a.i = b.i",
    "SELECT * FROM a LEFT JOIN b USING (i)",
    "SELECT * FROM a LEFT JOIN b ON a.i = b.i",
    "SELECT x.i, y.s FROM a x LEFT JOIN a y ON x.j = y.i",
    "SELECT a.i, b.k FROM (a JOIN b ON a.i = b.i)",
    # NOT EXISTS: an anti-join, the padded rows of a LEFT JOIN (fedmodel.rewrites.not_exists)
    "SELECT a.i FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.i = a.i)",
    "SELECT a.j, a.s FROM a WHERE a.j > 10 AND NOT EXISTS (SELECT 1 FROM b WHERE b.i = a.i AND b.k > 5)",
    "SELECT * FROM b WHERE NOT EXISTS (SELECT * FROM c WHERE c.k = b.k)",
    "SELECT a.i, c.t FROM a JOIN b ON a.i = b.i JOIN c ON b.k = c.k WHERE NOT EXISTS (SELECT 1 FROM a AS x WHERE x.j = c.k)",
    "SELECT b.i FROM b, c WHERE b.k = c.k AND NOT EXISTS (SELECT 1 FROM a WHERE a.i = b.i AND a.s LIKE 'x%')",
    "SELECT a.i, b.k FROM a LEFT JOIN b ON a.i = b.i WHERE b.i IS NULL",
]

REFUSED = [
    # aggregates and grouping beyond what fedmodel.aggregate_view maintains
    ("SELECT a.i FROM a GROUP BY a.i HAVING a.i > 1", "HAVING"),
    ("SELECT a.i, count(DISTINCT b.k) FROM a JOIN b ON a.i = b.i GROUP BY a.i", "COUNT(DISTINCT"),
    ("SELECT a.j + 1, count(*) FROM a GROUP BY a.j + 1", "GROUP BY a.j + 1"),
    ("SELECT a.i, count(*) FROM a GROUP BY a.j", "a.i in the select list must be in GROUP BY"),
    ("SELECT sum(a.s) FROM a", "SUM needs numbers"),
    ("SELECT a.i, sum(a.j) + 1 FROM a GROUP BY a.i", "an expression"),
    ("SELECT sum(count(a.j)) FROM a", "an aggregate inside an aggregate"),
    ("SELECT DISTINCT a.j, count(*) FROM a GROUP BY a.j", "SELECT DISTINCT with GROUP BY"),
    ("SELECT a.i FROM a HAVING a.i > 1", "HAVING"),
    ("SELECT string_agg(a.s, ',') FROM a", "an aggregate"),
    # DISTINCT ON (PostgreSQL's; pg_ivm refuses it too)
    ("SELECT DISTINCT ON (a.j) a.i FROM a", "DISTINCT"),
    # a relation read twice under one name
    ("SELECT a.i FROM a JOIN a ON a.j = a.i", "appears twice under the name a"),
    ("SELECT x.i FROM a x JOIN b x ON x.i = x.i", "the name x is given to two relations"),
    # outer joins beyond the terms of fedmodel.outer_joins
    ("SELECT a.i FROM a LEFT JOIN b ON a.i = b.i WHERE b.k IS NULL", "holds for the NULLs an outer join pads b with"),
    ("SELECT a.i, b.k FROM a LEFT JOIN b ON a.i = b.i AND a.j > 10", "in the ON of a LEFT JOIN reads one side only"),
    ("SELECT a.i, b.k FROM a FULL JOIN b ON a.i = b.i AND b.k > 5", "in the ON of a FULL JOIN reads one side only"),
    ("SELECT a.i FROM a LEFT JOIN b ON a.i = b.i LEFT JOIN c ON b.k = c.k AND a.j = c.k", "a cycle"),
    ("SELECT a.i, c.t FROM a LEFT JOIN b ON a.i = b.i, c", "a cartesian product"),
    ("SELECT * FROM a FULL JOIN b USING (i)", "USING with a FULL JOIN"),
    ("SELECT a.i, count(*) FROM a LEFT JOIN b ON a.i = b.i GROUP BY a.i", "GROUP BY over an outer join"),
    ("SELECT a.i FROM a LEFT JOIN b ON a.i = b.i WHERE EXISTS (SELECT 1 FROM c WHERE c.k = b.k)",
     "EXISTS in a view with outer joins"),
    ("SELECT a.i FROM a SEMI JOIN b ON a.i = b.i", "only inner and outer joins"),
    ("SELECT a.i FROM a JOIN b ON a.i < b.i", "only equalities may relate two relations"),
    ("SELECT a.i FROM a JOIN b ON a.i = b.i OR a.j = b.k", "only equalities may relate two relations"),
    # subqueries (mv_ivm_subquery, mv_ivm_exists)
    ("SELECT a.i FROM a WHERE a.i IN (SELECT b.i FROM b)", "IN (SELECT ...)"),
    ("SELECT a.i FROM a WHERE a.i NOT IN (SELECT b.i FROM b)", "IN (SELECT ...)"),
    ("SELECT a.i FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.i = a.i) AND EXISTS (SELECT 1 FROM c WHERE c.k = a.j)",
     "NOT EXISTS beside EXISTS"),
    ("SELECT a.i FROM a WHERE a.j > 10 OR NOT EXISTS (SELECT 1 FROM b WHERE b.i = a.i)", "NOT EXISTS under OR"),
    ("SELECT a.i FROM a WHERE NOT EXISTS (SELECT 1 FROM b JOIN c ON b.k = c.k WHERE b.i = a.i)",
     "NOT EXISTS must read one base relation"),
    ("SELECT count(*) FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.i = a.i)", "NOT EXISTS in an aggregate view"),
    ("SELECT a.i FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE a.j > 10)", "reads the outer relations only"),
    ("SELECT a.i FROM a LEFT JOIN b ON a.i = b.i WHERE a.i IS NULL", "not only padded"),
    ("SELECT a.i FROM a WHERE a.j > 10 OR EXISTS (SELECT 1 FROM b WHERE b.i = a.i)", "EXISTS under OR"),
    ("SELECT a.i FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.i = a.i AND EXISTS (SELECT 1 FROM c WHERE c.k = b.k))",
     "a subquery nested in EXISTS"),
    ("SELECT a.i FROM a WHERE EXISTS (SELECT count(*) FROM b WHERE b.i = a.i)", "in EXISTS that aggregates"),
    ("SELECT count(*) FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.i = a.i)", "EXISTS in an aggregate view"),
    ("SELECT a.j + 1 FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.i = a.i)", "select columns"),
    ("SELECT d.i FROM (SELECT a.i FROM a) AS d WHERE EXISTS (SELECT 1 FROM b WHERE b.i = d.i)",
     "EXISTS beside a WITH query or derived table"),
    ("SELECT a.i FROM a WHERE a.j > (SELECT max(b.k) FROM b)", "scalar (SELECT ...)"),
    ("SELECT a.i FROM a WHERE a.j > ALL (SELECT b.k FROM b)", "ALL (SELECT ...)"),
    ("SELECT a.i FROM a WHERE a.j = ANY (SELECT b.k FROM b)", "ANY (SELECT ...)"),
    ("SELECT a.i FROM a JOIN b ON a.i = b.i AND a.j = (SELECT 1)", "scalar (SELECT ...)) in ON"),
    ("SELECT a.i, (SELECT max(b.k) FROM b) FROM a", "a scalar subquery in the select list"),
    ("SELECT a.i, x.k FROM a, LATERAL (SELECT * FROM b WHERE b.i = a.i) x", "LATERAL"),
    # WITH queries and derived tables that are not select-project-join (mv_cte, mv_ivm_subquery)
    ("WITH RECURSIVE r AS (SELECT 1 AS n) SELECT r.n FROM r", "WITH RECURSIVE"),
    ("WITH x AS (SELECT a.j, count(*) AS n FROM a GROUP BY a.j) SELECT x.j FROM x", "x aggregates (GROUP BY)"),
    ("SELECT d.j FROM (SELECT DISTINCT a.j FROM a) AS d", "d aggregates (DISTINCT)"),
    ("SELECT d.m FROM (SELECT max(a.j) AS m FROM a) AS d", "d aggregates (an aggregate (MAX))"),
    ("SELECT d.i FROM (SELECT a.i FROM a ORDER BY a.j) AS d", "ORDER BY in d"),
    ("SELECT d.i FROM (SELECT a.i FROM a LIMIT 2) AS d", "LIMIT / FETCH FIRST in d"),
    ("SELECT d.i FROM (SELECT a.i FROM a UNION SELECT b.i FROM b) AS d", "UNION in d"),
    ("SELECT d.i FROM (SELECT a.i FROM a LEFT JOIN b ON a.i = b.i) AS d", "derived table in a view with outer joins"),
    ("SELECT d.j FROM (SELECT a.i FROM a) AS d", "d has no column 'j'"),
    ("SELECT j FROM (SELECT a.i FROM a) AS d", "no relation in FROM has a column 'j'"),
    ("SELECT i FROM (SELECT a.i FROM a) AS d JOIN b ON d.i = b.i", "column 'i' is ambiguous"),
    ("SELECT a.i FROM a JOIN b USING (s)", "relation b has no column 's'"),
    ("SELECT a.i FROM a JOIN b USING (q)", "no relation left of JOIN b USING (q) has a column 'q'"),
    # set operations
    ("SELECT a.i FROM a UNION SELECT b.i FROM b", "UNION"),
    ("SELECT a.i FROM a UNION ALL SELECT b.i FROM b", "UNION ALL"),
    ("SELECT a.i FROM a EXCEPT SELECT b.i FROM b", "EXCEPT"),
    ("SELECT a.i FROM a INTERSECT SELECT b.i FROM b", "INTERSECT"),
    ("VALUES (1, 2)", "VALUES"),
    # window functions
    ("SELECT a.i, row_number() OVER (ORDER BY a.i) FROM a", "a window function"),
    ("SELECT a.i, sum(a.j) OVER (PARTITION BY a.s) FROM a", "a window function"),
    ("SELECT a.i FROM a WINDOW w AS (PARTITION BY a.s)", "WINDOW"),
    ("SELECT a.i FROM a QUALIFY a.i > 1", "QUALIFY"),
    # ordering and row limits
    ("SELECT a.i FROM a ORDER BY a.i", "ORDER BY"),
    ("SELECT a.i FROM a LIMIT 2", "LIMIT"),
    ("SELECT a.i FROM a OFFSET 1", "OFFSET"),
    ("SELECT a.i FROM a FETCH FIRST 2 ROWS ONLY", "FETCH FIRST"),
    # sampling and locking (accepted and ignored once)
    ("SELECT a.i, b.k FROM a TABLESAMPLE (10 PERCENT) JOIN b ON a.i = b.i", "TABLESAMPLE on a"),
    ("SELECT a.i FROM a TABLESAMPLE BERNOULLI (50)", "TABLESAMPLE"),
    ("SELECT a.i FROM a FOR UPDATE", "FOR UPDATE"),
    ("SELECT a.i FROM a FOR SHARE", "FOR SHARE"),
    # FROM items other than base relations
    ("SELECT x.n FROM generate_series(1, 3) AS x", "a function in FROM (GENERATE_SERIES"),
    ("SELECT a.i FROM a JOIN unnest(ARRAY[1, 2]) AS u ON a.i = u.u", "UNNEST"),
    ("SELECT z.i FROM zz AS z", "unknown relation 'zz'"),
    # select-list items other than columns
    ("SELECT a.i + 1 FROM a", "an expression"),
    ("SELECT upper(a.s) FROM a", "an expression"),
    ("SELECT 1 FROM a", "a constant"),
    ("SELECT CASE WHEN a.j > 1 THEN 1 END FROM a", "an expression"),
    ("SELECT CAST(a.j AS VARCHAR) FROM a", "an expression"),
    # names
    ("SELECT a.i, b.k AS count FROM a JOIN b ON a.i = b.i", "'count'"),
    ("SELECT a.i, a.j % 2.5 FROM a", "an expression"),
    ("SELECT a.i FROM a WHERE a.j % 2.5 > 1", "a.j % 2.5 needs whole numbers"),
    ("SELECT a.i FROM a WHERE a.j % (a.j / 2) > 1", "needs whole numbers"),
    ("SELECT a.j AS \"count\" FROM a", "'count'"),
    ("SELECT i FROM a JOIN b ON a.i = b.i", "ambiguous"),
    ("SELECT a.q FROM a", "no column 'q'"),
    # predicates a source cannot evaluate once for all
    ("SELECT a.i FROM a WHERE a.j > random()", "unsupported predicate"),
    ("SELECT a.i FROM a WHERE a.j = now()", "unsupported predicate"),
    ("SELECT a.i FROM a WHERE a.s LIKE 1", "needs text"),
    ("SELECT a.i FROM a WHERE a.i = 'x'", "compares a number with text"),
    # not one SELECT statement
    ("SELECT a.i FROM a; SELECT b.i FROM b", "single SELECT"),
    ("SELECT 1", "missing FROM"),
    ("INSERT INTO a VALUES (1, 2, 'x')", "single SELECT"),
    ("SELECT a.i FROM", "malformed SQL"),
]


def scenario(view: str, seed: int = 1) -> dict:
    return under_random_faults("corpus", {"sources": SOURCES, "initial": INITIAL}, view, seed)


def test_the_corpus_spans_a_hundred_views_and_every_category():
    assert len(MAINTAINED) + len(REFUSED) >= 100
    assert len({sql for sql, _ in REFUSED} | set(MAINTAINED)) == len(REFUSED) + len(MAINTAINED)


@pytest.mark.parametrize("sql, construct", REFUSED, ids=[sql[:60] for sql, _ in REFUSED])
def test_a_view_outside_the_language_is_refused_naming_its_construct(sql, construct):
    with pytest.raises(ModelError) as err:
        parse_scenario(scenario(sql), "corpus")
    message = str(err.value)
    assert construct.lower() in message.lower() and "\n" not in message, message


@pytest.mark.parametrize("sql", MAINTAINED)
def test_a_select_project_join_view_is_maintained_under_faults(sql):
    result = simulate(parse_scenario(scenario(sql, seed=len(sql)), "corpus"))
    checker = result["checker"]
    assert result["consistency"] == "complete", (sql, checker["first_violation"])
    assert checker["transactions"] == len(result["states"]) > 0, sql


@pytest.mark.parametrize("sql", MAINTAINED)
def test_a_view_shows_the_columns_and_rows_duckdb_gives_its_sql(sql):
    """The rewrites keep the user's SQL: a view's columns are named and ordered as DuckDB names
    those of a table of the query (a second `i` is `i_1`), and the checker's oracle, which flattens
    the SQL on its own, reads the rows DuckDB gives the SQL as written."""
    catalog = Catalog.from_dict({"sources": SOURCES})
    db = duckdb.connect()
    for rel in catalog.relations:
        db.execute(f"CREATE TABLE {rel.name} ({', '.join(f'{c} {t}' for c, t in zip(rel.columns, rel.types))})")
        db.executemany(f"INSERT INTO {rel.name} VALUES ({', '.join('?' for _ in rel.columns)})", INITIAL[rel.name])
    result = db.execute(f"SELECT * FROM ({sql}) AS v")
    view = parse_query(sql, catalog)
    if not isinstance(view, AggregateView):   # an aggregate's column is named otherwise by each
        # without case, as SQL compares unquoted names (DuckDB spells a column as its table does)
        assert tuple(d[0].lower() for d in result.description) == tuple(n.lower() for n in view.output_names)
    oracle = Oracle(catalog, sql, {r: [tuple(row) for row in rows] for r, rows in INITIAL.items()}, {})
    assert oracle.view_at({}) == dict(Counter(result.fetchall()))


@pytest.mark.parametrize("command", [["run", "--duration", "1s"], ["bench"], ["demo"]])
def test_a_refused_view_file_stops_a_live_command_before_anything_starts(command, tmp_path, monkeypatch, capsys):
    from fedlab import cli
    from fedlab.loadgen import tpch

    views = tmp_path / "loadgen" / "views"
    views.mkdir(parents=True)
    (views / "sampled.sql").write_text("SELECT c_custkey FROM customer TABLESAMPLE (5 PERCENT)")
    monkeypatch.setattr(tpch, "VIEWS_DIR", views)
    out = tmp_path / "out"
    flag = "--out" if command[0] == "bench" else "--run-dir"
    views_flag = "--views" if command[0] == "bench" else "--view"
    assert cli.main([*command, views_flag, "sampled", flag, str(out)]) == 2
    captured = capsys.readouterr()
    printed = (captured.out + captured.err).strip()
    assert "loadgen/views/sampled.sql: view: TABLESAMPLE on customer is not supported" in printed
    assert "\n" not in printed and not out.exists()
