"""Classifying a run by the consistency levels of the Strobe paper (Zhuge et al., section 4.2).

Given the sequence of view states a warehouse produced, each with the per-source version vector
it claims to reflect, and an oracle for the true view at any vector:
- convergence: the final view equals the view over the final source states;
- weak: every state equals the view at some source state (here: the state it claims);
- strong: weak, and the states' vectors never go backwards (each source's order is kept);
- complete: strong, and every source transaction has a state of its own: consecutive vectors
  differ by exactly one transaction of one source, and the last reaches every commit.
A state that does not equal the view at the vector it claims counts as a violation; the first
one is reported with the row diff (what the view held, what it should have held).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from loadgen.checker.oracle import Oracle


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


def classify(oracle: Oracle, states: list[dict], final_view: dict[tuple, int]) -> Verdict:
    """`states`: [{"transaction", "source", "dsv", "versions", "view"}] in apply order."""
    final = oracle.final_versions()
    committed = sum(v - 1 for v in final.values())
    seen = Counter((s["source"], s["dsv"]) for s in states)
    doubled = sorted(f"{s}:{d}" for (s, d), n in seen.items() if n > 1)
    lost = sorted(f"{s}:{d}" for s, top in final.items() for d in range(2, top + 1) if (s, d) not in seen)
    verdict = Verdict("none", len(states), committed, lost, doubled)
    weak, monotone, single_steps = True, True, True
    previous = {s: 1 for s in final}
    vectors = [{s: state["versions"].get(s, 1) for s in final} for state in states]
    *expected_views, true_final = oracle.views_at(vectors + [final])
    for i, (state, vector, expected) in enumerate(zip(states, vectors, expected_views)):
        if expected != state["view"] and weak:
            weak = False
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
        if weak:
            verdict.level = "weak"
            if monotone and previous == final:
                verdict.level = "strong"
                if single_steps and not lost and not doubled:
                    verdict.level = "complete"
    return verdict


def _violation(index: int, state: dict, vector: dict, expected: dict) -> dict:
    got = state["view"]
    return {
        "state": index, "transaction": state.get("transaction"), "versions": vector,
        "view": _rows(got), "expected": _rows(expected),
        "missing": _rows({r: c - got.get(r, 0) for r, c in expected.items() if c > got.get(r, 0)}),
        "extra": _rows({r: c - expected.get(r, 0) for r, c in got.items() if c > expected.get(r, 0)}),
    }


def _rows(counts: dict) -> list:
    return sorted(([*r, c] for r, c in counts.items()), key=repr)
