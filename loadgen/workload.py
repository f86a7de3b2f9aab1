"""TPC-H update streams for the load generator: valid source transactions, thousands per second.

`UpdateStream(catalog, data, mix, seed, zipf).next()` returns `(source, TransactionRequest)`.
The stream keeps its own picture of the rows that exist, built from the initial data, so it
never asks a source: the small relations at once, an order and its line items the first time
the stream picks that order (`InitialRows`: from lists in memory, or from the TPC-H generation's
files, loadgen.tpch.TblRows, so that a driver at SF 1 does not hold 7.5M rows; the orders
it has picked are then kept in a file of its own, `Spilled`, so that its memory does not grow as
its picture fills: an hour at 200 txn/s picks nearly every order of SF 0.1, 450 MB as tuples),
and each transaction it emits is one the source accepts: keys are unique, the catalog's same-source
referential integrity holds, and no column a declared FD or RI constraint covers is changed
behind its back. It assumes every emitted transaction commits,
in emission order per source (what the driver does); a rejected one leaves the picture ahead of
the source.

Streams (weights in `mix`):
  new_order         TPC-H RF1: an order with 1-7 line items, for an existing customer and
                    existing part/supplier pairs (partsupp)
  delete_order      TPC-H RF2: an order and all its line items
  modify_selection  a selection attribute of the shipped views (c_mktsegment, o_orderpriority)
  modify_join       a join attribute: o_custkey of an order, to another existing customer
  modify_other      a column in no view's join or selection (l_quantity with l_extendedprice,
                    or o_comment)
  new_parent        a parent no child references yet (a new customer or a new part)
A transaction whose relations sit at two sources (e.g. orders and lineitem placed apart) is
emitted as one transaction per source, parents inserted first and children deleted first.
With zipf > 0, orders and customers are chosen by a Zipf law over their positions in the
stream's key pool (initially ascending key order), so a few keys are hot.
"""

from __future__ import annotations

import datetime
import math
import os
import pickle
import random
import sqlite3
import tempfile
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Callable, Hashable, Iterable, Mapping

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import Modification, TransactionRequest

STREAMS = ("new_order", "delete_order", "modify_selection", "modify_join", "modify_other", "new_parent")

MIXED = {"new_order": 0.2, "delete_order": 0.2, "modify_selection": 0.15, "modify_join": 0.15,
         "modify_other": 0.2, "new_parent": 0.1}

# Columns the streams write, besides whole inserted or deleted rows.
WRITTEN = {"customer": ("c_mktsegment",), "orders": ("o_custkey", "o_orderpriority", "o_comment"),
           "lineitem": ("l_quantity", "l_extendedprice")}

# Value domains from the TPC-H specification (section 4.2.2.13 and 4.2.3).
SEGMENTS = ("AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY")
PRIORITIES = ("1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW")
INSTRUCTIONS = ("DELIVER IN PERSON", "COLLECT COD", "NONE", "TAKE BACK RETURN")
MODES = ("REG AIR", "AIR", "RAIL", "SHIP", "TRUCK", "MAIL", "FOB")
TYPE_WORDS = (("STANDARD", "SMALL", "MEDIUM", "LARGE", "ECONOMY", "PROMO"),
              ("ANODIZED", "BURNISHED", "PLATED", "POLISHED", "BRUSHED"),
              ("TIN", "NICKEL", "BRASS", "STEEL", "COPPER"))
CONTAINER_WORDS = (("SM", "LG", "MED", "JUMBO", "WRAP"),
                   ("CASE", "BOX", "BAG", "JAR", "PKG", "PACK", "CAN", "DRUM"))
COLORS = ("almond", "antique", "aquamarine", "azure", "beige", "bisque", "black", "blanched", "blue",
          "blush", "brown", "burlywood", "burnished", "chartreuse", "chiffon", "chocolate", "coral",
          "cornflower", "cornsilk", "cream", "cyan", "dark", "deep", "dim", "dodger", "drab")
WORDS = ("furiously", "quickly", "carefully", "blithely", "slyly", "final", "regular", "express",
         "pending", "ironic", "bold", "special", "packages", "deposits", "requests", "accounts",
         "instructions", "theodolites", "foxes", "pinto", "beans", "sleep", "nag", "wake", "haggle")
START_DATE = datetime.date(1992, 1, 1).toordinal()
LAST_ORDER_DATE = datetime.date(1998, 8, 2).toordinal()  # ENDDATE - 151 days
CURRENT_DATE = datetime.date(1995, 6, 17).toordinal()


class KeyPool:
    """The keys that exist, with O(1) add, remove and pick (uniform, or Zipf over positions).

    Removal moves the last key into the freed position, so after deletions the hot positions
    are held by other (often recently added) keys: the skew stays, its victims change.
    """

    def __init__(self, keys: Iterable[Hashable] = ()):
        self.keys = list(keys)
        self.position = {k: i for i, k in enumerate(self.keys)}

    def __len__(self) -> int:
        return len(self.keys)

    def add(self, key: Hashable) -> None:
        self.position[key] = len(self.keys)
        self.keys.append(key)

    def remove(self, key: Hashable) -> None:
        i = self.position.pop(key)
        last = self.keys.pop()
        if i < len(self.keys):
            self.keys[i] = last
            self.position[last] = i

    def pick(self, rng: random.Random, zipf: float = 0.0) -> Hashable:
        n = len(self.keys)
        return self.keys[zipf_rank(rng, n, zipf) - 1 if zipf > 0 else rng.randrange(n)]


def zipf_rank(rng: random.Random, n: int, s: float) -> int:
    """A rank in 1..n with P(k) proportional to k**-s, in O(1) expected time for any n and s > 0.

    Rejection-inversion sampling (Hormann and Derflinger 1996, as in Apache Commons' Zipf
    sampler): no table over n, so it stays cheap while the pool grows and shrinks.
    """
    if n == 1:
        return 1

    def h_integral(x: float) -> float:
        log_x = math.log(x)
        return _expm1_over(-(s - 1.0) * log_x) * log_x

    def h(x: float) -> float:
        return math.exp(-s * math.log(x))

    def h_integral_inverse(x: float) -> float:
        t = max(x * (1.0 - s), -1.0)
        return math.exp(_log1p_over(t) * x)

    x1 = h_integral(1.5) - 1.0
    xn = h_integral(n + 0.5)
    shift = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0))
    while True:
        u = xn + rng.random() * (x1 - xn)
        x = h_integral_inverse(u)
        k = min(max(int(x + 0.5), 1), n)
        if k - x <= shift or u >= h_integral(k + 0.5) - h(k):
            return k


def _expm1_over(x: float) -> float:
    """expm1(x) / x, continuous at 0."""
    return math.expm1(x) / x if abs(x) > 1e-8 else 1.0 + x / 2.0


def _log1p_over(x: float) -> float:
    """log1p(x) / x, continuous at 0."""
    return math.log1p(x) / x if abs(x) > 1e-8 else 1.0 - x / 2.0


def retail_price(partkey: int) -> float:
    """P_RETAILPRICE as dbgen computes it from the part key (TPC-H 4.2.3)."""
    return (90000 + (partkey // 10) % 20001 + 100 * (partkey % 1000)) / 100


class InitialRows(ABC):
    """The rows an update stream starts from, as it reads them: every row of a small relation,
    and the orders with their line items one order at a time."""

    @abstractmethod
    def rows(self, relation: str) -> Iterable[tuple]:
        """Every row of `relation` (read once, when the stream starts)."""

    @abstractmethod
    def order_keys(self) -> list[int]:
        """The keys of the orders."""

    @abstractmethod
    def order(self, key: int) -> tuple:
        """The order with `key` (KeyError if there is none)."""

    @abstractmethod
    def lines(self, key: int) -> list[tuple]:
        """The line items of the order with `key`, as a new list."""

    # Whether the rows are read from files (rather than held): the stream then keeps the orders it
    # picks in a file as well (`Spilled`), so that its memory stays what it was at the start.
    on_disk = False


class RowLists(InitialRows):
    """Initial rows held in memory, as lists per relation."""

    def __init__(self, catalog: Catalog, data: Mapping[str, list[tuple]]):
        orders, lines = catalog.relation("orders"), catalog.relation("lineitem")
        self._data = data
        self._orders = {orders.key_of(r)[0]: tuple(r) for r in data.get("orders", [])}
        self._lines: dict[int, list[tuple]] = {}
        at = lines.index("l_orderkey")
        for r in data.get("lineitem", []):
            self._lines.setdefault(r[at], []).append(tuple(r))

    def rows(self, relation: str) -> Iterable[tuple]:
        return (tuple(r) for r in self._data.get(relation, []))

    def order_keys(self) -> list[int]:
        return list(self._orders)

    def order(self, key: int) -> tuple:
        return self._orders[key]

    def lines(self, key: int) -> list[tuple]:
        return list(self._lines.get(key, []))


class Fetched(MutableMapping):
    """Rows by key, read with `fetch(key)` the first time one is asked for and kept from then on
    (the stream changes them; what it changes in a value it stores back), in memory or, with
    `spill`, in a file (`Spilled`); the stream's key pools say which keys exist."""

    def __init__(self, fetch: Callable[[Hashable], object], spill: bool = False):
        self._fetch = fetch
        self._kept: MutableMapping = Spilled() if spill else {}

    def __getitem__(self, key):
        try:
            return self._kept[key]
        except KeyError:
            value = self._kept[key] = self._fetch(key)
            return value

    def __setitem__(self, key, value) -> None:
        self._kept[key] = value

    def __delitem__(self, key) -> None:
        self[key]   # fetched first: a key never read still exists
        del self._kept[key]

    def __iter__(self):
        return iter(self._kept)

    def __len__(self) -> int:
        return len(self._kept)


class Spilled(MutableMapping):
    """Values by integer key in a SQLite file of this process's own (removed with it), pickled:
    a few tens of microseconds a read or write, and the page cache's memory however many there are."""

    def __init__(self, items: Iterable[tuple] = ()):
        """`items`: (key, value) pairs to start with."""
        self._folder = tempfile.TemporaryDirectory(prefix="fedlab-stream-")
        self._db = sqlite3.connect(os.path.join(self._folder.name, "rows.sqlite"), check_same_thread=False)
        self._db.executescript("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;"
                               "CREATE TABLE kept (key INTEGER PRIMARY KEY, value BLOB NOT NULL)")
        self._db.executemany("INSERT INTO kept VALUES (?, ?)", ((k, pickle.dumps(v)) for k, v in items))

    def __getitem__(self, key):
        row = self._db.execute("SELECT value FROM kept WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise KeyError(key)
        return pickle.loads(row[0])

    def __setitem__(self, key, value) -> None:
        self._db.execute("INSERT OR REPLACE INTO kept VALUES (?, ?)", (key, pickle.dumps(value)))

    def __delitem__(self, key) -> None:
        if self._db.execute("DELETE FROM kept WHERE key = ?", (key,)).rowcount == 0:
            raise KeyError(key)

    def __iter__(self):
        return (key for key, in self._db.execute("SELECT key FROM kept ORDER BY key").fetchall())

    def __len__(self) -> int:
        return self._db.execute("SELECT count(*) FROM kept").fetchone()[0]


class UpdateStream:
    """Deterministic (per seed) stream of valid TPC-H update transactions; see the module doc."""

    def __init__(self, catalog: Catalog, data: Mapping[str, list[tuple]] | InitialRows,
                 mix: Mapping[str, float] | None = None, seed: int = 0, zipf: float = 0.0, txn_prefix: str = "w"):
        if zipf < 0:
            raise ValueError(f"zipf must be >= 0 (0 is uniform), got {zipf}")
        self.catalog = catalog
        self.zipf = zipf
        self.txn_prefix = txn_prefix
        self.last_stream: str | None = None
        self._names, self._cum = _weights(mix if mix is not None else MIXED)
        self._rng = random.Random(seed)
        self._count = 0
        self._pending: deque[tuple[str, TransactionRequest, str]] = deque()
        _validate_writable(catalog)
        self._rel = {name: catalog.relation(name) for name in ("customer", "orders", "lineitem", "part",
                                                                  "partsupp", "nation")}
        self._col = {name: {c: i for i, c in enumerate(rel.columns)} for name, rel in self._rel.items()}
        self._load(data if isinstance(data, InitialRows) else RowLists(catalog, data))

    # -- the picture of what exists ----------------------------------------------------------

    def _load(self, initial: InitialRows) -> None:
        """The key pools and the small relations' rows at once; orders and line items on demand."""
        cust, ps, part = self._rel["customer"], self._rel["partsupp"], self._rel["part"]
        customers = {cust.key_of(r)[0]: r for r in initial.rows("customer")}
        at = [ps.index(c) for c in ("ps_partkey", "ps_suppkey")]
        self._supply = [tuple(r[i] for i in at) for r in initial.rows("partsupp")]
        self._nations = sorted(self._rel["nation"].key_of(r)[0] for r in initial.rows("nation"))
        for name, rows in (("customer", customers), ("partsupp", self._supply), ("nation", self._nations)):
            if not rows:
                raise ModelError(f"workload: the initial data has no {name} rows; the streams need some")
        self._customer_pool = KeyPool(sorted(customers))
        self._next_custkey = max(customers) + 1
        # new_parent adds customers for as long as the stream runs (an hour at 200 txn/s: 36,000,
        # twice SF 0.1's): a stream over files on disk spills them, as it does orders.
        self._customers: MutableMapping = Spilled(customers.items()) if initial.on_disk else customers
        order_keys = sorted(initial.order_keys())
        self._order_pool = KeyPool(order_keys)
        self._orders = Fetched(initial.order, spill=initial.on_disk)
        self._lines = Fetched(initial.lines, spill=initial.on_disk)
        self._next_orderkey = max(order_keys, default=0) + 1
        self._next_partkey = max((part.key_of(r)[0] for r in initial.rows("part")), default=0) + 1

    # -- emitting ----------------------------------------------------------------------------

    def next(self) -> tuple[str, TransactionRequest]:
        """The next transaction and the source that must commit it."""
        if not self._pending:
            self._pending.extend(self._draw())
        source, request, stream = self._pending.popleft()
        self.last_stream = stream
        return source, request

    def __iter__(self):
        return self

    def __next__(self) -> tuple[str, TransactionRequest]:
        return self.next()

    def _draw(self) -> list[tuple[str, TransactionRequest, str]]:
        """Draws streams by weight until one can act (delete_order needs an order, ...)."""
        for _ in range(64):
            stream = self._rng.choices(self._names, cum_weights=self._cum)[0]
            parts = getattr(self, "_" + stream)()
            if parts:
                return [(source, request, stream) for source, request in self._split(parts)]
        raise RuntimeError(f"workload: none of the streams {', '.join(self._names)} can act on the "
                           "current data (no orders or customers left?)")

    def _split(self, parts: list[tuple[str, str, list]]) -> list[tuple[str, TransactionRequest]]:
        """(relation, kind, rows) changes -> one request per source, in order of first appearance."""
        by_source: dict[str, TransactionRequest] = {}
        for relation, kind, rows in parts:
            source = self._rel[relation].source
            if source not in by_source:
                self._count += 1
                by_source[source] = TransactionRequest(f"{self.txn_prefix}{self._count}")
            getattr(by_source[source], kind).setdefault(self._rel[relation].name, []).extend(rows)
        return list(by_source.items())

    def _pick_order(self) -> int | None:
        return self._order_pool.pick(self._rng, self.zipf) if self._order_pool else None

    def _pick_customer(self) -> int:
        return self._customer_pool.pick(self._rng, self.zipf)

    def _replace(self, relation: str, row: tuple, **values) -> tuple:
        new = list(row)
        for column, value in values.items():
            new[self._col[relation][column]] = value
        return tuple(new)

    def _build(self, relation: str, values: dict) -> tuple:
        """A row of `relation` in catalog column order from column -> value."""
        return tuple(values[c] for c in self._rel[relation].columns)

    # -- the streams: each returns [(relation, "inserts"|"deletes"|"modifies", rows)] or None -

    def _new_order(self):
        rng = self._rng
        orderkey = self._next_orderkey
        self._next_orderkey += 1
        orderdate = rng.randint(START_DATE, LAST_ORDER_DATE)
        lines = [self._new_line(orderkey, n, orderdate) for n in range(1, rng.randint(1, 7) + 1)]
        col = self._col["lineitem"]
        statuses = {line[col["l_linestatus"]] for line in lines}
        total = sum(line[col["l_extendedprice"]] * (1 + line[col["l_tax"]]) * (1 - line[col["l_discount"]])
                    for line in lines)
        order = self._build("orders", {
            "o_orderkey": orderkey, "o_custkey": self._pick_customer(),
            "o_orderstatus": statuses.pop() if len(statuses) == 1 else "P",
            "o_totalprice": round(total, 2), "o_orderdate": _iso(orderdate),
            "o_orderpriority": rng.choice(PRIORITIES), "o_clerk": f"Clerk#{rng.randint(1, 1000):09d}",
            "o_shippriority": 0, "o_comment": self._text()})
        self._orders[orderkey] = order
        self._order_pool.add(orderkey)
        self._lines[orderkey] = lines
        return [("orders", "inserts", [order]), ("lineitem", "inserts", lines)]

    def _new_line(self, orderkey: int, linenumber: int, orderdate: int) -> tuple:
        rng = self._rng
        partkey, suppkey = rng.choice(self._supply)
        quantity = rng.randint(1, 50)
        ship = orderdate + rng.randint(1, 121)
        receipt = ship + rng.randint(1, 30)
        return self._build("lineitem", {
            "l_orderkey": orderkey, "l_partkey": partkey, "l_suppkey": suppkey, "l_linenumber": linenumber,
            "l_quantity": float(quantity), "l_extendedprice": round(quantity * retail_price(partkey), 2),
            "l_discount": rng.randint(0, 10) / 100, "l_tax": rng.randint(0, 8) / 100,
            "l_returnflag": rng.choice("RA") if receipt <= CURRENT_DATE else "N",
            "l_linestatus": "O" if ship > CURRENT_DATE else "F",
            "l_shipdate": _iso(ship), "l_commitdate": _iso(orderdate + rng.randint(30, 90)),
            "l_receiptdate": _iso(receipt), "l_shipinstruct": rng.choice(INSTRUCTIONS),
            "l_shipmode": rng.choice(MODES), "l_comment": self._text()})

    def _delete_order(self):
        orderkey = self._pick_order()
        if orderkey is None:
            return None
        self._order_pool.remove(orderkey)
        order = self._orders.pop(orderkey)
        lines = self._lines.pop(orderkey)
        return ([("lineitem", "deletes", lines)] if lines else []) + [("orders", "deletes", [order])]

    def _modify_selection(self):
        if self._rng.random() < 0.5:
            key = self._pick_customer()
            old = self._customers[key]
            segment = old[self._col["customer"]["c_mktsegment"]]
            new = self._replace("customer", old, c_mktsegment=self._other(SEGMENTS, segment))
            self._customers[key] = new
            return [("customer", "modifies", [Modification(old, new)])]
        key = self._pick_order()
        if key is None:
            return None
        old = self._orders[key]
        priority = old[self._col["orders"]["o_orderpriority"]]
        return self._modify_order(key, o_orderpriority=self._other(PRIORITIES, priority))

    def _modify_join(self):
        key = self._pick_order()
        if key is None or len(self._customer_pool) < 2:
            return None
        current = self._orders[key][self._col["orders"]["o_custkey"]]
        custkey = self._pick_customer()
        while custkey == current:
            custkey = self._pick_customer()
        return self._modify_order(key, o_custkey=custkey)

    def _modify_other(self):
        key = self._pick_order()
        if key is None:
            return None
        lines = self._lines[key]
        if not lines or self._rng.random() < 0.5:
            return self._modify_order(key, o_comment=self._text())
        i = self._rng.randrange(len(lines))
        old = lines[i]
        col = self._col["lineitem"]
        quantity = old[col["l_quantity"]]
        new_quantity = float(self._other(range(1, 51), int(quantity)))
        price = round(new_quantity * retail_price(old[col["l_partkey"]]), 2)
        lines[i] = self._replace("lineitem", old, l_quantity=new_quantity, l_extendedprice=price)
        self._lines[key] = lines   # a spilled picture holds a copy
        return [("lineitem", "modifies", [Modification(old, lines[i])])]

    def _modify_order(self, key: int, **values):
        old = self._orders[key]
        new = self._orders[key] = self._replace("orders", old, **values)
        return [("orders", "modifies", [Modification(old, new)])]

    def _new_parent(self):
        return self._new_customer() if self._rng.random() < 0.5 else self._new_part()

    def _new_customer(self):
        rng = self._rng
        key = self._next_custkey
        self._next_custkey += 1
        nation = rng.choice(self._nations)
        row = self._build("customer", {
            "c_custkey": key, "c_name": f"Customer#{key:09d}", "c_address": self._text(2),
            "c_nationkey": nation, "c_phone": _phone(rng, nation),
            "c_acctbal": rng.randint(-99999, 999999) / 100, "c_mktsegment": rng.choice(SEGMENTS),
            "c_comment": self._text()})
        self._customers[key] = row
        self._customer_pool.add(key)
        return [("customer", "inserts", [row])]

    def _new_part(self):
        rng = self._rng
        key = self._next_partkey
        self._next_partkey += 1
        m = rng.randint(1, 5)
        row = self._build("part", {
            "p_partkey": key, "p_name": " ".join(rng.sample(COLORS, 5)), "p_mfgr": f"Manufacturer#{m}",
            "p_brand": f"Brand#{m}{rng.randint(1, 5)}", "p_type": " ".join(map(rng.choice, TYPE_WORDS)),
            "p_size": rng.randint(1, 50), "p_container": " ".join(map(rng.choice, CONTAINER_WORDS)),
            "p_retailprice": retail_price(key), "p_comment": self._text()})
        return [("part", "inserts", [row])]

    def _other(self, choices, current):
        """A value of `choices` other than `current`."""
        value = current
        while value == current:
            value = self._rng.choice(choices)
        return value

    def _text(self, words: int = 4) -> str:
        return " ".join(self._rng.choices(WORDS, k=words))


def _iso(ordinal: int) -> str:
    return datetime.date.fromordinal(ordinal).isoformat()


def _phone(rng: random.Random, nation: int) -> str:
    return f"{nation + 10}-{rng.randint(100, 999)}-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"


def _weights(mix: Mapping[str, float]) -> tuple[list[str], list[float]]:
    """Stream names with positive weight and their cumulative weights; ValueError on a bad mix."""
    unknown = [name for name in mix if name not in STREAMS]
    if unknown:
        raise ValueError(f"workload: unknown stream {unknown[0]!r}; choose among {', '.join(STREAMS)}")
    if any(not w >= 0 for w in mix.values()):
        raise ValueError(f"workload: stream weights must be >= 0, got {dict(mix)}")
    names = [name for name in STREAMS if mix.get(name, 0) > 0]
    if not names:
        raise ValueError("workload: the mix gives no stream a positive weight")
    return names, list(accumulate(mix[name] for name in names))


def _validate_writable(catalog: Catalog) -> None:
    """Refuses a catalog that binds a column the streams modify by a declared FD or RI constraint,
    which a source would then enforce against the streams. o_custkey is exempt: modify_join
    only ever points an order at an existing customer."""
    bound = {(fd.relation.lower(), c) for fd in catalog.fds for c in fd.lhs + fd.rhs}
    for ri in catalog.ri:
        bound |= {(ri.parent.lower(), c) for c in ri.parent_columns}
        bound |= {(ri.child.lower(), c) for c in ri.columns}
    bound.discard(("orders", "o_custkey"))
    for relation, columns in WRITTEN.items():
        for column in columns:
            if (relation, column) in bound:
                raise ModelError(f"workload: {relation}.{column} is bound by a declared constraint, "
                                 "which the update streams would break")


@dataclass(frozen=True)
class Workload:
    """A named mix of streams and skew; `stream()` starts one over a catalog and its data."""

    name: str
    mix: Mapping[str, float] = field(default_factory=lambda: dict(MIXED))
    zipf: float = 0.0

    def stream(self, catalog: Catalog, data: Mapping[str, list[tuple]] | InitialRows, seed: int = 0) -> UpdateStream:
        return UpdateStream(catalog, data, self.mix, seed, self.zipf)

    @staticmethod
    def named(name: str) -> "Workload":
        try:
            return WORKLOADS[name]
        except KeyError:
            raise ValueError(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}") from None


WORKLOADS: dict[str, Workload] = {
    "rf": Workload("rf", {"new_order": 0.5, "delete_order": 0.5}),
    "mixed": Workload("mixed", dict(MIXED)),
    "skewed": Workload("skewed", dict(MIXED), zipf=1.1),
}
