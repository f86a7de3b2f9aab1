"""The load driver: commits an update stream at the sources, open-loop, at a target rate.

Transaction i is due at start + i / rate whatever the previous ones cost, so a slow system shows
up as a backlog and a lower achieved rate, never as a lower offered rate. One client thread per
source commits that source's transactions in stream order (the stream's picture of the keys
assumes it); sources commit in parallel. Each client takes everything queued for its source (up
to `max_batch`) and commits it as one group (on the Source service's Commits stream): a group pays the
round trip, the wait for the store's lock and the DuckDB transaction's fixed costs once, so a
backlog is worked off in a few groups instead of growing. The achieved rate is measured, never
assumed, per committed source transaction.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import grpc

from fedlab.fedio.lockstep import LockstepStream
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import to_pb
from fedlab.fedmodel.wire import pb


@dataclass
class DriveResult:
    offered: int = 0
    committed: int = 0
    rejected: int = 0
    seconds: float = 0.0
    reasons: dict = field(default_factory=dict)    # why transactions were rejected: reason -> how many
    examples: dict = field(default_factory=dict)   # reason -> the first transaction rejected for it

    @property
    def achieved_rate(self) -> float:
        return self.committed / self.seconds if self.seconds else 0.0

    def reject(self, txn_id: str, source: str, outcome: Exception) -> None:
        reason = rejection_reason(outcome)
        self.rejected += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        self.examples.setdefault(reason, f"{txn_id} at {source}")

    def rejections(self, most: int = 3) -> list[str]:
        """The rejections by reason, the most frequent first: `N x reason (first: txn at source)`.

        >>> r = DriveResult()
        >>> for txn in ("t1", "t2"):
        ...     r.reject(txn, "sales", ValueError("duplicate key (1)"))
        >>> r.reject("t3", "sales", TimeoutError("no answer"))
        >>> r.rejections()
        ['2 x ValueError: duplicate key (1) (first: t1 at sales)', '1 x TimeoutError: no answer (first: t3 at sales)']
        """
        ranked = sorted(self.reasons.items(), key=lambda kv: -kv[1])
        lines = [f"{n} x {reason} (first: {self.examples[reason]})" for reason, n in ranked[:most]]
        if len(ranked) > most:
            lines.append(f"{sum(n for _, n in ranked[most:])} more, for {len(ranked) - most} other reasons")
        return lines


def rejection_reason(outcome: Exception) -> str:
    """One line naming why a commit failed: a gRPC status and its details (a call that ended
    without an outcome says so: the source may have committed it), or the error's first line;
    without the transaction's id and the rows' values, so that rejections for one reason count
    together.

    >>> rejection_reason(ValueError("transaction w17: modifies orders[3, 'F', 9.5] which is not there"))
    'ValueError: modifies orders[...] which is not there'
    """
    if isinstance(outcome, grpc.RpcError) and hasattr(outcome, "code"):
        unknown = "outcome unknown, " if outcome.code() in OUTCOME_UNKNOWN else ""
        text = f"{unknown}{outcome.code().name}: {outcome.details()}"
    else:
        text = f"{type(outcome).__name__}: {str(outcome).splitlines()[0] if str(outcome) else ''}"
    text = re.sub(r"\btransaction \S+: ", "", text)
    return re.sub(r"\[[^\]]*\]?", "[...]", text)[:200]


def drive(commit_batch: Callable, stream, sources, rate: float, duration: float,
          progress: Callable[[float, DriveResult], None] = lambda elapsed, result: None,
          max_batch: int = 256, result: DriveResult | None = None) -> DriveResult:
    """Offers `rate` transactions per second for `duration` seconds; returns what happened
    (into `result`, when given, as it happens: what the load's metrics read, loadgen.metrics).

    `commit_batch(source, requests)` commits the requests in order as one group and returns one
    outcome per request: an Exception for a rejected one, anything else for a committed one. An
    exception raised by the call itself (the source unreachable) rejects the whole group.
    """
    result = result if result is not None else DriveResult()
    lock = threading.Lock()
    queues = {s: queue.Queue() for s in sources}

    def client(source: str) -> None:
        last = False
        while not last:
            batch = _take(queues[source], max_batch)
            last = batch[-1] is None
            batch = [r for r in batch if r is not None]
            if not batch:
                continue
            try:
                outcomes = commit_batch(source, batch)
            except Exception as err:  # a failed commit is counted, not fatal
                outcomes = [err] * len(batch)
            with lock:
                for request, outcome in zip(batch, outcomes, strict=True):
                    if isinstance(outcome, Exception):
                        result.reject(request.txn_id, source, outcome)
                    else:
                        result.committed += 1

    threads = [threading.Thread(target=client, args=(s,), daemon=True, name=f"client-{s}") for s in sources]
    for t in threads:
        t.start()
    start = time.monotonic()
    last_report = 0.0
    while (elapsed := time.monotonic() - start) < duration:
        due = result.offered / rate
        if due > elapsed:
            time.sleep(min(due - elapsed, 0.05))
        else:
            source, request = stream.next()
            queues[source].put(request)
            result.offered += 1
        if elapsed - last_report >= 0.5:
            last_report = elapsed
            progress(elapsed, result)
    for q in queues.values():
        q.put(None)
    for t in threads:
        t.join()
    result.seconds = time.monotonic() - start
    progress(duration, result)
    return result


# The calls that end without saying whether the group committed: sent again, marked as a retry.
# CANCELLED: the source stopped serving with the group on its stream (or the channel was closed).
OUTCOME_UNKNOWN = (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


def grpc_committer(catalog, stubs: dict, patience: float = 120.0,
                   reconnect: Callable[[str], object] = lambda source: None) -> Callable:
    """`commit_batch` for `drive` over the sources' gRPC stubs: each source's groups on one Commits
    stream (fedio.lockstep; its client thread waits for each reply), opened again on the stub
    `stubs` holds when it fails. A group whose outcome went unheard (the source restarting or
    unreachable: the stream failed, found by keepalive when the source froze or was cut off) is
    sent again for `patience` seconds, marked as a retry after the highest DSV heard from that
    source: the source answers what the earlier attempt committed with its recorded versions and
    commits the rest (source_node.commit_queue), so a group is neither lost to the load nor
    committed twice. `reconnect(source)` runs before each retry (a restarted source may serve on
    a new port)."""
    heard: dict[str, int] = {}   # source -> the highest DSV it answered (one client thread per source)
    streams: dict[str, tuple[object, LockstepStream]] = {}   # source -> (the stub, its open stream)

    def exchange(source: str, batch):
        stub = stubs[source]
        if source not in streams or streams[source][0] is not stub:
            if source in streams:
                streams[source][1].close()
            streams[source] = (stub, LockstepStream(stub.Commits))
        try:
            return streams[source][1].exchange(batch)
        except grpc.RpcError:   # lockstep.StreamEnded too: the source ended the stream
            streams.pop(source)[1].close()
            raise

    def commit_batch(source: str, requests: list) -> list:
        batch = pb.CommitBatchRequest(transactions=[to_pb(r, catalog) for r in requests])
        give_up = time.monotonic() + patience
        while True:
            try:
                outcomes = batch_outcomes(exchange(source, batch))
                break
            except grpc.RpcError as err:
                if err.code() not in OUTCOME_UNKNOWN or time.monotonic() > give_up:
                    raise
            time.sleep(1)
            reconnect(source)
            batch.retry_after_dsv = heard.get(source, 0)
        heard[source] = max([heard.get(source, 0)] + [o.dsv for o in outcomes if not isinstance(o, Exception)])
        return outcomes
    return commit_batch


def batch_outcomes(reply) -> list:
    """A CommitBatchReply as `drive` counts it: each transaction's CommitReply, or a ModelError
    with the source's reason for rejecting it."""
    return [ModelError(o.error) if o.WhichOneof("outcome") == "error" else o.committed for o in reply.outcomes]


def _take(q: queue.Queue, most: int) -> list:
    """The next item of `q` (waiting for it) and whatever else is queued behind it, up to `most`
    items; the end marker None is always last."""
    items = [q.get()]
    while items[-1] is not None and len(items) < most:
        try:
            items.append(q.get_nowait())
        except queue.Empty:
            break
    return items
