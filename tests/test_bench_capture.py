"""`fedlab bench-capture` (bench.capture_cost): arguments it cannot run are refused in one line
before anything starts, and a tiny real run has a figure for every capture and client count,
its logical capture having numbered every pgbench transaction that changed something."""

from __future__ import annotations

import json

import pytest

from fedlab.checker.pg_server import PostgresServer
from fedlab.cli import main


@pytest.mark.parametrize("argv, message", [
    (["--clients", "0"], "--clients: each count at least 1 and given once, got 0"),
    (["--clients", "1,x"], "--clients: client counts separated by commas, got '1,x'"),
    (["--clients", "8,8"], "--clients: each count at least 1 and given once, got 8,8"),
    (["--seconds", "-1"], "--seconds: at least 1 (pgbench runs whole seconds), got -1"),
    (["--repeat", "0"], "--repeat: at least 1 trial, got 0"),
    (["--captures", "none,wal"], "--captures: unknown capture 'wal' (of none, triggers, logical)"),
    (["--captures", "logical,logical"], "--captures: each capture once, got logical,logical"),
])
def test_bench_capture_refuses_arguments_it_cannot_run_in_one_line_before_anything_starts(
        argv, message, tmp_path, capsys, monkeypatch):
    def no_server(*args, **kwargs):
        raise AssertionError("a PostgreSQL server was started")

    monkeypatch.setattr(PostgresServer, "start", no_server)
    assert main(["bench-capture", *argv, "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"fedlab bench-capture: {message}\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.postgres
@pytest.mark.slow
def test_tiny_bench_capture_has_every_figure_and_logical_capture_numbered_every_change(tmp_path):
    out = tmp_path / "out"
    assert main(["bench-capture", "--clients", "1", "--seconds", "1", "--repeat", "1", "--out", str(out)]) == 0
    result = json.loads((out / "bench_capture.json").read_text())
    figures = {(f["capture"], f["clients"]): f for f in result["figures"]}
    assert sorted(figures) == [("logical", 1), ("none", 1), ("triggers", 1)] and len(result["figures"]) == 3
    assert all(f["committed"] > 0 and f["failed"] == 0 and f["tps"] > 0 for f in figures.values()), figures
    logical = figures["logical", 1]
    # Every pgbench commit that changed something has its DSV; a remove.sql that found no order of
    # its own changed nothing and has none (the bound of tests/test_postgres_source.py's pgbench test).
    assert logical["committed"] * 0.7 <= logical["captured"] <= logical["committed"], logical
    assert {r["capture"]: r.get("relative_to_none") is not None for r in result["summary"]} == \
        {"none": False, "triggers": True, "logical": True}
    assert (out / "bench_capture.png").stat().st_size > 0
