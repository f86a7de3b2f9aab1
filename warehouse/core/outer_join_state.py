"""An outer-join view (fedmodel.outer_join_view) kept from the deltas of the terms the algorithms
maintain: Larson & Zhou's secondary delta (ICDE 2007, section 4), from state the warehouse holds.

Every algorithm maintains the join, the NULL-padded rows of the view's terms, and applies it state
by state (StateApplied). A change of relation R changes the terms holding R: that is the join's
delta, the primary delta. The secondary delta is in the terms that lack R: a row of such a term
is shown while no row of a larger term holds its base rows (it is not subsumed), so it appears
when the last row holding it goes (an r row whose last partner in s is deleted returns padded
with NULLs) and disappears when the first comes (a padded row that gains a partner). Larson and
Zhou compute it by querying the view or the base tables; here it follows from one count per
row of a term, `extended`: how many rows of larger terms hold its base rows, which the join's
deltas keep exactly (each row of term T counts once for its projection on every smaller term).
The count is a function of the join's rows, so it needs no durability of its own: a restarted
warehouse rebuilds it from the join it restores (the view's version numbers are the join's), and
the outer-join view goes through exactly the join's states, with the consistency the algorithm
keeps for the join.
"""

from __future__ import annotations

from collections import Counter

from fedlab.fedmodel.outer_join_view import OuterJoinView


class OuterJoinState:
    def __init__(self, view: OuterJoinView, join_rows: dict[tuple, int]):
        self.view = view
        self.members: dict[tuple, Counter] = {}   # a row's identity (its term, its base rows' keys) -> join rows
        self.extended: Counter = Counter()        # identity -> rows of larger terms that hold its base rows
        self.apply(join_rows)

    def rows(self) -> dict[tuple, int]:
        """The outer-join view: the rows no larger term's row subsumes, as the user's columns."""
        out: Counter = Counter()
        for identity in self.members:
            out.update(self._shown(identity))
        return {r: c for r, c in out.items() if c}

    def apply(self, join_delta: dict[tuple, int]) -> dict[tuple, int]:
        """Applies a delta of the join (row -> signed multiplicity); the outer-join view's delta."""
        terms = self.view.join.outer.terms
        before: dict[tuple, Counter] = {}
        for row, count in join_delta.items():
            term, keys = self.view.identity(row)
            keyed = dict(zip([r for r in self.view.join.relations if r in term], keys))
            smaller = [(t, tuple(keyed[r] for r in self.view.join.relations if r in t)) for t in terms if t < term]
            for identity in [(term, keys), *smaller]:
                if identity not in before:
                    before[identity] = self._shown(identity)
            rows = self.members.setdefault((term, keys), Counter())
            rows[row] += count
            if not rows[row]:
                del rows[row]
                if not rows:
                    del self.members[(term, keys)]
            for identity in smaller:
                self.extended[identity] += count
                if not self.extended[identity]:
                    del self.extended[identity]
        out: Counter = Counter()
        for identity, shown in before.items():
            out.update(self._shown(identity))
            out.subtract(shown)
        return {r: c for r, c in out.items() if c}

    def _shown(self, identity: tuple) -> Counter:
        """The user's rows of the join rows of `identity`: none while a larger term's row holds it,
        nor when its term holds a relation the view's rows are padded in (an anti-join's)."""
        if self.extended.get(identity) or identity not in self.members or identity[0] & self.view.join.outer.padded:
            return Counter()
        width = self.view.width
        out: Counter = Counter()
        for row, count in self.members[identity].items():
            out[row[:width]] += count
        return out
