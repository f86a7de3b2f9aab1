"""What every applier of a nemesis schedule shares, running it on its clock (nemesis.local for a
local run, nemesis.node for a cluster, from its node).

`Nemesis` runs the faults in a thread of its own, timed from `start()`: a fault begins at its `at`
(the applier's `_begin`), and the undo `_begin` returned is called `length` later. An applier
says what it did in `events` and reverts whatever is still applied in `close()`, which runs when
the schedule ends, when it is stopped, and when it fails.
"""

from __future__ import annotations

import heapq
import os
import threading
import time
from collections.abc import Callable

from fedlab.nemesis.schedule import Fault

Undo = Callable[[float], None]   # called with the seconds since the schedule began


class Events(list):
    """A nemesis's event lines, each also handed to `say` as it happens (a command's progress)."""

    def __init__(self, say: Callable[[str], None]):
        super().__init__()
        self.say = say

    def append(self, line: str) -> None:
        self.say(line)
        super().append(line)


class Nemesis:
    """`faults` applied at their times; `applied` gets each fault's wall-clock window
    (`fault`, `began`, `ended`: what nemesis.effects reads), `events` one line per
    action. Subclasses give `_begin` and `close`."""

    def __init__(self, faults: list[Fault], events: list[str]):
        self.faults, self.events = faults, events
        self.applied: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None   # what ended the schedule early, if anything did

    def start(self) -> Nemesis:
        """Runs the schedule in a thread of its own, timed from now."""
        self._thread = threading.Thread(target=self._run, args=(time.monotonic(),), name="nemesis", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ends the schedule where it is (faults not due yet are not applied) and reverts whatever
        is applied; safe to call again, or before `start`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.close()

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the schedule has ended (within `timeout` seconds)."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self, start: float) -> None:
        """One action at a time: a fault that takes long (a warehouse restart) delays the next, and
        a pause lasts its length from when it actually began."""
        due = [(f.at, i, f) for i, f in enumerate(self.faults)]   # (seconds from start, tie, fault)
        heapq.heapify(due)
        undos: dict[int, tuple[Undo, dict]] = {}   # a fault's index -> its undo and window
        try:
            while due:
                at, i, fault = heapq.heappop(due)
                if self._stop.wait(max(0.0, start + at - time.monotonic())):
                    return
                elapsed = time.monotonic() - start
                if i in undos:
                    undo, window = undos.pop(i)
                    undo(elapsed)
                    window["ended"] = time.time()
                    continue
                window = {"fault": str(fault), "began": time.time()}
                self.applied.append(window)
                undo = self._begin(fault, elapsed)
                if undo is None:
                    window["ended"] = time.time()
                else:
                    undos[i] = undo, window
                    heapq.heappush(due, (elapsed + (fault.length or 0.0), i, fault))
        except BaseException as err:   # noqa: BLE001 - kept for the caller, after everything is reverted
            self.error = err
            self.events.append(f"the nemesis stopped: {err}")
        finally:
            self.close()
            for window in self.applied:   # stopped while applied, or failed as it began: reverted now
                window.setdefault("ended", time.time())

    def _begin(self, fault: Fault, elapsed: float) -> Undo | None:
        """Applies `fault`; returns what ends it after its length, or None if nothing has to."""
        raise NotImplementedError

    def close(self) -> None:
        """Reverts whatever is applied, and applies nothing after."""
        raise NotImplementedError


def signal_process(pid: int, signum: int) -> None:
    """Sends `signum` to `pid`; a process that ended meanwhile (restarted by Ray or the kubelet)
    has nothing left to signal."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass
