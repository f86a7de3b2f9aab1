"""Synthetic federations of any size in two shapes, for measuring what each source added costs
(`fedlab bench --federation chain,star --sources 3,6,12,24`).

`shaped_federation(shape, size)` declares `size` relations r01, r02, ..., each alone at its own
source (s01, s02, ...), with a key column kNN, a value column vNN, and the foreign-key columns
the shape joins on, each named after the key it refers to (fNN refers to rNN.kNN):
- chain: r01.f02 -> r02.k02, r02.f03 -> r03.k03, ..., the last relation refers to none; the
  view joins all of them along the chain (an N-way path of the join graph);
- star: r01 is the centre (the fact relation) with f02 ... fNN, one per dimension relation
  r02 ... rNN; the view joins each dimension to the centre on its foreign key.
The view shows every relation's key and value, so it carries no count column. The foreign keys
are `foreign_keys`, not the catalog's referential integrity: a source can only enforce
constraints over its own relations (fedmodel.catalog), and here every join crosses two sources,
so nothing but the initial data keeps them; the update stream (loadgen.synthetic_load)
draws foreign-key values from the keys' domain and lets some dangle, as autonomous sources would.

`rows(count, seed)` is the initial data: keys 1..count in every relation, each foreign key
referring to an existing row, values in 1..1000; the same seed gives the same rows.

    >>> chain = shaped_federation("chain", 3)
    >>> chain.view_sql
    'SELECT r01.k01, r01.v01, r02.k02, r02.v02, r03.k03, r03.v03 FROM r01 JOIN r02 ON r01.f02 = r02.k02 JOIN r03 ON r02.f03 = r03.k03'
    >>> [(r.name, r.source, r.columns) for r in chain.catalog.relations]
    [('r01', 's01', ('k01', 'f02', 'v01')), ('r02', 's02', ('k02', 'f03', 'v02')), ('r03', 's03', ('k03', 'v03'))]
    >>> star = shaped_federation("star", 3)
    >>> star.view_sql.split(" FROM ")[1]
    'r01 JOIN r02 ON r01.f02 = r02.k02 JOIN r03 ON r01.f03 = r03.k03'
    >>> star.rows(2, seed=1)
    {'r01': [(1, 1, 1, 641), (2, 1, 2, 41)], 'r02': [(1, 91), (2, 325)], 'r03': [(1, 349), (2, 669)]}
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from fedlab.fedmodel.catalog import Catalog, ReferentialIntegrity, Relation
from fedlab.fedmodel.errors import ModelError

SHAPES = ("chain", "star")
VALUES = (1, 1000)   # the value columns' range in the initial rows


@dataclass(frozen=True)
class ShapedFederation:
    shape: str
    catalog: Catalog
    foreign_keys: tuple[ReferentialIntegrity, ...]   # kept by the initial rows only (see above)
    view_sql: str

    def rows(self, count: int, seed: int) -> dict[str, list[tuple]]:
        """`count` rows per relation, keys 1..count, every foreign key referring to one of them."""
        if count < 1:
            raise ModelError(f"a synthetic federation needs at least 1 row per relation, got {count}")
        rng = random.Random(f"{self.shape} {len(self.catalog.relations)} {seed}")
        references = {fk.columns[0] for fk in self.foreign_keys}
        return {rel.name: [tuple(key if column in rel.key else
                                 rng.randint(1, count) if column in references else rng.randint(*VALUES)
                                 for column in rel.columns)
                           for key in range(1, count + 1)]
                for rel in self.catalog.relations}


def shaped_federation(shape: str, size: int) -> ShapedFederation:
    """The `shape` federation ("chain" or "star") of `size` sources, one relation each;
    ModelError for an unknown shape or fewer than two sources (a view joins two relations at least)."""
    if shape not in SHAPES:
        raise ModelError(f"unknown federation shape {shape!r} (one of {', '.join(SHAPES)})")
    if size < 2:
        raise ModelError(f"a federation joins two sources at least, got {size}")
    width = max(2, len(str(size)))
    number = [f"{i:0{width}d}" for i in range(1, size + 1)]
    # (child, parent) positions: the chain's next relation, or the star's centre to each dimension
    edges = [(i, i + 1) for i in range(size - 1)] if shape == "chain" else [(0, i) for i in range(1, size)]
    foreign_keys = tuple(ReferentialIntegrity(f"r{number[c]}", (f"f{number[p]}",), f"r{number[p]}", (f"k{number[p]}",))
                         for c, p in edges)
    relations = []
    for i, n in enumerate(number):
        refers = [f"f{number[p]}" for c, p in edges if c == i]
        columns = (f"k{n}", *refers, f"v{n}")
        relations.append(Relation(f"r{n}", f"s{n}", columns, ("BIGINT",) * len(columns), (f"k{n}",)))
    shown = ", ".join(f"r{n}.k{n}, r{n}.v{n}" for n in number)
    joins = "".join(f" JOIN {fk.parent} ON {fk.child}.{fk.columns[0]} = {fk.parent}.{fk.parent_columns[0]}"
                    for fk in foreign_keys)
    return ShapedFederation(shape, Catalog(tuple(relations)), foreign_keys, f"SELECT {shown} FROM r{number[0]}{joins}")
