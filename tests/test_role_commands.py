"""The role commands the Helm chart runs (`fedlab source`, `warehouse`, `load`, `chaos-k8s`):
the chart's command lines parse, bad input gets one line and exit 2, and `fedlab source` plus
`fedlab load` work as processes on loopback (no Spark, no Ray here: see test_process_chaos.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedlab.fedio.channels import client_channel
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.viewdef import parse_view
from fedlab.fedmodel.wire import pb, rpc
from fedlab.cli import build_parser, main
from fedlab.loadgen.synthetic_load import SyntheticStream
from fedlab.source_node.memory_store import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
CATALOG = {"sources": {
    "s1": {"customer": {"columns": ["c_custkey", "c_name", "c_nationkey"], "types": ["BIGINT", "VARCHAR", "BIGINT"],
                        "key": ["c_custkey"]}},
    "s2": {"orders": {"columns": ["o_orderkey", "o_custkey", "o_total", "o_date"],
                      "types": ["BIGINT", "BIGINT", "DOUBLE", "DATE"], "key": ["o_orderkey"]}}},
    "constraints": {"fds": [], "ri": []}}
VIEW = "SELECT c.c_name, o.o_orderkey, o.o_total FROM customer c JOIN orders o ON c.c_custkey = o.o_custkey"

# The chart's command lines (helm/federation/README.md, "What the chart expects of the fedlab CLI").
CHART_COMMANDS = [
    "source --name s1 --catalog /etc/fedlab/config/catalog.yaml --db /var/fedlab/data/s1.sqlite --port 50051 "
    "--warehouse lab-fedlab-warehouse:50052 --ray-address lab-fedlab-ray-head:6379 --ray-resource fedlab_source_s1 "
    "--faults-file /etc/fedlab/faults/faults.json --tls-cert a --tls-key b --tls-ca c --metrics-port 9464",
    "warehouse --config /etc/fedlab/config/run.yaml --name wh2 --port 50052 --data s3a://bucket/delta "
    "--spark-master k8s://https://kubernetes.default.svc:443 --faults-file /etc/fedlab/faults/faults.json "
    "--tls-cert a --tls-key b --tls-ca c --metrics-port 9464",
    "load --config /etc/fedlab/config/run.yaml --duration 120s --rate 20 --tls-cert a --tls-key b --tls-ca c "
    "--metrics-port 9464",
    "check /var/fedlab/data/run/lab --expect complete --source s1=lab-fedlab-src-s1:50051 "
    "--source s2=lab-fedlab-src-s2:50051 --tls-cert a --tls-key b --tls-ca c",
]


@pytest.mark.parametrize("command", CHART_COMMANDS, ids=lambda c: c.split()[0])
def test_the_charts_command_lines_parse(command):
    args = build_parser().parse_args(command.split())
    assert args.command == command.split()[0]


@pytest.mark.parametrize("argv, message", [
    (["source", "--name", "s1", "--catalog", "{catalog}", "--db", "{tmp}/s1.sqlite", "--tls-cert", "x"],
     "mutual TLS needs all of --tls-cert, --tls-key, --tls-ca; missing --tls-key, --tls-ca"),
    (["source", "--name", "s9", "--catalog", "{catalog}", "--db", "{tmp}/s9.sqlite"], "no source of that name"),
    (["source", "--name", "s1", "--catalog", "{tmp}/missing.yaml", "--db", "{tmp}/s1.sqlite"], "cannot read"),
    (["source", "--name", "s1", "--catalog", "{catalog}", "--db", "{tmp}/s1.sqlite", "--faults-file", "{tmp}/bad.json"],
     "drop is a probability"),
    (["warehouse", "--config", "{tmp}/missing.yaml"], "cannot read"),
    (["warehouse", "--config", "{config}", "--data", "{tmp}/delta", "--recompute-period", "0"],
     "--recompute-period must be a positive number of seconds"),
    (["warehouse", "--config", "{config}", "--data", "{tmp}/delta", "--batch-interval", "0"],
     "--batch-interval must be a positive number of seconds, got 0.0"),
    (["warehouse", "--config", "{config}", "--data", "{tmp}/delta", "--combine-max", "0"],
     "--combine-max must be a whole number >= 1, got 0"),
    (["load", "--config", "{config}", "--duration", "soon"], "bad duration"),
    (["warehouse", "--config", "{tmp}/other.yaml"], "run.algorithm: unknown algorithm 'sweeep' (registered: "),
    (["warehouse", "--config", "{tmp}/twice.yaml"], "views: 'again' is named twice"),
    (["warehouse", "--config", "{tmp}/nameless.yaml"], "views[0]: needs a name and a view"),
    (["warehouse", "--config", "{tmp}/outer.yaml"], "views[0] (outer): "),
    (["warehouse", "--config", "{tmp}/elsewhere.yaml"], "views[0] (again): no warehouse named 'wh3' "
                                                        "(the warehouses: warehouse, wh2)"),
    (["warehouse", "--config", "{tmp}/idle.yaml"], "warehouses: 'wh2' keeps no view"),
    (["warehouse", "--config", "{tmp}/two-firsts.yaml"], "warehouses[0]: 'warehouse' is named twice"),
    (["warehouse", "--config", "{tmp}/addressless.yaml"], "warehouses[0]: needs a name and an address"),
    (["warehouse", "--config", "{tmp}/elsewhere-ok.yaml", "--data", "{tmp}/delta", "--name", "wh9"],
     "--name wh9: the config has no warehouse of that name (it has warehouse, wh2)"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(CATALOG))
    (tmp_path / "bad.json").write_text(json.dumps({"drop": 2}))
    config = {"catalog": "catalog.yaml", "view": VIEW, "sources": [
        {"name": "s1", "address": "127.0.0.1:1"}, {"name": "s2", "address": "127.0.0.1:2"}]}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "other.yaml").write_text(yaml.safe_dump({**config, "run": {"algorithm": "sweeep"}}))
    again = {"name": "again", "view": VIEW}
    (tmp_path / "twice.yaml").write_text(yaml.safe_dump({**config, "views": [again, again]}))
    (tmp_path / "nameless.yaml").write_text(yaml.safe_dump({**config, "views": [{"view": VIEW}]}))
    (tmp_path / "outer.yaml").write_text(yaml.safe_dump({**config, "views": [  # an algorithm that cannot keep it
        {"name": "outer", "view": VIEW.replace(" JOIN ", " LEFT JOIN "), "algorithm": "sweep"}]}))
    wh2 = [{"name": "wh2", "address": "127.0.0.1:3"}]
    for name, views, warehouses in [("elsewhere", [{**again, "warehouse": "wh3"}], wh2), ("idle", [again], wh2),
                                    ("two-firsts", [again], [{"name": "warehouse", "address": "127.0.0.1:3"}]),
                                    ("addressless", [again], [{"name": "wh2"}]),
                                    ("elsewhere-ok", [{**again, "warehouse": "wh2"}], wh2)]:
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**config, "views": views, "warehouses": warehouses}))
    fill = {"catalog": tmp_path / "catalog.yaml", "config": tmp_path / "run.yaml", "tmp": tmp_path}
    assert main([a.format(**fill) for a in argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_metrics_port_taken_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(CATALOG))
    handler = signal.getsignal(signal.SIGTERM)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["source", "--name", "s1", "--catalog", str(tmp_path / "catalog.yaml"), "--db",
                     str(tmp_path / "s1.sqlite"), "--metrics-port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fedlab source: cannot serve metrics on 127.0.0.1:{port}: ") and len(err.splitlines()) == 1
    # and this process's SIGTERM is as it was: a pool forked by a later test still ends on it
    assert signal.getsignal(signal.SIGTERM) is handler


def test_synthetic_stream_emits_only_valid_transactions():
    catalog = Catalog.from_dict(CATALOG)
    stream = SyntheticStream(catalog, parse_view(VIEW, catalog), {}, {"insert": 1, "delete": 1, "modify": 2},
                             skew=1.1, seed=3)
    replicas = {s: MemoryStore(catalog, s) for s in catalog.sources}
    for source, request in [*stream.initial_load(50), *(stream.next() for _ in range(300))]:
        replicas[source].commit(request)   # raises ModelError on an invalid one
    assert all(len(r.relations[name]) for r in replicas.values() for name in r.relations)
    assert replicas["s2"].relations == stream.mirrors["s2"].relations
    customers = {c[0] for c in replicas["s1"].relations["customer"].values()}
    assert any(o[1] in customers for o in replicas["s2"].relations["orders"].values())   # the view joins
    with pytest.raises(ModelError, match="mix"):
        SyntheticStream(catalog, parse_view(VIEW, catalog), {}, {"upsert": 1})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_source_processes_under_load_follow_their_faults_file_and_stop_on_sigterm(tmp_path, capsys):
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(CATALOG))
    faults = tmp_path / "faults.json"
    faults.write_text(json.dumps({"drop": 0.0, "seed": 1, "version": 0}))
    ports = {"s1": _free_port(), "s2": _free_port()}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({
        "run": {"id": "t", "dir": "run", "algorithm": "sze-ling", "seed": 1}, "catalog": "catalog.yaml", "view": VIEW,
        "sources": [{"name": s, "address": f"127.0.0.1:{p}"} for s, p in ports.items()],
        "workload": {"kind": "synthetic", "initialRows": 30, "mix": {"insert": 0.5, "delete": 0.25, "modify": 0.25}},
        "load": {"duration": "2s", "rate": 25}}))
    procs = {s: subprocess.Popen([sys.executable, "-m", "fedlab.cli", "source", "--name", s,
                                  "--catalog", str(tmp_path / "catalog.yaml"), "--db", str(tmp_path / f"{s}.sqlite"),
                                  "--port", str(p), "--faults-file", str(faults)],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env={**os.environ, "POD_IP": ""})
             for s, p in ports.items()}
    try:
        for s, proc in procs.items():
            lines = [proc.stdout.readline() for _ in range(2)]
            assert any(f"serving on 127.0.0.1:{ports[s]}" in line for line in lines), lines
        assert main(["load", "--config", str(tmp_path / "run.yaml"), "--settle", "0"]) == 0
        out = capsys.readouterr().out
        assert "initial data: 60 rows inserted" in out and "committed 50, rejected 0" in out
        summary = json.loads((tmp_path / "run" / "load.json").read_text())
        assert (summary["committed"], summary["rejected"]) == (50, 0)
        dsv = {s: rpc.SourceStub(client_channel(f"127.0.0.1:{p}", None)).Health(pb.HealthRequest(), timeout=5).dsv
               for s, p in ports.items()}
        assert sum(dsv.values()) - 2 == 50 + 2   # every update plus one initial-load transaction per relation
        faults.write_text(json.dumps({"answer_drop": 0.5, "seed": 1, "version": 1}))
        deadline = time.monotonic() + 10
        line = ""
        while "answer_drop" not in line and time.monotonic() < deadline:
            line = procs["s1"].stdout.readline()
        assert '{"answer_drop": 0.5}' in line
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        assert [proc.wait(30) for proc in procs.values()] == [0, 0]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_the_load_asks_a_source_again_while_it_is_paused_or_cut_off(monkeypatch):
    """A call that fails (a source's snapshot stream broken by its pause: keepalive) is asked
    again until it answers; past the deadline the role stops with one line naming who."""
    import grpc

    from fedlab.roles import load
    from fedlab.roles.process import RoleError

    class Unavailable(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNAVAILABLE

    monkeypatch.setattr(load.time, "sleep", lambda seconds: None)
    attempts = []

    def snapshot():
        attempts.append(1)
        if len(attempts) < 3:
            raise Unavailable()
        return ["chunk"]
    assert load._answered("source s1's snapshot", snapshot, time.monotonic() + 60) == ["chunk"] and len(attempts) == 3
    with pytest.raises(RoleError, match=r"^source s2's snapshot did not answer before --wait ran out \(UNAVAILABLE\)$"):
        load._answered("source s2's snapshot", lambda: (_ for _ in ()).throw(Unavailable()), time.monotonic() - 1)
