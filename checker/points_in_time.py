"""Whether a run's view states are points in time (Salem et al. 2000's refresh points, carried to
a federation), judged from the sources' own histories and not from the warehouse's time line.

A wall time T names the vector in which each source is at its last transaction committed at or
before T by its own clock. A state's vector is such a point (up to ties in commit time, broken
by source name and DSV) exactly when every commit it includes is stamped before every commit it
leaves out: order the commits by (commit time, source, DSV), with a source's times read as never
decreasing (a clock that steps back counts at the time before), and the vector must be a prefix.
The `salem` algorithm shows only such states; the others show the states their notifications'
arrival order makes, which need not be (a source's transactions delayed in the network are
reflected after later ones of another source): the verdict reports the first state off the line
for every run, and a salem run must have none.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from fedlab.fedmodel.transactions import Notification


def stamped(history: dict[str, list[Notification]]) -> dict[tuple[str, int], float]:
    """(source, DSV) -> the commit time its transaction stands at on the line: its own, or the
    latest of the source's earlier ones when its clock stepped back (see the module docstring)."""
    out = {}
    for source, notes in history.items():
        at = float("-inf")
        for n in notes:
            at = max(at, n.commit_time)
            out[(source, n.dsv)] = at
    return out


def first_off_the_line(stamps: Mapping[tuple[str, int], float], states: Iterable[dict]) -> dict | None:
    """The first state whose vector is not a point of the commit-time line, with the commit it
    includes and the earlier one it leaves out; None when every state is a point. `stamps` are
    the transactions' places on the line (`stamped`), the states are read once, in order."""
    for i, state in enumerate(states):
        versions = state["versions"]
        included = [(stamps[(s, d)], s, d) for s, d in versions.items() if (s, d) in stamps]
        left_out = [(stamps[(s, d + 1)], s, d + 1) for s, d in versions.items() if (s, d + 1) in stamps]
        if included and left_out and min(left_out) < max(included):
            return {"state": i, "txn": state.get("transaction"), "includes": _named(max(included)),
                    "leaves_out": _named(min(left_out))}
    return None


def _named(key: tuple) -> str:
    return f"{key[1]}:{key[2]} (committed at {key[0]:.6f})"
