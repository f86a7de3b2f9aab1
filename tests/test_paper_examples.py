"""The Sze-Ling paper's worked examples, replayed through the simulator (the same core as live).

Every run is also judged by the checker, whose DuckDB oracle recomputes the view independently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedlab.simulation.scenario import Step, load_scenario
from fedlab.simulation.simulate import simulate

SCENARIOS = Path(__file__).parent / "scenarios"


def run(name: str, algorithm: str | None = None, extra_steps: list[Step] = ()):
    scenario = load_scenario(SCENARIOS / name)
    scenario.steps.extend(extra_steps)
    return simulate(scenario, algorithm)


def compensations(result, computation: str, relation: str):
    return [e for e in result["trace"] if e["event"] == "compensate"
            and e["computation"] == computation and e["relation"] == relation]


def answer_rows(result, subquery: str):
    (entry,) = [e for e in result["trace"] if e["event"] == "answer" and e["subquery"] == subquery]
    return {r: (v["queried_version"], sorted(map(tuple, v["rows"]))) for r, v in entry["relations"].items()}


def test_example1_any_algorithm_is_right_without_interference():
    for algorithm in ("conventional", "sze-ling"):
        result = run("sze_ling_example1.yaml", algorithm)
        assert result["view"] == [["c1", 2]]
        assert result["consistency"] == "complete"


def test_example2_conventional_counts_the_interfering_insertion_twice():
    result = run("sze_ling_example2.yaml")
    assert result["expectations_met"]
    assert result["view"] == [["c1", 3]]
    assert result["consistency"] == "none"
    assert result["checker"]["first_violation"]["extra"] == [["c1", 1]]


def test_example2_sze_ling_undoes_the_interfering_insertion():
    result = run("sze_ling_example2.yaml", "sze-ling")
    assert result["view"] == [["c1", 2]]
    assert result["consistency"] == "complete"
    (step,) = compensations(result, "t1/R1", "R2")
    assert (step["kind"], step["queried_version"], step["initial_version"]) == ("interfering", 2, 1)
    assert step["before"] == [["b1", "c1"]] and step["after"] == []


def test_example4_conventional_never_reflects_the_lost_notification():
    result = run("sze_ling_example4.yaml")
    assert result["view"] == [["c1", 1]]
    assert result["consistency"] == "none"
    assert result["checker"]["lost"] == ["ds2:2"]


def test_example4_sze_ling_asks_for_the_lost_notification_and_recovers():
    result = run("sze_ling_example4.yaml", "sze-ling", [Step("run", {}, "test")])
    assert result["counters"]["resends"] >= 1
    assert result["view"] == [["c1", 2]]
    assert result["consistency"] == "complete"
    assert [s["transaction"] for s in result["states"]] == ["t1", "t2"]


def test_example6_reads_the_view_for_c1_and_queries_ds2_only_for_c2():
    result = run("sze_ling_examples_6_7.yaml")
    assert result["expectations_met"], result["failures"]
    first = [e for e in result["trace"] if e["event"] == "subquery"][0]
    assert (first["source"], first["relations"], first["probe"]) == ("ds2", ["R2", "R3"], [["c2"]])
    assert result["states"][0]["view"] == [["b1", "c1", "f1", 1], ["b2", "c2", "f2", 1], ["b3", "c1", "f1", 1]]


def test_example7_modification_queries_only_r2_and_updates_by_key():
    result = run("sze_ling_examples_6_7.yaml")
    queries = [e for e in result["trace"] if e["event"] == "subquery"]
    assert len(queries) == 2
    assert (queries[1]["relations"], queries[1]["probe"]) == (["R2"], [["e1"]])
    assert result["view"] == [["b1", "c1", "f2", 1], ["b2", "c2", "f2", 1], ["b3", "c1", "f2", 1]]
    assert result["consistency"] == "complete"


@pytest.fixture(scope="module")
def result():
    return run("sze_ling_examples_8_to_12.yaml")


class TestExamples8To12:
    def test_table1_query_result_of_the_forced_deletion(self, result):
        assert answer_rows(result, "q1") == {"R1": (2, [("a1", "b1", "c1"), ("a3", "b3", "c1")])}
        assert answer_rows(result, "q2") == {"R3": (2, [("e1", "f1", "g1")])}

    def test_table6_interfering_updates_undone_for_the_deletion(self, result):
        (r1,) = compensations(result, "t1/R2", "R1")
        assert (r1["kind"], r1["queried_version"], r1["initial_version"]) == ("interfering", 2, 1)
        assert r1["after"] == [["a1", "b1", "c1"]]
        (r3,) = compensations(result, "t1/R2", "R3")
        assert r3["after"] == [["e1", "f1", "g1"]]   # the interfering deletion of e2 does not join

    def test_table2_and_table4_view_read_and_missing_deletion(self, result):
        (view_read,) = [e for e in compensations(result, "t2/R1", "R2") if e["read_from"] == "view"]
        assert (view_read["queried_version"], view_read["initial_version"]) == (1, 2)
        assert view_read["before"] == [[{"C": "c1"}, {"F": "f1"}]]   # (c1,-,_e99) and (_e99,f1,-)
        assert view_read["after"] == []                               # Lemma 2: dropped
        assert answer_rows(result, "q3") == {"R2": (2, [("c2", "d2", "e2")]), "R3": (2, [])}

    def test_table5_interfering_deletion_re_added(self, result):
        (r3,) = [e for e in compensations(result, "t2/R1", "R3") if e["read_from"] == "source"]
        assert (r3["queried_version"], r3["initial_version"]) == (2, 1)
        assert r3["before"] == [] and r3["after"] == [["e2", "f2", "g2"]]

    def test_table3_no_compensation_for_the_last_deletion(self, result):
        assert answer_rows(result, "q4") == {"R2": (2, [("c2", "d2", "e2")])}
        assert compensations(result, "t3/R3/key", "R2") == []

    def test_example12_view_states(self, result):
        assert [(s["transaction"], s["view"]) for s in result["states"]] == [
            ("t1", []), ("t2", [["b2", "c2", "f2", 1]]), ("t3", [])]
        assert result["consistency"] == "complete"
        assert result["expectations_met"]


@pytest.mark.parametrize("path", sorted(SCENARIOS.rglob("*.yaml")), ids=lambda p: p.name)
def test_every_scenario_file_meets_its_expectations(path):
    result = simulate(load_scenario(path))
    assert result["expectations_met"], result["failures"]
