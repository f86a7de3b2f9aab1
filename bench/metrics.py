"""A run's figures from the files it left: staleness per source transaction, cost on the wire per
source transaction, and the percentiles that describe both.

Staleness is measured the same way for every algorithm, from the two sides of the history: a
source transaction (source, DSV) committed at its source's `commit_time` is reflected by the
first view state (warehouse/history/changes.jsonl, in apply order) whose version vector reaches
that DSV. It is measured twice: to that state's `applied_time` (the core's view, what ReadView
serves) and to its `durable_time` (when the batch holding it was committed to the Delta table,
what a Spark reader sees). So a recomputation that reflects a hundred transactions in one state
counts each of them, each from its own commit.

Wire cost comes from the message logs (fedmodel.message_log): `<db stem>.messages.jsonl` beside
each source's database file and `messages.jsonl` in the warehouse's history folder. Only `sent`
events count as cost (a message is logged once where it leaves). A missing file gives zeros and
a note naming it, never an error: a node that writes no log yet still gets a verdict.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from fedlab.fedio.message_log import read, trimmed
from fedlab.fedmodel import change_history
from fedlab.fedmodel.message_log import WAREHOUSE_NODE, added, totals
from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER


def percentiles(values: Iterable[float], scale: float = 1000.0) -> dict:
    """p50/p95/p99/max/mean of `values` times `scale` (seconds -> ms by default), nearest rank;
    every figure None when there are no values.

    >>> percentiles([0.001 * i for i in range(1, 101)])
    {'p50': 50.0, 'p95': 95.0, 'p99': 99.0, 'max': 100.0, 'mean': 50.5, 'n': 100}
    """
    xs = sorted(values)
    if not xs:
        return {"p50": None, "p95": None, "p99": None, "max": None, "mean": None, "n": 0}

    def rank(p: float) -> float:
        return round(xs[max(0, math.ceil(p * len(xs)) - 1)] * scale, 1)

    return {"p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99), "max": round(xs[-1] * scale, 1),
            "mean": round(sum(xs) / len(xs) * scale, 1), "n": len(xs)}


class DsvTimes(Mapping):
    """(source, DSV) -> a time in seconds, held as one array of floats per source indexed by DSV
    (NaN where there is none): eight bytes a transaction, where a dict of them takes some two
    hundred, so that an hour's run of 720,000 transactions is figured in megabytes.

    >>> times = DsvTimes({("a", 2): 10.5, ("a", 4): 11.0})
    >>> dict(times), ("a", 3) in times, times.get(("b", 1)), len(times)
    ({('a', 2): 10.5, ('a', 4): 11.0}, False, None, 2)
    """

    def __init__(self, items: Iterable[tuple[tuple[str, int], float]] | Mapping = ()):
        self._times: dict[str, array] = {}
        self._count = 0
        for key, value in (items.items() if isinstance(items, Mapping) else items):
            self[key] = value

    def __setitem__(self, key: tuple[str, int], value: float) -> None:
        source, dsv = key
        times = self._times.setdefault(source, array("d"))
        if dsv >= len(times):
            times.extend([math.nan] * (dsv + 1 - len(times)))
        self._count += math.isnan(times[dsv])
        times[dsv] = value

    def __getitem__(self, key: tuple[str, int]) -> float:
        source, dsv = key
        times = self._times.get(source)
        if times is None or not 0 <= dsv < len(times) or math.isnan(times[dsv]):
            raise KeyError(key)
        return times[dsv]

    def __iter__(self):
        for source, times in self._times.items():
            for dsv, value in enumerate(times):
                if not math.isnan(value):
                    yield source, dsv

    def __len__(self) -> int:
        return self._count

    def highest(self) -> dict[str, int]:
        """Per source, the highest DSV with a time.

        >>> DsvTimes({("a", 2): 1.0, ("a", 5): 2.0, ("b", 3): 1.5}).highest()
        {'a': 5, 'b': 3}
        """
        return {source: max(d for d, t in enumerate(times) if not math.isnan(t))
                for source, times in self._times.items() if any(not math.isnan(t) for t in times)}


def reflected_at(states: Iterable[dict], start_versions: dict[str, int],
                 reflected: str = "applied_time") -> DsvTimes:
    """(source, DSV) -> the `reflected` time (applied_time or durable_time) of the first view state
    whose version vector reaches that DSV, for every DSV above `start_versions`; a DSV whose first
    state has no such time yet (a batch not committed) is left out.

    >>> dict(reflected_at([{"applied_time": 11.0, "versions": {"a": 3}}], {"a": 1}))
    {('a', 2): 11.0, ('a', 3): 11.0}
    """
    covered = dict(start_versions)
    out = DsvTimes()
    for state in states:
        at = state.get(reflected)
        for source, dsv in state["versions"].items():
            if at:
                for d in range(covered.get(source, 0) + 1, int(dsv) + 1):
                    out[source, d] = at
            covered[source] = max(covered.get(source, 0), int(dsv))
    return out


def staleness(commits: Mapping[tuple[str, int], float],
              reflected: Mapping[tuple[str, int], float]) -> list[tuple[float, float]]:
    """(commit time, seconds until reflected) for every source transaction a view state reflects,
    from `reflected_at` (by applied_time: the core's view; by durable_time: the Delta table).

    >>> staleness({("a", 2): 10.0, ("a", 3): 10.5}, {("a", 2): 11.0, ("a", 3): 11.0})
    [(10.0, 1.0), (10.5, 0.5)]
    """
    return [(commits[key], at - commits[key]) for key, at in reflected.items() if commits.get(key)]


@dataclass(frozen=True)
class Reflections:
    """Both sides of a run's history as staleness reads them (this module's docstring): per source
    transaction (source, DSV), when it committed and when the core's view (`applied`) and the
    Delta table (`durable`) first reflected it.

    >>> seen = Reflections({("a", 2): 10.0}, {("a", 2): 10.5}, {("a", 2): 11.0})
    >>> seen.lags(), seen.lags(to_delta=True)
    ([(10.0, 0.5)], [(10.0, 1.0)])
    """

    commits: Mapping[tuple[str, int], float]
    applied: Mapping[tuple[str, int], float]
    durable: Mapping[tuple[str, int], float]

    def lags(self, to_delta: bool = False) -> list[tuple[float, float]]:
        """(commit time, seconds until reflected) in the core's view, or in the Delta table (`staleness`)."""
        return staleness(self.commits, self.durable if to_delta else self.applied)


def reflections(commits: Mapping[tuple[str, int], float], warehouse_history: Path,
                start_versions: dict[str, int]) -> Reflections:
    """`Reflections` of every source transaction above `start_versions`, from their commit times
    (live.check.LiveHistory.commit_times) and the view states in the warehouse's history
    folder (fedmodel.change_history.applied_states, read once for each kind): what the bench and
    `fedlab run` measure staleness from."""
    return Reflections(commits, reflected_at(change_history.applied_states(warehouse_history), start_versions),
                       reflected_at(change_history.applied_states(warehouse_history), start_versions, "durable_time"))


PARTS = ("delivery", "behind its source", "at the warehouse", "to Delta")


def staleness_parts(commits: Mapping[tuple[str, int], float], received: Mapping[tuple[str, int], float],
                    applied: Mapping[tuple[str, int], float], durable: Mapping[tuple[str, int], float],
                    lost: set[tuple[str, int]]) -> dict:
    """Where staleness to the Delta table goes, per source transaction (source, DSV) in `commits`:
    delivery (commit to the warehouse's first receipt of its notification: a lost one waits for
    its resend), behind its source (from there until every earlier notification of its source has
    been received too: no algorithm that keeps each source's commit order can take it sooner, so
    this part is the faults' own, a lost or delayed predecessor's), at the warehouse (to the
    first view state reflecting it: sub-queries, and waiting for earlier-started transactions of
    other sources, Theorem 2) and to Delta (that state to its batch's commit). The four add up to
    the staleness to Delta. Percentiles of each part over all, and for the slowest 1% (staleness
    at or above its p99) the mean of each part and how many of them had their notification
    `lost` (dropped at least once by the fault injector).

    >>> parts = staleness_parts({("a", 2): 0.0, ("a", 3): 0.0}, {("a", 2): 0.5, ("a", 3): 0.1},
    ...                         {("a", 2): 1.2, ("a", 3): 1.2}, {("a", 2): 2.0, ("a", 3): 2.0}, {("a", 2)})
    >>> parts["slowest"]["mean_ms"]
    {'delivery': 100.0, 'behind its source': 400.0, 'at the warehouse': 700.0, 'to Delta': 800.0}
    """
    ready: dict[tuple[str, int], float] = {}   # every notification up to this one's DSV received
    latest: dict[str, float] = {}
    for key in sorted(received):
        latest[key[0]] = max(latest.get(key[0], float("-inf")), received[key])
        ready[key] = latest[key[0]]
    rows = []
    for key, committed in commits.items():
        if key in received and key in applied and key in durable:
            rows.append((durable[key] - committed, key in lost,
                         (received[key] - committed, ready[key] - received[key], applied[key] - ready[key],
                          durable[key] - applied[key])))
    if not rows:
        return {"n": 0}
    rows.sort(key=lambda r: r[0])
    slowest = rows[max(0, math.ceil(0.99 * len(rows)) - 1):]
    return {"n": len(rows), "lost_share": round(sum(r[1] for r in rows) / len(rows), 4),
            "parts_ms": {name: percentiles(r[2][i] for r in rows) for i, name in enumerate(PARTS)},
            "slowest": {"n": len(slowest), "staleness_ms": round(1000 * slowest[0][0], 1),
                        "lost_share": round(sum(r[1] for r in slowest) / len(slowest), 4),
                        "mean_ms": {name: round(1000 * sum(r[2][i] for r in slowest) / len(slowest), 1)
                                    for i, name in enumerate(PARTS)}}}


def wire_cost(files: dict[str, Path | None], window: tuple[float, float] | None = None,
              subscriber: str = DEFAULT_SUBSCRIBER) -> dict:
    """Totals of what was sent, by kind, over the nodes' message logs (only events logged within
    `window`, wall-clock seconds, when given, and only those about the warehouse `subscriber`),
    and which logs were missing."""
    present = {node: path for node, path in files.items() if path is not None and path.exists()}
    events = read(present.values(), subscriber)
    if window is not None:
        events = (e for e in events if window[0] <= e["t"] <= window[1])
    events = list(events)
    # With a retention, what the logs trimmed adds its totals (the segments inside the window);
    # its sub-queries count as asked once each: retries among them are not told apart.
    gone = trimmed(present.values(), subscriber, window)
    by_kind = added(totals(events), gone)
    # A sub-query id sent more than once went again: a retry on the wire (a lost or a slow answer).
    asked = {e["id"] for e in events if e.get("kind") == "subquery" and e.get("event") == "sent" and "id" in e}
    return {"by_kind": by_kind, "subqueries_asked": len(asked) + gone.get("subquery", {}).get("sent", 0),
            "messages": sum(k.get("sent", 0) for k in by_kind.values()),
            "rows": sum(k.get("rows", 0) for k in by_kind.values()),
            "bytes": sum(k.get("bytes", 0) for k in by_kind.values()),
            "dropped": sum(k.get("dropped", 0) for k in by_kind.values()),
            "logs": sorted(present), "missing_logs": sorted(set(files) - set(present))}


def first_receipts(files: dict[str, Path | None]) -> DsvTimes:
    """(source, DSV) -> when the warehouse first received that notification (a duplicate or a resend
    counts at its first arrival), from its message log; empty without it."""
    path = files.get(WAREHOUSE_NODE)
    first = DsvTimes()
    if path is None or not path.exists():
        return first
    for e in read([path]):
        if e.get("kind") == "notification" and e.get("event") == "received" and "dsv" in e:
            key = (e["peer"], int(e["dsv"]))
            if key not in first:
                first[key] = e["t"]
    return first


def clock_skew(commits: Mapping[tuple[str, int], float], receipts: Mapping[tuple[str, int], float],
               ahead_tolerance: float = 0.5, slow_delivery: float = 2.0) -> dict[str, dict]:
    """The sources whose commit stamps show a wall clock other than the warehouse's, from each
    notification's delivery (the warehouse's first receipt, by its clock, minus the commit, by
    the source's): `ahead_s`, the most a commit was stamped after its notification arrived (on one
    clock impossible: the source's ran at least that far ahead); `median_delivery_s`, seconds on
    a typical notification (a clock running behind adds its lag to every one; so would a source
    whose notifications were all held up). Staleness from such a source's commits is measured
    across two clocks (docs/kubernetes.md, "The nemesis from the node").

    >>> clock_skew({("a", 1): 10.0, ("a", 2): 11.0, ("b", 1): 10.0}, {("a", 1): 10.01, ("a", 2): 10.2, ("b", 1): 10.02})
    {'a': {'ahead_s': 0.8, 'median_delivery_s': 0.01, 'notifications': 2}}
    """
    deliveries: dict[str, list[float]] = {}
    for key, received in receipts.items():
        if key in commits:
            deliveries.setdefault(key[0], []).append(received - commits[key])
    skewed = {}
    for source, seen in sorted(deliveries.items()):
        seen.sort()
        ahead, median = -seen[0], seen[len(seen) // 2]
        if ahead > ahead_tolerance or median > slow_delivery:
            skewed[source] = {"ahead_s": round(max(ahead, 0.0), 3), "median_delivery_s": round(median, 3),
                              "notifications": len(seen)}
    return skewed


def lost_notifications(files: dict[str, Path | None], subscriber: str = DEFAULT_SUBSCRIBER) -> set[tuple[str, int]]:
    """(source, DSV) of every notification to `subscriber` a source's fault injector dropped at least once."""
    sources = [path for node, path in files.items() if node != WAREHOUSE_NODE and path is not None and path.exists()]
    return {(e["node"], int(e["dsv"])) for e in read(sources, subscriber)
            if e.get("kind") == "notification" and e.get("event") == "dropped" and "dsv" in e}


def reordered_notifications(receipts: Mapping[tuple[str, int], float]) -> float | None:
    """The share of notifications the warehouse first received after a later one of the same
    source (what the delay fault did), from `first_receipts`; None without them.

    >>> reordered_notifications({("a", 1): 0.0, ("a", 2): 0.2, ("a", 3): 0.1, ("b", 1): 0.3})
    0.25
    """
    highest: dict[str, int] = {}
    late = 0
    for source, dsv in sorted(receipts, key=receipts.__getitem__):   # in order of arrival
        late += dsv < highest.get(source, 0)
        highest[source] = max(highest.get(source, 0), dsv)
    return round(late / len(receipts), 4) if receipts else None


def per_transaction(cost: dict, counters: dict, transactions: int) -> tuple[dict, list[str]]:
    """Cost per source transaction, and notes on where a figure could not be measured.

    Sub-queries are the warehouse log's `subquery` sends, or the engine's counter without that
    log; resends and compensation steps are the engine's counters (0 where an algorithm has none).
    """
    notes = []
    n = max(transactions, 1)
    if cost["missing_logs"]:
        notes.append(f"no message log from {', '.join(cost['missing_logs'])}: its messages, rows and bytes "
                     "count as 0")
    if "warehouse" in cost["logs"]:
        subqueries = cost["by_kind"].get("subquery", {}).get("sent", 0)
    else:
        subqueries = counters.get("subqueries", 0)
        notes.append("sub-queries from the engine's counter (no warehouse message log)")
    resends = cost["by_kind"].get("resend_request", {}).get("sent", counters.get("resends", 0))
    # What the algorithm adds to the notifications every algorithm receives alike.
    maintenance = sum(cost["by_kind"].get(k, {}).get("bytes", 0) for k in ("subquery", "answer", "resend_request"))
    again = subqueries - cost["subqueries_asked"] if "warehouse" in cost["logs"] else counters.get("retries", 0)
    return {"subqueries": round(subqueries / n, 3), "messages": round(cost["messages"] / n, 3),
            "subquery_retries": round(again / n, 4),
            "subquery_retry_share": round(again / subqueries, 4) if subqueries else 0.0,
            "rows": round(cost["rows"] / n, 3), "bytes": round(cost["bytes"] / n, 1),
            "maintenance_bytes": round(maintenance / n, 1),
            "resends": round(resends / n, 4),
            "compensations": round((counters.get("compensations", 0) + counters.get("key_deletes", 0)) / n, 4),
            "transactions": transactions}, notes
