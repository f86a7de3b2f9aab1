"""The Prometheus endpoint every process of the federation serves: GET /metrics, in Prometheus's
text format, from a registry of its own (docs/operations.md lists every series).

Each role reads its state only when scraped (a Collector per role: source_node.metrics,
warehouse.metrics, loadgen.metrics); what must be seen as it happens, a latency or a staleness,
goes into a histogram on the way. A registry per endpoint rather than the library's global one,
so that a test or a laptop run with several roles in one process gives each its own page.

    registry = new_registry()
    registry.register(SourceCollector(node))
    endpoint = MetricsEndpoint.serve(registry, "127.0.0.1", 0)   # port 0: a free one
    endpoint.port; ...; endpoint.close()
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import HistogramMetricFamily

from fedlab.fedmodel.errors import ModelError

# Spans of a few milliseconds to a minute: sub-queries answered on a LAN, Delta commits, and a
# view's staleness through a restart.
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


def new_registry() -> CollectorRegistry:
    """A registry with the process's own CPU, memory and open files (process_*), which an operator
    reads beside fedlab's series to tell which process a load costs."""
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)
    return registry


@dataclass
class MetricsEndpoint:
    """An HTTP server of `registry` on its own thread."""

    host: str
    port: int
    _server: object

    @classmethod
    def serve(cls, registry: CollectorRegistry, host: str, port: int) -> "MetricsEndpoint":
        """ModelError, one line, when the port cannot be bound (taken, or not this host's)."""
        try:
            server, _ = start_http_server(port, addr=host, registry=registry)
        except OSError as err:
            raise ModelError(f"cannot serve metrics on {host}:{port}: {err.strerror or err}") from None
        return cls(host, server.server_port, server)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def series(family, name: str, documentation: str, labels: list[str], samples):
    """A metric family of `family`'s kind (prometheus_client.core's CounterMetricFamily, ...)
    holding `samples`, (label values, value) pairs: what a Collector's `collect` yields."""
    metric = family(name, documentation, labels=labels)
    for values, value in samples:
        metric.add_metric(values, value)
    return metric


class BucketCounts:
    """One histogram's counts, kept by the object that observes it (a view, a dispatcher, a
    committer), whatever registry or labels it is later reported under (`histogram`)."""

    def __init__(self, bounds: tuple[float, ...] = SECONDS_BUCKETS):
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)   # the last: above every bound
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds, value)] += 1
            self._sum += value

    def cumulative(self) -> tuple[list[tuple[str, int]], float]:
        """(upper bound, observations up to it) from the least bound to +Inf, and the sum."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        running, buckets = 0, []
        for bound, n in zip([*map(str, self.bounds), "+Inf"], counts):
            running += n
            buckets.append((bound, running))
        return buckets, total


def histogram(name: str, documentation: str, labels: list[str], samples) -> HistogramMetricFamily:
    """A histogram family of `samples`, (label values, BucketCounts) pairs."""
    metric = HistogramMetricFamily(name, documentation, labels=labels)
    for values, counts in samples:
        buckets, total = counts.cumulative()
        metric.add_metric(values, buckets, total)
    return metric
