"""How far a view is behind each source, for its metrics (warehouse.metrics): in versions, the
highest DSV the warehouse has heard of against the DSV the view reflects; in seconds, how long
ago the oldest transaction it has heard of and not yet applied committed (0 once none waits),
by the source's clock. Materialize's lag and Debezium's "behind source" are read the same way.

A transaction that never reached the warehouse (a lost notification) counts in neither until a
later one of its source arrives: the source's own DSV (fedlab_source_dsv) tells that part.
"""

from __future__ import annotations


class Lag:
    def __init__(self):
        self._applied: dict[str, int] = {}
        self._heard: dict[str, int] = {}
        self._waiting: dict[str, dict[int, float]] = {}   # per source, DSV -> commit time, not applied

    def heard(self, source: str, dsv: int, commit_time: float) -> None:
        """A notification arrived (copies and those applied already change nothing)."""
        if dsv > self._applied.get(source, 0) and commit_time:
            self._waiting.setdefault(source, {}).setdefault(dsv, commit_time)
        self._heard[source] = max(self._heard.get(source, 0), dsv)

    def applied(self, source: str, dsv: int) -> None:
        """The view reflects `source` up to `dsv` (everything before it too: Theorem 2's order,
        or a resynchronisation that read past it)."""
        before = self._applied.get(source, 0)
        if dsv <= before:
            return
        self._applied[source] = dsv
        waiting = self._waiting.get(source)
        if waiting:
            if dsv - before > len(waiting):
                self._waiting[source] = {d: t for d, t in waiting.items() if d > dsv}
            else:
                for d in range(before + 1, dsv + 1):
                    waiting.pop(d, None)

    def behind(self, source: str, now: float) -> tuple[int, float]:
        """(versions, seconds) the view is behind `source` at wall time `now`."""
        versions = max(0, self._heard.get(source, 0) - self._applied.get(source, 0))
        waiting = self._waiting.get(source)
        seconds = max(0.0, now - min(waiting.values())) if waiting else 0.0
        return versions, seconds
