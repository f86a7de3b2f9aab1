"""One incremental computation: a delta of one relation joined with the others at its initial versions.

Sze-Ling sections 4 and 5. The computation walks its query plan: for each relation it needs the
rows, at the initial version number alpha, that join its parent's rows (the *needed join
values*). It first looks in the view where partial self-maintenance allows it (4.2), compensating
the view's rows for missing updates (Lemmas 2-4); it asks the sources for the rest, one sub-query
per plan node, and compensates each answer for interfering updates (Lemmas 5-7) as soon as the
notifications it needs are in. Rows that compensation re-adds bring new join values, which are
fetched by follow-up sub-queries from the relations queried later. The computation is done when
every relation has rows for every join value it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from fedlab.fedmodel.subquery import Answer, Subquery, SubqueryRelation
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.notification_log import NotificationLog
from fedlab.warehouse.core.planner import PlannedRelation, QueryPlan
from fedlab.warehouse.core.sze_ling.compensation import compensate
from fedlab.warehouse.core.sze_ling.dependencies import lookup_subtree_ok
from fedlab.warehouse.core.view_state import MaterializedView

ALL = ()  # the one "join value" of a relation probed with no join (a whole component)


@dataclass
class Fetch:
    """A sub-query in flight: the plan relations it covers and the join values it probes with."""

    relations: tuple[PlannedRelation, ...]
    probe: frozenset

    def covers(self, relation: str) -> bool:
        return any(pr.relation == relation for pr in self.relations)


@dataclass
class Context:
    """What a computation reads from the warehouse around it."""

    view: ViewDef
    log: NotificationLog
    mview: MaterializedView
    refreshed: dict[str, int]
    compensate: bool
    self_maintenance: bool
    new_id: Callable[[], str]
    trace: Callable[[dict], None]
    as_of: bool = False   # ask the sources for the rows at the initial versions (fedmodel.as_of)


class Computation:
    def __init__(self, ctx: Context, qplan: QueryPlan, delta: list[tuple[tuple, int]],
                 alpha: dict[str, int], label: str, pinned: dict[str, tuple[tuple, ...]] | None = None):
        """`pinned` gives relations whose rows are known and never queried (Strobe's Q<U_p>, the
        change intervals of Salem's propagation queries); they are held by row, since one key may
        appear twice among them (a modification's old and new images)."""
        self.ctx = ctx
        self.plan = qplan
        self.delta = delta
        self.alpha = alpha
        self.label = label
        self.rows: dict[str, dict[tuple, tuple]] = {r: {} for r in qplan.relations}
        self.resolved: dict[str, set] = {r: set() for r in qplan.relations}
        self.combos: dict[str, dict[tuple, list[dict]]] = {r: {} for r in qplan.relations}
        self.outstanding: dict[str, Fetch] = {}
        self.waiting: list[Answer] = []
        self.pinned = dict(pinned or {})
        for relation, rows in self.pinned.items():
            self.rows[relation] = {row: row for row in rows}

    # ---- progress ----

    def advance(self) -> list[Subquery]:
        """Sub-queries for every relation whose parent is settled and whose join values are missing."""
        sent = []
        for pr in (pr for node in self.plan.nodes for pr in node.relations):
            if not self._parent_settled(pr) or self._in_flight(pr.relation):
                continue
            missing = self._needed(pr) - self.resolved[pr.relation]
            if missing and self._may_read_view(pr):
                missing -= self._read_view(pr, missing)
            if missing:
                sent.append(self._fetch(pr, missing))
        return sent

    @property
    def done(self) -> bool:
        return not self.outstanding and all(self._settled(r) for r in self.plan.relations)

    def on_answer(self, answer: Answer) -> bool:
        """Takes an answer to one of this computation's sub-queries; False if it must wait for
        notifications up to the answer's source state (compensation needs them)."""
        if answer.id not in self.outstanding:
            return True  # a duplicate, or the answer to a retried sub-query that came in first
        if self._needs_compensation(answer) and self.ctx.log.contiguous(answer.source) < answer.dsv:
            if all(a.id != answer.id for a in self.waiting):
                self.waiting.append(answer)
            return False
        fetch = self.outstanding.pop(answer.id)
        probes = {fetch.relations[0].relation: fetch.probe}
        for pr in fetch.relations:
            got = answer.rows_of(pr.relation)
            values = probes[pr.relation]
            rows = self._compensated(pr, got.rows, got.brv, values, source="source")
            self.rows[pr.relation].update((self._rel(pr).key_of(r), r) for r in rows)
            self.resolved[pr.relation] |= values
            for child in fetch.relations:
                if child.parent == pr.relation:
                    probes[child.relation] = frozenset(self._values(pr.relation, got.rows, child.parent_columns))
        return True

    def _needs_compensation(self, answer: Answer) -> bool:
        """Whether some relation of `answer` was read at another version than its initial one
        (Lemma 1): only then does its compensation need the notifications up to its state."""
        return self.ctx.compensate and any(ra.brv != self.alpha[ra.relation] for ra in answer.relations)

    def retry_waiting(self) -> bool:
        """Compensates answers that were waiting for notifications; True if any went through."""
        ready = [a for a in self.waiting if self.ctx.log.contiguous(a.source) >= a.dsv]
        self.waiting = [a for a in self.waiting if a not in ready]
        for a in ready:
            self.on_answer(a)
        return bool(ready)

    # ---- the needed join values ----

    def _needed(self, pr: PlannedRelation) -> set:
        if pr.relation in self.pinned:
            return set()
        if pr.parent is None:
            return {ALL}
        if pr.parent == self.plan.updated:
            parent_rows = [row for row, _ in self.delta]
        else:
            parent_rows = self.rows[pr.parent].values()
        return {v for v in self._values(pr.parent, parent_rows, pr.parent_columns) if None not in v}

    def _values(self, relation: str, rows, columns) -> list[tuple]:
        rel = self.ctx.view.relation(relation)
        pos = [rel.index(c) for c in columns]
        return [tuple(r[i] for i in pos) for r in rows]

    def _in_flight(self, relation: str) -> bool:
        return any(f.covers(relation) for f in self.outstanding.values())

    def _parent_settled(self, pr: PlannedRelation) -> bool:
        return all(r in (None, self.plan.updated) or self._settled(r) for r in (pr.parent, pr.waits_for))

    def _settled(self, relation: str) -> bool:
        pr = self.plan.slot(relation)
        return (self._parent_settled(pr) and not self._in_flight(relation)
                and self._needed(pr) <= self.resolved[relation])

    # ---- the sources ----

    def _fetch(self, pr: PlannedRelation, values: set) -> Subquery:
        covered = self.plan.node_below(pr.relation)
        probe = frozenset(values)
        sid = self.ctx.new_id()
        self.outstanding[sid] = Fetch(covered, probe)
        view = self.ctx.view
        relations = tuple(
            SubqueryRelation(c.relation, None if c is covered[0] else c.parent, c.columns,
                             c.parent_columns, view.selection_sql(c.relation))
            for c in covered)
        probe_rows = () if values == {ALL} else tuple(sorted(values, key=repr))
        as_of = tuple((c.relation, self.alpha[c.relation]) for c in covered) if self.ctx.as_of else ()
        return Subquery(sid, pr.source, relations, probe_rows, as_of)

    def _compensated(self, pr: PlannedRelation, rows, beta: int, values: frozenset, source: str) -> list[tuple]:
        if not self.ctx.compensate:
            return list(rows)
        rel = self._rel(pr)
        alpha = self.alpha[pr.relation]
        keep = self._keep(pr, values)
        if ALL in values:
            after = compensate(rows, rel, pr.relation, beta, alpha, self.ctx.log.change, keep)
        else:
            positions = tuple(rel.index(c) for c in pr.columns)
            after = compensate(rows, rel, pr.relation, beta, alpha, self.ctx.log.change, keep,
                               lambda lo, hi: self.ctx.log.versions_touching(pr.relation, positions, values, lo, hi))
        if beta != alpha:
            self.ctx.trace({"computation": self.label, "relation": pr.relation, "read_from": source,
                            "queried_version": beta, "initial_version": alpha,
                            "kind": "interfering" if beta > alpha else "missing",
                            "before": _listed(rows), "after": _listed(after)})
        return after

    def _keep(self, pr: PlannedRelation, values: frozenset) -> Callable[[tuple], bool]:
        rel = self._rel(pr)
        pos = [rel.index(c) for c in pr.columns]
        test = self.ctx.view.selection_test(pr.relation)
        if ALL in values:
            return test
        return lambda r: tuple(r[i] for i in pos) in values and test(r)

    def _rel(self, pr: PlannedRelation):
        return self.ctx.view.relation(pr.relation)

    # ---- the view (partial self-maintenance, section 4.2) ----

    def _may_read_view(self, pr: PlannedRelation) -> bool:
        if not self.ctx.self_maintenance or pr.parent is None:
            return False
        below = self.plan.descendants(pr.relation)
        # Missing updates below R_j could only be compensated through R_j's key; keep it simple
        # and read the view only when the relations R_j determines are up to date there. Reading
        # as of the initial versions, nothing is compensated: R_j must be up to date too.
        current = (*below, pr.relation) if self.ctx.as_of else below
        if any(self.ctx.refreshed[r] != self.alpha[r] for r in current):
            return False
        return lookup_subtree_ok(self.ctx.view, self.plan, pr.relation)

    def _read_view(self, pr: PlannedRelation, values: set) -> set:
        """Resolves the join values found in the view; returns them (Example 6, Table 2)."""
        view, rj = self.ctx.view, pr.relation
        rel = self._rel(pr)
        subtree = {rj, *self.plan.descendants(rj)}
        join_pos = [view.output_position(rj, c) for c in pr.columns]
        key_pos = [view.output_position(rj, c) for c in rel.key]
        # Every view column a subtree relation's column shows, also through a join equality: a key
        # action (Example 7) finds R_j's key among them whichever relation's column displays it.
        frag_cols = [i for i, o in enumerate(view.outputs)
                     if any(ref.relation in subtree for ref in view.equivalents(o.ref))]
        found: dict[tuple, dict[tuple, dict]] = {}
        for value in sorted(values, key=repr):
            view_rows = self.ctx.mview.rows_where(join_pos, value)
            if view_rows:
                found[value] = {tuple(r[i] for i in key_pos): {i: r[i] for i in frag_cols} for r in view_rows}
        if not found:
            return set()
        beta = self.ctx.refreshed[rj]
        before = {v: dict(c) for v, c in found.items()}
        self._missing_updates(pr, found, beta)
        if beta != self.alpha[rj]:
            self.ctx.trace({"computation": self.label, "relation": rj, "read_from": "view",
                            "queried_version": beta, "initial_version": self.alpha[rj], "kind": "missing",
                            "before": _combo_rows(view, rel, subtree, before),
                            "after": _combo_rows(view, rel, subtree, found),
                            "added_rows": _listed(self.rows[rj].values())})
        for value, combos in found.items():
            self.combos[rj][value] = list(combos.values())
        self.resolved[rj] |= set(found)
        return set(found)

    def _missing_updates(self, pr: PlannedRelation, found: dict, beta: int) -> None:
        """Lemmas 2-4 on rows read from the view, oldest update first.

        A missing deletion drops R_j's combination (found by R_j's key, which is in the view); a
        missing modification of columns outside joins and selections changes its values in place
        (Lemma 4); a missing insertion joining a found value is added as a full row, whose
        partners below are then fetched from the sources (Lemma 3).
        """
        view, rj, rel = self.ctx.view, pr.relation, self._rel(pr)
        in_place = view.join_columns(rj) | view.selection_columns(rj)
        test = view.selection_test(rj)
        out_of = {i: rel.index(o.ref.column) for i, o in enumerate(view.outputs) if o.ref.relation == rj}
        for version in range(beta + 1, self.alpha[rj] + 1):
            change = self.ctx.log.change(rj, version)
            plain = []
            for m in change.modified:
                combos = found.get(self._values(rj, [m.old], pr.columns)[0], {})
                key = rel.key_of(m.old)
                same_shape = rel.key_of(m.new) == key and all(
                    m.old[rel.index(c)] == m.new[rel.index(c)] for c in in_place)
                if same_shape and key in combos:
                    combos[key] = {**combos[key], **{i: m.new[p] for i, p in out_of.items()}}
                else:
                    plain.append(m)
            for row in change.deleted + tuple(m.old for m in plain):
                value = self._values(rj, [row], pr.columns)[0]
                if value in found:
                    found[value].pop(rel.key_of(row), None)
                    if self.rows[rj].get(rel.key_of(row)) == row:
                        del self.rows[rj][rel.key_of(row)]
            for row in change.inserted + tuple(m.new for m in plain):
                value = self._values(rj, [row], pr.columns)[0]
                if value in found and test(row):
                    self.rows[rj][rel.key_of(row)] = row


def _listed(rows) -> list[list]:
    return sorted((list(r) for r in rows), key=repr)


def _combo_rows(view: ViewDef, rel, subtree: set, found: dict) -> list:
    """Rows read from the view, shown as R_j's key and the subtree's own view columns (Table 2)."""
    return sorted(([{c: v for c, v in zip(rel.key, key)},
                    {view.outputs[i].name: v for i, v in sorted(frag.items())
                     if view.outputs[i].ref.relation in subtree}]
                   for combos in found.values() for key, frag in combos.items()), key=repr)
