"""A long run's growth (bench.growth), as CI can afford it: five minutes of the bench at a
low rate, the journal kept a minute and the history two, the warehouse killed near the end. Its
summary carries the growth object of every run -- each figure in the load's first and last tenth,
their ratio, its bound and whether it went past it -- with the interval-by-interval series behind
it and its plot, and the standstill the kill caused; the history, trimmed, is judged complete
from the view it keeps. Its shape is asserted, not its timings: those are a benchmark's
(docs/guide.md, "Long runs"). It runs beside the rest of the suite (tests/background_bench.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from background_bench import BackgroundBench

BENCH = BackgroundBench(__name__, "--algorithms", "sze-ling", "--views", "q3", "--scale", "0.01",
                        "--placement", "spread", "--rate", "20", "--duration", "300", "--ramp-max", "0",
                        "--idle", "0", "--settle", "60", "--journal-retention", "60", "--history-retention", "120",
                        "--nemesis", "kill warehouse at 255s", timeout=900)
FIGURE = {"first", "last", "ratio", "bound", "exceeded"}
INTERVAL = {"from_s", "to_s", "committed", "cpu_ms_per_txn", "staleness_ms", "staleness_delta_ms", "delta_commit_ms",
            "compaction_s", "checkpoint_s", "rss_mb", "disk_mb"}


@pytest.fixture(scope="module")
def bench():
    return BENCH.result()


@pytest.mark.slow
def test_a_long_run_reports_its_growth_figure_by_figure(bench):
    out, summary = bench
    run, = summary["runs"]
    assert run["consistency"] == "complete"
    growth = summary["growth"][run["folder"]]
    assert growth == {k: v for k, v in run["growth"].items() if k != "series"}
    assert growth["tenth_s"] == pytest.approx(30, abs=1)
    figures = growth["figures"]
    for name in ("cpu_ms_per_txn", "staleness p99 ms", "staleness to Delta p99 ms", "Delta commit p99 ms",
                 "compaction s", "checkpoint s", "resident MB: spark JVM", "resident MB: load driver",
                 "disk MB: journal", "disk MB: view", "disk MB: history", "disk MB: message logs", "disk MB: sources"):
        assert name in figures, (name, sorted(figures))
    for name, figure in figures.items():
        assert set(figure) == FIGURE, name
        assert isinstance(figure["exceeded"], bool) and figure["bound"] > 1
        if figure["ratio"] is not None:
            assert figure["ratio"] == pytest.approx(figure["last"] / figure["first"], rel=1e-2)
            assert figure["exceeded"] == (figure["ratio"] > figure["bound"])
    assert growth["exceeded"] == [name for name, f in figures.items() if f["exceeded"]]
    # what the retentions keep bounds the disk: of 300 s, the sources' message logs keep 240 s and the
    # journal 60 s, then as long again until a vacuum (every 30 s) and a compaction (60 s): 210 s
    assert figures["disk MB: message logs"]["bound"] == pytest.approx(1.1 * 240 / 30, abs=0.01)
    assert figures["disk MB: journal"]["bound"] == pytest.approx(1.1 * 210 / 30, abs=0.01)
    series = run["growth"]["series"]
    assert 9 <= len(series) <= 11 and all(set(e) - {"fault"} == INTERVAL for e in series)
    # the kill's interval, and what it touched after, are marked and left out of the tenths' rates
    killed = [e for e in series if e["from_s"] <= 255 < e["to_s"]]
    assert killed and all(e.get("fault") for e in killed)
    assert [[e["from_s"], e["to_s"]] for e in series if e.get("fault") and e["from_s"] >= 270] == \
        [w for w in growth["left_out_s"] if w[0] >= 270]
    assert [e["from_s"] for e in series[1:]] == [e["to_s"] for e in series[:-1]]
    assert all(e["committed"] > 0 and e["cpu_ms_per_txn"]["all"] > 0 for e in series)
    assert (out / summary["plots"][f"growth {run['folder']}"]).is_file()
    report = (out / "summary.md").read_text()
    assert "past its bound" in report and f"plots/growth-{run['folder']}.png" in report


@pytest.mark.slow
def test_a_warehouse_killed_in_a_long_run_reports_how_long_the_view_stood_still(bench):
    _, summary = bench
    run, = summary["runs"]
    kill, = [p for p in run["fault_phases"] if p["phase"].startswith("kill warehouse")]
    assert kill["still_s"] > 0 and kill["staleness_ms"]["max"] >= 1000 * kill["still_s"] * 0.5
    # the restarted warehouse was timed again: Delta's commits figure in the load's last tenth
    assert run["growth"]["series"][-1]["delta_commit_ms"]["n"] > 0


@pytest.mark.slow
def test_the_retention_kept_the_long_run_judgeable(bench):
    out, summary = bench
    run, = summary["runs"]
    history = Path(run["run_dir"]) / "warehouse" / "history"
    start = json.loads((history / "initial_view.json").read_text())
    assert start["seq"] > 0   # the history's start moved past the first view
    assert run["verdict"]["transactions"] > 0 and run["verdict"]["lost"] == run["verdict"]["doubled"] == 0
