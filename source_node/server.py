"""The source's gRPC service (service Source of proto/federation.proto) over a store.

Bad input (a garbled row payload, an unknown relation, a type mismatch, an invalid transaction)
is answered with INVALID_ARGUMENT and the one-line ModelError text, and loses nothing: the store
is left as it was and the server keeps serving (DESIGN.md 4.4). Messages over the size limit are
refused by gRPC itself with RESOURCE_EXHAUSTED.

Answers pass through the fault injector (kind "answer"): a dropped answer is left out of the
AnswerBatch; a duplicated one appears twice; delayed ones are put in the order of their delays
and the whole reply waits for the longest delay. That keeps the RPC synchronous and still lets
the warehouse see late, reordered and missing answers. A batch with one bad sub-query is refused
whole.
"""

from __future__ import annotations

import functools
import time
from concurrent import futures

import grpc

from fedmodel.catalog import Catalog
from fedmodel.codec import encode_rows
from fedmodel.errors import ModelError
from fedmodel.messages import from_pb, to_pb
from fedmodel.wire import pb, rpc
from source_node.faults import FaultInjector
from source_node.sender import NotificationSender
from source_node.store import owned_relation

SNAPSHOT_CHUNK_ROWS = 16384  # rows per SnapshotChunk, to stay well under the message size limit


def _rejecting_bad_input(method):
    """Turns a ModelError into INVALID_ARGUMENT with its message."""
    @functools.wraps(method)
    def handler(self, request, context):
        try:
            return method(self, request, context)
        except ModelError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
    return handler


class SourceServicer(rpc.SourceServicer):
    def __init__(self, store, catalog: Catalog, sender: NotificationSender, faults: FaultInjector):
        self.store = store
        self.catalog = catalog
        self.sender = sender
        self.faults = faults

    @_rejecting_bad_input
    def Commit(self, request: pb.CommitRequest, context) -> pb.CommitReply:
        note = self.store.commit(from_pb(request, self.catalog), commit_time=time.time())
        self.sender.wake()
        # The versions this transaction produced, read from its notification: another commit may
        # already have moved the store's versions on.
        return pb.CommitReply(dsv=note.dsv, brv={c.relation: c.brv for c in note.changes})

    @_rejecting_bad_input
    def Query(self, request: pb.SubqueryBatch, context) -> pb.AnswerBatch:
        answers = [to_pb(self.store.answer(from_pb(sq, self.catalog)), self.catalog) for sq in request.subqueries]
        copies = sorted(((delay, i) for i, _ in enumerate(answers) for delay in self.faults.decide("answer")))
        if copies and copies[-1][0] > 0:
            time.sleep(copies[-1][0])
        return pb.AnswerBatch(answers=[answers[i] for _, i in copies])

    @_rejecting_bad_input
    def Resend(self, request: pb.ResendRequest, context) -> pb.ResendReply:
        resent = self.sender.resend(self.store.notifications_from(request.from_dsv))
        return pb.ResendReply(resent=resent, oldest_available=self.store.oldest_available())

    @_rejecting_bad_input
    def Snapshot(self, request: pb.SnapshotRequest, context):
        # Validated and read eagerly, so that bad input is refused before the stream starts.
        wanted = {owned_relation(self.catalog, self.store.source, name, "snapshot").name for name in request.relations}
        dsv, relations = self.store.snapshot()
        return self._chunks(dsv, {name: state for name, state in relations.items() if not wanted or name in wanted})

    def _chunks(self, dsv: int, relations: dict):
        for name, (brv, rows) in relations.items():
            rel = self.catalog.relation(name)
            for start in range(0, max(len(rows), 1), SNAPSHOT_CHUNK_ROWS):
                yield pb.SnapshotChunk(dsv=dsv, relation=name, brv=brv,
                                       rows=encode_rows(rel.columns, rel.types, rows[start:start + SNAPSHOT_CHUNK_ROWS]))

    def Health(self, request: pb.HealthRequest, context) -> pb.HealthReply:
        return pb.HealthReply(source=self.store.source, dsv=self.store.dsv, brv=self.store.brv,
                              unacknowledged=len(self.store.unacknowledged()))


def serve(servicer: SourceServicer, host: str = "127.0.0.1", port: int = 0,
          max_message_bytes: int = 64 << 20, workers: int = 8) -> tuple[grpc.Server, int]:
    """Starts a gRPC server for `servicer`; returns it and the port it is bound to (port 0: a free one)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=[
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes)])
    rpc.add_SourceServicer_to_server(servicer, server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind the source's gRPC server to {host}:{port}")
    server.start()
    return server, bound
