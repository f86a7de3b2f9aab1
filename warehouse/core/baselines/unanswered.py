"""The sub-queries a baseline has sent and not yet had answered, each sent again once
`query_timeout` has passed since it was last sent.

The papers' baselines (the Strobe family, SWEEP, ECA) assume that no message is lost; here an
answer may be, and a baseline that waited for it forever would show a stalled transport, not
what the algorithm does with a late, lost or repeated message. So each resends, as the
conventional baseline does, and ignores an answer to a sub-query no longer outstanding.
"""

from __future__ import annotations

from fedlab.fedmodel.subquery import Subquery
from fedlab.warehouse.core.events import SendSubquery


class Unanswered:
    def __init__(self, query_timeout: float):
        self.query_timeout = query_timeout
        self._sent: dict[str, tuple[float, Subquery]] = {}

    def sent(self, sq: Subquery, now: float) -> None:
        self._sent[sq.id] = (now, sq)

    def answered(self, subquery_id: str) -> None:
        self._sent.pop(subquery_id, None)

    def overdue(self, now: float) -> list[SendSubquery]:
        """Every sub-query unanswered for `query_timeout`, sent again (and timed from now)."""
        again = []
        for sid, (sent, sq) in list(self._sent.items()):
            if now - sent >= self.query_timeout:
                self._sent[sid] = (now, sq)
                again.append(SendSubquery(sq, "retry"))
        return again

    def next_due(self) -> float | None:
        """When `overdue` may next send one (None: nothing is outstanding)."""
        return min((sent + self.query_timeout for sent, _ in self._sent.values()), default=None)
