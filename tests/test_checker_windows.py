"""The checker's windowed judgment (checker.windows), which reads a long run a window of
states at a time: on random simulated runs it calls a run complete exactly when the whole-history
judgment (checker.levels) does, whatever the window's size, and it names the state where a
run falls short; a source log that misses transactions is refused in one line."""

from __future__ import annotations

import pytest
from scenario_support import QUICK
from test_checker_levels import CATALOG, HISTORY, INITIAL, VIEW

from fedlab.checker.levels import classify
from fedlab.checker.oracle import DuckDBBackend, Oracle
from fedlab.checker.windows import Complete, LoadedLog, LogError, Shortfall, judge
from fedlab.simulation.scenario import parse_scenario
from fedlab.simulation.simulator import Simulator
from fedlab.loadgen.synthetic import random_scenario

SEEDS = range(8 if QUICK else 40)


def deltas(states: list[dict], start: dict) -> list[dict]:
    """The simulator's states (each its whole view) as the warehouse's history holds them: deltas."""
    out, before = [], dict(start)
    for s in states:
        after = s["view"]
        delta = {r: c for r in {*before, *after} if (c := after.get(r, 0) - before.get(r, 0))}
        out.append({**{k: v for k, v in s.items() if k != "view"}, "delta": delta})
        before = after
    return out


def logs(catalog, initial: dict, history: dict) -> dict[str, LoadedLog]:
    """Each source's history as a checker reads it from the source: its relations at its last DSV."""
    out = {}
    for source in catalog.sources:
        tables = {r.name: {r.key_of(row): tuple(row) for row in initial.get(r.name, [])} for r in catalog.relations_at(source)}
        for n in history.get(source, []):
            for c in n.changes:
                rel = catalog.relation(c.relation)
                for row in c.removed:
                    tables[rel.name].pop(rel.key_of(row))
                for row in c.added:
                    tables[rel.name][rel.key_of(row)] = tuple(row)
        log = history.get(source, [])
        out[source] = LoadedLog(log[-1].dsv if log else 1, {n: list(t.values()) for n, t in tables.items()}, log)
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_windows_call_a_run_complete_exactly_when_the_whole_history_does(seed):
    doc = random_scenario(seed, adversarial=seed % 2 == 1, aggregate=seed % 3 == 2, algorithm="sze-ling",
                          drop=(seed % 3) * 0.1, reorder=0.2, duplicate=0.05, steps=30 + seed % 30)
    scenario = parse_scenario(doc, f"seed {seed}")
    sim = Simulator(scenario, "lazy" if seed % 4 == 3 else None)   # lazy's states reflect several at once
    sim.execute()
    history = sim.history()
    backend = DuckDBBackend()
    oracle = Oracle(scenario.catalog, scenario.view.sql, scenario.initial, history, backend)
    start = {s: 1 for s in scenario.catalog.sources}
    whole = classify(oracle, sim.run.states, sim.final_view())
    states = deltas(sim.run.states, oracle.views_at([start])[0])
    for window in (1, 3, 1000):
        windowed = judge(scenario.catalog, scenario.view.sql, logs(scenario.catalog, scenario.initial, history), start,
                         oracle.views_at([start])[0], iter(states), backend, window=window)
        assert isinstance(windowed, Complete) == (whole.level == "complete"), (seed, window, whole.level, windowed)
        if isinstance(windowed, Complete):
            assert (windowed.states, windowed.transactions) == (whole.states, whole.transactions)
            assert windowed.windows == max(1, -(-len(states) // window))


# The Strobe paper's Fixture A, extended (tests/test_checker_levels.py): x, y, z; V = r1 |><| r2 |><| r3.
START = {"x": 1, "y": 1, "z": 1}
V1, V3 = {(1, 2, 3, 4): 1}, {(5, 2, 3, 4): 1}


def state(source, dsv, x, y, z, delta):
    return {"source": source, "dsv": dsv, "versions": {"x": x, "y": y, "z": z}, "delta": delta}


def windowed(states, history=HISTORY, window=2):
    return judge(CATALOG, VIEW, logs(CATALOG, INITIAL, history), START, {}, iter(states), DuckDBBackend(), window=window)


def test_a_run_that_falls_short_is_named_at_its_state():
    complete = [state("x", 2, 2, 1, 1, {}), state("y", 2, 2, 2, 1, {}), state("z", 2, 2, 2, 2, {}),
                state("x", 3, 3, 2, 2, V3)]
    assert windowed(complete) == Complete(4, 4, 2)
    # y's insert applied first shows (1, 2, 3, 4); a state that leaves it out is not the view it claims
    wrong = [state("y", 2, 1, 2, 1, {}), state("x", 2, 2, 2, 1, {}), *complete[2:]]
    assert windowed(wrong) == Shortfall(0, "it is not the view at the source state it claims")
    skipped = [complete[0], state("z", 2, 2, 2, 2, {}), complete[3]]
    assert "moves past more or fewer than one transaction" in windowed(skipped).why
    assert windowed(skipped).state == 1
    lost = complete[:3]
    assert windowed(lost).state is None and "does not reach" in windowed(lost).why
    with pytest.raises(LogError, match="holds DSVs 3..3 of 2..3"):
        windowed(complete, {**HISTORY, "x": HISTORY["x"][1:]})
