"""The synthetic federations `fedlab bench --federation` grows (loadgen.federation_shapes):
one relation per source, a view that joins all of them in the shape asked for, initial rows that
keep every foreign key and are the same for the same seed, and an update stream over them that
the sources accept (loadgen.driver_process.SyntheticRecipe)."""

from __future__ import annotations

import collections

import pytest

from fedlab.fedmodel.aggregate_view import parse_query
from fedlab.fedmodel.errors import ModelError
from fedlab.loadgen.driver_process import SyntheticRecipe
from fedlab.loadgen.federation_shapes import SHAPES, shaped_federation
from fedlab.source_node.memory_store import MemoryStore


@pytest.mark.parametrize("size", [2, 3, 12, 24])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_relation_sits_at_a_source_of_its_own(shape, size):
    catalog = shaped_federation(shape, size).catalog
    assert len(catalog.relations) == size
    assert len(catalog.sources) == size
    assert all(len(catalog.relations_at(s)) == 1 for s in catalog.sources)


@pytest.mark.parametrize("size", [2, 3, 12, 24])
@pytest.mark.parametrize("shape", SHAPES)
def test_the_view_parses_and_joins_every_relation_on_the_foreign_keys(shape, size):
    federation = shaped_federation(shape, size)
    view = parse_query(federation.view_sql, federation.catalog)
    assert sorted(view.relations) == sorted(r.name for r in federation.catalog.relations)
    assert not view.has_count   # every relation's key is shown
    joined = {frozenset((e.a, e.b)) for e in view.edges}
    assert joined == {frozenset((fk.child, fk.parent)) for fk in federation.foreign_keys}
    assert len(joined) == size - 1   # a tree over all the relations: connected, no cycle
    degree = collections.Counter(r for edge in joined for r in edge)
    if shape == "chain":
        assert sorted(degree.values()) == [1, 1] + [2] * (size - 2)
    else:
        centre = federation.catalog.relations[0].name
        assert degree[centre] == size - 1 and all(degree[r] == 1 for r in degree if r != centre)


@pytest.mark.parametrize("shape", SHAPES)
def test_initial_rows_are_the_same_per_seed_and_keep_every_foreign_key(shape):
    federation = shaped_federation(shape, 6)
    rows = federation.rows(500, seed=7)
    assert rows == federation.rows(500, seed=7)
    assert rows != federation.rows(500, seed=8)
    for rel in federation.catalog.relations:
        assert len(rows[rel.name]) == 500 and len({rel.key_of(r) for r in rows[rel.name]}) == 500
    for fk in federation.foreign_keys:
        child, parent = federation.catalog.relation(fk.child), federation.catalog.relation(fk.parent)
        keys = {row[parent.index(fk.parent_columns[0])] for row in rows[fk.parent]}
        assert {row[child.index(fk.columns[0])] for row in rows[fk.child]} <= keys


@pytest.mark.parametrize("shape, size, message", [
    ("ring", 3, "unknown federation shape 'ring' (one of chain, star)"),
    ("chain", 1, "a federation joins two sources at least, got 1"),
])
def test_a_bad_shape_or_size_is_one_clear_error(shape, size, message):
    with pytest.raises(ModelError, match=message.replace("(", r"\(").replace(")", r"\)")):
        shaped_federation(shape, size)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_recipes_update_stream_is_deterministic_and_accepted_by_every_source(shape):
    recipe = SyntheticRecipe(shape, 4, 300, seed=1)
    catalog = recipe.federation.catalog

    def first(seed, n=300):
        stream = recipe.stream(catalog, "mixed", seed)
        return [stream.next() for _ in range(n)]

    emitted = first(3)
    assert [(s, r.to_dict()) for s, r in emitted] == [(s, r.to_dict()) for s, r in first(3)]
    assert [r.to_dict() for _, r in emitted] != [r.to_dict() for _, r in first(4)]
    data = recipe.data()
    stores = {s: MemoryStore(catalog, s, {r.name: data[r.name] for r in catalog.relations_at(s)})
              for s in catalog.sources}
    for source, request in emitted:   # MemoryStore refuses a duplicate key or a missing row
        stores[source].commit(request)
    assert {s for s, _ in emitted} == set(catalog.sources)
