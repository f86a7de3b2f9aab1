"""A tiny stand-in for the warehouse's Notify RPC, for the source-node tests.

It records every notification that arrives, keeps the first copy of each DSV, acknowledges
cumulatively (the highest DSV up to which every notification was kept), and can ignore the
first delivery of each DSV, to show that the source resends what was not acknowledged.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc

from fedmodel.channels import add_port
from fedmodel.wire import pb, rpc


class FakeWarehouse(rpc.WarehouseServicer):
    def __init__(self, ignore_first_delivery: bool = False, port: int = 0, tls=None):
        self.ignore_first_delivery = ignore_first_delivery
        self.batches: list[list[int]] = []      # DSVs of every batch that arrived, in arrival order
        self.kept: dict[str, list[int]] = {}    # per source, DSVs kept, in the order they were kept
        self.notifications: dict[tuple[str, int], pb.Notification] = {}
        self._seen: set[tuple[str, int]] = set()
        self._cond = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        rpc.add_WarehouseServicer_to_server(self, self._server)
        self.port = add_port(self._server, f"127.0.0.1:{port}", tls)
        self._server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def Notify(self, request: pb.NotificationBatch, context) -> pb.NotifyReply:
        with self._cond:
            self.batches.append([n.dsv for n in request.notifications])
            for n in request.notifications:
                first = (n.source, n.dsv) not in self._seen
                self._seen.add((n.source, n.dsv))
                if (first and self.ignore_first_delivery) or (n.source, n.dsv) in self.notifications:
                    continue
                self.notifications[(n.source, n.dsv)] = n
                self.kept.setdefault(n.source, []).append(n.dsv)
            self._cond.notify_all()
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
