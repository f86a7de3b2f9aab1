"""A `random` step takes every decision as an explicit scenario step: the steps a run
records replay it exactly, whatever the generator becomes; and a source's notifications and
answers are lost or duplicated by its FaultInjector, as in a live run."""

from __future__ import annotations

from collections import Counter

import pytest
import yaml
from scenario_support import QUICK

from fedlab.simulation.matrix import CONDITIONS, RESTART_CONDITIONS, schedule
from fedlab.simulation.scenario import parse_scenario
from fedlab.simulation.simulate import simulate
from fedlab.simulation.simulator import Simulator
from fedlab.loadgen.synthetic import random_scenario
from fedlab.source_node.faults import FaultInjector

FAULTS = {**CONDITIONS, **RESTART_CONDITIONS}


def recorded(doc: dict) -> list[dict]:
    return Simulator(parse_scenario(doc, "recording")).execute().steps


def as_file(doc: dict, steps: list[dict]) -> dict:
    """`doc` with `steps` in place of its own, through YAML as a file would be."""
    return yaml.safe_load(yaml.safe_dump({**doc, "steps": steps}, sort_keys=False))


def shape(step: dict) -> tuple:
    """A step's kind and what it names: ("drop", "answer"), ("restart", "warehouse"), ..."""
    kind, args = next(iter(step.items()))
    return kind, next(iter(args)) if isinstance(args, dict) else args


@pytest.mark.parametrize("condition", list(FAULTS))
@pytest.mark.parametrize("algorithm, transactions", [("sze-ling", "source-local"), ("lazy", "source-local"),
                                                     ("conventional", "single-update")])
def test_a_random_schedule_replays_from_its_recorded_explicit_steps(condition, algorithm, transactions):
    for seed in range(1 if QUICK else 3):
        doc = schedule(algorithm, condition, seed, transactions=transactions)
        steps = recorded(doc)
        assert not any("random" in s for s in steps) and steps[-1] == {"run": "all"}
        original, replayed = simulate(parse_scenario(doc, "random")), simulate(parse_scenario(as_file(doc, steps), "replay"))
        for key in ("states", "view", "consistency", "checker", "counters", "trace"):
            assert replayed[key] == original[key], (condition, algorithm, seed, key)
        assert recorded(as_file(doc, steps)) == steps   # the replay records itself


def test_the_recorded_steps_name_every_kind_of_fault():
    """Over a few schedules of every fault together, each decision a random step can take shows."""
    seen = Counter(shape(s) for seed in range(10) for s in recorded(schedule("sze-ling", "everything", seed)))
    expected = {("commit", "source"), ("tick", "timers"), ("restart", "source"), ("restart", "warehouse"),
                ("queries", "in-flight"), ("queries", "at-once"), ("run", "all"),
                ("fail_batch", "refused"), ("fail_batch", "stored")}
    expected |= {(fate, kind) for fate in ("deliver", "drop", "duplicate") for kind in ("notification", "answer")}
    expected |= {("deliver", "subquery"), ("drop", "subquery")}
    assert expected <= set(seen), expected - set(seen)
    assert any(kind == "resend" for _, kind in seen)   # rarer: a gap the warehouse asks to fill


def fates(doc: dict) -> dict[tuple[str, str], list[int]]:
    """Per (source, kind), the copies of each notification and answer that a random step let
    arrive (0 dropped, 1 delivered, 2 duplicated), in the order it decided them."""
    sim = Simulator(parse_scenario(doc, "fates"))
    sim.execute()
    source_of = {("notification", s["commit"]["id"]): s["commit"]["source"] for s in sim.run.steps if "commit" in s}
    source_of.update({("answer", e["id"]): e["source"] for e in sim.run.trace if e["event"] == "subquery"})
    got: dict = {}
    for step in sim.run.steps:
        fate, args = next(iter(step.items()))
        if fate in ("drop", "deliver", "duplicate") and ("subquery" not in args and "resend" not in args):
            (kind, name), = args.items()
            got.setdefault((source_of[(kind, name)], kind), []).append(("drop", "deliver", "duplicate").index(fate))
    return got


def test_a_sources_notifications_and_answers_fare_as_its_fault_injector_decides():
    seed, rates = 5, {"drop": 0.3, "duplicate": 0.2}
    got = fates(random_scenario(seed, steps=150, reorder=0.3, **rates))
    assert {kind for _, kind in got} == {"notification", "answer"}
    for (source, kind), copies in got.items():
        injector = FaultInjector(f"{seed}:{source}", **rates)   # the seeding docs/scenarios.md gives
        assert copies == [len(injector.decide(kind)) for _ in copies], (source, kind)
    every = [c for copies in got.values() for c in copies]
    assert {0, 1, 2} <= set(every)


def test_with_every_message_dropped_no_notification_reaches_the_warehouse_during_the_random_step():
    doc = random_scenario(2, steps=60, drop=1.0, reorder=0.3, duplicate=0.5)
    doc["steps"] = doc["steps"][:1]   # no `run: all` after it
    sim = Simulator(parse_scenario(doc, "all lost"))
    run = sim.execute()
    notifications = Counter(shape(s)[0] for s in run.steps if shape(s)[1] == "notification")
    assert notifications["drop"] > 0 and set(notifications) == {"drop"}
    assert not any(e["event"] == "deliver" and e["kind"] == "notification" for e in run.trace)
    assert run.states == []
