"""The source's gRPC service (service Source of proto/federation.proto) over a store.

Bad input (a garbled row payload, an unknown relation, a type mismatch, an invalid transaction)
is answered with INVALID_ARGUMENT and the one-line ModelError text, and loses nothing: the store
is left as it was and the server keeps serving (docs/architecture.md 4.4). Messages over the size limit are
refused by gRPC itself with RESOURCE_EXHAUSTED. CommitBatch commits its transactions as one group
(the store's commit_many) and answers each one's versions or error text: an invalid transaction
is rejected alone; Commit is a group of one, and Commits a stream of groups. Calls that arrive together share a group
(source_node.commit_queue: group commit across all clients). A group sent again because its
client never heard the outcome (retry_after_dsv) commits only what is not in the log already.

Sub-queries come on one stream per warehouse (Query), batch after batch. Answers pass through
the fault injector (kind "answer"): a dropped answer is left out of its batch's reply; a
duplicated one appears twice; a batch's first reply leaves once every answer is read, with the
copies due at once, and each delayed copy follows on the stream when its delay is over. So the
warehouse sees late, reordered and missing answers, and a delay holds back its own answer only: a
reply that waited for its longest delay held a batch of 100 answers with delays of 0.05 s on
average 0.26 s (the largest of 100 such delays), and with it the source's next batch. A batch
with one bad sub-query is refused whole, and ends the stream.

History streams the source's committed history (its relations now and its logged notifications
up to them) for `fedlab check` on a cluster, where the database file is on the source's volume; it
passes through no fault injector: it is the testbed's instrument, not part of the protocol.

The operator's calls (Unsubscribe, SetWarehouse, SetFaults, Stop: source_node.control) change
the node behind the server (source_node.node); Health tells its versions, what each subscriber has
not acknowledged and the serving process.

The source's message log (fedmodel.message_log) gets a line for every sub-query and resend
request received, every answer copy sent, and every fault decided for an answer, which names the
answer and the versions it was read at.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import os
import queue
import threading
import time
from collections import Counter
from typing import Protocol

import grpc

from fedlab.fedio.channels import MAX_MESSAGE_BYTES, TlsFiles, add_port, new_server
from fedlab.fedio.message_log import MessageLog
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.codec import encode_rows
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.message_log import answer_fields, subquery_fields
from fedlab.fedmodel.messages import SUBSCRIBER_METADATA, from_pb, to_pb
from fedlab.fedmodel.wire import pb, rpc
from fedlab.source_node.commit_queue import CommitQueue
from fedlab.source_node.durable_store import owned_relation
from fedlab.source_node.faults import FaultInjector
from fedlab.source_node.sender import NotificationSender, wake_all
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER

SNAPSHOT_CHUNK_ROWS = 16384  # rows per SnapshotChunk, to stay well under the message size limit
# The server's threads, at most: each view's Query stream holds one while it is open (and a
# reader thread beside it once it has delayed copies to send), each client's Commits stream
# another, and the other calls the rest. The pool starts a thread only when no idle one is left,
# so the bound costs nothing until that many calls are open at once; with 16, sixteen views over
# a source left it no thread for a commit or a health check.
WORKERS = 256


class Operator(Protocol):
    """What the operator's calls change (source_node.node.SourceNode): the server's own state is
    read-only to them."""
    def subscribe(self, name: str, address: str | None, relations: list[str] | None) -> None: ...
    def unsubscribe(self, name: str) -> None: ...
    def set_warehouse(self, address: str | None) -> None: ...
    def set_faults(self, **rates: float) -> dict: ...
    def stop(self) -> None: ...
    metrics_port: int | None   # where its Prometheus endpoint serves (None: none)


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
    def __init__(self, store, catalog: Catalog, senders: dict[str, NotificationSender], faults: FaultInjector,
                 operator: Operator, messages: MessageLog | None = None):
        """`senders`: one per subscriber, by name (the node's, which it changes as they come and go);
        `operator`: what the Subscribe, Unsubscribe, SetWarehouse, SetFaults and Stop calls do (the node)."""
        self.store = store
        self.operator = operator
        self.commits = CommitQueue(store)
        self.catalog = catalog
        self.senders = senders
        self.faults = faults
        self.messages = messages or MessageLog(None, store.source)

    def Commit(self, request: pb.CommitRequest, context) -> pb.CommitReply:
        outcome, = self._commit_group([request])
        if outcome.WhichOneof("outcome") == "error":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, outcome.error)
        return outcome.committed

    def CommitBatch(self, request: pb.CommitBatchRequest, context) -> pb.CommitBatchReply:
        retry_after = request.retry_after_dsv if request.HasField("retry_after_dsv") else None
        return pb.CommitBatchReply(outcomes=self._commit_group(request.transactions, retry_after))

    def Commits(self, requests, context):
        """A client's groups on one stream (the load driver's, fedio.lockstep), each as CommitBatch."""
        for request in requests:
            yield self.CommitBatch(request, context)

    def _commit_group(self, requests, retry_after: int | None = None) -> list[pb.CommitOutcome]:
        """Commits the decodable requests as one group (with those of concurrent calls); one outcome
        per request, in order: its versions, or why it was rejected (a garbled payload included).
        Those of a retried group committed after DSV `retry_after` get their recorded versions."""
        decoded: list = []
        for msg in requests:
            try:
                decoded.append(from_pb(msg, self.catalog))
            except ModelError as err:
                decoded.append(err)
        valid = [r for r in decoded if not isinstance(r, ModelError)]
        committed = iter(self.commits.commit_many(valid, time.time(), retry_after) if valid else [])
        outcomes = [r if isinstance(r, ModelError) else next(committed) for r in decoded]
        if any(not isinstance(o, ModelError) for o in outcomes):
            wake_all(self.senders)   # once per group: each sends what it has not sent
        # The versions each transaction produced, read from its notification: another commit may
        # already have moved the store's versions on.
        return [pb.CommitOutcome(error=str(o)) if isinstance(o, ModelError) else
                pb.CommitOutcome(committed=pb.CommitReply(dsv=o.dsv, brv={c.relation: c.brv for c in o.changes}))
                for o in outcomes]

    def Query(self, requests, context):
        """A warehouse's stream of sub-query batches. Each batch is answered at once by a reply
        holding every answer copy due at once; the copies the fault injector delays follow, as
        they come due, in replies of their own (AnswerBatch.later: how many of the batch's are
        still to come), between the replies to later batches. A batch with one bad sub-query ends
        the stream with INVALID_ARGUMENT. The stream's metadata names the warehouse's subscriber
        (fedmodel.messages.SUBSCRIBER_METADATA), the peer the message log names."""
        peer = dict(context.invocation_metadata()).get(SUBSCRIBER_METADATA, DEFAULT_SUBSCRIBER)
        delayed: list[tuple] = []          # heap of (due, seq, batch id, encoded answer, answer)
        later: Counter = Counter()         # batch id -> its copies still to come
        incoming = _Requests(requests)
        seq = itertools.count()
        ended = False   # the warehouse sends no more: the delayed copies still go, as they come due
        while not ended or delayed:
            wait = max(0.0, delayed[0][0] - time.monotonic()) if delayed else None
            if ended:
                time.sleep(wait)
                request = None
            else:
                request = incoming.next(wait)
            if request is _END:
                ended = True
                continue
            if request is not None:
                try:
                    yield self._answered(request, peer, delayed, later, seq)
                except ModelError as err:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            yield from self._due(peer, delayed, later)

    def _answered(self, request: pb.SubqueryBatch, peer: str, delayed: list, later: Counter, seq) -> pb.AnswerBatch:
        """Reads `request`'s answers at one state; the reply of the copies due at once, the delayed
        ones put on the heap."""
        subqueries = [from_pb(sq, self.catalog) for sq in request.subqueries]
        for msg, sq in zip(request.subqueries, subqueries):
            self.messages.record("subquery", "received", peer, bytes=msg.ByteSize(),
                                 batch=len(subqueries), **subquery_fields(sq))
        answers = self.store.answer_all(subqueries)
        now, first = time.monotonic(), []
        for answer in answers:
            encoded = to_pb(answer, self.catalog)
            delays = self.faults.decide("answer")
            self.messages.record_faults("answer", peer, delays, **answer_fields(answer))
            for delay in delays:
                if delay > 0:
                    heapq.heappush(delayed, (now + delay, next(seq), request.id, encoded, answer))
                    later[request.id] += 1
                else:
                    first.append((encoded, answer))
        return self._reply(request.id, peer, first, later)

    def _due(self, peer: str, delayed: list, later: Counter):
        """The replies of the delayed copies now due, one per batch."""
        due: dict[int, list] = {}
        while delayed and delayed[0][0] <= time.monotonic():
            _, _, batch, encoded, answer = heapq.heappop(delayed)
            later[batch] -= 1
            due.setdefault(batch, []).append((encoded, answer))
        for batch, copies in due.items():
            yield self._reply(batch, peer, copies, later)

    def _reply(self, batch: int, peer: str, copies: list, later: Counter) -> pb.AnswerBatch:
        for encoded, answer in copies:
            self.messages.record("answer", "sent", peer, bytes=encoded.ByteSize(), **answer_fields(answer))
        remaining = later[batch]
        if not remaining:
            del later[batch]
        return pb.AnswerBatch(answers=[encoded for encoded, _ in copies], later=remaining, batch=batch)

    @_rejecting_bad_input
    def Resend(self, request: pb.ResendRequest, context) -> pb.ResendReply:
        subscriber = request.subscriber or DEFAULT_SUBSCRIBER
        self.messages.record("resend_request", "received", subscriber, bytes=request.ByteSize(),
                             from_dsv=request.from_dsv, through_dsv=request.through_dsv)
        sender = self.senders.get(subscriber)
        if sender is None:
            raise ModelError(f"resend: no subscriber named {subscriber!r} (subscribers: "
                             f"{', '.join(sorted(self.senders)) or 'none'})")
        resent = sender.resend(self.store.notifications_from(request.from_dsv, request.through_dsv or None,
                                                             subscriber), request.incarnation or None)
        return pb.ResendReply(resent=resent, oldest_available=self.store.oldest_available())

    @_rejecting_bad_input
    def Snapshot(self, request: pb.SnapshotRequest, context):
        # Validated and read eagerly, so that bad input is refused before the stream starts.
        wanted = {owned_relation(self.catalog, self.store.source, name, "snapshot").name for name in request.relations}
        return self._chunks(*self.store.snapshot(wanted))

    def _chunks(self, dsv: int, relations: dict):
        for name, (brv, rows) in relations.items():
            rel = self.catalog.relation(name)
            for start in range(0, max(len(rows), 1), SNAPSHOT_CHUNK_ROWS):
                yield pb.SnapshotChunk(dsv=dsv, relation=name, brv=brv,
                                       rows=encode_rows(rel.columns, rel.types, rows[start:start + SNAPSHOT_CHUNK_ROWS]))

    @_rejecting_bad_input
    def Subscribe(self, request: pb.SubscribeRequest, context) -> pb.SubscribeReply:
        """A warehouse subscribes itself by its name (source_node.subscriptions), before it reads
        its snapshot; the default subscriber is every source's from its start, set by its operator."""
        if request.name in ("", DEFAULT_SUBSCRIBER):
            raise ModelError(f"subscribe: name the subscriber (not {request.name or 'nothing'!r}: "
                             f"{DEFAULT_SUBSCRIBER!r} is the source's own warehouse)")
        self.operator.subscribe(request.name, request.address or None, list(request.relations))
        return pb.SubscribeReply()

    def Unsubscribe(self, request: pb.UnsubscribeRequest, context) -> pb.UnsubscribeReply:
        self.operator.unsubscribe(request.name)
        return pb.UnsubscribeReply()

    def SetWarehouse(self, request: pb.SetWarehouseRequest, context) -> pb.SetWarehouseReply:
        self.operator.set_warehouse(request.address or None)
        return pb.SetWarehouseReply()

    @_rejecting_bad_input
    def SetFaults(self, request: pb.SetFaultsRequest, context) -> pb.SetFaultsReply:
        return pb.SetFaultsReply(rates_json=json.dumps(self.operator.set_faults(**request.rates)))

    def Stop(self, request: pb.StopRequest, context) -> pb.StopReply:
        # On a thread of its own: stopping the server waits for the calls in flight, this one too.
        threading.Thread(target=self.operator.stop, name="stop", daemon=True).start()
        return pb.StopReply()

    def Health(self, request: pb.HealthRequest, context) -> pb.HealthReply:
        behind = {name: len(self.store.unacknowledged(name)) for name in list(self.senders)}
        # Only a source captured from the WAL has a slot to report (source_node.logical_capture).
        capture = self.store.capture_status() if hasattr(self.store, "capture_status") else {}
        return pb.HealthReply(source=self.store.source, dsv=self.store.dsv, brv=self.store.brv,
                              unacknowledged=max(behind.values(), default=0), subscribers=behind,
                              pid=os.getpid(), message_log=str(self.messages.path or ""),
                              metrics_port=self.operator.metrics_port or 0,
                              retained_wal=capture.get("retained_wal", 0),
                              capture_warning=capture.get("warning", ""))

    def History(self, request: pb.HistoryRequest, context):
        # Read eagerly, relations first: a commit between the two reads only adds notifications
        # past the relations' DSV, which the cut drops, so state and log are of one moment.
        dsv, relations = self.store.snapshot()
        log = [n for n in self.store.notifications_from(2) if n.dsv <= dsv]
        return self._history(dsv, relations, log)

    def _history(self, dsv: int, relations: dict, log: list):
        for chunk in self._chunks(dsv, relations):
            yield pb.HistoryChunk(state=chunk)
        for note in log:
            yield pb.HistoryChunk(notification=to_pb(note, self.catalog))


_END = object()


class _Requests:
    """A stream's requests, read by the handler's own thread, until it must also wait for a
    delayed copy coming due: from then on by a reader thread of the stream's, into a queue, so
    that the handler can wait for a request or the time, whichever comes first. Without delays
    (the usual case) no thread is woken but the handler's."""

    def __init__(self, requests):
        self._requests = requests
        self._queue: queue.SimpleQueue | None = None

    def next(self, timeout: float | None):
        """The next request, _END when the stream is over, None if `timeout` seconds passed first."""
        if self._queue is None and timeout is None:
            return next(self._requests, _END)
        if self._queue is None:
            self._queue = queue.SimpleQueue()
            threading.Thread(target=self._read, name="query-requests", daemon=True).start()
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def _read(self) -> None:
        try:
            for request in self._requests:
                self._queue.put(request)
        except grpc.RpcError:   # the warehouse went: the stream is over
            pass
        finally:
            self._queue.put(_END)


def serve(servicer: SourceServicer, host: str = "127.0.0.1", port: int = 0,
          max_message_bytes: int = MAX_MESSAGE_BYTES, workers: int = WORKERS,
          tls: TlsFiles | None = None) -> tuple[grpc.Server, int]:
    """Starts a gRPC server for `servicer` (mutual TLS with `tls`); returns it and the port it is
    bound to (port 0: a free one)."""
    server = new_server(workers, max_message_bytes)
    rpc.add_SourceServicer_to_server(servicer, server)
    bound = add_port(server, f"{host}:{port}", tls)
    server.start()
    return server, bound
