"""When a source sends each unacknowledged notification again: the outbox's resend policy.

A pure object handed the time, so that the live sender (source_node.sender, wall-clock time) and
the simulated sources (simulation.simulator, simulated time) follow one rule (docs/architecture.md 2: no
protocol rule in one world only).

At-least-once delivery: a notification leaves when it is committed and again `resend_interval`
after its last copy left (or four smoothed round trips of the calls that carry notifications, when
the warehouse answers more slowly than that: fedmodel.round_trip), until the warehouse
acknowledges it. The warehouse also reports, under
its incarnation (an id per warehouse process), which DSVs reached its core: every one up to a
mark, and those it holds beyond the mark (received above a gap). Those wait instead until no
report has come for `safety_interval` (long), since the warehouse holds them; without that a
notification above a gap the warehouse cannot close (a log truncated at the source, an algorithm
that never asks for gaps) would travel again every round forever. They go at once when a reply
names another incarnation that lacks them (the warehouse restarted and lost its memory); the long
timer covers a restart no reply reveals (a source that sends nothing gets no reply). It counts
from the last report, not from when the copy left: the warehouse acknowledges only what is
durable in Delta, which under load took longer than 20 s, and a timer from the copy's departure
sent 44% of all notifications twice to a warehouse that kept reporting it held them.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from fedlab.fedmodel.round_trip import RoundTrip
from fedlab.fedmodel.transactions import Notification


# Seconds an unacknowledged notification waits before it goes again: the live sources' default.
# The deterministic simulator's sources resend every timer round instead (simulation.simulator).
RESEND_INTERVAL = 2.0


class ResendPolicy:
    def __init__(self, resend_interval: float, safety_interval: float | None = None):
        """`resend_interval`: how long an unacknowledged notification the warehouse has not
        reported received waits after it left; `safety_interval` (default 10 x resend_interval):
        the same for one it reported received in its current incarnation."""
        self.resend_interval = resend_interval
        self.safety_interval = 10 * resend_interval if safety_interval is None else safety_interval
        self._last_left: dict[int, float] = {}   # DSV -> when its latest copy left
        self._newest = 0                           # every DSV up to it has left at least once
        self._scan_at: float | None = None         # no copy is due before then (None: none left)
        self._incarnation: str | None = None      # the warehouse process the last report came from
        self._heard_at = float("-inf")             # when that report came
        self._received = 0                         # every DSV up to it reached that process's core
        self._beyond: frozenset[int] = frozenset()  # and these above the mark
        self.round_trip = RoundTrip(resend_interval)   # of the calls that carry notifications

    def due(self, unacknowledged: Sequence[Notification], now: float) -> list[Notification]:
        """The notifications to send now (never sent, or waited their interval), marked as left.

        `unacknowledged` is in DSV order. Called at every commit under load, so the new ones are
        found from the end, and the whole list is looked at only once a copy may be due."""
        fresh = []
        for note in reversed(unacknowledged):
            if note.dsv <= self._newest:
                break
            fresh.append(note)
        fresh.reverse()
        again = []
        scan = self._scan_at is not None and now >= self._scan_at
        if scan:   # forgets the acknowledged (gone from the list) and finds what is due again
            self._last_left = {n.dsv: self._last_left[n.dsv] for n in unacknowledged if n.dsv in self._last_left}
            again = [n for n in unacknowledged if n.dsv <= self._newest and
                     (n.dsv not in self._last_left or now >= self._due_at(n.dsv))]
        for note in again + fresh:
            self._left(note.dsv, now)
        if fresh:
            self._newest = fresh[-1].dsv
        if scan:
            self._scan_at = min((self._due_at(dsv) for dsv in self._last_left), default=None)
        return again + fresh

    def overdue(self, unacknowledged: Sequence[Notification], now: float) -> list[Notification]:
        """`due` for a sender that sent each notification as it was committed (`left`: the
        simulator's, whose timed mode keeps this timer apart from the warehouse's): none is new,
        so what goes is what waited its interval, and every one a `forget` wiped the departure of."""
        if unacknowledged:
            self._newest = max(self._newest, unacknowledged[-1].dsv)
            if self._scan_at is None and any(n.dsv not in self._last_left for n in unacknowledged):
                self._scan_at = float("-inf")
        return self.due(unacknowledged, now)

    def heard(self, incarnation: str, received: int, beyond: Iterable[int] = (), answered: Iterable[int] = (),
              *, now: float) -> None:
        """A report from the warehouse process `incarnation`, at `now`: every DSV up to
        `received` and those in `beyond` reached its core; `answered` are the DSVs the report
        answers (they reached it, whatever it says)."""
        beyond = frozenset(beyond)
        self._heard_at = now
        if incarnation == self._incarnation:
            self._received = max(self._received, received)   # reports of one incarnation only grow
            self._beyond = frozenset(d for d in self._beyond | beyond if d > self._received)
            return
        if self._incarnation is not None:
            # The warehouse restarted: what it held in memory and had not made durable is gone,
            # so everything unacknowledged the new process lacks goes at the next `due`.
            reached = set(answered) | beyond
            for dsv in [d for d in self._last_left if d > received and d not in reached]:
                del self._last_left[dsv]
            self._scan_at = float("-inf")
        self._incarnation, self._received, self._beyond = incarnation, received, beyond

    def left(self, dsv: int, now: float) -> None:
        """A copy of `dsv` left outside `due` (the simulator sends each commit's at once)."""
        self._left(dsv, now)

    def asked(self, notes: Iterable[Notification], incarnation: str | None, now: float) -> list[Notification]:
        """What a resend request from the warehouse process `incarnation` gets of `notes` (the
        range it asked for): those it has not reported received, marked as left. A gap's range
        spans the notifications received above it, which would otherwise travel again."""
        lacking = [n for n in notes if incarnation != self._incarnation or not self.held(n.dsv)]
        for note in lacking:
            self._left(note.dsv, now)
        return lacking

    def held(self, dsv: int) -> bool:
        """Whether the warehouse reported `dsv` received (in its current incarnation)."""
        return dsv <= self._received or dsv in self._beyond

    def forget(self) -> None:
        """Everything unacknowledged goes again at the next `due` (a failed call, another
        warehouse): its report, if it ever comes, is taken as it is."""
        self._last_left.clear()
        self._newest, self._scan_at = 0, None
        self._incarnation, self._received, self._beyond = None, 0, frozenset()
        self._heard_at = float("-inf")

    def next_due(self) -> float | None:
        """When a copy may become due again (the earliest, or a little earlier); None if none left.
        An acknowledged notification leaves the outbox, and is forgotten at the next look."""
        return self._scan_at

    def restarted_by(self, incarnation: str) -> bool:
        """Whether a report from `incarnation` reveals a warehouse restart."""
        return self._incarnation is not None and incarnation != self._incarnation

    def _left(self, dsv: int, now: float) -> None:
        self._last_left[dsv] = now
        due = self._due_at(dsv)
        self._scan_at = due if self._scan_at is None else min(self._scan_at, due)

    def _due_at(self, dsv: int) -> float:
        """When the copy of `dsv` that left last goes again, unless acknowledged meanwhile."""
        if self.held(dsv):
            return max(self._last_left[dsv], self._heard_at) + self.safety_interval
        return self._last_left[dsv] + self.round_trip.timeout()
