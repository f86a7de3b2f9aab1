"""The read latency of the view under load: how long a reader waits for an up-to-date view.

Every read over gRPC (ReadView) is answered once the view reflects every notification the
warehouse had received when the read came (warehouse.core.events.ViewQueried): for `lazy` that
is maintenance on demand (Zhou & Larson 2007, section 3.5: a query pays for what was deferred),
for Sze-Ling the tasks in flight, for the Strobe family and recompute nothing. A reader thread
reads the whole view every `interval` seconds during the load phase; the latency includes
sending the rows, which is the same for every algorithm at the same view. Reads are few (every
5 s by default) because each one makes lazy combine everything pending, whatever its bound:
frequent reads would measure the reads' schedule, not the bound's.
"""

from __future__ import annotations

import threading
import time

from fedlab.bench import metrics

READ_INTERVAL = 5.0   # seconds between reads


class ReadProbe:
    def __init__(self, read, interval: float = READ_INTERVAL):
        """`read()` reads the view once (live.federation.Federation.read_view)."""
        self._read = read
        self.interval = interval
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="read-probe", daemon=True)

    def start(self) -> "ReadProbe":
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Stops reading; the latency percentiles in ms (bench.metrics.percentiles)."""
        self._stop.set()
        self._thread.join(timeout=120)
        return metrics.percentiles(self.latencies)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            started = time.monotonic()
            try:
                self._read()
            except Exception as err:  # a failed read is reported, not retried
                self.errors.append(f"{type(err).__name__}: {err}")
                continue
            self.latencies.append(time.monotonic() - started)
