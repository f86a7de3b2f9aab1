"""What the baselines report of the state their view reflects, written once for all of them.

The Strobe family and periodic recomputation keep no per-relation processing versions (Sze-Ling's
version state, warehouse.core.sze_ling.version_state): each relation is at the one version the
view reflects, each source at the DSV the view reflects, and the notifications received only say
how far behind the view is (`transport`).
"""

from __future__ import annotations

from fedlab.fedmodel.transactions import Notification
from fedlab.warehouse.core.events import Acknowledge
from fedlab.warehouse.core.notification_log import NotificationLog


class AppliedVersions:
    def __init__(self, brv: dict[str, int], dsv: dict[str, int]):
        self.transport = NotificationLog(dsv)
        self._applied_dsv = dict(dsv)
        self.refreshed = dict(brv)

    def _take_in(self, n: Notification) -> tuple[bool, Acknowledge]:
        """A notification arrived: whether it is new (not a copy of one received), and the
        acknowledgement that answers it. The log forgets the source's notifications through
        `_kept_after`."""
        fresh = self.transport.add(n)
        self.transport.forget_through(n.source, self._kept_after(n.source))
        return fresh, self.transport.acknowledgement(n.source)

    def _kept_after(self, source: str) -> int:
        """The DSV through which the log forgets `source`'s notifications: every one that arrived
        in order, since a baseline queues what it still needs itself."""
        return self.transport.contiguous(source)

    def received_through(self, source: str) -> int:
        return self.transport.contiguous(source)

    def applied_dsv(self) -> dict[str, int]:
        return dict(self._applied_dsv)

    def version_state(self) -> dict:
        return {"relations": {r: {"processing": v, "refreshed": v} for r, v in self.refreshed.items()},
                "sources": {s: {"applied_dsv": d} for s, d in self._applied_dsv.items()}}
