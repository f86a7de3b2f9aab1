"""Where a live run's time goes: stopwatches around the warehouse's maintenance loop and the
load's commits, so that a missed target says what dominates.

Wrapped on the running objects (never in their modules): the core's `handle()` (every event the
algorithm processes), the Delta batch commit (`store.commit_batch`), the history file appends,
the sub-query round trips (the dispatcher's `_query`, which includes handling the answers), and
each source commit RPC the driver makes (timed in the driver's process; its calls are groups;
`transactions` counts what they held). Times are wall-clock seconds summed over threads, so overlapping threads can sum to more
than the run lasted; what matters is which one is largest.
An attribute that is not there (a reworked warehouse) is skipped, not an error. Each part keeps
a bounded sample of its times for its percentiles (loadgen.reservoir: the core's handle()
runs a thousand times a second, and an hour's every time would be the warehouse's growth), in
call order until it is full: the growth's readings count the Delta batch commits by it.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from fedlab.loadgen.reservoir import Reservoir
from fedlab.bench.resources import stat_cpu_seconds
from fedlab.warehouse.spark_session import jvm_pid

# name in the report -> (path from the Warehouse object, method)
WAREHOUSE_PARTS = {
    "core handle()": ("algorithm", "handle"),
    "Delta batch commit": ("store", "commit_batch"),
    "history file append": ("history", "append"),
    "sub-query RPC + answers": ("dispatchers", "_query"),   # each source's (warehouse.dispatcher)
    "Delta compaction": ("store", "compact"),
    "Delta checkpoint": ("store", "checkpoint"),
    "Delta retention": ("store", "retain"),
}
JVM_BATCH_CPU = "Delta batch commit, JVM CPU"


class Stopwatches:
    def __init__(self):
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.samples: dict[str, list[float]] = {}
        self.transactions: dict[str, int] = {}   # source transactions per commit part (calls are groups)
        self._reservoirs: dict[str, Reservoir] = {}   # each part's samples (`samples` holds their values)

    def timed(self, name: str, fn: Callable, keep: bool = False, clock: Callable[[], float] = time.perf_counter) -> Callable:
        """`fn`, its calls counted and timed by `clock` (wall time; or a process's CPU seconds)."""
        def wrapper(*args, **kwargs):
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = clock() - start
                with self._lock:
                    self.calls[name] = self.calls.get(name, 0) + 1
                    self.seconds[name] = self.seconds.get(name, 0.0) + spent
                    if keep:
                        self._kept(name).extend([spent])
        return wrapper

    def _kept(self, name: str) -> Reservoir:
        if name not in self._reservoirs:
            self._reservoirs[name] = Reservoir()
            self.samples[name] = self._reservoirs[name].values
        return self._reservoirs[name]

    def instrument_warehouse(self, warehouse) -> list[str]:
        """Wraps the parts of WAREHOUSE_PARTS that exist, and the Delta batch commit once more
        with the Spark JVM's CPU as its clock (JVM_BATCH_CPU: the JVM does little else meanwhile;
        its clock ticks in hundredths of a second, so only the mean over many batches tells);
        returns the names it could not find."""
        missing = []
        store, pid = getattr(warehouse, "store", None), jvm_pid(warehouse.spark) if hasattr(warehouse, "spark") else None
        if store is not None and pid is not None:
            store.commit_batch = self.timed(JVM_BATCH_CPU, store.commit_batch, keep=True,
                                            clock=lambda: stat_cpu_seconds(f"/proc/{pid}/stat"))
        for name, (holder, method) in WAREHOUSE_PARTS.items():
            target = getattr(warehouse, holder, None)
            targets = list(target.values()) if isinstance(target, dict) else [target]   # one per source
            found = [(t, getattr(t, method, None)) for t in targets if t is not None]
            if not found or any(fn is None for _, fn in found):
                missing.append(name)
                continue
            for t, fn in found:
                setattr(t, method, self.timed(name, fn, keep=True))
        return missing

    def add_commits(self, timings: dict[str, dict]) -> None:
        """The load driver's commit calls, one part per source ({source: {"calls", "seconds",
        "transactions", "samples"}}: loadgen.driver_process.CommitTimings; the driver
        runs in a process of its own)."""
        with self._lock:
            for source, timed in timings.items():
                name = f"commit at {source}"
                self.calls[name] = self.calls.get(name, 0) + timed["calls"]
                self.seconds[name] = self.seconds.get(name, 0.0) + timed["seconds"]
                self._kept(name).extend(timed["samples"])
                self.transactions[name] = self.transactions.get(name, 0) + timed["transactions"]

    def floor_ms(self) -> float | None:
        """The least staleness to the Delta table this run's parts allow: one sub-query round trip
        plus one Delta batch commit, medians (None when either was never timed)."""
        parts = [sorted(self.samples.get(name, [])) for name in ("sub-query RPC + answers", "Delta batch commit")]
        if not all(parts):
            return None
        return round(1000 * sum(p[len(p) // 2] for p in parts), 1)

    def report(self, wall_seconds: float) -> dict:
        parts = {}
        for name in sorted(self.seconds, key=self.seconds.get, reverse=True):
            calls, secs = self.calls[name], self.seconds[name]
            entry = {"calls": calls, "seconds": round(secs, 3), "mean_ms": round(1000 * secs / calls, 2),
                     "share_of_wall": round(secs / wall_seconds, 3) if wall_seconds else None}
            samples = sorted(self.samples.get(name, []))
            if name in self.transactions:
                entry["transactions"] = self.transactions[name]
            if samples:
                entry["p50_ms"] = round(1000 * samples[len(samples) // 2], 2)
                entry["p99_ms"] = round(1000 * samples[min(len(samples) - 1, int(0.99 * len(samples)))], 2)
            parts[name] = entry
        return {"wall_seconds": round(wall_seconds, 2), "parts": parts}
