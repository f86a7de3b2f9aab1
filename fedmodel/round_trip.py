"""A smoothed round-trip time, and the wait before a copy goes again that follows from it.

As TCP's retransmission timer (RFC 6298): each sample moves the estimate an eighth of the way,
and a message waits for four smoothed round trips, or the configured floor if that is longer, so
that retries follow the load instead of multiplying it. Karn's rule is the caller's: it samples
only exchanges whose reply cannot answer an earlier copy; and, as Karn's algorithm, every round
of timeouts doubles the wait until a sample arrives again. Without that doubling, replies slower
than the wait are never sampled (each one answers a retried message) and the retries feed on
themselves: a bench on the Q5-like view made 106,959 sub-query retries for 9,036 transactions
and never caught up. Both ends use it: the warehouse core for sub-queries
(warehouse.core.sze_ling.engine), the source for notifications (source_node.resend_policy).
"""

from __future__ import annotations

MAX_BACKOFF = 64


class RoundTrip:
    def __init__(self):
        self.smoothed: float | None = None
        self.backoff = 1

    def sample(self, seconds: float) -> None:
        self.smoothed = seconds if self.smoothed is None else 0.875 * self.smoothed + 0.125 * seconds
        self.backoff = 1

    def timed_out(self) -> None:
        """A round of waits ran out: the next ones wait twice as long (up to 64 times)."""
        self.backoff = min(2 * self.backoff, MAX_BACKOFF)

    def timeout(self, floor: float) -> float:
        """How long a message waits for its reply before a copy goes again (at least `floor`)."""
        return max(floor, 4 * (self.smoothed or 0.0)) * self.backoff
