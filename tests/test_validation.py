"""`fedlab predict --against` (simulation.validation, prediction_report): how a prediction
is judged against a live run's figure, and a ramp that never saturated."""

from __future__ import annotations

from fedlab.simulation.prediction_report import markdown
from fedlab.simulation.validation import RAMP_FIGURE, _topped, met


def test_a_figure_is_met_within_its_target_and_unjudged_without_one():
    assert met({"measured": 100.0, "predicted": 120.0, "target": 0.25}) is True
    assert met({"measured": 100.0, "predicted": 130.0, "target": 0.25}) is False
    assert met({"measured": 100.0, "predicted": 130.0, "target": None}) is None
    assert met({"measured": None, "predicted": 130.0, "target": 0.25}) is None


def test_two_ramps_that_held_at_their_top_are_not_judged_and_are_marked():
    held, fell = [{"rate": 256, "sustained": True}, {"rate": 512, "sustained": True}], \
        [{"rate": 256, "sustained": True}, {"rate": 512, "sustained": False}]
    assert _topped(held) and not _topped(fell) and not _topped([]) and not _topped(None)
    both = {"measured": 512.0, "predicted": 512.0, "target": 0.25, "at_least": ["measured", "predicted"]}
    assert met(both) is None
    # one side saturated below the other's top: a real comparison
    assert met({**both, "predicted": 256.0, "at_least": ["measured"]}) is False
    summary = {"kind": "against", "started": "now", "seconds": 1, "calibration": {}, "bench": "b",
               "runs": [{"run": "sze-ling q3", "folder": "01", "figures": {RAMP_FIGURE: both}}]}
    row = next(line for line in markdown(summary).splitlines() if RAMP_FIGURE in line)
    assert "| >= 512 | >= 512 | 1.00 | ±25% |  |" in row


def test_a_live_run_is_simulated_until_its_load_is_reflected_as_the_bench_waits():
    from fedlab.simulation.calibration import load
    from fedlab.simulation.validation import simulate_run

    record = {"view": "chain-3", "algorithm": "sze-ling", "access_path": "join-graph", "seed": 1, "workload": "mixed",
              "faults": {}, "rate_target": 40.0, "synthetic": {"shape": "chain", "sources": 3, "rows_per_relation": 60}}
    settings = {"duration": 2.0, "ramp_rates": [], "ramp_step": 8.0, "settle": 30.0, "batch_interval": 1.0}
    predicted = simulate_run(record, settings, load())
    assert predicted["transactions"] == 80
    # every transaction of the load counts, those of its last second (not yet in Delta at its end) too
    assert predicted["reflected"] == predicted["staleness_delta_ms"]["n"] == 80
