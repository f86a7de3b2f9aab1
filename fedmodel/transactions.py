"""Source transactions and the update notifications they produce (Sze-Ling section 3, docs/architecture.md 3).

A client submits a `TransactionRequest`; the source validates it against its current state,
commits it, bumps its data source version number (DSV) and the base relation version number
(BRV) of each relation it touched, and emits a `Notification` carrying full row images.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Row = tuple


@dataclass(frozen=True)
class Modification:
    old: Row
    new: Row


@dataclass(frozen=True)
class RelationChange:
    """What one transaction did to one relation, and the relation's BRV after it."""

    relation: str
    brv: int
    inserted: tuple[Row, ...] = ()
    deleted: tuple[Row, ...] = ()
    modified: tuple[Modification, ...] = ()

    @property
    def removed(self) -> tuple[Row, ...]:
        """Rows gone after the transaction: deletions and the old images of modifications."""
        return self.deleted + tuple(m.old for m in self.modified)

    @property
    def added(self) -> tuple[Row, ...]:
        """Rows present after the transaction: insertions and the new images of modifications."""
        return self.inserted + tuple(m.new for m in self.modified)


@dataclass(frozen=True)
class Notification:
    """An update notification: one committed source transaction (Sze-Ling section 3, item 2)."""

    source: str
    dsv: int
    txn_id: str
    changes: tuple[RelationChange, ...]
    commit_time: float = 0.0

    def change(self, relation: str) -> RelationChange | None:
        for c in self.changes:
            if c.relation.lower() == relation.lower():
                return c
        return None

    @property
    def relations(self) -> tuple[str, ...]:
        return tuple(c.relation for c in self.changes)


@dataclass(frozen=True)
class TransactionRequest:
    """A client's transaction: rows to insert, rows (or keys) to delete, modifications.

    `deletes` and the `old` side of `modifies` may name a row by its full image or by its key;
    the source looks the stored row up and fails the whole transaction if it is absent.
    """

    txn_id: str
    inserts: dict[str, list[Row]] = field(default_factory=dict)
    deletes: dict[str, list[Row]] = field(default_factory=dict)
    modifies: dict[str, list[Modification]] = field(default_factory=dict)

    @property
    def relations(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.inserts, *self.deletes, *self.modifies]))

    def to_dict(self) -> dict:
        return {
            "txn_id": self.txn_id,
            "inserts": {r: [list(x) for x in rows] for r, rows in self.inserts.items()},
            "deletes": {r: [list(x) for x in rows] for r, rows in self.deletes.items()},
            "modifies": {r: [{"old": list(m.old), "new": list(m.new)} for m in ms]
                         for r, ms in self.modifies.items()},
        }

    @staticmethod
    def from_dict(doc: dict) -> "TransactionRequest":
        return TransactionRequest(
            str(doc["txn_id"]),
            {r: [tuple(x) for x in rows] for r, rows in (doc.get("inserts") or {}).items()},
            {r: [tuple(x) for x in rows] for r, rows in (doc.get("deletes") or {}).items()},
            {r: [Modification(tuple(m["old"]), tuple(m["new"])) for m in ms]
             for r, ms in (doc.get("modifies") or {}).items()},
        )


def notification_to_dict(n: Notification) -> dict:
    return {
        "source": n.source, "dsv": n.dsv, "txn_id": n.txn_id, "commit_time": n.commit_time,
        "changes": [{"relation": c.relation, "brv": c.brv,
                     "inserted": [list(r) for r in c.inserted],
                     "deleted": [list(r) for r in c.deleted],
                     "modified": [{"old": list(m.old), "new": list(m.new)} for m in c.modified]}
                    for c in n.changes],
    }


def notification_from_dict(doc: dict) -> Notification:
    return Notification(
        doc["source"], int(doc["dsv"]), str(doc["txn_id"]),
        tuple(RelationChange(c["relation"], int(c["brv"]),
                             tuple(tuple(r) for r in c.get("inserted", [])),
                             tuple(tuple(r) for r in c.get("deleted", [])),
                             tuple(Modification(tuple(m["old"]), tuple(m["new"]))
                                   for m in c.get("modified", [])))
              for c in doc["changes"]),
        float(doc.get("commit_time", 0.0)),
    )
