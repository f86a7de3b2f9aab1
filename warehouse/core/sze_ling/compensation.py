"""Compensation of a query result from the state it was read at to the state it should reflect.

Sze-Ling section 5. Lemma 1 compares a result's queried version number (beta) with the task's
initial version number (alpha) of that relation:
- beta > alpha: the updates alpha+1..beta are interfering; undo them, newest first (Lemmas 5-7):
  an interfering insertion is dropped, an interfering deletion re-added, an interfering
  modification turned back into its old image;
- beta < alpha (a result read from the view, whose refreshed version lags): the updates
  beta+1..alpha are missing; redo them, oldest first (Lemmas 2-4);
- beta = alpha: nothing to do.
Theorem 1's order (missing first, then interfering, relation by relation in query order) holds
because each answer is compensated on arrival, and a child relation's probe is taken from its
parent's compensated rows.

A result is a *restricted* relation: the rows of R that join the probe values (and pass the
view's selection on R). Every update step keeps that restriction: a row is re-added only if it
would have been in the result (`keep`). Rows that a re-added row would have fetched from
relations queried later are fetched by the task as follow-up sub-queries (Lemma 5's "together
with those tuples ... that should be retrieved").

>>> from fedlab.fedmodel.transactions import RelationChange
>>> from types import SimpleNamespace
>>> R1 = SimpleNamespace(key_of=lambda r: r[:1])
>>> log = {("R1", 2): RelationChange("R1", 2, inserted=(("a3", "b3", "c1"), ("a2", "b2", "c2")))}
>>> table1 = [("a1", "b1", "c1"), ("a3", "b3", "c1")]        # mu R1 of Table 1, qvn 2
>>> compensate(table1, R1, "R1", beta=2, alpha=1, change=lambda r, v: log[(r, v)], keep=lambda r: r[2] == "c1")
[('a1', 'b1', 'c1')]
"""

from __future__ import annotations

from typing import Callable, Iterable

from fedlab.fedmodel.transactions import RelationChange


def compensate(rows: Iterable[tuple], relation, name: str, beta: int, alpha: int,
               change: Callable[[str, int], RelationChange], keep: Callable[[tuple], bool],
               touching: Callable[[int, int], Iterable[int]] = lambda lo, hi: range(lo + 1, hi + 1)) -> list[tuple]:
    """Rows of a result read at version `beta`, brought to version `alpha` (Lemma 1, Theorem 1).

    `relation` gives `key_of`; `change(name, v)` is the update that produced version v;
    `keep(row)` says whether a row belongs to this result's restriction; `touching(lo, hi)` names
    the versions in (lo, hi] whose updates may hold such rows (by default all of them).
    """
    state = {relation.key_of(r): r for r in rows}
    if beta > alpha:
        for version in sorted(touching(alpha, beta), reverse=True):
            _step(state, relation, remove=change(name, version).added, add=change(name, version).removed, keep=keep)
    elif beta < alpha:
        for version in sorted(touching(beta, alpha)):
            _step(state, relation, remove=change(name, version).removed, add=change(name, version).added, keep=keep)
    return list(state.values())


def _step(state: dict, relation, remove: Iterable[tuple], add: Iterable[tuple], keep) -> None:
    for r in remove:
        k = relation.key_of(r)
        if state.get(k) == r:
            del state[k]
    for r in add:
        if keep(r):
            state[relation.key_of(r)] = r
