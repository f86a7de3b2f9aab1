"""What fell short of complete consistency, named, as Elle names the anomaly it found.

The levels (checker.levels) say how consistent a run was; this says what went wrong, in
the terms of the definitions the levels come from (Zhuge et al. 1996, section 4.2; Sze & Ling
2000, complete consistency), each anomaly naming the state and the source transactions
(`source:DSV`) involved, so that checker.explain can list their messages:

- `diverged`: the final view is not the view over the final source states (no convergence);
- `initial-view`: the view the warehouse started from is not the view where the sources started;
- `intermediate-state`: a state shows part of one source transaction: its changes to some of the
  relations it changed, not to all (as if each relation's update were a transaction of its own);
- `mixed-state`: a state is the view at no source state at all: it mixes source states, or holds
  rows (or multiplicities) no state of the sources gives (not weak);
- `wrong-state`: a state is not the view at the source state it claims (it is at another one);
- `backwards`: a state claims a source version below one the state before it claimed (iii);
- `split`: a state's claim shows part of a global transaction without the rest (i, section 3.1);
- `out-of-order`: the states are views at source states, but no order of them keeps every
  source's versions from going back (weak, not strong);
- `lost`: committed transactions no state reflects;
- `doubled`: transactions two states reflect (applied twice);
- `skipped`: a state reflects several transactions at once (strong at best, not complete).

>>> from fedlab.checker.levels import Verdict
>>> v = Verdict("convergence", 2, 2, lost=["ds1:3"], first_violation={"state": 1, "transaction": "t2",
...             "versions": {"ds1": 3}, "matches": {"ds1": 2}, "missing": [], "extra": [["a", 1]]})
>>> [(a["anomaly"], a["transactions"]) for a in named_anomalies(v, [{"source": "ds1", "dsv": 2}, {"source": "ds1", "dsv": 3}])]
[('wrong-state', ['ds1:3']), ('lost', ['ds1:3'])]
"""

from __future__ import annotations

SHOWN = 5   # transactions named per lost or doubled anomaly (the verdict lists them all)


def named_anomalies(verdict, states: list[dict]) -> list[dict]:
    """Each anomaly of `verdict` (checker.levels.Verdict) over `states` (in apply order):
    {"anomaly", "state" (an index, or None), "transactions" (["source:DSV"]), "says" (one line)}."""
    found = []
    f = verdict.first_violation
    if f is not None:
        found.append(_first_violation(f, states))
        if verdict.level == "none" and f["state"] is not None and f["transaction"] != "(final)":
            found.append(_anomaly("diverged", None, [], "the final view is not the view at the final source states"))
    for i in verdict.backwards:
        before = states[i - 1]["versions"] if i else {}
        low = {s: d for s, d in states[i]["versions"].items() if d < before.get(s, 0)}
        found.append(_anomaly("backwards", i, [_own(states[i])],
                              f"{_state(i, states)} claims {vector_text(low)}, below what state {i - 1} claimed "
                              f"({vector_text(before)})"))
    for i in verdict.split:
        found.append(_anomaly("split", i, [_own(states[i])],
                              f"{_state(i, states)} claims {vector_text(states[i]['versions'])}, which shows part of "
                              "a global transaction without the rest"))
    o = verdict.order_violation
    if o is not None:
        found.append(_anomaly("out-of-order", o["state"], [_own(states[o["state"]])],
                              f"{_state(o['state'], states)} is the view only at source states below those the states "
                              "before it were the views at: no order of the states keeps the sources' versions "
                              "from going back"))
    if verdict.lost:
        found.append(_anomaly("lost", None, verdict.lost[:SHOWN],
                              f"{_count(verdict.lost)} committed and reflected by no state: {_few(verdict.lost)}"))
    if verdict.doubled:
        found.append(_anomaly("doubled", None, verdict.doubled[:SHOWN],
                              f"{_count(verdict.doubled)} reflected by two states (applied twice): {_few(verdict.doubled)}"))
    if verdict.level == "strong" and verdict.claims_held and verdict.claims_ordered:
        jumps = [i for i, s in enumerate(states) if _step(states, i) > 1]
        if jumps:
            i = jumps[0]
            found.append(_anomaly("skipped", i, [_own(states[i])],
                                  f"{_state(i, states)} reflects {_step(states, i)} transactions at once ({len(jumps)} states "
                                  "do): the states between are never shown"))
    return found


def _first_violation(f: dict, states: list[dict]) -> dict:
    i = f["state"]
    if f["transaction"] == "(final)":
        return _anomaly("diverged", None, [], f"the final view is not the view at the final source states "
                                              f"({vector_text(f['versions'])}): {_diff(f)}")
    if i is None:
        return _anomaly("initial-view", None, [], f"the view the warehouse started from is not the view at "
                                                  f"{vector_text(f['versions'])}: {_diff(f)}")
    claimed = f["versions"]
    part = f.get("part_of")
    if part is not None:
        return _anomaly("intermediate-state", i, [part["transaction"]],
                        f"{_state(i, states)} shows transaction {part['transaction']} in part: its changes to "
                        f"{', '.join(part['relations'])} without those to "
                        f"{', '.join(r for r in part['of'] if r not in part['relations'])}")
    if "matches" in f and f["matches"] is None:
        return _anomaly("mixed-state", i, [_own(states[i])],
                        f"{_state(i, states)} is the view at no source state (it claims {vector_text(claimed)}): "
                        f"{_diff(f)}")
    matches = f.get("matches") or {}
    between = [f"{s}:{d}" for s in sorted(claimed) for lo, hi in [sorted((claimed[s], matches.get(s, claimed[s])))]
               for d in range(lo + 1, hi + 1)]
    where = f", but at {vector_text(matches)}" if matches else ""
    return _anomaly("wrong-state", i, sorted({_own(states[i]), *between}),
                    f"{_state(i, states)} is not the view at the source state it claims, {vector_text(claimed)}{where}: "
                    f"{_diff(f)}")


def _count(transactions: list) -> str:
    return "1 transaction" if len(transactions) == 1 else f"{len(transactions)} transactions"


def _few(transactions: list) -> str:
    more = f", ... ({len(transactions) - SHOWN} more)" if len(transactions) > SHOWN else ""
    return ", ".join(transactions[:SHOWN]) + more


def _anomaly(name: str, state: int | None, transactions: list[str], says: str) -> dict:
    return {"anomaly": name, "state": state, "transactions": transactions, "says": says}


def _state(i: int, states: list[dict]) -> str:
    return f"state {i} (after transaction {states[i].get('transaction')})"


def _own(state: dict) -> str:
    return f"{state['source']}:{state['dsv']}"


def _step(states: list[dict], i: int) -> int:
    before = states[i - 1]["versions"] if i else {}
    return sum(d - before.get(s, 1) for s, d in states[i]["versions"].items())


def vector_text(versions: dict) -> str:
    """`ds1 DSV 3, ds2 DSV 2` (the sources in order), or "the start" for none."""
    return ", ".join(f"{s} DSV {d}" for s, d in sorted(versions.items())) or "the start"


def _diff(f: dict) -> str:
    return f"{len(f.get('missing') or [])} rows missing, {len(f.get('extra') or [])} extra"
