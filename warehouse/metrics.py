"""A warehouse process's Prometheus series: every view of its view group (warehouse.view_group),
read when scraped (fedio.metrics_endpoint), labelled by view and, where it is per source, by
source. docs/operations.md lists them with what to read in them.

What is read under a view's locks is read once per view and scrape: the version state, the lag
(warehouse.lag) and the counters. The histograms were filled as things happened: the staleness of
each applied transaction (warehouse.service), each sub-query round trip (warehouse.dispatcher)
and each Delta batch commit (warehouse.committer).
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fedlab.fedio.metrics_endpoint import histogram, series


class ViewGroupCollector(Collector):
    def __init__(self, views: dict):
        """`views`: each view's warehouse.service.Warehouse, by the view's name, opened (the view
        group serves its endpoint once every view is)."""
        self.views = views

    def collect(self):
        views = self.views
        read = {name: _read(view) for name, view in views.items()}
        per_source = ["view", "source"]

        def by_source(key):
            return [([name, s], value) for name, r in read.items() for s, value in sorted(r[key].items())]

        def by_view(key):
            return [([name], r[key]) for name, r in read.items()]

        yield series(GaugeMetricFamily, "fedlab_warehouse_applied_dsv",
                     "The DSV of the source that the view reflects.", per_source, by_source("applied"))
        yield series(GaugeMetricFamily, "fedlab_warehouse_durable_dsv",
                     "The DSV of the source up to which the view is durable in Delta (what the source is "
                     "acknowledged).", per_source, by_source("durable"))
        yield series(GaugeMetricFamily, "fedlab_warehouse_lag_versions",
                     "Transactions of the source the warehouse has heard of and the view does not reflect yet.",
                     per_source, by_source("lag_versions"))
        yield series(GaugeMetricFamily, "fedlab_warehouse_lag_seconds",
                     "How long ago the oldest transaction of the source that the view does not reflect yet "
                     "committed (0: none waits).", per_source, by_source("lag_seconds"))
        yield series(CounterMetricFamily, "fedlab_warehouse_applied_transactions",
                     "Source transactions applied to the view.", ["view"], by_view("applied_transactions"))
        yield series(GaugeMetricFamily, "fedlab_warehouse_tasks_in_flight",
                     "Maintenance tasks started and not applied yet.", ["view"], by_view("tasks"))
        yield series(GaugeMetricFamily, "fedlab_warehouse_view_rows", "Distinct rows in the view.",
                     ["view"], by_view("rows"))
        yield series(CounterMetricFamily, "fedlab_warehouse_compensation_steps",
                     "Compensation steps: answers corrected for updates that interfered (Sze-Ling 4.2).",
                     ["view"], [([name], r["counters"].get("compensations", 0)) for name, r in read.items()])
        yield series(CounterMetricFamily, "fedlab_warehouse_algorithm_events",
                     "What the view's algorithm counted, by its own name for each count.", ["view", "event"],
                     [([name, event], n) for name, r in read.items() for event, n in sorted(r["counters"].items())])
        yield series(CounterMetricFamily, "fedlab_warehouse_delta_commit_failures",
                     "Delta batch commits that failed (each is retried).", ["view"],
                     by_view("commit_failures"))
        yield series(GaugeMetricFamily, "fedlab_warehouse_delta_commits_failing",
                     "Delta batch commits failed in a row up to now (0: the last one held).", ["view"],
                     by_view("commits_failing"))
        yield series(GaugeMetricFamily, "fedlab_warehouse_subqueries_in_flight",
                     "Sub-queries sent to the source whose round trip is not over.", per_source,
                     [([name, s], d.in_flight) for name, view in views.items() for s, d in sorted(view.dispatchers.items())])
        yield histogram("fedlab_warehouse_subquery_seconds",
                        "Round trips of sub-query batches to the source, from sending to the last reply.", per_source,
                        [([name, s], d.round_trips) for name, view in views.items() for s, d in sorted(view.dispatchers.items())])
        yield histogram("fedlab_warehouse_staleness_seconds",
                        "Each applied transaction's staleness: from its commit at the source to its apply.", ["view"],
                        [([name], view.staleness_seconds) for name, view in views.items()])
        yield histogram("fedlab_warehouse_delta_commit_seconds", "Delta batch commits that held, by duration.",
                        ["view"], [([name], view.committer.commit_seconds) for name, view in views.items()])


def _read(view) -> dict:
    """What one view's series read, read together (warehouse.service.Warehouse.status)."""
    status = view.status()
    return {"applied": status["applied_dsv"], "durable": status["durable"],
            "lag_versions": {s: b[0] for s, b in status["behind"].items()},
            "lag_seconds": {s: b[1] for s, b in status["behind"].items()},
            "applied_transactions": status["applied"], "tasks": status["in_flight"],
            "rows": status["view_rows"], "counters": status["counters"],
            "commit_failures": status["commit_failures"], "commits_failing": status["commits_failing"]}
