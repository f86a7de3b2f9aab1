"""A source's committed history read over gRPC (the Source.History RPC), for `fedlab check`.

On a cluster a source's database file lives on the source pod's volume, out of the checker's reach;
the source streams the same two things the file holds instead: its relations at one state and
its logged notifications up to that state. `read_history` returns them in the shape the checker
reads from the file (the store's snapshot and notifications_from), so one reconstruction of the
initial state serves both ways (live.check.source_history).

    dsv, relations, log = read_history(catalog, "s1", RemoteSource("lab-fedlab-src-s1:50051", tls))
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from fedlab.fedio.channels import MAX_MESSAGE_BYTES, TlsFiles, client_channel
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.codec import decode_rows
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import from_pb
from fedlab.fedmodel.transactions import Notification
from fedlab.fedmodel.wire import pb, rpc


@dataclass(frozen=True)
class RemoteSource:
    """Where a running source answers: its gRPC address, the TLS files to reach it with, and how
    long to wait for it to accept a connection (0: not at all). On a cluster a source pod may be
    restarting, or a new checker pod not yet allowed in by the network policy agent."""

    address: str
    tls: TlsFiles | None = None
    connect_wait: float = 0.0

    def __str__(self) -> str:
        return self.address


def remote_sources(specs: list[str], tls: TlsFiles | None, connect_wait: float = 0.0) -> dict[str, RemoteSource]:
    """{name: RemoteSource} from NAME=HOST:PORT specifications (`fedlab check --source`)."""
    out = {}
    for spec in specs:
        name, _, address = spec.partition("=")
        host, _, port = address.rpartition(":")
        if not name or not host or not port.isdigit():
            raise ModelError(f"--source {spec}: expected NAME=HOST:PORT")
        if name in out:
            raise ModelError(f"--source {name}: given twice")
        out[name] = RemoteSource(address, tls, connect_wait)
    return out


def read_history(catalog: Catalog, source: str, where: RemoteSource,
                 timeout: float = 600.0) -> tuple[int, dict[str, tuple[int, list[tuple]]], list[Notification]]:
    """(DSV, {relation: (BRV, rows)}, notifications from DSV 2 up to that DSV) of a running source.

    ModelError, naming the source and its address, when it cannot be reached, answers for
    another source, or streams a history that is not of one state.
    """
    channel = client_channel(where.address, where.tls, options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
    dsv, relations, log = None, {}, []
    try:
        if where.connect_wait > 0:
            grpc.channel_ready_future(channel).result(timeout=where.connect_wait)
        for chunk in rpc.SourceStub(channel).History(pb.HistoryRequest(), timeout=timeout):
            if chunk.HasField("state"):
                state = chunk.state
                if dsv is not None and state.dsv != dsv:
                    raise ModelError(f"source {source} at {where}: its history mixes states DSV {dsv} and {state.dsv}")
                dsv = state.dsv
                rel = catalog.relation(state.relation)
                if rel.source != source:
                    raise ModelError(f"source {source} at {where}: answered with relation {rel.name} "
                                     f"of source {rel.source} (is the address right?)")
                columns, rows = decode_rows(state.rows)
                if rows and [c.lower() for c in columns] != [c.lower() for c in rel.columns]:
                    raise ModelError(f"source {source} at {where}: {rel.name} has columns {columns}, "
                                     f"the catalog says {list(rel.columns)}")
                entry = relations.setdefault(rel.name, (state.brv, []))
                entry[1].extend(tuple(row) for row in rows)
            else:
                log.append(from_pb(chunk.notification, catalog))
    except grpc.FutureTimeoutError:
        raise ModelError(f"source {source} at {where}: cannot read its history: no connection within "
                         f"{where.connect_wait:g} s") from None
    except grpc.RpcError as err:
        raise ModelError(f"source {source} at {where}: cannot read its history: {err.code().name} "
                         f"({(err.details() or '').strip()})") from None
    finally:
        channel.close()
    if dsv is None:
        raise ModelError(f"source {source} at {where}: its history holds no relation")
    return dsv, relations, log
