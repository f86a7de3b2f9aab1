"""`fedlab simulate`: exit codes, the JSON object other tools read, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedlab.warehouse.core import registry

SCENARIOS = Path(__file__).parent / "scenarios"


@pytest.fixture
def fedlab(capsys):
    """Runs the CLI in-process; returns (returncode, stdout, stderr) like a finished process."""
    from types import SimpleNamespace

    from fedlab.cli import main

    def run(*args):
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = exit_.code
        out = capsys.readouterr()
        return SimpleNamespace(returncode=code, stdout=out.out, stderr=out.err)
    return run


def test_json_has_the_documented_keys_and_exit_zero(fedlab):
    out = fedlab("simulate", str(SCENARIOS / "sze_ling_examples_8_to_12.yaml"), "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert {"view", "states", "consistency", "expectations_met", "counters"} <= set(doc)
    assert {"subqueries", "messages", "rows_transferred", "bytes_transferred", "resends"} <= set(doc["counters"])
    assert doc["view"] == [] and doc["consistency"] == "complete" and doc["expectations_met"] is True
    assert doc["states"][1] == {"transaction": "t2", "view": [["b2", "c2", "f2", 1]]}


def test_failed_expectation_exits_one_with_a_diff(fedlab):
    out = fedlab("simulate", str(SCENARIOS / "sze_ling_example2.yaml"), "--algorithm", "sze-ling")
    assert out.returncode == 1
    assert "FAILED expect.view: expected [['c1', 3]], got [['c1', 2]]" in out.stdout


def test_trace_names_compensation_steps_with_their_version_numbers(fedlab):
    out = fedlab("simulate", str(SCENARIOS / "sze_ling_examples_8_to_12.yaml"))
    assert "compensate t1/R2: R1 from source, interfering updates (queried 2, initial 1)" in out.stdout
    assert "compensate t2/R1: R2 from view, missing updates (queried 1, initial 2)" in out.stdout


@pytest.mark.parametrize("change, message", [
    (("steps", [{"teleport": {}}]), "steps[0]: unknown step 'teleport'"),
    (("view", "SELECT B FROM R1 JOIN R9 ON R1.A = R9.A"), "unknown relation 'R9'"),
    (("view", "SELECT Q FROM R1"), "no relation in FROM has a column 'Q'"),
    (("view", "SELEC B FROM"), "view: "),
    (("steps", [{"commit": {"source": "ds1", "id": "t1", "insert": {"R2": [["b", "c"]]}}}]), "relation R2 is not at source ds1"),
    (("steps", [{"deliver": {"notification": "nope"}}]), "deliver needs {notification: ID}"),
    (("steps", [{"deliver": {"gossip": "x"}}]), "steps[0]: deliver names one message: {notification: ID}, "
                                                "{subquery: ID}, {answer: SUBQUERY ID} or {resend: SOURCE}"),
    (("steps", [{"drop": {"resend": "ds9"}}]), "steps[0]: drop needs {resend: SOURCE} naming a known source"),
    (("steps", [{"duplicate": {"subquery": ["q1"]}}]), "steps[0]: duplicate needs {subquery: ID}, the id of a sub-query"),
    (("steps", [{"deliver": {"answer": "q7"}}]), "steps[0]: an answer to q7 is not in flight"),
    (("steps", [{"queries": "sometimes"}]), "steps[0]: queries takes 'in-flight' or 'at-once'"),
    (("steps", [{"commit": {"source": "ds9", "id": "t1", "insert": {"R1": [["a", "b"]]}}}]), "unknown source 'ds9'"),
    (("steps", [{"commit": {"source": "ds1", "id": "t1", "insert": {"R1": [["a1", "b"]]}}}]), "duplicates key"),
])
def test_invalid_file_exits_two_with_one_line(fedlab, tmp_path, change, message):
    import yaml

    doc = yaml.safe_load((SCENARIOS / "sze_ling_example1.yaml").read_text())
    doc[change[0]] = change[1]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = fedlab("simulate", str(path))
    assert out.returncode == 2
    assert out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


def test_the_console_script_runs_and_lists_subcommands_each_with_its_own_help():
    top = subprocess.run([sys.executable, "-m", "fedlab.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert top.returncode == 0 and "simulate" in top.stdout
    sub = subprocess.run([sys.executable, "-m", "fedlab.cli", "simulate", "--help"], capture_output=True, text=True)
    assert "--algorithm" in sub.stdout


# ---- input adversarial testing found ending in a traceback or silently misread ----

def example1_with(tmp_path, changes: str) -> str:
    """Example 1's scenario file with the top-level keys of the YAML text `changes` replaced."""
    import yaml

    doc = yaml.safe_load((SCENARIOS / "sze_ling_example1.yaml").read_text())
    doc.update(yaml.safe_load(changes))
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("changes, message", [
    ("initial: {R1: [[18446744073709551616, b1]], R2: []}\nsteps: []",
     "initial.R1: R1.A is BIGINT, got 18446744073709551616, which does not fit in 64 bits"),
    ("constraints: {fds: [{relation: R1, from: [B]}]}", "constraints.fds[0] needs exactly relation, from, to"),
    ("constraints: [{relation: R1, from: [B], to: [A]}]", "'constraints' is a mapping with 'fds' and 'ri'"),
    ("constraints: {fds: [{relation: R1, from: BA, to: [A]}]}",
     "constraints.fds[0].from must be a list of column names, got 'BA'"),
    ("sources: {ds1: {R1: {columns: [A, B, F], key: [A]}}, ds2: {R2: {columns: [B, C], key: [B]}}}\n"
     "initial: {R1: [[a1, b1, on], [a2, b1, off]], R2: []}\nsteps: []\n"
     "view: SELECT C FROM R1 JOIN R2 ON R1.B = R2.B WHERE R1.F = 'on'",
     "view: R1.F = 'on' compares a boolean with text"),
    ("view: SELECT C FROM R1 JOIN R2 ON R1.B = R2.B WHERE R1.A IN (SELECT B FROM R2)",
     "view: a subquery (IN (SELECT ...)) in WHERE is not supported"),
    ("view: WITH x AS (SELECT R1.B, count(*) AS n FROM R1 GROUP BY R1.B) SELECT C FROM x JOIN R2 ON x.B = R2.B",
     "view: x aggregates (GROUP BY)"),
    ("constraints: {fds: [{relation: R1, from: [B], to: [A]}]}\ninitial: {R1: [[a1, b1], [a2, b1]], R2: []}",
     "initial: R1['a1', 'b1'] violates the functional dependency ['B'] -> ['A']"),
    ("sources: {ds1: {R1: {columns: [A, B], key: [A]}, P: {columns: [B], key: [B]}}, ds2: {R2: {columns: [B, C]}}}\n"
     "constraints: {ri: [{child: R1, columns: [B], parent: P, parent_columns: [B]}]}\n"
     "initial: {R1: [[a1, b1], [a2, b2]], P: [[b1]], R2: []}\nsteps: []",
     "initial: R1['a2', 'b2'] refers to no P row with ['B'] = ['b2']"),
], ids=["integer beyond 64 bits", "FD without to", "constraints as a list", "FD columns as a string",
        "YAML booleans compared with text", "subquery in WHERE", "aggregate CTE", "initial rows break an FD",
        "initial rows break an RI"])
def test_adversarial_input_exits_two_with_one_line(fedlab, tmp_path, changes, message):
    out = fedlab("simulate", example1_with(tmp_path, changes))
    assert (out.returncode, out.stdout) == (2, "")
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


@pytest.mark.parametrize("changes, message", [
    ("steps: [{random: {steps: -5}}]", "steps[0]: random.steps must be a positive integer, got -5"),
    ("steps: [{random: {seed: x}}]", "steps[0]: random.seed must be an integer, got 'x'"),
    ("steps: [{random: {drop: lots}}]", "steps[0]: random.drop must be a number between 0 and 1, got 'lots'"),
    ("expect: {view: [[c1, 0]]}", "expect.view: view row ['c1', 0] has count 0; the count (how many times the row "
                                  "is in the view) is a positive integer"),
    ("steps: [{expect_view: [[c1, -1]]}]", "steps[0]: view row ['c1', -1] has count -1"),
    ("expect: {view: [[on, 1]]}", "expect.view: view column C is VARCHAR, got the boolean True"),
], ids=["negative random steps", "random seed not a number", "random rate not a number", "expected count 0",
        "expected count -1", "expected value of another type"])
def test_a_step_or_expectation_that_could_never_mean_anything_exits_two(fedlab, tmp_path, changes, message):
    out = fedlab("simulate", example1_with(tmp_path, changes))
    assert (out.returncode, out.stdout) == (2, "")
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr


@pytest.mark.parametrize("algorithm", registry.names())
def test_every_algorithms_trace_prints_as_text(algorithm, capsys):
    # Fixture A's interleaving: sub-queries, answers, compensation of each algorithm's own kind.
    from fedlab.cli import main

    assert main(["simulate", "tests/scenarios/strobe_example1_conventional.yaml", "--algorithm", algorithm]) in (0, 1)
    out = capsys.readouterr().out
    assert f"algorithm: {algorithm}" in out and "consistency: " in out
