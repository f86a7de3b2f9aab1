"""The staleness floor the bench's faults force (bench.chaos_floor), against what follows
from the fault model by hand: exponential delays, in-order application, resends."""

from __future__ import annotations

import math

from fedlab.bench.chaos_floor import staleness_floor


def test_a_lone_slow_source_sees_the_delay_distribution_itself():
    """At one transaction a second and no loss, an earlier notification almost never arrives
    after a later one: the floor is the exponential delay, median mean*ln 2, p99 mean*ln 100."""
    floor = staleness_floor({"a": 1.0}, drop=0.0, delay_mean=0.1, transactions=20000)
    assert math.isclose(floor["p50"], 100 * math.log(2), rel_tol=0.08)
    assert math.isclose(floor["p99"], 100 * math.log(100), rel_tol=0.08)


def test_in_order_application_raises_the_floor_of_a_busy_source():
    """At 100 a second each transaction also waits for the slowest of its predecessors, whose
    delays overlap its own: the median is above the delay's own."""
    floor = staleness_floor({"a": 100.0}, drop=0.0, delay_mean=0.1, transactions=20000)
    assert floor["p50"] > 1.5 * 100 * math.log(2)


def test_losses_cost_a_resend_and_the_floor_is_seeded():
    lossless = staleness_floor({"a": 50.0, "b": 50.0}, drop=0.0, delay_mean=0.1)
    lossy = staleness_floor({"a": 50.0, "b": 50.0}, drop=0.05, delay_mean=0.1)
    assert lossy["p99"] > lossless["p99"] + 20
    assert staleness_floor({"a": 50.0, "b": 50.0}, drop=0.05, delay_mean=0.1) == lossy


def test_without_faults_or_commits_there_is_no_floor():
    assert staleness_floor({"a": 100.0}, drop=0.0, delay_mean=0.0) == {"p50": 0.0, "p99": 0.0}
    assert staleness_floor({}, drop=0.05, delay_mean=0.1) == {"p50": 0.0, "p99": 0.0}
