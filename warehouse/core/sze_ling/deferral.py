"""Lazy maintenance's deferral: pending transactions, when to maintain, and how they combine.

Zhou & Larson 2007. An update does not start maintenance; its transaction waits as a pending
*maintenance task*, and the warehouse later combines the pending ones into one *maintenance job*:
- combining (section 3.4): transactions T_1..T_l, in commit order, are treated as one large
  transaction T_0 that updates the union of their relations. Per relation, the delta of T_0 is
  their deltas concatenated in version order, condensed (fedmodel.condense); the job is
  then maintained like one transaction: the m-term delta of section 3.3, term k joining the
  relations before k at their after-versions, the delta of relation k, and the relations after
  k at their before-versions. That is exactly the Sze-Ling task of a transaction touching m
  relations (warehouse.core.sze_ling.transaction_task, one sub-task per relation, each with the initial
  version numbers of its turn), so compensation brings each answer to the versions its term
  needs, and the view skips the states between T_1 and T_l. Here the transactions may come from
  several sources: a job takes, per source, a prefix of its pending transactions in DSV order,
  so the state it produces is the view at a real vector of source states (strong consistency;
  never complete, as the intermediate states are skipped).
- scheduling (section 3.5): at most one job is in progress ("at most one task with the status
  of inprogress for each materialized view"), oldest transactions first. A job starts when the
  warehouse has free cycles (no notification arrived for `idle_after` seconds), when the number
  of pending transactions reaches `combine_max` or the oldest has waited `max_delay`, and on
  demand, when a query reads the view (warehouse.core.events.ViewQueried): then every pending
  transaction received before the read is combined, whatever the bound, and jobs follow one
  another until the view reflects them all. `max_jobs` above 1 lets that many jobs overlap, as
  Sze-Ling's tasks do: a job here waits mostly for the notifications its answers were read past
  (to compensate them), not for the warehouse, and overlapping jobs are applied in start order
  and compensate each other's updates like any interfering ones (Theorem 2).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedlab.fedmodel.condense import condense, delta_rows
from fedlab.fedmodel.transactions import Notification, RelationChange
from fedlab.fedmodel.viewdef import ViewDef


@dataclass(frozen=True)
class Deferral:
    combine_max: int = 100      # the most transactions one job combines; this many pending start one
    max_delay: float = 1.0      # seconds the oldest pending transaction waits at most
    idle_after: float = 0.2     # seconds without a notification that count as free cycles
    max_jobs: int = 1           # jobs in progress at once (the paper's manager: one)

    def __post_init__(self):
        for name in ("combine_max", "max_jobs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        for name in ("max_delay", "idle_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")


@dataclass(frozen=True)
class CombinedTransaction:
    """T_0 of section 3.4: what a maintenance task reads of a transaction (`change`, `txn_id`)."""

    parts: tuple[Notification, ...]
    changes: tuple[RelationChange, ...]

    @property
    def txn_id(self) -> str:
        first, last = self.parts[0].txn_id, self.parts[-1].txn_id
        return first if len(self.parts) == 1 else f"{first}..{last}({len(self.parts)})"

    def change(self, relation: str) -> RelationChange | None:
        return next((c for c in self.changes if c.relation.lower() == relation.lower()), None)


def combine(view: ViewDef, parts: list[Notification]) -> tuple[CombinedTransaction, int]:
    """The transactions `parts` (each source's in DSV order) as one, and how many base delta rows
    condensing saved."""
    by_relation: dict[str, list[RelationChange]] = {}
    for n in parts:
        for change in n.changes:
            by_relation.setdefault(view.relation(change.relation).name, []).append(change)
    changes, saved = [], 0
    for name, history in by_relation.items():
        condensed = condense(history, view.relation(name).key_of)
        saved += sum(delta_rows(c) for c in history) - delta_rows(condensed)
        changes.append(condensed)
    return CombinedTransaction(tuple(parts), tuple(changes)), saved


class PendingTasks:
    """The view's queue of pending maintenance tasks: one per received transaction, each source's
    in DSV order, with the time it arrived."""

    def __init__(self):
        self._queue: list[tuple[Notification, float]] = []
        self._last: dict[str, int] = {}          # per source with pending tasks, the newest DSV
        self.last_arrival = float("-inf")

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, n: Notification, now: float) -> None:
        self._queue.append((n, now))
        self._last[n.source] = n.dsv
        self.last_arrival = now

    def last_dsv(self, source: str) -> int | None:
        """The DSV of `source`'s newest pending transaction, None if it has none."""
        return self._last.get(source)

    def due(self, deferral: Deferral, now: float, read_waiting: bool) -> int:
        """How many of the oldest pending transactions a job should combine now (0: wait). The
        caller asks only when fewer than `max_jobs` jobs are in progress."""
        if not self._queue:
            return 0
        if read_waiting:
            return len(self._queue)
        if (len(self._queue) >= deferral.combine_max or now - self._queue[0][1] >= deferral.max_delay
                or now - self.last_arrival >= deferral.idle_after):
            return min(len(self._queue), deferral.combine_max)
        return 0

    def next_due(self, deferral: Deferral) -> float | None:
        """When `due` may next say a job should start of its own accord (None: nothing pending);
        a read or a full queue starts one without a timer."""
        if not self._queue:
            return None
        return min(self._queue[0][1] + deferral.max_delay, self.last_arrival + deferral.idle_after)

    def take(self, count: int) -> list[Notification]:
        """The `count` oldest, removed from the queue."""
        taken, self._queue = self._queue[:count], self._queue[count:]
        self._last = {n.source: n.dsv for n, _ in self._queue}
        return [n for n, _ in taken]

    def clear(self) -> None:
        self._queue.clear()
        self._last.clear()
