"""Mutual TLS on the gRPC channels (fedio.channels, roles.certs) and the Source.History RPC
that lets `fedlab check` judge a run whose source files it cannot reach (live.remote_source).

A source node and its clients work over mutual TLS; a client with no certificate, or with one from
another CA, and a server whose certificate does not name the dialled host, are refused at the
handshake (UNAVAILABLE). The role commands take all three --tls-* flags or none, and name an
unreadable file. A live federation (Ray actors, Spark, Delta) runs entirely over TLS, and the
checker's verdict is the same whether it reads the sources' histories over the RPC or from their
files.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import yaml
from fake_warehouse import FakeWarehouse

from fedlab.fedio.channels import TlsFiles, client_channel
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.messages import to_pb
from fedlab.fedmodel.transactions import Modification, TransactionRequest
from fedlab.fedmodel.wire import pb, rpc
from fedlab.cli import main
from fedlab.live.check import committed_history
from fedlab.live.remote_source import RemoteSource
from fedlab.roles.certs import write_certificates
from fedlab.source_node.node import SourceNode
from fedlab.source_node.settings import SourceSettings

ROOT = Path(__file__).resolve().parent.parent
CATALOG = Catalog.from_dict({"sources": {
    "s1": {"customer": {"columns": ["c_custkey", "c_name"], "types": ["BIGINT", "VARCHAR"], "key": ["c_custkey"]}},
    "s2": {"orders": {"columns": ["o_orderkey", "o_custkey", "o_total"], "types": ["BIGINT", "BIGINT", "DOUBLE"],
                      "key": ["o_orderkey"]}}}})
VIEW = "SELECT c.c_name, o.o_orderkey, o.o_total FROM customer c JOIN orders o ON c.c_custkey = o.o_custkey"
INITIAL = {"customer": [(1, "ann"), (2, "bob")], "orders": [(10, 1, 5.0), (11, 2, 7.5)]}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, TlsFiles]:
    """Two independent throwaway CAs, and a certificate of the first CA naming another host only."""
    folder = tmp_path_factory.mktemp("certs")
    return {"ours": write_certificates(folder / "ours"), "theirs": write_certificates(folder / "theirs"),
            "elsewhere": write_certificates(folder / "elsewhere", hosts=["fedlab-src-s1.example"])}


@pytest.fixture
def node(tmp_path, certs):
    n = SourceNode(CATALOG, "s1", tmp_path / "s1.sqlite", {"customer": INITIAL["customer"]},
                   settings=SourceSettings(tls=certs["ours"]))
    n.start()
    yield n
    n.stop()


def health(address: str, tls) -> pb.HealthReply:
    with client_channel(address, tls) as channel:
        return rpc.SourceStub(channel).Health(pb.HealthRequest(), timeout=10)


def refused(address: str, tls) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as err:
        health(address, tls)
    return err.value.code()


# ---- the channels ----

def test_a_source_and_its_client_talk_over_mutual_tls(node, certs):
    with client_channel(node.address, certs["ours"]) as channel:
        stub = rpc.SourceStub(channel)
        reply = stub.Commit(to_pb(TransactionRequest("t1", inserts={"customer": [(3, "cy")]}), CATALOG), timeout=10)
        assert reply.dsv == 2
        assert stub.Health(pb.HealthRequest(), timeout=10).dsv == 2
    # the certificate names localhost too
    assert health(f"localhost:{node.port}", certs["ours"]).source == "s1"


def test_a_client_without_a_certificate_is_refused(node, certs):
    assert refused(node.address, None) == grpc.StatusCode.UNAVAILABLE
    # TLS that trusts the server but presents no certificate of its own: not mutual, refused
    server_auth_only = grpc.ssl_channel_credentials(root_certificates=certs["ours"].ca_pem)
    with grpc.secure_channel(node.address, server_auth_only) as channel:
        with pytest.raises(grpc.RpcError) as err:
            rpc.SourceStub(channel).Health(pb.HealthRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_certificate_from_another_ca_is_refused(node, certs):
    ours, theirs = certs["ours"], certs["theirs"]
    # trusts our CA (so it accepts the server) but presents a certificate our CA did not sign
    impostor = TlsFiles(ours.ca, theirs.cert, theirs.key, ours.ca_pem, theirs.cert_pem, theirs.key_pem)
    assert refused(node.address, impostor) == grpc.StatusCode.UNAVAILABLE
    assert refused(node.address, theirs) == grpc.StatusCode.UNAVAILABLE


def test_a_server_certificate_that_does_not_name_the_host_is_refused(tmp_path, certs):
    node = SourceNode(CATALOG, "s1", tmp_path / "s1.sqlite", {"customer": []},
                      settings=SourceSettings(tls=certs["elsewhere"]))
    node.start()
    try:
        assert refused(node.address, certs["elsewhere"]) == grpc.StatusCode.UNAVAILABLE
    finally:
        node.stop()


def test_notifications_reach_the_warehouse_over_mutual_tls(tmp_path, certs):
    warehouse = FakeWarehouse(tls=certs["ours"])
    node = SourceNode(CATALOG, "s1", tmp_path / "s1.sqlite", {"customer": []}, warehouse_address=warehouse.address,
                      settings=SourceSettings(resend_interval=0.3, tls=certs["ours"]))
    node.start()
    try:
        for i in range(3):
            node.store.commit(TransactionRequest(f"t{i}", inserts={"customer": [(i, f"c{i}")]}))
        node.wake()
        assert warehouse.wait_for("s1", 3) == [2, 3, 4]
    finally:
        node.stop()
        warehouse.stop()


# ---- the history RPC ----

def test_the_history_rpc_returns_what_the_file_holds(tmp_path, certs):
    node = SourceNode(CATALOG, "s1", tmp_path / "s1.sqlite", {"customer": INITIAL["customer"]},
                   settings=SourceSettings(tls=certs["ours"]))
    node.start()
    try:
        node.store.commit(TransactionRequest("t1", inserts={"customer": [(3, "cy")]}))
        node.store.commit(TransactionRequest("t2", deletes={"customer": [(1,)]},
                                             modifies={"customer": [Modification((2,), (2, "bo"))]}))
        remote = committed_history(CATALOG, "s1", RemoteSource(node.address, certs["ours"]))
    finally:
        node.stop()
    from_file = committed_history(CATALOG, "s1", tmp_path / "s1.sqlite")
    assert remote[0] == from_file[0] == 3
    # a table's rows come in no particular order
    assert {r: (brv, sorted(rows)) for r, (brv, rows) in remote[1].items()} == \
        {r: (brv, sorted(rows)) for r, (brv, rows) in from_file[1].items()} == {"customer": (3, [(2, "bo"), (3, "cy")])}
    assert [n.txn_id for n in remote[2]] == ["t1", "t2"]
    assert remote[2] == from_file[2]


# ---- the role commands' flags ----

@pytest.mark.parametrize("flags, message", [
    (["--tls-cert", "{d}/tls.crt"], "mutual TLS needs all of --tls-cert, --tls-key, --tls-ca; missing --tls-key, --tls-ca"),
    (["--tls-cert", "{d}/tls.crt", "--tls-key", "{d}/tls.key", "--tls-ca", "{tmp}/nope.crt"],
     "TLS CA certificate {tmp}/nope.crt: cannot read it"),
    (["--tls-cert", "{tmp}/catalog.yaml", "--tls-key", "{d}/tls.key", "--tls-ca", "{d}/ca.crt"],
     "TLS certificate {tmp}/catalog.yaml: not a PEM file"),
])
@pytest.mark.parametrize("role", ["source", "warehouse", "load", "check"])
def test_role_commands_take_all_three_tls_flags_or_none(tmp_path, capsys, certs, role, flags, message):
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(CATALOG.to_dict()))
    fill = {"d": certs["ours"].ca.parent, "tmp": tmp_path}
    argv = {"source": ["source", "--name", "s1", "--catalog", str(tmp_path / "catalog.yaml"),
                       "--db", str(tmp_path / "s1.sqlite")],
            "warehouse": ["warehouse", "--config", str(tmp_path / "run.yaml")],
            "load": ["load", "--config", str(tmp_path / "run.yaml")],
            "check": ["check", str(tmp_path), "--source", "s1=127.0.0.1:1"]}[role]
    assert main(argv + [f.format(**fill) for f in flags]) == 2
    err = capsys.readouterr().err
    assert message.format(**fill) in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "s1.sqlite").exists()   # refused before anything was opened


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_fedlab_source_serves_over_mutual_tls_with_the_flags(tmp_path, certs):
    (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(CATALOG.to_dict()))
    tls, port = certs["ours"], _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fedlab.cli", "source", "--name", "s1",
                             "--catalog", str(tmp_path / "catalog.yaml"), "--db", str(tmp_path / "s1.sqlite"),
                             "--port", str(port), "--tls-cert", str(tls.cert), "--tls-key", str(tls.key),
                             "--tls-ca", str(tls.ca)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "POD_IP": ""})
    try:
        line = proc.stdout.readline()
        assert f"serving on 127.0.0.1:{port} (mutual TLS)" in line, line
        assert health(f"127.0.0.1:{port}", tls).source == "s1"
        assert refused(f"127.0.0.1:{port}", None) == grpc.StatusCode.UNAVAILABLE
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


# ---- a live federation over TLS, checked through the RPC and through the files ----

@pytest.mark.spark
@pytest.mark.ray
@pytest.mark.slow
def test_a_live_federation_over_tls_is_complete_by_rpc_and_by_file(spark, ray_runtime, tmp_path, capsys):
    from fedlab.live.federation import Federation
    from fedlab.warehouse.settings import WarehouseSettings

    run_dir = tmp_path / "run"
    tls = write_certificates(run_dir / "tls")
    fed = Federation(CATALOG, VIEW, INITIAL, run_dir, spark, WarehouseSettings(batch_interval=0.2), tls=tls)
    fed.start()
    try:
        assert all(a.startswith("127.0.0.1:") for a in fed.addresses.values())
        transactions = [
            ("s1", TransactionRequest("c3", inserts={"customer": [(3, "cy")]})),
            ("s2", TransactionRequest("o12", inserts={"orders": [(12, 3, 1.0), (13, 1, 2.0)]})),
            ("s1", TransactionRequest("c1", modifies={"customer": [Modification((1,), (1, "anne"))]})),
            ("s2", TransactionRequest("o11", deletes={"orders": [(11,)]})),
            ("s1", TransactionRequest("c2", deletes={"customer": [(2,)]})),
        ]
        for source, request in transactions:
            fed.commit(source, request)
        assert fed.wait_until_applied(timeout=60), fed.warehouse.status()
        assert fed.read_view() == {("anne", 10, 5.0): 1, ("anne", 13, 2.0): 1, ("cy", 12, 1.0): 1}
        # The warehouse's history files are complete once it has committed its last batch.
        fed.groups.pop("warehouse").close()
        flags = ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key), "--tls-ca", str(tls.ca)]
        sources = [f for s, a in fed.addresses.items() for f in ("--source", f"{s}={a}")]
        assert main(["check", str(run_dir), "--json", *sources, *flags]) == 0
        by_rpc = json.loads(capsys.readouterr().out)
        # without the client certificate the sources refuse the checker: exit 2, one line
        assert main(["check", str(run_dir), *sources]) == 2
        assert "UNAVAILABLE" in capsys.readouterr().err
    finally:
        fed.stop()
    assert main(["check", str(run_dir), "--json"]) == 0
    by_file = json.loads(capsys.readouterr().out)
    verdict = ("level", "lost", "doubled", "transactions", "states", "first_violation")
    assert {k: by_rpc[k] for k in verdict} == {k: by_file[k] for k in verdict}
    assert (by_rpc["level"], by_rpc["transactions"], by_rpc["lost"], by_rpc["doubled"]) == ("complete", 5, [], [])
