"""The efficiency targets (bench.efficiency) judged on bench records: met, missed with the
shortfall and what the CPU went to, or not measured with what the bench needs to measure it."""

from __future__ import annotations

from fedlab.bench.chaos_floor import staleness_floor
from fedlab.bench.efficiency import DEFAULT_FAULTS, evaluate, steadiness
from fedlab.bench.profile import JVM_BATCH_CPU


def run(rate, chaos="none", **figures):
    record = {"algorithm": "sze-ling", "access_path": "join-graph", "label": "sze-ling", "view": "q3", "scale": 0.1,
              "rate_target": rate, "chaos": chaos, "consistency": "complete", "committed_in_load": 2000,
              "cpu": [{"phase": "load", "busy": 0.5, "by_role": {"warehouse (python)": 6.0, "spark JVM": 2.0}}],
              "staleness_ms": {"p50": 5.0, "p99": 400.0}, "staleness_delta_ms": {"p50": 250.0, "p99": 1200.0},
              "staleness_parts": {"parts_ms": {"delivery": {"p50": 3.0, "p99": 50.0},
                                               "to Delta": {"p50": 240.0, "p99": 1100.0}}}}
    return {**record, **figures}


def by_name(targets):
    return {t["name"]: t for t in targets}


def test_each_target_is_judged_on_the_run_that_fits_it():
    quiet = run(100.0, idle={"seconds": 30.0, "share_of_a_core": 0.078, "by_role": {"ray and helpers": 0.8, "source a": 0.3}},
                profile={"parts": {JVM_BATCH_CPU: {"calls": 79, "mean_ms": 54.4},
                                   "Delta batch commit": {"calls": 79, "p50_ms": 76.6}}})
    loaded = run(500.0, DEFAULT_FAULTS, cpu=[{"phase": "load", "busy": 0.9, "by_role": {"warehouse (python)": 3.0}}],
                 committed_in_load=7500)
    targets = by_name(evaluate([quiet, loaded]))
    idle = targets["idle federation, every process"]
    assert (idle["met"], idle["shortfall"]) == (False, "1.6x the target") and "ray and helpers 73%" in idle["what_dominates"]
    assert targets["JVM CPU per Delta batch (mean)"]["met"] is True
    assert targets["Delta batch commit (p50)"]["met"] is True
    cpu100 = targets["CPU per committed transaction at 100 txn/s, every process"]
    assert cpu100["measured"].startswith("4 ms (no faults") and cpu100["shortfall"] == "2.0x the target"
    assert "warehouse (python) 75%" in cpu100["what_dominates"]
    assert targets["CPU per committed transaction at 500 txn/s, every process"]["measured"].startswith("0.4 ms")
    assert targets["staleness p50 to Delta at 100 txn/s without faults"]["met"] is True
    p99 = targets["staleness p99 to Delta at 100 txn/s without faults"]
    assert p99["met"] is False and "to Delta 1100 ms" in p99["what_dominates"]
    # the 500 txn/s run had faults: judged; no 100 txn/s run had them: what to run says so
    assert targets["staleness p99 to Delta at 500 txn/s with 5% of notifications lost and each delayed 0.1 s on average"]["met"] is True
    faulty100 = targets["staleness p99 to the core's view at 100 txn/s with 5% of notifications lost and each delayed 0.1 s on average"]
    assert faulty100["met"] is None and "--chaos" in faulty100["measured"]


def test_a_bench_without_the_figures_says_what_it_needs():
    targets = by_name(evaluate([run(50.0)]))
    assert targets["idle federation, every process"]["measured"] == "not measured (--idle 0)"
    assert targets["CPU per committed transaction at 500 txn/s, every process"]["measured"] == \
        "needs a run offering 500 txn/s (--rate 500)"
    assert all(t["met"] is None for t in targets.values())
    assert evaluate([{**run(100.0), "algorithm": "lazy"}])[0]["met"] is None   # only Sze-Ling's runs count


def test_steadiness_counts_the_trials_whose_ramp_ended_at_the_same_step():
    ramp = [{"rate": 256.0, "sustained": True}]
    trials = [run(500.0, DEFAULT_FAULTS, ramp=ramp, max_sustained_rate=r) for r in (512, 512, 1024, 512, 512)]
    steady, = steadiness(trials)
    assert steady["met"] is True and steady["measured"].startswith("4 of 5 ended at 512")
    unsteady, = steadiness(trials[:3] + [run(500.0, DEFAULT_FAULTS, ramp=ramp, max_sustained_rate=256)] * 2)
    assert (unsteady["met"], unsteady["shortfall"]) == (False, "2 trials short")
    assert steadiness(trials[:2])[0]["measured"] == "needs --repeat 5 with a ramp (2 trials here)"


def test_staleness_under_faults_is_judged_beside_the_floor_the_faults_alone_force():
    """The floor (bench.chaos_floor) is played at each source's share of the commits;
    a target below it is out of reach, which the shortfall says."""
    commits = {"commit at a": {"calls": 900, "transactions": 1800}, "commit at b": {"calls": 200}}
    faulty = run(100.0, DEFAULT_FAULTS, rate_achieved=100.0, staleness_ms={"p50": 300.0, "p99": 650.0},
                 faults={"notification_drop": 0.05, "notification_delay_mean": 0.1}, profile={"parts": commits})
    name = "staleness p99 to the core's view at 100 txn/s with 5% of notifications lost and each delayed 0.1 s on average"
    judged = by_name(evaluate([faulty]))[name]
    floor = staleness_floor({"a": 90.0, "b": 10.0}, drop=0.05, delay_mean=0.1)["p99"]
    assert judged["met"] is False and f"the faults alone force {floor:g} ms" in judged["measured"]
    assert "out of reach" not in judged["shortfall"]   # the floor (about 0.4 s) is under the 0.5 s target
    slow = {**faulty, "faults": {"notification_drop": 0.05, "notification_delay_mean": 0.3}}
    high = staleness_floor({"a": 90.0, "b": 10.0}, drop=0.05, delay_mean=0.3)["p99"]
    assert high > 500 and by_name(evaluate([slow]))[name]["shortfall"].endswith(f"which alone force {high:g} ms")


def test_the_floor_is_played_under_the_reorder_allowance_the_run_recorded():
    """A run with --reorder-allowance is judged beside the floor its own allowance forces; a record
    from before the flag, under the network's default."""
    commits = {"commit at a": {"calls": 1000}}
    name = "staleness p99 to the core's view at 100 txn/s with 5% of notifications lost and each delayed 0.1 s on average"
    faulty = run(100.0, DEFAULT_FAULTS, rate_achieved=100.0, staleness_ms={"p50": 300.0, "p99": 650.0},
                 faults={"notification_drop": 0.05, "notification_delay_mean": 0.1}, profile={"parts": commits})
    default = staleness_floor({"a": 100.0}, drop=0.05, delay_mean=0.1)["p99"]
    patient = staleness_floor({"a": 100.0}, drop=0.05, delay_mean=0.1, allowance=0.4)["p99"]
    assert patient > default
    assert f"force {default:g} ms" in by_name(evaluate([faulty]))[name]["measured"]
    waiting = {**faulty, "reorder_allowance": 0.4}
    assert f"force {patient:g} ms" in by_name(evaluate([waiting]))[name]["measured"]
