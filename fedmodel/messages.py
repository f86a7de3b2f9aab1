"""Conversions between the model's dataclasses and the wire messages of proto/federation.proto.

One place that both sides use: the source's servicer and the warehouse's client encode and decode
with the same code. Every row payload is one payload of fedmodel.codec with the catalog's
column names; decoding checks the columns against the catalog and every value against
its column type (catalog.validate_row), so a garbled payload, a payload with other columns or a value
of the wrong type raises ModelError, which a servicer turns into INVALID_ARGUMENT.

`to_pb(obj, catalog)` takes a Notification, TransactionRequest, Subquery or Answer;
`from_pb(msg, catalog)` takes a pb.Notification, pb.CommitRequest, pb.Subquery or pb.Answer.

>>> from fedlab.fedmodel.catalog import Catalog
>>> cat = Catalog.from_dict({"sources": {"ds1": {"R1": {"columns": ["A", "B"], "types": ["BIGINT", "DATE"], "key": ["A"]}}}})
>>> req = TransactionRequest("t1", inserts={"R1": [(1, "2024-02-29")]}, deletes={"R1": [(7,)]})
>>> from_pb(to_pb(req, cat), cat) == req
True
"""

from __future__ import annotations

from functools import singledispatch
from typing import Sequence

from fedlab.fedmodel.catalog import Catalog, Relation, validate_row, validate_rows
from fedlab.fedmodel.codec import decode_rows, encode_rows
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.subquery import Answer, RelationAnswer, Subquery, SubqueryRelation
from fedlab.fedmodel.transactions import Modification, Notification, RelationChange, TransactionRequest
from fedlab.fedmodel.wire import pb

# The subscriber a source starts with, and that a ResendRequest naming none means: the warehouse
# of a single-warehouse federation (source_node.subscriptions).
DEFAULT_SUBSCRIBER = "warehouse"
# The gRPC metadata key a warehouse's Query stream names its subscriber by (none: the default one),
# so that the source's message log says whose sub-queries and answers it logged.
SUBSCRIBER_METADATA = "fedlab-subscriber"
# The one a reader of a warehouse that keeps several views names the view by (ReadView, Refresh,
# Status: warehouse.view_group); a warehouse of one view needs none.
VIEW_METADATA = "fedlab-view"


@singledispatch
def to_pb(obj, catalog: Catalog):
    """The wire message for a model object (see the module docstring for the kinds)."""
    raise TypeError(f"no wire message for {type(obj).__name__}")


def from_pb(msg, catalog: Catalog):
    """The model object for a wire message; raises ModelError on any bad payload."""
    try:
        decode = _FROM_PB[type(msg)]
    except KeyError:
        raise TypeError(f"no model object for {type(msg).__name__}") from None
    return decode(msg, catalog)


# ---- transactions ----

@to_pb.register
def _transaction_to_pb(req: TransactionRequest, catalog: Catalog) -> pb.CommitRequest:
    where = f"transaction {req.txn_id}"
    ops = []
    for name in req.relations:
        rel = catalog.relation(name)
        mods = req.modifies.get(name, [])
        ops.append(pb.RelationOps(
            relation=rel.name,
            inserts=_encode(rel, req.inserts.get(name, []), where),
            deletes=_encode_rows_or_keys(rel, req.deletes.get(name, []), where),
            modify_old=_encode_rows_or_keys(rel, [m.old for m in mods], where),
            modify_new=_encode(rel, [m.new for m in mods], where)))
    return pb.CommitRequest(txn_id=req.txn_id, ops=ops)


def _transaction_from_pb(msg: pb.CommitRequest, catalog: Catalog) -> TransactionRequest:
    where = f"transaction {msg.txn_id}"
    inserts: dict = {}
    deletes: dict = {}
    modifies: dict = {}
    for op in msg.ops:
        rel = _relation(catalog, op.relation, where)
        new_rows = _decode(rel, op.modify_new, f"{where}: modify_new of {rel.name}")
        old_rows = _decode(rel, op.modify_old, f"{where}: modify_old of {rel.name}", keys_allowed=True)
        if len(old_rows) != len(new_rows):
            raise ModelError(f"{where}: {rel.name} has {len(old_rows)} old and {len(new_rows)} new "
                             "images of modifications; they pair by position")
        inserted = _decode(rel, op.inserts, f"{where}: inserts of {rel.name}")
        deleted = _decode(rel, op.deletes, f"{where}: deletes of {rel.name}", keys_allowed=True)
        # A relation may appear in several RelationOps; its rows add up.
        if inserted:
            inserts.setdefault(rel.name, []).extend(inserted)
        if deleted:
            deletes.setdefault(rel.name, []).extend(deleted)
        if old_rows:
            modifies.setdefault(rel.name, []).extend(Modification(o, n) for o, n in zip(old_rows, new_rows))
    return TransactionRequest(msg.txn_id, inserts, deletes, modifies)


# ---- notifications ----

@to_pb.register
def _notification_to_pb(note: Notification, catalog: Catalog) -> pb.Notification:
    where = f"notification {note.source}/{note.dsv}"
    changes = []
    for c in note.changes:
        rel = catalog.relation(c.relation)
        changes.append(pb.RelationChange(
            relation=rel.name, brv=c.brv,
            inserted=_encode(rel, c.inserted, where), deleted=_encode(rel, c.deleted, where),
            modified_old=_encode(rel, [m.old for m in c.modified], where),
            modified_new=_encode(rel, [m.new for m in c.modified], where)))
    return pb.Notification(source=note.source, dsv=note.dsv, txn_id=note.txn_id,
                           commit_time=note.commit_time, changes=changes)


def _notification_from_pb(msg: pb.Notification, catalog: Catalog) -> Notification:
    where = f"notification {msg.source}/{msg.dsv}"
    changes = []
    for c in msg.changes:
        rel = _relation(catalog, c.relation, where, source=msg.source)
        old = _decode(rel, c.modified_old, f"{where}: modified_old of {rel.name}")
        new = _decode(rel, c.modified_new, f"{where}: modified_new of {rel.name}")
        if len(old) != len(new):
            raise ModelError(f"{where}: {rel.name} has {len(old)} old and {len(new)} new images of modifications")
        changes.append(RelationChange(
            rel.name, c.brv,
            tuple(_decode(rel, c.inserted, f"{where}: inserted of {rel.name}")),
            tuple(_decode(rel, c.deleted, f"{where}: deleted of {rel.name}")),
            tuple(Modification(o, n) for o, n in zip(old, new))))
    return Notification(msg.source, msg.dsv, msg.txn_id, tuple(changes), msg.commit_time)


# ---- sub-queries and answers ----

@to_pb.register
def _subquery_to_pb(sq: Subquery, catalog: Catalog) -> pb.Subquery:
    # The root's parent columns are the probe's columns, which travel once, as probe_columns.
    relations = [pb.SubqueryRelation(relation=r.relation, parent=r.parent or "", columns=r.columns,
                                     parent_columns=r.parent_columns if r.parent else (),
                                     selection_sql=r.selection_sql)
                 for r in sq.relations]
    probe = b""
    if sq.probe_columns:
        probe_rel = _probe_relation(catalog, sq.relations[0], sq.probe_columns, f"sub-query {sq.id}")
        probe = encode_rows(probe_rel.columns, probe_rel.types,
                            [validate_row(probe_rel, p, f"sub-query {sq.id}") for p in sq.probe])
    return pb.Subquery(id=sq.id, relations=relations, probe_columns=sq.probe_columns, probe=probe,
                       as_of=dict(sq.as_of))


def _subquery_from_pb(msg: pb.Subquery, catalog: Catalog) -> Subquery:
    where = f"sub-query {msg.id}"
    if not msg.relations:
        raise ModelError(f"{where}: names no relation")
    if msg.relations[0].parent:
        raise ModelError(f"{where}: its first relation is the root and has no parent, got {msg.relations[0].parent!r}")
    relations = tuple(
        SubqueryRelation(r.relation, r.parent or None, tuple(r.columns),
                         tuple(msg.probe_columns) if i == 0 else tuple(r.parent_columns), r.selection_sql)
        for i, r in enumerate(msg.relations))
    root = _relation(catalog, relations[0].relation, where)
    probe: tuple = ()
    if msg.probe_columns:
        probe_rel = _probe_relation(catalog, relations[0], tuple(msg.probe_columns), where)
        probe = tuple(dict.fromkeys(_decode(probe_rel, msg.probe, f"{where}: probe")))
    elif msg.probe:
        raise ModelError(f"{where}: a probe payload needs probe_columns")
    named = {r.relation for r in relations}
    for relation, brv in msg.as_of.items():
        if relation not in named or brv < 1:
            raise ModelError(f"{where}: as_of names {relation!r} at version {brv}; "
                             "it must name a relation of the sub-query at a version of at least 1")
    return Subquery(msg.id, root.source, relations, probe, tuple(sorted(msg.as_of.items())))


@to_pb.register
def _answer_to_pb(answer: Answer, catalog: Catalog) -> pb.Answer:
    where = f"answer {answer.id}"
    return pb.Answer(id=answer.id, source=answer.source, dsv=answer.dsv, read_time=answer.read_time, relations=[
        pb.RelationAnswer(relation=r.relation, brv=r.brv,
                          rows=_encode(catalog.relation(r.relation), r.rows, where))
        for r in answer.relations])


def _answer_from_pb(msg: pb.Answer, catalog: Catalog) -> Answer:
    where = f"answer {msg.id} from {msg.source}"
    relations = []
    for r in msg.relations:
        rel = _relation(catalog, r.relation, where, source=msg.source)
        relations.append(RelationAnswer(rel.name, r.brv, tuple(_decode(rel, r.rows, f"{where}: rows of {rel.name}"))))
    return Answer(msg.id, msg.source, msg.dsv, tuple(relations), msg.read_time)


_FROM_PB = {
    pb.CommitRequest: _transaction_from_pb,
    pb.Notification: _notification_from_pb,
    pb.Subquery: _subquery_from_pb,
    pb.Answer: _answer_from_pb,
}


# ---- row payloads ----

def _encode(rel: Relation, rows: Sequence[Sequence], where: str) -> bytes:
    """Full rows of `rel`, checked against its types; no rows travel as an empty field."""
    if not rows:
        return b""
    return encode_rows(rel.columns, rel.types, validate_rows(rel, rows, where))


def _encode_rows_or_keys(rel: Relation, rows: Sequence[Sequence], where: str) -> bytes:
    """Rows naming stored rows (deletions, old images): all full rows, or all keys (one schema per payload)."""
    if not rows or all(len(r) == len(rel.columns) for r in rows):
        return _encode(rel, rows, where)
    if all(len(r) == len(rel.key) for r in rows):
        return _encode(_key_relation(rel), rows, where)
    raise ModelError(f"{where}: rows naming rows of {rel.name} must be all full rows "
                     f"({len(rel.columns)} values) or all keys ({len(rel.key)} values)")


def _decode(rel: Relation, payload: bytes, where: str, keys_allowed: bool = False) -> list[tuple]:
    names, rows = decode_rows(payload)
    if not names:
        return []
    expected = [rel] + ([_key_relation(rel)] if keys_allowed else [])
    for shape in expected:
        if [n.lower() for n in names] == [c.lower() for c in shape.columns]:
            return validate_rows(shape, rows, where)
    wanted = " or ".join(str(list(s.columns)) for s in expected)
    raise ModelError(f"{where}: expected columns {wanted}, got {names}")


def _key_relation(rel: Relation) -> Relation:
    """The key columns of `rel` as a relation of their own, to check key-only payloads."""
    return Relation(rel.name, rel.source, rel.key, tuple(rel.types[i] for i in rel.key_positions), rel.key)


def _probe_relation(catalog: Catalog, root: SubqueryRelation, probe_columns: Sequence[str], where: str) -> Relation:
    """The probe's columns, typed like the root columns they join."""
    rel = _relation(catalog, root.relation, where)
    if len(root.columns) != len(probe_columns):
        raise ModelError(f"{where}: {rel.name} joins the probe on {len(root.columns)} columns "
                         f"but the probe has {len(probe_columns)}")
    return Relation(f"{rel.name} probe", rel.source, tuple(probe_columns),
                    tuple(rel.types[rel.index(c)] for c in root.columns), tuple(probe_columns))


def _relation(catalog: Catalog, name: str, where: str, source: str | None = None) -> Relation:
    if not catalog.has_relation(name):
        raise ModelError(f"{where}: unknown relation {name!r}")
    rel = catalog.relation(name)
    if source is not None and rel.source != source:
        raise ModelError(f"{where}: relation {rel.name} belongs to {rel.source}, not {source}")
    return rel
