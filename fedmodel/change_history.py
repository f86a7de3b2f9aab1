"""The warehouse's change history: the view states it applied, as plain files read without Spark.

In the warehouse's history folder: `initial_view.json` (the view the history starts from, with the
source versions it reflects and the seq of the state it is: 0 for the view the warehouse
materialised first) and `changes.jsonl`, one line per applied state after it (its sequence
number, the source transaction, its delta and the version vector the state reflects, and when it
was applied and made durable), appended once its batch is durable in Delta. The warehouse writes
it (`ChangeHistory`); the checker and the bench read it (`read`, or `read_start` and `states` a
state at a time, `applied_states`). Written and read here only, so the three cannot drift apart.

With a retention (`ChangeHistory(retention=seconds)`) the history keeps the states of that many
seconds, and the view before them: every half retention the lines written so far close as a
segment (`changes-<its first seq>.jsonl`) beside a base (`view-<the seq before it>.json`, the view
after the segment's last state, which the warehouse hands over: `rotate`), and once a base is a
retention old it becomes `initial_view.json` and what lies before it goes. So a run of hours keeps
on disk what it wrote in the last retention or so, and a checker judges the states from that view
on (checker.windows); what it loses are the states before. Every step leaves files a
reader reads right: a reader skips the states at or below `initial_view.json`'s seq.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

from fedlab.fedmodel import json_text
from fedlab.fedmodel.errors import ModelError

INITIAL = "initial_view.json"
CHANGES = "changes.jsonl"            # the lines being written
SEGMENT = "changes-{:012d}.jsonl"    # lines written before, named by their first seq
BASE = "view-{:012d}.json"           # the view after state seq: where the next segment starts


class ChangeHistoryError(ModelError):
    """The history cannot be read: one line naming the file (and line) and what is wrong."""


class ChangeHistory:
    """The warehouse's writer of its history folder; with `retention` (seconds), it keeps the
    states of about that long (see the module docstring)."""

    def __init__(self, folder: Path, columns: list[str], retention: float | None = None):
        self.folder = folder
        self.columns = columns
        self.retention = retention
        self._last: tuple[int, dict] | None = None   # (seq, versions) of the last state written; None: unknown
        self._since: float | None = None             # when the lines being written began (first asked)

    def write_initial(self, rows: dict[tuple, int], dsv: dict[str, int]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        _write_view(self.folder / INITIAL, self.columns, rows, dsv, 0, time.time())
        (self.folder / CHANGES).write_text("")
        self._last = (0, dict(dsv))

    def last_seq(self) -> int:
        """The seq of the last complete entry; a partial last line (a crash while appending) is cut.
        Read from the end of the files: a restart does not read the history through."""
        path = self.folder / CHANGES
        line = _last_line(path) if path.exists() else None
        for segment in reversed(_segments(self.folder)[:-1]):
            if line is not None:
                break
            line = _last_line(segment)
        if line is None:
            start = _load(self.folder / INITIAL)
            self._last = (int(start.get("seq", 0)), start["versions"])
        else:
            entry = json_text.loads(line)
            self._last = (entry["seq"], entry["versions"])
        return self._last[0]

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
                self._last = (a.seq, a.versions)

    def rotation_due(self, now: float) -> bool:
        """Whether the lines being written are half a retention old (counted from this object's
        first question): time to `rotate`."""
        if self.retention is None:
            return False
        if self._since is None:
            self._since = now
        return now - self._since >= self.retention / 2

    def rotate(self, view: dict[tuple, int], now: float) -> None:
        """Closes the lines written so far as a segment, with `view` (the view after the last state
        written: the warehouse's durable view) as the base of the next; then the newest base a
        retention old becomes the history's start, and what lies before it goes."""
        if self._last is None:
            self.last_seq()
        seq, versions = self._last
        current = self.folder / CHANGES
        first = _first_line(current) if current.exists() else None
        if first is not None:
            _write_view(self.folder / BASE.format(seq), self.columns, view, versions, seq, now)
            os.replace(current, self.folder / SEGMENT.format(json_text.loads(first)["seq"]))
        self._since = now
        old = [b for b in sorted(self.folder.glob("view-*.json")) if _load(b)["written"] <= now - self.retention]
        if not old:
            return
        kept = old[-1]
        start = int(kept.stem.split("-")[1])
        os.replace(kept, self.folder / INITIAL)   # the start moves first: a reader skips what lies before it
        for segment in _segments(self.folder)[:-1]:
            if int(segment.stem.split("-")[1]) <= start:
                segment.unlink()
        for base in old[:-1]:
            base.unlink()


def _write_view(path: Path, columns: list[str], rows: dict[tuple, int], versions: dict, seq: int, now: float) -> None:
    """A view file (the history's start, or a base), written whole or not at all."""
    doc = {"columns": columns, "versions": versions, "seq": seq, "written": now,
           "rows": [[*r, c] for r, c in rows.items()]}
    partial = path.with_suffix(".partial")
    partial.write_text(json_text.dumps(doc, default=str))
    os.replace(partial, path)


def _load(path: Path) -> dict:
    try:
        return json_text.loads(path.read_text())
    except FileNotFoundError as err:
        raise ChangeHistoryError(f"warehouse history: missing {err.filename}") from None
    except (OSError, ValueError) as err:
        raise ChangeHistoryError(f"warehouse history: {path}: malformed ({err})") from None


def _segments(folder: Path) -> list[Path]:
    """The files of state lines in the order they were written: the closed segments by their
    first seq, then the lines being written."""
    return [*sorted(Path(folder).glob("changes-*.jsonl")), Path(folder) / CHANGES]


def _first_line(path: Path) -> str | None:
    with open(path) as lines:
        first = lines.readline()
    return first if first.endswith("\n") else None


def _last_line(path: Path) -> str | None:
    """The last complete line of `path`, read from its end (None: it has none); a partial line
    after it (a crash while appending) is cut off the file."""
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        tail, step = b"", 1 << 16
        while True:
            start = max(0, size - len(tail) - step)
            f.seek(start)
            tail = f.read(size - start)
            cut = tail.rfind(b"\n")
            if cut < len(tail) - 1 and (cut >= 0 or start == 0):   # a partial line after the last newline
                f.truncate(start + cut + 1)
                tail, size = tail[:cut + 1], start + cut + 1
            before = tail.rfind(b"\n", 0, len(tail) - 1)
            if before >= 0 or start == 0:
                return tail[before + 1:].decode() if tail else None
            step *= 2


def read(folder: Path) -> tuple[dict[str, int], dict[tuple, int], list[dict], dict[tuple, int]]:
    """(versions of the first view, the first view, every later state with its delta, the view
    after the last); ChangeHistoryError naming the file and line of anything malformed."""
    start_versions, start_view = read_start(folder)
    view = Counter(start_view)
    kept = []
    for state in states(folder):
        view.update(state["delta"])
        kept.append(state)
    return start_versions, start_view, kept, {r: c for r, c in view.items() if c}


def read_start(folder: Path) -> tuple[dict[str, int], dict[tuple, int]]:
    """(versions of the view the history starts from, that view); ChangeHistoryError for a
    malformed file."""
    first = _load(folder / INITIAL)
    try:
        start_versions = {str(s): int(v) for s, v in first["versions"].items()}
        view = Counter()
        for r in first["rows"]:
            view[tuple(r[:-1])] += int(r[-1])
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
        raise ChangeHistoryError(f"warehouse history: {folder / INITIAL}: malformed ({err})") from None
    return start_versions, {r: c for r, c in view.items() if c}


def states(folder: Path) -> Iterator[dict]:
    """Every state after the first view, in apply order, one at a time (a long run's history is
    not held whole): transaction, source, dsv, versions and delta; ChangeHistoryError naming the
    file and line of anything malformed."""
    last_seq = int(_load(folder / INITIAL).get("seq", 0))
    for where, entry in _entries(folder):
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
            if (folder / INITIAL).exists() and seq <= int(_load(folder / INITIAL).get("seq", 0)):
                continue   # before the history's start: a segment a trimming left behind
            raise ChangeHistoryError(f"{where}: seq {seq} follows {last_seq}")
        last_seq = seq
        state["delta"] = {r: c for r, c in delta.items() if c}
        yield state


def applied_states(folder: Path) -> Iterator[dict]:
    """The applied states without their deltas, in apply order, one at a time: when each was
    applied and made durable and the versions it reflects (what staleness is measured from);
    none before a run wrote any."""
    folder = Path(folder)
    if not (folder / INITIAL).exists():
        return
    start = int(_load(folder / INITIAL).get("seq", 0))
    for _where, entry in _entries(folder):
        if entry.get("seq", 0) <= start:
            continue
        yield {"applied_time": entry.get("applied_time"), "durable_time": entry.get("durable_time"),
               "versions": entry.get("versions", {})}


def _entries(folder: Path) -> Iterator[tuple[str, dict]]:
    """Each line of the history's segments parsed, in the order written, read a line at a time,
    with where it is for an error message."""
    for path in _segments(folder):
        try:
            lines = open(path)
        except FileNotFoundError as err:
            if path.name != CHANGES or path.parent.exists() and any(Path(folder).glob("changes-*.jsonl")):
                continue   # removed by a trimming meanwhile, or no line written since a rotation
            raise ChangeHistoryError(f"warehouse history: missing {err.filename}") from None
        with lines:
            for number, line in enumerate(lines, 1):
                where = f"warehouse history: {path} line {number}"
                try:
                    yield where, json_text.loads(line)
                except ValueError as err:
                    raise ChangeHistoryError(f"{where}: malformed ({err})") from None
