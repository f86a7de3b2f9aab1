"""fedio.channels: a channel whose peer was away reaches it again soon after it is back."""

import socket
import time

import grpc

from fedlab.fedio.channels import RECONNECT_MS, add_port, client_channel, new_server


def _echo_server(port: int) -> grpc.Server:
    server = new_server(workers=2)
    echo = grpc.unary_unary_rpc_method_handler(lambda request, context: request)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.Echo", {"Call": echo})])
    add_port(server, f"127.0.0.1:{port}", None)
    server.start()
    return server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_peer_back_after_ten_seconds_away_is_reached_within_a_few_reconnect_intervals():
    """Away for 10 s, gRPC's default backoff (1 s growing by 1.6 to 120 s, jitter 20%) would try
    next at 12.6-19 s; capped at RECONNECT_MS, the first calls after the peer's return succeed."""
    port = _free_port()
    call = client_channel(f"127.0.0.1:{port}", None).unary_unary("/test.Echo/Call")
    away_until = time.monotonic() + 10
    while time.monotonic() < away_until:   # fail-fast calls, each one a failed connection attempt
        try:
            call(b"x", timeout=1)
        except grpc.RpcError as err:
            assert err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        time.sleep(0.2)
    server = _echo_server(port)
    try:
        back = time.monotonic()
        answered = None
        while answered is None and time.monotonic() - back < 2.5 * RECONNECT_MS / 1000:
            try:
                answered = call(b"ping", timeout=1)
            except grpc.RpcError:
                time.sleep(0.1)
        assert answered == b"ping", "the channel did not reconnect within 2.5 reconnect intervals"
    finally:
        server.stop(None)
