"""fedmodel.messages: model objects survive the wire, and bad payloads are refused with ModelError."""

from __future__ import annotations

import random

import pytest

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.codec import decode_rows, encode_rows
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import from_pb, to_pb
from fedlab.fedmodel.subquery import Answer, RelationAnswer, Subquery, SubqueryRelation
from fedlab.fedmodel.transactions import Modification, Notification, RelationChange, TransactionRequest
from fedlab.fedmodel.wire import pb

CATALOG = Catalog.from_dict({"sources": {
    "ds1": {
        "R1": {"columns": ["A", "B", "D"], "types": ["BIGINT", "VARCHAR", "DATE"], "key": ["A"]},
        "R2": {"columns": ["B", "X", "F"], "types": ["VARCHAR", "DOUBLE", "BOOLEAN"], "key": ["B", "X"]},
    },
    "ds2": {"R3": {"columns": ["A", "C"], "types": ["BIGINT", "VARCHAR"], "key": ["A"]}},
}})


def roundtrip(obj):
    return from_pb(to_pb(obj, CATALOG), CATALOG)


def test_transaction_with_full_rows_keys_and_nulls_roundtrips():
    req = TransactionRequest(
        "t1",
        inserts={"R1": [(1, "a", "2024-02-29"), (2, None, None)], "R2": [("b", 1.5, True)]},
        deletes={"R1": [(7,)], "R2": [("c", 2.0, False)]},
        modifies={"R1": [Modification((3,), (3, "z", "1999-12-31"))],
                  "R2": [Modification(("d", 0.25, None), ("d", 0.25, True))]})
    assert roundtrip(req) == req


def test_notification_roundtrips():
    note = Notification("ds1", 5, "t9", (
        RelationChange("R1", 3, inserted=((1, "a", "2020-01-01"),), deleted=((2, "b", None),),
                       modified=(Modification((3, "c", None), (3, "d", "2021-06-30")),)),
        RelationChange("R2", 2, deleted=(("x", -0.5, False),)),
    ), commit_time=1700000000.25)
    assert roundtrip(note) == note


def test_subquery_with_probe_roundtrips():
    sq = Subquery("q1", "ds1", (
        SubqueryRelation("R1", None, ("B",), ("B",), "A > 3"),
        SubqueryRelation("R2", "R1", ("B",), ("B",), "F"),
    ), (("a",), ("b",), (None,)))
    assert roundtrip(sq) == sq


def test_subquery_without_probe_means_all_rows_and_roundtrips():
    sq = Subquery("q2", "ds2", (SubqueryRelation("R3", None, (), (), ""),), ())
    msg = to_pb(sq, CATALOG)
    assert msg.probe == b"" and not msg.probe_columns
    assert from_pb(msg, CATALOG) == sq


def test_subquery_takes_its_source_from_the_catalog():
    msg = to_pb(Subquery("q3", "ds2", (SubqueryRelation("R3", None, ("A",), ("K",)),), ((1,),)), CATALOG)
    assert from_pb(msg, CATALOG).source == "ds2"


def test_answer_with_an_empty_relation_roundtrips():
    answer = Answer("q1", "ds1", 4, (RelationAnswer("R1", 2, ((1, "a", "2020-01-01"),)), RelationAnswer("R2", 1, ())))
    assert roundtrip(answer) == answer


def test_garbled_payload_is_a_model_error():
    msg = pb.CommitRequest(txn_id="t", ops=[pb.RelationOps(relation="R1", inserts=b"\xff\xff\xff\xffgarbage")])
    with pytest.raises(ModelError, match="garbled row payload"):
        from_pb(msg, CATALOG)


def test_truncated_payload_is_a_model_error():
    payload = encode_rows(["A", "B", "D"], ["BIGINT", "VARCHAR", "DATE"], [(1, "a", None)] * 10)
    msg = pb.Answer(id="q", source="ds1", dsv=2, relations=[pb.RelationAnswer(relation="R1", brv=1, rows=payload[:-40])])
    with pytest.raises(ModelError, match="garbled row payload"):
        from_pb(msg, CATALOG)


def test_payload_with_other_columns_is_refused():
    payload = encode_rows(["A", "C"], ["BIGINT", "VARCHAR"], [(1, "x")])
    msg = pb.CommitRequest(txn_id="t", ops=[pb.RelationOps(relation="R1", inserts=payload)])
    with pytest.raises(ModelError, match=r"expected columns \['A', 'B', 'D'\]"):
        from_pb(msg, CATALOG)


def test_value_of_the_wrong_type_is_refused():
    payload = encode_rows(["A", "B", "D"], ["VARCHAR", "VARCHAR", "DATE"], [("one", "x", None)])
    msg = pb.CommitRequest(txn_id="t", ops=[pb.RelationOps(relation="R1", inserts=payload)])
    with pytest.raises(ModelError, match="R1.A is BIGINT"):
        from_pb(msg, CATALOG)


def test_an_integer_beyond_64_bits_is_a_model_error_not_an_overflow():
    with pytest.raises(ModelError, match="column A: "):
        encode_rows(["A"], ["BIGINT"], [(2 ** 64,)])


def test_unknown_relation_is_refused():
    with pytest.raises(ModelError, match="unknown relation 'NOPE'"):
        from_pb(pb.CommitRequest(txn_id="t", ops=[pb.RelationOps(relation="NOPE")]), CATALOG)


def test_notification_naming_a_relation_of_another_source_is_refused():
    msg = pb.Notification(source="ds1", dsv=2, changes=[pb.RelationChange(relation="R3", brv=2)])
    with pytest.raises(ModelError, match="R3 belongs to ds2, not ds1"):
        from_pb(msg, CATALOG)


def test_unpaired_modification_images_are_refused():
    old = encode_rows(["A"], ["BIGINT"], [(1,), (2,)])
    new = encode_rows(["A", "B", "D"], ["BIGINT", "VARCHAR", "DATE"], [(1, "a", None)])
    msg = pb.CommitRequest(txn_id="t", ops=[pb.RelationOps(relation="R1", modify_old=old, modify_new=new)])
    with pytest.raises(ModelError, match="2 old and 1 new"):
        from_pb(msg, CATALOG)


def test_deletes_mixing_full_rows_and_keys_cannot_be_encoded():
    with pytest.raises(ModelError, match="all full rows .* or all keys"):
        to_pb(TransactionRequest("t", deletes={"R1": [(1,), (2, "b", None)]}), CATALOG)


def test_probe_of_the_wrong_arity_is_refused():
    with pytest.raises(ModelError, match="joins the probe on 1 columns but the probe has 2"):
        from_pb(pb.Subquery(id="q", relations=[pb.SubqueryRelation(relation="R1", columns=["B"])],
                            probe_columns=["X", "Y"]), CATALOG)


def test_corrupted_payloads_are_model_errors_and_never_crash_the_process():
    # Arrow does not check buffers on read: unvalidated, some of these crashed the interpreter.
    good = encode_rows(["A", "B", "D", "X", "F"], ["BIGINT", "VARCHAR", "DATE", "DOUBLE", "BOOLEAN"],
                       [(i, "b" * i if i % 3 else None, "2020-01-01", i / 3, i % 2 == 0) for i in range(40)])
    rng = random.Random(0)
    for _ in range(3000):
        payload = bytearray(good)
        if rng.random() < 0.3:
            payload = payload[:rng.randrange(len(payload))]
        else:
            for _ in range(rng.randint(1, 8)):
                payload[rng.randrange(len(payload))] = rng.randrange(256)
        try:
            decode_rows(bytes(payload))
        except ModelError:
            pass
