"""The TPC-H federation: its catalog over several sources, its data from `tpchgen-cli`, its views.

`tpch_catalog(placement)` declares the eight TPC-H relations with their real columns and keys,
placed over sources (by default an order-entry source "sales", a "procurement" source for parts
and suppliers, and a "reference" source for nations and regions). A foreign key becomes a
referential-integrity constraint only when both of its relations sit at the same source, since
a source can enforce constraints over its own relations only.

`generate(scale, out_dir)` runs the `tpchgen-cli` console script installed next to the Python
interpreter, caches its output in `out_dir`, and returns the rows as tuples in catalog column
order (DECIMAL as float, DATE as an ISO string); `tpch_data(scale)` is that, cached under
.cache/tpch/sf<scale> for every live run and load driver. `load_view(name)` returns one of the view
definitions in loadgen/views/.
"""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys
from array import array
from bisect import bisect_left
from pathlib import Path
from typing import Callable, Iterable, Iterator

from fedlab.fedmodel.catalog import Catalog, ReferentialIntegrity, Relation
from fedlab.fedmodel.errors import ModelError
from fedlab.loadgen import view_files
from fedlab.loadgen.workload import InitialRows

VIEWS_DIR = Path(__file__).with_name("views")

DEFAULT_PLACEMENT: dict[str, list[str]] = {
    "sales": ["customer", "orders", "lineitem"],
    "procurement": ["part", "partsupp", "supplier"],
    "reference": ["nation", "region"],
}

# name -> (columns with their types, in the order tpchgen-cli writes them; key)
SCHEMA: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "region": ((("r_regionkey", "BIGINT"), ("r_name", "VARCHAR"), ("r_comment", "VARCHAR")),
               ("r_regionkey",)),
    "nation": ((("n_nationkey", "BIGINT"), ("n_name", "VARCHAR"), ("n_regionkey", "BIGINT"),
                ("n_comment", "VARCHAR")),
               ("n_nationkey",)),
    "supplier": ((("s_suppkey", "BIGINT"), ("s_name", "VARCHAR"), ("s_address", "VARCHAR"),
                  ("s_nationkey", "BIGINT"), ("s_phone", "VARCHAR"), ("s_acctbal", "DOUBLE"),
                  ("s_comment", "VARCHAR")),
                 ("s_suppkey",)),
    "customer": ((("c_custkey", "BIGINT"), ("c_name", "VARCHAR"), ("c_address", "VARCHAR"),
                  ("c_nationkey", "BIGINT"), ("c_phone", "VARCHAR"), ("c_acctbal", "DOUBLE"),
                  ("c_mktsegment", "VARCHAR"), ("c_comment", "VARCHAR")),
                 ("c_custkey",)),
    "part": ((("p_partkey", "BIGINT"), ("p_name", "VARCHAR"), ("p_mfgr", "VARCHAR"),
              ("p_brand", "VARCHAR"), ("p_type", "VARCHAR"), ("p_size", "BIGINT"),
              ("p_container", "VARCHAR"), ("p_retailprice", "DOUBLE"), ("p_comment", "VARCHAR")),
             ("p_partkey",)),
    "partsupp": ((("ps_partkey", "BIGINT"), ("ps_suppkey", "BIGINT"), ("ps_availqty", "BIGINT"),
                  ("ps_supplycost", "DOUBLE"), ("ps_comment", "VARCHAR")),
                 ("ps_partkey", "ps_suppkey")),
    "orders": ((("o_orderkey", "BIGINT"), ("o_custkey", "BIGINT"), ("o_orderstatus", "VARCHAR"),
                ("o_totalprice", "DOUBLE"), ("o_orderdate", "DATE"), ("o_orderpriority", "VARCHAR"),
                ("o_clerk", "VARCHAR"), ("o_shippriority", "BIGINT"), ("o_comment", "VARCHAR")),
               ("o_orderkey",)),
    "lineitem": ((("l_orderkey", "BIGINT"), ("l_partkey", "BIGINT"), ("l_suppkey", "BIGINT"),
                  ("l_linenumber", "BIGINT"), ("l_quantity", "DOUBLE"), ("l_extendedprice", "DOUBLE"),
                  ("l_discount", "DOUBLE"), ("l_tax", "DOUBLE"), ("l_returnflag", "VARCHAR"),
                  ("l_linestatus", "VARCHAR"), ("l_shipdate", "DATE"), ("l_commitdate", "DATE"),
                  ("l_receiptdate", "DATE"), ("l_shipinstruct", "VARCHAR"), ("l_shipmode", "VARCHAR"),
                  ("l_comment", "VARCHAR")),
                 ("l_orderkey", "l_linenumber")),
}

# The TPC-H foreign keys (specification 1.4.2): child, its columns, parent, the parent's key.
FOREIGN_KEYS: tuple[ReferentialIntegrity, ...] = (
    ReferentialIntegrity("nation", ("n_regionkey",), "region", ("r_regionkey",)),
    ReferentialIntegrity("supplier", ("s_nationkey",), "nation", ("n_nationkey",)),
    ReferentialIntegrity("customer", ("c_nationkey",), "nation", ("n_nationkey",)),
    ReferentialIntegrity("partsupp", ("ps_partkey",), "part", ("p_partkey",)),
    ReferentialIntegrity("partsupp", ("ps_suppkey",), "supplier", ("s_suppkey",)),
    ReferentialIntegrity("orders", ("o_custkey",), "customer", ("c_custkey",)),
    ReferentialIntegrity("lineitem", ("l_orderkey",), "orders", ("o_orderkey",)),
    ReferentialIntegrity("lineitem", ("l_partkey", "l_suppkey"), "partsupp", ("ps_partkey", "ps_suppkey")),
    ReferentialIntegrity("lineitem", ("l_partkey",), "part", ("p_partkey",)),
    ReferentialIntegrity("lineitem", ("l_suppkey",), "supplier", ("s_suppkey",)),
)

TABLES = tuple(SCHEMA)


def tpch_catalog(placement: dict[str, list[str]] | None = None) -> Catalog:
    """The TPC-H catalog with each relation at its source; RI only for same-source foreign keys.

    `placement` maps a source name to the relations it holds; every TPC-H relation must be placed
    exactly once. Raises ModelError otherwise.
    """
    source_of = _source_of(placement or DEFAULT_PLACEMENT)
    relations = tuple(
        Relation(name, source_of[name], tuple(c for c, _ in cols), tuple(t for _, t in cols), key)
        for name, (cols, key) in SCHEMA.items())
    ri = tuple(fk for fk in FOREIGN_KEYS if source_of[fk.child] == source_of[fk.parent])
    return Catalog(relations, (), ri)


def _source_of(placement: dict[str, list[str]]) -> dict[str, str]:
    """relation -> source, checking that the placement covers each TPC-H relation once."""
    source_of: dict[str, str] = {}
    for source, names in placement.items():
        for name in names:
            rel = str(name).lower()
            if rel not in SCHEMA:
                raise ModelError(f"placement: {name!r} is not a TPC-H relation (one of {', '.join(TABLES)})")
            if rel in source_of:
                raise ModelError(f"placement: {rel} is placed at both {source_of[rel]} and {source}")
            source_of[rel] = str(source)
    missing = [t for t in TABLES if t not in source_of]
    if missing:
        raise ModelError(f"placement: no source holds {', '.join(missing)}")
    return source_of


def tpchgen_path() -> str:
    """The `tpchgen-cli` console script of this interpreter's environment (the venv's bin/)."""
    path = Path(sys.executable).with_name("tpchgen-cli")
    if not path.exists():
        raise FileNotFoundError(f"tpchgen-cli is not installed next to {sys.executable}; "
                                "install the tpchgen-cli package into this environment")
    return str(path)


MARKER = "fedlab-tpch.json"
DEFAULT_DATA_DIR = ".cache/tpch"   # the cache of generations, one folder per scale


def generate(scale: float, out_dir: str, seed: int | None = None) -> dict[str, list[tuple]]:
    """TPC-H data at `scale` as rows per relation, generated into `out_dir` or reused from it.

    The data is dbgen's, a fixed function of the scale factor: `tpchgen-cli` takes no seed, so
    `seed` does not change the rows (it is accepted so that callers can pass a run's seed
    uniformly). Output is the pipe-separated .tbl format, which parses faster into Python tuples
    than Parquet does (its DECIMAL columns would need a lossy cast) and keeps values exact.
    """
    del seed  # dbgen's data depends on the scale factor only
    out = ensure_generated(scale, out_dir)
    return {name: list(_unique_keys(name, read_tbl(out / f"{name}.tbl", name))) for name in TABLES}


def tpch_data(scale: float, data_dir: str | None = None) -> dict[str, list[tuple]]:
    """TPC-H rows at `scale`, generated once into <data_dir>/sf<scale> and reused."""
    return generate(scale, tpch_folder(scale, data_dir))


def tpch_folder(scale: float, data_dir: str | None = None) -> Path:
    """Where the TPC-H generation at `scale` is cached (ensure_generated fills it)."""
    return Path(data_dir or DEFAULT_DATA_DIR).resolve() / f"sf{scale}"


def ensure_generated(scale: float, out_dir: str | os.PathLike) -> Path:
    """`out_dir`, holding dbgen's .tbl files at `scale` (generated unless cached there already)."""
    if not scale > 0:
        raise ValueError(f"scale factor must be positive, got {scale}")
    out = Path(out_dir)
    if not _cached(out, scale):
        _run_tpchgen(scale, out)
    return out


def _unique_keys(relation: str, rows: Iterable[tuple]) -> Iterator[tuple]:
    """The rows with the first of each key kept: below scale 0.01 dbgen's partsupp repeats
    (partkey, suppkey) pairs (its supplier formula wraps around so few suppliers), which the
    sources' PRIMARY KEY would reject."""
    columns, key = SCHEMA[relation]
    positions = [[c for c, _ in columns].index(k) for k in key]
    seen = set()
    for row in rows:
        k = tuple(row[i] for i in positions)
        if k not in seen:
            seen.add(k)
            yield row


def _cached(out: Path, scale: float) -> bool:
    """True if `out` holds a complete generation for this scale factor (written by _run_tpchgen)."""
    try:
        marker = json.loads((out / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("scale") == scale and all((out / f"{t}.tbl").exists() for t in TABLES)


def _run_tpchgen(scale: float, out: Path) -> None:
    """Runs tpchgen-cli into `out`; the marker is written last so an interrupted run is redone."""
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).unlink(missing_ok=True)
    cmd = [tpchgen_path(), "tbl", "--scale-factor", repr(scale), "--output-dir", str(out),
           "--overwrite", "--quiet", "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"tpchgen-cli failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    (out / MARKER).write_text(json.dumps({"scale": scale, "format": "tbl", "tables": list(TABLES)}))


_CONVERT = {"BIGINT": int, "DOUBLE": float, "VARCHAR": str, "DATE": str}


def read_tbl(path: str | os.PathLike, relation: str) -> list[tuple]:
    """The rows of one dbgen .tbl file (`a|b|c|` per line), converted to the catalog's types."""
    with open(path, encoding="utf-8") as f:
        return _parse(relation, f)


def _parse(relation: str, lines: Iterable[str]) -> list[tuple]:
    return list(map(_line_parser(relation), lines))


def _line_parser(relation: str) -> Callable[[str], tuple]:
    """One .tbl line of `relation` -> its row in the catalog's types."""
    converters = [_CONVERT[t] for _, t in SCHEMA[relation][0]]
    call = operator.call
    # map() stops at the shorter input, which drops the empty field after the trailing '|'
    return lambda line: tuple(map(call, converters, line.split("|")))


class TblRows(InitialRows):
    """A generation's rows read from its .tbl files as an update stream asks for them: a small
    relation whole, an order and its line items by the order's key, at byte offsets indexed once
    (dbgen writes orders.tbl and lineitem.tbl in order-key order). A load driver at SF 1 then holds
    three arrays of 1.5M numbers instead of 7.5M rows (7 GB of Python tuples). `orders` > 0 keeps
    the first that many orders, as sample_orders does."""

    on_disk = True

    def __init__(self, folder: str | os.PathLike, orders: int = 0):
        self.folder = Path(folder)
        self._keys, self._order_at = self._index("orders", orders)
        self._line_keys, self._lines_at = self._index("lineitem")
        self._files = {name: open(self.folder / f"{name}.tbl", "rb") for name in ("orders", "lineitem")}

    def _index(self, relation: str, limit: int = 0) -> tuple[array, array]:
        """The order keys of `relation`'s file, each once, and the offset of its first line;
        the file's end closes the last one."""
        keys, offsets, offset = array("q"), array("q"), 0
        with open(self.folder / f"{relation}.tbl", "rb") as f:
            for line in f:
                key = int(line[:line.index(b"|")])
                if not keys or key != keys[-1]:
                    if keys and key < keys[-1]:
                        raise ModelError(f"{self.folder / relation}.tbl is not in order-key order at key {key}")
                    if limit and len(keys) == limit:
                        break
                    keys.append(key)
                    offsets.append(offset)
                offset += len(line)
        offsets.append(offset)
        return keys, offsets

    def _read(self, relation: str, keys: array, offsets: array, key: int) -> list[tuple]:
        i = bisect_left(keys, key)
        if i == len(keys) or keys[i] != key:
            return []
        f = self._files[relation]
        f.seek(offsets[i])
        return _parse(relation, f.read(offsets[i + 1] - offsets[i]).decode("utf-8").splitlines())

    def rows(self, relation: str) -> Iterator[tuple]:
        with open(self.folder / f"{relation}.tbl", encoding="utf-8") as f:
            yield from _unique_keys(relation, map(_line_parser(relation), f))

    def order_keys(self) -> list[int]:
        return list(self._keys)

    def order(self, key: int) -> tuple:
        found = self._read("orders", self._keys, self._order_at, key)
        if not found:
            raise KeyError(key)
        return found[0]

    def lines(self, key: int) -> list[tuple]:
        return self._read("lineitem", self._line_keys, self._lines_at, key)


def sample_orders(data: dict[str, list[tuple]], orders: int) -> dict[str, list[tuple]]:
    """A smaller federation that still satisfies every foreign key: the first `orders` orders,
    their line items, and all of the (much smaller) other relations."""
    kept = data["orders"][:orders]
    keys = {row[0] for row in kept}
    return {**data, "orders": kept, "lineitem": [row for row in data["lineitem"] if row[0] in keys]}


def view_names() -> list[str]:
    """The names of the view definitions shipped in loadgen/views/ (file names without .sql)."""
    return view_files.names(VIEWS_DIR)


def load_view(name: str) -> str:
    """The SQL of the named view, parsed before anything starts (loadgen.view_files.load)."""
    return view_files.load(VIEWS_DIR, name, tpch_catalog(), "TPC-H", VIEWS_DIR.parents[1])
