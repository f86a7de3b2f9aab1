"""Every gRPC channel and listening port of the federation, insecure or with mutual TLS.

`client_channel(address, tls)`, `new_server(workers)` and `add_port(server, address, tls)` are the
only places that open a channel, make a server or bind a port, so a run is either all plain or
all mutual TLS (docs/architecture.md 6), and every stream is kept alive the same way.
`tls` is None (plaintext, the laptop default) or a `TlsFiles`: the PEM files of this party's
certificate, its key, and the CA that signs every peer's certificate. A server then requires and
verifies the client's certificate; a client verifies that the server's certificate names the host
it dialled (a SAN: 127.0.0.1 on a laptop, the Service's DNS name on a cluster).

    tls = TlsFiles.load(ca="ca.crt", cert="tls.crt", key="tls.key")   # ModelError names a bad file
    port = add_port(server, "127.0.0.1:0", tls)
    stub = rpc.SourceStub(client_channel("127.0.0.1:%d" % port, tls))
"""

from __future__ import annotations

from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from fedlab.fedmodel.errors import ModelError

# The largest gRPC message any node sends or accepts: a periodic recomputation's snapshot of
# lineitem at SF 0.1 (324k rows, every column) passed 64 MB. gRPC's own ceiling is 2 GB.
MAX_MESSAGE_BYTES = 1 << 30
# Notifications and sub-queries travel on long-lived streams, which no deadline ends: a peer that
# is frozen or cut off is found by HTTP/2 pings instead, unanswered for KEEPALIVE_MS after one is
# sent every KEEPALIVE_MS while a stream is open; the stream then fails as a call past its
# deadline would (UNAVAILABLE), and is opened again. Both ends ping and both accept the other's.
KEEPALIVE_MS = 5000
_KEEPALIVE = [("grpc.keepalive_time_ms", KEEPALIVE_MS), ("grpc.keepalive_timeout_ms", KEEPALIVE_MS),
              ("grpc.http2.max_pings_without_data", 0)]
# A channel whose peer was away reconnects on gRPC's backoff, which grows to 120 s by default, and
# meanwhile fails every call at once: a source answering again after a minute's restart was
# reached up to two minutes later (the e2e's staleness of exactly 120 s after a warehouse's
# restart). Capped, a channel tries again at least every RECONNECT_MS.
RECONNECT_MS = 1000
_RECONNECT = [("grpc.initial_reconnect_backoff_ms", RECONNECT_MS), ("grpc.max_reconnect_backoff_ms", RECONNECT_MS)]
_ACCEPT_PINGS = [("grpc.http2.min_recv_ping_interval_without_data_ms", KEEPALIVE_MS // 2),
                 ("grpc.http2.max_ping_strikes", 0), ("grpc.keepalive_permit_without_calls", 1)]


@dataclass(frozen=True)
class TlsFiles:
    """The PEM files of one party (paths), with their contents read once when it is made.

    The contents travel with the object (pickled to a Ray actor, kept across its restarts), so a
    party never reads the files again after a Secret is rotated under it mid-run.
    """

    ca: Path
    cert: Path
    key: Path
    ca_pem: bytes = field(default=b"", repr=False, compare=False)
    cert_pem: bytes = field(default=b"", repr=False, compare=False)
    key_pem: bytes = field(default=b"", repr=False, compare=False)

    def __post_init__(self):
        # Made from paths alone (TlsFiles(ca, cert, key)): read them now, once.
        if not (self.ca_pem and self.cert_pem and self.key_pem):
            for name, what in (("ca", "CA certificate"), ("cert", "certificate"), ("key", "private key")):
                object.__setattr__(self, f"{name}_pem", _read_pem(Path(getattr(self, name)), what))

    @staticmethod
    def load(ca: str | Path, cert: str | Path, key: str | Path) -> "TlsFiles":
        """Reads the three files; ModelError naming the first that is missing, unreadable or not PEM."""
        return TlsFiles(Path(ca), Path(cert), Path(key))


def client_channel(address: str, tls: TlsFiles | None, options: list[tuple] | None = None) -> grpc.Channel:
    """A channel to `address` (HOST:PORT): plaintext without `tls`, else presenting our certificate
    and accepting only a server certificate signed by the CA that names HOST; its streams kept
    alive by pings (KEEPALIVE_MS), a lost peer tried again every RECONNECT_MS."""
    options = [*_KEEPALIVE, *_RECONNECT, *(options or [])]
    if tls is None:
        return grpc.insecure_channel(address, options=options)
    credentials = grpc.ssl_channel_credentials(root_certificates=tls.ca_pem, private_key=tls.key_pem,
                                               certificate_chain=tls.cert_pem)
    return grpc.secure_channel(address, credentials, options=options)


def new_server(workers: int, max_message_bytes: int = MAX_MESSAGE_BYTES) -> grpc.Server:
    """A gRPC server of `workers` threads (each stream being served holds one) that pings its
    streams' clients and accepts their pings (KEEPALIVE_MS); messages up to `max_message_bytes`."""
    return grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=[
        *_KEEPALIVE, *_ACCEPT_PINGS, ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes)])


def add_port(server: grpc.Server, address: str, tls: TlsFiles | None) -> int:
    """Binds `server` to `address` (HOST:PORT, port 0: a free one); returns the port.

    With `tls`, a client must present a certificate signed by the CA (mutual TLS); one without,
    or with another CA's, fails its handshake and sees UNAVAILABLE. OSError when the port cannot
    be bound.
    """
    try:
        if tls is None:
            port = server.add_insecure_port(address)
        else:
            credentials = grpc.ssl_server_credentials([(tls.key_pem, tls.cert_pem)], root_certificates=tls.ca_pem,
                                                      require_client_auth=True)
            port = server.add_secure_port(address, credentials)
    except RuntimeError:   # newer grpcio raises where older ones returned 0
        port = 0
    if port == 0:
        raise OSError(f"cannot bind a gRPC server to {address}")
    return port


def _read_pem(path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ModelError(f"TLS {what} {path}: cannot read it ({err.strerror or err})") from None
    # gRPC reports a bad PEM only at the first handshake, far from the flag that named the file.
    if b"-----BEGIN " not in data:
        raise ModelError(f"TLS {what} {path}: not a PEM file")
    return data
