"""Which sub-queries a source's last few Query replies answered, so that a copy of one the core
sent again meanwhile stays home (a slow answer is not a lost one).

The core sends a sub-query again when its answer is later than the smoothed round trip allows
(fedmodel.round_trip). Live, a source's sub-queries travel in one Query batch at a time
(warehouse.dispatcher), so a copy sent again while the first was in that batch waits in the queue
until its answers are in: if the reply answered it, the copy would only make the source answer it
twice, and a loaded source, answering more slowly still, would get more copies (measured on a
PostgreSQL source under pgbench: 5,485 of 6,121 copies went after their answer had arrived).
A copy whose first answer the reply lacks (lost) still goes.

>>> recent = AnsweredRecently(kept=2)
>>> recent.replied({"q1", "q2"})
>>> [sq for sq in ["q1", "q3"] if not recent.answered(sq)]
['q3']
>>> recent.replied({"q4"}); recent.replied({"q5"})
>>> recent.answered("q1"), recent.answered("q4")
(False, True)
"""

from __future__ import annotations

from collections import deque


class AnsweredRecently:
    def __init__(self, kept: int = 32):
        """Remembers the answered ids of the last `kept` reply messages (a copy waits behind one
        batch, whose delayed answers come in messages of their own, or behind a few while the core
        has not yet taken the answers the edge queued for it)."""
        self._replies: deque[set[str]] = deque(maxlen=kept)

    def replied(self, answered: set[str]) -> None:
        """A message of a Query reply came back with answers to these sub-query ids."""
        self._replies.append(answered)

    def answered(self, subquery_id: str) -> bool:
        return any(subquery_id in ids for ids in self._replies)
