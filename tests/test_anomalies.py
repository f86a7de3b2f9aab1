"""The checker names what fell short (checker.anomalies): on random
federations and fault schedules, every run below complete consistency names at least one anomaly
of the documented kinds and a complete one names none; `fedlab simulate` lists what happened to
the transactions involved (their notifications, sub-queries, answers, compensation steps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedlab.checker import anomalies
from fedlab.checker.explain import render, simulated_happenings
from fedlab.checker.levels import Verdict
from fedlab.simulation.matrix import schedule
from fedlab.simulation.scenario import load_scenario, parse_scenario
from fedlab.simulation.simulate import _describe, simulate

KINDS = {line.split("`")[1] for line in anomalies.__doc__.splitlines() if line.startswith("- `")}


@pytest.mark.parametrize("algorithm", ["conventional", "strobe", "c-strobe", "lazy", "sze-ling"])
def test_every_run_below_complete_names_an_anomaly_and_a_complete_one_none(algorithm):
    levels = set()
    for seed in range(12):
        doc = schedule(algorithm, "all", seed, steps=40)
        result = simulate(parse_scenario(doc, f"{algorithm} seed {seed}"))
        named = result["checker"]["anomalies"]
        levels.add(result["consistency"])
        assert bool(named) == (result["consistency"] != "complete"), (seed, result["consistency"], named)
        assert {a["anomaly"] for a in named} <= KINDS
    if algorithm in ("conventional", "lazy"):
        assert levels - {"complete"}, f"{algorithm}: every schedule complete, nothing was named"


def test_simulate_explains_a_counterexample_with_what_happened_to_its_transactions():
    scenario = load_scenario(Path(__file__).parent / "scenarios" / "strobe_example1_conventional.yaml")
    result = simulate(scenario)
    lines = render(Verdict(**result["checker"]), simulated_happenings(result["trace"], _describe))
    assert lines[0].startswith("anomaly wrong-state: state 1 (after transaction U1)")
    at = lines.index("what happened to transaction y:2:")
    told = lines[at + 1:]
    assert told[0].endswith("commit U1 at y (DSV 2)") and any(" sub-query q1 -> x r1" in x for x in told)
    assert any(" answer q1 <- x" in x for x in told) and any(" apply U1 " in x for x in told)


def test_a_state_that_shows_part_of_a_multi_relation_transaction_is_named():
    """Conventional maintenance applies a source transaction's relations one by one: in this
    schedule a state shows ds3's third transaction's change to R2 without its change to R1."""
    result = simulate(parse_scenario(schedule("conventional", "reordering", 27), "conventional seed 27"))
    part = [a for a in result["checker"]["anomalies"] if a["anomaly"] == "intermediate-state"]
    assert [(a["state"], a["transactions"]) for a in part] == [(8, ["ds3:3"])]
    assert part[0]["says"].endswith("shows transaction ds3:3 in part: its changes to R2 without those to R1")
