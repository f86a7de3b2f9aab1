"""The dispatcher's rules (warehouse.dispatch_rules) in the simulator's own steps, so that the
timed simulator drives the rules the live dispatcher keeps: `again` sends a sub-query again whose
answer its reply lacked, `narrow` asks a resend request in flight only for what has still not
arrived. Each run is judged against the oracle's recomputation (simulate's consistency level)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedlab.simulation.scenario import ScenarioError, parse_scenario
from fedlab.simulation.simulate import simulate
from fedlab.simulation.simulator import Simulator
from fedlab.warehouse.dispatch_rules import DispatchRules

EXAMPLE = yaml.safe_load((Path(__file__).parent / "scenarios" / "sze_ling_example1.yaml").read_text())
# R1(A, B) at ds1, R2(B, C) at ds2, V = C of R1 join R2 with a count; R2 holds (b1, c1) from the start.
INITIAL = {"R1": [["a1", "b1"]], "R2": [["b1", "c1"]]}


def scenario(steps: list, view: list) -> dict:
    return {**EXAMPLE, "algorithm": "sze-ling", "initial": INITIAL,
            "expect": {"view": view, "consistency": "complete"}, "steps": steps}


LOST_ANSWER = [
    {"queries": "in-flight"},
    {"commit": {"source": "ds1", "id": "t1", "insert": {"R1": [["a2", "b1"]]}}},
    {"deliver": {"notification": "t1"}},   # the core asks ds2 for R2's b1 rows: q1
    {"deliver": {"subquery": "q1"}},
    {"drop": {"answer": "q1"}}]


def test_again_sends_a_sub_query_whose_answer_was_lost_before_the_cores_timer_would():
    result = simulate(parse_scenario(scenario(LOST_ANSWER + [
        {"again": {"subquery": "q1"}},
        {"deliver": {"subquery": "q1"}},
        {"deliver": {"answer": "q1"}},
        {"expect_view": [["c1", 2]]},   # no timer round has passed: the copy answered it
        {"run": "all"}], [["c1", 2]]), "again"))
    assert result["expectations_met"], result["failures"]
    assert result["consistency"] == "complete"
    assert result["counters"]["subqueries"] == 2 and result["counters"]["algorithm_retries"] == 0
    assert [e["event"] for e in result["trace"] if e["event"].startswith("subquery")] == ["subquery", "subquery-again"]
    # without it, nothing of q1 is in flight any more
    with pytest.raises(ScenarioError, match="sub-query q1 is not in flight"):
        simulate(parse_scenario(scenario(LOST_ANSWER + [{"deliver": {"subquery": "q1"}}], [["c1", 2]]), "no again"))


def test_narrow_asks_a_resend_request_only_for_what_has_still_not_arrived():
    gap = [
        {"queries": "in-flight"},
        *({"commit": {"source": "ds1", "id": t, "insert": {"R1": [[a, "b1"]]}}} for t, a in
          (("t1", "a2"), ("t2", "a3"), ("t3", "a4"))),
        {"drop": {"notification": "t1"}},
        {"drop": {"notification": "t2"}},
        {"deliver": {"notification": "t3"}},
        {"tick": "core"},                      # the core asks ds1 for DSVs 2-3 (t1, t2)
        {"narrow": {"resend": "ds1", "from": [2, 3], "to": [3, 3]}},
        {"deliver": {"resend": "ds1"}}]
    sim = Simulator(parse_scenario(scenario(gap, [["c1", 4]]), "narrow"))
    sim.execute()
    assert [(m.kind, m.name) for m in sim.flight] == [("notification", "t2")]   # t1 not asked for
    narrowed, = [e for e in sim.run.trace if e["event"] == "resend-narrowed"]
    assert (narrowed["from"], narrowed["to"]) == ([2, 3], [3, 3])
    result = simulate(parse_scenario(scenario(gap + [{"run": "all"}], [["c1", 4]]), "narrow, then all"))
    assert result["expectations_met"], result["failures"]
    assert result["consistency"] == "complete"


@pytest.mark.parametrize("step, says", [
    ({"again": {"subquery": 1}}, r"again names a sub-query sent before: \{subquery: ID\}"),
    ({"narrow": {"resend": "ds9", "from": [1, 2], "to": [2, 2]}}, "narrow needs .* naming a known source"),
    ({"narrow": {"resend": "ds1", "from": [1], "to": [2, 2]}}, r"span is \[FROM DSV, THROUGH DSV or null\], got \[1\]"),
])
def test_a_bad_again_or_narrow_step_is_one_line_naming_it(step, says):
    with pytest.raises(ScenarioError, match=says):
        parse_scenario(scenario([step], []), "bad step")


def test_steps_for_what_is_not_in_flight_are_refused():
    with pytest.raises(ScenarioError, match="sub-query q7 was not sent"):
        simulate(parse_scenario(scenario([{"again": {"subquery": "q7"}}], []), "again, unsent"))
    with pytest.raises(ScenarioError, match=r"no resend request to ds1 for \[2, 3\] is in flight"):
        simulate(parse_scenario(scenario([{"narrow": {"resend": "ds1", "from": [2, 3], "to": [3, 3]}}], []),
                                "narrow, none"))


def test_a_lost_answer_goes_again_once_and_an_answered_copy_stays_home():
    rules = DispatchRules()
    assert rules.subqueries_to_send(["q1", "q2"]) == ["q1", "q2"]
    assert rules.round_trip_over(["q1", "q2"], answered={"q1"}) == ["q2"]
    assert rules.subqueries_to_send(["q2"]) == ["q2"]
    assert rules.round_trip_over(["q2"], answered=set()) == []   # lost twice: the core's timer
    assert rules.subqueries_to_send(["q2"]) == ["q2"]            # the core's retry goes
    assert rules.round_trip_over(["q2"], answered=None) == []    # no reply at all: the timer
    rules.replied({"q3"})
    assert rules.subqueries_to_send(["q3"]) == []
    assert (rules.withheld, rules.resent_lost) == (1, 1)
