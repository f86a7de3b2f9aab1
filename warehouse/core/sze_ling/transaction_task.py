"""The maintenance task of one source transaction: its relations' updates, each sent for
incremental computation one after another (Sze-Ling section 3, item 3), and its view actions.

Per relation the update is split the way sections 4.2-4.3 allow:
- irrelevant rows (referential integrity, or failing the view's selection) are dropped;
- deletions, and modifications of columns outside joins and selections, are applied by key
  when the relation's key - or the key of a relation R_j reached over a key path that determines
  it - is in the view (`DELETE FROM V WHERE ...`, `UPDATE V SET ... WHERE ...`, Example 7);
- a modification of a join or selection column is a deletion plus an insertion (4.3);
- everything else is computed incrementally and applied as signed view rows.
Key actions run before signed rows, both against the view as it stands when the task is applied:
by Theorem 2 that is exactly the state just before this transaction.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from fedlab.fedmodel.transactions import Notification
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.evaluation import fold, plan_fragment, view_delta
from fedlab.warehouse.core.planner import plan
from fedlab.warehouse.core.sze_ling.computation import Computation, Context
from fedlab.warehouse.core.sze_ling.dependencies import key_path, ri_irrelevant
from fedlab.warehouse.core.view_state import MaterializedView


@dataclass
class KeyAction:
    """Delete (or update) the view rows that hold R_j rows reached from the updated rows."""

    computation: Computation
    target: str                      # R_j: the relation whose key is in the view
    assign: dict = field(default_factory=dict)   # for updates: updated row (old image) -> new image

    def delta(self, view: ViewDef, mview: MaterializedView) -> dict:
        rel = view.relation(self.target)
        key_pos = [view.output_position(self.target, c) for c in rel.key]
        comp = self.computation
        # R_j's key travels at its view positions: rows read from the view (partial
        # self-maintenance) come as fragments of view rows, which hold it there too.
        folded = fold(view, comp.plan, comp.delta, comp.rows, comp.combos,
                      lambda r, row: dict(zip(key_pos, rel.key_of(row))) if r == self.target else {})
        total: Counter = Counter()
        for row, _sign, frags in folded:
            keys = [tuple(f[p] for p in key_pos) for f in frags]
            if self.target == comp.plan.updated:
                keys = [rel.key_of(row)]
            if row in self.assign:
                changes = self.assign[row]
                step = mview.update_where(key_pos, keys, changes)
            else:
                step = mview.delete_where(key_pos, keys)
            total.update(step)
        return dict(total)


@dataclass
class SubTask:
    relation: str
    alpha: dict
    computations: list = field(default_factory=list)   # Computation for signed rows
    key_actions: list = field(default_factory=list)


class TransactionTask:
    def __init__(self, seq: int, notification: Notification, ctx: Context, versions, access: str,
                 key_shortcuts: bool, order: tuple[str, ...]):
        self.seq = seq
        self.notification = notification
        self.subtasks: list[SubTask] = []
        view = ctx.view
        for relation in order:
            change = notification.change(relation)
            alpha = versions.start(relation, change.brv)
            sub = SubTask(relation, alpha)
            signed, by_key, assign = _split(view, notification, relation, order, key_shortcuts)
            label = f"{notification.txn_id}/{relation}"
            if by_key:
                kplan = key_path(view, relation, access)
                comp = Computation(ctx, kplan, [(r, -1) for r in by_key], alpha, label + "/key")
                target = kplan.relations[-1] if kplan.relations else relation
                sub.key_actions.append(KeyAction(comp, target, assign))
            if signed:
                sub.computations.append(Computation(ctx, plan(view, relation, access), signed, alpha, label))
            self.subtasks.append(sub)
        self.computations: list[Computation] = [
            c for s in self.subtasks for c in (*[k.computation for k in s.key_actions], *s.computations)]

    @property
    def done(self) -> bool:
        return all(c.done for c in self.computations)

    def apply(self, view: ViewDef, mview: MaterializedView, refreshed: dict) -> dict:
        """Applies the task's actions in order; returns the transaction's net view delta."""
        total: Counter = Counter()
        for sub in self.subtasks:
            for action in sub.key_actions:
                step = action.delta(view, mview)
                mview.apply(step)
                total.update(step)
            for comp in sub.computations:
                step = view_delta(view, fold(view, comp.plan, comp.delta, comp.rows, comp.combos,
                                             plan_fragment(view, comp.plan)))
                mview.apply(step)
                total.update(step)
            refreshed.update(sub.alpha)
        return {r: c for r, c in total.items() if c}


def _split(view: ViewDef, n: Notification, relation: str, order, key_shortcuts: bool):
    """Sorts one relation's changes into signed rows, rows to delete by key, and key updates."""
    rel = view.relation(relation)
    change = n.change(relation)
    test = view.selection_test(relation)
    shape = view.join_columns(relation) | view.selection_columns(relation)
    shown = view.visible_columns(relation)
    deletes, inserts, updates = list(change.deleted), list(change.inserted), []
    for m in change.modified:
        changed = {c for c, old, new in zip(rel.columns, m.old, m.new) if old != new}
        if rel.key_of(m.old) != rel.key_of(m.new) or changed & shape:
            deletes.append(m.old)
            inserts.append(m.new)
        elif changed & shown and test(m.old):
            updates.append(m)
    signed = []
    for row, sign in [(r, -1) for r in deletes] + [(r, +1) for r in inserts]:
        if test(row) and not ri_irrelevant(view, n, relation, row, sign > 0, order):
            signed.append((row, sign))
    by_key, assign = [], {}
    if key_shortcuts and key_path(view, relation, "join-graph") is not None:
        by_key = [row for row, sign in signed if sign < 0]
        signed = [(row, sign) for row, sign in signed if sign > 0]
        for m in updates:
            by_key.append(m.old)
            assign[m.old] = {pos: new for c, old, new in zip(rel.columns, m.old, m.new) if old != new
                             for pos in view.output_positions(relation, c)}
    else:
        signed += [(m.old, -1) for m in updates] + [(m.new, +1) for m in updates]
    return signed, by_key, assign
