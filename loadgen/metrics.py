"""The load's Prometheus series, read from its DriveResult when scraped (fedio.metrics_endpoint):
what it offered, what the sources committed, and what they rejected, by the kind of reason (the
part of loadgen.driver.rejection_reason before its first colon: an error's type or a gRPC status,
so that the label's values stay few)."""

from __future__ import annotations

from collections import Counter

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from fedlab.fedio.metrics_endpoint import series
from fedlab.loadgen.driver import DriveResult


class LoadCollector(Collector):
    def __init__(self, result: DriveResult):
        self.result = result

    def collect(self):
        r = self.result
        yield series(CounterMetricFamily, "fedlab_load_offered", "Transactions the load offered.", [], [([], r.offered)])
        yield series(CounterMetricFamily, "fedlab_load_committed", "Transactions the sources committed.", [],
                     [([], r.committed)])
        kinds = Counter()
        for reason, n in list(r.reasons.items()):
            kinds[reason.split(":", 1)[0]] += n
        yield series(CounterMetricFamily, "fedlab_load_rejected", "Transactions the sources rejected, by kind of reason.",
                     ["reason"], [([kind], n) for kind, n in sorted(kinds.items())])
