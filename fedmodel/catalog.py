"""The catalog every side of the federation shares: relations, their placement, keys, FDs and RI.

Base relations are sets: each has a key (all of its columns when none is declared), so a row is
identified by its key values. Keys imply the functional dependency key -> all columns; further
FDs and referential-integrity constraints are declared per relation (Sze-Ling section 4.2 uses
them for irrelevant updates and partial self-maintenance).
"""

from __future__ import annotations

import datetime
import functools
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from fedlab.fedmodel.errors import ModelError

TYPES = ("BIGINT", "DOUBLE", "VARCHAR", "DATE", "BOOLEAN")
_INT64_MIN, _INT64_MAX = -2 ** 63, 2 ** 63 - 1


@dataclass(frozen=True)
class Relation:
    name: str
    source: str
    columns: tuple[str, ...]
    types: tuple[str, ...]
    key: tuple[str, ...]

    def index(self, column: str) -> int:
        try:
            return self._positions[column.lower()]
        except KeyError:
            raise ModelError(f"relation {self.name} has no column {column!r}") from None

    @functools.cached_property
    def _positions(self) -> dict[str, int]:
        # Looked up for every row the maintenance core touches: computed once per relation.
        return {c.lower(): i for i, c in enumerate(self.columns)}

    def type_of(self, column: str) -> str:
        return self.types[self.index(column)]

    def has_column(self, column: str) -> bool:
        return column.lower() in self._positions

    @functools.cached_property
    def key_positions(self) -> tuple[int, ...]:
        return tuple(self.index(c) for c in self.key)

    def key_of(self, row: Sequence) -> tuple:
        return tuple(row[i] for i in self.key_positions)


@dataclass(frozen=True)
class FunctionalDependency:
    relation: str
    lhs: tuple[str, ...]
    rhs: tuple[str, ...]


@dataclass(frozen=True)
class ReferentialIntegrity:
    """Every row of `child` refers, through `columns`, to a row of `parent` (its `parent_columns`)."""

    child: str
    columns: tuple[str, ...]
    parent: str
    parent_columns: tuple[str, ...]


@dataclass(frozen=True)
class Catalog:
    relations: tuple[Relation, ...]
    fds: tuple[FunctionalDependency, ...] = ()
    ri: tuple[ReferentialIntegrity, ...] = ()
    _by_name: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        seen = {}
        for r in self.relations:
            if r.name.lower() in seen:
                raise ModelError(f"relation {r.name} is declared twice")
            seen[r.name.lower()] = r
        object.__setattr__(self, "_by_name", seen)
        for fd in self.fds:
            rel = self.relation(fd.relation)
            for c in fd.lhs + fd.rhs:
                rel.index(c)
        for ri in self.ri:
            child, parent = self.relation(ri.child), self.relation(ri.parent)
            if child.source != parent.source:
                raise ModelError(
                    f"referential integrity {ri.child}->{ri.parent} spans two sources; "
                    "a source can only enforce constraints over its own relations")
            if len(ri.columns) != len(ri.parent_columns):
                raise ModelError(f"referential integrity {ri.child}->{ri.parent}: column lists differ in length")
            for c in ri.columns:
                child.index(c)
            for c in ri.parent_columns:
                parent.index(c)

    def relation(self, name: str) -> Relation:
        try:
            return self._by_name[name.lower()]
        except KeyError:
            raise ModelError(f"unknown relation {name!r}") from None

    def has_relation(self, name: str) -> bool:
        return name.lower() in self._by_name

    @functools.cached_property
    def sources(self) -> tuple[str, ...]:
        return tuple(self._at)

    def relations_at(self, source: str) -> tuple[Relation, ...]:
        return self._at.get(source, ())

    @functools.cached_property
    def _at(self) -> dict[str, tuple[Relation, ...]]:
        """Each source's relations, in the catalog's order (looked up once per source: a federation
        of thousands of sources asks for each)."""
        at: dict[str, list[Relation]] = {}
        for r in self.relations:
            at.setdefault(r.source, []).append(r)
        return {s: tuple(rs) for s, rs in at.items()}

    def with_occurrences(self, occurrences: dict[str, str]) -> "Catalog":
        """The catalog with each occurrence (name -> the relation it is another name of, as a view
        that reads a relation twice names it: fedmodel.viewdef) as a relation of its own: the same
        source, columns, types and key, and the relation's constraints (its FDs, and each
        referential integrity for every pair of occurrences of its child and parent)."""
        occurrences = {o: b for o, b in occurrences.items() if not self._declares(o, b)}
        if not occurrences:
            return self
        names = {}   # relation -> itself and its occurrences
        for occurrence, base in occurrences.items():
            names.setdefault(base.lower(), [self.relation(base).name]).append(occurrence)
        def named(relation: str) -> list[str]:
            return names.get(relation.lower(), [relation])
        relations = self.relations + tuple(replace(self.relation(base), name=occurrence)
                                           for occurrence, base in occurrences.items())
        fds = tuple(replace(fd, relation=r) for fd in self.fds for r in named(fd.relation))
        ri = tuple(replace(c, child=child, parent=parent) for c in self.ri
                   for child in named(c.child) for parent in named(c.parent))
        return Catalog(relations, fds, ri)

    def _declares(self, occurrence: str, base: str) -> bool:
        """Whether `occurrence` of `base` is a relation here already (a catalog with_occurrences
        made); ModelError when the name is another relation's."""
        if not self.has_relation(occurrence):
            return False
        if replace(self.relation(occurrence), name=self.relation(base).name) != self.relation(base):
            raise ModelError(f"the alias {occurrence} of {base} names another relation; choose another alias")
        return True

    def fds_of(self, relation: str) -> Iterable[FunctionalDependency]:
        rel = self.relation(relation)
        yield FunctionalDependency(rel.name, rel.key, rel.columns)
        for fd in self.fds:
            if fd.relation.lower() == relation.lower():
                yield fd

    def to_dict(self) -> dict:
        """The catalog in the scenario file's shape (plus column types), for the wire and for files."""
        sources: dict = {}
        for r in self.relations:
            sources.setdefault(r.source, {})[r.name] = {
                "columns": list(r.columns), "types": list(r.types), "key": list(r.key)}
        return {
            "sources": sources,
            "constraints": {
                "fds": [{"relation": f.relation, "from": list(f.lhs), "to": list(f.rhs)} for f in self.fds],
                "ri": [{"child": c.child, "columns": list(c.columns), "parent": c.parent,
                        "parent_columns": list(c.parent_columns)} for c in self.ri],
            },
        }

    @staticmethod
    def from_dict(doc: dict, rows: dict | None = None, where: str = "catalog") -> "Catalog":
        """Builds a catalog from the scenario file's `sources` and `constraints` sections.

        Column types may be given (`types: [BIGINT, VARCHAR]`); otherwise they are inferred from
        `rows` ({relation: rows}, every row the file gives it: integers -> BIGINT, floats ->
        DOUBLE, booleans -> BOOLEAN, anything else, or no value at all, VARCHAR). A column given
        both numbers and text is refused: no type fits every row.
        """
        rows = {str(name).lower(): given for name, given in (rows or {}).items()}
        sources = doc.get("sources")
        if not isinstance(sources, dict) or not sources:
            raise ModelError(f"{where}: 'sources' must map each source to its relations")
        relations = []
        for source, rels in sources.items():
            if not isinstance(rels, dict) or not rels:
                raise ModelError(f"{where}: source {source!r} must map relation names to schemas")
            for name, schema in rels.items():
                if not isinstance(schema, dict) or "columns" not in schema:
                    raise ModelError(f"{where}: relation {name!r} needs a 'columns' list")
                columns = _names(schema["columns"], f"{where}: relation {name!r}: 'columns'")
                if len({c.lower() for c in columns}) != len(columns):
                    raise ModelError(f"{where}: relation {name!r} repeats a column")
                key = (columns if schema.get("key") is None
                       else _names(schema["key"], f"{where}: relation {name!r}: 'key'"))
                types = schema.get("types")
                if types is None:
                    types = _infer_types(columns, rows.get(str(name).lower(), []), f"{where}: relation {name!r}")
                types = tuple(str(t).upper() for t in types)
                if len(types) != len(columns) or any(t not in TYPES for t in types):
                    raise ModelError(f"{where}: relation {name!r} has bad 'types' (one of {', '.join(TYPES)} per column)")
                rel = Relation(str(name), str(source), columns, types, key)
                for c in key:
                    rel.index(c)
                relations.append(rel)
        constraints = doc.get("constraints") or {}
        if not isinstance(constraints, dict) or set(constraints) - {"fds", "ri"}:
            raise ModelError(f"{where}: 'constraints' is a mapping with 'fds' and 'ri', each a list")
        fds = tuple(FunctionalDependency(str(f["relation"]), _names(f["from"], f"{at}.from"),
                                         _names(f["to"], f"{at}.to"))
                    for at, f in _entries(constraints, "fds", ("relation", "from", "to"), where))
        ri = tuple(ReferentialIntegrity(str(c["child"]), _names(c["columns"], f"{at}.columns"), str(c["parent"]),
                                        _names(c["parent_columns"], f"{at}.parent_columns"))
                   for at, c in _entries(constraints, "ri", ("child", "columns", "parent", "parent_columns"), where))
        return Catalog(tuple(relations), fds, ri)


def _entries(constraints: dict, kind: str, fields: tuple[str, ...], where: str) -> list[tuple[str, dict]]:
    """`constraints[kind]`'s entries, each with exactly `fields`, with where each one is in the file."""
    entries = constraints.get(kind) or []
    if not isinstance(entries, list):
        raise ModelError(f"{where}: constraints.{kind} must be a list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or set(entry) != set(fields):
            raise ModelError(f"{where}: constraints.{kind}[{i}] needs exactly {', '.join(fields)}")
    return [(f"{where}: constraints.{kind}[{i}]", entry) for i, entry in enumerate(entries)]


def _names(value, what: str) -> tuple[str, ...]:
    """A non-empty list of column names. A bare string is refused rather than read as its letters
    (`from: jv` is not the columns j and v)."""
    if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
        raise ModelError(f"{what} must be a list of column names, got {value!r}")
    return tuple(value)


def _infer_types(columns: Sequence[str], rows: Sequence[Sequence], where: str) -> tuple[str, ...]:
    types = []
    for i, column in enumerate(columns):
        values = [r[i] for r in rows if i < len(r) and r[i] is not None]
        numbers = [v for v in values if isinstance(v, (int, float))]
        texts = [v for v in values if isinstance(v, str)]
        if numbers and texts:
            raise ModelError(f"{where}: column {column!r} is given numbers and text ({numbers[0]!r} and "
                             f"{texts[0]!r}); give the relation 'types'")
        if values and all(isinstance(v, bool) for v in values):
            types.append("BOOLEAN")
        elif values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            types.append("BIGINT")
        elif values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            types.append("DOUBLE")
        else:
            types.append("VARCHAR")
    return tuple(types)


_FITS = {
    "BIGINT": lambda v: type(v) is int and _INT64_MIN <= v <= _INT64_MAX,
    "DOUBLE": lambda v: type(v) in (int, float),
    "BOOLEAN": lambda v: type(v) is bool,
    "VARCHAR": lambda v: isinstance(v, str),
    "DATE": lambda v: isinstance(v, (str, datetime.date)),
}


# The exact types each column type takes without a closer look (NULL included): what nearly every
# row holds. A value of another type (a subclass, an int out of range) goes to validate_row.
_PLAIN = {"BIGINT": {int}, "DOUBLE": {int, float}, "BOOLEAN": {bool}, "VARCHAR": {str}, "DATE": {str, datetime.date}}
_PLAIN = {typ: frozenset(kinds | {type(None)}) for typ, kinds in _PLAIN.items()}
_COLUMNWISE_FROM = 6   # rows: below, a call per value costs less than a pass per column


def validate_rows(relation: Relation, rows: Sequence[Sequence], where: str) -> list[tuple]:
    """validate_row for many rows; from _COLUMNWISE_FROM rows on, column by column: one pass of C
    over each column's types instead of a Python call per value (measured on TPC-H's lineitem:
    the same at 6 rows, 3.5 times faster at 256). Rows that need a closer look get validate_row's,
    and its error.

    >>> rel = Relation("R", "ds1", ("a", "b"), ("BIGINT", "VARCHAR"), ("a",))
    >>> validate_rows(rel, [[1, "x"], (2, None)] * 4, "test")[:2]
    [(1, 'x'), (2, None)]
    >>> validate_rows(rel, [(1, "x"), (2, 3)] * 4, "test")
    Traceback (most recent call last):
    fedlab.fedmodel.errors.ModelError: test: R.b is VARCHAR, got 3
    """
    if len(rows) < _COLUMNWISE_FROM:
        return [validate_row(relation, r, where) for r in rows]
    width = len(relation.columns)
    checked = [tuple(r) if isinstance(r, (list, tuple)) and len(r) == width else None for r in rows]
    if None in checked:
        return [validate_row(relation, r, where) for r in rows]
    for typ, column in zip(relation.types, zip(*checked)):
        if not set(map(type, column)) <= _PLAIN[typ] or (typ == "BIGINT" and not _within_64_bits(column)):
            return [validate_row(relation, r, where) for r in rows]
    return checked


def _within_64_bits(values: Sequence[int | None]) -> bool:
    numbers = [v for v in values if v is not None]
    return not numbers or (_INT64_MIN <= min(numbers) and max(numbers) <= _INT64_MAX)


def validate_row(relation: Relation, row: Sequence, where: str) -> tuple:
    """Validates one row against the relation's arity and column types; returns it as a tuple."""
    if not isinstance(row, (list, tuple)) or len(row) != len(relation.columns):
        raise ModelError(f"{where}: a row of {relation.name} needs {len(relation.columns)} values, got {row!r}")
    for value, column, typ in zip(row, relation.columns, relation.types):
        if value is not None and not _FITS[typ](value):   # checked here first: most rows are fine
            validate_value(value, typ, f"{where}: {relation.name}.{column}")
    return tuple(row)


def validate_value(value, typ: str, what: str) -> None:
    """Raises ModelError '<what> is <typ>, got <value>' unless `value` is NULL or a value of `typ`.

    BIGINT is 64 bits, as in every engine and in the row codec: a larger integer is refused here,
    where the file names it, rather than overflowing later in the codec or an engine.
    """
    if value is None or _FITS[typ](value):
        return
    if typ == "BIGINT" and isinstance(value, int) and not isinstance(value, bool):
        raise ModelError(f"{what} is BIGINT, got {value!r}, which does not fit in 64 bits")
    if isinstance(value, bool):
        # YAML 1.1 reads unquoted on/off/yes/no/true/false as booleans: the likeliest cause.
        raise ModelError(f"{what} is {typ}, got the boolean {value!r} (quote on/off/yes/no in YAML to write a string)")
    raise ModelError(f"{what} is {typ}, got {value!r}")
