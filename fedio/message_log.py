"""A node's message log on disk (the format: fedmodel.message_log): written off the messages' path,
read back by the checker and the bench.

`record` only queues the event; a writer thread, woken by the first event queued, lets more
gather for WRITE_AFTER seconds and writes them in one go. So a batch of messages costs one write,
not a line-buffered write each, and the JSON (fedmodel.json_text) is encoded outside the
threads that move the messages. A process killed outright loses the events of its last
WRITE_AFTER seconds; `close()` writes everything queued. With no path a log records nothing.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Iterable, Iterator

from fedmodel import json_text
from fedmodel.message_log import EVENTS, KINDS, concerns

WRITE_AFTER = 0.2   # seconds the writer lets events gather before writing them


class MessageLog:
    def __init__(self, path: str | Path | None, node: str):
        self.path = Path(path) if path is not None else None
        self.node = node
        self._queued: list[tuple] = []   # (time, kind, event, peer, bytes, rows, fields) not written yet
        self._wake = threading.Condition()
        self._closed = False
        self._out = None
        self._writer = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
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
    """Every complete line of the given files (missing files are skipped: a node that never ran);
    with `subscriber`, only those about that warehouse (fedmodel.message_log.concerns)."""
    for path in paths:
        path = Path(path)
        if not path.exists():
            continue
        with open(path) as lines:
            for line in lines:
                if line.endswith("\n"):
                    event = json_text.loads(line)
                    if subscriber is None or concerns(event, subscriber):
                        yield event
