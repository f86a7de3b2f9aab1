"""The warehouse's change history: the view states it applied, as plain files read without Spark.

In the warehouse's history folder: `initial_view.json` (the view it materialised first, with the
source versions it reflects) and `changes.jsonl`, one line per applied state (its sequence
number, the source transaction, its delta and the version vector the state reflects, and when it
was applied and made durable), appended once its batch is durable in Delta. The warehouse writes
it (`ChangeHistory`); the checker and the bench read it (`read`, `applied_states`). Written and
read here only, so the three cannot drift apart.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

from fedmodel import json_text
from fedmodel.errors import ModelError

INITIAL = "initial_view.json"
CHANGES = "changes.jsonl"


class ChangeHistoryError(ModelError):
    """The history cannot be read: one line naming the file (and line) and what is wrong."""


class ChangeHistory:
    """The warehouse's writer of its history folder."""

    def __init__(self, folder: Path, columns: list[str]):
        self.folder = folder
        self.columns = columns

    def write_initial(self, rows: dict[tuple, int], dsv: dict[str, int]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        doc = {"columns": self.columns, "versions": dsv, "rows": [[*r, c] for r, c in rows.items()]}
        (self.folder / INITIAL).write_text(json_text.dumps(doc, default=str))
        (self.folder / CHANGES).write_text("")

    def last_seq(self) -> int:
        """The seq of the last complete entry; a partial last line (a crash while appending) is cut."""
        path = self.folder / CHANGES
        text = path.read_text() if path.exists() else ""
        if text and not text.endswith("\n"):
            text = text[:text.rfind("\n") + 1]
            path.write_text(text)
        lines = text.splitlines()
        return json_text.loads(lines[-1])["seq"] if lines else 0

    def append(self, applied: Iterable, durable_time: float | None = None) -> None:
        """`applied`: states with seq, source, dsv, txn_id, commit_time, applied_time, versions and
        delta ((row, count) pairs; warehouse.store.delta_store.AppliedTxn). `durable_time`: when the
        batch holding them became durable in Delta (what a Spark reader of the view table sees from
        then on); None when that moment is not known (a batch found in Delta after a crash)."""
        with open(self.folder / CHANGES, "a") as out:
            for a in applied:
                out.write(json_text.dumps({"seq": a.seq, "source": a.source, "dsv": a.dsv, "txn_id": a.txn_id,
                                           "commit_time": a.commit_time, "applied_time": a.applied_time,
                                           "durable_time": durable_time, "versions": a.versions,
                                           "delta": [[list(r), c] for r, c in a.delta]}, default=str) + "\n")


def read(folder: Path) -> tuple[dict[str, int], dict[tuple, int], list[dict], dict[tuple, int]]:
    """(versions of the first view, the first view, every later state with its delta, the view
    after the last); ChangeHistoryError naming the file and line of anything malformed."""
    try:
        first = json_text.loads((folder / INITIAL).read_text())
        start_versions = {str(s): int(v) for s, v in first["versions"].items()}
        view = Counter({tuple(r[:-1]): int(r[-1]) for r in first["rows"]})
    except FileNotFoundError as err:
        raise ChangeHistoryError(f"warehouse history: missing {err.filename}") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
        raise ChangeHistoryError(f"warehouse history: {folder / INITIAL}: malformed ({err})") from None
    start_view = dict(view)
    states, last_seq = [], 0
    for where, entry in _entries(folder / CHANGES):
        try:
            seq = int(entry["seq"])
            delta = Counter()
            for row, count in entry["delta"]:
                delta[tuple(row)] += int(count)
            state = {"transaction": str(entry["txn_id"]), "source": str(entry["source"]), "dsv": int(entry["dsv"]),
                     "versions": {str(s): int(v) for s, v in entry["versions"].items()}}
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ChangeHistoryError(f"{where}: malformed ({err})") from None
        if seq <= last_seq:
            raise ChangeHistoryError(f"{where}: seq {seq} follows {last_seq}")
        last_seq = seq
        state["delta"] = {r: c for r, c in delta.items() if c}
        view.update(delta)
        states.append(state)
    return start_versions, start_view, states, {r: c for r, c in view.items() if c}


def applied_states(folder: Path) -> list[dict]:
    """The applied states without their deltas, in apply order: when each was applied and made
    durable and the versions it reflects (what staleness is measured from); none before a run
    wrote any."""
    path = Path(folder) / CHANGES
    if not path.exists():
        return []
    return [{"applied_time": entry.get("applied_time"), "durable_time": entry.get("durable_time"),
             "versions": entry.get("versions", {})} for _where, entry in _entries(path)]


def _entries(path: Path) -> Iterator[tuple[str, dict]]:
    """Each line of `changes.jsonl` parsed, with where it is for an error message."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError as err:
        raise ChangeHistoryError(f"warehouse history: missing {err.filename}") from None
    for number, line in enumerate(lines, 1):
        where = f"warehouse history: {path} line {number}"
        try:
            yield where, json_text.loads(line)
        except ValueError as err:
            raise ChangeHistoryError(f"{where}: malformed ({err})") from None
