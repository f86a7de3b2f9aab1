"""`fedlab bench`: a short live bench (Sze-Ling, and lazy at a combine bound, over PostgreSQL
sources written from outside by pgbench as well) writes a complete summary whose plots open, its
cost figures come from the nodes' message logs where they exist, bad arguments are one line and
exit 2, and the synthetic workload is deterministic per seed (the TPC-H streams' determinism is
tests/test_tpch_workload.py's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from background_bench import BackgroundBench

ROOT = Path(__file__).resolve().parent.parent
REQUIRED = ("algorithm", "access_path", "view", "scale", "chaos", "rate_target", "rate_achieved",
            "max_sustained_rate", "staleness_ms", "staleness_delta_ms", "floor_ms", "per_txn", "peak_memory_mb",
            "consistency")


# Over PostgreSQL sources with pgbench writing the sales source beside the load: the bench's every
# figure and its outside writers in one run of the bench (tests/test_bench_federation.py's runs over
# SQLite files). It runs beside the rest of the suite (tests/background_bench.py).
BENCH = BackgroundBench(__name__, "--algorithms", "sze-ling,lazy", "--combine-max", "100", "--views", "demo4",
                        "--scale", "0.01", "--orders", "300", "--rate", "5", "--duration", "3", "--ramp-start", "5",
                        "--ramp-max", "5", "--ramp-step", "2", "--settle", "30", "--idle", "2", "--profile",
                        "--source-engine", "postgres", "--outside-writers", "40", "--placement", "default")


@pytest.fixture(scope="module")
def bench():
    return BENCH.result()


@pytest.mark.slow
@pytest.mark.postgres
def test_short_bench_has_every_figure_for_every_run(bench):
    out, summary = bench
    assert json.loads((out / "summary.json").read_text()) == summary
    assert [r["label"] for r in summary["runs"]] == ["sze-ling", "lazy@100"]
    for run in summary["runs"]:
        assert all(k in run for k in REQUIRED), [k for k in REQUIRED if k not in run]
        assert run["access_path"] == "join-graph" and run["view"] == "demo4" and run["scale"] == 0.01
        assert run["placement"] == "default" and len(run["sources"]) == 3
        assert run["rate_target"] == 5 and run["rate_achieved"] > 0
        assert set(run["staleness_ms"]) >= {"p50", "p95", "p99", "max"}
        assert all(isinstance(run["staleness_ms"][p], float) for p in ("p50", "p95", "p99", "max"))
        # to the Delta table: never before the core's view reflects a transaction
        assert run["staleness_delta_ms"]["p50"] >= run["staleness_ms"]["p50"]
        assert run["floor_ms"] > 0
        assert set(run["per_txn"]) >= {"subqueries", "messages", "rows", "bytes", "resends", "compensations", "subquery_retries"}
        assert run["peak_memory_mb"] > 0 and run["warehouse_cpu_seconds"] > 0
        assert run["ramp"] and run["ramp"][0]["rate"] == 5
        # every part of the warehouse the profile times was found under its name
        assert not [n for n in run["notes"] if "to time" in n], run["notes"]
        assert {"core handle()", "Delta batch commit", "sub-query RPC + answers"} <= set(run["profile"]["parts"])
        assert (Path(run["run_dir"]) / "run.json").is_file()
        # the view was read during the load, each read answered once it caught up
        assert run["read_latency_ms"]["n"] >= 1 and run["read_latency_ms"]["p50"] > 0
        # CPU read around the load and every ramp step, every role of the run named
        assert [c["phase"] for c in run["cpu"]] == ["load"] + ["ramp"] * len(run["ramp"])
        roles = set(run["cpu"][0]["by_role"])
        assert {"warehouse (python)", "spark JVM", "load driver"} <= roles, roles
        assert any(r.startswith("source ") for r in roles) and 0 < run["cpu"][0]["busy"] <= 1.05
        # and what else took the machine meanwhile: processes outside the federation, other guests
        assert 0 <= run["cpu"][0]["others"] <= 1 and 0 <= run["cpu"][0]["stolen"] <= 1
        # each stretch's wall-clock window and the driver's commit groups in it (fedlab calibrate)
        for stretch in run["cpu"]:
            assert stretch["window"][0] < stretch["window"][1] and stretch["offered"] > 0
            assert sum(stretch["groups"].values()) >= 1
        # the idle federation's CPU, read before the load (2 s here, 30 s by default)
        assert run["idle"]["seconds"] >= 2 and run["idle"]["share_of_a_core"] >= 0
        assert any(r.startswith("source ") for r in run["idle"]["by_role"])
        # and its threads per second: each source's, the warehouse's and the JVM's
        threads = run["idle"]["threads"]
        assert {"warehouse (python)", "load driver", "spark JVM"} <= set(threads)
        assert all(t["per"] == "s" for t in threads.values())
        # the parts of each transaction's staleness add up to its staleness to Delta
        parts = run["staleness_parts"]
        assert parts["n"] > 0 and set(parts["parts_ms"]) == {"delivery", "behind its source", "at the warehouse", "to Delta"}
        slow = parts["slowest"]
        assert sum(slow["mean_ms"].values()) >= slow["staleness_ms"] - 0.5
        assert sum(slow["mean_ms"].values()) <= run["staleness_delta_ms"]["max"] + 0.5
        # pgbench wrote the sales source in the load phase: its figures, and its CPU and the server's apart
        outside = run["outside_writers"]
        assert "error" not in outside and outside["committed"] > 60 and outside["failed"] == 0, outside
        assert any(note.startswith("outside writers (pgbench, 40 txn/s offered)") for note in run["notes"])
        assert run["cpu"][0]["by_role"].get("postgres server", 0) > 0, roles
        assert run["cpu"][0]["by_role"].get("outside writers (pgbench)", 0) > 0, roles
        assert run["verdict"]["transactions"] > run["committed_in_load"] + 60   # pgbench's are judged too
    assert summary["settings"]["source_engine"] == "postgres" and summary["settings"]["outside_writers"] == 40
    assert summary["runs"][0]["consistency"] == "complete"
    # lazy combines (then strong): up to its bound, and every pending transaction when the view is
    # read (deferral.py)
    for run in summary["runs"][1:]:   # a job per view state
        assert run["consistency"] in ("strong", "complete")
        assert run["counters"]["jobs"] == run["verdict"]["states"] <= run["verdict"]["transactions"]
    assert {t["name"] for t in summary["targets"]} >= {"max sustained rate with complete consistency",
                                                     "staleness p99 to the Delta table at 500 txn/s",
                                                     "peak memory of all processes at SF 1"}


@pytest.mark.slow
@pytest.mark.postgres
def test_profile_samples_every_process_and_links_its_flame_graph(bench):
    out, summary = bench
    html = (out / "summary.html").read_text()
    for run in summary["runs"]:
        profile = run["profilers"]
        roles = set(profile["processes"])
        assert {"warehouse (python)", "load driver", "spark JVM"} <= roles, (roles, profile["notes"])
        assert sum(r.startswith("source ") for r in roles) == len(run["sources"])
        for role, figures in profile["processes"].items():
            graph = Path(figures["flame_graph"])
            assert graph.read_text().startswith("<svg") and graph.parent == Path(run["run_dir"]) / "profile"
            assert f'href="{graph.relative_to(out)}"' in html
            shares = [h["share"] for h in figures["hottest"]]
            assert len(shares) <= 10 and shares == sorted(shares, reverse=True)
        # the JVM ran Delta batches in the load phase: JFR sampled it
        assert profile["processes"]["spark JVM"]["samples"] > 0
        # what profiling cost is measured, and counted apart in the CPU by process
        assert profile["overhead_cpu_seconds"]["py-spy"] > 0 and 0 < profile["overhead_share_of_machine"] < 1
        assert "profilers (py-spy)" in run["cpu"][0]["by_role"]
        # the thread census: every profiled process, its threads named (Python's by py-spy), and
        # the threads' CPU adding up to no more than the process's (each figure rounded to a µs)
        census = profile["threads"]
        assert set(census) == roles
        names = {t["thread"] for t in census["warehouse (python)"]["threads"]}
        assert names & {"core", "committer", "MainThread"} or any(n.startswith("dispatch-") for n in names), names
        for figures in census.values():
            assert figures["per"] == "txn"
            rounding = 0.0005 * (len(figures["threads"]) + 1)
            assert sum(t["cpu_ms"] for t in figures["threads"]) <= figures["cpu_ms"] + rounding
            assert figures["switches"] > 0
        assert "context switches / txn" in html


@pytest.mark.slow
@pytest.mark.postgres
def test_wire_cost_comes_from_the_message_logs_that_exist(bench):
    _, summary = bench
    for run in summary["runs"]:
        run_dir = Path(run["run_dir"])
        logs = {p.name.split(".")[0]: p for p in run_dir.glob("*.messages.jsonl")}
        if (run_dir / "warehouse" / "history" / "messages.jsonl").exists():
            logs["warehouse"] = run_dir / "warehouse" / "history" / "messages.jsonl"
        assert sorted(run["wire"]["logs"]) == sorted(logs)
        if logs:
            assert run["per_txn"]["messages"] > 0 and run["per_txn"]["bytes"] > 0
            sent = sum(1 for p in logs.values() for line in p.read_text().splitlines()
                       if json.loads(line)["event"] == "sent")
            assert run["wire"]["messages"] == sent
        if "warehouse" in logs:
            # sub-queries sent again: every copy of an id beyond its first, over the whole run
            ids = [m["id"] for m in map(json.loads, logs["warehouse"].read_text().splitlines())
                   if m["kind"] == "subquery" and m["event"] == "sent"]
            again = len(ids) - len(set(ids))
            assert run["per_txn_whole_run"]["subquery_retry_share"] == pytest.approx(again / max(len(ids), 1), abs=1e-4)
        missing = {"warehouse", *run["sources"]} - set(logs)
        assert bool(missing) == any("no message log" in n for n in run["notes"])


@pytest.mark.slow
@pytest.mark.postgres
def test_plots_open_and_the_summaries_embed_them(bench):
    import matplotlib.image

    out, summary = bench
    # and each run's growth over its load (bench.growth), shown with the run
    assert set(summary["plots"]) == {"staleness", "throughput_ramp", "cost_per_txn", "consistency",
                                     "staleness_vs_throughput"} | {f"growth {r['folder']}" for r in summary["runs"]}
    md, page = (out / "summary.md").read_text(), (out / "summary.html").read_text()
    for path in summary["plots"].values():
        image = matplotlib.image.imread(out / path)
        assert image.shape[0] > 100 and image.shape[1] > 100
        assert f"]({path})" in md and f'<img src="{path}"' in page
    assert "Lazy maintenance: the combine bound" in md and "sze-ling -> lazy@100: sub-queries/txn" in md


@pytest.mark.slow
@pytest.mark.postgres
def test_the_bench_calibrates_the_timed_simulator_which_predicts_its_runs(bench, tmp_path):
    """`fedlab calibrate` fits every operation's cost to the bench's stretches (none below zero,
    the fit's quality and where it was measured named), and `fedlab predict --against` simulates
    each of its runs with it, every figure the bench judges beside what the run measured."""
    from fedlab.cli import main
    from fedlab.simulation.calibration import OPERATIONS, load

    out, summary = bench
    assert main(["calibrate", str(out), "--out", str(tmp_path / "cal.json")]) == 0
    cal = load(tmp_path / "cal.json")
    assert set(cal.cpu) == set(OPERATIONS) and all(v >= 0 for v in cal.cpu.values())
    assert 0 < cal.loopback.p50 <= cal.loopback.p99 < 1 and cal.cores == summary["machine"]["cpus"]
    assert set(cal.about["fit"]) == {"source", "warehouse", "jvm", "driver"} and cal.about["commit"]
    assert main(["predict", "--against", str(out), "--calibration", str(tmp_path / "cal.json"),
                 "--out", str(tmp_path / "predicted")]) == 0
    predicted = json.loads((tmp_path / "predicted" / "summary.json").read_text())
    assert [r["folder"] for r in predicted["runs"]] == [r["folder"] for r in summary["runs"]]
    for run, live in zip(predicted["runs"], summary["runs"]):
        figures = run["figures"]
        assert figures["bytes/txn"]["measured"] == live["per_txn"]["bytes"] and figures["bytes/txn"]["predicted"] > 0
        assert figures["staleness p99 (ms)"]["predicted"] > 0
    assert "| bytes/txn |" in (tmp_path / "predicted" / "summary.md").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--algorithms", "sze-ling,nosuch"], "unknown algorithm 'nosuch'"),
    (["--algorithms", "sze-ling:sideways"], "unknown access path 'sideways'"),
    (["--scale", "tiny"], "--scale: expected numbers"),
    (["--views", "q99"], "unknown view 'q99'"),
    (["--chaos", "drop=lots"], "drop must be a number"),
    (["--chaos", "kill-source=once"], "message faults only"),
    (["--orders", "-1"], "--orders must be"),
    (["--repeat", "0"], "--repeat must be 1 or more"),
    (["--reorder-allowance", "-0.1"], "--reorder-allowance must be a finite number of seconds >= 0, got -0.1"),
    (["--reorder-allowance", "nan"], "--reorder-allowance must be a finite number of seconds >= 0, got nan"),
    (["--combine-max", "0,10"], "--combine-max: expected whole numbers of at least 1"),
    (["--federation", "ring"], "--federation: unknown shape 'ring' (one of chain, star)"),
    (["--federation", "chain", "--sources", "1,3"], "--sources: a view joins two sources at least"),
    (["--federation", "chain", "--sources", "six"], "--sources: expected whole numbers"),
    (["--federation", "chain", "--relation-rows", "0"], "--relation-rows must be 1 or more"),
    (["--federation", "star", "--views", "q3", "--orders", "10"], "--views and --orders are for TPC-H"),
    (["--sources", "3,6"], "give --federation too"),
    (["--nemesis", "pause nowhere at 1s for 1s"], "--nemesis: 'pause nowhere at 1s for 1s': no target 'nowhere'"),
    (["--nemesis", "clock crm +5s at 1s"], "--nemesis: 'clock crm +5s at 1s': a local run's processes share"),
    (["--algorithms", "strobe", "--nemesis", "kill warehouse at 1s"],
     "--nemesis: 'kill warehouse at 1s': strobe cannot restart from Delta"),
    (["--outside-writers", "50"], "--outside-writers: pgbench writes PostgreSQL sources; add --source-engine postgres"),
    (["--outside-writers", "-1", "--source-engine", "postgres"], "--outside-writers: a rate in transactions per second"),
    (["--outside-writers", "50", "--source-engine", "postgres", "--placement", "spread"],
     "the pgbench scripts need customer, orders and lineitem at one source (TPC-H's default placement): "
     "give --placement default"),
    (["--outside-writers", "50", "--source-engine", "postgres", "--federation", "chain"],
     "the pgbench scripts write TPC-H's relations, not a synthetic federation's"),
])
def test_bad_arguments_are_one_line_and_exit_2(argv, message):
    done = subprocess.run([sys.executable, "-m", "fedlab.cli", "bench", *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("fedlab bench: ") and message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_synthetic_stream_is_deterministic_per_seed():
    from fedlab.fedmodel.viewdef import parse_view
    from fedlab.loadgen.synthetic_load import SyntheticStream
    from fedlab.loadgen.tpch import load_view, tpch_catalog

    catalog = tpch_catalog()
    view = parse_view(load_view("q3"), catalog)

    def first(seed, n=200):
        stream = SyntheticStream(catalog, view, {}, skew=0.8, seed=seed)
        return [(s, r.to_dict()) for s, r in [*stream.initial_load(20), *(stream.next() for _ in range(n))]]

    assert first(4) == first(4)
    assert first(4) != first(5)


def test_a_step_is_sustained_only_if_commits_and_the_view_keep_up_after_the_warm_up():
    from fedlab.bench.ramp import RampStep, max_sustained

    def step(rate, committed, seconds, backlog_start, backlog_warm, backlog_end, judged_committed=None):
        return RampStep(rate=rate, offered=committed, committed=committed, seconds=seconds, applied=0,
                        backlog_start=backlog_start, backlog_end=backlog_end, judged_seconds=seconds / 2,
                        judged_committed=committed // 2 if judged_committed is None else judged_committed,
                        judged_backlog_start=backlog_warm)

    kept_up = step(10, 60, 6.2, 2, 3, 4)
    slow_sources = step(20, 120, 9.0, 4, 4, 4, judged_committed=50)
    slow_view = step(20, 120, 6.1, 4, 34, 64)
    # Measured at 2 txn/s: the last group took 0.75 s past the step; that alone is no backlog.
    low_rate_tail = step(2, 12, 6.75, 4, 2, 1)
    # Twice the rate at the same staleness holds twice the transactions in flight: the backlog
    # rises once, in the warm-up, then stays level.
    new_level = step(512, 3072, 6.0, 171, 1000, 1015)
    # Measured: a 256 step after the 500 txn/s load phase; the warm-up drained the backlog below
    # what 256 txn/s holds in flight and the judged half refilled it, lower than the step found it.
    drained_then_refilled = step(256, 2048, 8.0, 969, 134, 608, judged_committed=1031)
    # A step slower than its rate that started with a backlog still grows it over the whole step.
    behind_from_the_start = step(256, 2048, 8.0, 969, 1100, 1400, judged_committed=1031)
    assert kept_up.sustained and low_rate_tail.sustained and new_level.sustained and drained_then_refilled.sustained
    assert not behind_from_the_start.sustained
    assert not slow_sources.sustained and not slow_view.sustained
    assert max_sustained([kept_up, slow_view]) == 10 and max_sustained([slow_view]) is None


def test_the_rate_target_is_judged_by_what_the_sources_committed_in_the_highest_sustained_step():
    from fedlab.bench.targets import evaluate

    def ref(*steps):
        return {"algorithm": "sze-ling", "access_path": "join-graph", "view": "q3", "chaos": "none",
                "placement": "spread", "rate_target": 500.0, "scale": 0.1, "consistency": "complete",
                "rate_achieved": 500.0, "ramp": [{"rate": r, "achieved": a, "sustained": ok} for r, a, ok in steps],
                "staleness_ms": {}, "staleness_delta_ms": {}, "per_txn": {}, "profile": {"parts": {}}}

    def rate(run):
        return {t["name"]: t for t in evaluate([run])}["max sustained rate with complete consistency"]

    short = rate(ref((512, 511.0, True), (1024, 983.1, True), (2048, 1336.9, False)))
    assert short["met"] is False and "983.1 txn/s committed in the 1024 txn/s step" in short["measured"]
    assert rate(ref((1024, 1003.0, True), (2048, 1500.0, False)))["met"] is False   # the target is 2,000
    assert rate(ref((2048, 2003.0, True), (4096, 2500.0, False)))["met"] is True
    assert rate(ref((256, 200.0, False)))["shortfall"] == "more than 7.8x below"


def test_a_failed_sf1_run_leaves_the_scale_and_memory_targets_unmeasured_not_met():
    from fedlab.bench.targets import evaluate

    common = {"algorithm": "sze-ling", "access_path": "join-graph", "view": "q3", "chaos": "none",
              "placement": "spread", "rate_target": 500.0}
    ref = {**common, "scale": 0.1, "consistency": "complete", "max_sustained_rate": 256.0, "rate_achieved": 400.0,
           "ramp": [], "staleness_ms": {"p50": 900.0, "p99": 2000.0}, "staleness_delta_ms": {"p99": 3000.0},
           "per_txn": {"bytes": 600.0}, "peak_memory_mb": 4200.0, "profile": {"parts": {}}}
    sf1 = {**common, "scale": 1.0, "consistency": "failed", "rate_achieved": None, "ramp": [],
           "staleness_ms": {"p50": None}, "per_txn": {"bytes": None}, "peak_memory_mb": None,
           "notes": ["the run failed: OutOfMemoryError"]}
    targets = {t["name"]: t for t in evaluate([ref, sf1])}
    scale = targets["bytes per txn and staleness p50 from SF 0.1 to SF 1"]
    memory = targets["peak memory of all processes at SF 1"]
    assert scale["met"] is None and "OutOfMemoryError" in scale["measured"]
    assert memory["met"] is None and "failed" in memory["measured"]


def test_a_missed_rate_names_the_cpu_of_the_step_that_ended_the_ramp_and_staleness_its_parts():
    from fedlab.bench.targets import evaluate

    cpu = [{"phase": "load", "rate": 500.0, "seconds": 15.0, "busy": 0.8, "by_role": {"source s": 12.0, "spark JVM": 12.0}},
           {"phase": "ramp", "rate": 512.0, "seconds": 8.0, "busy": 0.8, "by_role": {"source s": 6.4, "spark JVM": 6.4}},
           {"phase": "ramp", "rate": 1024.0, "seconds": 8.0, "busy": 0.97,
            "by_role": {"source s": 9.0, "warehouse (python)": 5.0, "spark JVM": 1.5, "ray and helpers": 0.02}}]
    parts = {"n": 200, "lost_share": 0.05,
             "parts_ms": {name: {"p50": 100.0, "p99": 900.0} for name in ("delivery", "at the warehouse", "to Delta")},
             "slowest": {"n": 2, "staleness_ms": 4000.0, "lost_share": 0.5,
                         "mean_ms": {"delivery": 1500.0, "at the warehouse": 2000.0, "to Delta": 700.0}}}
    ref = {"algorithm": "sze-ling", "access_path": "join-graph", "view": "q3", "chaos": "none", "placement": "spread",
           "rate_target": 500.0, "scale": 0.1, "consistency": "complete", "rate_achieved": 500.0,
           "ramp": [{"rate": 512.0, "achieved": 511.0, "committed": 4088, "sustained": True},
                    {"rate": 1024.0, "achieved": 700.0, "committed": 5600, "sustained": False}],
           "cpu": cpu, "staleness_parts": parts, "staleness_ms": {"p99": 3000.0}, "staleness_delta_ms": {"p99": 4100.0},
           "per_txn": {}, "profile": {"parts": {}}}
    targets = {t["name"]: t for t in evaluate([ref])}
    rate = targets["max sustained rate with complete consistency"]["what_dominates"]
    assert "1024 txn/s step (not sustained, 700 committed per second)" in rate and "97% busy" in rate
    assert "2.77 ms of CPU per committed transaction" in rate   # 15.52 CPU s / 5,600
    assert "source s 58%, warehouse (python) 32%, spark JVM 10%" in rate and "ray" not in rate
    stale = targets["staleness p99 to the Delta table at 500 txn/s"]["what_dominates"]
    assert "delivery 1500 ms, at the warehouse 2000 ms, to Delta 700 ms" in stale
    assert "50% of them had their notification lost" in stale and "80% busy in the load phase" in stale


def test_the_sampler_keeps_the_cpu_of_a_process_that_ended():
    import time

    from fedlab.bench.resources import ResourceSampler, cpu_use

    sampler = ResourceSampler(interval=0.05).start()
    try:
        before = sampler.cpu_seconds()
        child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                                  "while time.process_time() - t < 0.6: pass"])
        sampler.name(child.pid, "busy child")
        time.sleep(0.3)
        child.wait(timeout=30)
        time.sleep(0.2)   # sampled after it ended: what it used is kept
        use = cpu_use(before, sampler.cpu_seconds(), 1.0, 1)
    finally:
        sampler.stop()
    assert use["by_role"].get("busy child", 0) >= 0.2, use


def test_the_machine_reading_tells_busy_stolen_and_all_time_from_proc_stat(tmp_path):
    import os

    from fedlab.bench.resources import machine_seconds

    stat = tmp_path / "stat"   # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  300 20 100 500 40 10 30 50 0 0\ncpu0 150 10 50 250 20 5 15 25 0 0\n")
    tick = os.sysconf("SC_CLK_TCK")
    assert machine_seconds(stat) == (460 / tick, 50 / tick, 1050 / tick)
    assert machine_seconds(tmp_path / "absent") == (0.0, 0.0, 0.0)


def test_repeated_runs_are_planned_round_robin_and_reported_as_spreads():
    from fedlab.bench.report import document, markdown
    from fedlab.bench.run_specs import BenchPlan, run_specs
    from fedlab.bench.trials import trials

    specs = run_specs(BenchPlan(algorithms="sze-ling,recompute", views="q3", ramp_max=1024, repeat=3))
    assert [(s.algorithm, s.trial) for s in specs] == [("sze-ling", 1), ("recompute", 1), ("sze-ling", 2),
                                                      ("recompute", 2), ("sze-ling", 3), ("recompute", 3)]
    several = {"view": False, "scale": False, "chaos": False, "placement": False, "trial": True}
    assert [s.folder(i, several) for i, s in enumerate(specs[:3], 1)] == ["01-sze-ling-r1", "02-recompute-r1",
                                                                          "03-sze-ling-r2"]

    def run(trial, top, achieved, p50, consistency="complete"):
        return {"label": "sze-ling", "view": "q3", "scale": 0.1, "chaos": "c", "placement": "spread",
                "trial": trial, "max_sustained_rate": top, "consistency": consistency,
                "ramp": [{"rate": 256.0, "achieved": 255.0, "sustained": True},
                         {"rate": top, "achieved": achieved, "sustained": True}],
                "staleness_ms": {"p50": p50, "p99": 2 * p50}, "staleness_delta_ms": {"p99": 3 * p50},
                "per_txn": {"bytes": 650.0}}

    runs = [run(1, 512.0, 497.0, 1000.0), run(2, 1024.0, 983.0, 1200.0), run(3, 512.0, 484.0, 3000.0, "strong")]
    spread, = trials(runs + [{**run(1, 512.0, 500.0, 900.0), "view": "q5"}])   # q5 ran once: no spread
    assert spread["trials"] == 3 and spread["consistency"] == ["complete", "complete", "strong"]
    assert spread["max_sustained_rate"] == {"median": 512.0, "min": 512.0, "max": 1024.0, "values": [512.0, 1024.0, 512.0]}
    assert (spread["committed_at_max"]["median"], spread["staleness_p50_ms"]["max"]) == (497.0, 3000.0)
    page = markdown(document({"machine": {"cpus": 2, "load_average": [0], "memory_gb": 1}, "seconds": 1,
                              "settings": {"workload": "mixed", "seed": 1, "duration": 15, "ramp_rates": [],
                                           "ramp_step": 8}, "runs": [], "targets": [], "plots": {},
                              "trials": [spread]}))
    assert "| sze-ling | q3 | 0.1 | 3 | 512 (512-1024) | 497 (484-983) | 1200 (1000-3000) |" in page


def test_versioned_is_compared_with_sze_ling_on_the_same_view_scale_and_chaos():
    """bench.answers_as_of: per transaction of the load phase, from each run's figures."""
    from fedlab.bench.answers_as_of import comparison

    def run(label, algorithm, compensations, source_seconds, view="q3"):
        return {"label": label, "algorithm": algorithm, "view": view, "scale": 0.1, "chaos": "none",
                "committed_in_load": 1000, "per_txn": {"compensations": compensations, "subqueries": 0.5,
                                                       "maintenance_bytes": 70.0},
                "cpu": [{"phase": "load", "by_role": {"source a": source_seconds, "source b": 1.0,
                                                      "warehouse (python)": 1.5, "spark JVM": 0.5, "load driver": 9.0}}],
                "staleness_ms": {"p50": 400.0, "p99": 900.0}, "consistency": "complete"}

    c = comparison([run("sze-ling", "sze-ling", 0.5, 1.0), run("versioned", "versioned", 0.0, 2.0),
                    run("versioned q5", "versioned", 0.0, 2.0, view="q5"), run("lazy@1", "lazy", 0.1, 1.0)])
    assert [r["label"] for r in c["rows"]] == ["sze-ling", "versioned", "versioned q5"]
    base, versioned = c["rows"][0], c["rows"][1]
    assert (base["source_cpu_ms_per_txn"], versioned["source_cpu_ms_per_txn"]) == (2.0, 3.0)
    assert versioned["warehouse_cpu_ms_per_txn"] == 2.0 and versioned["compensations_per_txn"] == 0.0
    assert c["finding"].startswith("sze-ling -> versioned on q3: compensations/txn 0.5 -> 0, source CPU ms/txn 2 -> 3")
    assert "q5" not in c["finding"]   # no Sze-Ling run on q5 to compare with
    assert comparison([run("sze-ling", "sze-ling", 0.5, 1.0)]) == {"rows": [], "finding": ""}
