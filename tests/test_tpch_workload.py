"""The TPC-H workload: catalog and views, data from tpchgen-cli, and update streams whose every
transaction the sources accept (MemoryStore enforces keys, FDs and same-source RI: the
independent check of the stream's own picture of the data)."""

from __future__ import annotations

import collections
import os
import random

import pytest

from fedlab.fedmodel.aggregate_view import parse_query
from fedlab.fedmodel.catalog import Catalog, FunctionalDependency, validate_row
from fedlab.fedmodel.errors import ModelError
from fedlab.loadgen.tpch import TABLES, TblRows, generate, load_view, sample_orders, tpch_catalog, view_names
from fedlab.loadgen.workload import STREAMS, Spilled, UpdateStream, Workload, zipf_rank
from fedlab.source_node.memory_store import MemoryStore

SF001_ROWS = {"region": 5, "nation": 25, "supplier": 100, "customer": 1500, "part": 2000,
              "partsupp": 8000, "orders": 15000}
EVERYWHERE = {"one": list(TABLES)}
SCATTERED = {"a": ["customer", "nation", "region"], "b": ["orders", "part", "partsupp"],
             "c": ["lineitem", "supplier"]}


@pytest.fixture(scope="module")
def tpch_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tpch-sf0.01"))


@pytest.fixture(scope="module")
def sf001(tpch_dir):
    """SF 0.01 generated once for the whole module."""
    return generate(0.01, tpch_dir)


@pytest.fixture(scope="module")
def small(sf001):
    """300 orders with their line items: MemoryStore checks RI by scanning, so keep commits cheap."""
    return sample_orders(sf001, 300)


def stores_for(catalog, data):
    return {s: MemoryStore(catalog, s, {r.name: data[r.name] for r in catalog.relations_at(s)})
            for s in catalog.sources}


def run(stream, stores, n):
    """Commits n transactions of the stream; returns (stream name, source, notification) each."""
    out = []
    for _ in range(n):
        source, request = stream.next()
        out.append((stream.last_stream, source, stores[source].commit(request)))
    return out


def changed_columns(relation, modification):
    return {c for c, a, b in zip(relation.columns, modification.old, modification.new) if a != b}


# -- catalog and views ---------------------------------------------------------------------------

def test_default_catalog_places_relations_and_declares_only_same_source_ri():
    cat = tpch_catalog()
    assert {r.name: r.source for r in cat.relations} == {
        "region": "reference", "nation": "reference", "supplier": "procurement", "customer": "sales",
        "part": "procurement", "partsupp": "procurement", "orders": "sales", "lineitem": "sales"}
    assert cat.relation("lineitem").key == ("l_orderkey", "l_linenumber")
    assert cat.relation("partsupp").key == ("ps_partkey", "ps_suppkey")
    assert cat.relation("orders").types[cat.relation("orders").index("o_orderdate")] == "DATE"
    assert cat.relation("lineitem").types[cat.relation("lineitem").index("l_extendedprice")] == "DOUBLE"
    assert {(ri.child, ri.parent) for ri in cat.ri} == {
        ("nation", "region"), ("partsupp", "part"), ("partsupp", "supplier"),
        ("orders", "customer"), ("lineitem", "orders")}


def test_placement_decides_which_foreign_keys_are_declared():
    assert len(tpch_catalog(EVERYWHERE).ri) == 10
    scattered = tpch_catalog(SCATTERED)
    assert {(ri.child, ri.parent) for ri in scattered.ri} == {
        ("nation", "region"), ("customer", "nation"), ("partsupp", "part"), ("lineitem", "supplier")}
    with pytest.raises(ModelError, match="no source holds"):
        tpch_catalog({"a": ["customer"]})
    with pytest.raises(ModelError, match="placed at both"):
        tpch_catalog({"a": list(TABLES), "b": ["orders"]})
    with pytest.raises(ModelError, match="not a TPC-H relation"):
        tpch_catalog({"a": [*TABLES, "widgets"]})


def test_every_view_parses_with_the_expected_shape():
    cat = tpch_catalog()
    assert {"q3", "q3_keys", "q5", "star", "demo4"} <= set(view_names())
    views = {name: parse_query(load_view(name), cat) for name in view_names()}
    assert views["q3"].has_count and not views["q3_keys"].has_count
    # TPC-H's own Q3 and Q5: aggregate views over the joins of q3 and q5 (fedmodel.aggregate_view)
    q3_revenue, q5_revenue = views["q3_revenue"], views["q5_revenue"]
    assert q3_revenue.output_names == ("l_orderkey", "revenue", "o_orderdate", "o_shippriority")
    assert q3_revenue.join.relations == views["q3"].relations and q3_revenue.output_types[1] == "DOUBLE"
    assert q5_revenue.output_names == ("n_name", "revenue") and q5_revenue.join.edges == views["q5"].edges
    assert views["q3"].selection_sql("customer") == "c_mktsegment = 'BUILDING'"
    # q3 spelled with a WITH query, a derived table and stars (fedmodel.rewrites) is q3
    q3, q3_with = views["q3"], views["q3_with"]
    assert (q3_with.relations, q3_with.edges, q3_with.output_names) == (q3.relations, q3.edges, q3.output_names)
    assert {r: q3_with.selection_sql(r) for r in q3.relations} == {r: q3.selection_sql(r) for r in q3.relations}
    q5 = views["q5"]
    assert len(q5.relations) == 6 and len(q5.edges) == 6  # one edge more than a tree: a cycle
    assert q5.edge("customer", "supplier") is not None
    assert views["star"].neighbours("lineitem") == ("orders", "part", "supplier")
    demo = views["demo4"]
    assert len(demo.relations) == 4 and demo.selections
    assert len({cat.relation(r).source for r in demo.relations}) >= 2


def test_unknown_view_names_the_choices():
    with pytest.raises(ValueError, match="q3_keys"):
        load_view("q99")


# -- generated data ------------------------------------------------------------------------------

@pytest.mark.slow
def test_generate_sf001_has_tpch_counts_types_and_unique_keys(sf001):
    cat = tpch_catalog()
    assert set(sf001) == set(TABLES)
    for name, count in SF001_ROWS.items():
        assert len(sf001[name]) == count, name
    assert 55_000 <= len(sf001["lineitem"]) <= 65_000
    for name, rows in sf001.items():
        rel = cat.relation(name)
        assert len({rel.key_of(r) for r in rows}) == len(rows), f"{name} repeats a key"
        for row in rows[:: max(1, len(rows) // 500)]:
            validate_row(rel, row, name)
    order = sf001["orders"][0]
    assert order[:2] == (1, 370) and order[4] == "1996-01-02"  # dbgen's first order
    assert sf001["lineitem"][0][5] == 24710.35


@pytest.mark.slow
def test_generate_reuses_the_cached_output(tpch_dir, sf001):
    path = os.path.join(tpch_dir, "lineitem.tbl")
    before = os.stat(path).st_mtime_ns
    assert generate(0.01, tpch_dir)["customer"] == sf001["customer"]
    assert os.stat(path).st_mtime_ns == before


@pytest.mark.slow
def test_sample_keeps_foreign_keys(small):
    orders = {r[0] for r in small["orders"]}
    assert len(orders) == 300 and all(r[0] in orders for r in small["lineitem"])


# -- update streams ------------------------------------------------------------------------------

@pytest.mark.slow
def test_stream_is_deterministic_per_seed(sf001):
    cat = tpch_catalog()

    def first(seed, n=300):
        stream = Workload.named("skewed").stream(cat, sf001, seed=seed)
        return [(source, req.to_dict()) for source, req in (stream.next() for _ in range(n))]

    a = first(7)
    assert a == first(7)
    assert a != first(8)
    ids = [req["txn_id"] for _, req in a]
    assert len(set(ids)) == len(ids)


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["mixed", "skewed", "rf"])
def test_preset_transactions_are_all_accepted(small, preset):
    cat = tpch_catalog()
    stores = stores_for(cat, small)
    stream = Workload.named(preset).stream(cat, small, seed=3)
    done = run(stream, stores, 2000)
    expected = set(Workload.named(preset).mix)
    assert {name for name, _, _ in done} == expected
    # the stream's picture is the sources' state (orders it never touched are read when asked for)
    assert stores["sales"].relations["orders"] == {(k,): stream._orders[k] for k in stream._order_pool.keys}


@pytest.mark.parametrize("orders", [0, 300], ids=["all orders", "300 orders"])
def test_a_stream_reading_the_tbl_files_on_demand_is_the_stream_over_the_rows_in_memory(sf001, tpch_dir, orders):
    """What the load driver reads (TblRows: an order and its line items when first picked) gives
    the same transactions as the rows in memory, so its figures hold for either."""
    cat = tpch_catalog(SCATTERED)
    data = sample_orders(sf001, orders) if orders else sf001
    lazy = Workload.named("skewed").stream(cat, TblRows(tpch_dir, orders), seed=4)
    eager = Workload.named("skewed").stream(cat, data, seed=4)
    assert [lazy.next() for _ in range(3000)] == [eager.next() for _ in range(3000)]
    assert len(lazy._orders) < len(data["orders"])   # only what the stream touched was read
    assert isinstance(lazy._orders._kept, Spilled)    # and is kept in a file: the driver's memory stays flat
    assert isinstance(lazy._customers, Spilled)       # so are the customers, which new_parent adds to


def test_tbl_rows_refuse_a_file_out_of_order_key_order(tmp_path, tpch_dir, sf001):
    for name in ("orders", "lineitem"):
        lines = open(os.path.join(tpch_dir, f"{name}.tbl")).readlines()[:40]
        if name == "orders":
            lines[10], lines[20] = lines[20], lines[10]
        (tmp_path / f"{name}.tbl").write_text("".join(lines))
    with pytest.raises(ModelError, match="orders.tbl is not in order-key order"):
        TblRows(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("placement", [EVERYWHERE, SCATTERED], ids=["one-source", "scattered"])
def test_streams_follow_the_placement(small, placement):
    cat = tpch_catalog(placement)
    stores = stores_for(cat, small)
    done = run(UpdateStream(cat, small, seed=5, zipf=0.8), stores, 400)
    for _, source, note in done:
        assert all(cat.relation(c.relation).source == source for c in note.changes)
    if placement is SCATTERED:  # an order and its lines commit at two sources, parent first
        sources = [(name, source) for name, source, _ in done if name == "new_order"]
        assert ("new_order", "b") in sources and ("new_order", "c") in sources


@pytest.mark.slow
@pytest.mark.parametrize("stream_name", STREAMS)
def test_each_stream_does_what_it_claims(small, stream_name):
    cat = tpch_catalog()
    stores = stores_for(cat, small)
    sales = stores["sales"].relations
    stream = UpdateStream(cat, small, {stream_name: 1.0}, seed=11)
    for name, source, note in run(stream, stores, 150):
        assert name == stream_name
        changes = {c.relation: c for c in note.changes}
        CLAIMS[stream_name](cat, changes, sales, stores)


def _new_order(cat, changes, sales, stores):
    (order,), lines = changes["orders"].inserted, changes["lineitem"].inserted
    assert set(changes) == {"orders", "lineitem"} and 1 <= len(lines) <= 7
    assert [(l[0], l[3]) for l in lines] == [(order[0], n) for n in range(1, len(lines) + 1)]
    assert (order[1],) in sales["customer"]
    supply = stores["procurement"].relations["partsupp"]
    assert all((l[1], l[2]) in supply for l in lines)


def _delete_order(cat, changes, sales, stores):
    (order,) = changes["orders"].deleted
    assert not changes["orders"].inserted and not changes["orders"].modified
    if "lineitem" in changes:
        assert {l[0] for l in changes["lineitem"].deleted} == {order[0]}
    assert not any(k[0] == order[0] for k in sales["lineitem"])


def _modified_only(cat, changes, relation, allowed):
    assert set(changes) == {relation}
    (m,) = changes[relation].modified
    cols = changed_columns(cat.relation(relation), m)
    assert cols in allowed, cols
    return m


def _modify_selection(cat, changes, sales, stores):
    relation = next(iter(changes))
    column = {"customer": "c_mktsegment", "orders": "o_orderpriority"}[relation]
    _modified_only(cat, changes, relation, [{column}])


def _modify_join(cat, changes, sales, stores):
    m = _modified_only(cat, changes, "orders", [{"o_custkey"}])
    assert (m.new[1],) in sales["customer"]


def _modify_other(cat, changes, sales, stores):
    relation = next(iter(changes))
    allowed = {"orders": [{"o_comment"}], "lineitem": [{"l_quantity", "l_extendedprice"}]}[relation]
    _modified_only(cat, changes, relation, allowed)


def _new_parent(cat, changes, sales, stores):
    (relation,) = changes
    assert relation in ("customer", "part")
    (row,) = changes[relation].inserted
    assert not changes[relation].deleted and not changes[relation].modified
    if relation == "customer":
        assert not any(o[1] == row[0] for o in sales["orders"].values())


CLAIMS = {"new_order": _new_order, "delete_order": _delete_order, "modify_selection": _modify_selection,
          "modify_join": _modify_join, "modify_other": _modify_other, "new_parent": _new_parent}


@pytest.mark.slow
def test_skew_concentrates_on_hot_orders(sf001):
    cat = tpch_catalog()

    def hot_share(zipf):
        stream = UpdateStream(cat, sf001, {"modify_join": 1.0}, seed=1, zipf=zipf)
        keys = collections.Counter(stream.next()[1].modifies["orders"][0].old[0] for _ in range(3000))
        return sum(n for _, n in keys.most_common(10)) / 3000

    assert hot_share(1.1) > 0.3 > 0.05 > hot_share(0.0)


def test_zipf_rank_matches_the_zipf_law():
    rng = random.Random(0)
    counts = collections.Counter(zipf_rank(rng, 8, 1.1) for _ in range(40_000))
    norm = sum(k ** -1.1 for k in range(1, 9))
    for k in range(1, 9):
        assert abs(counts[k] / 40_000 - k ** -1.1 / norm) < 0.01


@pytest.mark.slow
def test_bad_mix_and_unknown_workload_are_refused(small):
    cat = tpch_catalog()
    with pytest.raises(ValueError, match="new_order"):
        UpdateStream(cat, small, {"new_orders": 1.0})
    with pytest.raises(ValueError, match="positive"):
        UpdateStream(cat, small, {"new_order": 0.0})
    with pytest.raises(ValueError, match="rf, mixed, skewed"):
        Workload.named("chaotic")
    segment_fd = FunctionalDependency("customer", ("c_nationkey",), ("c_mktsegment",))
    with pytest.raises(ModelError, match="c_mktsegment"):
        UpdateStream(Catalog(cat.relations, (segment_fd,), cat.ri), small)

