"""A node's message log on disk (the format: fedmodel.message_log): written off the messages' path,
read back by the checker and the bench.

`record` only queues the event; a writer thread, woken by the first event queued, lets more
gather for WRITE_AFTER seconds and writes them in one go. So a batch of messages costs one write,
not a line-buffered write each, and the JSON (fedmodel.json_text) is encoded outside the
threads that move the messages. A process killed outright loses the events of its last
WRITE_AFTER seconds; `close()` writes everything queued. With no path a log records nothing.

With a retention (seconds), the log keeps the lines of about that long: every half retention the
file closes as a segment (`<file>.<when it began>`, in milliseconds) and a new one
begins; a segment whose last line is a retention old is deleted, its totals (per node, peer and
kind, with the time it spans) added to `<file>.trimmed` first. `read` reads the
segments and the file in order; `trimmed` gives the totals of what is gone, so that the messages
sent over a whole run still add up (fedmodel.message_log.totals) while the lines of a message
before the retention -- which notification reached the warehouse when -- are gone.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

from fedlab.fedmodel import json_text
from fedlab.fedmodel.message_log import EVENTS, KINDS, concerns

WRITE_AFTER = 0.2   # seconds the writer lets events gather before writing them


class MessageLog:
    def __init__(self, path: str | Path | None, node: str, retention: float | None = None):
        self.path = Path(path) if path is not None else None
        self.node = node
        self.retention = retention
        self._began = time.time()   # when the file being written began (its lines' earliest time)
        self._segment: Counter = Counter()   # (peer, kind, event|"rows"|"bytes") -> total, in the file being written
        self._queued: list[tuple] = []   # (time, kind, event, peer, bytes, rows, fields) not written yet
        self._wake = threading.Condition()
        self._closed = False
        self._out = None
        self._writer = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if retention is not None and self.path.exists() and self.path.stat().st_size:
                self._resume()
            self._out = open(self.path, "a")
            self._writer = threading.Thread(target=self._write_queued, name=f"message-log-{node}", daemon=True)
            self._writer.start()

    def record(self, kind: str, event: str, peer: str, bytes: int = 0, rows: int = 0, **fields) -> None:
        if self._out is None:
            return
        if kind not in KINDS or event not in EVENTS:
            raise ValueError(f"message log: unknown kind/event {kind!r}/{event!r}")
        with self._wake:
            self._queued.append((time.time(), kind, event, peer, bytes, rows, fields))
            if len(self._queued) == 1:
                self._wake.notify()

    def _write_queued(self) -> None:
        """The writer thread: sleeps while nothing is queued; then writes in batches."""
        while True:
            with self._wake:
                while not self._queued and not self._closed:
                    self._wake.wait()
                if not self._queued:
                    return
            if not self._closed:
                time.sleep(WRITE_AFTER)   # a batch's events arrive together: write them together
            with self._wake:
                events, self._queued = self._queued, []
            self._out.write("".join(json_text.dumps({"t": t, "node": self.node, "kind": kind, "event": event,
                                                     "peer": peer, "bytes": size, "rows": rows, **fields}, default=str) + "\n"
                                    for t, kind, event, peer, size, rows, fields in events))
            self._out.flush()
            if self.retention is not None:
                self._count(events)
                if events[-1][0] - self._began >= self.retention / 2:
                    self._rotate(events[-1][0])

    def _resume(self) -> None:
        """A log written before this process (a node restarted) is closed as a segment first, its
        totals counted from its lines, so that the ones to come are counted from the start."""
        events = [(e["t"], e["kind"], e["event"], e["peer"], e.get("bytes", 0), e.get("rows", 0), None)
                  for e in read([self.path]) if e["node"] == self.node]
        if events:
            self._began = events[0][0]
            self._count(events)
            self._out = open(self.path, "a")
            self._rotate(events[-1][0])
            self._out.close()
            self._out = None

    def _count(self, events: list[tuple]) -> None:
        """Adds `events` to the totals of the file being written (those a trimming keeps)."""
        for _, kind, event, peer, size, rows, _ in events:
            self._segment[(peer, kind, event)] += 1
            if event == "sent":
                self._segment[(peer, kind, "rows")] += rows
                self._segment[(peer, kind, "bytes")] += size

    def _rotate(self, now: float) -> None:
        """Closes the file as a segment (its totals beside it) and begins a new one; deletes the
        segments whose last line is a retention old, adding their totals to the trimmed ones."""
        self._out.close()
        segment = self.path.with_name(f"{self.path.name}.{int(self._began * 1000)}")
        os.replace(self.path, segment)
        _totals_file(segment).write_text(json_text.dumps(
            {"from": self._began, "to": now, "node": self.node,
             "counts": [[*key, n] for key, n in sorted(self._segment.items())]}))
        self._out = open(self.path, "a")
        self._began, self._segment = now, Counter()
        for old in _segments(self.path):
            totals = _totals_file(old)
            doc = json_text.loads(totals.read_text()) if totals.exists() else None
            if doc is not None and doc["to"] <= now - self.retention:
                with open(trimmed_file(self.path), "a") as out:   # added before the segment goes
                    out.write(json_text.dumps(doc) + "\n")
                old.unlink()
                totals.unlink()

    def record_faults(self, kind: str, peer: str, delays: list[float], **names) -> None:
        """The fault injector's decision on one message (source_node.faults: the delays of its
        copies) as lines: dropped, or duplicated, and one delayed line per copy held back."""
        if not delays:
            self.record(kind, "dropped", peer, **names)
            return
        if len(delays) > 1:
            self.record(kind, "duplicated", peer, copies=len(delays), **names)
        for delay in delays:
            if delay > 0:
                self.record(kind, "delayed", peer, delay=round(delay, 4), **names)

    def close(self) -> None:
        """Writes what is queued and closes the file; recording afterwards records nothing."""
        if self._writer is None:
            return
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._writer.join()
        self._writer = None
        self._out.close()
        self._out = None


def read(paths: Iterable[str | Path], subscriber: str | None = None) -> Iterator[dict]:
    """Every complete line of the given logs, each log's segments and then its file (missing files
    are skipped: a node that never ran); with `subscriber`, only those about that warehouse
    (fedmodel.message_log.concerns)."""
    for path in paths:
        path = Path(path)
        for part in [*_segments(path), path]:
            try:
                lines = open(part)
            except FileNotFoundError:   # never written, or trimmed meanwhile
                continue
            with lines:
                for line in lines:
                    if line.endswith("\n"):
                        event = json_text.loads(line)
                        if subscriber is None or concerns(event, subscriber):
                            yield event


def trimmed(paths: Iterable[str | Path], subscriber: str | None = None,
            window: tuple[float, float] | None = None) -> dict[str, Counter]:
    """The totals of the lines a retention deleted from the given logs, per kind: sent, dropped,
    duplicated, delayed, received, and the rows and bytes sent (as fedmodel.message_log.totals
    gives them); with `subscriber` only those about that warehouse, with `window` only the
    segments it holds whole (wall-clock seconds). Empty for logs kept whole."""
    out: dict[str, Counter] = {}
    for path in paths:
        file = trimmed_file(Path(path))
        if not file.exists():
            continue
        for line in file.read_text().splitlines():
            doc = json_text.loads(line)
            if window is not None and not window[0] <= doc["from"] <= doc["to"] <= window[1]:
                continue
            for peer, kind, event, n in doc["counts"]:
                if subscriber is None or concerns({"node": doc["node"], "peer": peer}, subscriber):
                    out.setdefault(kind, Counter())[event] += n
    return out


def trimmed_file(path: Path) -> Path:
    """Where a log keeps the totals of the segments its retention deleted (`<file>.trimmed`)."""
    return path.with_name(path.name + ".trimmed")


def _segments(path: Path) -> list[Path]:
    """A log's closed segments, in the order written (`<file>.<when it began>`)."""
    return sorted((p for p in path.parent.glob(f"{path.name}.*") if p.suffix[1:].isdigit()),
                  key=lambda p: int(p.suffix[1:]))


def _totals_file(segment: Path) -> Path:
    return segment.with_name(segment.name + ".totals")
