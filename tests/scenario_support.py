"""What the algorithm tests read from a simulated scenario (tests/scenarios/*.yaml): its states,
its trace's events of one kind; how many random federations a property test runs over; and a
view's scenario under a random schedule of faults."""

from __future__ import annotations

import os
from pathlib import Path

from fedlab.simulation.scenario import load_scenario
from fedlab.simulation.simulate import simulate

SCENARIOS = Path(__file__).parent / "scenarios"
# `make quick`, the fast loop, sets FEDLAB_QUICK=1: the random-federation tests run over a tenth.
QUICK = os.environ.get("FEDLAB_QUICK") == "1"


def seeds(n: int) -> range:
    """The federation seeds of a random-schedule test: n of them, a tenth (at least 4) if QUICK."""
    return range(max(4, n // 10) if QUICK else n)


def run(name: str, algorithm: str | None = None) -> dict:
    """The scenario file `name` simulated (under `algorithm` instead of its own, if given)."""
    return simulate(load_scenario(SCENARIOS / name), algorithm)


def states(result) -> list[tuple[str, list]]:
    return [(s["transaction"], s["view"]) for s in result["states"]]


def events(result, kind: str) -> list[dict]:
    return [e for e in result["trace"] if e["event"] == kind]


def under_random_faults(name: str, federation: dict, view: str, seed: int) -> dict:
    """A scenario of `view` over `federation` (its sources and initial rows): 40 random steps with
    10% of messages dropped, 20% reordered and 5% duplicated, then every message delivered."""
    return {"name": name, "sources": federation["sources"], "initial": federation["initial"], "view": view,
            "steps": [{"random": {"seed": seed, "steps": 40, "drop": 0.1, "reorder": 0.2, "duplicate": 0.05}},
                      {"run": "all"}]}
