"""The sub-queries a baseline has sent and not yet had answered, each sent again once
`query_timeout` has passed since it was last sent.

The papers' baselines (the Strobe family, SWEEP, ECA) assume that no message is lost; here an
answer may be, and a baseline that waited for it forever would show a stalled transport, not
what the algorithm does with a late, lost or repeated message. So each resends, as the
conventional baseline does, and ignores an answer to a sub-query no longer outstanding.
"""

from __future__ import annotations

import heapq

from fedlab.fedmodel.subquery import Subquery
from fedlab.warehouse.core.events import SendSubquery


class Unanswered:
    def __init__(self, query_timeout: float):
        self.query_timeout = query_timeout
        self._sent: dict[str, tuple[float, Subquery]] = {}
        # (due, id) of every sending, the superseded ones left in until they come to the top:
        # `next_due` is asked after every step, and a baseline that falls behind holds thousands.
        self._dues: list[tuple[float, str]] = []

    def sent(self, sq: Subquery, now: float) -> None:
        self._timed(sq.id, now, sq)

    def _timed(self, sid: str, now: float, sq: Subquery) -> None:
        self._sent[sid] = (now, sq)
        heapq.heappush(self._dues, (now + self.query_timeout, sid))

    def answered(self, subquery_id: str) -> None:
        self._sent.pop(subquery_id, None)

    def overdue(self, now: float) -> list[SendSubquery]:
        """Every sub-query unanswered for `query_timeout`, sent again (and timed from now)."""
        again = []
        for sid, (sent, sq) in list(self._sent.items()):
            if now - sent >= self.query_timeout:
                self._timed(sid, now, sq)
                again.append(SendSubquery(sq, "retry"))
        return again

    def next_due(self) -> float | None:
        """When `overdue` may next send one (None: nothing is outstanding): the earliest due of
        the sendings still current."""
        dues = self._dues
        while dues and (dues[0][1] not in self._sent or self._sent[dues[0][1]][0] + self.query_timeout != dues[0][0]):
            heapq.heappop(dues)
        return dues[0][0] if dues else None
