"""The load driver: commits an update stream at the sources, open-loop, at a target rate.

Transaction i is due at start + i / rate whatever the previous ones cost, so a slow system shows
up as a backlog and a lower achieved rate, never as a lower offered rate. One client thread per
source commits that source's transactions in stream order (the stream's picture of the keys
assumes it); sources commit in parallel. The achieved rate is measured, never assumed.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class DriveResult:
    offered: int = 0
    committed: int = 0
    rejected: int = 0
    seconds: float = 0.0
    errors: list = field(default_factory=list)

    @property
    def achieved_rate(self) -> float:
        return self.committed / self.seconds if self.seconds else 0.0


def drive(commit: Callable, stream, sources, rate: float, duration: float,
          progress: Callable[[float, DriveResult], None] = lambda elapsed, result: None) -> DriveResult:
    """Offers `rate` transactions per second for `duration` seconds; returns what happened."""
    result = DriveResult()
    lock = threading.Lock()
    queues = {s: queue.Queue() for s in sources}

    def client(source: str) -> None:
        while (request := queues[source].get()) is not None:
            try:
                commit(source, request)
                with lock:
                    result.committed += 1
            except Exception as err:  # a rejected or failed commit is counted, not fatal
                with lock:
                    result.rejected += 1
                    result.errors.append(f"{request.txn_id} at {source}: {err}")

    threads = [threading.Thread(target=client, args=(s,), daemon=True, name=f"client-{s}") for s in sources]
    for t in threads:
        t.start()
    start = time.monotonic()
    last_report = 0.0
    while (elapsed := time.monotonic() - start) < duration:
        due = result.offered / rate
        if due > elapsed:
            time.sleep(min(due - elapsed, 0.05))
        else:
            source, request = stream.next()
            queues[source].put(request)
            result.offered += 1
        if elapsed - last_report >= 0.5:
            last_report = elapsed
            progress(elapsed, result)
    for q in queues.values():
        q.put(None)
    for t in threads:
        t.join()
    result.seconds = time.monotonic() - start
    progress(duration, result)
    return result
