"""The timed simulator (loadgen.simulation.timed): a run is decided by its seed, and its steps,
written out with their times, replay in the untimed simulator to the same view states, which the
checker's oracle (DuckDB, no code shared with the maintenance path) finds completely consistent."""

from __future__ import annotations

from fedmodel.aggregate_view import parse_query
from loadgen.simulation.calibration import load
from loadgen.simulation.scenario import Scenario, parse_scenario
from loadgen.simulation.simulate import judge
from loadgen.simulation.simulator import Simulator
from loadgen.simulation.timed import TimedRun, TimedSettings, View
from loadgen.workloads.driver_process import SyntheticRecipe
from source_node.subscriptions import DEFAULT_SUBSCRIBER

# Every fault the sources inject, so that resends, gaps, retries and duplicates all happen.
FAULTS = {"notification_drop": 0.1, "notification_delay_mean": 0.05, "notification_duplicate": 0.05,
          "answer_drop": 0.05, "answer_duplicate": 0.05}


def timed_run(seed: int, algorithm: str = "sze-ling", keep_steps: bool = False) -> TimedRun:
    """A chain of three sources, 60 rows a relation, 40 txn/s for 3 s under FAULTS, settled."""
    recipe = SyntheticRecipe("chain", 3, 60, seed=1)
    federation, rows = recipe.federation, recipe.data()
    scenario = Scenario("chain", algorithm, federation.catalog, parse_query(federation.view_sql, federation.catalog),
                        rows, [])
    run = TimedRun(federation.catalog, rows, [View(DEFAULT_SUBSCRIBER, scenario)],
                   recipe.stream(federation.catalog, "mixed", seed),
                   TimedSettings(load(), seed=seed, faults=FAULTS), keep_steps=keep_steps, recording=keep_steps)
    run.offer(40, 3)
    run.run(3)
    assert run.settle(60), "the run did not settle within a minute of simulated time"
    return run


def test_a_timed_run_is_decided_by_its_seed():
    first, again, other = timed_run(5, keep_steps=True), timed_run(5, keep_steps=True), timed_run(6, keep_steps=True)
    steps = first.warehouses[DEFAULT_SUBSCRIBER].sim.run.steps
    assert steps == again.warehouses[DEFAULT_SUBSCRIBER].sim.run.steps
    assert first.figures() == again.figures()
    assert first.clock.now == again.clock.now
    # the seed decides: another draws other faults and another stream
    assert steps != other.warehouses[DEFAULT_SUBSCRIBER].sim.run.steps
    kinds = {next(k for k in step if k != "at") for step in steps}
    assert {"commit", "deliver", "drop", "duplicate", "tick"} <= kinds


def test_a_timed_runs_steps_replay_untimed_to_the_same_view_states():
    run = timed_run(7, keep_steps=True)
    timed = run.warehouses[DEFAULT_SUBSCRIBER].sim
    doc = run.replay(DEFAULT_SUBSCRIBER)
    assert all("at" in step for step in doc["steps"]) and len(doc["steps"]) > 300
    replayed = Simulator(parse_scenario(doc, "replay"))
    replayed.execute()
    assert len(timed.run.states) == 120   # every transaction reflected, durably
    assert replayed.run.states == timed.run.states
    assert replayed.final_view() == timed.final_view()
    assert judge(timed).level == "complete"
