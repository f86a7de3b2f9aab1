"""The warehouse's dispatcher to one source: the core's sub-queries and resend requests, sent.

One thread per source takes what the core queued (`send`, called by the core's ports) and sends it:
resend requests first (a lost notification holds back every later transaction of its source,
Theorem 2's order, and a resend is served from the source's memory, quickly), then the
sub-queries, several tasks' at once in one batch (beyond the paper: fewer round trips) on the
source's Query stream (warehouse.query_stream), one batch at a time.

Two rules keep what is asked already from going again (warehouse.dispatch_rules, which the timed
simulator drives too): a copy of a sub-query still on its way or answered stays home, one whose
answer was lost goes again at once, once; a resend request asks only for the DSVs that have still
not reached the warehouse (`missing`).

Arrived answers, and the end of each round trip, go to the core through its inbox (`to_core`).
Every sub-query and resend request sent, and every answer received, gets a line in the warehouse's
message log.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import grpc

from fedlab.fedio.message_log import MessageLog
from fedlab.fedio.metrics_endpoint import BucketCounts
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.message_log import answer_fields, subquery_fields
from fedlab.fedmodel.messages import from_pb, to_pb
from fedlab.fedmodel.subquery import Subquery
from fedlab.fedmodel.wire import pb
from fedlab.warehouse.dispatch_rules import DispatchRules
from fedlab.warehouse.incarnation import Incarnation
from fedlab.warehouse.core.events import AnswerArrived, RequestResend, ResendRefused
from fedlab.warehouse.query_stream import QueryStream, StreamClosed, StreamFailed
from fedlab.warehouse.worker import Worker

log = logging.getLogger("fedlab.warehouse")


@dataclass(frozen=True)
class Peer:
    """What a dispatcher says of the warehouse it speaks for, and where it hands what came back."""

    catalog: Catalog
    messages: MessageLog
    subscriber: str        # the name the warehouse subscribed by (the source's message log names it)
    # this warehouse process, as its Notify replies name it: resend requests carry its id, and a
    # source trusts its reports of what arrived only from the incarnation that made them
    incarnation: Incarnation
    fifo: bool             # its algorithm assumes FIFO channels: the core hears when sub-queries left
    # to_core(kind, source, events, query_done): into the core's inbox (warehouse.service.Inbound)
    to_core: Callable[..., None]
    # missing(source, from_dsv, through_dsv): the span of those DSVs not yet received, or None
    missing: Callable[[str, int, int | None], tuple[int, int | None] | None]


@dataclass
class _RoundTrip:
    """One batch of sub-queries on its way: what its replies answered so far."""

    subqueries: list
    answered: set = field(default_factory=set)
    replied: bool = False
    sent: float = field(default_factory=time.monotonic)


class Dispatcher(Worker):
    def __init__(self, source: str, stub, peer: Peer):
        super().__init__(f"dispatch-{source}")
        self.source, self.peer = source, peer
        self._stub = stub
        self._queued: list = []                       # sub-queries and resend requests, in the core's order
        self.rules = DispatchRules()                  # what goes of what is queued; under the lock
        self._stream: QueryStream | None = None       # once a batch went
        self.in_flight = 0                            # sub-queries sent whose round trip is not over
        self.round_trips = BucketCounts()             # seconds from a batch's sending to its last reply

    def stop(self) -> None:
        super().stop()
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def send(self, item: Subquery | RequestResend) -> None:
        """Queues a sub-query or a resend request (called by the core's ports, under its lock)."""
        with self._lock:
            self._queued.append(item)
            self._wake.notify()

    @property
    def stub(self):
        with self._lock:
            return self._stub

    def set_stub(self, stub) -> None:
        """The source serves elsewhere now (a restarted Ray actor, on a new port): what failed at
        the old address the core retries; the open stream's batches are reported cut short."""
        with self._lock:
            self._stub = stub
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queued and not self._stopped:
                    self._wake.wait()
                if self._stopped:
                    return
                items, self._queued = self._queued, []
                stub = self._stub   # read each time: set_stub may swap it
                queued = {i.id: i for i in items if isinstance(i, Subquery)}
                subqueries = [queued[sid] for sid in self.rules.subqueries_to_send(queued)]
            for request in self._still_missing([i for i in items if isinstance(i, RequestResend)]):
                self._resend(stub, request)
            if subqueries:
                self._query(stub, subqueries)

    def _still_missing(self, requests: list[RequestResend]) -> list[RequestResend]:
        """The resend requests narrowed to the DSVs that have still not arrived, one per span.
        Outside the lock: `missing` takes the core's, under which the core's ports call `send`."""
        spans = self.rules.resends_to_send([(r.from_dsv, r.through_dsv) for r in requests],
                                           lambda first, last: self.peer.missing(self.source, first, last))
        return [RequestResend(self.source, *span) for span in spans if span is not None]

    def _query(self, stub, subqueries) -> None:
        """Sends one batch of sub-queries on the source's Query stream and returns once the source
        has read its answers (the batch's first reply); the copies the fault injector delays come
        later on the same stream (warehouse.query_stream), so the next batch does not wait for them,
        as it would not on a network. A stream found failed before the batch went is replaced by a
        new one, which takes the batch."""
        peer = self.peer
        batch = pb.SubqueryBatch(subqueries=[to_pb(sq, peer.catalog) for sq in subqueries])
        for msg, sq in zip(batch.subqueries, subqueries):
            peer.messages.record("subquery", "sent", self.source, bytes=msg.ByteSize(), batch=len(subqueries),
                                 **subquery_fields(sq))
        if peer.fifo:
            peer.to_core("query_sent", self.source, [])
        with self._lock:
            self.in_flight += len(subqueries)
        for _ in range(2):
            stream = self._query_stream(stub)
            try:
                stream.exchange(batch, _RoundTrip(subqueries))
                return
            except StreamClosed:
                self._drop(stream)
            except StreamFailed:
                self._drop(stream)
                return

    def _query_stream(self, stub) -> QueryStream:
        """The source's open Query stream on `stub`'s channel, opened now if there is none."""
        with self._lock:
            stream = self._stream
            if stream is None or stream.stub is not stub:
                if stream is not None:
                    stream.close()
                stream = self._stream = QueryStream(stub, self.source, self.peer.subscriber, self._replied,
                                                    self._cut_short)
            return stream

    def _drop(self, stream: QueryStream) -> None:
        with self._lock:
            if self._stream is stream:
                self._stream = None
        stream.close()

    def _replied(self, trip: _RoundTrip | None, reply: pb.AnswerBatch) -> None:
        """One reply of a batch: its answers to the core; after the batch's last, the round trip
        is over and what it did not answer may go again."""
        last = reply.later == 0
        answered = self._answers(reply, last)
        if trip is None:   # a batch the stream no longer owed
            return
        trip.answered |= answered
        trip.replied = True
        if last:
            self.round_trips.observe(time.monotonic() - trip.sent)
            self._round_trip_over(trip.subqueries, done=True, answered=trip.answered)

    def _cut_short(self, trips: list[_RoundTrip], err: grpc.RpcError | None) -> None:
        """The stream failed owing these batches replies: the core retries what they did not answer."""
        if trips:
            log.warning("sub-queries to %s cut short (%s); the core will retry them", self.source,
                        err.code() if err is not None else "the stream ended")
        for trip in trips:
            self._round_trip_over(trip.subqueries, done=False, answered=trip.answered if trip.replied else None)

    def _round_trip_over(self, subqueries, done: bool, answered: set[str] | None) -> None:
        """One Query batch's round trip has ended: the core hears so unless its last message (`done`)
        said it, and its sub-queries may go again; `answered` None: it failed before any reply, and
        the core's timer retries them. What the reply came back without was lost, not slow: it goes
        again now, once (the module's first rule)."""
        if not done:
            self.peer.to_core("arrived", self.source, [], True)
        with self._lock:
            self.in_flight -= len(subqueries)
            again = set(self.rules.round_trip_over([sq.id for sq in subqueries], answered))
            if again:
                self._queued[:0] = [sq for sq in subqueries if sq.id in again]
                self._wake.notify()

    def _answers(self, reply: pb.AnswerBatch, last: bool) -> set[str]:
        """Queues the answers of one message of a Query reply for the core (with the note that the
        round trip is over, when it is the `last`); returns their ids."""
        answers = []
        now = time.monotonic()
        for msg in reply.answers:
            try:
                answer = from_pb(msg, self.peer.catalog)
            except ModelError as err:
                log.error("bad answer from %s: %s", self.source, err)
                continue
            self.peer.messages.record("answer", "received", self.source, bytes=msg.ByteSize(), **answer_fields(answer))
            answers.append(AnswerArrived(answer, now))
        answered = {a.answer.id for a in answers}
        with self._lock:   # the dispatcher's thread reads it under the lock
            self.rules.replied(answered)
        if answers or last:
            self.peer.to_core("arrived", self.source, answers, last)
        return answered

    def _resend(self, stub, request: RequestResend) -> None:
        message = pb.ResendRequest(from_dsv=request.from_dsv, through_dsv=request.through_dsv or 0,
                                   incarnation=self.peer.incarnation.id, subscriber=self.peer.subscriber)
        self.peer.messages.record("resend_request", "sent", self.source, bytes=message.ByteSize(),
                                  from_dsv=request.from_dsv, through_dsv=request.through_dsv)
        try:
            reply = stub.Resend(message, timeout=30)
        except grpc.RpcError as err:
            log.warning("resend request to %s failed (%s); the core will ask again", self.source, err.code())
            return
        if reply.oldest_available > request.from_dsv:
            self.peer.to_core("event", self.source, [ResendRefused(self.source, request.from_dsv,
                                                                   reply.oldest_available, time.monotonic())])
