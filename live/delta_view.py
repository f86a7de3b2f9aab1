"""`fedlab view RUN_DIR`: the view a run left in Delta, as a Spark reader sees it.

It reads the warehouse's Delta store (warehouse.store.delta_store: the view's base plus the
journal's deltas above it, the snapshot read) as of its last committed batch and prints the
batch, the source versions it reflects (each source's applied DSV), the row count and the rows
with their multiplicity, sorted; `--limit` bounds the rows shown, `--json` prints one object.
`--as-of TIME` (seconds since the epoch) prints the view as of that wall time instead: the last
batch's view plus its timed view delta up to TIME (DeltaViewStore.view_as_of; only the salem
algorithm keeps one, and only times between the view's point and the delta's reach are readable).
For an aggregate view (fedmodel.aggregate_view) or an outer-join one (fedmodel.outer_join_view)
Delta holds its join, which it prints as the user's view: aggregated, or without the padded rows
that larger terms' rows subsume.
The run file (live.runfile) says where the store is. A run directory without a run file or
a store is refused with one line and exit status 2, before Spark starts; so is a store that
cannot answer --as-of (after Spark started).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from fedlab.fedmodel.aggregate_view import AggregateView, parse_query
from fedlab.fedmodel.outer_join_view import OuterJoinView
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.live.runfile import RunFile
from fedlab.warehouse.core.aggregate_state import user_view

SHOWN_ROWS = 20


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a live run's directory (it holds run.json)")
    parser.add_argument("--limit", type=int, default=SHOWN_ROWS, metavar="N",
                        help=f"rows to print (default {SHOWN_ROWS}; 0: all)")
    parser.add_argument("--json", action="store_true", help="print one JSON object: batch, versions, rows")
    parser.add_argument("--view", metavar="NAME", help="one of the run's views, by its name in the run file "
                        "(default: the first)")
    parser.add_argument("--as-of", type=float, default=None, metavar="TIME",
                        help="the view as of this wall time (seconds since the epoch), from the salem "
                             "algorithm's timed view delta")


def main(args) -> int:
    try:
        if args.limit < 0:
            raise ModelError(f"--limit must be 0 (all) or a positive number of rows, got {args.limit}")
        run = RunFile.read(Path(args.run_dir), getattr(args, "view", None))
        store_dir = _store_dir(Path(args.run_dir), run)
        shown = read(store_dir, parse_query(run.view_sql, run.catalog), getattr(args, "as_of", None))
    except ModelError as err:
        print(f"fedlab view: {err}", file=sys.stderr)
        return 2
    rows = shown["rows"][:args.limit or None]
    if args.json:
        print(json.dumps({**shown, "rows": [[*row, count] for row, count in rows]}, default=str))
        return 0
    total = sum(count for _, count in shown["rows"])
    reflecting = f"reflecting {versions_text(shown['versions'])}" if shown.get("as_of") is None else \
        f"as of time {shown['as_of']} (the view at {versions_text(shown['versions'])} plus its view delta)"
    print(f"{store_dir}: batch {shown['batch']}, {reflecting}; "
          f"{len(shown['rows'])} rows ({total} with multiplicity)")
    print("\t".join([*shown["columns"], "count"]))
    for row, count in rows:
        print("\t".join("NULL" if v is None else str(v) for v in (*row, count)))
    if len(rows) < len(shown["rows"]):
        print(f"... {len(shown['rows']) - len(rows)} more rows (--limit 0 prints all)")
    return 0


def read(store_dir: str, view: ViewDef | AggregateView | OuterJoinView, as_of: float | None = None) -> dict:
    """`view` as of the store's last batch, or as of wall time `as_of` read from it:
    {columns, batch, versions, rows: [(row, count)] sorted} (and as_of, if given)."""
    from fedlab.live.environment import warehouse_spark
    from fedlab.warehouse.spark_session import on_object_store
    from fedlab.warehouse.store.delta_store import DeltaViewStore, StoreError

    # the run's directory is only read
    spark = warehouse_spark(tempfile.mkdtemp(prefix="fedlab-view-"), object_store=on_object_store(store_dir))
    try:
        store = DeltaViewStore.at(spark, store_dir)
        batch = store.newest_batch()   # pinned: a running warehouse may commit more meanwhile
        rows = store.read_view(batch) if as_of is None else store.view_as_of(as_of, batch)
        state = store.read_version_state(batch)
    except StoreError as err:
        raise ModelError(f"{store_dir}: {err}") from None
    versions = {source: fields.get("applied_dsv") for source, fields in state.get("sources", {}).items()}
    rows = user_view(view, rows).rows()
    shown = {"columns": list(view.output_names), "batch": batch, "versions": versions,
             "rows": sorted(rows.items(), key=lambda kv: tuple((v is None, v) for v in kv[0]))}   # NULLs last
    return shown if as_of is None else {**shown, "as_of": as_of}


def _store_dir(run_dir: Path, run: RunFile) -> str:
    if run.warehouse_delta is None:
        raise ModelError(f"{run_dir}: the run file names no Delta store (a run file older than `fedlab view`)")
    if "://" not in run.warehouse_delta and not (Path(run.warehouse_delta) / "view").is_dir():
        raise ModelError(f"{run_dir}: no Delta view at {run.warehouse_delta} (did the warehouse start?)")
    return run.warehouse_delta


def versions_text(versions: dict) -> str:
    """`ds1 DSV 40, ds2 DSV 12`: a vector of source versions as the commands print one."""
    return ", ".join(f"{source} DSV {dsv}" for source, dsv in sorted(versions.items())) or "no source"
