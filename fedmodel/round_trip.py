"""A smoothed round-trip time, and the wait before a copy goes again that follows from it.

As TCP's retransmission timer (RFC 6298): each sample moves the estimate an eighth of the way,
and a message waits for four smoothed round trips (or as many as its user sets), or the
configured floor if that is longer, so that retries follow the load instead of multiplying it.
Karn's rule is the caller's: it samples only exchanges whose reply cannot answer an earlier
copy; and, as Karn's algorithm, every round of timeouts doubles the wait until a sample arrives
again. Without that doubling, replies slower than the wait are never sampled (each one answers a
retried message) and the retries feed on themselves: a bench on the Q5-like view made 106,959
sub-query retries for 9,036 transactions and never caught up. Both ends use it: the warehouse
core for sub-queries (warehouse.core.sze_ling.maintenance) and for lost notifications
(warehouse.core.missing_notifications), the source for notifications (source_node.resend_policy).

A round is one wait long. TCP has one timer per connection; here every message in flight has its
own, and messages sent at different times run out at different times. Doubling for each of them
made seven stuck sub-queries wait 64 times the floor (96 s) after a source restart under 15% loss;
so timeouts within one wait of the last doubling belong to its round and do not double again.
"""

from __future__ import annotations

MAX_BACKOFF = 64


class RoundTrip:
    def __init__(self, floor: float, round_trips: float = 4):
        self.floor = floor            # the configured wait: never less
        self.round_trips = round_trips   # how many smoothed round trips a message waits (TCP: 4)
        self.smoothed: float | None = None
        self.backoff = 1
        self._doubled_at: float | None = None

    def sample(self, seconds: float) -> None:
        self.smoothed = seconds if self.smoothed is None else 0.875 * self.smoothed + 0.125 * seconds
        self.backoff = 1
        self._doubled_at = None

    def timed_out(self, now: float) -> None:
        """Waits ran out at `now`: unless the wait doubled less than a wait ago (the same round),
        the next ones wait twice as long (up to 64 times)."""
        if self._doubled_at is not None and now - self._doubled_at < self.timeout():
            return
        self._doubled_at = now
        self.backoff = min(2 * self.backoff, MAX_BACKOFF)

    def timeout(self) -> float:
        """How long a message waits for its reply before a copy goes again."""
        return max(self.floor, self.round_trips * (self.smoothed or 0.0)) * self.backoff
