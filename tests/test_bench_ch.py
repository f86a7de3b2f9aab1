"""`fedlab bench --workload ch` (bench.ch_workload): arguments it cannot run are refused in one line
before anything starts, and the pacer that is go-tpc's rate limit stops and runs a real process.
(A trial itself, 10-25 minutes here, is not run by the suite: docs/ch-benchmark.md.)"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedlab.bench.ch_workload import highest_pace_meeting_target
from fedlab.checker.pg_server import PostgresServer
from fedlab.cli import main
from fedlab.loadgen.ch.go_tpc import Pacer
from fedlab.warehouse.core import registry


@pytest.mark.parametrize("argv, message", [
    ([], "--workload ch: go-tpc writes a PostgreSQL database; add --source-engine postgres"),
    (["--source-engine", "postgres", "--views", "q2"],
     "--views: unknown CH-benCHmark view 'q2'; choose one of q1, q18, q3, q5, q6"),
    (["--source-engine", "postgres", "--ch-clients", "0"], "--ch-warehouses and --ch-clients must be at least 1"),
    (["--source-engine", "postgres", "--ch-duty", "0"], "--ch-duty 0: a share of the time, above 0 and at most 1"),
    (["--source-engine", "postgres", "--ch-duty", "1.5"], "--ch-duty 1.5: a share of the time, above 0 and at most 1"),
    (["--source-engine", "postgres", "--ch-duty", "0.1,x"], "--ch-duty x: a share of the time, above 0 and at most 1"),
    (["--source-engine", "postgres", "--chaos", "none", "--chaos", "drop=0.1"], "--workload ch: one --chaos setting"),
    (["--source-engine", "postgres", "--chaos", "drop=2"], "--chaos: drop is a probability between 0 and 1, got 2.0"),
])
def test_the_ch_bench_refuses_what_it_cannot_run_in_one_line_before_anything_starts(
        argv, message, tmp_path, capsys, monkeypatch):
    def no_server(*args, **kwargs):
        raise AssertionError("a PostgreSQL server was started")

    monkeypatch.setattr(PostgresServer, "start", no_server)
    assert main(["bench", "--workload", "ch", *argv, "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"fedlab bench: {message}\n"
    assert not (tmp_path / "out").exists()


def test_the_ch_bench_refuses_an_unknown_algorithm_naming_those_registered(tmp_path, capsys):
    assert main(["bench", "--workload", "ch", "--source-engine", "postgres", "--algorithms", "sze-ling,nope",
                 "--out", str(tmp_path / "out")]) == 2
    # (read after the call: plug-ins installed as entry points join the registry as it is first asked)
    assert capsys.readouterr().err == (f"fedlab bench: --algorithms: unknown algorithm 'nope' "
                                       f"(registered: {', '.join(registry.names())})\n")
    assert not (tmp_path / "out").exists()


def trial(duty: float, tpmc: float, *views: tuple[str, float | None]) -> dict:
    return {"duty": duty, "with": {"tpmC": tpmc},
            "views": {f"v{i}": {"consistency": level, "staleness_ms": {"p99": p99}} for i, (level, p99) in
                      enumerate(views)}}


def test_the_highest_pace_is_the_fastest_whose_every_trial_kept_every_view_complete_and_fresh():
    trials = [trial(0.05, 1000, ("complete", 900), ("complete", 4000)),
              trial(0.05, 1100, ("complete", 800), ("complete", 4900)),
              trial(0.1, 2000, ("complete", 3000), ("complete", 4500)),
              trial(0.1, 2100, ("complete", 3000), ("complete", 5100)),      # one trial over the target
              trial(0.2, 4000, ("complete", 2000), ("none", 1000))]           # fresh, but not complete
    assert highest_pace_meeting_target(trials) == {"duty": 0.05, "tpmC_with": {"median": 1050.0, "min": 1000,
                                                                                "max": 1100, "values": [1000, 1100]}}
    assert highest_pace_meeting_target([trial(0.05, 1000, ("complete", None))]) is None   # nothing reflected


def state(pid: int) -> str:
    """The process's state letter (/proc/PID/stat): T when stopped."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_the_pacer_stops_the_process_for_part_of_the_time_and_leaves_it_running():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        pacer = Pacer(child, duty=0.2)
        seen = set()
        for _ in range(200):
            seen.add(state(child.pid))
            time.sleep(0.013)
        pacer.stop()
        assert "T" in seen, f"never stopped: {seen}"
        assert len(seen) > 1, "never ran"
        assert state(child.pid) != "T"
    finally:
        child.kill()
        child.wait()


def test_the_pacer_ends_when_its_process_does():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    pacer = Pacer(child, duty=0.5)
    child.wait(30)
    pacer._thread.join(5)
    assert not pacer._thread.is_alive()
