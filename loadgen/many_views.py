"""Generated federations of many sources and many views, for predictions past this machine
(`fedlab predict`, simulation.predict).

`many_views(sources, views, shape, seed)` declares `sources` relations r1, r2, ..., each alone at
its own source (s1, s2, ...), with a key kN and a value vN, and `views` views, each joining 2 to 8
of them (never more than there are; exactly `width`, when given) drawn from the seed, in the
shape asked for:
- chain: the relations in a path, each referring to the next;
- star: the first drawn is the centre, referring to each of the others;
- random: a random tree, each relation after the first joined to one drawn before it;
- mixed: the three shapes in turn.
A relation that refers to another has a foreign-key column named after the key it refers to
(fM refers to rM.kM), one per relation it refers to in any view; as in
loadgen.federation_shapes, the foreign keys hold in the initial rows only (every join
crosses two sources). Each view shows every relation's key and value.

    >>> f = many_views(5, 2, "chain", seed=3)
    >>> [v.sql for v in f.views]
    ['SELECT r5.k5, r5.v5, r1.k1, r1.v1 FROM r5 JOIN r1 ON r5.f1 = r1.k1', 'SELECT r4.k4, r4.v4, r5.k5, r5.v5 FROM r4 JOIN r5 ON r4.f5 = r5.k5']
    >>> f.references["r4"], f.rows(2, seed=1)["r4"]
    (('r5',), [(1, 2, 425), (2, 1, 614)])
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from fedlab.fedmodel.catalog import Catalog, Relation
from fedlab.fedmodel.errors import ModelError

SHAPES = ("chain", "star", "random", "mixed")
WIDEST = 8   # the most relations a view joins
VALUES = (1, 1000)


@dataclass(frozen=True)
class GeneratedView:
    name: str
    shape: str
    relations: tuple[str, ...]
    sql: str


@dataclass(frozen=True)
class ManyViews:
    catalog: Catalog
    views: tuple[GeneratedView, ...]
    references: dict   # relation -> the relations its foreign keys refer to

    def rows(self, count: int, seed: int) -> dict[str, list[tuple]]:
        """`count` rows per relation, keys 1..count, each foreign key referring to one of them."""
        if count < 1:
            raise ModelError(f"a generated federation needs at least 1 row per relation, got {count}")
        rng = random.Random(f"many views {len(self.catalog.relations)} {seed}")
        return {rel.name: [(key, *(rng.randint(1, count) for _ in self.references[rel.name]), rng.randint(*VALUES))
                           for key in range(1, count + 1)]
                for rel in self.catalog.relations}


def many_views(sources: int, views: int, shape: str, seed: int, width: int | None = None) -> ManyViews:
    """`views` views of `shape` over `sources` sources of one relation each, each joining `width`
    of them (None: 2 to 8, drawn); ModelError for an unknown shape, fewer than two sources, no
    view, or a width the sources cannot give."""
    if shape not in SHAPES:
        raise ModelError(f"unknown view shape {shape!r} (one of {', '.join(SHAPES)})")
    if sources < 2 or views < 1:
        raise ModelError(f"a generated federation needs two sources and a view at least, got {sources} and {views}")
    if width is not None and not 2 <= width <= sources:
        raise ModelError(f"a view joins 2 to {sources} of {sources} sources, not {width}")
    rng = random.Random(f"{sources} {views} {shape} {seed}")
    drawn = []
    for v in range(views):
        members = [m + 1 for m in rng.sample(range(sources), width or rng.randint(2, min(WIDEST, sources)))]
        form = SHAPES[v % 3] if shape == "mixed" else shape
        if form == "chain":
            edges = list(zip(members, members[1:]))
        elif form == "star":
            edges = [(members[0], m) for m in members[1:]]
        else:
            edges = [(m, members[rng.randrange(i)]) for i, m in enumerate(members) if i]
        drawn.append((form, members, edges))
    references: dict[str, list[str]] = {f"r{i}": [] for i in range(1, sources + 1)}
    for _, _, edges in drawn:
        for child, parent in edges:
            if f"r{parent}" not in references[f"r{child}"]:
                references[f"r{child}"].append(f"r{parent}")
    relations = tuple(Relation(name, f"s{name[1:]}", (f"k{name[1:]}", *(f"f{p[1:]}" for p in refs), f"v{name[1:]}"),
                               ("BIGINT",) * (len(refs) + 2), (f"k{name[1:]}",))
                      for name, refs in references.items())
    return ManyViews(Catalog(relations),
                     tuple(GeneratedView(f"v{i + 1}", form, tuple(f"r{m}" for m in members), _sql(members, edges))
                           for i, (form, members, edges) in enumerate(drawn)),
                     {name: tuple(refs) for name, refs in references.items()})


def _sql(members: list[int], edges: list[tuple[int, int]]) -> str:
    """The view joining `members` along `edges` (child, parent: child.fP = parent.kP), each
    relation joined once the one it meets is in."""
    shown = ", ".join(f"r{m}.k{m}, r{m}.v{m}" for m in members)
    joined, joins, left = {members[0]}, [], list(edges)
    while left:
        child, parent = next((c, p) for c, p in left if c in joined or p in joined)
        left.remove((child, parent))
        new = parent if child in joined else child
        joined.add(new)
        joins.append(f" JOIN r{new} ON r{child}.f{parent} = r{parent}.k{parent}")
    return f"SELECT {shown} FROM r{members[0]}{''.join(joins)}"
