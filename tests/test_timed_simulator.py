"""The timed simulator (simulation.timed): a run is decided by its seed, and its steps,
written out with their times, replay in the untimed simulator to the same view states, which the
checker's oracle (DuckDB, no code shared with the maintenance path) finds completely consistent;
the steps it takes (their times, a timer round's parts) in a file; `fedlab predict`."""

from __future__ import annotations

import json
import math
import time

import pytest

from fedlab.fedmodel.aggregate_view import parse_query
from fedlab.fedmodel.errors import ModelError
from fedlab.cli import main
from fedlab.simulation.calibration import load
from fedlab.simulation.scenario import Scenario, ScenarioError, parse_scenario
from fedlab.simulation.simulate import judge
from fedlab.simulation.simulator import Simulator
from fedlab.simulation.timed import TimedRun, TimedSettings, View
from fedlab.loadgen.driver_process import SyntheticRecipe
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER

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
    # the dispatcher's rules (warehouse.dispatch_rules) act by steps too: a lost answer's sub-query goes again
    again = [step for step in doc["steps"] if "again" in step]
    rules = [d.rules for d in run.warehouses[DEFAULT_SUBSCRIBER].dispatchers.values()]
    assert again and len(again) <= sum(r.resent_lost for r in rules)
    replayed = Simulator(parse_scenario(doc, "replay"))
    replayed.execute()
    assert len(timed.run.states) == 120   # every transaction reflected, durably
    assert replayed.run.states == timed.run.states
    assert replayed.final_view() == timed.final_view()
    assert judge(timed).level == "complete"


def test_a_files_steps_keep_their_times_and_a_timer_rounds_parts(tmp_path):
    """A step's `at` is its time (never before the step before it); `tick: batch|resends|core`
    fire one part of a timer round each, at that time; `receive` is a notification reaching the
    warehouse's process before its core."""
    doc = {"name": "timed steps", "sources": {"ds1": {"R": {"columns": ["A", "B"], "key": ["A"]}},
                                              "ds2": {"S": {"columns": ["B", "C"], "key": ["B"]}}},
           "view": "SELECT A, C FROM R JOIN S ON R.B = S.B", "initial": {"R": [[1, 10]], "S": [[10, 100]]},
           "steps": [{"queries": "in-flight", "at": 0.0},
                     {"commit": {"source": "ds2", "id": "t1", "insert": {"S": [[20, 200]]}}, "at": 0.5},
                     {"commit": {"source": "ds1", "id": "t2", "insert": {"R": [[2, 20]]}}, "at": 0.7},
                     {"deliver": {"notification": "t2"}, "at": 1.0},
                     {"deliver": {"subquery": "q1"}, "at": 1.2},
                     {"deliver": {"answer": "q1"}, "at": 1.5},
                     {"tick": "batch", "at": 1.6},
                     {"tick": "resends", "at": 3.0},     # t1 was never delivered: its source sends it again
                     {"tick": "core", "at": 3.0}]}
    sim = Simulator(parse_scenario(doc, "timed"))
    sim.execute()
    assert sim.now == 3.0
    assert [s["transaction"] for s in sim.run.states] == []   # t2 waits for t1 (Theorem 2): nothing applied yet
    assert [m.name for m in sim.flight if m.kind == "notification"] == ["t1", "t1"]   # the first copy and its resend
    # t1 reached the warehouse's process (`receive`) but not its core: its source heard so, and
    # does not send it again; a `deliver` hands it over later
    received = {**doc, "steps": [*doc["steps"][:6], {"receive": {"notification": "t1"}, "at": 1.55}, *doc["steps"][6:],
                                 {"deliver": {"notification": "t1"}, "at": 3.5}, {"tick": "batch", "at": 3.5}]}
    sim = Simulator(parse_scenario(received, "timed"))
    sim.execute()
    assert [m.name for m in sim.flight if m.kind == "notification"] == []
    # t1 delivered: t2's answer, read past it, is compensated and applied; in flight, t1's own
    # sub-query and the request for t1 the core sent at 3.0 (its copy had reached only the process)
    assert [s["transaction"] for s in sim.run.states] == ["t2"]
    assert sorted(m.kind for m in sim.flight) == ["resend", "subquery"]
    doc["steps"].insert(4, {"tick": "core", "at": 0.9})
    with pytest.raises(ScenarioError, match=r"steps\[4\]: at 0.9 is before the simulated time 1"):
        Simulator(parse_scenario(doc, "timed")).execute()


def test_predict_writes_its_figures_summary_and_plots(tmp_path, capsys):
    """`fedlab predict` at a small grid: every point's figures, its summary and plots; a bad
    grid is one line and exit 2."""
    assert main(["predict", "--sources", "6", "--views", "2", "--rates", "60", "--networks", "lan,wan",
                 "--warmup", "0.5", "--duration", "1.5", "--check", "--out", str(tmp_path),
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [p["point"]["network"] for p in summary["points"]] == ["lan", "wan"]
    lan, wan = summary["points"]
    for p in (lan, wan):
        assert p["transactions"] > 50 and p["reflected"] > 0 and p["per_txn"]["bytes"] > 0
        assert 0 < p["utilisation"]["warehouse python"]["max"] < 1 and p["peak_memory_mb"] > 0
        jvm = p["utilisation"]["warehouse JVM"]["mean"]
        assert jvm > 0 and abs(p["jvm_cores_needed"] - 2 * jvm) <= 0.01   # the two views' JVMs, in all
        assert p["consistency"] == "complete"   # each view judged by the checker's oracle
    assert wan["staleness_ms"]["p50"] > 5 * lan["staleness_ms"]["p50"]   # round trips of 20-200 ms against 0.2-0.5
    assert (tmp_path / "summary.md").read_text().count("| sze-ling, 6 sources") == 2
    assert main(["predict", "--shapes", "ring"]) == 2
    assert capsys.readouterr().err.strip() == "fedlab predict: --shapes: unknown shape 'ring' (one of chain, star, random, mixed)"


def test_a_point_stops_at_its_memory_bound_and_says_so(tmp_path, capsys):
    """A point whose process passes --memory stops where its clock got to (as one past its
    budget does: an algorithm far behind holds ever more), and its row says why; a bound of
    nothing is one line and exit 2."""
    assert main(["predict", "--sources", "4", "--views", "1", "--rates", "50", "--memory", "1", "--out", str(tmp_path),
                 "--json"]) == 0
    [point] = json.loads(capsys.readouterr().out)["points"]
    assert point["stopped"].startswith("at 1 MB of memory, at ") and not point["sustained"]
    assert point["peak_memory_mb"] > 1
    assert "(stopped at 1 MB of memory, at " in (tmp_path / "summary.md").read_text()
    assert main(["predict", "--memory", "0"]) == 2
    assert capsys.readouterr().err.strip() == "fedlab predict: --memory: 0 MB leaves a point nothing (give megabytes above 0)"


def test_a_limit_stops_a_point_inside_one_long_action():
    """One action of a point can run for minutes and build gigabytes (SWEEP far behind joins an
    answer into its partial derivations): the budget's timer and the memory bound stop it there,
    not only between actions, and say which stopped it."""
    from fedlab.simulation.predict import Limits

    timed = Limits(time.monotonic(), budget=0.3, memory_mb=math.inf)
    assert not timed.within(lambda: time.sleep(30) or True)
    assert timed.reason == "after 0.3 s of run time"
    assert not timed.within(lambda: True)   # a later phase of a stopped point does not run
    sized = Limits(time.monotonic(), budget=math.inf, memory_mb=300)
    assert not sized.within(lambda: len(bytearray(2**31)) > 0)
    assert sized.reason == "at 300 MB of memory"
    assert Limits(time.monotonic(), budget=5, memory_mb=300).within(lambda: len(bytearray(2**20)) > 0)
    assert len(bytearray(2**31)) == 2**31   # the limit ends with the phase


def test_each_axis_of_the_sweeps_plot_holds_the_base_point():
    """The sweep runs the base point once, in its first axis; every axis's panel shows it
    beside that axis's own points, numbers in order."""
    from fedlab.simulation.prediction_report import _along

    def point(sweep, sources=100, views=100, network="wan"):
        return {"point": {"sources": sources, "views": views, "network": network, "sweep": sweep}}

    swept = [point("axis: sources", 10), point("axis: sources"), point("axis: sources", 1000),
             point("axis: views", views=1), point("axis: views", views=1000), point("axis: network", network="lan")]
    assert [p["point"]["views"] for p in _along(swept, "views")] == [1, 100, 1000]
    assert [p["point"]["network"] for p in _along(swept, "network")] == ["lan", "wan"]
    assert [p["point"]["sources"] for p in _along(swept, "sources")] == [10, 100, 1000]


def test_predict_runs_one_part_of_the_sweep(capsys):
    """--part picks the sweep's points of one part (here where the algorithms part: every
    built-in algorithm on one chain over 2, 4 and 8 sources, LAN and WAN); a part that does not
    exist, or grid options beside it, are one line and exit 2."""
    from argparse import Namespace

    from fedlab.simulation.predict import builtin_algorithms, grid

    none = dict.fromkeys(("sources", "views", "shapes", "rates", "networks", "losses", "algorithms"))
    points = grid(Namespace(part="algorithms part", **none))
    assert {(p.sources, p.width, p.views, p.shape, p.network) for p in points} == \
        {(w, w, 1, "chain", n) for w in (2, 4, 8) for n in ("lan", "wan")}
    assert len(points) == 6 * len(builtin_algorithms()) and {p.sweep for p in points} == {"algorithms part"}
    assert main(["predict", "--part", "largest", "--sources", "10"]) == 2
    assert "--part picks points of the sweep" in capsys.readouterr().err
    assert main(["predict", "--part", "smallest"]) == 2
    assert capsys.readouterr().err.strip().startswith("fedlab predict: --part: no part of the sweep is called 'smallest' "
                                                      "(one of axis: sources, ")


def test_the_nemesis_acts_in_the_timed_mode_and_its_run_still_replays():
    """A pause holds a source's commits and answers, a kill restarts it (a `restart` step), a
    partition loses what crosses it; the run still reflects every transaction, completely, and
    its steps replay to the same states."""
    from fedlab.nemesis.schedule import read

    recipe = SyntheticRecipe("chain", 3, 60, seed=1)
    federation, rows = recipe.federation, recipe.data()
    scenario = Scenario("chain", "sze-ling", federation.catalog, parse_query(federation.view_sql, federation.catalog),
                        rows, [])
    nemesis = read("pause s02 at 0.5s for 1s; kill s01 at 1s; partition warehouse|s03 at 2s for 0.5s",
                   ["s01", "s02", "s03"], 3, TimedRun.refusal)
    run = TimedRun(federation.catalog, rows, [View(DEFAULT_SUBSCRIBER, scenario)],
                   recipe.stream(federation.catalog, "mixed", 3),
                   TimedSettings(load(), seed=3, nemesis=tuple(nemesis)), keep_steps=True, recording=True)
    run.schedule_nemesis(0.0)
    run.offer(40, 3)
    run.run(3)
    assert run.settle(60)
    sim = run.warehouses[DEFAULT_SUBSCRIBER].sim
    assert {"source": "s01"} in [s["restart"] for s in sim.run.steps if "restart" in s]
    assert any("drop" in s for s in sim.run.steps)   # the partition lost what crossed it
    assert run.committed == 120 == len(sim.run.states)
    view = run.figures()["views"][DEFAULT_SUBSCRIBER]
    # s01 down for its restart: what was offered to it committed after the window
    assert view["reflected"] == view["transactions"] < 120
    # what s02 committed just before its pause was reflected only after it (its answers waited)
    assert view["staleness_ms"]["max"] >= 900
    assert judge(sim).level == "complete"
    replayed = Simulator(parse_scenario(run.replay(DEFAULT_SUBSCRIBER), "replay"))
    replayed.execute()
    assert replayed.run.states == sim.run.states
    assert TimedRun.refusal(read("clock s01 +5s at 1s", ["s01"], 3, lambda f: None)[0]) is not None


def test_the_timed_mode_refuses_whole_node_faults_in_one_line(capsys):
    """The model has processes on machines but no cluster nodes: `fedlab predict` refuses a
    node's crash, drain or partition before it runs anything, and a run handed one unchecked
    refuses it rather than leaving it out."""
    from fedlab.nemesis.schedule import parse

    assert main(["predict", "--sources", "6", "--nemesis", "crash node:warehouse at 1s"]) == 2
    assert capsys.readouterr().err.strip() == (
        "fedlab predict: --nemesis: 'crash node:warehouse at 1s': the timed simulator models processes on machines, "
        "not a cluster's nodes: whole-node faults (crash, restart, drain, partition node:N) need a cluster "
        "(nemesis.node)")
    for clause in ("partition node:s01 at 1s for 1s", "drain node:s02 at 1s for 2s"):
        assert "not a cluster's nodes" in TimedRun.refusal(parse(clause, ["s01", "s02"])[0])
    recipe = SyntheticRecipe("chain", 3, 60, seed=1)
    federation, rows = recipe.federation, recipe.data()
    scenario = Scenario("chain", "sze-ling", federation.catalog, parse_query(federation.view_sql, federation.catalog),
                        rows, [])
    run = TimedRun(federation.catalog, rows, [View(DEFAULT_SUBSCRIBER, scenario)],
                   recipe.stream(federation.catalog, "mixed", 3),
                   TimedSettings(load(), seed=3, nemesis=tuple(parse("partition node:s01 at 1s for 1s", ["s01"]))))
    with pytest.raises(ModelError, match=r"--nemesis: 'partition node:s01 at 1s for 1s': .* not a cluster's nodes"):
        run.schedule_nemesis(0.0)
