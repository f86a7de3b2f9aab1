"""A source's Prometheus series, read from the node when scraped (fedio.metrics_endpoint).

Every series carries the source's name; a subscriber's (a warehouse's, source_node.subscriptions)
carry its name too. docs/operations.md lists them with what to read in them.
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fedlab.fedio.metrics_endpoint import series


class SourceCollector(Collector):
    def __init__(self, node):
        """`node`: a source_node.node.SourceNode (its store, senders and fault injector)."""
        self.node = node

    def collect(self):
        node, source = self.node, self.node.source
        dsv = node.store.dsv
        yield series(GaugeMetricFamily, "fedlab_source_dsv", "The source's data source version number (DSV).",
                   ["source"], [([source], dsv)])
        # The DSV starts at 1 and moves by one per committed transaction, whoever wrote it.
        yield series(CounterMetricFamily, "fedlab_source_commits", "Transactions committed at the source.",
                   ["source"], [([source], dsv - 1)])
        senders = sorted(list(node.senders.items()))
        labels = ["source", "subscriber"]
        yield series(CounterMetricFamily, "fedlab_source_notifications_sent",
                   "Notification copies sent to the subscriber, resends included.", labels,
                   [([source, name], s.delivered.sent) for name, s in senders])
        yield series(CounterMetricFamily, "fedlab_source_notifications_resent",
                   "Notification copies sent again: of a DSV that had gone to the subscriber before.", labels,
                   [([source, name], s.delivered.resent) for name, s in senders])
        yield series(GaugeMetricFamily, "fedlab_source_acknowledged_dsv",
                   "The DSV up to which the subscriber holds every notification durably.", labels,
                   [([source, name], s.delivered.acknowledged_dsv) for name, s in senders])
        yield series(GaugeMetricFamily, "fedlab_source_outbox_backlog",
                   "Notifications the outbox keeps for the subscriber until it acknowledges them.", labels,
                   [([source, name], len(node.store.unacknowledged(name))) for name, _ in senders])
        rates = sorted(node.faults.rates().items())
        yield series(GaugeMetricFamily, "fedlab_source_fault_probability",
                     "The fault injector's probability in force, by kind of message and fault (0: none).",
                     ["source", "message", "fault"],
                     [([source, kind, fault], r[fault]) for kind, r in rates for fault in ("drop", "duplicate")])
        yield series(GaugeMetricFamily, "fedlab_source_fault_delay_mean_seconds",
                     "The fault injector's mean delay of each copy, by kind of message (0: none).",
                     ["source", "message"], [([source, kind], r["delay_mean"]) for kind, r in rates])
