"""The warehouse's timer (warehouse.timer): the core gets one TimerFired at a time, when its
algorithm said, and none while nothing waits on time. No Spark, no sockets: a list for the inbox."""

from __future__ import annotations

import threading
import time

from fedlab.warehouse.timer import CoreTimer


def test_one_firing_at_a_time_each_when_the_core_said():
    fired: list[float] = []
    one = threading.Event()

    def fire():
        fired.append(time.monotonic())
        one.set()

    timer = CoreTimer(fire)
    timer.start()
    try:
        assert one.wait(5)                        # the first at once
        one.clear()
        timer.arm(time.monotonic() + 0.05)        # the core said when, but has not handled the first
        assert not one.wait(0.3) and len(fired) == 1
        armed = time.monotonic()
        timer.arm(armed + 0.2, fired=True)        # now it has
        assert one.wait(5) and fired[1] >= armed + 0.2
        one.clear()
        timer.arm(None, fired=True)               # nothing waits on time: it sleeps
        assert not one.wait(0.3)
        timer.arm(time.monotonic() + 60)
        timer.arm(time.monotonic())               # an earlier time wakes it
        assert one.wait(5) and len(fired) == 3
    finally:
        timer.stop()
    assert not timer._thread.is_alive()
