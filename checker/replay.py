"""The warehouse's view states and the oracle's, replayed side by side from their changes.

Each view state is the one before it plus a delta, on both sides: the warehouse's change log
holds one delta per applied transaction, and the oracle yields the true view's change from one
claimed source state to the next (Oracle.changes_along). So the checker never holds more than
one view: it keeps the warehouse's view and the difference between it and the true view, and a
state equals the view at the source state it claims (Strobe paper, section 4.2: V(ws_i) =
V(ss_j)) exactly when that difference is empty. That costs the sum of the deltas, not the number
of states times the size of the view. Whole views are rebuilt only where they are needed: for
the first violation's report, and for the search for other source states a state may equal
(`views`), which runs only when the claims fail.

A state carries its delta (`"delta"`: rows to signed count changes) or, when that is what its
maker has, its whole view (`"view"`: rows to counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

Counts = dict[tuple, int]   # view rows (without the count column) to counts, none zero


@dataclass
class Replay:
    start: Counts                                      # the view the warehouse started from
    failed: list[int]                                  # the states not equal to the view at their claim
    first: tuple[int | None, Counts, Counts] | None    # (state, or None for the start; held; true view)
    true_final: Counts                                 # the true view at the chain's last position


def replay(truth: list[Counts], states: list[dict], start_view: Counts | None) -> Replay:
    """Walks the chain [start, one position per state, final] that `truth` gives the true view's
    changes along (its first entry the whole view at the start), beside the warehouse's states.
    The warehouse starts from `start_view`, or when it has none from the true view there
    (section 4.2 assumes V(ws_0) = V(ss_0))."""
    start = truth[0] if start_view is None else start_view
    held = dict(start)
    difference: Counts = {}        # held minus the true view
    add(difference, held)
    add(difference, truth[0], -1)
    failed, first = [], None
    if difference:
        first = (None, dict(held), _true(held, difference))
    for i, (state, change) in enumerate(zip(states, truth[1:])):
        delta = state_delta(state, held)
        add(held, delta)
        add(difference, delta)
        add(difference, change, -1)
        if difference:
            failed.append(i)
            if first is None:
                first = (i, dict(held), _true(held, difference))
    true_final = _true(held, difference)
    add(true_final, truth[len(states) + 1])
    return Replay(start, failed, first, true_final)


def views(start: Counts, changes: Iterable[Counts]) -> Iterator[Counts]:
    """The view after each change in turn, from `start`: a whole view per change, for the few
    uses that need every state's view at once."""
    view = dict(start)
    for change in changes:
        add(view, change)
        yield dict(view)


def warehouse_views(states: list[dict], start: Counts) -> Iterator[Counts]:
    """Each state's whole view, the warehouse having started from `start`."""
    held = dict(start)
    for state in states:
        add(held, state_delta(state, held))
        yield state["view"] if "view" in state else dict(held)


def state_delta(state: dict, before: Counts) -> Counts:
    """The state's change to the view: its delta, or its view minus the one `before` it."""
    if "delta" in state:
        return state["delta"]
    after = state["view"]
    return {row: count for row in {*after, *before} if (count := after.get(row, 0) - before.get(row, 0))}


def add(counts: Counts, change: Counts, sign: int = 1) -> None:
    """counts += sign * change, in place, dropping the rows that reach 0."""
    for row, count in change.items():
        total = counts.get(row, 0) + sign * count
        if total:
            counts[row] = total
        else:
            counts.pop(row, None)


def _true(held: Counts, difference: Counts) -> Counts:
    """The true view, from the held one and the difference between them."""
    view = dict(held)
    add(view, difference, -1)
    return view
