"""The warehouse's end of one source's Query stream (service Source, rpc Query): its sub-query
batches out, their answers back, on one gRPC stream for as long as both ends are up.

The source's dispatcher thread (warehouse.dispatcher) sends one batch at a time and waits for the
batch's first reply, which carries every answer read at once; what the core asks meanwhile goes
in the next batch. Copies of answers that the source's fault injector delays follow in later
replies of the same batch (`AnswerBatch.later` counts them), interleaved with the replies to
later batches, as they would arrive on a network.

Who reads the replies: the dispatcher itself, in lockstep with its batches, until a reply says
copies are still to come; from then on a reader thread of the stream's own, so that a late copy
is taken when it arrives and not when the next batch goes. Against one call per batch (a
response stream each, which made gRPC start a thread per call) this saves 3.4-3.6 -> 1.7-2.0 ms
of CPU per batch over both ends at 50 batches a second on this 2-core machine (a gRPC echo,
measured); the reader thread costs back about 0.4 of it, under answer delays only.

A stream that fails (the source gone, restarted on a new port, its pings unanswered:
fedio.channels.KEEPALIVE_MS, or a batch refused as bad input) reports every batch it still owed
as cut short, and the dispatcher opens another for the next batch.
"""

from __future__ import annotations

import itertools
import queue
import threading
from typing import Callable

import grpc

from fedlab.fedmodel.messages import SUBSCRIBER_METADATA
from fedlab.fedmodel.wire import pb

# on_reply(tag, reply): one reply of the batch sent with `tag`, in arrival order;
# on_failed(tags, error): the stream failed owing those batches replies.
OnReply = Callable[[object, pb.AnswerBatch], None]
OnFailed = Callable[[list, grpc.RpcError | None], None]


class StreamFailed(Exception):
    """The stream failed before the batch's first reply came (on_failed named its tag)."""


class StreamClosed(Exception):
    """The stream had failed before the batch was sent: nothing went, a new stream may take it."""


class QueryStream:
    def __init__(self, stub, name: str, subscriber: str, on_reply: OnReply, on_failed: OnFailed):
        """A stream on `stub` (the source `name`'s), opened as the warehouse subscribed by the name
        `subscriber` (the source's message log names it as the peer): each reply goes to
        `on_reply`, the batches owed replies when it fails to `on_failed` (both called from the
        thread that read)."""
        self.stub = stub
        self._batches: queue.SimpleQueue = queue.SimpleQueue()
        self._replies = stub.Query(iter(self._batches.get, None), metadata=((SUBSCRIBER_METADATA, subscriber),))
        self._name = name
        self._on_reply, self._on_failed = on_reply, on_failed
        self._ids = itertools.count(1)
        self._owed: dict[int, object] = {}       # batch -> its tag, until its last reply came
        self._first: dict[int, bool] = {}        # batch -> its first reply arrived
        self._cond = threading.Condition()
        self._reader: threading.Thread | None = None
        self.failed = False

    def exchange(self, batch: pb.SubqueryBatch, tag: object) -> None:
        """Sends `batch` and returns once its first reply was handed to on_reply(tag, ...);
        StreamFailed if the stream failed first, StreamClosed if it had failed already."""
        batch.id = next(self._ids)
        with self._cond:
            if self.failed:
                raise StreamClosed()
            self._owed[batch.id] = tag
            self._first[batch.id] = False
            self._batches.put(batch)
        try:
            while True:
                with self._cond:
                    if self._first[batch.id] or self.failed:
                        break
                    if self._reader is not None:   # the reader thread reads: wait for it
                        self._cond.wait()
                        continue
                self._read_one()
            with self._cond:
                if not self._first[batch.id]:
                    raise StreamFailed()
        finally:
            with self._cond:
                del self._first[batch.id]

    def close(self) -> None:
        self._batches.put(None)
        self._replies.cancel()

    def _read_one(self) -> bool:
        """Reads and hands on one reply; False once the stream has failed."""
        try:
            reply = next(self._replies)
        except (grpc.RpcError, StopIteration) as err:
            self._fail(err if isinstance(err, grpc.RpcError) else None)
            return False
        with self._cond:
            tag = self._owed.get(reply.batch)
            if reply.later == 0:
                self._owed.pop(reply.batch, None)
            if reply.batch in self._first:
                self._first[reply.batch] = True
            start = reply.later and self._reader is None
            if start:
                self._reader = threading.Thread(target=self._read_all, name=f"late-answers-{self._name}", daemon=True)
        self._on_reply(tag, reply)
        with self._cond:
            self._cond.notify_all()
        if start:
            self._reader.start()
        return True

    def _read_all(self) -> None:
        while self._read_one():
            pass

    def _fail(self, err: grpc.RpcError | None) -> None:
        with self._cond:
            if self.failed:
                return
            self.failed = True
            owed, self._owed = list(self._owed.values()), {}
            self._cond.notify_all()
        self._on_failed(owed, err)
