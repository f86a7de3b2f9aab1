"""Classifying a run by the consistency levels of the Strobe paper (Zhuge et al., section 4.2).

Given the sequence of view states a warehouse produced, each with the per-source version vector
it claims to reflect, and an oracle for the true view at any vector:
- convergence: the final view equals the view over the final source states;
- weak: every state equals the view at some source state: the one it claims or, failing that,
  any vector of source versions (each source at some state of its own history: section 4.2 lets
  "each source reflect a different serializable schedule"), found by searching;
- strong: a mapping m of the states to source states exists, each state equal to the view at its
  image, that keeps their order (iii: per source, the images' versions never go back) and whose
  images are states of one serial schedule of all the sources (i: none shows part of a global
  transaction, section 3.1, without the rest). The states' claims are that mapping when they all
  hold and are in order; otherwise it is searched for among the vectors at which each state's view
  is the true one. Convergence lets the last state map to the final source state (its view is the
  view there, and that state is at or above every other), as section 4.2 asks of ws_f;
- complete: strong, and every source transaction has a state of its own, judged by the claims
  (each an image of m): consecutive claims differ by exactly one transaction of one source, the
  last reaches every commit, and no transaction is lost or doubled. The claims are what lost and
  doubled transactions are counted from (a state that reflects several transactions at once
  reflects those its claim moves past, when the claims held and are in order), and the
  algorithms built for completeness (Sze-Ling, C-Strobe) claim exactly what each state
  reflects: a run whose claims fail is at most strong.
The verdict says apart whether the claims held (`claims_held`) and were in order
(`claims_ordered`): a run can be strong by the paper's definition although its claims failed.
The first state that does not equal the view at the vector it claims is reported with the row
diff (what the view held, what it should have held) and the vector it does match; a run that is
weak and not strong also names the first state that no order-preserving mapping reaches, the
source states it is the view at and the lowest ones the states before it can be mapped to.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from fedlab.checker.anomalies import named_anomalies
from fedlab.checker.oracle import Oracle, comparable
from fedlab.checker.points_in_time import first_off_the_line, stamped
from fedlab.checker.replay import replay, views, warehouse_views

SEARCH_LIMIT = 20000   # source state vectors tried exhaustively; beyond it, those near the claims in doubt
WINDOW = 3             # how far from its claim, per source, a state is looked for beyond the limit
SHOWN_VECTORS = 5      # vectors listed per side of an order violation

Vector = tuple[int, ...]   # one DSV per source, the sources in sorted order


@dataclass
class Verdict:
    level: str
    states: int
    transactions: int
    lost: list = field(default_factory=list)
    doubled: list = field(default_factory=list)
    first_violation: dict | None = None
    claims_held: bool = True      # every state (and the initial view) equals the view at its claim
    claims_ordered: bool = True   # in order: they never go back, none splits a global transaction
    order_violation: dict | None = None   # weak, not strong: the first state no mapping reaches
    backwards: list = field(default_factory=list)   # states whose claim goes below the one before
    split: list = field(default_factory=list)       # states whose claim shows part of a global transaction
    anomalies: list = field(default_factory=list)   # what went wrong, named (checker.anomalies)
    off_time_line: dict | None = None   # the first state no wall time names (checker.points_in_time)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def explained_level(self) -> str:
        """The level, with why, when a level the claims alone do not show rests on the search."""
        if self.level not in ("weak", "strong") or (self.claims_held and self.claims_ordered):
            return self.level
        claims = "did not all hold" if not self.claims_held else "held but are out of order"
        mapping = "a monotone mapping exists" if self.level == "strong" else "no monotone mapping exists"
        return f"{self.level} (the states' claimed version vectors {claims}; {mapping})"


def classify(oracle: Oracle, states: list[dict], final_view: dict[tuple, int],
             start_versions: dict[str, int] | None = None, start_view: dict[tuple, int] | None = None,
             global_transactions: dict[str, str] | None = None) -> Verdict:
    """The run's level (`_level`), and what fell short of complete named (checker.anomalies)."""
    states = [{**s, **{k: _comparable(s[k]) for k in ("delta", "view") if k in s}} for s in states]
    final_view = _comparable(final_view)
    start_view = None if start_view is None else _comparable(start_view)
    verdict = _level(oracle, states, final_view, start_versions, start_view, global_transactions)
    if verdict.first_violation is not None:
        verdict.first_violation["part_of"] = _part_shown(oracle, states, verdict.first_violation)
    verdict.anomalies = named_anomalies(verdict, states)
    verdict.off_time_line = first_off_the_line(stamped(oracle.history), states)
    return verdict


def _comparable(rows: dict[tuple, int]) -> dict[tuple, int]:
    """Rows keyed as the oracle keys its own (oracle.comparable); counts of rows that become one add up."""
    out: Counter = Counter()
    for row, count in rows.items():
        out[tuple(comparable(v) for v in row)] += count
    return {r: c for r, c in out.items() if c}


def _part_shown(oracle: Oracle, states: list[dict], f: dict) -> dict | None:
    """When the first violating state is the view after part of its own transaction (some of the
    relations it changed, not all: an intermediate state of a multi-relation transaction), that
    part: {"transaction": "source:DSV", "relations": [...]}; else None. Tried on the state that
    failed only, one evaluation of the view per subset of the transaction's relations."""
    if f["state"] is None or f["transaction"] == "(final)":
        return None
    source, dsv = states[f["state"]]["source"], states[f["state"]]["dsv"]
    transaction = oracle.transaction(source, dsv)
    if transaction is None or f["versions"].get(source) != dsv:
        return None
    relations = [c.relation for c in transaction.changes]
    held = {tuple(row[:-1]): row[-1] for row in f["view"]}
    for size in range(1, len(relations)):
        for part in itertools.combinations(relations, size):
            if oracle.with_part_of(source, dsv, part).view_at(f["versions"]) == held:
                return {"transaction": f"{source}:{dsv}", "relations": list(part), "of": relations}
    return None


def _level(oracle: Oracle, states: list[dict], final_view: dict[tuple, int],
           start_versions: dict[str, int] | None, start_view: dict[tuple, int] | None,
           global_transactions: dict[str, str] | None) -> Verdict:
    """`states`: [{"transaction", "source", "dsv", "versions", and "delta" or "view"}] in apply
    order, each with its change to the view or its whole view (checker.replay).

    By default the view starts where the sources do (DSV 1 each). A live warehouse starts from a
    view it materialised at `start_versions` (`start_view`, checked like any state): transactions
    up to those versions are in it, so they have no state of their own and are not lost. Without
    `start_view`, states given by their deltas start from the true view there.
    `global_transactions` maps a local transaction's id to the global transaction it is part of.

    The claims are checked along the chain start, claims, final (Oracle.changes_along): one
    evaluation of the view and one replay of both sides' changes, whatever the number of states.
    """
    final = oracle.final_versions()
    start = {s: (start_versions or {}).get(s, 1) for s in final}
    committed = sum(final[s] - start[s] for s in final)
    sources = sorted(final)
    claims = [tuple(state["versions"].get(s, 1) for s in sources) for state in states]
    low, high = tuple(start[s] for s in sources), tuple(final[s] for s in sources)
    verdict = Verdict("none", len(states), committed)
    truth = oracle.changes_along([dict(zip(sources, v)) for v in [low, *claims, high]])
    walked = replay(truth, states, start_view)
    serial = _serial_states(oracle, global_transactions or {}, sources)
    if walked.first is not None:
        i, held, expected = walked.first
        verdict.first_violation = (_violation(None, "(initial view)", start, held, expected) if i is None else
                                   _violation(i, states[i].get("transaction"), _named(sources, claims[i]),
                                              held, expected))
    verdict.claims_held = verdict.first_violation is None
    backwards = [i for i, (before, claim) in enumerate(zip([low, *claims], claims)) if not _at_or_above(claim, before)]
    split = [i for i, claim in enumerate(claims) if not serial(claim)]
    verdict.claims_ordered = not backwards and not split
    verdict.backwards, verdict.split = backwards, split
    seen = _reflected(states, claims if verdict.claims_held and verdict.claims_ordered else None, low, sources)
    verdict.doubled = sorted(f"{s}:{d}" for (s, d), n in seen.items() if n > 1)
    verdict.lost = sorted(f"{s}:{d}" for s, top in final.items() for d in range(start[s] + 1, top + 1)
                          if (s, d) not in seen)
    if walked.true_final != final_view:
        if verdict.first_violation is None:
            verdict.first_violation = _violation(len(states), "(final)", final, final_view, walked.true_final)
        return verdict
    verdict.level = "convergence"
    if verdict.first_violation is not None and verdict.first_violation["state"] is None:
        return verdict   # section 4.2 assumes the view starts synchronised, V(ws_0) = V(ss_0)
    if verdict.claims_held and verdict.claims_ordered:
        one_by_one = _one_transaction_per_state(claims, low, high) and not verdict.lost and not verdict.doubled
        verdict.level = "complete" if one_by_one else "strong"
        return verdict
    # The claims failed or are out of order: search for other source states, which compares
    # whole views, so every state's view is rebuilt, here only. Beyond SEARCH_LIMIT the search
    # looks near the claims in doubt: those that failed, both ends of a step back, those
    # splitting a global transaction.
    doubtful = set(walked.failed) | set(split) | {j for i in backwards for j in (i - 1, i) if j >= 0}
    known = {claim: view for claim, view in zip(claims, views(truth[0], truth[1:-1]))
             if _at_or_above(claim, low) and _at_or_above(high, claim)}
    matches = _matching_vectors(oracle, list(warehouse_views(states, walked.start)),
                                [claims[i] for i in sorted(doubtful)], known, low, high, sources)
    _judge_by_mapping(verdict, states, matches, serial, low, sources)
    return verdict


def _reflected(states: list[dict], claims: list[Vector] | None, start: Vector, sources: list[str]) -> Counter:
    """How many states newly reflect each (source, DSV): the transaction a state names, and, when
    the `claims` held and are in order (else None), for a state that reflects several at once
    (the Strobe family, lazy) the others its claim moves past since the claim before it."""
    seen = Counter((s["source"], s["dsv"]) for s in states)
    claims = claims or []
    for state, before, claim in zip(states, [start, *claims], claims):
        if sum(claim) - sum(before) > 1 and _at_or_above(claim, before):
            seen.update((s, d) for s, b, c in zip(sources, before, claim) for d in range(b + 1, c + 1)
                        if (s, d) != (state["source"], state["dsv"]))
    return seen


def _one_transaction_per_state(claims: list[Vector], start: Vector, final: Vector) -> bool:
    """Each claim one transaction of one source past the one before, the last at every commit."""
    steps = all(sum(claim) - sum(before) == 1 for before, claim in zip([start, *claims], claims))
    return steps and (claims[-1] if claims else start) == final


def _judge_by_mapping(verdict: Verdict, states: list[dict], matches: list[list[Vector]],
                      serial: Callable[[Vector], bool], start: Vector, sources: list[str]) -> None:
    """Weak when every state equals the view at some source state (`matches`), strong when those
    states admit an order-preserving mapping; the first failed claim gets the vector it matches
    (its image under the mapping, when there is one)."""
    first = verdict.first_violation
    if not all(matches):
        if first is not None:
            first["matches"] = _named(sources, matches[first["state"]][0]) if matches[first["state"]] else None
        return
    verdict.level = "weak"
    frontiers = _reachable_frontiers([[v for v in vectors if serial(v)] for vectors in matches], start)
    if len(frontiers) == len(states):
        verdict.level = "strong"
        mapping = _walk_back(frontiers)
        if first is not None:
            first["matches"] = _named(sources, mapping[first["state"]])
        return
    if first is not None:
        first["matches"] = _named(sources, matches[first["state"]][0])
    i = len(frontiers)
    lowest = frontiers[-1] if frontiers else [start]
    verdict.order_violation = {
        "state": i, "transaction": states[i].get("transaction"),
        "matches": [_named(sources, v) for v in matches[i] if serial(v)][:SHOWN_VECTORS],
        "not_below": [_named(sources, v) for v in lowest[:SHOWN_VECTORS]],
    }
    split = [_named(sources, v) for v in matches[i] if not serial(v)]
    if split:   # source states it equals the view at, each showing part of a global transaction
        verdict.order_violation["split"] = split[:SHOWN_VECTORS]


def _matching_vectors(oracle: Oracle, views: list[dict], around: list[Vector], known: dict[Vector, dict],
                      start: Vector, final: Vector, sources: list[str]) -> list[list[Vector]]:
    """For each view, the source state vectors between `start` and `final` at which the true view
    equals it, in ascending order: among every such vector while there are at most SEARCH_LIMIT of
    them, else among those within WINDOW of each vector `around` and those `known` ({vector: the
    view there}). Beyond the limit a state may match a vector the search does not try, so the
    level found is then a lower bound."""
    bounds = list(zip(start, final))
    if math.prod(hi - lo + 1 for lo, hi in bounds) <= SEARCH_LIMIT:
        tried = set(itertools.product(*(range(lo, hi + 1) for lo, hi in bounds)))
    else:
        tried = {v for c in around for v in itertools.product(
            *(range(max(lo, x - WINDOW), min(hi, x + WINDOW) + 1) for x, (lo, hi) in zip(c, bounds)))}
    fresh = sorted(tried - set(known))
    wanted = {_key(view) for view in views}
    at: dict[frozenset, list[Vector]] = {}
    evaluated = zip(fresh, oracle.views_at([dict(zip(sources, v)) for v in fresh]))
    for vector, view in itertools.chain(known.items(), evaluated):
        if _key(view) in wanted:
            at.setdefault(_key(view), []).append(vector)
    return [sorted(at.get(_key(view), [])) for view in views]


def _reachable_frontiers(candidates: list[list[Vector]], start: Vector) -> list[list[Vector]]:
    """For each state in turn, the lowest vectors it can be mapped to with every state before it
    mapped at or below (componentwise, from `start`): the minimal elements of its candidates
    that lie at or above one of its predecessor's. Stops before the first state none reaches.

    Keeping all the minimal elements, not one, makes the search exact over the candidates: two
    incomparable vectors (x2 y1, x1 y2) may each be the only way on to a different later state,
    so no single greedy choice is safe; and any vector at or above a minimal one is reached too.
    """
    frontiers, lowest = [], [start]
    for vectors in candidates:
        reachable = [v for v in vectors if any(_at_or_above(v, m) for m in lowest)]
        if not reachable:
            break
        lowest = _minimal(reachable)
        frontiers.append(lowest)
    return frontiers


def _walk_back(frontiers: list[list[Vector]]) -> list[Vector]:
    """An order-preserving mapping through every frontier: from the last state back, each state
    takes one of its lowest vectors at or below its successor's (one exists, since the
    successor's vector was reached from one of them)."""
    mapping = [frontiers[-1][0]]
    for lowest in reversed(frontiers[:-1]):
        mapping.append(next(m for m in lowest if _at_or_above(mapping[-1], m)))
    return mapping[::-1]


def _minimal(vectors: list[Vector]) -> list[Vector]:
    """The vectors not at or above another (the list holds each vector once)."""
    kept: list[Vector] = []
    for v in sorted(vectors, key=sum):   # a vector can only be at or above one of no larger sum
        if not any(_at_or_above(v, k) for k in kept):
            kept.append(v)
    return kept


def _serial_states(oracle: Oracle, global_transactions: dict[str, str],
                   sources: list[str]) -> Callable[[Vector], bool]:
    """Whether a vector is a state of one serial schedule of all the sources (section 4.2 (i)):
    one that shows every global transaction's local parts all or none (section 3.1). Without
    global transactions every vector is."""
    parts: dict[str, list[tuple[int, int]]] = {}
    for source, log in oracle.history.items():
        for n in log:
            if n.txn_id in global_transactions:
                parts.setdefault(global_transactions[n.txn_id], []).append((sources.index(source), n.dsv))
    spread = [p for p in parts.values() if len(p) > 1]
    return lambda v: all(len({v[i] >= dsv for i, dsv in p}) == 1 for p in spread)


def _at_or_above(v: Vector, w: Vector) -> bool:
    return all(a >= b for a, b in zip(v, w))


def _key(view: dict) -> frozenset:
    return frozenset(view.items())


def _named(sources: list[str], vector: Vector) -> dict[str, int]:
    return dict(zip(sources, vector))


def _violation(index: int | None, transaction: str | None, vector: dict, got: dict, expected: dict) -> dict:
    return {
        "state": index, "transaction": transaction, "versions": vector,
        "view": _rows(got), "expected": _rows(expected),
        "missing": _rows({r: c - got.get(r, 0) for r, c in expected.items() if c > got.get(r, 0)}),
        "extra": _rows({r: c - expected.get(r, 0) for r, c in got.items() if c > expected.get(r, 0)}),
    }


def _rows(counts: dict) -> list:
    return sorted(([*r, c] for r, c in counts.items()), key=repr)
