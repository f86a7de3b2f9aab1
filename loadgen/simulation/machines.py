"""The timed simulator's clock, and the machines and processes whose CPU it shares out.

`Clock` is the discrete-event clock: callbacks at simulated times, taken in time order, and in
the order they were scheduled when their times are equal, so that a run is a function of its
seed alone.

A `Machine` has some cores, less what runs there whatever the load (`floor`: Ray's services,
heartbeats; measured with the federation idle). A `Process` on it is a server with one worker, as
a Python process is under its interpreter lock and the Spark JVM is for a Delta commit: its jobs
(CPU seconds each) wait in one queue, in arrival order, and it works on one at a time. The
machine shares its cores among the processes that have a job in hand, equally (processor
sharing, as Linux's scheduler does among runnable processes): with two cores and five busy
processes each job advances at 2/5 of real time. So a process is slow because it waits for its
own queue, or because the machine is crowded, as on the 2-core machine every live process
shares; a prediction gives each process a machine of its own (its pod's cores).

A process may be frozen (the nemesis's pause): it holds its queue, its job in hand stops.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Callable


class Clock:
    def __init__(self):
        self.now = 0.0
        self._queue: list = []
        self._seq = itertools.count()

    def at(self, time: float, action: Callable[[], None]) -> None:
        """Runs `action` at `time` (now, if that has passed)."""
        heapq.heappush(self._queue, (max(time, self.now), next(self._seq), action))

    def after(self, seconds: float, action: Callable[[], None]) -> None:
        self.at(self.now + seconds, action)

    def run_until(self, end: float, stop: Callable[[], bool] = lambda: False) -> bool:
        """Takes everything due up to `end`, in order, and ends at `end`; or stops where it is
        when `stop()` says so (asked every thousand actions). Whether it reached `end`."""
        for taken in itertools.count():
            if not self._queue or self._queue[0][0] > end:
                break
            if taken % 1000 == 999 and stop():
                return False
            self.now, _, action = heapq.heappop(self._queue)
            action()
        self.now = max(self.now, end)
        return True

    @property
    def next_time(self) -> float | None:
        return self._queue[0][0] if self._queue else None


class Machine:
    def __init__(self, clock: Clock, name: str, cores: float, floor: float = 0.0):
        """`cores` shared by its processes, less `floor` cores that run there regardless."""
        if cores - floor <= 0:
            raise ValueError(f"machine {name}: {cores:g} cores leave nothing beside a floor of {floor:g}")
        self.clock, self.name = clock, name
        self.cores, self.floor = cores, floor
        self.running: list[Process] = []    # processes with a job in hand, not frozen
        self._since = 0.0                  # when the jobs in hand last advanced
        self._wake_token = 0

    @property
    def speed(self) -> float:
        """How fast each job in hand advances now, in CPU seconds per second."""
        return min(1.0, (self.cores - self.floor) / len(self.running)) if self.running else 1.0

    def _advance(self) -> None:
        now = self.clock.now
        if self.running and now > self._since:
            done = (now - self._since) * self.speed
            for p in self.running:
                p.remaining -= done
        self._since = now

    def _changed(self) -> None:
        """The set of jobs in hand changed: when does the next one finish?"""
        self._wake_token += 1
        if not self.running:
            return
        token = self._wake_token
        first = min(p.remaining for p in self.running)
        self.clock.after(max(0.0, first) / self.speed, lambda: self._finish(token))

    def _finish(self, token: int) -> None:
        if token != self._wake_token:
            return   # superseded: the jobs in hand changed since this was scheduled
        self._advance()
        done = [p for p in self.running if p.remaining <= 1e-9]
        for p in done:
            self.running.remove(p)
        self._changed()
        for p in done:
            p._job_done()

    def start(self, process: "Process") -> None:
        self._advance()
        self.running.append(process)
        self._changed()

    def stop(self, process: "Process") -> None:
        self._advance()
        self.running.remove(process)
        self._changed()


class Process:
    def __init__(self, machine: Machine, name: str):
        self.machine, self.name = machine, name
        self.queue: deque = deque()       # (CPU seconds, what to do when done)
        self.remaining = 0.0              # of the job in hand
        self.frozen = False
        self.cpu_seconds = 0.0            # every job's demand, once taken up
        self.jobs = 0
        self._done: Callable[[], None] | None = None   # the job in hand's, None when idle

    @property
    def busy(self) -> bool:
        return self._done is not None

    @property
    def backlog(self) -> int:
        """Jobs queued or in hand."""
        return len(self.queue) + self.busy

    def submit(self, seconds: float, done: Callable[[], None]) -> None:
        """A job of `seconds` of CPU: `done()` runs when it is over (after those queued before it)."""
        self.queue.append((max(0.0, seconds), done))
        if not self.busy:
            self._next()

    def _next(self) -> None:
        if not self.queue or self.frozen:
            return
        seconds, self._done = self.queue.popleft()
        self.remaining = seconds
        self.cpu_seconds += seconds
        self.jobs += 1
        self.machine.start(self)

    def _job_done(self) -> None:
        done, self._done = self._done, None
        done()
        if not self.busy:
            self._next()

    def freeze(self) -> None:
        """Stops working (SIGSTOP): the job in hand waits, and the queue with it."""
        if not self.frozen:
            self.frozen = True
            if self.busy:
                self.machine.stop(self)

    def thaw(self) -> None:
        if self.frozen:
            self.frozen = False
            if self.busy:
                self.machine.start(self)
            else:
                self._next()
