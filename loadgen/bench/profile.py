"""Where a live run's time goes: stopwatches around the warehouse's maintenance loop and the
load's commits, so that a missed target says what dominates.

Wrapped on the running objects (never in their modules): the core's `handle()` (every event the
algorithm processes), the Delta batch commit (`store.commit_batch`), the history file appends,
the sub-query round trips (the dispatcher's `_query`, which includes handling the answers), and
each source commit RPC the driver makes (its calls are groups; `transactions` counts what they
held). Times are wall-clock seconds summed over threads, so overlapping threads can sum to more
than the run lasted; what matters is which one is largest.
An attribute that is not there (a reworked warehouse) is skipped, not an error.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

# name in the report -> (path from the Warehouse object, method)
WAREHOUSE_PARTS = {
    "core handle()": ("engine", "handle"),
    "Delta batch commit": ("store", "commit_batch"),
    "history file append": ("history", "append"),
    "sub-query RPC + answers": (None, "_query"),
}


class Stopwatches:
    def __init__(self):
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.samples: dict[str, list[float]] = {}
        self.transactions: dict[str, int] = {}   # source transactions per commit part (calls are groups)

    def timed(self, name: str, fn: Callable, keep: bool = False) -> Callable:
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                with self._lock:
                    self.calls[name] = self.calls.get(name, 0) + 1
                    self.seconds[name] = self.seconds.get(name, 0.0) + spent
                    if keep:
                        self.samples.setdefault(name, []).append(spent)
        return wrapper

    def instrument_warehouse(self, warehouse) -> list[str]:
        """Wraps the parts of WAREHOUSE_PARTS that exist; returns the names it could not find."""
        missing = []
        for name, (holder, method) in WAREHOUSE_PARTS.items():
            target = getattr(warehouse, holder, None) if holder else warehouse
            fn = getattr(target, method, None) if target is not None else None
            if fn is None:
                missing.append(name)
                continue
            setattr(target, method, self.timed(name, fn))
        return missing

    def commit_batch(self, fed) -> Callable:
        """fed.commit_batch, timed per source and group, counting the group's transactions (the
        driver's client threads call it)."""
        def commit_batch(source, requests):
            name = f"commit at {source}"
            with self._lock:
                self.transactions[name] = self.transactions.get(name, 0) + len(requests)
            return self.timed(name, fed.commit_batch, keep=True)(source, requests)
        return commit_batch

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
                entry["p99_ms"] = round(1000 * samples[min(len(samples) - 1, int(0.99 * len(samples)))], 2)
            parts[name] = entry
        return {"wall_seconds": round(wall_seconds, 2), "parts": parts}
