"""A smoothed round-trip time, and the wait before a copy goes again that follows from it.

As TCP's retransmission timer (RFC 6298): each sample moves the estimate an eighth of the way,
and a message waits for four smoothed round trips, or the configured floor if that is longer, so
that retries follow the load instead of multiplying it. Karn's rule is the caller's: it samples
only exchanges whose reply cannot answer an earlier copy. Both ends use it: the warehouse core
for sub-queries (warehouse.core.engine), the source for notifications (source_node.resend_policy).
"""

from __future__ import annotations


class RoundTrip:
    def __init__(self):
        self.smoothed: float | None = None

    def sample(self, seconds: float) -> None:
        self.smoothed = seconds if self.smoothed is None else 0.875 * self.smoothed + 0.125 * seconds

    def timeout(self, floor: float) -> float:
        """How long a message waits for its reply before a copy goes again (at least `floor`)."""
        return max(floor, 4 * (self.smoothed or 0.0))
