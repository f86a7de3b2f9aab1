"""Access paths (Sze-Ling 4.1): join-graph sub-queries against the left/right scans."""

from __future__ import annotations

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.viewdef import parse_view
from fedlab.simulation.scenario import parse_scenario
from fedlab.simulation.simulate import simulate
from fedlab.warehouse.core.planner import plan

# Example 5's join graph as docs/paper-notes.md reconstructs it (Figure 1 is lost): R2, R3, R4 at
# source 1; R5, R6 at source 2; edges R1-R4, R2-R4, R3-R4, R4-R6, R1-R5.
EXAMPLE5 = {
    "sources": {
        "ds0": {"R1": {"columns": ["K1", "X4", "X5"], "types": ["BIGINT", "BIGINT", "BIGINT"], "key": ["K1"]}},
        "ds1": {"R2": {"columns": ["K2", "Y"], "types": ["BIGINT", "BIGINT"], "key": ["K2"]},
                "R3": {"columns": ["K3", "Z"], "types": ["BIGINT", "BIGINT"], "key": ["K3"]},
                "R4": {"columns": ["K4", "X4", "Y", "Z", "W"], "types": ["BIGINT", "BIGINT", "BIGINT", "BIGINT", "BIGINT"], "key": ["K4"]}},
        "ds2": {"R5": {"columns": ["K5", "X5"], "types": ["BIGINT", "BIGINT"], "key": ["K5"]},
                "R6": {"columns": ["K6", "W"], "types": ["BIGINT", "BIGINT"], "key": ["K6"]}},
    },
    "view": "SELECT R1.K1, R2.K2, R3.K3, R4.K4, R5.K5, R6.K6 FROM R1, R2, R3, R4, R5, R6 "
            "WHERE R1.X4 = R4.X4 AND R2.Y = R4.Y AND R3.Z = R4.Z AND R4.W = R6.W AND R1.X5 = R5.X5",
}


def example5_view():
    catalog = Catalog.from_dict({"sources": EXAMPLE5["sources"]})
    return parse_view(EXAMPLE5["view"], catalog)


def rounds(qplan) -> int:
    """Sequential round trips on the longest path: a node waits for its parent's node."""
    depth = {}
    for node in qplan.nodes:
        before = [r for r in (node.root.parent, node.root.waits_for) if r not in (None, qplan.updated)]
        depth[node.root.relation] = 1 + max((depth[qplan.node_of(r).root.relation] for r in before), default=0)
    return max(depth.values())


def test_example5_join_graph_sends_three_subqueries_in_two_rounds():
    qplan = plan(example5_view(), "R1", "join-graph")
    assert [(n.source, [r.relation for r in n.relations]) for n in qplan.nodes] == [
        ("ds1", ["R4", "R2", "R3"]), ("ds2", ["R5"]), ("ds2", ["R6"])]
    assert rounds(qplan) == 2


def test_example5_scans_send_five_subqueries_with_cartesian_products():
    qplan = plan(example5_view(), "R1", "scan")
    assert [n.relations[0].relation for n in qplan.nodes] == ["R2", "R3", "R4", "R5", "R6"]
    assert rounds(qplan) == 5
    unjoined = [n.root.relation for n in qplan.nodes if not n.root.columns]
    assert unjoined == ["R2", "R3"]  # R1-R2 and R2-R3: the two cartesian products the paper names
    assert [n.root.parent for n in qplan.nodes] == ["R1", "R2", "R3", "R1", "R4"]


def test_example5_simulated_insertion_counts_and_both_paths_agree():
    doc = dict(EXAMPLE5, initial={"R1": [], "R2": [[1, 1], [2, 1], [3, 8], [4, 8]], "R3": [[1, 5], [2, 6]],
                                   "R4": [[1, 7, 1, 5, 9]], "R5": [[1, 7], [2, 7]], "R6": [[1, 9]]},
               steps=[{"commit": {"source": "ds0", "id": "t1", "insert": {"R1": [[1, 7, 7]]}}}, {"run": "all"}])
    results = {access: simulate(parse_scenario(doc), access=access) for access in ("join-graph", "scan")}
    assert results["join-graph"]["counters"]["subqueries"] == 3
    assert results["scan"]["counters"]["subqueries"] == 5
    assert results["join-graph"]["view"] == results["scan"]["view"]
    assert len(results["join-graph"]["view"]) == 4   # 2 (R2) x 1 (R3) x 2 (R5) x 1 (R6)
    assert all(r["consistency"] == "complete" for r in results.values())
    assert results["join-graph"]["counters"]["rows_transferred"] < results["scan"]["counters"]["rows_transferred"]


# The Q5 shape: a key path customer -> orders -> lineitem -> supplier, and a many-to-many edge
# C.nk = S.nk that closes the cycle (customer and supplier of one nation).
CYCLE = {
    "sources": {
        "crm": {"C": {"columns": ["ck", "nk"], "types": ["BIGINT", "BIGINT"], "key": ["ck"]}},
        "ordering": {"O": {"columns": ["ok", "ck"], "types": ["BIGINT", "BIGINT"], "key": ["ok"]}},
        "fulfilment": {"L": {"columns": ["lk", "ok", "sk"], "types": ["BIGINT", "BIGINT", "BIGINT"], "key": ["lk"]},
                       "S": {"columns": ["sk", "nk"], "types": ["BIGINT", "BIGINT"], "key": ["sk"]}},
    },
    "view": "SELECT C.ck, O.ok, L.lk, S.sk FROM C, O, L, S "
            "WHERE C.ck = O.ck AND O.ok = L.ok AND L.sk = S.sk AND C.nk = S.nk",
}


def test_join_graph_follows_key_edges_before_a_many_to_many_edge():
    view = parse_view(CYCLE["view"], Catalog.from_dict({"sources": CYCLE["sources"]}))
    qplan = plan(view, "C", "join-graph")
    assert [(n.source, [(r.relation, r.parent) for r in n.relations]) for n in qplan.nodes] == [
        ("ordering", [("O", "C")]), ("fulfilment", [("L", "O"), ("S", "L")])]
    assert [(e.a, e.b) for e in qplan.non_tree_edges] == [("C", "S")]   # checked on the result


def test_customer_update_asks_for_its_orders_lineitems_not_its_nations():
    nation_lines = [[1000 + i, 10 + i % 2, 100 + i % 3] for i in range(12)]   # orders 10, 11 of customer 1
    doc = dict(CYCLE, initial={"C": [[1, 7]], "O": [[10, 1], [11, 1], [30, 3]], "S": [[100, 7], [101, 7], [102, 7]],
                               "L": nation_lines + [[2000, 30, 100]]},
               steps=[{"commit": {"source": "crm", "id": "t1", "insert": {"C": [[3, 7]]}}}, {"run": "all"}])
    results = {access: simulate(parse_scenario(doc), access=access) for access in ("join-graph", "scan")}
    assert results["join-graph"]["view"] == results["scan"]["view"]
    assert all(r["consistency"] == "complete" for r in results.values())
    # Customer 3's order 30 has one line: probes and answers carry a few rows (6), where a probe
    # through C.nk = S.nk brought every line of nation 7's suppliers (20 rows in all).
    assert results["join-graph"]["counters"]["rows_transferred"] < len(nation_lines)
