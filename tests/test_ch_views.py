"""CH-benCHmark's catalog and views (docs/ch-benchmark.md): each view file parses against the
catalog; the page's table of the 22 queries says what fedlab's parser says of go-tpc's text; each
view holds, over made-up rows, the rows the checker's oracle gives its SQL, and the rows
PostgreSQL gives go-tpc's own query over those rows read back as the catalog reads them; and
the catalog is the schema go-tpc creates, which needs go-tpc (fedlab/preflight.py's GO_TPC:
skipped saying how to install it, failed under CI=true).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from postgres_support import fresh_database
from prerequisites import require
from psycopg.types.numeric import FloatLoader
from psycopg.types.string import TextLoader

from fedlab.checker.oracle import Oracle, comparable
from fedlab.fedmodel.aggregate_view import parse_query
from fedlab.fedmodel.catalog import validate_rows
from fedlab.fedmodel.errors import ModelError
from fedlab.loadgen.ch.catalog import PG_TYPES, ch_catalog
from fedlab.loadgen.ch.catalog import JOIN_COLUMNS
from fedlab.loadgen.ch.go_tpc import GENERATED, prepare, rows_of
from fedlab.loadgen.ch.views import QUERIES, VIEWS_DIR, load_view, original, view_names
from fedlab.preflight import GO_TPC
from fedlab.warehouse.core.aggregate_state import user_view
from fedlab.warehouse.core.recompute import recompute

DOC = Path(__file__).resolve().parent.parent / "docs" / "ch-benchmark.md"
CATALOG = ch_catalog()
# What a reader of a view does that the view leaves out (its header says so): Q18's HAVING.
READ_WITH = {"q18": lambda row: row[4] > 200}


def documented() -> dict[str, tuple[str, str]]:
    """docs/ch-benchmark.md's table of the queries: qN -> (the parser's answer to go-tpc's text,
    `accepted` or its one-line error; the view's file name, or `none`)."""
    table = {}
    for line in DOC.read_text().splitlines():
        if re.match(r"\| Q\d+ \|", line):
            query, said, view, _ = (cell.strip() for cell in line.strip().strip("|").split(" | "))
            table[query.lower()] = (said.strip("`"), re.sub(r"\[(.*?)\]\(.*?\)", r"\1", view))
    return table


def parser_says(sql: str) -> str:
    try:
        parse_query(sql, CATALOG)
    except ModelError as err:
        return str(err)
    return "accepted"


@pytest.mark.parametrize("name", view_names())
def test_a_view_file_parses_against_the_catalog(name):
    assert parse_query(load_view(name), CATALOG).join.relations


def test_the_page_lists_the_22_queries_and_the_view_files():
    table = documented()
    assert sorted(table) == sorted(QUERIES)
    assert {view for _, view in table.values()} - {"none"} == {f"{name}.sql" for name in view_names()}


def test_a_query_without_a_view_is_refused_naming_those_there_are():
    with pytest.raises(ModelError, match="unknown CH-benCHmark view 'q2'; choose one of q1, q18, q3, q5, q6$"):
        load_view("q2")


@pytest.mark.parametrize("query", QUERIES)
def test_the_page_says_what_the_parser_says_of_go_tpc_s_text(query):
    said, view = documented()[query]
    assert parser_says(original(query)) == said
    assert view == (f"{query}.sql" if (VIEWS_DIR / f"{query}.sql").exists() else "none")


# -- made-up rows --------------------------------------------------------------------------------
# Timestamps as PostgreSQL writes them, on and around the views' literals, and the amounts in
# quarters, whose sums are exact in any order.
TIMES = ["1996-12-31 23:59:59.999999", "1997-01-01 00:00:00", "2007-01-02 00:00:00", "2007-01-02 00:00:00.000001",
         "2007-01-02 00:00:00.5", "2015-06-01 12:30:00.25", "2029-12-31 23:59:59.99", "2030-01-01 00:00:00"]
STATES = ["ab", "a", "ba", "A1", "zz", "X1", "H2"]   # CHAR(2): PostgreSQL pads 'a' to 'a ', and reads it back as 'a'
# (X: nation 23, United Kingdom, whose supplier 7 of go-tpc's is; H: 7, Germany: Q5's Europe)


KEPT_BY_TRIGGER = {(table, column) for table, column, _ in JOIN_COLUMNS}


def row(relation: str, **values) -> tuple:
    """A row of `relation` with `values`, NULL elsewhere."""
    return tuple(values.get(c) for c in CATALOG.relation(relation).columns)


def made_up(seed: int) -> dict[str, list[tuple]]:
    """Two warehouses' worth of TPC-C rows that keep go-tpc's foreign keys (items: go-tpc's own,
    1 to 100,000; none made up, as no view reads them)."""
    rng = random.Random(seed)
    rows = {r.name: [] for r in CATALOG.relations}
    items = range(1, 8)
    rows["region"] = [row("region", r_regionkey=r, r_name=name) for r, name in enumerate(["AFRICA", "AMERICA", "ASIA",
                                                                                         "EUROPE", "MIDDLE EAST"])]
    rows["nation"] = [row("nation", n_nationkey=n, n_name=f"n{n}", n_regionkey=n % 5) for n in range(25)]
    rows["supplier"] = [row("supplier", s_suppkey=k, s_nationkey=rng.choice([7, 23, 0, 6])) for k in range(1, 15)]
    for w in (1, 2):
        rows["warehouse"].append(row("warehouse", w_id=w, w_name=f"w{w}"))
        rows["stock"] += [row("stock", s_i_id=i, s_w_id=w, s_quantity=rng.randint(10, 100),
                              s_su_suppkey=(w * i) % 10000) for i in items]   # as its trigger keeps it
        for d in (1, 2):
            rows["district"].append(row("district", d_id=d, d_w_id=w))
            order = 0
            for c in range(1, 5):
                state = rng.choice(STATES)
                rows["customer"].append(row("customer", c_id=c, c_d_id=d, c_w_id=w, c_state=state,
                                            c_last=rng.choice(["BAR", "OUGHT", "ABLE"]), c_nationkey=ord(state[0]) - 65))
                for _ in range(rng.randint(0, 3)):
                    order += 1
                    lines = rng.randint(1, 5)
                    rows["orders"].append(row("orders", o_id=order, o_d_id=d, o_w_id=w, o_c_id=c,
                                              o_entry_d=rng.choice(TIMES), o_carrier_id=rng.randint(1, 10),
                                              o_ol_cnt=lines, o_all_local=1))
                    if rng.random() < 0.5:
                        rows["new_order"].append(row("new_order", no_o_id=order, no_d_id=d, no_w_id=w))
                    rows["order_line"] += [
                        row("order_line", ol_o_id=order, ol_d_id=d, ol_w_id=w, ol_number=n, ol_i_id=rng.choice(items),
                            ol_supply_w_id=rng.choice((1, 2)), ol_delivery_d=rng.choice([*TIMES, None]),
                            ol_quantity=rng.randint(0, 12), ol_amount=rng.randint(0, 600) / 4)
                        for n in range(1, lines + 1)]
    # A British customer's order of item 7 at warehouse 1, whose supplier (go-tpc's 7) is British: Q5 has a row.
    rows["customer"].append(row("customer", c_id=9, c_d_id=1, c_w_id=1, c_state="X1", c_last="BAR", c_nationkey=23))
    rows["orders"].append(row("orders", o_id=99, o_d_id=1, o_w_id=1, o_c_id=9, o_entry_d=TIMES[-1], o_carrier_id=1,
                              o_ol_cnt=1, o_all_local=1))
    rows["order_line"].append(row("order_line", ol_o_id=99, ol_d_id=1, ol_w_id=1, ol_number=1, ol_i_id=7,
                                  ol_supply_w_id=1, ol_quantity=3, ol_amount=12.5))
    rows["supplier"][6] = row("supplier", s_suppkey=7, s_nationkey=23)
    return rows


def fedlab_rows(sql: str, rows: dict[str, list[tuple]]) -> dict[tuple, int]:
    """The view as fedlab computes it: its join folded as the simulator does (warehouse.core.recompute),
    and the user's rows kept from it (warehouse.core.aggregate_state), each value as the checker
    compares it."""
    view = parse_query(sql, CATALOG)
    computed = user_view(view, recompute(view.join, rows)).rows()
    out = Counter()
    for values, count in computed.items():
        out[tuple(comparable(v) for v in values)] += count
    return dict(out)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", view_names())
def test_a_view_holds_the_rows_the_oracle_gives_its_sql(name, seed):
    sql, rows = load_view(name), made_up(seed)
    assert fedlab_rows(sql, rows) == Oracle(CATALOG, sql, rows, {}).view_at({}), name


# -- go-tpc's database ---------------------------------------------------------------------------
@pytest.fixture(scope="session")
def go_tpc_database(postgres_dsn):
    """A database go-tpc prepared, with its foreign keys and no warehouse (its tables, the items,
    and supplier, nation and region): shared by the tests below."""
    require(GO_TPC)
    dsn = fresh_database(postgres_dsn, "ch_go_tpc")
    prepare(dsn, warehouses=0, foreign_keys=True)
    return dsn


def test_the_catalog_is_the_schema_go_tpc_creates_in_postgresql(go_tpc_database):
    with psycopg.connect(go_tpc_database) as con:
        tables = {name for name, in con.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")}   # not revenue1, go-tpc's view
        assert tables == {r.name for r in CATALOG.relations}
        for rel in CATALOG.relations:
            columns = con.execute("SELECT column_name, data_type FROM information_schema.columns "
                                  "WHERE table_name = %s ORDER BY ordinal_position", [rel.name]).fetchall()
            assert [(c, PG_TYPES[t]) for c, t in columns] == list(zip(rel.columns, rel.types)), rel.name
            key = [c for c, in con.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY (i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary "
                "ORDER BY array_position(i.indkey, a.attnum)", [rel.name])]
            assert tuple(key or rel.columns) == rel.key, rel.name   # history has none: keyed by every column
        foreign = con.execute(
            "SELECT c.conrelid::regclass::text, c.confrelid::regclass::text, "
            "array(SELECT attname FROM unnest(c.conkey) WITH ORDINALITY k(n, i) JOIN pg_attribute "
            "ON attrelid = c.conrelid AND attnum = n ORDER BY i), "
            "array(SELECT attname FROM unnest(c.confkey) WITH ORDINALITY k(n, i) JOIN pg_attribute "
            "ON attrelid = c.confrelid AND attnum = n ORDER BY i) "
            "FROM pg_constraint c WHERE c.contype = 'f'").fetchall()
    declared = {(ri.child, ri.parent, ri.columns, ri.parent_columns) for ri in CATALOG.ri}
    go_tpcs = {(child, parent, tuple(columns), tuple(parents)) for child, parent, columns, parents in foreign}
    assert declared == go_tpcs | {("nation", "region", ("n_regionkey",), ("r_regionkey",))}   # TPC-H's, beside go-tpc's


def test_the_rows_go_tpc_generated_are_read_in_catalog_order_and_types(go_tpc_database):
    rows = rows_of(go_tpc_database)
    assert {name: len(rows[name]) for name in GENERATED} == {"supplier": 10000, "nation": 25, "region": 5}
    for name in GENERATED:
        assert validate_rows(CATALOG.relation(name), rows[name], "go-tpc") == rows[name]
    assert rows["nation"][0][:3] == (0, "ALGERIA", 0)   # CHAR(25): without its blanks
    nations = {n[0] for n in rows["nation"]}
    assert {s[3] for s in rows["supplier"]} <= nations   # supplier -> nation holds across the two sources


@pytest.fixture
def made_up_in_postgres(go_tpc_database):
    """go-tpc's database with made_up(0) in TPC-C's relations, emptied again afterwards."""
    rows = made_up(0)
    # parents first, for go-tpc's foreign keys
    written = ("warehouse", "district", "customer", "history", "stock", "orders", "new_order", "order_line")
    with psycopg.connect(go_tpc_database) as con:
        for name in written:   # the join columns left to their triggers, which compute them
            rel = CATALOG.relation(name)
            given = [i for i, c in enumerate(rel.columns) if (name, c) not in KEPT_BY_TRIGGER]
            with con.cursor() as cur:
                cur.executemany(f"INSERT INTO {name} ({', '.join(rel.columns[i] for i in given)}) "
                                f"VALUES ({', '.join(['%s'] * len(given))})", [[r[i] for i in given] for r in rows[name]])
    yield go_tpc_database
    with psycopg.connect(go_tpc_database) as con:
        con.execute(f"TRUNCATE {', '.join(written)}")


@pytest.mark.parametrize("name", view_names())
def test_a_view_over_rows_read_from_postgres_holds_what_postgres_answers_go_tpc_s_query(name, made_up_in_postgres):
    """go-tpc's text, on its own schema's types (CHAR padding, TIMESTAMP, DECIMAL), against the
    view over the same rows read as the catalog reads them: the type mapping and each view's
    changes keep the query's rows."""
    sql = load_view(name)
    join = parse_query(sql, CATALOG).join
    view = fedlab_rows(sql, rows_of(made_up_in_postgres, tuple({join.base_of(r) for r in join.relations})))
    kept = READ_WITH.get(name, lambda _: True)
    with psycopg.connect(made_up_in_postgres, options="-c DateStyle=ISO") as con:
        con.adapters.register_loader("numeric", FloatLoader)
        con.adapters.register_loader("timestamp", TextLoader)   # PostgreSQL's text of it, as the catalog reads it
        # (a CHAR the query returns, Q5's n_name, without its padding: as the catalog reads it)
        answered = Counter(tuple(comparable(v.rstrip(" ") if isinstance(v, str) else v) for v in values)
                           for values in con.execute(original(name)))
    assert {r: c for r, c in view.items() if kept(r)} == dict(answered), name
    assert answered, name   # the made-up rows give the query something to answer
