"""`fedlab check RUN_DIR`: the consistency level a live run kept, judged from the files it left.

The run file (loadgen.runfile) says where the two sides of the history are:
- each source's committed transactions, from its DuckDB file: the log (outbox) holds every
  notification from DSV 2 on, with full row images; the source's initial state is its final
  state with the log undone, newest first;
- the warehouse's view states, from its ChangeHistory files: the view it materialised first
  (initial_view.json, at some source versions) and each applied transaction's delta and version
  vector (changes.jsonl); the states are the cumulative sums.
The verdict comes from loadgen.checker (a DuckDB oracle over the sources' histories that shares
no code with the maintenance path). Sources must be stopped: a running source holds its file.

Exit status: 0 when the level asked for with --expect (default complete) holds, 1 when it does
not, 2 when the history cannot be read.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import duckdb

from fedmodel.catalog import Catalog
from fedmodel.errors import ModelError
from fedmodel.transactions import Notification
from loadgen.checker.levels import Verdict, classify
from loadgen.checker.oracle import Oracle
from loadgen.runfile import RunFile
from loadgen.scenario import LEVELS
from source_node.store import DuckDBStore

ALIASES = {"convergent": "convergence"}   # the Helm chart's spelling (run.expect)
SHOWN_ROWS = 20                            # rows per list in the text report


class HistoryError(ModelError):
    """A run whose history cannot be read (exit status 2)."""


@dataclass
class LiveHistory:
    """Both sides of a live run's history, in the checker's terms."""

    run: RunFile
    initial: dict[str, list[tuple]]              # every relation at DSV 1 of its source
    log: dict[str, list[Notification]]           # per source, its committed transactions from DSV 2
    start_versions: dict[str, int]               # the versions the warehouse materialised the view at
    start_view: dict[tuple, int]
    states: list[dict]                           # [{"transaction", "source", "dsv", "versions", "view"}]

    @property
    def final_view(self) -> dict[tuple, int]:
        return self.states[-1]["view"] if self.states else self.start_view

    def oracle(self) -> Oracle:
        return Oracle(self.run.catalog, self.run.view_sql, self.initial, self.log)


def load_history(run_dir: str | Path) -> LiveHistory:
    """Reads the run file and both sides of the history; HistoryError when any part is unreadable."""
    try:
        run = RunFile.read(run_dir)
    except ModelError as err:
        raise HistoryError(str(err)) from None
    initial, log = {}, {}
    for source in run.catalog.sources:
        if source not in run.sources:
            raise HistoryError(f"run file: no entry for source {source}")
        rows, log[source] = source_history(run.catalog, source, run.sources[source])
        initial.update(rows)
    start_versions, start_view, states = warehouse_states(run.warehouse_history)
    return LiveHistory(run, initial, log, start_versions, start_view, states)


def source_history(catalog: Catalog, source: str, path: Path | None) -> tuple[dict[str, list[tuple]], list[Notification]]:
    """The source's relations at DSV 1 and its committed transactions from DSV 2, from its file."""
    if path is None:
        raise HistoryError(f"source {source}: the run file names no database file for it "
                           "(its file is not reachable from the run directory)")
    if not path.is_file():
        raise HistoryError(f"source {source}: no database file at {path}")
    try:
        store = DuckDBStore(catalog, source, path)
    except duckdb.Error as err:
        raise HistoryError(f"source {source}: cannot open {path}: {str(err).strip().splitlines()[0]} "
                           "(is the source still running?)") from None
    except ModelError as err:
        raise HistoryError(f"source {source}: {err}") from None
    try:
        dsv, relations = store.snapshot()
        log = store.notifications_from(2)
    finally:
        store.close()
    if [n.dsv for n in log] != list(range(2, dsv + 1)):
        first = log[0].dsv if log else dsv + 1
        raise HistoryError(f"source {source}: its log holds DSVs {first}..{log[-1].dsv if log else dsv} "
                           f"of 2..{dsv}; a log with retention cannot be checked")
    tables = {name: {catalog.relation(name).key_of(r): r for r in rows} for name, (_, rows) in relations.items()}
    for n in reversed(log):
        for change in n.changes:
            rel = catalog.relation(change.relation)
            table = tables[rel.name]
            for row in change.added:
                if table.pop(rel.key_of(row), None) != tuple(row):
                    raise HistoryError(f"source {source}: the log does not match the data: DSV {n.dsv} "
                                       f"added {list(row)} to {rel.name}, which does not hold it")
            for row in change.removed:
                table[rel.key_of(row)] = tuple(row)
    return {name: list(table.values()) for name, table in tables.items()}, log


def warehouse_states(folder: Path | None) -> tuple[dict[str, int], dict[tuple, int], list[dict]]:
    """(versions of the first view, the first view, every later state) from the ChangeHistory files."""
    if folder is None:
        raise HistoryError("run file: names no warehouse history")
    try:
        first = json.loads((folder / "initial_view.json").read_text())
        start_versions = {str(s): int(v) for s, v in first["versions"].items()}
        view = Counter({tuple(r[:-1]): int(r[-1]) for r in first["rows"]})
        lines = (folder / "changes.jsonl").read_text().splitlines()
    except FileNotFoundError as err:
        raise HistoryError(f"warehouse history: missing {err.filename}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
        raise HistoryError(f"warehouse history: {folder / 'initial_view.json'}: malformed ({err})") from None
    start_view = dict(view)
    states, last_seq = [], 0
    for number, line in enumerate(lines, 1):
        where = f"warehouse history: {folder / 'changes.jsonl'} line {number}"
        try:
            entry = json.loads(line)
            seq = int(entry["seq"])
            delta = [(tuple(row), int(count)) for row, count in entry["delta"]]
            state = {"transaction": str(entry["txn_id"]), "source": str(entry["source"]), "dsv": int(entry["dsv"]),
                     "versions": {str(s): int(v) for s, v in entry["versions"].items()}}
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise HistoryError(f"{where}: malformed ({err})") from None
        if seq <= last_seq:
            raise HistoryError(f"{where}: seq {seq} follows {last_seq}")
        last_seq = seq
        for row, count in delta:
            view[row] += count
        state["view"] = {r: c for r, c in view.items() if c}
        states.append(state)
    return start_versions, start_view, states


def check(run_dir: str | Path) -> Verdict:
    history = load_history(run_dir)
    try:
        oracle = history.oracle()
        return classify(oracle, history.states, history.final_view, history.start_versions, history.start_view)
    except (ModelError, duckdb.Error, ValueError) as err:
        raise HistoryError(f"cannot evaluate the view over the sources' histories: {err}") from None


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (it holds run.json)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--expect", default="complete", type=str.lower,
                        choices=[*LEVELS, *ALIASES],
                        help="the level the run must keep (default complete; exit 1 if it does not)")


def main(args) -> int:
    expect = ALIASES.get(args.expect, args.expect)
    try:
        verdict = check(args.run_dir)
    except HistoryError as err:
        print(f"fedlab check: {err}", file=sys.stderr)
        return 2
    ok = LEVELS.index(verdict.level) >= LEVELS.index(expect)
    if args.json:
        print(json.dumps({k: verdict.to_dict()[k] for k in
                          ("level", "lost", "doubled", "transactions", "states", "first_violation")}, default=str))
    else:
        _print_text(verdict, expect, ok)
    return 0 if ok else 1


def _print_text(v: Verdict, expect: str, ok: bool) -> None:
    print(f"level: {v.level} (expected at least {expect}: {'ok' if ok else 'NOT MET'})")
    print(f"transactions: {v.transactions}  states: {v.states}")
    print(f"lost: {_few(v.lost) if v.lost else 'none'}")
    print(f"doubled: {_few(v.doubled) if v.doubled else 'none'}")
    f = v.first_violation
    if f:
        where = "the final view" if f["transaction"] == "(final)" else (
            "the initial view" if f["state"] is None else f"state {f['state']} (after transaction {f['transaction']})")
        versions = ", ".join(f"{s} DSV {d}" for s, d in f["versions"].items())
        print(f"first violation: {where} does not equal the view at source state {versions}")
        print(f"  view held ({len(f['view'])} rows): {_few(f['view'])}")
        print(f"  should be ({len(f['expected'])} rows): {_few(f['expected'])}")
        print(f"  missing: {_few(f['missing'])}")
        print(f"  extra:   {_few(f['extra'])}")


def _few(items: list) -> str:
    shown = ", ".join(str(i) for i in items[:SHOWN_ROWS])
    return f"[{shown}{f', ... ({len(items) - SHOWN_ROWS} more)' if len(items) > SHOWN_ROWS else ''}]"
