"""The warehouse crashes and restarts from its durable store, in the simulator
(simulation.simulator): what a batch made durable survives (the view, its version state, the change
log, the notifications received), what was applied or received since is lost and done again, and
the run stays completely consistent, also when the crash falls between a batch's Delta commit and
the rest. Random schedules with warehouse crashes and source restarts, judged by the checker
against the oracle's recomputation; `fedlab soak` runs them by the thousand."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from scenario_support import seeds

from fedlab.cli import main
from fedlab.simulation.matrix import schedule
from fedlab.simulation.scenario import ScenarioError, parse_scenario
from fedlab.simulation.simulate import simulate

EXAMPLE = yaml.safe_load((Path(__file__).parent / "scenarios" / "sze_ling_example1.yaml").read_text())


def crash(mid_batch: bool, algorithm: str = "sze-ling") -> dict:
    """t1 is applied and made durable (a timer round); t2 is applied, not durable; the warehouse
    crashes (between t2's batch's parts with `mid_batch`, after its Delta commit)."""
    doc = {**EXAMPLE, "algorithm": algorithm, "expect": {"view": [["c1", 2]], "consistency": "complete"}, "steps": [
        {"commit": {"source": "ds2", "id": "t1", "insert": {"R2": [["b1", "c1"]]}}},
        {"deliver": {"notification": "t1"}},
        {"tick": "timers"},
        {"commit": {"source": "ds1", "id": "t2", "insert": {"R1": [["a2", "b1"]]}}},
        {"deliver": {"notification": "t2"}},
        {"restart": {"warehouse": "mid-batch" if mid_batch else True}},
        {"run": "all"}]}
    return simulate(parse_scenario(doc, "warehouse crash"))


@pytest.mark.parametrize("mid_batch", [False, True])
def test_the_warehouse_restarts_from_what_its_last_batch_made_durable(mid_batch):
    result = crash(mid_batch)
    assert result["expectations_met"], result["failures"]
    assert result["counters"]["warehouse_restarts"] == 1
    assert [s["transaction"] for s in result["states"]] == ["t1", "t2"]   # each once, in order
    trace = result["trace"]
    restart = next(i for i, e in enumerate(trace) if e["event"] == "restart")
    applied_after = [e["txn"] for e in trace[restart:] if e["event"] == "apply"]
    # Without the Delta commit t2 was lost with the process, and is maintained again from the
    # notification ds1 sends again; after it, t2's state is in the change log and not redone.
    assert applied_after == ([] if mid_batch else ["t2"])
    assert result["counters"].get("notification_resends", 0) >= (0 if mid_batch else 1)


@pytest.mark.parametrize("failure", ["refused", "stored"])
def test_a_failed_batch_commit_is_retried_or_counted_as_its_store_says(failure):
    """t1's batch commit fails: refused, it is taken again at the next round, with t2; stored (the
    reply lost), it counts as committed and t2 goes alone. Either way each state is durable once,
    and a crash after it loses neither."""
    doc = {**EXAMPLE, "algorithm": "sze-ling", "expect": {"view": [["c1", 2]], "consistency": "complete"}, "steps": [
        {"commit": {"source": "ds2", "id": "t1", "insert": {"R2": [["b1", "c1"]]}}},
        {"deliver": {"notification": "t1"}},
        {"fail_batch": failure},
        {"tick": "timers"},
        {"commit": {"source": "ds1", "id": "t2", "insert": {"R1": [["a2", "b1"]]}}},
        {"deliver": {"notification": "t2"}},
        {"tick": "timers"},
        {"restart": {"warehouse": True}},
        {"run": "all"}]}
    result = simulate(parse_scenario(doc, "failed batch"))
    assert result["expectations_met"], result["failures"]
    failed, = [e for e in result["trace"] if e["event"] == "batch-failed"]
    assert (failed["batch"], failed["counted_committed"]) == (1, failure == "stored")
    assert [s["transaction"] for s in result["states"]] == ["t1", "t2"]


def test_a_restart_step_names_the_warehouse_or_a_source():
    doc = {**EXAMPLE, "steps": [{"restart": {"warehouse": "later"}}]}
    with pytest.raises(ScenarioError, match=r"restart needs \{source: SOURCE\} naming a known source, or "
                                            r"\{warehouse: true\} \(or mid-batch\)"):
        parse_scenario(doc, "bad restart")


def test_the_strobe_family_cannot_restart_and_says_so():
    with pytest.raises(ScenarioError, match=r"restart: strobe cannot restart from the durable store \(its key-widened view"):
        crash(False, "strobe")
    assert main(["matrix", "--algorithms", "strobe", "--conditions", "warehouse-restart", "--schedules", "1"]) == 2


@pytest.mark.parametrize("algorithm, claim", [("sze-ling", "complete"), ("versioned", "complete"), ("lazy", "strong"),
                                             ("salem", "complete")])
def test_random_schedules_with_warehouse_crashes_keep_the_algorithms_level(algorithm, claim):
    crashes, failures, federations = 0, 0, seeds(40)
    for seed in federations:
        result = simulate(parse_scenario(schedule(algorithm, "everything", seed), f"{algorithm} seed {seed}"))
        checker = result["checker"]
        assert result["consistency"] in (claim, "complete") and not checker["lost"] and not checker["doubled"], \
            (seed, result["consistency"], checker["anomalies"][:2])
        crashes += result["counters"].get("warehouse_restarts", 0)
        failures += result["counters"].get("batch_failures", 0)
    assert crashes >= len(federations) and failures >= len(federations) / 2   # about two and one a schedule


@pytest.mark.slow   # counterexamples shrunk with hundreds of replays
def test_soak_prints_the_count_the_time_and_the_verdict_per_condition(tmp_path, capsys):
    assert main(["soak", "--schedules", "16", "--jobs", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "fedlab soak: sze-ling, 2 schedules under each of 8 conditions (16 in all), 1 workers; it claims complete"
    rows = [line.split() for line in out[1:-1]]
    assert [r[0] for r in rows] == ["fifo", "reordering", "loss", "duplication", "restart", "all",
                                    "warehouse-restart", "everything"]
    assert all(r[1] == "2" and r[2] == "schedules" and float(r[3]) >= 0 and r[5] == "complete" for r in rows)
    assert out[-1].startswith("16 schedules in ") and out[-1].endswith("complete under every condition")


@pytest.mark.slow   # counterexamples shrunk with hundreds of replays
def test_soak_runs_an_algorithm_that_cannot_restart_without_crashes_and_excuses_broken_assumptions(tmp_path, capsys):
    assert main(["soak", "--algorithm", "sweep", "--schedules", "12", "--jobs", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("it claims complete; it cannot restart: no warehouse crashes")
    rows = {line.split()[0]: line for line in out[1:-1]}
    assert list(rows) == ["fifo", "reordering", "loss", "duplication", "restart", "all"]
    assert rows["fifo"].endswith("complete")
    assert rows["reordering"].endswith("(breaks fifo)")   # below its claim, excused: FIFO is assumed


def test_a_durable_notification_whose_task_was_lost_is_maintained_after_the_restart():
    """t1 is durable and acknowledged (its source will not send it again), but its task waited for
    a sub-query when the warehouse crashed: the restarted warehouse takes it from its store."""
    doc = {**EXAMPLE, "algorithm": "sze-ling", "expect": {"view": [["c1", 1]], "consistency": "complete"}, "steps": [
        {"hold": {"queries_to": "ds1"}},
        {"commit": {"source": "ds2", "id": "t1", "insert": {"R2": [["b1", "c1"]]}}},
        {"deliver": {"notification": "t1"}},
        {"tick": "timers"},
        {"restart": {"warehouse": True}},
        {"release": {"queries_to": "ds1"}},
        {"run": "all"}]}
    result = simulate(parse_scenario(doc, "durable, not applied"))
    assert result["expectations_met"], result["failures"]
    assert result["counters"].get("notification_resends", 0) == 0 and [s["transaction"] for s in result["states"]] == ["t1"]


def test_a_fail_batch_step_says_how_the_commit_fails():
    with pytest.raises(ScenarioError, match="fail_batch takes refused or stored"):
        parse_scenario({**EXAMPLE, "steps": [{"fail_batch": "lost"}]}, "bad fail_batch")
