"""`fedlab bench --same-stream` live (issue 35): Sze-Ling and versioned maintain one view together,
a warehouse each subscribed to one federation's sources, under one load with notifications
dropped, and then each alone. Every record's verdict is the checker's on its own warehouse,
its wire cost the messages about it; the summary compares the two sides. It runs beside the rest
of the suite (tests/background_bench.py)."""

from __future__ import annotations

import json

import pytest
from background_bench import BackgroundBench

from fedlab.live import check
from fedlab.live.runfile import RunFile

BENCH = BackgroundBench(__name__, "--algorithms", "sze-ling,versioned", "--views", "demo4", "--scale", "0.01",
                        "--orders", "300", "--rate", "10", "--duration", "3", "--ramp-max", "0", "--idle", "0",
                        "--settle", "30", "--placement", "default", "--chaos", "notification_drop=0.1",
                        "--same-stream", timeout=600)


@pytest.fixture(scope="module")
def bench():
    return BENCH.result()


@pytest.mark.slow
def test_two_algorithms_on_one_stream_each_judged_and_costed_on_its_own(bench):
    out, summary = bench
    runs = summary["runs"]
    assert [(r["label"], r["stream"]) for r in runs] == [("sze-ling", "shared"), ("versioned", "shared"),
                                                         ("sze-ling", "alone"), ("versioned", "alone")]
    shared = runs[:2]
    assert all(r["consistency"] == "complete" and r["caught_up"] for r in runs), [r["notes"] for r in runs]
    assert [r["subscriber"] for r in shared] == ["warehouse", "versioned"]
    assert shared[0]["folder"] == shared[1]["folder"] and shared[0]["committed_in_load"] == shared[1]["committed_in_load"]
    assert all(r["verdict"]["transactions"] == shared[0]["verdict"]["transactions"] for r in shared)
    # Each warehouse received the notifications the sources sent it: as many on the shared stream
    # as its transactions (each its own drops, resent), none of the other's.
    for r in shared:
        sent = r["wire"]["by_kind"]["notification"]
        assert sent["sent"] >= r["verdict"]["transactions"] and sent["received"] >= r["verdict"]["transactions"]
    run_dir = out / shared[0]["folder"]
    run = RunFile.read(run_dir)
    assert run.subscribers == ["warehouse", "versioned"] and run.of("versioned").algorithm == "versioned"
    assert check.check(run_dir, subscriber="versioned").level == "complete"
    group, = summary["same_stream"]["groups"]
    assert [a["label"] for a in group["algorithms"]] == ["sze-ling", "versioned"]
    assert all(a["shared"]["staleness p50 ms"] and a["alone"]["staleness p50 ms"] for a in group["algorithms"])
    assert (out / "plots" / "same_stream.png").stat().st_size > 10_000
    assert "## On the same stream" in (out / "summary.md").read_text()
    figures = json.loads((run_dir / "bench_run.json").read_text())
    assert [f["label"] for f in figures] == ["sze-ling", "versioned"]
