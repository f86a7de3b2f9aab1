"""The synthetic update stream of the load generator: random valid transactions over any catalog.

The Helm chart's default workload (`kind: synthetic`): the relations are whatever the values
declare, so nothing is known about them but their columns, types, keys and constraints, and the
view's joins. Values come from per-column domains, and columns the view joins share one domain,
so updates join often; keys stay unique. `mix` weighs inserted, deleted and modified rows;
`skew` > 0 chooses the rows to delete or modify by a Zipf law over a key pool (a few rows are
hot). `initial_load(rows)` first fills every relation to that many rows, in insert-only
transactions.

Like loadgen.workload's TPC-H streams it keeps its own picture of each source (a MemoryStore
mirror, which also validates keys, FDs and RI) and assumes every emitted transaction commits, in
emission order per source (what loadgen.driver does). The mirrors start from the sources'
current rows, so a load can follow an earlier one. `named_mix(workload)` reads the bench's workload
names (rf, mixed, skewed) as this stream's mix and skew.
"""

from __future__ import annotations

import datetime
import random
from typing import Iterator, Mapping, Sequence

from fedlab.fedmodel.catalog import Catalog, Relation
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import Modification, TransactionRequest
from fedlab.fedmodel.viewdef import ColumnRef, ViewDef
from fedlab.loadgen.workload import KeyPool, Workload
from fedlab.source_node.memory_store import MemoryStore

KINDS = ("insert", "delete", "modify")
_REUSE = 0.8          # probability that a non-key value comes from its domain (joins happen)
_OPERATIONS = (1, 3)  # rows touched per transaction
_LOAD_BATCH = 200     # rows per transaction of the initial load
_FIRST_DATE = datetime.date(1992, 1, 1).toordinal()


def named_mix(workload: str) -> dict:
    """The `mix` and `skew` for one of the TPC-H streams' names (loadgen.workload.WORKLOADS):
    rf inserts and deletes rows only, as TPC-H's refresh functions do; skewed picks rows by the
    same Zipf law as the TPC-H streams do.

    >>> named_mix("rf"), named_mix("skewed")
    ({'mix': {'insert': 1.0, 'delete': 1.0}, 'skew': 0.0}, {'mix': None, 'skew': 1.1})
    """
    return {"mix": {"insert": 1.0, "delete": 1.0} if workload == "rf" else None, "skew": Workload.named(workload).zipf}


class SyntheticStream:
    def __init__(self, catalog: Catalog, view: ViewDef | Sequence[ViewDef], current: Mapping[str, list[tuple]],
                 mix: Mapping[str, float] | None = None, skew: float = 0.0, seed: int = 0):
        """`current`: every relation's rows at the sources now; `view`: the view, or several
        views over the catalog (a column any of them joins shares its domain with the columns it
        is joined to)."""
        mix = dict(mix or {k: 1.0 for k in KINDS})
        if set(mix) - set(KINDS) or any(not isinstance(w, (int, float)) or w < 0 for w in mix.values()) \
                or not sum(mix.values()) > 0:
            raise ModelError(f"synthetic workload: mix weighs {', '.join(KINDS)} with non-negative numbers, got {mix}")
        if not isinstance(skew, (int, float)) or skew < 0:
            raise ModelError(f"synthetic workload: skew must be a number >= 0, got {skew!r}")
        self.catalog = catalog
        self.kinds = [k for k in KINDS if mix.get(k, 0) > 0]
        self.weights = [mix[k] for k in self.kinds]
        self.skew = float(skew)
        self.rng = random.Random(seed)
        self.sources = sorted(catalog.sources)
        self.mirrors = {s: MemoryStore(catalog, s, {r.name: list(current.get(r.name, [])) for r in catalog.relations_at(s)})
                        for s in self.sources}
        self.pools = {r.name: KeyPool(self.mirrors[r.source].relations[r.name]) for r in catalog.relations}
        self.count = 0
        self.fresh = 0
        joined = _JoinedColumns()
        for v in [view] if isinstance(view, ViewDef) else view:
            for rel in catalog.relations:
                if rel.name in v.relations:
                    for col in rel.columns:
                        ref = ColumnRef(rel.name, col)
                        joined.join(ref, v.equivalents(ref, outer=True))
        classes: dict = {}
        self.domains: dict[tuple[str, str], list] = {}
        for rel in catalog.relations:
            for col in rel.columns:
                self.domains[(rel.name, col)] = classes.setdefault(joined.cls(ColumnRef(rel.name, col)), [])
        for name, rows in current.items():
            rel = catalog.relation(name)
            for row in rows:
                for col, value in zip(rel.columns, row):
                    self.domains[(rel.name, col)].append(value)
                    if isinstance(value, int) and not isinstance(value, bool):
                        self.fresh = max(self.fresh, value)   # fresh numbers stay fresh after a restart

    # ---- the stream ----

    def next(self) -> tuple[str, TransactionRequest]:
        for _ in range(1000):
            source = self.rng.choice(self.sources)
            request = self._draw(source)
            if request is not None and self._commit(source, request):
                return source, request
        raise ModelError("synthetic workload: no valid transaction in 1000 draws (do the constraints allow any?)")

    def initial_load(self, rows: int) -> Iterator[tuple[str, TransactionRequest]]:
        """Insert-only transactions until every relation holds `rows` rows (or no valid row is left)."""
        for rel in self.catalog.relations:
            misses = 0
            while len(self.pools[rel.name]) < rows and misses < 20:
                table = dict(self.mirrors[rel.source].relations[rel.name])
                batch = []
                for _ in range(min(_LOAD_BATCH, rows - len(table))):
                    row = self._new_row(rel, table)
                    table[rel.key_of(row)] = row
                    batch.append(row)
                request = TransactionRequest(self._txn_id(), inserts={rel.name: batch})
                if self._commit(rel.source, request):
                    yield rel.source, request
                else:
                    misses += 1

    def _draw(self, source: str) -> TransactionRequest | None:
        tables = {r.name: dict(self.mirrors[source].relations[r.name]) for r in self.catalog.relations_at(source)}
        touched = set()
        inserts, deletes, modifies = {}, {}, {}
        for _ in range(self.rng.randint(*_OPERATIONS)):
            rel = self.catalog.relation(self.rng.choice(sorted(tables)))
            table = tables[rel.name]
            kind = self.rng.choices(self.kinds, self.weights)[0] if table else "insert"
            # A key is touched once per transaction: never removed and added again in one.
            if kind == "insert":
                row = self._new_row(rel, table, touched)
                inserts.setdefault(rel.name, []).append(row)
            else:
                key = self._pick(rel, table, touched)
                if key is None:
                    continue
                old = table.pop(key)
                touched.add((rel.name, key))
                if kind == "modify" and len(rel.key) < len(rel.columns):
                    row = self._modified(rel, old)
                    modifies.setdefault(rel.name, []).append(Modification(old, row))
                else:
                    deletes.setdefault(rel.name, []).append(old)
                    continue
            table[rel.key_of(row)] = row
            touched.add((rel.name, rel.key_of(row)))
        if not (inserts or deletes or modifies):
            return None
        return TransactionRequest(self._txn_id(), inserts, deletes, modifies)

    def _commit(self, source: str, request: TransactionRequest) -> bool:
        """Applies the transaction to the mirror (and its key pools); False if the source would reject it."""
        try:
            note = self.mirrors[source].commit(request)
        except ModelError:
            return False
        for change in note.changes:
            rel, pool = self.catalog.relation(change.relation), self.pools[change.relation]
            for row in change.removed:
                pool.remove(rel.key_of(row))
            for row in change.added:
                pool.add(rel.key_of(row))
        return True

    # ---- rows and values ----

    def _pick(self, rel: Relation, table: dict, touched: set) -> tuple | None:
        """A stored key not touched yet in this transaction (Zipf over the pool with skew)."""
        pool = self.pools[rel.name]
        for _ in range(5):
            if not len(pool):
                return None
            key = pool.pick(self.rng, self.skew)
            if key in table and (rel.name, key) not in touched:
                return key
        return None

    def _new_row(self, rel: Relation, table: dict, touched: set = frozenset()) -> tuple:
        """A row whose key is neither stored nor touched; keys come from their domain at times
        (a child's key may be a value its parent joins on), else fresh."""
        for _ in range(20):
            row = tuple(self._value(rel, c, reuse=(0.3 if c in rel.key else _REUSE)) for c in rel.columns)
            if rel.key_of(row) not in table and (rel.name, rel.key_of(row)) not in touched:
                return row
        return tuple(self._value(rel, c, reuse=0.0 if c in rel.key else _REUSE) for c in rel.columns)

    def _modified(self, rel: Relation, old: tuple) -> tuple:
        row = list(old)
        column = self.rng.choice([c for c in rel.columns if c not in rel.key])
        row[rel.index(column)] = self._value(rel, column, reuse=_REUSE)
        return tuple(row)

    def _value(self, rel: Relation, column: str, reuse: float):
        domain = self.domains[(rel.name, column)]
        if domain and self.rng.random() < reuse:
            return domain[self.rng.randrange(len(domain))]
        self.fresh += 1
        typ = rel.types[rel.index(column)]
        value = {"BIGINT": lambda: self.fresh,
                 "DOUBLE": lambda: round(self.rng.uniform(1, 1000), 2),
                 "VARCHAR": lambda: f"{column.lower()}-{self.fresh}",
                 "DATE": lambda: datetime.date.fromordinal(_FIRST_DATE + self.rng.randrange(2500)).isoformat(),
                 "BOOLEAN": lambda: self.rng.random() < 0.5}[typ]()
        domain.append(value)
        return value

    def _txn_id(self) -> str:
        self.count += 1
        return f"syn{self.count}"


class _JoinedColumns:
    """Columns joined to each other by some view, in classes (a union-find): a column two views
    join to different ones is in one class with both."""

    def __init__(self):
        self._parent: dict[ColumnRef, ColumnRef] = {}

    def _root(self, ref: ColumnRef) -> ColumnRef:
        while self._parent.get(ref, ref) != ref:
            ref = self._parent[ref]
        return ref

    def join(self, ref: ColumnRef, others) -> None:
        for other in others:
            a, b = self._root(ref), self._root(other)
            if a != b:
                self._parent[max(a, b, key=repr)] = min(a, b, key=repr)

    def cls(self, ref: ColumnRef) -> ColumnRef:
        """The class `ref` is in, named by one of its columns."""
        return self._root(ref)
