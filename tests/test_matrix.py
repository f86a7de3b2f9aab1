"""`fedlab matrix`: the consistency matrix runs, has its documented shape, holds the papers'
claims under the conditions they assume, and its counterexamples replay to the same verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from scenario_support import QUICK

from fedlab.cli import main
from fedlab.simulation.matrix import CONDITIONS, markdown, run_matrix, schedule, shrink, widening_note
from fedlab.simulation.scenario import LEVELS, load_scenario, parse_scenario
from fedlab.simulation.simulate import simulate
from fedlab.warehouse.core import registry

ORDER = [p.name for p in registry.plugins()]   # weakest claim first


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    out = tmp_path_factory.mktemp("matrix")
    # One schedule a cell in the fast loop; shrinking itself: test_shrinking.py.
    return run_matrix(schedules=1 if QUICK else 2, seed=3, out=out, replays=5), out


def test_every_algorithm_meets_every_condition_in_one_cell(matrix):
    cells, _ = matrix
    assert [(c["algorithm"], c["condition"]) for c in cells] == [(a, c) for a in ORDER for c in CONDITIONS]
    for cell in cells:
        assert {"algorithm", "condition", "level", "schedules", "short_of"} <= set(cell)
        assert cell["level"] in LEVELS and cell["schedules"] == (1 if QUICK else 2)
        assert list(cell["short_of"]) == list(LEVELS[1:])
        # the cell's level held everywhere; each level above it failed at least once
        above = LEVELS[LEVELS.index(cell["level"]) + 1:]
        assert all(cell["short_of"][lv] == 0 for lv in LEVELS[1:] if lv not in above)
        assert all(cell["short_of"][lv] >= 1 for lv in above)


@pytest.mark.parametrize("algorithm", ["sze-ling", "versioned", "salem"])
def test_sze_ling_versioned_and_salem_are_complete_under_every_condition(matrix, algorithm):
    cells, _ = matrix
    assert {c["condition"]: c["level"] for c in cells if c["algorithm"] == algorithm} == dict.fromkeys(CONDITIONS, "complete")


def test_lazy_is_strongly_consistent_under_every_condition(matrix):
    cells, _ = matrix
    assert {c["condition"]: c["level"] for c in cells if c["algorithm"] == "lazy"} == dict.fromkeys(CONDITIONS, "strong")


def test_counterexamples_replay_with_fedlab_simulate_to_the_same_verdict(matrix):
    cells, out = matrix
    written = [c for c in cells if c["level"] != "complete"]
    assert written and all("counterexample" in c for c in written)
    for cell in written:
        scenario = load_scenario(cell["counterexample"])
        result = simulate(scenario)
        assert scenario.algorithm == cell["algorithm"]
        assert result["consistency"] == cell["level"]
        assert result["expectations_met"] is False   # it names the level it misses


@pytest.mark.parametrize("algorithm, transactions, claim", [
    ("strobe", "single-update", "strong"),
    ("t-strobe", "source-local", "strong"),
    ("c-strobe", "source-local", "complete"),
])
def test_the_papers_claims_hold_in_the_fifo_column(algorithm, transactions, claim):
    (cell,) = run_matrix(schedules=6, seed=40, algorithms=[algorithm], conditions=["fifo"], transactions=transactions)
    assert LEVELS.index(cell["level"]) >= LEVELS.index(claim), cell


def test_the_markdown_table_has_a_row_per_algorithm_and_a_column_per_condition(matrix):
    cells, _ = matrix
    lines = markdown(cells).splitlines()
    assert lines[0] == "| algorithm | claims | " + " | ".join(CONDITIONS) + " |"
    assert [line.split(" | ")[0].lstrip("| ") for line in lines[2:]] == list(ORDER)
    assert [line.split(" | ")[1] for line in lines[2:]] == [registry.get(a).level for a in ORDER]


def test_each_cell_is_judged_against_the_claim_and_names_the_assumptions_its_condition_breaks(matrix):
    cells, _ = matrix
    by = {(c["algorithm"], c["condition"]): c for c in cells}
    assert by[("t-strobe", "fifo")]["breaks"] == []
    assert by[("t-strobe", "reordering")]["breaks"] == ["fifo"]
    assert by[("strobe", "all")]["breaks"] == ["fifo", "no_loss", "single_update"]   # source-local transactions
    assert by[("sze-ling", "all")]["breaks"] == []
    for cell in cells:
        below = registry.LEVELS.index(cell["level"]) < registry.LEVELS.index(cell["claims"])
        assert cell["claim_failed"] == (below and not cell["breaks"])
    assert not any(c["claim_failed"] for c in cells)


def test_the_cli_prints_json_cells_and_writes_the_counterexample(tmp_path, capsys):
    code = main(["matrix", "--schedules", "2", "--seed", "7", "--algorithms", "conventional,sze-ling",
                 "--conditions", "fifo,all", "--json", "--out", str(tmp_path)])
    assert code == 0
    cells = json.loads(capsys.readouterr().out)
    assert [(c["algorithm"], c["condition"]) for c in cells] == [
        ("conventional", "fifo"), ("conventional", "all"), ("sze-ling", "fifo"), ("sze-ling", "all")]
    for cell in cells:
        assert (tmp_path / f"{cell['algorithm']}-{cell['condition']}.yaml").exists() == (cell["level"] != "complete")
        assert ("counterexample_steps" in cell) == (cell["level"] != "complete")


def test_the_cli_rejects_an_unknown_condition(capsys):
    assert main(["matrix", "--conditions", "earthquake"]) == 2
    assert "earthquake" in capsys.readouterr().err


def test_a_restart_loses_held_queries_and_resends_what_was_not_acknowledged():
    doc = yaml.safe_load((Path(__file__).parent / "scenarios" / "sze_ling_example1.yaml").read_text())
    doc.update(algorithm="sze-ling", expect={"view": [["c1", 2]], "consistency": "complete"}, steps=[
        {"commit": {"source": "ds2", "id": "t1", "insert": {"R2": [["b1", "c1"]]}}},
        {"deliver": {"notification": "t1"}},
        {"hold": {"queries_to": "ds2"}},
        {"commit": {"source": "ds1", "id": "t2", "insert": {"R1": [["a2", "b1"]]}}},
        {"deliver": {"notification": "t2"}},          # its sub-query waits at ds2
        {"commit": {"source": "ds2", "id": "t3", "insert": {"R2": [["b9", "c9"]]}}},
        {"restart": {"source": "ds2"}},              # the sub-query is lost; t1 and t3 are sent again:
        {"run": "all"}])                             # neither was acknowledged (t1 reached the warehouse,
    result = simulate(parse_scenario(doc))           # but no batch had made it durable yet)
    assert result["expectations_met"], result["failures"]
    assert result["counters"]["restarts"] == 1 and result["counters"]["notification_resends"] == 2
    assert result["counters"]["algorithm_retries"] >= 1
    assert result["counters"]["algorithm_duplicates"] == 2      # t1 again; t3's copy in flight and the resent one
    assert [s["transaction"] for s in result["states"]] == ["t1", "t2", "t3"]


def test_the_matrix_reports_where_the_strobe_family_maintained_a_widened_view():
    # Federation 6's view lacks a relation's key (7 and 9 too); 5's has every key.
    cells = run_matrix(schedules=2, seed=5, algorithms=["strobe", "sze-ling"], conditions=["fifo"])
    assert [(c["algorithm"], c["widened"]) for c in cells] == [("strobe", 1), ("sze-ling", 0)]
    assert "strobe in 1/2 schedules" in widening_note(cells) and "sze-ling" not in widening_note(cells)
    result = simulate(parse_scenario(schedule("strobe", "fifo", 6), "seed 6"))
    assert len(result["maintained_columns"]) > len(result["columns"]) and result["maintained_view"] is not None


def test_a_broken_core_yields_a_shrunk_counterexample_of_explicit_steps_that_replays(tmp_path, monkeypatch, capsys):
    import fedlab.warehouse.core.sze_ling.computation as computation

    monkeypatch.setattr(computation, "compensate", lambda rows, *args, **kwargs: list(rows))   # broken on purpose
    argv = ["matrix", "--schedules", "1", "--seed", "2", "--algorithms", "sze-ling", "--conditions", "fifo",
            "--out", str(tmp_path)]
    assert main([*argv, "--json"]) == 1   # the claim (complete) fails with its assumptions kept
    out, err = capsys.readouterr()
    (cell,) = json.loads(out)
    assert cell["level"] == "none" and cell["claim_failed"]   # federation 2's schedule ends with a wrong view
    assert err.strip() == "fedlab matrix: below the claimed level with its assumptions kept: sze-ling under fifo"
    path, steps = cell["counterexample"], cell["counterexample_steps"]
    assert steps["shrunk"] < steps["recorded"] / 4, steps
    written = yaml.safe_load(Path(path).read_text())
    assert len(written["steps"]) == steps["shrunk"] and written["steps"][-1] == {"run": "all"}
    assert not any("random" in step for step in written["steps"])   # it replays whatever the generator becomes
    assert f"none, not convergence ({steps['shrunk']} of the {steps['recorded']} steps" in written["name"]
    assert main(["simulate", path, "--json"]) == 1   # an expectation (convergence) fails ...
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["consistency"] == "none" and replayed["failures"][-1]["where"] == "expect.consistency"
    assert main(argv) == 1   # the text output lists the file with both counts, and marks the cell
    out = capsys.readouterr().out
    assert f"{path}: {steps['shrunk']} steps, shrunk from {steps['recorded']}" in out
    assert "| sze-ling | complete | **none (1/1 short of convergence): its claim fails** |" in out
    monkeypatch.undo()   # the healthy core: the same steps meet the expectation
    assert main(["simulate", path]) == 0


def test_shrinking_keeps_only_the_steps_the_failure_needs_within_its_replays():
    needs = lambda steps: 3 in steps and 17 in steps   # noqa: E731
    assert shrink(list(range(40)), needs) == [3, 17]
    calls = []
    shrink(list(range(40)), lambda steps: calls.append(steps) or needs(steps), replays=5)
    assert len(calls) == 5
