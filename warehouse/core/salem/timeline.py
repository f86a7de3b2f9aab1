"""Points in time of a federation (Salem et al. 2000, section 2, carried over to autonomous sources).

The paper's database has one serial order of commits, and a time t_a names the state after every
transaction committed at or before it. A federation has no such order: each source orders its own
transactions by data source version (DSV), and a state of the federation is a vector of DSVs. This
module lays the sources' commits out on one time line, ordered by the key

    (commit time by the source's clock, source, DSV)

which agrees with every source's own order (a source's commit times are taken as non-decreasing:
one that goes back is counted at the time before it). A *point* is the key of a commit (or
INITIAL, before the first): the state after every commit whose key is at or before it, i.e. the
vector of each source's last DSV at or before it. A wall time T names the point of the last commit
with a time at or before T: each source's last transaction committed at or before T by that
source's clock. A vector of DSVs is a point only if no commit it leaves out lies before one it
includes on the time line; others are refused (`point_of`), because the view delta's timestamps
(the minimum rule of section 3.3) are correct only along one line.

Every view state the algorithm shows is a point, and points only move forward, so a view kept
this way is strongly consistent; rolled forward one commit at a time, it passes through every
point: complete, in the line's order of the sources' transactions.

The warehouse learns the line from notifications, so a point is usable only when no commit at or
before it can still be unknown: the *frontier* of a source is the last key before which every one
of its commits is known, moved by its notifications received without a gap (later commits of the
source come after them on the line) and by answers (an answer read at DSV d at time X by the
source's clock holds every commit of the source stamped before X, so once DSVs up to d are in,
every commit before X is known: `heard`; the algorithm moves X back by an allowance for commits
stamped before they became visible). The high-water mark never passes the earliest frontier;
a source that commits nothing is asked for nothing now and then (a probe) to move it.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

INITIAL = (float("-inf"), "", 0)   # before every commit the warehouse will see


@dataclass(frozen=True)
class Commit:
    key: tuple          # (time, source, dsv)
    txn_id: str
    brv: dict           # relation -> its BRV after the commit

    @property
    def source(self) -> str:
        return self.key[1]

    @property
    def dsv(self) -> int:
        return self.key[2]

    @property
    def time(self) -> float:
        return self.key[0]


class PointError(ValueError):
    """A point in time the view cannot be refreshed to, with the one-line reason."""


class Timeline:
    def __init__(self, start_dsv: dict[str, int]):
        """The line from the state `start_dsv` (INITIAL) on."""
        self.start = dict(start_dsv)
        self._commits: dict[str, list[Commit]] = {s: [] for s in start_dsv}
        self._frontier: dict[str, tuple] = {s: INITIAL for s in start_dsv}
        self._heard: dict[str, list[tuple[int, float]]] = {s: [] for s in start_dsv}   # (dsv, before)

    # ---- learning the line ----

    def known_through(self, source: str) -> int:
        commits = self._commits[source]
        return commits[-1].dsv if commits else self.start[source]

    def add(self, source: str, dsv: int, time: float, txn_id: str, brv: dict[str, int]) -> None:
        """The next commit of `source` (DSV known_through + 1), received with every one before it."""
        assert dsv == self.known_through(source) + 1, (source, dsv)
        commits = self._commits[source]
        time = max(time, commits[-1].time) if commits else time
        commits.append(Commit((time, source, dsv), txn_id, brv))
        self._frontier[source] = max(self._frontier[source], commits[-1].key)
        self._settle_heard(source)

    def heard(self, source: str, dsv: int, before: float) -> None:
        """An answer of `source` read at `dsv`, holding every commit of the source stamped before `before`."""
        self._heard[source].append((dsv, before))
        self._settle_heard(source)

    def _settle_heard(self, source: str) -> None:
        through = self.known_through(source)
        ready = [(d, t) for d, t in self._heard[source] if d <= through]
        if ready:
            self._heard[source] = [(d, t) for d, t in self._heard[source] if d > through]
            # Every commit of the source before time t is known: the line up to (t, "", -1).
            self._frontier[source] = max(self._frontier[source], (max(t for _, t in ready), "", -1))

    def frontier(self) -> tuple:
        """The last key before which every commit of every source is known."""
        return min(self._frontier.values(), default=INITIAL)

    def lagging(self) -> list[str]:
        """The sources whose frontier holds the line back: those below the first commit past it."""
        first = self.next_after(self.frontier())
        if first is None:
            return []
        return [s for s, f in self._frontier.items() if f < first.key]

    # ---- points ----

    def commits_between(self, after: tuple, through: tuple) -> list[Commit]:
        """The known commits with keys in (after, through], in line order."""
        found = [c for commits in self._commits.values()
                 for c in commits[bisect_right(commits, after, key=_key):bisect_right(commits, through, key=_key)]]
        return sorted(found, key=_key)

    def next_after(self, point: tuple) -> Commit | None:
        """The first known commit after `point`."""
        return min((commits[i] for commits in self._commits.values()
                    if (i := bisect_right(commits, point, key=_key)) < len(commits)), key=_key, default=None)

    def stable_point(self) -> tuple:
        """The latest point no unknown commit can precede: the last known commit at or before the frontier."""
        frontier = self.frontier()
        last = [commits[i - 1].key for commits in self._commits.values()
                if (i := bisect_right(commits, frontier, key=_key)) > 0]
        return max(last, default=INITIAL)

    def vector(self, point: tuple) -> dict[str, int]:
        """Each source's DSV at `point`."""
        return {s: (commits[i - 1].dsv if (i := bisect_right(commits, point, key=_key)) else self.start[s])
                for s, commits in self._commits.items()}

    def commit(self, source: str, dsv: int) -> Commit:
        """The known commit of `source` at `dsv`."""
        return self._commits[source][dsv - self.start[source] - 1]

    def reach(self, within: tuple) -> float:
        """The wall times below this bound name points at or before `within`: no commit at or
        before them, known or not, lies past `within`."""
        after = self.next_after(within)
        return min(self.frontier()[0], after.time if after else float("inf"))

    def point_at_time(self, wall_time: float, within: tuple) -> tuple:
        """The point a wall time names (each source's last commit at or before it), if it lies
        at or before `within`; PointError otherwise."""
        if wall_time >= self.reach(within):
            raise PointError(f"time {wall_time} is beyond the high-water mark ({describe(within)})")
        point = INITIAL
        for commits in self._commits.values():
            i = bisect_right(commits, wall_time, key=_time)
            if i:
                point = max(point, commits[i - 1].key)
        return point

    def point_of(self, vector: dict[str, int]) -> tuple:
        """The point whose vector is `vector` (a source it leaves out at its first state);
        PointError when it is not a point of the line."""
        unknown = sorted(set(vector) - set(self.start))
        if unknown:
            raise PointError(f"vector names {unknown[0]!r}, which is not a source of the view")
        full = {**self.start, **vector}
        for s, d in full.items():
            if d < self.start[s]:
                raise PointError(f"vector's DSV {d} of {s!r} is before the view's first state (DSV {self.start[s]})")
            if d > self.known_through(s):
                raise PointError(f"vector's DSV {d} of {s!r} is beyond what the warehouse has received "
                                 f"(DSV {self.known_through(s)})")
        point = max((self.commit(s, d).key for s, d in full.items() if d > self.start[s]), default=INITIAL)
        for s, d in full.items():
            if d < self.known_through(s) and self.commit(s, d + 1).key < point:
                left_out, last = self.commit(s, d + 1), self.commit(point[1], point[2])
                raise PointError(
                    f"vector is not a point in time: it leaves out {s!r} DSV {left_out.dsv} (committed at "
                    f"{left_out.time:.6f}) but includes {last.source!r} DSV {last.dsv} (committed at {last.time:.6f})")
        return point


def describe(point: tuple) -> str:
    return "the initial state" if point == INITIAL else f"{point[1]!r} DSV {point[2]} at {point[0]:.6f}"


def _key(c: Commit) -> tuple:
    return c.key


def _time(c: Commit) -> float:
    return c.time
