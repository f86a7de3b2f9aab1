"""`fedlab bench --workload ch` (bench.ch_workload): arguments it cannot run are refused in one line
before anything starts; a short real trial, go-tpc's TPC-C against the tpcc source captured from
the WAL, with the source's node and PostgreSQL itself killed during the load, ends with every
CH view complete against its oracle and go-tpc's own figures beside the federation's."""

from __future__ import annotations

import json

import pytest

from fedlab.checker.pg_server import PostgresServer
from fedlab.cli import main
from fedlab.warehouse.core import registry


@pytest.mark.parametrize("argv, message", [
    ([], "--workload ch: go-tpc writes a PostgreSQL database; add --source-engine postgres"),
    (["--source-engine", "postgres", "--views", "q2"],
     "--views: unknown CH-benCHmark view 'q2'; choose one of q1, q18, q3, q5, q6"),
    (["--source-engine", "postgres", "--ch-clients", "0"], "--ch-warehouses and --ch-clients must be at least 1"),
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
