"""`fedlab calibrate` (simulation.calibrate): what each stretch of a bench run did, counted
from the run's files, without a live run (its files are stood in for)."""

from __future__ import annotations

from types import SimpleNamespace

from fedlab.simulation import calibrate


def test_every_stretch_counts_the_delta_batches_made_durable_in_it(monkeypatch, tmp_path):
    # the idle federation, then the load phase and one ramp step: a batch of two states in the
    # load, one of three in the ramp step, none while idle
    states = [{"applied_time": 10.5, "durable_time": 11.0, "versions": {}},
              {"applied_time": 10.6, "durable_time": 11.0, "versions": {}},
              *[{"applied_time": 20.5, "durable_time": 21.0, "versions": {}}] * 3]
    # the warehouse history is read as it is on disk: one pass (a generator)
    monkeypatch.setattr(calibrate.change_history, "applied_states", lambda folder: iter(states))
    monkeypatch.setattr(calibrate.RunFile, "read", staticmethod(
        lambda run_dir: SimpleNamespace(message_logs=lambda: {}, warehouse_history=tmp_path)))
    monkeypatch.setattr(calibrate, "read", lambda paths: iter([]))
    cpu = {"by_role": {"warehouse (python)": 0.5}}
    run = {"run_dir": str(tmp_path), "sources": ["s1"],
           "idle": {**cpu, "window": [0.0, 5.0]},
           "cpu": [{**cpu, "window": [10.0, 18.0], "offered": 800, "groups": {"s1": 40}},
                   {**cpu, "window": [20.0, 24.0], "offered": 1000, "groups": {"s1": 30}}]}
    idle, load, step = calibrate._stretches(run)
    assert idle["idle"] and not load["idle"]
    assert [s["warehouse"]["batch"] for s in (idle, load, step)] == [0, 1, 1]
    assert [s["warehouse"]["batch_state"] for s in (idle, load, step)] == [0, 2, 3]
    assert [s["driver"]["call"] for s in (load, step)] == [40, 30]
    assert step["sources"]["s1"]["commit_call"] == 30
