"""A chain of states: where each base row exists among the states a run's view went through.

The checker compares every view state of a run with the view at the source state it claims
(Strobe paper, section 4.2: V(ws_i) = V(ss_j)). Rather than evaluate the view once per state, it
lines the claimed version vectors up as a chain, positions 0, 1, 2, ..., and asks at which
positions each base row exists. A row exists in a half-open interval of its source's data
source versions, [vfrom, vto) (checker.oracle). While the chain's DSVs of that source
never decrease, which is what a run's claims do when no state steps back (Sze-Ling's always),
the positions at which the row exists are consecutive: from the first position whose DSV reaches
vfrom to the first whose DSV reaches vto. A view row made of several base rows then exists from
the greatest of their starts to the least of their ends (checker.oracle.chain_sql), so
the view at every position comes out of one evaluation over the whole history.

Where the DSVs do step back, the chain is cut into runs along which they do not, and a row gets
one interval per run in which it exists; one that exists on both sides of a cut keeps a single
interval. The cost grows with the number of runs (each row is placed in each run): one run,
proportional to the history, for a run whose claims are in order.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Sequence

import numpy as np
import pyarrow as pa


def state_intervals(table: pa.Table, dsvs: Sequence[int]) -> pa.Table:
    """The rows of a versioned relation (columns `__vfrom`, `__vto`: the DSV interval in which a
    row existed) with, in place of that interval, the positions of the chain at which the row
    exists (`__from`, `__to`, half-open): position k is at DSV `dsvs[k]` of the row's source.
    A row is repeated once per interval, and left out where it never exists.

    >>> versioned = pa.table({"a": [1, 2], "__vfrom": [1, 3], "__vto": [3, 2 ** 62]})
    >>> state_intervals(versioned, [1, 2, 2, 3, 4]).to_pydict()   # a row from DSV 1 to 3, one from 3 on
    {'a': [1, 2], '__from': [0, 3], '__to': [3, 5]}
    >>> state_intervals(versioned, [3, 1, 3]).to_pydict()         # back to DSV 1 and forward again
    {'a': [1, 2, 2], '__from': [1, 0, 2], '__to': [2, 1, 3]}

    Args:
        table: a versioned relation, as the oracle builds it.
        dsvs: the DSV of the relation's source at each position of the chain.
    """
    runs = _ascending_runs(dsvs)
    if len(runs) == 1:   # a run's claims in order: each row's interval found by bisection, all at once
        positions = np.asarray(dsvs, dtype=np.int64)
        starts = np.searchsorted(positions, table["__vfrom"].to_numpy(), "left")
        ends = np.searchsorted(positions, table["__vto"].to_numpy(), "left")
        exists = starts < ends
        return (table.filter(pa.array(exists)).drop_columns(["__vfrom", "__vto"])
                .append_column("__from", pa.array(starts[exists], pa.int64()))
                .append_column("__to", pa.array(ends[exists], pa.int64())))
    kept: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    for i, (vfrom, vto) in enumerate(zip(table["__vfrom"].to_pylist(), table["__vto"].to_pylist())):
        for first, last in runs:
            start, end = bisect_left(dsvs, vfrom, first, last), bisect_left(dsvs, vto, first, last)
            if start == end:
                continue
            if kept and kept[-1] == i and ends[-1] == start:   # it exists on both sides of a cut
                ends[-1] = end
            else:
                kept.append(i)
                starts.append(start)
                ends.append(end)
    placed = table.take(pa.array(kept, pa.int64())).drop_columns(["__vfrom", "__vto"])
    return (placed.append_column("__from", pa.array(starts, pa.int64()))
            .append_column("__to", pa.array(ends, pa.int64())))


def _ascending_runs(dsvs: Sequence[int]) -> list[tuple[int, int]]:
    """The chain cut where the DSV goes back: [first, last) position ranges along which it never
    decreases, so that each can be searched by bisection."""
    cuts = [k for k in range(1, len(dsvs)) if dsvs[k] < dsvs[k - 1]]
    return list(zip([0, *cuts], [*cuts, len(dsvs)]))
