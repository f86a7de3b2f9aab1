"""An aggregate view (fedmodel.aggregate_view: GROUP BY with aggregates, or DISTINCT) kept from the
deltas of the join the algorithms maintain.

Every algorithm maintains the select-project-join view under the aggregates, its *join*, with
multiplicities and version numbers as for any view, and applies it state by state
(StateApplied). The adapter that carries out a StateApplied (the simulator, the live warehouse)
hands its delta to `AggregateState.apply`, which returns the aggregate view's delta for that same
state, so the aggregate view goes through exactly the join's states: the consistency the
algorithm keeps for the join holds for it.

A group's aggregates are recomputed, when a delta touches the group, from what the warehouse
holds of it: the multiset of the values its join rows give each aggregate (`members`, value ->
multiplicity). So MIN and MAX survive the deletion of the current extreme without asking any
source, SUM and COUNT follow inserts and deletes exactly, and the cost of a delta is that of the
groups it touches. A group is a row of the aggregate view while its join rows' multiplicities
sum above zero; an aggregate without GROUP BY has one row always (COUNT 0 and the others NULL
over an empty join, as SQL has it). Aggregates skip NULL values, as SQL's do.
"""

from __future__ import annotations

from collections import Counter

from fedlab.fedmodel.aggregate_view import AggregateView
from fedlab.fedmodel.outer_join_view import OuterJoinView
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.outer_join_state import OuterJoinState


def user_view(view: ViewDef | AggregateView | OuterJoinView, join_rows: dict[tuple, int]
              ) -> "AggregateState | OuterJoinState | JoinRows":
    """The user's view of `view`, kept from its join's deltas (`apply`) from `join_rows` on."""
    return aggregate_of(view, join_rows) or JoinRows(join_rows)


def aggregate_of(view: ViewDef | AggregateView | OuterJoinView, join_rows: dict[tuple, int]
                 ) -> "AggregateState | OuterJoinState | None":
    """What is kept beside the join of an aggregate view (its aggregates) or of an outer-join view
    (warehouse.core.outer_join_state: the counts that say which rows are subsumed), from
    `join_rows` on; None for a select-project-join view, whose rows are its join's (whoever holds
    the join has them)."""
    if isinstance(view, AggregateView):
        return AggregateState(view, join_rows)
    return OuterJoinState(view, join_rows) if isinstance(view, OuterJoinView) else None


class JoinRows:
    """A select-project-join view as its user sees it: the join's own rows."""

    def __init__(self, join_rows: dict[tuple, int]):
        self.counts = Counter(join_rows)

    def rows(self) -> dict[tuple, int]:
        return {r: c for r, c in self.counts.items() if c}

    def apply(self, join_delta: dict[tuple, int]) -> dict[tuple, int]:
        self.counts.update(join_delta)
        return dict(join_delta)


class AggregateState:
    def __init__(self, view: AggregateView, join_rows: dict[tuple, int]):
        self.view = view
        self.members: dict[tuple, list[Counter]] = {}   # group -> per aggregate, its values' multiset
        self.sizes: Counter = Counter()                   # group -> its join rows' multiplicity
        self.apply(join_rows)

    def rows(self) -> dict[tuple, int]:
        """The aggregate view: each group's row, as many times as groups give it (more than once
        only when a column grouped by is not shown: AggregateView.has_count)."""
        groups = set(self.sizes) | ({()} if self.view.grand_total else set())
        return dict(Counter(self._row(g) for g in groups))

    def apply(self, join_delta: dict[tuple, int]) -> dict[tuple, int]:
        """Applies a delta of the join (row -> signed multiplicity); the aggregate view's delta."""
        touched = {}
        for row, count in join_delta.items():
            group = tuple(row[i] for i in self.view.groups)
            if group not in touched:
                touched[group] = self._row(group) if self._shown(group) else None
            self.sizes[group] += count
            values = self.members.setdefault(group, [Counter() for _ in self.view.aggregates])
            for counter, aggregate in zip(values, self.view.aggregates):
                value = aggregate.argument(row) if aggregate.argument else 0
                counter[value] += count
                if not counter[value]:
                    del counter[value]
        out: Counter = Counter()
        for group, before in touched.items():
            if self.sizes[group] == 0:
                del self.sizes[group], self.members[group]
            after = self._row(group) if self._shown(group) else None
            if before != after:
                if before is not None:
                    out[before] -= 1
                if after is not None:
                    out[after] += 1
        return {r: c for r, c in out.items() if c}

    def _shown(self, group: tuple) -> bool:
        return group in self.sizes or self.view.grand_total

    def _row(self, group: tuple) -> tuple:
        values = self.members.get(group) or [Counter() for _ in self.view.aggregates]
        return self.view.row(group, tuple(_aggregate(a.function, v, a.argument is None)
                                             for a, v in zip(self.view.aggregates, values)))


def _aggregate(function: str, values: Counter, counts_rows: bool):
    """`function` over a multiset of values (value -> multiplicity); NULLs skipped, as SQL does,
    except by COUNT(*) (`counts_rows`)."""
    present = {v: m for v, m in values.items() if m > 0 and (counts_rows or v is not None)}
    if function == "COUNT":
        return sum(present.values())
    if not present:
        return None
    if function == "MIN":
        return min(present)
    if function == "MAX":
        return max(present)
    total = sum(v * m for v, m in present.items())
    return total if function == "SUM" else total / sum(present.values())
