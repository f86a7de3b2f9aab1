"""Answers as of an earlier version: a relation's pre-update state rebuilt from its current state
and the changes since (Vinh 2020, section 4, formula 12).

Sze-Ling's sources answer a sub-query at their current state, and the warehouse compensates the
answer down to its task's initial versions (Lemmas 5-7). A source that keeps its recent changes
can instead answer *as of* the versions a sub-query names (`Subquery.as_of`): for a relation R
asked as of BRV b, with C the changes of R at versions b+1..now condensed per key
(fedmodel.condense: per key, the row before the first change and the row after the last),

    R_b = (R_now EXCEPT C.added) UNION C.removed          (formula 12: post EXCEPT dnew UNION dold)

where C.added holds the keys' rows after (insertions, new images) and C.removed their rows
before (deletions, old images). Relations have keys, so a key names one row at every version and
the set operations go by key: a row of R_now whose key C changed is dropped, and the key's row
before, if it had one, comes back. Multiplicities are those of R_b, each 1; the view delta is
still computed by the warehouse from these rows with the usual signed terms (NOTES: formulas 13
and 14 as printed are wrong for mixed histories, which is why only the base state is rebuilt here).

The rule holds row by row, so it holds for any restriction of R that a row's own values decide:
a semijoin reads the current rows joining the wanted values, and the rows C.removed brings back
are kept when their values are wanted too (`rebuild`). A chain of semijoins read this way
relation by relation is the chain evaluated on the earlier state.

A source keeps its changes in a `RecentChanges` from a floor on: what it committed since it was
opened (or what its log still holds), minus what the warehouse has durably applied, which no
sub-query will ask for again (the initial versions of every task in flight, and of every task a
restarted warehouse starts, lie at or above the versions its durable view reflects). A sub-query
asking below the floor (a source restarted under a task in flight) is answered at the current
state instead, and the warehouse compensates it as Sze-Ling's does.

>>> from fedlab.fedmodel.transactions import Modification
>>> key = lambda row: row[:1]
>>> now = [(1, "b"), (3, "z")]          # R at BRV 4, after the three changes below
>>> changes = [RelationChange("R", 2, modified=(Modification((1, "a"), (1, "b")),)),
...            RelationChange("R", 3, deleted=((2, "x"),)),
...            RelationChange("R", 4, inserted=((3, "z"),))]
>>> sorted(rebuild(now, condense(changes, key), key, lambda row: True))      # R at BRV 1
[(1, 'a'), (2, 'x')]
>>> sorted(rebuild(now, condense(changes[1:], key), key, lambda row: True))  # R at BRV 2
[(1, 'b'), (2, 'x')]
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterable

from fedlab.fedmodel.catalog import Relation
from fedlab.fedmodel.condense import condense
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.subquery import Subquery
from fedlab.fedmodel.transactions import Notification, RelationChange

Scan = Callable[[Relation], list]
Matching = Callable[[Relation, list[int], set[tuple]], list]


def rebuild(rows: Iterable[tuple], net: RelationChange, key_of: Callable[[tuple], tuple],
            wanted: Callable[[tuple], bool]) -> list[tuple]:
    """Formula 12 on a restriction: `rows` (the current rows `wanted` accepts) as they were before
    the condensed change `net`."""
    changed = {key_of(r) for r in net.added}
    return [r for r in rows if key_of(r) not in changed] + [r for r in net.removed if wanted(r)]


def answered_versions(sq: Subquery, brv: dict[str, int], nets: dict[str, RelationChange] | None) -> dict[str, int]:
    """The BRV each relation of `sq` is answered at: the one asked when `nets` (from
    RecentChanges.nets) rebuilds it, otherwise the current one, `brv`."""
    return brv if nets is None else {**brv, **dict(sq.as_of)}


def reading_as_of(scan: Scan, matching: Matching, nets: dict[str, RelationChange]) -> tuple[Scan, Matching]:
    """A semijoin chain's `scan` and `matching` (source_node.durable_store.semijoin_chain) reading
    each relation as of the version its condensed change in `nets` starts from."""
    def scan_as_of(rel: Relation) -> list:
        rows = scan(rel)
        return rebuild(rows, nets[rel.name], rel.key_of, lambda r: True) if rel.name in nets else rows

    def matching_as_of(rel: Relation, positions: list[int], wanted: set[tuple]) -> list:
        rows = matching(rel, positions, wanted)
        if rel.name not in nets:
            return rows
        joins = lambda r: None not in (v := tuple(r[p] for p in positions)) and v in wanted   # noqa: E731
        return rebuild(rows, nets[rel.name], rel.key_of, joins)

    return scan_as_of, matching_as_of


def asked_earlier(sq: Subquery, brv: dict[str, int]) -> dict[str, int]:
    """The relations `sq` asks as of a version before the current one `brv`, with that version;
    ModelError for a version the source has not reached."""
    asked = {r: b for r, b in sq.as_of if b != brv[r]}
    for relation, b in asked.items():
        if b > brv[relation]:
            raise ModelError(f"sub-query {sq.id}: {relation} is at version {brv[relation]}, "
                             f"it cannot be read as of {b}")
    return asked


class RecentChanges:
    """A source's committed changes per relation, from a floor on: what `nets` condenses.

    `record` takes notifications in DSV order (a writer after its commit); `forget_through`
    drops the changes of transactions the warehouse has durably applied. Not thread-safe: a source
    whose readers answer while its writer records shares it through
    source_node.recent_changes.SharedRecentChanges.
    """

    def __init__(self, relations: Iterable[Relation], dsv: int, brv: dict[str, int],
                 notes: Iterable[Notification] = ()):
        """A history of the source's `relations` at state `dsv` / `brv`, holding `notes` (the last
        notifications up to `dsv`, in DSV order) and reaching back to the versions before the
        first of them."""
        notes = list(notes)
        self._key_of = {rel.name: rel.key_of for rel in relations}
        self._floor = dict(brv)          # per relation: the oldest BRV an answer can be rebuilt at
        self._changes: dict[str, deque[tuple[int, RelationChange]]] = {r: deque() for r in brv}
        for n in notes:
            for c in n.changes:
                self._changes[c.relation].append((n.dsv, c))
                self._floor[c.relation] = min(self._floor[c.relation], c.brv - 1)
        self.dsv = notes[-1].dsv if notes else dsv   # the last transaction recorded

    def record(self, n: Notification) -> None:
        """Adds a committed transaction's changes (ignored when already held)."""
        if n.dsv <= self.dsv:
            return
        for c in n.changes:
            self._changes[c.relation].append((n.dsv, c))
        self.dsv = n.dsv

    def forget_through(self, dsv: int) -> None:
        """Drops the changes of the transactions up to `dsv`: no answer will be asked below them."""
        for relation, changes in self._changes.items():
            while changes and changes[0][0] <= dsv:
                self._floor[relation] = changes.popleft()[1].brv

    def held(self) -> int:
        """How many relation changes the history holds (its size, for tests and status)."""
        return sum(len(c) for c in self._changes.values())

    def nets(self, sq: Subquery, dsv: int, brv: dict[str, int]) -> dict[str, RelationChange] | None:
        """Per relation `sq` asks as of an earlier version: its changes since, through the state
        `dsv`/`brv` the rows were read at, condensed; {} when nothing is asked earlier, None when
        the history does not reach back that far, or not yet up to `dsv` (answer at the current
        state then). ModelError for a version not reached yet.
        """
        asked = asked_earlier(sq, brv)
        if not asked:
            return {}
        if self.dsv < dsv or any(b < self._floor[r] for r, b in asked.items()):
            return None
        return {r: condense(self._after(r, b, brv[r], dsv), self._key_of[r]) for r, b in asked.items()}

    def _after(self, relation: str, brv: int, through_brv: int, through_dsv: int) -> list[RelationChange]:
        """`relation`'s changes at versions brv+1..through_brv, oldest first, read from the newest
        back: a task asks for a recent version, so this costs what it returns, not the history."""
        found = []
        for dsv, change in reversed(self._changes[relation]):
            if change.brv <= brv:
                break
            if change.brv <= through_brv and dsv <= through_dsv:
                found.append(change)
        return found[::-1]
