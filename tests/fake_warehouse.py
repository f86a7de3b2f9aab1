"""A tiny stand-in for the warehouse's Notify stream, for the source-node tests.

It records every notification that arrives, keeps the first copy of each DSV, acknowledges
cumulatively (the highest DSV up to which every notification was kept), and can ignore the
first delivery of each DSV, to show that the source resends what was not acknowledged.
TwoLevelWarehouse acknowledges as the live warehouse does: received at once, durable later.
"""

from __future__ import annotations

import threading
import time
import uuid

from fedlab.fedio.channels import add_port, new_server
from fedlab.fedmodel.wire import pb, rpc


class FakeWarehouse(rpc.WarehouseServicer):
    def __init__(self, ignore_first_delivery: bool = False, port: int = 0, tls=None):
        self.ignore_first_delivery = ignore_first_delivery
        self.batches: list[list[int]] = []      # DSVs of every batch that arrived, in arrival order
        self.kept: dict[str, list[int]] = {}    # per source, DSVs kept, in the order they were kept
        self.notifications: dict[tuple[str, int], pb.Notification] = {}
        self._seen: set[tuple[str, int]] = set()
        self._cond = threading.Condition()
        self._server = new_server(8)
        rpc.add_WarehouseServicer_to_server(self, self._server)
        self.port = add_port(self._server, f"127.0.0.1:{port}", tls)
        self._server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def Notify(self, requests, context):
        for request in requests:
            yield self._notified(request)

    def _notified(self, request: pb.NotificationBatch) -> pb.NotifyReply:
        with self._cond:
            self.batches.append([n.dsv for n in request.notifications])
            for n in request.notifications:
                first = (n.source, n.dsv) not in self._seen
                self._seen.add((n.source, n.dsv))
                if (first and self._ignores_first(n.dsv)) or (n.source, n.dsv) in self.notifications:
                    continue
                self.notifications[(n.source, n.dsv)] = n
                self.kept.setdefault(n.source, []).append(n.dsv)
            self._cond.notify_all()
            return self._reply({n.source for n in request.notifications})

    def _ignores_first(self, dsv: int) -> bool:
        return self.ignore_first_delivery

    def _reply(self, sources: set[str]) -> pb.NotifyReply:
        return pb.NotifyReply(acked_dsv={s: self._acked(s) for s in self.kept})

    def _acked(self, source: str) -> int:
        dsv = 1
        while (source, dsv + 1) in self.notifications:
            dsv += 1
        return dsv

    def wait_for(self, source: str, count: int, timeout: float = 10.0) -> list[int]:
        """Waits until `count` notifications of `source` were kept; returns their DSVs in keeping order."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.kept.get(source, [])) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{source}: kept {self.kept.get(source)} after {timeout} s, wanted {count}")
                self._cond.wait(left)
            return list(self.kept[source])

    def stop(self) -> None:
        self._server.stop(0).wait()


class TwoLevelWarehouse(FakeWarehouse):
    """Acknowledges in two levels, as warehouse.service does: every DSV up to which it keeps every
    notification is reported received at once (received_dsv, under its incarnation), but
    acknowledged (acked_dsv) only up to what the test made durable (`make_durable`), the stand-in
    for a Delta batch commit. `restart` forgets what is not durable and takes a new incarnation,
    as a restarted warehouse would; `lose_first` DSVs lose their first delivery (a dropped one)."""

    def __init__(self, lose_first=(), **kwargs):
        self.lose_first = set(lose_first)
        self.durable: dict[str, int] = {}
        self.incarnation = uuid.uuid4().hex
        super().__init__(**kwargs)

    def make_durable(self, source: str, dsv: int) -> None:
        with self._cond:
            assert dsv <= self._acked(source), f"{source}: DSV {dsv} was not received"
            self.durable[source] = dsv

    def restart(self) -> None:
        """Loses every kept notification that is not durable; `kept` and `batches` stay a record."""
        with self._cond:
            self.notifications = {k: n for k, n in self.notifications.items() if k[1] <= self.durable.get(k[0], 1)}
            self.incarnation = uuid.uuid4().hex

    def arrivals(self, dsv: int) -> int:
        """How many copies of `dsv` arrived (of any source)."""
        with self._cond:
            return sum(batch.count(dsv) for batch in self.batches)

    def _ignores_first(self, dsv: int) -> bool:
        return dsv in self.lose_first

    def _reply(self, sources: set[str]) -> pb.NotifyReply:
        return pb.NotifyReply(acked_dsv={s: self.durable.get(s, 1) for s in sources},
                              received_dsv={s: self._acked(s) for s in sources}, incarnation=self.incarnation)
