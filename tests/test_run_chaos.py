"""`fedlab run` end to end: three views over a live TPC-H federation in two warehouses (the first
keeping two of them from one subscription, the second the third by another algorithm), under
message faults, a source actor frozen for seconds from outside (SIGSTOP, nemesis), a source
actor killed (Ray restarts it) and the first warehouse crashed and restarted from Delta mid-run;
the checker's verdict on each view must be complete, with nothing lost or applied twice, and what
each fault did is reported and plotted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.ray
def test_run_with_chaos_and_restarts_stays_completely_consistent(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "fedlab.cli", "run", "--duration", "10s", "--rate", "8", "--json",
         "--chaos", "drop=0.05,reorder=0.1,duplicate=0.02,sales:answer_drop=0.2,kill-source=once,kill-warehouse=once",
         "--nemesis", "pause sales at 1s for 3s", "--view", "demo4", "--view", "q3:versioned", "--view", "q5", "--warehouses", "2",
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert list(result["views"]) == ["demo4", "q3", "q5"] and result["caught_up"]
    for view, verdict in result["views"].items():
        assert verdict["level"] == "complete", view
        assert verdict["lost"] == [] and verdict["doubled"] == []
        assert verdict["transactions"] == result["committed"] == verdict["states"] > 0
    assert (tmp_path / "run" / "q3" / "history" / "changes.jsonl").exists()
    from fedlab.live.runfile import RunFile

    run = RunFile.read(tmp_path / "run")   # demo4 and q5 in the first warehouse, q3 in the second
    assert [(run.of(v).subscriber, run.of(v).algorithm) for v in ("q3", "q5")] == [("warehouse-2", "versioned"),
                                                                                 ("warehouse", "sze-ling")]
    faults = result["process_faults"]
    assert [f.split(" (pid")[0] for f in faults[:2]] == ["paused source sales", "resumed source sales"], faults
    assert len(faults) == 4 and faults[2].startswith("killed source ") and faults[3].startswith("restarted the warehouse")
    # each fault's phase of the load, and the staleness of what was committed in it
    verdict = result["views"]["demo4"]
    phases = verdict["fault_phases"]
    assert [p["phase"].split()[0] for p in phases] == ["before", "pause", "kill", "kill"], phases
    assert sum(p["committed"] for p in phases) == result["committed"]
    assert phases[1]["window_s"] >= 3 and phases[1]["staleness_ms"]["max"] > 0
    # and their figure: staleness and throughput with each fault's window shaded, one per view
    plot = (tmp_path / "run" / "plots" / "faults.png").resolve()   # run_dir as the run resolved it
    assert verdict["fault_plot"] == str(plot) and plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result["views"]["q3"]["fault_plot"] == str(plot.with_name("faults-q3.png"))
    assert json.loads((tmp_path / "run" / "verdict.json").read_text())["views"]["demo4"]["fault_plot"] == str(plot)


def test_bad_chaos_spec_is_one_line_and_exit_two():
    out = subprocess.run([sys.executable, "-m", "fedlab.cli", "run", "--chaos", "drop=lots"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stdout.strip() == "fedlab run: --chaos: drop must be a number, got 'lots'"


@pytest.mark.parametrize("argv, message", [
    (["--algorithm", "strobe", "--chaos", "kill-warehouse=once"],
     "fedlab run: --chaos kill-warehouse: strobe cannot restart from Delta"),
    (["--chaos", "nowhere:drop=0.1"],
     "fedlab run: --chaos: nowhere:drop=0.1: no source named 'nowhere' (sources: procurement, reference, sales)"),
    (["--algorithm", "recompute", "--recompute-period", "0"],
     "fedlab run: --recompute-period must be a positive number of seconds, got 0.0"),
    (["--batch-interval", "-1"],
     "fedlab run: --batch-interval must be a positive number of seconds, got -1.0"),
    (["--reorder-allowance", "inf"],
     "fedlab run: --reorder-allowance must be a finite number of seconds >= 0, got inf"),
    (["--algorithm", "lazy", "--max-delay", "-1"],
     "fedlab run: --max-delay must be a number of seconds >= 0, got -1.0"),
    (["--chaos", "sales:answer_drop=1.5"],
     "fedlab run: --chaos: answer_drop is a probability between 0 and 1, got 1.5"),
    (["--duration", "soon"],
     "fedlab run: --duration: bad duration 'soon': use e.g. 500ms, 20s, 2m, 1h"),
    (["--nemesis", "partition warehouse|sales at 1s for 2s"],
     "fedlab run: --nemesis: 'partition warehouse|sales at 1s for 2s': a local run's processes share one network "
     "namespace, where a partition cannot tell them apart"),
    (["--algorithm", "strobe", "--nemesis", "kill warehouse at 5s"],
     "fedlab run: --nemesis: 'kill warehouse at 5s': strobe cannot restart from Delta"),
    (["--nemesis", "pause sales at 1s"], "fedlab run: --nemesis: 'pause sales at 1s': pause takes 'for <duration>'"),
    (["--view", "q3", "--view", "q3"], "fedlab run: --view q3 is named twice: each view is kept once"),
    (["--view", "q3", "--warehouses", "2"], "fedlab run: --warehouses 2: between 1 and the number of views (1)"),
    (["--view", "q3", "--view", "q3_keys:strobe", "--warehouses", "1", "--chaos", "kill-warehouse=once"],
     "fedlab run: --chaos kill-warehouse: strobe cannot restart from Delta"),
])
def test_a_run_that_cannot_work_is_refused_before_anything_starts(argv, message, capsys):
    from fedlab.cli import main

    assert main(["run", *argv]) == 2
    assert capsys.readouterr().out.strip() == message


def test_a_fault_for_one_source_reaches_that_source_only():
    from fedlab.fedmodel.errors import ModelError
    from fedlab.live.environment import faults_by_source
    from fedlab.live.run import parse_chaos

    faults, kills = parse_chaos("drop=0.1,sales:answer_drop=0.5,reference:drop=0.3", ["reference", "sales"])
    assert kills == {}
    assert faults_by_source(faults, ["procurement", "reference", "sales"]) == {
        "procurement": {"drop": 0.1}, "reference": {"drop": 0.3}, "sales": {"drop": 0.1, "answer_drop": 0.5}}
    with pytest.raises(ModelError, match="no source named 'nowhere'"):
        faults_by_source({"nowhere:drop": 0.1}, ["sales"])
