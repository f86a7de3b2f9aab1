"""Several warehouses over one federation of simulated sources, each subscribed to every source by
its own name (docs/architecture.md 5, source_node.subscriptions): one commit, a copy to each.

Each warehouse is a Simulator (the same core, resend policy and batch protocol as when it is
alone) over the same in-memory sources; a transaction committed at a source reaches each
warehouse's network as its subscriber's copy, and each acknowledges to the sources for itself. A
warehouse may be down (`down`): what was on its way to it and what its sources send it meanwhile
is lost, and it acknowledges nothing, so its sources keep what it lacks; `back` restarts it from
its durable store (Simulator.restart_warehouse), after which its sources' senders send all of it
again. The others go on meanwhile: a down or lagging warehouse holds back only its own copies.
"""

from __future__ import annotations

from typing import Sequence

from fedlab.fedmodel.transactions import Notification, TransactionRequest
from fedlab.simulation.scenario import Scenario
from fedlab.simulation.simulator import Simulator


class Subscribers:
    """The warehouses `names` (the first the sources' default subscriber, if it is named so)."""

    def __init__(self, scenario: Scenario, names: Sequence[str], algorithm: str | None = None):
        first = Simulator(scenario, algorithm, subscriber=names[0])
        self.sources = first.sources
        self.warehouses = {names[0]: first}
        for name in names[1:]:
            self.warehouses[name] = Simulator(scenario, algorithm, sources=self.sources, subscriber=name)

    def commit(self, source: str, request: TransactionRequest) -> Notification:
        """Commits `request` at `source`; every warehouse's copy leaves for it."""
        now = max(w.now for w in self.warehouses.values()) + 1
        n = self.sources[source].commit(request, commit_time=now)
        for w in self.warehouses.values():
            w.now = now
            w.notified(source, n)
        return n

    def run_all(self) -> None:
        """Every warehouse that is up delivers what is in flight to it, runs to quiescence and
        commits its batch (what it applied durable, its sources told)."""
        for name, w in self.warehouses.items():
            if not w.down:
                self.run(name)

    def run(self, name: str) -> None:
        """`run_all` for the warehouse `name` alone (the others lag meanwhile)."""
        w = self.warehouses[name]
        w.run_all()
        w.commit_batch()

    def down(self, name: str) -> None:
        """The warehouse `name` goes down: what is in flight to it is lost."""
        w = self.warehouses[name]
        w.down = True
        while w.flight:
            w._lost(w.flight.pop(0))

    def back(self, name: str) -> None:
        """The warehouse `name` starts again from its durable store."""
        w = self.warehouses[name]
        w.down = False
        w.restart_warehouse()
