"""How an adapter carries out the core's actions: one port per kind of action, one loop.

The simulator and the live warehouse both drive an algorithm with `drive(algorithm, event,
ports)`: it hands the event to the algorithm, performs each action it returns by calling the
port for that action's kind, and feeds back the events a port produced at once (the simulator
answers a sub-query in the same step; the live ports produce none, their answers come back later
through the warehouse's inbox). What differs between the two worlds lives only in the ports.
"""

from __future__ import annotations

from typing import Protocol

from fedlab.warehouse.core.algorithm import Algorithm
from fedlab.warehouse.core.events import (
    Acknowledge,
    EvaluateView,
    RequestResend,
    SendSubquery,
    StateApplied,
    ViewDeltaPropagated,
    ViewReady,
)


class Ports(Protocol):
    """Each port takes its action and returns the events it produced at once (or none)."""

    def send_subquery(self, action: SendSubquery) -> list | None: ...

    def request_resend(self, action: RequestResend) -> list | None: ...

    def acknowledge(self, action: Acknowledge) -> list | None: ...

    def apply_state(self, action: StateApplied) -> list | None: ...

    def view_ready(self, action: ViewReady) -> list | None: ...

    def evaluate_view(self, action: EvaluateView) -> list | None: ...

    def keep_view_delta(self, action: ViewDeltaPropagated) -> list | None: ...

    def record(self, trace: list[dict]) -> None: ...   # what the algorithm traced while handling an event


_PORT = {SendSubquery: "send_subquery", RequestResend: "request_resend", Acknowledge: "acknowledge",
         StateApplied: "apply_state", ViewReady: "view_ready", EvaluateView: "evaluate_view",
         ViewDeltaPropagated: "keep_view_delta"}


def perform(action, ports: Ports) -> list:
    """Carries out one action through its port; the events that came of it at once."""
    return getattr(ports, _PORT[type(action)])(action) or []


def drive(algorithm: Algorithm, event, ports: Ports) -> None:
    """Hands `event` to `algorithm` and performs what it asks, events that come of that included,
    in the order they came (breadth first, as messages would arrive)."""
    pending = [event]
    while pending:
        actions = algorithm.handle(pending.pop(0))
        ports.record(algorithm.trace)
        algorithm.trace.clear()
        for action in actions:
            pending.extend(perform(action, ports))
