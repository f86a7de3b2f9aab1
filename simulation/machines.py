"""The timed simulator's clock, and the machines and processes whose CPU it shares out.

`Clock` is the discrete-event clock: callbacks at simulated times, taken in time order, and in
the order they were scheduled when their times are equal, so that a run is a function of its
seed alone.

A `Machine` has some cores, less what runs there whatever the load (`floor`: Ray's services,
heartbeats; measured with the federation idle). A `Process` on it has threads, each a queue of
jobs (CPU seconds each) that it works through in order, one at a time. A Python process runs one
thread at a time, the one holding its interpreter lock, as CPython does: a thread lets go of it
when its job is done (a job ends where a thread would block, on a socket, a file or a queue) and
takes its turn behind the others for its next; a thread that wants the lock waits, and after the
switch interval (5 ms) asks a holder still busy with one job to let go, which then waits its
turn behind the others (so a short job can wait a whole interval behind a long one: the convoy
that makes a loaded Python process slow to answer, and its exchanges' batches grow). Threads that run outside the lock (gRPC's C core moving
bytes) run beside it, each a runnable of its own, as does every thread of a process without such
a lock (the Spark JVM). The machine shares its cores equally among
its runnables (processor sharing, as Linux's scheduler does): with two cores and five of them
each advances at 2/5 of real time. So a job is slow because its thread has work queued before
it, because its process's other threads want the lock, or because the machine is crowded, as on
the 2-core machine every live process shares; a prediction gives each process a machine of its
own (its pod's cores).

A process may be frozen (the nemesis's pause): its threads stop, their queues held.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Callable

DONE = 1e-9   # CPU seconds left that count as none (rounding)


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
        when `stop()` says so (asked before every action: an action's cost grows with what a
        run that falls behind holds, so a count of actions bounds no time). Whether it reached `end`.

        >>> clock, taken = Clock(), []
        >>> for t in (1.0, 2.0, 3.0):
        ...     clock.at(t, lambda t=t: taken.append(t))
        >>> clock.run_until(5.0, stop=lambda: len(taken) == 2), taken, clock.now
        (False, [1.0, 2.0], 2.0)
        """
        while self._queue and self._queue[0][0] <= end:
            if stop():
                return False
            self.now, _, action = heapq.heappop(self._queue)
            action()
        self.now = max(self.now, end)
        return True


class Machine:
    def __init__(self, clock: Clock, name: str, cores: float, floor: float = 0.0):
        """`cores` shared by its processes, less `floor` cores that run there regardless."""
        if cores - floor <= 0:
            raise ValueError(f"machine {name}: {cores:g} cores leave nothing beside a floor of {floor:g}")
        self.clock, self.name = clock, name
        self.cores, self.floor = cores, floor
        self.busy: list[Process] = []   # processes with a thread at work, not frozen
        self._since = 0.0               # when the jobs in hand last advanced
        self._wake_token = 0

    def _runnables(self) -> int:
        return sum(p.runnables for p in self.busy)

    def _rates(self):
        """(process, thread, CPU seconds per second it gets) of every job running now."""
        n = self._runnables()
        share = min(1.0, (self.cores - self.floor) / n) if n else 1.0
        for p in self.busy:
            for thread in p.working:
                yield p, thread, share

    def _advance(self) -> None:
        now = self.clock.now
        if now > self._since:
            for _, thread, rate in self._rates():
                thread.remaining -= (now - self._since) * rate
        self._since = now

    def _changed(self) -> None:
        """The jobs in hand changed: when does the next one finish?"""
        self._wake_token += 1
        first = min((max(0.0, thread.remaining) / rate for _, thread, rate in self._rates()), default=None)
        if first is not None:
            token = self._wake_token
            self.clock.after(first, lambda: self._finish(token))

    def _finish(self, token: int) -> None:
        if token != self._wake_token:
            return   # superseded: the jobs in hand changed since this was scheduled
        self._advance()
        done = [(p, t) for p, t, _ in self._rates() if t.remaining <= DONE]
        for p, thread in done:
            p.working.remove(thread)
            if not p.working:
                self.busy.remove(p)
        self._changed()
        for p, thread in done:
            p._job_done(thread)

    def start(self, process: "Process", thread: "_Thread") -> None:
        self._advance()
        if not process.working:
            self.busy.append(process)
        process.working.append(thread)
        self._changed()

    def stop(self, process: "Process", thread: "_Thread") -> None:
        """`thread` stops running its job in hand (it lost its process's lock), keeping what is left."""
        self._advance()
        process.working.remove(thread)
        if not process.working:
            self.busy.remove(process)
        self._changed()

    def hold(self, process: "Process") -> None:
        """`process` stops (frozen): its jobs in hand wait."""
        if process in self.busy:
            self._advance()
            self.busy.remove(process)
            self._changed()

    def resume(self, process: "Process") -> None:
        if process.working and process not in self.busy:
            self._advance()
            self.busy.append(process)
            self._changed()


SWITCH_INTERVAL = 0.005   # seconds a thread waits for a Python process's lock before it asks for it


class _Thread:
    def __init__(self, name: str, free: bool):
        self.name, self.free = name, free   # free: it runs outside its process's lock
        self.queue: deque = deque()      # (CPU seconds, what to do when done)
        self.remaining = 0.0             # of the job in hand
        self.done: Callable[[], None] | None = None   # the job in hand's, None when idle


class Process:
    def __init__(self, machine: Machine, name: str, locked: bool = True):
        """`locked`: a Python process, whose threads take turns holding its interpreter lock."""
        self.machine, self.name, self.locked = machine, name, locked
        self.threads: dict[str, _Thread] = {}
        self.working: list[_Thread] = []   # threads running a job in hand (the machine's to advance)
        self.holder: _Thread | None = None       # of the lock (a locked process's)
        self.waiting: deque[_Thread] = deque()   # for the lock, with a job in hand
        self._asked = 0                          # the lock's hand-overs so far: a request for it names one
        self.frozen = False
        self.cpu_seconds = 0.0             # every job's demand, once taken up
        self.jobs = 0

    @property
    def runnables(self) -> int:
        """Its threads running now, each a runnable of the machine's."""
        return len(self.working)

    @property
    def backlog(self) -> int:
        """Jobs queued or in hand."""
        return sum(len(t.queue) + (t.done is not None) for t in self.threads.values())

    def submit(self, seconds: float, done: Callable[[], None] = lambda: None, thread: str = "main",
               free: bool = False) -> None:
        """A job of `seconds` of CPU on `thread` (`free`: one that runs outside the process's
        lock): `done()` runs when it is over (after those queued on that thread before it)."""
        t = self.threads.get(thread)
        if t is None:
            t = self.threads[thread] = _Thread(thread, free)
        t.queue.append((max(0.0, seconds), done))
        if t.done is None:
            self._next(t)

    def _next(self, thread: _Thread) -> None:
        """`thread` has no job in hand: it takes up its next, if any (one under the lock waits for it)."""
        under_lock = self.locked and not thread.free
        if under_lock and thread is self.holder:   # its job is done: it lets go, and queues again for its next
            if thread.queue:
                self._take_up(thread)
                self.waiting.append(thread)
            self._hand_over()
            return
        if not thread.queue:
            return
        self._take_up(thread)
        if under_lock and self.holder is not None:
            self.waiting.append(thread)
            self._ask()
        else:
            self.holder = thread if under_lock else self.holder
            self._run(thread)

    def _take_up(self, thread: _Thread) -> None:
        """`thread` takes up its next job (to run, or to wait for the lock)."""
        seconds, thread.done = thread.queue.popleft()
        thread.remaining = seconds
        self.cpu_seconds += seconds
        self.jobs += 1

    def _run(self, thread: _Thread) -> None:
        if self.frozen:
            self.working.append(thread)   # waits in hand until thawed
        else:
            self.machine.start(self, thread)

    def _hand_over(self) -> None:
        """The lock goes to the thread that has waited longest (if any)."""
        self.holder = self.waiting.popleft() if self.waiting else None
        self._asked += 1
        if self.holder is not None:
            self._run(self.holder)
            if self.waiting:
                self._ask()

    def _ask(self) -> None:
        """A thread waits for the lock: after the switch interval the holder lets go of it, if it
        still holds it (the hand-over it would end is still the one under way)."""
        asked = self._asked
        self.machine.clock.after(SWITCH_INTERVAL, lambda: self._switch(asked))

    def _switch(self, asked: int) -> None:
        if asked != self._asked or self.holder is None or not self.waiting or self.frozen:
            return
        holder = self.holder
        if holder in self.working:
            self.machine.stop(self, holder)
        self.waiting.append(holder)
        self._hand_over()

    def _job_done(self, thread: _Thread) -> None:
        done, thread.done = thread.done, None
        done()
        if thread.done is None:
            self._next(thread)

    def freeze(self) -> None:
        """Stops working (SIGSTOP): the jobs in hand wait, and the queues with them."""
        if not self.frozen:
            self.frozen = True
            self.machine.hold(self)

    def thaw(self) -> None:
        if self.frozen:
            self.frozen = False
            self.machine.resume(self)
