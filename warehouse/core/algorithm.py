"""What every maintenance algorithm offers its adapters (the simulator and the live warehouse).

An algorithm is a deterministic object: `handle(event)` takes one of warehouse.core.events'
events and returns actions. Everything else here is read-only, for reports and durability.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass
class Counters:
    """What an algorithm did, by name; each algorithm's counters add their fields to this."""

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class Algorithm(Protocol):
    trace: list            # dicts with an "event" key: compensation steps, rejected answers, ...
    counters: Counters

    def handle(self, event) -> list: ...

    def view_rows(self) -> dict[tuple, int]: ...

    @property
    def in_flight(self) -> int: ...          # updates received and not yet reflected in the view

    @property
    def timeout(self) -> float: ...          # the longest of its timers: how far a timer round moves time

    def received_through(self, source: str) -> int: ...   # every DSV up to this one is received

    # Optional: `next_timer() -> float | None`, the earliest time a TimerFired could make the
    # algorithm act (None: none is needed). The live warehouse then fires timers only when due;
    # an algorithm without it gets a TimerFired every `tick` (warehouse.service).

    def applied_dsv(self) -> dict[str, int]: ...          # per source, the DSV the view reflects

    def version_state(self) -> dict: ...     # {"relations": {R: {"processing", "refreshed"}}, "sources": ...}
