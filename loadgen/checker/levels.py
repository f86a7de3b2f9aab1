"""Classifying a run by the consistency levels of the Strobe paper (Zhuge et al., section 4.2).

Given the sequence of view states a warehouse produced, each with the per-source version vector
it claims to reflect, and an oracle for the true view at any vector:
- convergence: the final view equals the view over the final source states;
- weak: every state equals the view at some source state: the one it claims or, failing that,
  any vector of source versions (each source at some state of its own history: section 4.2 lets
  "each source reflect a different serializable schedule"), found by searching;
- strong: every state equals the view at the state it claims (the claims are the mapping m),
  and the states' vectors never go backwards (each source's order is kept);
- complete: strong, and every source transaction has a state of its own: consecutive vectors
  differ by exactly one transaction of one source, and the last reaches every commit.
A state that does not equal the view at the vector it claims counts as a violation; the first
one is reported with the row diff (what the view held, what it should have held).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field

from loadgen.checker.oracle import Oracle

SEARCH_LIMIT = 20000   # source state vectors tried exhaustively; beyond it, those near each claim
WINDOW = 3             # how far from its claim, per source, a state is looked for beyond the limit


@dataclass
class Verdict:
    level: str
    states: int
    transactions: int
    lost: list = field(default_factory=list)
    doubled: list = field(default_factory=list)
    first_violation: dict | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def classify(oracle: Oracle, states: list[dict], final_view: dict[tuple, int],
             start_versions: dict[str, int] | None = None, start_view: dict[tuple, int] | None = None) -> Verdict:
    """`states`: [{"transaction", "source", "dsv", "versions", "view"}] in apply order.

    By default the view starts where the sources do (DSV 1 each). A live warehouse starts from a
    view it materialised at `start_versions` (`start_view`, checked like any state): transactions
    up to those versions are in it, so they have no state of their own and are not lost.
    """
    final = oracle.final_versions()
    start = {s: (start_versions or {}).get(s, 1) for s in final}
    committed = sum(final[s] - start[s] for s in final)
    seen = Counter((s["source"], s["dsv"]) for s in states)
    doubled = sorted(f"{s}:{d}" for (s, d), n in seen.items() if n > 1)
    lost = sorted(f"{s}:{d}" for s, top in final.items() for d in range(start[s] + 1, top + 1) if (s, d) not in seen)
    verdict = Verdict("none", len(states), committed, lost, doubled)
    claims_hold, monotone, single_steps = True, True, True
    previous = dict(start)
    vectors = [{s: state["versions"].get(s, 1) for s in final} for state in states]
    *expected_views, expected_start, true_final = oracle.views_at(vectors + [start, final])
    if start_view is not None and expected_start != start_view:
        claims_hold = False
        verdict.first_violation = _violation(None, {"transaction": "(initial view)", "view": start_view},
                                             start, expected_start)
    unclaimed = []   # states that differ from the view at the vector they claim
    for i, (state, vector, expected) in enumerate(zip(states, vectors, expected_views)):
        if expected != state["view"]:
            unclaimed.append(i)
            if claims_hold:
                claims_hold = False
                verdict.first_violation = _violation(i, state, vector, expected)
        if any(vector[s] < previous[s] for s in final):
            monotone = False
        if sum(vector[s] - previous[s] for s in final) != 1:
            single_steps = False
        previous = vector
    converged = true_final == final_view
    if not converged and verdict.first_violation is None:
        verdict.first_violation = _violation(len(states), {"transaction": "(final)", "view": final_view}, final, true_final)
    if converged:
        verdict.level = "convergence"
        weak = claims_hold
        if not claims_hold and verdict.first_violation["state"] is not None:
            found = _states_matching(oracle, [states[i]["view"] for i in unclaimed],
                                     [vectors[i] for i in unclaimed], start, final)
            weak = all(v is not None for v in found)
            verdict.first_violation["matches"] = found[0]   # the source state it is the view at, if any
        if weak:
            verdict.level = "weak"
            # The last state may claim less than the final vector (a lost transaction that left
            # the view alone): it converged, so mapping it to the final source state keeps m
            # monotone, which is all strong consistency asks.
            if claims_hold and monotone:
                verdict.level = "strong"
                if single_steps and previous == final and not lost and not doubled:
                    verdict.level = "complete"
    return verdict


def _states_matching(oracle: Oracle, views: list[dict], claims: list[dict], start: dict,
                     final: dict) -> list[dict | None]:
    """For each view, a source state vector at which the true view equals it (None: none found)."""
    sources = sorted(final)
    if math.prod(final[s] - start[s] + 1 for s in sources) <= SEARCH_LIMIT:
        candidates = itertools.product(*(range(start[s], final[s] + 1) for s in sources))
    else:
        candidates = sorted({v for c in claims for v in itertools.product(
            *(range(max(start[s], c[s] - WINDOW), min(final[s], c[s] + WINDOW) + 1) for s in sources))})
    candidates = [dict(zip(sources, v)) for v in candidates]
    found: list[dict | None] = [None] * len(views)
    for vector, view in zip(candidates, oracle.views_at(candidates)):
        for i, wanted in enumerate(views):
            if found[i] is None and view == wanted:
                found[i] = vector
    return found


def _violation(index: int | None, state: dict, vector: dict, expected: dict) -> dict:
    got = state["view"]
    return {
        "state": index, "transaction": state.get("transaction"), "versions": vector,
        "view": _rows(got), "expected": _rows(expected),
        "missing": _rows({r: c - got.get(r, 0) for r, c in expected.items() if c > got.get(r, 0)}),
        "extra": _rows({r: c - expected.get(r, 0) for r, c in got.items() if c > expected.get(r, 0)}),
    }


def _rows(counts: dict) -> list:
    return sorted(([*r, c] for r, c in counts.items()), key=repr)
