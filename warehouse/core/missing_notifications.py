"""Lost notifications, found and asked for again (Sze-Ling, end of section 5.2), each on its own clock.

A source's notification the warehouse lacks shows as a gap: a DSV missing below a later
notification, or below the state an answer was read at. A gap is asked for once it has lasted
`reorder_allowance` (a reordered notification closes its gap within its delay, a lost one never
does: waiting saves asking for the reordered and receiving them twice), and again every
`resend_timeout` (its resent copy may be lost too), however many gaps open meanwhile. (Under 5%
loss at 170 txn/s a source opens a gap every 0.1 s; one ask per source per timeout stalled its
notifications behind a gap.) The resend asks for no more than the last DSV known missing, so
notifications received after a gap do not travel again. Sze-Ling maintenance and salem use it.

How long a gap asked for waits before it is asked for again follows the round trip of the asks
(fedmodel.round_trip, TCP's timer): from a request to the arrival of the notification it brought,
sampled for gaps asked for once (Karn's rule), RESEND_ROUND_TRIPS smoothed round trips (1.5:
warehouse.core.timings says why not TCP's four) or `resend_timeout` if that is longer, doubled
for every round that asked again until a sample comes. So a resent copy lost again costs a round
trip or two of the resend path, not a fixed timeout.
"""

from __future__ import annotations

from fedlab.fedmodel.round_trip import RoundTrip
from fedlab.warehouse.core.events import RequestResend
from fedlab.warehouse.core.notification_log import NotificationLog
from fedlab.warehouse.core.timings import RESEND_ROUND_TRIPS


class MissingNotifications:
    def __init__(self, log: NotificationLog, reorder_allowance: float, resend_timeout: float):
        self.log = log
        self.reorder_allowance = reorder_allowance
        # source -> {missing DSV: (the tick that first found it missing, when last asked for, how often)}
        self._gaps: dict[str, dict[int, tuple[float, float, int]]] = {}
        self.round_trip = RoundTrip(resend_timeout, RESEND_ROUND_TRIPS)   # from a resend request to the notification it brought
        # The latest DSV each source answered at: past the notifications received, one is
        # probably lost, whether or not the answer waits for it.
        self._answered_at: dict[str, int] = {}

    def answered(self, source: str, dsv: int) -> None:
        """An answer of `source` was read at `dsv`."""
        self._answered_at[source] = max(self._answered_at.get(source, 0), dsv)

    def received(self, source: str, dsv: int, now: float) -> None:
        """A notification of `source` arrived at `now`: the gap it closes is gone (a duplicate
        copy finds none), and one asked for once times the round trip of the asks (one asked for
        twice may answer either request)."""
        gap = self._gaps.get(source, {}).pop(dsv, None)
        if gap is not None and gap[2] == 1:
            self.round_trip.sample(now - gap[1])

    def forget_answers(self) -> None:
        """The answers read so far no longer tell anything (a resynchronisation read past them)."""
        self._answered_at.clear()

    def ask(self, source: str, now: float) -> list[RequestResend]:
        """The resend request for the gaps of `source` that are due, if any."""
        last = self._last_missing(source)
        received = self.log.contiguous(source)
        missing = [] if last is None else [d for d in range(received + 1, last + 1) if self.log.get(source, d) is None]
        gaps = self._gaps[source] = {d: self._gaps.get(source, {}).get(d, (now, float("-inf"), 0)) for d in missing}
        wait = self.round_trip.timeout()
        due = [d for d, (seen, asked, _n) in gaps.items() if seen <= now - self.reorder_allowance and now - asked >= wait]
        if not due:
            return []
        if any(gaps[d][2] for d in due):   # asked for before and still missing: wait longer next time
            self.round_trip.timed_out(now)
        gaps.update((d, (gaps[d][0], now, gaps[d][2] + 1)) for d in due)
        return [RequestResend(source, due[0], due[-1])]

    def next_due(self, sources) -> float | None:
        """When `ask` may next have a request for one of `sources`: -inf for a gap no timer has
        seen yet (its allowance counts from the first look), else the earliest a seen gap is due;
        None with no gap. A gap closed meanwhile makes that time early, never late."""
        times = []
        for source in sources:
            if self._last_missing(source) is None:
                continue
            seen = self._gaps.get(source)
            if not seen:
                return float("-inf")
            wait = self.round_trip.timeout()
            times += [max(first + self.reorder_allowance, asked + wait) for first, asked, _n in seen.values()]
        return min(times, default=None)

    def _last_missing(self, source: str) -> int | None:
        """The last DSV of `source` known missing, or None: below a later notification, or up to
        the latest state an answer was read at."""
        highest = self.log.highest(source)
        lacking = [d for d in [self.log.last_missing(source)] if d is not None]
        if self._answered_at.get(source, 0) > highest:
            lacking.append(self._answered_at[source])
        return max(lacking, default=None)
