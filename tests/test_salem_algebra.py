"""The algebra salem rests on, by brute force, apart from the implementation: ComputeDelta (Salem
et al. 2000, Figure 4) with a state per position, and rolling propagation with a cursor per
relation, each query's rows timestamped with the minimum of its change rows' times (3.3), give a
timed view delta: Definition 4.2 holds for every a < b up to the high-water mark.

A model small enough to enumerate: relations of (a, b) rows joined in a chain R1.b = R2.a = ...,
random histories on one time line (each change one row, +1 or -1, at a time), the view at a time
recomputed from scratch. Where warehouse.core.salem reads a base relation at a source's current
state, the model reads it at a random state at or after the one intended and the step's target;
when that second condition is dropped the rule fails, which shows it is needed and that the
check can fail.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest


class History:
    def __init__(self, seed: int, n: int, times: int, domain: int = 3):
        rng = self.rng = random.Random(seed)
        self.n, self.times = n, times
        self.initial = [Counter((rng.randrange(domain), rng.randrange(domain)) for _ in range(rng.randrange(3)))
                        for _ in range(n)]
        state = [Counter(c) for c in self.initial]
        self.changes: list[list[tuple[int, tuple, int]]] = [[] for _ in range(n)]   # (time, row, count)
        for t in range(1, times + 1):
            i = rng.randrange(n)
            if +state[i] and rng.random() < 0.4:
                row, count = rng.choice(sorted(+state[i])), -1
            else:
                row, count = (rng.randrange(domain), rng.randrange(domain)), 1
            state[i][row] += count
            self.changes[i].append((t, row, count))

    def base(self, i: int, t: int) -> list[tuple[tuple, int, None]]:
        rows = Counter(self.initial[i])
        for when, row, count in self.changes[i]:
            if when <= t:
                rows[row] += count
        return [(row, count, None) for row, count in rows.items() if count]

    def delta(self, i: int, a: int, b: int) -> list[tuple[tuple, int, int]]:
        return [(row, count, when) for when, row, count in self.changes[i] if a < when <= b]

    def view(self, t: int) -> Counter:
        return _net(_join([self.base(i, t) for i in range(self.n)], 1))


def _join(parts, sign: int) -> list[tuple[tuple, int, int | None]]:
    out = []
    for combo in itertools.product(*parts):
        if all(combo[j][0][1] == combo[j + 1][0][0] for j in range(len(combo) - 1)):
            count = sign
            for _, c, _ in combo:
                count *= c
            stamps = [ts for _, _, ts in combo if ts is not None]
            out.append((tuple(row for row, _, _ in combo), count, min(stamps) if stamps else None))
    return out


def _net(rows) -> Counter:
    total = Counter()
    for row, count, _ in rows:
        total[row] += count
    return Counter({r: c for r, c in total.items() if c})


class Propagation:
    """ComputeDelta over the model; `floor(target)` is the lowest state a query may read at."""

    def __init__(self, history: History, reads_after_target: bool):
        self.h, self.rows, self.target = history, [], 0
        self.reads_after_target = reads_after_target

    def compute_delta(self, query: list, sign: int, old: list[int], new: list[int]) -> None:
        h = self.h
        for i, slot in enumerate(query):
            if slot is not None or old[i] >= new[i]:
                continue
            q = query[:i] + [(old[i], new[i])] + query[i + 1:]
            intended = [old[j] if j < i else new[j] for j in range(h.n)]
            floor = self.target if self.reads_after_target else 0
            read = [h.rng.randint(max(intended[j], floor), h.times) if q[j] is None else 0 for j in range(h.n)]
            self.rows += _join([h.base(j, read[j]) if s is None else h.delta(j, *s) for j, s in enumerate(q)], sign)
            if any(s is None for s in q):
                self.compute_delta(q, -sign, intended, read)

    def step(self, old: list[int], new: list[int]) -> None:
        self.target = max(new)
        self.compute_delta([None] * self.h.n, 1, old, new)


def timed_delta_holds(history: History, rows, mark: int) -> bool:
    """Definition 4.2: net(V_a + σ_{a,b}(Δ)) = net(V_b) for every a < b up to the mark."""
    for a in range(mark + 1):
        for b in range(a + 1, mark + 1):
            rolled = history.view(a)
            rolled.update(_net(r for r in rows if a < r[2] <= b))
            if +Counter({k: v for k, v in rolled.items() if v}) != history.view(b):
                return False
    return True


def propagate(seed: int, n: int, reads_after_target: bool = True) -> bool:
    """Propagate (Figure 5) in random steps, every position's state one time."""
    h = History(seed, n, times=12)
    p = Propagation(h, reads_after_target)
    cursor = 0
    while cursor < h.times - 2:
        nxt = min(h.times - 2, cursor + h.rng.randint(1, 4))
        p.step([cursor] * n, [nxt] * n)
        cursor = nxt
    return timed_delta_holds(h, p.rows, cursor)


def rolling(seed: int, n: int) -> bool:
    """Rolling propagation: the earliest cursor moves by its relation's interval, the others
    intended at their cursors, each forward query compensated at once."""
    h = History(seed, n, times=12)
    p = Propagation(h, reads_after_target=True)
    cursors, width = [0] * n, [h.rng.randint(1, 4) for _ in range(n)]
    while min(cursors) < h.times - 2:
        i = cursors.index(min(cursors))
        moved = cursors[:i] + [min(h.times - 2, cursors[i] + width[i])] + cursors[i + 1:]
        p.step(cursors, moved)
        cursors = moved
    return timed_delta_holds(h, p.rows, min(cursors))


@pytest.mark.parametrize("n, seeds", [(2, 150), (3, 150), (4, 30)])
def test_compute_delta_with_a_state_per_position_gives_a_timed_view_delta(n, seeds):
    assert [s for s in range(seeds) if not propagate(s, n)] == []


@pytest.mark.parametrize("n, seeds", [(2, 150), (3, 150), (4, 30)])
def test_rolling_cursors_compensated_at_once_give_a_timed_view_delta(n, seeds):
    assert [s for s in range(seeds) if not rolling(s, n)] == []


def test_reading_below_the_steps_target_breaks_the_minimum_timestamp_rule():
    assert [s for s in range(150) if not propagate(s, 3, reads_after_target=False)] != []
