"""`fedlab bench --same-stream` (issue 35): which runs share a stream, and what the summary says of
algorithms on one stream against each alone: their figures, how much they disturbed each other,
and whether the difference between two algorithms spread less over the trials on one stream.
The live run of it is tests/test_bench_same_stream.py."""

from __future__ import annotations

import pytest

from fedlab.bench.report import document, markdown
from fedlab.bench.run_specs import BenchPlan, run_specs, stream_units
from fedlab.bench.runner import subscriber_names
from fedlab.bench.same_stream import comparison, finding


def test_runs_that_differ_only_in_algorithm_and_view_share_a_stream_then_run_alone():
    specs = run_specs(BenchPlan(algorithms="sze-ling,versioned", views="q3,q5", chaos=("none", "drop=0.1"), rate=100,
                                duration=10, ramp_max=0, repeat=2))
    units = stream_units(specs, same_stream=True)
    shown = [(kind, [(s.algorithm, s.view) for s in unit], unit[0].chaos, unit[0].trial) for kind, unit in units]
    both = [("sze-ling", "q3"), ("versioned", "q3"), ("sze-ling", "q5"), ("versioned", "q5")]
    assert shown[:2] == [("shared", both, "", 1), ("alone", [("sze-ling", "q3")], "", 1)]
    assert len(units) == 4 * 5 and [u for u in shown if u[0] == "shared"] == [
        ("shared", both, chaos, trial) for trial in (1, 2) for chaos in ("", "drop=0.1")]
    assert stream_units(specs, same_stream=False) == [("alone", [s]) for s in specs]
    assert subscriber_names(units[0][1]) == ["warehouse", "versioned-q3", "sze-ling-q5", "versioned-q5"]


def record(label, trial, stream, p50, p99=None, bytes_=100.0, cpu=None, committed=100):
    return {"label": label, "view": "q3", "scale": 0.1, "chaos": "none", "placement": "spread", "trial": trial,
            "stream": stream, "consistency": "complete", "committed_in_load": committed,
            "staleness_ms": {"p50": p50, "p99": p99 if p99 is not None else 2 * p50},
            "staleness_delta_ms": {"p99": 3 * p50}, "per_txn": {"messages": 2.0, "bytes": bytes_},
            "cpu": [{"by_role": {"warehouse": cpu / 1000 * committed}}] if cpu else []}


def test_the_summary_compares_each_algorithm_on_one_stream_with_itself_alone():
    # Trial by trial the machine drifts: alone, sze-ling and versioned each meet their own drift,
    # so their difference jumps (100, then 20); on one stream both meet the same (40, then 45).
    runs = [record("sze-ling", 1, "shared", 200, cpu=12), record("versioned", 1, "shared", 240, cpu=12),
            record("sze-ling", 1, "alone", 150, cpu=10), record("versioned", 1, "alone", 250, cpu=9),
            record("sze-ling", 2, "shared", 400, cpu=14), record("versioned", 2, "shared", 445, cpu=14),
            record("sze-ling", 2, "alone", 390, cpu=11), record("versioned", 2, "alone", 410, cpu=10),
            {**record("sze-ling", 1, "alone", 99), "view": "q5"}]   # q5 did not share a stream
    group, = comparison(runs)
    assert (group["view"], group["trials"]) == ("q3", 2)
    sze, versioned = group["algorithms"]
    assert sze["label"] == "sze-ling" and sze["shared"]["staleness p50 ms"]["median"] == 300
    assert sze["alone"]["staleness p50 ms"]["values"] == [150, 390]
    assert sze["disturbance"]["staleness p50 ms"] == 30.0   # 300 - 270
    p50 = next(d for d in group["differences"] if d["figure"] == "staleness p50 ms")
    assert p50["of"] == "versioned - sze-ling"
    assert p50["shared"]["values"] == [40, 45] and p50["alone"]["values"] == [100, 20]
    assert p50["range"] == {"shared": 5, "alone": 80} and p50["steadier"] == "shared"
    assert group["cpu_ms_per_txn"]["shared stream"]["values"] == [12.0, 14.0]
    assert group["cpu_ms_per_txn"]["alone, summed"]["values"] == [19.0, 21.0]
    lines = finding([group])
    assert lines[0] == ("q3 (none), versioned - sze-ling in staleness p50 ms: over 2 trials the difference "
                        "spread 5 on one stream and 80 in separate runs (steadier on one stream)")
    page = markdown(document({"machine": {"cpus": 2, "load_average": [0], "memory_gb": 1}, "seconds": 1,
                              "settings": {"workload": "mixed", "seed": 1, "duration": 15, "ramp_rates": [],
                                           "ramp_step": 8}, "runs": [], "targets": [], "plots": {},
                              "same_stream": {"groups": [group], "finding": lines}}))
    assert "## On the same stream" in page
    assert "| sze-ling | shared | 300 (200-400) |" in page and "| sze-ling | disturbed | 30 |" in page
    assert "| versioned - sze-ling | staleness p50 ms | 42.5 (40-45) | 60 (20-100) | shared |" in page


@pytest.mark.parametrize("drop", ["shared", "alone"])
def test_a_figure_missing_from_one_side_leaves_its_steadiness_unsaid(drop):
    runs = [record(label, trial, stream, 100 + trial) for label in ("a", "b") for trial in (1, 2)
            for stream in ("shared", "alone")]
    runs = [{**r, "staleness_ms": {}} if r["stream"] == drop and r["label"] == "b" else r for r in runs]
    group, = comparison(runs)
    assert all(d["steadier"] is None for d in group["differences"])
    assert finding([group]) == []
