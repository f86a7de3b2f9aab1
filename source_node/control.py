"""A source's operator calls, made over the source's own gRPC server, and where that server is.

A source actor's main thread is held by a task that waits for its node to stop (source_node.actor):
while a task runs there, Ray's core worker does not wake that thread every 10 ms to check for
signals, which cost each idle source 8-9 ms of CPU a second (docs/results-history.md, 2026-12-04). Ray
can then deliver no call to the actor, so its operator talks to the source's server instead
(SourceControl), and finds it where the actor publishes its address: Ray's key-value store, where a
restarted actor, whose server may listen on another port, publishes its new one.

    address = wait_for_address("ds1", tls)            # once its server answers
    SourceControl(address, tls).set_faults(notification_drop=0.05)
"""

from __future__ import annotations

import json
import time

import grpc
from ray.experimental import internal_kv

from fedlab.fedio.channels import TlsFiles, client_channel
from fedlab.fedmodel.wire import pb, rpc
from fedlab.source_node.ray_runtime import NAMESPACE

ANSWER_TIMEOUT = 2.0   # seconds a server that is up takes at most to answer Health


def _key(source: str) -> str:
    return f"source-address/{source}"


def publish_address(source: str, address: str) -> None:
    """Called by the source's actor once its server listens (from the actor's process)."""
    internal_kv._internal_kv_put(_key(source), address.encode(), overwrite=True, namespace=NAMESPACE)


def wait_for_address(source: str, tls: TlsFiles | None = None, timeout: float = 120.0, local: bool = False) -> str:
    """The address the source's actor published, once its server answers there as that source:
    while Ray restarts the actor the old address stays published and answers nothing. With `local` (the actor is
    pinned to this machine), its port on the loopback address instead, which a cluster's TLS
    certificates name. TimeoutError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        published = internal_kv._internal_kv_get(_key(source), namespace=NAMESPACE)
        if published is not None:
            address = published.decode()
            if local:
                address = f"127.0.0.1:{address.rpartition(':')[2]}"
            try:
                # A port a stopped source's server had may serve another source's by now.
                if SourceControl(address, tls).health()["source"] == source:
                    return address
            except grpc.RpcError:
                pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"source {source}: no server answered at its published address "
                               f"({published.decode() if published else 'none yet'}) within {timeout:g} s")
        time.sleep(0.2)


class SourceControl:
    """The operator's calls to one source (proto/federation.proto, service Source), each blocking
    until answered; a failed call raises grpc.RpcError (INVALID_ARGUMENT with the reason for bad input)."""

    def __init__(self, address: str, tls: TlsFiles | None = None, stub: rpc.SourceStub | None = None):
        """`stub`: one already open to `address` (the federation's)."""
        self.address = address
        self.stub = stub or rpc.SourceStub(client_channel(address, tls))

    def set_warehouse(self, address: str | None) -> None:
        """Where the default subscriber's notifications go (None: nowhere); kept across restarts."""
        self.stub.SetWarehouse(pb.SetWarehouseRequest(address=address or ""), timeout=30)

    def subscribe(self, name: str, address: str | None, relations: list[str] | None = None) -> None:
        """Another warehouse subscribes (source_node.node.SourceNode.subscribe), kept across restarts."""
        self.stub.Subscribe(pb.SubscribeRequest(name=name, address=address or "", relations=relations or []),
                            timeout=60)

    def unsubscribe(self, name: str) -> None:
        """Removes a subscriber and releases what was kept for it."""
        self.stub.Unsubscribe(pb.UnsubscribeRequest(name=name), timeout=60)

    def set_faults(self, **rates: float) -> dict:
        """Changes fault rates (source_node.faults.FaultInjector.configure), kept across restarts;
        returns every rate in force, by kind."""
        return json.loads(self.stub.SetFaults(pb.SetFaultsRequest(rates=rates), timeout=30).rates_json)

    def health(self, timeout: float = ANSWER_TIMEOUT) -> dict:
        """The source's versions, what its subscribers have not acknowledged (the most, and each
        one's), its address, its process id, its message log (None: none), and with capture
        logical the WAL its slot keeps and the warning of a bound reached ("": none)."""
        reply = self.stub.Health(pb.HealthRequest(), timeout=timeout)
        return {"source": reply.source, "address": self.address, "dsv": reply.dsv, "brv": dict(reply.brv),
                "unacknowledged": reply.unacknowledged, "subscribers": dict(reply.subscribers),
                "pid": reply.pid, "message_log": reply.message_log or None,
                "metrics": _beside(self.address, reply.metrics_port),
                "retained_wal": reply.retained_wal, "capture_warning": reply.capture_warning}

    def stop(self) -> None:
        """Stops the node (server, senders, store); its actor's process stays until killed."""
        self.stub.Stop(pb.StopRequest(), timeout=30)


def _beside(address: str, port: int) -> str | None:
    """The host of `address` with `port`: where the source's metrics serve (None: no endpoint)."""
    return f"{address.rsplit(':', 1)[0]}:{port}" if port else None
