"""The warehouse's timer: hands its core the time when the core said it would next need it.

An algorithm says when its next timer is due (`next_timer`: a sub-query to send again, a gap to
ask for); one that does not say gets the time every `tick` (warehouse.settings). One TimerFired is
in the core's inbox at a time: the next is armed once the core has handled it (`arm(...,
fired=True)`), so a busy core is not handed a backlog of clock readings. While nothing waits on
time, the thread sleeps.
"""

from __future__ import annotations

import time
from typing import Callable

from fedlab.warehouse.worker import Worker


class CoreTimer(Worker):
    def __init__(self, fire: Callable[[], None]):
        """`fire`: queues a TimerFired for the core (called on the timer's thread)."""
        super().__init__("timer")
        self._fire = fire
        self._at: float | None = time.monotonic()   # the core's next timer; the first at once
        self._queued = False                         # a TimerFired is in the core's inbox

    def arm(self, at: float | None, fired: bool = False) -> None:
        """After the core handled events (`fired`: a TimerFired among them): its next timer is
        due `at` (time.monotonic(); None: none)."""
        with self._wake:
            if fired:
                self._queued = False
            earlier = at is not None and (self._at is None or at < self._at)
            self._at = at
            if earlier or fired:
                self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopped:
                    now = time.monotonic()
                    if not self._queued and self._at is not None and self._at <= now:
                        break
                    self._wake.wait(None if self._queued or self._at is None else self._at - now)
                if self._stopped:
                    return
                self._queued, self._at = True, None
            self._fire()
