"""What the maintenance core is told (events) and what it asks its adapters to do (actions)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fedlab.fedmodel.subquery import Answer, Subquery
from fedlab.fedmodel.transactions import Notification

# ---- events ----

@dataclass(frozen=True)
class NotificationArrived:
    notification: Notification
    now: float = 0.0


@dataclass(frozen=True)
class AnswerArrived:
    answer: Answer
    now: float = 0.0


@dataclass(frozen=True)
class TimerFired:
    now: float = 0.0


@dataclass(frozen=True)
class ResendRefused:
    """The source's log no longer holds `from_dsv`: the oldest it can resend is `oldest_available`."""

    source: str
    from_dsv: int
    oldest_available: int
    now: float = 0.0


@dataclass(frozen=True)
class ViewQueried:
    """A query is about to read the view: the core answers ViewReady once the view reflects
    every transaction received so far. Sze-Ling waits for its tasks in flight, and lazy
    maintenance starts maintaining what it deferred at once (Zhou-Larson section 3.5, on-demand
    scheduling); the algorithms whose view moves only at their own moments (the Strobe family,
    recompute) answer at once."""

    now: float = 0.0


@dataclass(frozen=True)
class RefreshRequested:
    """Roll the view forward to a point in time (Salem et al. 2000: point-in-time refresh): the
    point a wall time `as_of` names, or a `vector` of DSVs ((source, DSV) pairs), or with
    neither the high-water mark. Only `salem` keeps a view delta to roll with; it answers with
    the states applied, or raises warehouse.core.salem.timeline.PointError for a point outside
    [the view's point, the high-water mark]."""

    as_of: float | None = None
    vector: tuple[tuple[str, int], ...] | None = None
    now: float = 0.0


# ---- actions ----

@dataclass(frozen=True)
class SendSubquery:
    subquery: Subquery
    serves: str = ""    # the computation it serves (`transaction/relation`), for traces


@dataclass(frozen=True)
class RequestResend:
    """Ask `source` to send its notifications from `from_dsv` through `through_dsv` again (the
    ones the core knows it lacks, Sze-Ling's lost-notification detection); `through_dsv` None:
    every one from `from_dsv` on."""

    source: str
    from_dsv: int
    through_dsv: int | None = None


@dataclass(frozen=True)
class Acknowledge:
    """Every notification of `source` up to `dsv`, and those in `beyond` (received after a gap),
    reached the core: the source need not send them again soon (source_node.resend_policy)."""

    source: str
    dsv: int
    beyond: tuple[int, ...] = ()


@dataclass(frozen=True)
class StateApplied:
    """One source transaction's effect was applied to the view: a new view state.

    `delta` maps view rows (with the count column left out) to signed count changes;
    `versions` is the per-source data source version vector the new state reflects. A state
    that reflects several transactions at once (the Strobe family, lazy) is named by the last
    and lists them all in `notes`.
    """

    source: str
    dsv: int
    txn_id: str
    delta: dict
    versions: dict
    commit_time: float = 0.0
    notes: tuple = field(default=())


@dataclass(frozen=True)
class ViewDeltaPropagated:
    """Salem's propagation step added `rows` to the timed view delta: (view row, signed count,
    timestamp key (commit time, source, DSV)) each, none applied to the view yet. The live
    warehouse keeps them in Delta with the batch that moves the high-water mark, so that a Spark
    reader can roll the view to a point itself (warehouse.store.delta_store.view_as_of)."""

    rows: tuple


@dataclass(frozen=True)
class ViewReady:
    """The view may be read: it reflects what was received when the last ViewQueried came."""


@dataclass(frozen=True)
class EvaluateView:
    """Evaluate `view` over whole relations (`relations`: name -> rows), read at one state per
    source, and hand the result back as ViewEvaluated(`round`, ...): periodic recomputation's
    job, and a resynchronisation's (warehouse.core.snapshots). The live warehouse runs it as a
    Spark job, the simulator with warehouse.core.recompute; the core never evaluates it itself,
    so it stays free of Spark and of the time a job takes."""

    round: int
    view: object          # fedmodel.viewdef.ViewDef
    relations: dict


@dataclass(frozen=True)
class ViewEvaluated:
    """The result of EvaluateView(`round`): {view row: multiplicity}, or None if the job failed.
    The adapter reports every EvaluateView it was given, so the core never waits on a timer."""

    round: int
    rows: dict | None
    now: float = 0.0
