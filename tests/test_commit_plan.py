"""The commit planner (source_node.commit) on its own, over dictionaries: what it reads from the
store, since at a PostgreSQL source every read is a round trip, and that reading less changes no
verdict."""

from __future__ import annotations

from collections import Counter

import pytest

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import Modification, TransactionRequest
from fedlab.source_node.commit import named_keys, plan_commit

CATALOG = Catalog.from_dict({
    "sources": {"ds1": {"P": {"columns": ["K", "NAME"], "types": ["BIGINT", "VARCHAR"], "key": ["K"]},
                        "C": {"columns": ["I", "K"], "types": ["BIGINT", "BIGINT"], "key": ["I"]},
                        "D": {"columns": ["DAY", "N"], "types": ["DATE", "BIGINT"], "key": ["DAY"]}}},
    "constraints": {"ri": [{"child": "C", "columns": ["K"], "parent": "P", "parent_columns": ["K"]}]}})
STORED = {"P": {(1,): (1, "one"), (2,): (2, "two")}, "C": {(10,): (10, 1)}, "D": {}}


class Reads:
    """The stored rows of STORED, counting what the planner asks for."""

    def __init__(self):
        self.lookups: Counter = Counter()
        self.finds: Counter = Counter()

    def lookup(self, relation, key):
        self.lookups[relation, key] += 1
        return STORED[relation].get(key)

    def find(self, relation, columns, values):
        self.finds[relation, columns, values] += 1
        rel = CATALOG.relation(relation)
        return [r for r in STORED[relation].values() if tuple(r[rel.index(c)] for c in columns) == tuple(values)]


def plan(request: TransactionRequest, reads: Reads):
    return plan_commit(CATALOG, "ds1", request, reads.lookup, reads.find)


def test_each_key_is_looked_up_once():
    reads = Reads()
    planned = plan(TransactionRequest("t", deletes={"P": [(2,)]}, inserts={"P": [(2, "new"), (3, "three")]},
                                      modifies={"C": [Modification((10,), (10, 2))]}), reads)
    assert set(reads.lookups.values()) == {1}
    assert set(reads.lookups) == {("P", (2,)), ("P", (3,)), ("C", (10,))}
    by = {p.relation: p for p in planned}
    assert by["P"].modified[0].new == (2, "new") and by["P"].inserted == ((3, "three"),)


def test_a_child_inserted_beside_its_parent_reads_no_parent():
    reads = Reads()
    plan(TransactionRequest("t", inserts={"P": [(5, "five")], "C": [(11, 5), (12, 5)]}), reads)
    assert not [f for f in reads.finds if f[0] == "P"]


@pytest.mark.parametrize("request_, message", [
    (TransactionRequest("t", inserts={"C": [(11, 7)]}), r"C\[11, 7\] refers to no P row"),
    (TransactionRequest("t", deletes={"P": [(1,)]}), r"removing P\[1, 'one'\] leaves C rows"),
    (TransactionRequest("t", modifies={"P": [Modification((1,), (4, "one"))]}), "leaves C rows"),
    (TransactionRequest("t", deletes={"P": [(1,)]}, inserts={"C": [(11, 1)]}), "refers to no P row"),
], ids=["orphan", "parent deleted", "parent key changed", "orphan beside its parent's deletion"])
def test_referential_integrity_still_judges_from_the_stored_rows(request_, message):
    with pytest.raises(ModelError, match=message):
        plan(request_, Reads())


def test_a_parent_deleted_with_its_children_or_put_back_is_accepted():
    plan(TransactionRequest("t", deletes={"C": [(10,)], "P": [(1,)]}), Reads())
    plan(TransactionRequest("t", deletes={"P": [(1,)]}, inserts={"P": [(1, "again")]}), Reads())


def test_named_keys_are_those_the_planner_looks_up_and_cast_without_fail():
    request = TransactionRequest("t", inserts={"P": [(3, "three"), (True, "a boolean")], "D": [("2020-01-01", 1)]},
                                 deletes={"C": [(10,), (2**64, 1)]}, modifies={"P": [Modification((1,), (4, "x"))]})
    assert named_keys(CATALOG, "ds1", [request]) == {"P": {(3,), (1,), (4,)}, "C": {(10,)}, "D": set()}
