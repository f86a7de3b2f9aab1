"""The warehouse's batch protocol: what one durable batch holds, and what a source may be told.

The live warehouse makes its work durable in batches, one Delta commit each
(warehouse.store.delta_store); the simulator in its simulated store. Both follow these rules,
through this one module (docs/architecture.md 2: no protocol rule in one world only):
- A batch holds the states applied since the previous batch, in apply order; the algorithm's
  version state as it is when the batch is taken; the notifications received since that this
  state does not reflect yet (registry.not_reflected: a restart maintains exactly those again);
  and salem's timed view delta rows propagated since.
- A notification is kept for a batch once: a copy that arrives again (the sources deliver at
  least once) is neither kept nor written twice, nor is one the durable view already reflects.
  What the ledger remembers of them is what is in flight: it forgets those the durable view
  reflects, so a run of hours holds no more than one of minutes.
- A source is told two marks of what is durable (the Notify reply, source_node.resend_policy):
  `acked`, every DSV up to which has arrived and is durable, as a notification or in the view, so
  its outbox may drop them; and `view_dsv`, the DSV the durable view reflects, below which no
  sub-query asks as of an earlier version (fedmodel.as_of). Both move only when a batch commits,
  to what was true when it was taken.
- A batch whose commit failed is taken again, with what came meanwhile, at the next commit;
  one whose commit failed after it became durable (the store holds it: the reply was lost)
  counts as committed.
- A restart starts from what is durable: the view's DSVs and the notifications kept beside it
  that it does not reflect (registry.not_reflected).
- A warehouse that keeps several views, each with its own ledger, is one subscriber to its
  sources (warehouse.view_group): it tells a source what holds for every view (`for_every_view`),
  so a notification leaves the source's outbox only once every view has it durably.

>>> from fedlab.fedmodel.transactions import Notification
>>> ledger = BatchLedger({"s": 1})
>>> [ledger.receive(Notification("s", d, f"t{d}", ())) for d in (2, 4, 2)]   # 2 twice, 3 still missing
[True, True, False]
>>> ledger.apply("state of t2")
>>> batch = ledger.take({"sources": {"s": {"applied_dsv": 2}}})
>>> batch.id, batch.applied, [n.dsv for n in batch.notifications], ledger.acked("s")
(1, ['state of t2'], [4], 1)
>>> ledger.committed(batch)
>>> ledger.acked("s"), ledger.view_dsv("s"), ledger.take({}) is None
(2, 2, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from fedlab.warehouse.core.events import Acknowledge
from fedlab.warehouse.core.receipts import Receipts
from fedlab.warehouse.core.registry import not_reflected


@dataclass(frozen=True)
class Batch:
    """What one durable commit holds (see the module docstring)."""

    id: int
    state: dict              # the algorithm's version state
    applied: list            # the states applied since the previous batch, in apply order
    notifications: list      # received since, and not reflected in `state`
    timed: list              # salem: the view delta rows propagated since
    received: int            # how many received notifications it accounts for (with those reflected)
    contiguous: dict         # per source: every DSV up to it had arrived when the batch was taken


@dataclass(frozen=True)
class Marks:
    """What a source is told of its notifications in a Notify reply (the module docstring):
    `acked` and `view_dsv` from durable batches, `reached` what arrived in this process."""

    acked: int
    reached: Acknowledge
    view_dsv: int


def for_every_view(marks: Sequence[Marks]) -> Marks:
    """One source's marks for a warehouse keeping several views, from each view's: a DSV counts as
    durable, reached or reflected only once it is so for every view.

    >>> a = Marks(5, Acknowledge("s", 5, (7, 8)), 4)
    >>> b = Marks(3, Acknowledge("s", 3, (5, 8)), 3)
    >>> for_every_view([a, b])
    Marks(acked=3, reached=Acknowledge(source='s', dsv=3, beyond=(5, 8)), view_dsv=3)
    """
    if len(marks) == 1:   # one view: its own marks (every Notify reply asks)
        return marks[0]
    reached = [(m.reached.dsv, set(m.reached.beyond)) for m in marks]
    low = min((m.reached for m in marks), key=lambda r: r.dsv)
    # Sets, not the tuples: under loss a source's DSVs beyond a gap run into the hundreds, and
    # testing each against each was a quarter of the warehouse's CPU at 1,900 txn/s (its profile).
    beyond = tuple(d for d in low.beyond if all(d <= dsv or d in others for dsv, others in reached))
    return Marks(min(m.acked for m in marks), Acknowledge(low.source, low.dsv, beyond),
                 min(m.view_dsv for m in marks))


class BatchLedger:
    def __init__(self, view_dsv: dict[str, int], kept=(), last_batch: int = 0):
        """Starts from a durable view that reflects `view_dsv` (per source), with the notifications
        `kept` beside it (those received before a restart) and `last_batch`, the id of the
        last batch committed (0: none yet)."""
        self.receipts = Receipts(view_dsv)   # what reached this process, by DSV
        self.last_batch = last_batch
        self._kept: set[tuple[str, int]] = set()   # (source, DSV) durable or in the next batch
        for n in kept:
            self._kept.add((n.source, n.dsv))
            self.receipts.add(n.source, n.dsv)
        self._acked = {s: self.receipts.contiguous(s) for s in {*view_dsv, *(s for s, _ in self._kept)}}
        self._view_dsv = dict(view_dsv)
        self._applied: list = []
        self._received: list = []
        self._timed: list = []

    # ---- what arrives and what is applied ----

    def receive(self, notification) -> bool:
        """A notification reached the warehouse; True when it is to be kept in the next batch
        (not a copy of one already kept, nor one the durable view reflects)."""
        key = (notification.source, notification.dsv)
        self.receipts.add(*key)
        if key in self._kept or notification.dsv <= self._view_dsv.get(notification.source, 0):
            return False
        self._kept.add(key)
        self._received.append(notification)
        return True

    def read_past(self, source: str, dsv: int) -> None:
        """The algorithm no longer needs `source`'s DSVs up to `dsv`, received or not (its
        Acknowledge: a resynchronisation read past them)."""
        self.receipts.advance(source, dsv)

    def apply(self, state) -> None:
        """A state the algorithm applied (the world's record of it: the change log's entry)."""
        self._applied.append(state)

    def keep_timed(self, rows: list) -> None:
        """Salem's view delta rows, propagated."""
        self._timed += rows

    # ---- batches ----

    def pending(self) -> bool:
        """Whether anything was applied, received or propagated since the last batch."""
        return bool(self._applied or self._received or self._timed)

    def take(self, state: dict) -> Batch | None:
        """The next batch, with the algorithm's version `state` as of now; None when nothing
        was applied, received or propagated since the last one."""
        if not self.pending():
            return None
        sources = {*self._acked, *(n.source for n in self._received)}
        return Batch(self.last_batch + 1, state, list(self._applied), not_reflected(self._received, state),
                     list(self._timed), len(self._received), {s: self.receipts.contiguous(s) for s in sources})

    def committed(self, batch: Batch) -> None:
        """`batch` is durable: what it holds leaves the ledger (what came since stays for the
        next), and the marks sources are told move to what was true when it was taken."""
        self._applied = self._applied[len(batch.applied):]
        self._received = self._received[batch.received:]
        self._timed = self._timed[len(batch.timed):]
        self.last_batch = batch.id
        for s, c in batch.contiguous.items():
            self._acked[s] = max(self._acked.get(s, 0), c)
        for s, v in batch.state.get("sources", {}).items():
            self._view_dsv[s] = max(self._view_dsv.get(s, 0), v["applied_dsv"])
        self._kept = {(s, d) for s, d in self._kept if d > self._view_dsv.get(s, 0)}

    def failed(self, batch: Batch, last_durable: int | None) -> bool:
        """`batch`'s commit failed; `last_durable` is the last batch id the store holds, read back
        after the failure. True when that is `batch` (it became durable, the reply was lost), which
        then counts as committed; otherwise it is taken again, with more, next time."""
        if last_durable is None or last_durable < batch.id:
            return False
        self.committed(batch)
        return True

    # ---- what sources are told ----

    def acked(self, source: str) -> int:
        """Every DSV of `source` up to this one has arrived and is durable."""
        return self._acked.get(source, 0)

    def view_dsv(self, source: str) -> int:
        """The DSV of `source` the durable view reflects."""
        return self._view_dsv.get(source, 0)

    def reached(self, source: str) -> Acknowledge:
        """What of `source` has reached this process, durable or not."""
        return self.receipts.acknowledgement(source)

    def marks(self, source: str) -> Marks:
        """What `source` is told now."""
        return Marks(self.acked(source), self.reached(source), self.view_dsv(source))

    def missing(self, source: str, from_dsv: int, through_dsv: int | None) -> tuple[int, int | None] | None:
        """The span of `source`'s DSVs from `from_dsv` through `through_dsv` (None: no end) that
        has not reached this process, narrowed at both ends; None when all of it has
        (warehouse.core.receipts.Receipts.missing)."""
        return self.receipts.missing(source, from_dsv, through_dsv)
