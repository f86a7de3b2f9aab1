"""Growth as a figure (bench.growth): a probe's readings turned into interval figures, and
the load's last tenth judged against its first, each figure against its bound. No Spark, no Ray:
readings of a fake sampler and stopwatches, and a folder of files for the disk."""

from __future__ import annotations

import time

import pytest

from fedlab.bench import growth
from fedlab.bench.growth import GrowthProbe, disk_bound, disk_mb, interval_for, judge, series
from fedlab.bench.profile import Stopwatches


class Sampler:
    """What GrowthProbe reads of a ResourceSampler: CPU seconds and resident MB by role, each
    reading a step further along `cpu` and `rss` per committed transaction."""

    def __init__(self, clock):
        self.clock = clock

    def cpu_seconds(self):
        n = self.clock()
        return {"spark JVM": 0.001 * n * (1 + n / 1000), "source a": 0.002 * n, "ray and helpers: raylet": 0.0}

    def resident_mb(self):
        n = self.clock()
        return {"spark JVM": 500 + n / 10, "load driver": 100.0}


def entry(start, end, committed=100, cpu_ms=5.0, p99=100.0, commit_p99=20.0, rss=500.0, disk=10.0):
    """One interval's figures, as `series` writes them."""
    return {"from_s": start, "to_s": end, "committed": committed,
            "cpu_ms_per_txn": {"all": cpu_ms, "spark JVM": cpu_ms / 2, "source a": cpu_ms / 2, "ray and helpers": 0.01},
            "staleness_ms": {"p50": p99 / 2, "p99": p99, "n": committed},
            "staleness_delta_ms": {"p50": p99, "p99": 2 * p99, "n": committed},
            "delta_commit_ms": {"p50": commit_p99 / 2, "p99": commit_p99, "n": 10},
            "compaction_s": None, "checkpoint_s": 0.2,
            "rss_mb": {"spark JVM": rss, "load driver": 100.0}, "disk_mb": {"journal": disk, "sources": 50.0}}


def test_a_steady_load_grows_past_no_bound():
    entries = [entry(60 * i, 60 * (i + 1), disk=10 + i) for i in range(20)]
    g = judge(entries, 1200, {"journal": 600, "sources": None})
    assert g["tenth_s"] == 120 and g["exceeded"] == []
    cpu = g["figures"]["cpu_ms_per_txn"]
    assert (cpu["first"], cpu["last"], cpu["ratio"], cpu["bound"], cpu["exceeded"]) == (5.0, 5.0, 1.0, 1.1, False)
    # Ray's helpers used under 5% of the CPU: their ratio would be noise, and is not judged
    assert "cpu_ms_per_txn: spark JVM" in g["figures"] and "cpu_ms_per_txn: ray and helpers" not in g["figures"]
    # no compaction in either tenth: shown, not judged
    assert g["figures"]["compaction s"] == {"first": None, "last": None, "ratio": None, "bound": 1.2, "exceeded": False}
    # the journal grew 11 -> 29 MB, within what ten minutes of retention keep (x1.1 * 600 / 120)
    assert g["figures"]["disk MB: journal"]["ratio"] == round(29 / 11, 3) and g["figures"]["disk MB: journal"]["bound"] == 5.5


def test_what_grows_past_its_bound_is_named():
    entries = [entry(60 * i, 60 * (i + 1), cpu_ms=5.0 + 0.1 * i, p99=100 + 5 * i, rss=500 + 20 * i) for i in range(10)]
    g = judge(entries, 600, {})
    assert {"cpu_ms_per_txn", "staleness p99 ms", "resident MB: spark JVM"} <= set(g["exceeded"])
    assert "resident MB: load driver" not in g["exceeded"] and "Delta commit p99 ms" not in g["exceeded"]
    assert g["figures"]["cpu_ms_per_txn"]["ratio"] == pytest.approx(5.9 / 5.0, abs=1e-3)
    line = growth.summary_line(g)
    assert line.startswith("Grew past its bound") and "cpu_ms_per_txn (5 -> 5.9, x1.18 against x1.1)" in line
    assert growth.summary_line(judge(entries[:1] * 10, 600, {})).startswith("Nothing grew past its bound")


def test_disk_may_grow_by_what_the_retention_keeps():
    assert disk_bound(3600, None) == 11.0        # everything kept: linear growth, and no more
    assert disk_bound(3600, 600) == 1.833        # ten minutes kept: from six minutes' worth to ten
    assert disk_bound(300, 600) == 11.0          # a load shorter than what is kept keeps it all
    assert interval_for(3600) == 60 and interval_for(300) == 30 and interval_for(5) == 1


def test_the_probe_reads_at_its_interval_and_the_series_has_every_figure(tmp_path):
    started = time.monotonic()
    clock = lambda: int(1000 * (time.monotonic() - started))   # noqa: E731  (a transaction a millisecond)
    watches = Stopwatches()
    commit = watches.timed("Delta batch commit", lambda: time.sleep(0.002), keep=True)
    (tmp_path / "journal").mkdir()
    (tmp_path / "history").mkdir()
    (tmp_path / "history" / "messages.jsonl").write_text("x" * 2 ** 20)
    (tmp_path / "history" / "changes.jsonl").write_text("y" * 2 ** 19)
    parts = {"journal": [tmp_path / "journal"], "history": [tmp_path / "history"],
             "message logs": [tmp_path / "history" / "messages.jsonl"], "missing": [tmp_path / "nowhere"]}
    probe = GrowthProbe(Sampler(clock), watches, clock, parts, 0.2,
                        leave_out={tmp_path / "history" / "messages.jsonl"}).start()
    for i in range(6):
        commit()
        (tmp_path / "journal" / f"part-{i}.parquet").write_bytes(b"z" * 2 ** 18)
        time.sleep(0.1)
    readings = probe.stop()
    assert len(readings) >= 4 and readings[0]["t"] == 0
    now = time.time()
    lags = [(now - 0.5, 0.01)]
    entries = series(probe, lags, [(now - 0.5, 0.02)], now - 1)
    assert len(entries) == len(readings) - 1
    e = entries[-1]
    assert set(e) == {"from_s", "to_s", "committed", "cpu_ms_per_txn", "staleness_ms", "staleness_delta_ms",
                      "delta_commit_ms", "compaction_s", "checkpoint_s", "rss_mb", "disk_mb"}
    assert set(e["cpu_ms_per_txn"]) == {"all", "spark JVM", "source a", "ray and helpers"}
    assert e["cpu_ms_per_txn"]["source a"] == pytest.approx(2.0, rel=0.05)   # 2 ms of a source's CPU a transaction
    assert sum(x["delta_commit_ms"]["n"] for x in entries) == 6
    assert e["disk_mb"] == {"journal": 1.5, "history": 0.5, "message logs": 1.0, "missing": 0.0}
    assert disk_mb({"x": [tmp_path / "history"]}) == {"x": 1.5}
    # a log's closed segments and the totals of what it trimmed count as the log's
    (tmp_path / "history" / "messages.jsonl.1000").write_text("x" * 2 ** 19)
    (tmp_path / "history" / "messages.jsonl.trimmed").write_text("x" * 2 ** 19)
    assert disk_mb(parts, leave_out={tmp_path / "history" / "messages.jsonl"}) == \
        {"journal": 1.5, "history": 0.5, "message logs": 2.0, "missing": 0.0}


def test_the_last_reading_replaces_one_the_probe_took_just_before():
    """A load as long as a whole number of intervals ends as the thread takes its reading: the one
    stop() takes replaces it, so the series ends on a whole interval and not a sliver of one
    that committed nothing (a 5-minute bench ended on 300.011-300.049 s)."""
    clock = lambda: 0   # noqa: E731
    probe = GrowthProbe(Sampler(clock), Stopwatches(), clock, {}, 1.0).start()
    while len(probe.readings) < 2:   # the reading due at 1 s
        time.sleep(0.01)
    times = [r["t"] for r in probe.stop()]
    assert times[0] == 0 and times[-1] >= 1.0
    assert all(b - a >= 0.5 for a, b in zip(times, times[1:])), times


def test_the_report_and_the_plot_name_what_grew_past_its_bound(tmp_path):
    from fedlab.bench import plots, report

    entries = [entry(60 * i, 60 * (i + 1), cpu_ms=5.0 + 0.1 * i) for i in range(10)]
    run = {"label": "sze-ling", "folder": "01-sze-ling", "growth": {**judge(entries, 600, {}), "series": entries}}
    blocks = report._growth_blocks(run)
    assert blocks[0][1].startswith("Grew past its bound") and "cpu_ms_per_txn" in blocks[0][1]
    table = blocks[1][2]
    assert ["cpu_ms_per_txn", "5", "5.9", "1.18", "1.1", "YES"] in table
    assert blocks[2] == ("img", "plots/growth-01-sze-ling.png", "sze-ling: growth over the load")
    fig = plots._growth(run)
    titles = [ax.get_title() for ax in fig.axes]
    assert "past its bound: cpu_ms_per_txn" in titles[0] and "past its bound" not in titles[3]
    fig.savefig(tmp_path / "growth.png")


def test_intervals_a_fault_touched_are_left_out_of_the_tenths_rates():
    """A warehouse killed in the first tenth: its restart's staleness and CPU must not become the
    bound the last tenth is held to, nor hide a growth. Killed in the last tenth, the old
    warehouse's memory is not the run's growth: memory is read before the fault, disk as it is."""
    entries = [entry(60 * i, 60 * (i + 1), p99=100.0 + 30 * (i >= 50), disk=10.0 + (i >= 59)) for i in range(60)]
    entries[1].update(entry(60, 120, p99=9000.0, cpu_ms=50.0))
    entries[59].update(entry(3540, 3600, p99=100.0 + 30, rss=900.0, disk=11.0))
    growth.mark_faults(entries, [(61.0, 61.0), (3541.0, 3541.0)])
    assert [e.get("fault", False) for e in entries[:3] + entries[-2:]] == [False, True, False, False, True]
    g = judge(entries, 3600, {})
    assert g["left_out_s"] == [[60, 120], [3540, 3600]]
    assert g["figures"]["resident MB: spark JVM"]["last"] == 500.0
    assert g["figures"]["disk MB: journal"]["last"] == 11.0
    assert g["figures"]["staleness p99 ms"]["first"] == 100.0 and "staleness p99 ms" in g["exceeded"]
    assert g["figures"]["cpu_ms_per_txn"]["first"] == 5.0
    # a tenth that only faults touched has no rate to judge
    every = growth.mark_faults([entry(60 * i, 60 * (i + 1)) for i in range(10)], [(0.0, 600.0)])
    assert judge(every, 600, {})["figures"]["staleness p99 ms"]["ratio"] is None


def test_memory_is_judged_from_the_first_tenth_after_every_periodic_task_ran():
    """The hour's shape: the JVM's heap steps up at the retention's first removal, 11 minutes in,
    and holds. From the load's first tenth that step reads as growth; from the tenth after the
    warm-up, the run holds. A leak after the warm-up is still named, and a load too short to have
    a tenth after it is judged from its first."""
    def hour(rss_of):
        return [entry(60 * i, 60 * (i + 1), rss=rss_of(i)) for i in range(60)]

    stepped = judge(hour(lambda i: 1500.0 if i < 11 else 2500.0), 3600, {}, growth.warm_seconds(600, 60))
    assert judge(hour(lambda i: 1500.0 if i < 11 else 2500.0), 3600, {})["figures"]["resident MB: spark JVM"]["exceeded"]
    jvm = stepped["figures"]["resident MB: spark JVM"]
    assert stepped["memory_from_s"] == 660 and (jvm["first"], jvm["last"], jvm["exceeded"]) == (2500.0, 2500.0, False)
    assert "660 s in" in growth.summary_line(stepped)
    leaking = judge(hour(lambda i: 1500.0 + 20 * i), 3600, {}, 660)
    assert "resident MB: spark JVM" in leaking["exceeded"]
    assert leaking["figures"]["resident MB: spark JVM"]["first"] == 1500.0 + 20 * 16
    # CPU and staleness are rates of their tenth: still the load's first
    assert stepped["figures"]["cpu_ms_per_txn"]["first"] == 5.0
    short = judge([entry(30 * i, 30 * (i + 1), rss=500.0 + i) for i in range(10)], 300, {}, 660)
    assert short["memory_from_s"] == 0.0 and short["figures"]["resident MB: spark JVM"]["first"] == 500.0
