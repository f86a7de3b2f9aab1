"""The staleness a run's faults alone force: a floor under the staleness it measured to the core's view.

A warehouse that keeps complete (or strong) consistency shows each source's changes in DSV order,
so a transaction is reflected no sooner than its own notification and every earlier one of its
source have arrived. Under the bench's chaos (source_node.faults) each copy of a notification is
lost with the drop rate and otherwise held back by an exponential delay of the configured mean.
A lost one is found as a gap once a later one has arrived, asked for when the gap has lasted the
reorder allowance, and asked for again every resend wait while it stays open
(warehouse.core.missing_notifications); each resent copy meets the same faults. `staleness_floor`
plays exactly that, with no processing, no network time and no other waits, seeded so that a run
gets the same floor each time it is summarised. The resend wait is the warehouse's rule with the
faults' mean delay as the round trip of an ask.

What the measured staleness exceeds the floor by is what the algorithm and the testbed add. It
leaves out that Sze-Ling's compensation also waits for the other sources' notifications its
answers read past, so for Sze-Ling the floor is low, never high.

>>> staleness_floor({"a": 50.0}, drop=0.0, delay_mean=0.0)
{'p50': 0.0, 'p99': 0.0}
"""

from __future__ import annotations

import random
from typing import Mapping

from fedlab.fedmodel.round_trip import RoundTrip
from fedlab.warehouse.core.timings import REORDER_ALLOWANCE, RESEND_ROUND_TRIPS, RESEND_TIMEOUT

SIMULATED = 100_000   # transactions played over all sources: enough for a p99 steady to a few ms


def staleness_floor(commit_rates: Mapping[str, float], drop: float, delay_mean: float,
                    allowance: float = REORDER_ALLOWANCE, transactions: int = SIMULATED,
                    seed: int = 0) -> dict[str, float]:
    """p50 and p99 in ms of the floor over transactions committed at `commit_rates` (source ->
    transactions per second, each source's spread evenly), the sources' shares of `transactions`
    in proportion to their rates."""
    rule = RoundTrip(RESEND_TIMEOUT, RESEND_ROUND_TRIPS)   # the warehouse's (warehouse.core.missing_notifications)
    rule.sample(delay_mean)
    resend_wait = rule.timeout()
    total = sum(commit_rates.values())
    floors: list[float] = []
    for source, rate in sorted(commit_rates.items()):
        count = int(transactions * rate / total) if total else 0
        if rate > 0 and count:
            floors += _one_source(rate, count, drop, delay_mean, allowance, resend_wait, random.Random(f"{seed}:{source}"))
    if not floors:
        return {"p50": 0.0, "p99": 0.0}
    floors.sort()
    return {p: round(1000 * floors[int(q * (len(floors) - 1))], 1) for p, q in (("p50", 0.5), ("p99", 0.99))}


def _one_source(rate: float, count: int, drop: float, delay_mean: float, allowance: float,
                resend_wait: float, rng: random.Random) -> list[float]:
    """Each transaction's floor, in seconds, at one source committing `rate` a second."""
    def copy_arrives(sent: float) -> float | None:
        if rng.random() < drop:
            return None
        return sent + (rng.expovariate(1.0 / delay_mean) if delay_mean > 0 else 0.0)

    committed = [i / rate for i in range(count)]
    first = [copy_arrives(t) for t in committed]
    # When a later notification first arrives: the gap a lost one leaves shows from then on.
    later: list[float | None] = [None] * count
    soonest = None
    for i in range(count - 1, -1, -1):
        later[i] = soonest
        if first[i] is not None:
            soonest = first[i] if soonest is None else min(soonest, first[i])
    floors, shown = [], 0.0
    for i, t in enumerate(committed):
        arrived = first[i] if first[i] is not None else float("inf")
        # The last notification of the run shows no gap: the source's own resend timer finds it.
        ask = (later[i] if later[i] is not None else t + resend_wait) + allowance
        while ask < arrived:   # still missing once the gap has lasted the allowance, or the resend wait
            resent = copy_arrives(ask)
            if resent is not None:
                arrived = min(arrived, resent)
            ask += resend_wait
        shown = max(shown, arrived)   # in DSV order: after every earlier one of its source
        floors.append(shown - t)
    return floors
