"""The Condense operator (Zhou & Larson 2007, section 4, Table 1) on base-relation deltas.

A relation's updates over several transactions, in version order, are a split delta stream: a
modification is a delete of its old image followed by an insert of its new one. Per key, only the
first and the last delta row matter (Table 1):

    first \\ last | Insert            | Delete
    Insert       | output the last   | output nothing
    Delete       | an update (full); | output a delete
                 | both rows (partial)|

This is the *partial* condense of section 4.2, pushed below the joins: when the first row is a
delete and the last an insert, both are kept (as one Modification, which the maintenance task
splits again if a join or selection column changed), because the deleted and the inserted row
may join different rows.

Delete..Delete outputs a delete of the *first* row's image, the pre-image. Table 1's "output the
last delta row" is right for the view delta, applied by the view's unique key, but not below a
join: after a modification the last delete carries intermediate values, and a join column that
changed on the way would probe the wrong partners (docs/paper-notes.md's caution).

Relations have keys, so a key names at most one row at every version: an insert means the key
was absent just before, a delete that it was present. Two users: the lazy warehouse condenses a
relation's updates over the transactions a job combines (warehouse.core.sze_ling.deferral), and a
PostgreSQL source the row changes its triggers captured over one transaction's statements
(source_node.postgres_store; Vinh 2020's per-key condensing of change tables).

>>> from fedlab.fedmodel.transactions import Modification, RelationChange
>>> key = lambda row: row[:1]
>>> history = [RelationChange("R", 2, modified=(Modification((1, "a"), (1, "b")),)),
...            RelationChange("R", 3, deleted=((1, "b"),), inserted=((2, "x"),)),
...            RelationChange("R", 4, deleted=((2, "x"),))]
>>> condense(history, key)
RelationChange(relation='R', brv=4, inserted=(), deleted=((1, 'a'),), modified=())
"""

from __future__ import annotations

from typing import Callable, Sequence

from fedlab.fedmodel.transactions import Modification, RelationChange


def condense(changes: Sequence[RelationChange], key_of: Callable[[tuple], tuple]) -> RelationChange:
    """One relation's `changes`, oldest first, as one change from the version before the first to
    the version of the last: per key, the row it had before (if any) and the row it has after."""
    before: dict[tuple, tuple | None] = {}
    after: dict[tuple, tuple | None] = {}
    for change in changes:
        for row in change.removed:        # deletes first: a modification may keep its key
            before.setdefault(key_of(row), row)
            after[key_of(row)] = None
        for row in change.added:
            before.setdefault(key_of(row), None)
            after[key_of(row)] = row
    inserted, deleted, modified = [], [], []
    for key, old in before.items():
        new = after[key]
        if old is None and new is not None:
            inserted.append(new)
        elif old is not None and new is None:
            deleted.append(old)
        elif old is not None and old != new:
            modified.append(Modification(old, new))
    return RelationChange(changes[-1].relation, changes[-1].brv, tuple(inserted), tuple(deleted), tuple(modified))


def delta_rows(change: RelationChange) -> int:
    """The split delta stream's length: a row per insert or delete, two per modification."""
    return len(change.inserted) + len(change.deleted) + 2 * len(change.modified)
