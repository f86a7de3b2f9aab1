"""What the algorithm tests read from a simulated scenario (tests/scenarios/*.yaml): its states,
its trace's events of one kind."""

from __future__ import annotations

from pathlib import Path

from loadgen.simulation.scenario import load_scenario
from loadgen.simulation.simulate import simulate

SCENARIOS = Path(__file__).parent / "scenarios"


def run(name: str, algorithm: str | None = None) -> dict:
    """The scenario file `name` simulated (under `algorithm` instead of its own, if given)."""
    return simulate(load_scenario(SCENARIOS / name), algorithm)


def states(result) -> list[tuple[str, list]]:
    return [(s["transaction"], s["view"]) for s in result["states"]]


def events(result, kind: str) -> list[dict]:
    return [e for e in result["trace"] if e["event"] == kind]
