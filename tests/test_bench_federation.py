"""`fedlab bench --federation`: cost as the federation grows. The runs are
planned over every shape and size, each run's figures become a row of the table "Cost as the
federation grows" and a point of plots/federation_size.png, and a short live bench over two and
three sources measures every figure of every run, each judged complete by the checker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from background_bench import BackgroundBench

FIGURES = ("cpu_ms_per_txn", "bytes_per_txn", "staleness_p50_ms", "staleness_p99_ms", "to_delta_p50_ms",
           "to_delta_p99_ms", "memory_per_source_mb")


def test_each_shape_runs_at_each_size_smallest_first_over_its_own_catalog_and_view():
    from fedlab.bench.run_specs import ONE_PER_SOURCE, BenchPlan, run_specs, synthetic_federations

    federations = synthetic_federations("star,chain", "6,3,6", 100, seed=1)
    specs = run_specs(BenchPlan(algorithms="sze-ling", chaos=("none",), rate=50, duration=10, ramp_max=0,
                                synthetic=tuple(federations)))
    assert [s.view for s in specs] == ["star-3", "chain-3", "star-6", "chain-6"]
    assert all(s.scale is None and s.placement == ONE_PER_SOURCE for s in specs)
    star6 = specs[2]
    assert len(star6.catalog().sources) == 6 and star6.view_sql().startswith("SELECT r01.k01")
    assert star6.data == "star-6" and star6.folder(3, {"view": True, "scale": False, "chaos": False,
                                                         "placement": False, "trial": False}) == "03-sze-ling-star-6"


def _run(shape, sources, cpu_by_role=None, consistency="complete", idle=None):
    """A run's record as bench.runner leaves it, with the figures this table reads."""
    return {"label": "sze-ling", "algorithm": "sze-ling", "trial": 1, "rate_target": 50.0, "rate_achieved": 49.5,
            "synthetic": {"shape": shape, "sources": sources, "rows_per_relation": 100},
            "committed_in_load": 500, "consistency": consistency,
            "cpu": [{"phase": "load", "rate": 50.0, "seconds": 10.0, "busy": 0.4, "by_role": cpu_by_role}]
            if cpu_by_role else [],
            "per_txn": {"bytes": 100.0 * sources, "subqueries": sources - 1.0},
            "staleness_ms": {"p50": 10.0 * sources, "p99": 30.0 * sources},
            "staleness_delta_ms": {"p50": 500.0, "p99": 900.0},
            "peak_memory_by_process_mb": {f"source s{i:02d}": 170.0 + i for i in range(1, sources + 1)},
            **({"idle": idle} if idle else {})}


def test_the_table_reads_each_figure_from_the_run_and_says_how_it_grew():
    from fedlab.bench.federation_size import finding, growth

    cpu = {"source s01": 1.0, "source s02": 1.0, "warehouse (python)": 2.0, "spark JVM": 1.0, "load driver": 0.5,
           "ray and helpers": 0.5, "profilers (py-spy)": 4.0}
    idle = {"seconds": 20.0, "share_of_a_core": 0.1, "by_role": {"source s01": 1.0, "ray and helpers": 1.0}}
    rows = growth([_run("chain", 4, cpu), _run("chain", 2, cpu, idle=idle), _run("star", 2, consistency="failed"),
                   {"label": "sze-ling", "view": "q3"}])   # a TPC-H run has no row
    assert [(r["shape"], r["sources"]) for r in rows] == [("chain", 2), ("chain", 4), ("star", 2)]
    chain2 = rows[0]
    assert chain2["cpu_ms_per_txn"] == 12.0   # 6 CPU-s over 500 transactions, the profilers left out
    assert chain2["cpu_ms_per_txn_by_part"] == {"sources": 4.0, "warehouse": 6.0, "driver": 1.0, "other": 1.0}
    assert chain2["cpu_ms_per_txn_above_idle"] == 10.0   # less 2 idle CPU-s in 20 s, so 1 in the load's 10 s
    assert chain2["memory_per_source_mb"] == 171.5 and chain2["sources_measured"] == 2
    assert (chain2["bytes_per_txn"], chain2["staleness_p99_ms"], chain2["to_delta_p50_ms"]) == (200.0, 60.0, 500.0)
    assert rows[1]["cpu_ms_per_txn_above_idle"] is None   # no idle reading
    assert rows[2]["cpu_ms_per_txn"] is None and rows[2]["consistency"] == "failed"
    assert finding(rows) == ("chain (sze-ling), 2 -> 4 sources: CPU/txn 12 -> 12 ms (1.0x), bytes/txn 200 -> 400 "
                             "(2.0x), staleness p99 60 -> 120 ms (2.0x), to Delta p99 900 -> 900 ms (1.0x), "
                             "memory per source 171.5 -> 172.5 MB (1.0x).")


def test_the_summary_has_the_table_and_no_tpch_targets():
    from fedlab.bench.federation_size import finding, growth
    from fedlab.bench.report import document, markdown

    rows = growth([_run("star", 3, {"source s01": 1.0}), _run("star", 6, consistency="failed")])
    page = markdown(document({"machine": {"cpus": 2, "load_average": [0], "memory_gb": 1}, "seconds": 1,
                              "settings": {"workload": "mixed", "seed": 1, "duration": 10, "ramp_rates": [],
                                           "ramp_step": 8}, "runs": [], "targets": [], "plots": {},
                              "federation_size": {"rows": rows, "finding": finding(rows)}}))
    assert "## Cost as the federation grows" in page and "Targets" not in page
    assert "| sze-ling | star | 3 | 50 / 49.5 | 2 | 2 / 0 / 0 / 0 | - | 300 | 2 | 30 / 90 | 500 / 900 | 172 | - | complete |" in page
    assert "| sze-ling | star | 6 | 50 / 49.5 | - | - | - | 600 | 5 | 60 / 180 | 500 / 900 | 173.5 | - | failed |" in page


NEMESIS = "pause s01 at 0.5s for 1s"   # s01: a source of every synthetic federation
BENCH = BackgroundBench(__name__, "--algorithms", "sze-ling", "--federation", "chain", "--sources", "2,3",
                        "--relation-rows", "300", "--rate", "10", "--duration", "2", "--ramp-max", "0",
                        "--idle", "0", "--settle", "30", "--nemesis", NEMESIS, timeout=600)


@pytest.fixture(scope="module")
def bench():
    return BENCH.result()   # run beside the rest of the suite (tests/background_bench.py)


@pytest.mark.slow
def test_every_run_of_a_short_federation_bench_has_every_figure_and_is_complete(bench):
    out, summary = bench
    assert json.loads((out / "summary.json").read_text()) == summary
    assert summary["settings"]["federation"] == "chain" and summary["targets"] == []
    assert [r["view"] for r in summary["runs"]] == ["chain-2", "chain-3"]
    for run in summary["runs"]:
        assert len(run["sources"]) == run["synthetic"]["sources"]
        assert run["consistency"] == "complete", run["notes"]
    rows = summary["federation_size"]["rows"]
    assert [(r["shape"], r["sources"]) for r in rows] == [("chain", 2), ("chain", 3)]
    for row in rows:
        assert all(isinstance(row[k], float) and row[k] > 0 for k in FIGURES), row
        assert row["sources_measured"] == row["sources"] and row["rate_achieved"] > 0
        assert row["cpu_ms_per_txn_by_part"]["sources"] > 0 and row["cpu_ms_per_txn_by_part"]["warehouse"] > 0
        assert row["to_delta_p50_ms"] >= row["staleness_p50_ms"]   # Delta never before the core's view
        assert row["consistency"] == "complete"
    assert "chain (sze-ling), 2 -> 3 sources: CPU/txn" in summary["federation_size"]["finding"]
    assert "## Cost as the federation grows" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_each_run_meets_the_nemesis_and_reports_what_it_did(bench):
    import matplotlib.image

    out, summary = bench
    assert summary["settings"]["nemesis"] == NEMESIS
    page = (out / "summary.md").read_text()
    for run in summary["runs"]:
        assert [a["fault"] for a in run["nemesis"]["applied"]] == [NEMESIS]
        assert [e.split(" (")[0] for e in run["nemesis"]["events"]] == ["paused source s01", "resumed source s01"]
        before, paused = run["fault_phases"]
        assert (before["phase"], paused["phase"]) == ("before any fault", NEMESIS)
        assert 0.9 <= paused["window_s"] < 5, paused       # thawed after its second, not at the load's end
        assert 0 < before["committed"] + paused["committed"] <= run["transactions"]
        plot = Path(run["fault_plot"])
        assert matplotlib.image.imread(plot).shape[1] > 600
        assert f"]({plot.relative_to(out)})" in page
    assert "| phase of the load (from a fault's start to the next's) |" in page


@pytest.mark.slow
def test_the_federation_size_plot_opens_and_the_summaries_embed_it(bench):
    import matplotlib.image

    out, summary = bench
    path = summary["plots"]["federation_size"]
    assert path == "plots/federation_size.png"
    image = matplotlib.image.imread(out / path)
    assert image.shape[0] > 400 and image.shape[1] > 600
    assert f"]({path})" in (out / "summary.md").read_text() and f'<img src="{path}"' in (out / "summary.html").read_text()
