"""A part of the warehouse that runs on a thread of its own until stopped (the timer, the evaluator,
each source's dispatcher): one lock, a condition on it that wakes the thread, and a stop that wakes
it for the last time and waits for it."""

from __future__ import annotations

import threading


class Worker:
    def __init__(self, name: str):
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        raise NotImplementedError
