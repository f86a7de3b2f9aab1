"""Recompute on change: the view evaluated again from a snapshot of the sources, as soon as a
source reports a change and no round is out.

fedlab's `recompute` starts a round every period, whether anything changed or not; this one
starts one when a notification arrives, so an idle federation costs nothing and a busy one is
recomputed back to back. Each round reads every view relation whole at one state per source
(warehouse.core.snapshots.SnapshotRead asks a source again when its answers disagree), hands the
relations to the adapter to evaluate (EvaluateView: a Spark job live, an in-memory evaluation in
the simulator) and replaces the view with the result (ViewEvaluated). Every state is the view at
the source states it was read at: strongly consistent, though most transactions share a state.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from fedlab.warehouse.core.algorithm import Counters
from fedlab.warehouse.core.baselines.applied_versions import AppliedVersions
from fedlab.warehouse.core.events import (
    AnswerArrived,
    EvaluateView,
    NotificationArrived,
    ResendRefused,
    StateApplied,
    TimerFired,
    ViewEvaluated,
    ViewQueried,
    ViewReady,
)
from fedlab.warehouse.core.registry import Plugin
from fedlab.warehouse.core.snapshots import SnapshotRead
from fedlab.warehouse.core.timings import QUERY_TIMEOUT
from fedlab.warehouse.core.view_state import MaterializedView


@dataclass
class RoundCounters(Counters):
    rounds: int = 0
    subqueries: int = 0
    retries: int = 0


class RecomputeOnChange(AppliedVersions):
    """The algorithm: `handle(event)` returns actions, and nothing else touches the world."""

    def __init__(self, view, rows, brv, dsv, query_timeout: float = QUERY_TIMEOUT):
        super().__init__(brv, dsv)   # the transport (notifications received) and the versions applied
        self.view = view
        self.query_timeout = query_timeout
        self.mview = MaterializedView(rows)
        self.trace: list[dict] = []
        self.counters = RoundCounters()
        self.read: SnapshotRead | None = None   # the round's snapshot, while it is being read
        self.evaluating: dict | None = None      # the round whose EvaluateView is out
        self.ids = 0

    def handle(self, event) -> list:
        if isinstance(event, NotificationArrived):
            n = event.notification
            self.transport.add(n)
            self.transport.forget_through(n.source, self.transport.contiguous(n.source))
            return [self.transport.acknowledgement(n.source), *self._start_round(event.now)]
        if isinstance(event, AnswerArrived):
            if self.read is None or not self.read.expects(event.answer):
                return []   # a late copy of an answer this round no longer needs
            again = self.read.take(event.answer)
            self.counters.subqueries += len(again)
            return again or (self._evaluate() if self.read.complete else [])
        if isinstance(event, ViewEvaluated):
            return self._replace_view(event, event.now)
        if isinstance(event, TimerFired):
            if self.read is not None and not self.read.complete:
                retries = self.read.overdue(event.now, self.query_timeout)
                self.counters.retries += len(retries)
                return retries
            return self._start_round(event.now)   # a change that came while a round was out
        if isinstance(event, (ResendRefused, ViewQueried)):
            return [] if isinstance(event, ResendRefused) else [ViewReady()]
        raise TypeError(f"unknown event {event!r}")

    def _behind(self) -> bool:
        """Some source reported a change the view does not reflect yet."""
        return any(self.transport.highest(s) > d for s, d in self._applied_dsv.items())

    def _start_round(self, now: float) -> list:
        if self.read is not None or self.evaluating is not None or not self._behind():
            return []
        self.counters.rounds += 1
        self.read = SnapshotRead(self.view, self._new_id, now)
        sent = self.read.start()
        self.counters.subqueries += len(sent)
        return sent

    def _new_id(self) -> str:
        self.ids += 1
        return f"c{self.ids}"

    def _evaluate(self) -> list:
        read, self.read = self.read, None
        versions = {**self._applied_dsv, **read.dsv()}
        self.evaluating = {"round": self.counters.rounds, "versions": versions, "refreshed": read.brv()}
        return [EvaluateView(self.counters.rounds, self.view, read.relations())]

    def _replace_view(self, event: ViewEvaluated, now: float) -> list:
        if self.evaluating is None or event.round != self.evaluating["round"]:
            return []
        done, self.evaluating = self.evaluating, None
        if event.rows is None:   # the job failed: the next round reads again
            return self._start_round(now)
        delta = Counter(event.rows)
        delta.subtract(self.mview.snapshot())
        self.mview = MaterializedView(dict(event.rows))
        self._applied_dsv = done["versions"]
        self.refreshed.update(done["refreshed"])
        state = StateApplied("*", event.round, f"round-{event.round}", {r: c for r, c in delta.items() if c},
                             dict(done["versions"]))
        return [state, *self._start_round(now)]

    # ---- what adapters and reports read (warehouse.core.algorithm.Algorithm) ----

    @property
    def in_flight(self) -> int:
        return sum(max(0, self.transport.highest(s) - d) for s, d in self._applied_dsv.items())

    @property
    def timeout(self) -> float:
        return self.query_timeout

    def view_rows(self) -> dict[tuple, int]:
        return self.mview.snapshot()


def create(view, rows, brv, dsv, settings) -> RecomputeOnChange:
    """The factory fedlab calls, with the settings of the command that runs it."""
    return RecomputeOnChange(view, rows, brv, dsv, **settings.timings("query_timeout"))


PLUGIN = Plugin(
    name="recompute-on-change",
    paper="docs/new-algorithm.md (fedlab's tutorial)",
    level="strong",
    description="the view recomputed from a snapshot whenever a source reports a change",
    factory=create,
    default_access=None,   # it reads whole relations: no access path to choose
)
