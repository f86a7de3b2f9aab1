"""Test support for live runs: the load generator's side of a test, committing random valid
transactions at live sources.

Each transaction is drawn (simulation.simulator.RandomTransactions) against an in-memory mirror of
its source (source_node.memory_store.MemoryStore), committed live, then committed to the mirror,
and the live source must give it the DSV the mirror did: the mirror is the test's own record of
what each source committed.
"""

from __future__ import annotations

import random
import time
from typing import Callable

from fedlab.fedio.channels import client_channel
from fedlab.fedmodel.transactions import Notification, TransactionRequest
from fedlab.simulation.scenario import Scenario
from fedlab.simulation.simulator import RandomTransactions
from fedlab.source_node.memory_store import MemoryStore

# The Strobe paper's Fixture A (Examples 1, 3, 6, 7) with a few more rows: a chain of three
# relations at three sources, a scenario document (simulation.scenario.parse_scenario).
FIXTURE_A = {
    "name": "Fixture A, extended",
    "sources": {
        "x": {"r1": {"columns": ["A", "B"], "types": ["BIGINT", "BIGINT"], "key": ["A"]}},
        "y": {"r2": {"columns": ["K2", "B", "C"], "types": ["BIGINT"] * 3, "key": ["K2"]}},
        "z": {"r3": {"columns": ["C", "D"], "types": ["BIGINT", "BIGINT"], "key": ["C"]}},
    },
    "view": "SELECT r1.A, r3.D FROM r1 JOIN r2 ON r1.B = r2.B JOIN r3 ON r2.C = r3.C",
    "initial": {"r1": [[1, 2], [2, 2], [3, 3]], "r2": [[1, 2, 3], [2, 3, 4]], "r3": [[3, 4], [4, 5]]},
    "steps": [],
}


class MirroredLoad:
    """Random transactions against per-source mirrors, committed through `commit(source, request)`
    (anything that returns a reply with the committed `dsv`: Federation.commit, a Source stub)."""

    def __init__(self, scenario: Scenario, commit: Callable[[str, TransactionRequest], object],
                 workload_seed: int = 5, choice_seed: int = 6):
        self.commit_live = commit
        self.mirrors = {s: MemoryStore(scenario.catalog, s, {r.name: scenario.initial[r.name]
                                                              for r in scenario.catalog.relations_at(s)})
                        for s in scenario.catalog.sources}
        self.workload = RandomTransactions(scenario, random.Random(workload_seed))
        self.rng = random.Random(choice_seed)
        self.history: dict[str, list[Notification]] = {s: [] for s in self.mirrors}

    @property
    def committed(self) -> int:
        return sum(len(notes) for notes in self.history.values())

    def commit(self, n: int, pause: float = 0.0, sources: list[str] | None = None) -> None:
        """Commits `n` transactions, each at a source drawn from `sources` (default: all)."""
        choices = sorted(sources or self.mirrors)
        done = 0
        while done < n:
            source = self.rng.choice(choices)
            request = self.workload.transaction(self.mirrors[source])
            if request is None:   # the source would refuse it (an FD or RI it breaks): draw again
                continue
            reply = self.commit_live(source, request)
            note = self.mirrors[source].commit(request)
            assert reply.dsv == note.dsv, (source, reply.dsv, note.dsv)
            self.history[source].append(note)
            done += 1
            if pause:
                time.sleep(pause)


def refuses(address: str) -> bool:
    """True once nothing serves a source at `address` (a killed actor's old port)."""
    import grpc

    from fedlab.fedmodel.wire import pb, rpc

    try:
        rpc.SourceStub(client_channel(address, None)).Health(pb.HealthRequest(), timeout=2)
    except grpc.RpcError as err:
        return err.code() == grpc.StatusCode.UNAVAILABLE
    return False
