"""ComputeDelta (Salem et al. 2000, Figure 4): a propagation query's change between two states,
computed by forward queries run later than their interval and recursively compensated.

A propagation query Q has, at each position of the view's FROM list, either the base relation
R^i or its change interval R^i_{x,y} (the changes of R^i at its source's DSVs in (x, y], half
open as in section 2). ComputeDelta(Q, tau_old, tau_new) runs, for each base position i with
tau_old[i] < tau_new[i], the query Q' that puts R^i_{old[i],new[i]} there; the base relations of Q'
are read at whatever state their sources are in when asked (the *execution* state), so Q' is
recursively compensated with ComputeDelta(-Q', tau_intended, tau_exec), where tau_intended sees
positions left of i at tau_old and right of i at tau_new (Equation 2).

Two departures from the figure, both forced by the federation and both checked against
Definition 4.2 for every a < b up to the high-water mark on random n-way joins (by brute force in
tests/test_salem_algebra.py, and through the simulator against the checker's oracle):
- Times are vectors of DSVs throughout, one per position: a query's base relations live at
  several sources, each read at its own state, so tau_exec is a vector, not one execution time.
  The recursion is the same multilinear telescoping, position by position, and it needs only
  that every execution state is at or after the intended one and after the propagation target;
  a source answers at its current state, which is after every state the warehouse has heard of.
- The queries of one call go out together rather than one after another (the figure's loop does
  not use one query's result in the next); a query's compensation starts when its answers are in.
A base relation the query never had to ask (its probe was already empty) counts as read at its
intended state: the query's result is empty either way.

Each result row carries a count, the product of its change rows' counts and the query's sign,
and a timestamp, the minimum of its change rows' keys on the time line (section 3.3;
warehouse.core.salem.timeline): base rows have none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from typing import Callable

from fedlab.fedmodel.subquery import Answer, Subquery
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.evaluation import derivations
from fedlab.warehouse.core.planner import pin, plan
from fedlab.warehouse.core.sze_ling.computation import Computation, Context

Interval = tuple[int, int]           # (x, y]: a relation's changes at its source's DSVs x+1..y
Query = tuple                        # per view position: None (the base relation) or an Interval
Entry = tuple[int, tuple]            # (count, timestamp key) of one change of one row
Changes = Callable[[str, Interval], dict[tuple, list[Entry]]]   # relation, interval -> row -> entries
TimedRow = tuple[tuple, int, tuple]  # (view row, count, timestamp key)


@dataclass(frozen=True)
class Call:
    """ComputeDelta(sign * query, old, new): the change of `query` from the states `old` to the
    states `new` (per view position, a DSV of its relation's source)."""

    query: Query
    sign: int
    old: dict[int, int]
    new: dict[int, int]


@dataclass
class Execution:
    """One query Q' of a ComputeDelta call: its change rows, its base relations being fetched."""

    query: Query
    sign: int
    intended: dict[int, int]          # base position -> the state it should be seen at
    entries: dict[int, dict[tuple, list[Entry]]]      # change position -> row -> its changes
    computation: Computation | None = None
    read_at: dict[int, int] = field(default_factory=dict)   # base position -> the DSV it was read at

    @property
    def done(self) -> bool:
        return self.computation is None or self.computation.done


class ComputeDelta:
    """The calls of one propagation step, and the queries they run, as a set of tasks in flight.

    `start(call)` begins a call; `take(answer)` feeds an answer; `ready(received_through)`
    runs the compensations whose change intervals have been received; `rows` holds the timed
    view delta rows produced so far. The step is `done` when nothing is in flight or waiting.
    """

    def __init__(self, view: ViewDef, changes: Changes, new_id: Callable[[], str]):
        self.view = view
        self.positions = view.relations
        self.changes = changes
        self._new_id = new_id
        self.executions: dict[str, Execution] = {}          # sub-query id -> its execution
        self.running: list[Execution] = []
        self.waiting: list[Call] = []      # compensations waiting for their change intervals
        self.rows: list[TimedRow] = []
        self.queries = 0

    @property
    def done(self) -> bool:
        return not self.running and not self.waiting

    def source_of(self, position: int) -> str:
        return self.view.relation(self.positions[position]).source

    def start(self, call: Call) -> list[Subquery]:
        """The call (Figure 4), its queries sent at once."""
        sent: list[Subquery] = []
        for i, slot in enumerate(call.query):
            if slot is not None or call.old[i] >= call.new[i]:
                continue
            q = call.query[:i] + ((call.old[i], call.new[i]),) + call.query[i + 1:]
            intended = {j: (call.old[j] if j < i else call.new[j]) for j, s in enumerate(q) if s is None}
            sent += self._execute(q, call.sign, intended)
        return sent

    def ready(self, received_through: Callable[[str], int]) -> list[Subquery]:
        """Starts the waiting calls whose change intervals have all been received."""
        sent: list[Subquery] = []
        still = []
        for call in self.waiting:
            if all(received_through(self.source_of(i)) >= d for i, d in call.new.items()):
                sent += self.start(call)
            else:
                still.append(call)
        self.waiting = still
        return sent

    def expects(self, answer: Answer) -> bool:
        return answer.id in self.executions

    def take(self, answer: Answer) -> list[Subquery]:
        execution = self.executions.pop(answer.id)
        for relation in answer.relations:
            execution.read_at[self.positions.index(relation.relation)] = answer.dsv
        execution.computation.on_answer(answer)
        sent = self._track(execution, execution.computation.advance())
        if execution.done:
            self._finish(execution)
        return sent

    # ---- one query ----

    def _execute(self, q: Query, sign: int, intended: dict[int, int]) -> list[Subquery]:
        self.queries += 1
        entries = {i: self.changes(self.positions[i], slot) for i, slot in enumerate(q) if slot is not None}
        for i, rows in entries.items():
            test = self.view.selection_test(self.positions[i])
            entries[i] = {row: e for row, e in rows.items() if test(row)}
        execution = Execution(q, sign, intended, entries)
        if all(entries.values()) and intended:
            first, *others = sorted(entries)
            qplan = pin(plan(self.view, self.positions[first]), [self.positions[i] for i in others])
            ctx = Context(self.view, None, None, {}, False, False, self._new_id, lambda _entry: None)
            execution.computation = Computation(ctx, qplan, [(row, 1) for row in entries[first]], {},
                                                "salem", {self.positions[i]: tuple(entries[i]) for i in others})
            sent = self._track(execution, execution.computation.advance())
            if not execution.done:
                return sent
        self._finish(execution)
        return []

    def _track(self, execution: Execution, sent: list[Subquery]) -> list[Subquery]:
        for sq in sent:
            self.executions[sq.id] = execution
        if sent and execution not in self.running:
            self.running.append(execution)
        return sent

    def _finish(self, execution: Execution) -> None:
        if execution in self.running:
            self.running.remove(execution)
        if not all(execution.entries.values()):
            return   # an empty change interval: Q' is empty at every state, nothing to compensate
        self.rows += self._result(execution)
        if execution.intended:
            read = {j: execution.read_at.get(j, d) for j, d in execution.intended.items()}
            # ComputeDelta(-Q', tau_intended, tau_exec): its intervals must be received first.
            self.waiting.append(Call(execution.query, -execution.sign, execution.intended, read))

    def _result(self, execution: Execution) -> list[TimedRow]:
        # Rows by row, not by key: a change interval may hold a key twice (a modification's images).
        rows = {name: {row: row for row in (execution.entries[i] if execution.query[i] is not None
                                            else execution.computation.rows[name].values())}
                for i, name in enumerate(self.positions)}
        first = self.positions[0]
        out: list[TimedRow] = []
        for derivation, view_row in derivations(self.view, plan(self.view, first), [(r, 1) for r in rows[first]], rows):
            changed = [execution.entries[i][derivation[i]] for i in execution.entries]
            for combination in product(*changed):
                count = execution.sign
                for c, _ in combination:
                    count *= c
                out.append((view_row, count, min(ts for _, ts in combination)))
        return out

