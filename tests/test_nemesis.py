"""Nemesis schedules (nemesis.schedule): read from text, each clause's mistake named in one
line, drawn at random from a seed, and checked against what a local run can apply
(nemesis.local); what each fault did, in phases and plotted (nemesis.effects,
nemesis.plot). The faults applied live are tests/test_run_chaos.py's."""

from __future__ import annotations

import pytest

from fedlab.fedmodel.errors import ModelError
from fedlab.nemesis import effects, local, plot
from fedlab.nemesis.schedule import Fault, draw, parse, read

SOURCES = ["crm", "ordering", "sales"]


def test_a_schedule_reads_each_fault_kind_in_time_order_and_writes_back_as_it_was_read():
    text = ("kill warehouse at 12s; pause crm at 5s for 3s; partition warehouse|sales at 20s for 10s; "
            "partition load->sales at 40s for 500ms; clock ordering -2m at 50s")
    faults = parse(text, SOURCES)
    assert faults == [Fault("pause", ("crm",), 5.0, 3.0), Fault("kill", ("warehouse",), 12.0),
                      Fault("partition", ("warehouse", "sales"), 20.0, 10.0),
                      Fault("partition", ("load", "sales"), 40.0, 0.5, one_way=True),
                      Fault("clock", ("ordering",), 50.0, offset=-120.0)]
    assert parse("; ".join(map(str, faults)), SOURCES) == faults


@pytest.mark.parametrize("text, message", [
    ("", "--nemesis: the schedule is empty"),
    ("pause crm at 5s", "--nemesis: 'pause crm at 5s': pause takes 'for <duration>'"),
    ("kill crm at 5s for 2s", "--nemesis: 'kill crm at 5s for 2s': kill takes no 'for'"),
    ("clock crm at 1s", "--nemesis: 'clock crm at 1s': clock takes an offset, e.g. +300s"),
    ("pause crm +5s at 1s for 1s", "--nemesis: 'pause crm +5s at 1s for 1s': pause takes no offset"),
    ("pause nobody at 1s for 1s", "--nemesis: 'pause nobody at 1s for 1s': no target 'nobody' "
                                  "(sources: crm, ordering, sales; or sources, warehouse, load, executors, ray-head, "
                                  "raylet:SOURCE, everything, node:NODE)"),
    ("kill everything at 1s", "--nemesis: 'kill everything at 1s': everything is a partition's second side, "
                              "e.g. crm|everything"),
    ("partition everything|crm at 1s for 1s", "--nemesis: 'partition everything|crm at 1s for 1s': everything is "
                                              "a partition's second side, e.g. crm|everything"),
    ("pause raylet:crm at 1s for 1s", "--nemesis: 'pause raylet:crm at 1s for 1s': a raylet can only be killed"),
    ("kill raylet:nobody at 1s", "--nemesis: 'kill raylet:nobody at 1s': no target 'raylet:nobody' "
                                 "(sources: crm, ordering, sales; or sources, warehouse, load, executors, ray-head, "
                                 "raylet:SOURCE, everything, node:NODE)"),
    ("partition crm at 1s for 1s", "--nemesis: 'partition crm at 1s for 1s': a partition names two sides, X|Y or X->Y, "
                                   "or one node, node:N"),
    ("pause crm|sales at 1s for 1s", "--nemesis: 'pause crm|sales at 1s for 1s': only a partition names two sides"),
    ("pause crm at soon for 1s", "--nemesis: 'pause crm at soon for 1s': bad duration 'soon': use e.g. 500ms, 20s, 2m, 1h"),
    ("jump crm at 1s", "--nemesis: 'jump crm at 1s': write e.g. 'pause crm at 5s for 3s', 'kill warehouse at 10s', "
                       "'partition warehouse|crm at 20s for 5s', 'clock crm +300s at 30s' or 'crash node:warehouse at 40s'"),
    ("pause crm at 1s for 5s; kill sources at 2s",
     "--nemesis: 'kill sources at 2s' starts before 'pause crm at 1s for 5s' ends, on the same target"),
])
def test_a_wrong_clause_is_named_in_one_line(text, message):
    with pytest.raises(ModelError) as err:
        parse(text, SOURCES)
    assert str(err.value) == message


def test_whole_node_faults_name_a_node_by_its_name_or_by_what_runs_on_it():
    text = ("crash node:warehouse at 10s; restart node:warehouse at 70s; partition node:crm at 80s for 15s; "
            "drain node:n3 at 100s for 20s")
    faults = parse(text, SOURCES)
    assert faults == [Fault("crash", ("node:warehouse",), 10.0), Fault("restart", ("node:warehouse",), 70.0),
                      Fault("partition", ("node:crm",), 80.0, 15.0), Fault("drain", ("node:n3",), 100.0, 20.0)]
    assert all(f.of_node for f in faults) and not Fault("kill", ("warehouse",), 1.0).of_node
    assert parse("; ".join(map(str, faults)), SOURCES) == faults


@pytest.mark.parametrize("text, message", [
    ("kill node:n3 at 1s", "--nemesis: 'kill node:n3 at 1s': a node is crashed, restarted, partitioned or drained "
                           "(e.g. crash node:warehouse at 40s)"),
    ("crash warehouse at 1s", "--nemesis: 'crash warehouse at 1s': crash takes one node: node:NAME, or "
                              "node:warehouse, node:load, node:ray-head or node:SOURCE for the node that one runs on "
                              "(sources: crm, ordering, sales)"),
    ("drain node:sources at 1s for 2s", "--nemesis: 'drain node:sources at 1s for 2s': drain takes one node: "
                                        "node:NAME, or node:warehouse, node:load, node:ray-head or node:SOURCE for the "
                                        "node that one runs on (sources: crm, ordering, sales)"),
    ("drain node:n2 at 1s", "--nemesis: 'drain node:n2 at 1s': drain takes 'for <duration>'"),
    ("crash node:n2 at 1s for 5s", "--nemesis: 'crash node:n2 at 1s for 5s': crash takes no 'for'"),
    ("restart node:n2 at 5s", "--nemesis: 'restart node:n2 at 5s' restarts no node: no 'crash node:n2' before it"),
    ("crash node:n2 at 1s; partition node:n2 at 3s for 1s; restart node:n2 at 9s",
     "--nemesis: 'partition node:n2 at 3s for 1s' starts before 'crash node:n2 at 1s' ends, on the same target"),
])
def test_a_wrong_node_clause_is_named_in_one_line(text, message):
    with pytest.raises(ModelError) as err:
        parse(text, SOURCES)
    assert str(err.value) == message


def test_a_node_crashed_and_restarted_may_be_crashed_again():
    text = "crash node:crm at 1s; restart node:crm at 5s; crash node:crm at 6s; restart node:crm at 9s"
    assert [f.kind for f in parse(text, SOURCES)] == ["crash", "restart", "crash", "restart"]


def test_faults_on_one_target_one_after_the_other_are_taken():
    assert len(parse("pause crm at 1s for 2s; kill crm at 3s; pause sales at 1s for 9s", SOURCES)) == 3


def test_a_drawn_schedule_is_the_seeds_and_leaves_time_to_recover_between_faults():
    faults = draw(7, 60.0, SOURCES)
    assert faults == draw(7, 60.0, SOURCES) and faults != draw(8, 60.0, SOURCES)
    assert len(faults) == 6 and {f.kind for f in draw(1, 600.0, SOURCES)} == {"pause", "kill", "partition", "clock"}
    for window, fault in enumerate(faults):   # one fault per 10 s window, over before the next begins
        assert window * 10 <= fault.at and fault.end < (window + 1) * 10, fault
    assert parse("; ".join(map(str, faults)), SOURCES) == faults


def test_a_local_run_is_given_only_faults_it_can_apply():
    faults = draw(3, 300.0, SOURCES, local.refusal)
    assert len(faults) == 30 and all(local.refusal(f) is None for f in faults)
    assert {f.kind for f in faults} == {"pause", "kill"}
    assert {f.kind for f in faults if f.targets == ("warehouse",)} == {"pause", "kill"}   # held, or restarted
    refused = parse("pause load at 1s for 1s; clock crm +5s at 3s; kill sources at 5s; kill executors at 7s; "
                    "crash node:crm at 9s", SOURCES)
    assert [local.refusal(f) for f in refused] == [
        "the load generator runs inside the run's own process", "a local run's processes share the machine's clock",
        "kill one source at a time",
        "only a cluster has Spark executors, a Ray head of their own and raylets per node (nemesis.node)",
        "a local run has one machine: whole-node faults need a cluster's nodes (nemesis.node)"]


def test_each_fault_owns_the_load_until_the_next_one_and_a_phase_with_nothing_committed_says_so():
    applied = [{"fault": "pause a at 1s for 1s", "began": 101.0, "ended": 102.0},
               {"fault": "kill warehouse at 3s", "began": 103.0, "ended": 106.0}]
    lags = [(101.2, 0.9), (101.5, 0.6), (104.0, 2.5), (109.0, 0.1), (111.0, 0.1)]   # the last after the load
    phases = effects.phases(applied, lags, 100.0, 110.0)
    assert [(p["phase"], p["committed"], p["staleness_ms"]["max"]) for p in phases] == [
        ("before any fault", 0, None), ("pause a at 1s for 1s", 2, 900.0), ("kill warehouse at 3s", 2, 2500.0)]
    assert [p.get("window_s") for p in phases] == [None, 1.0, 3.0]
    assert [effects.describe(p) for p in phases] == [
        "before any fault: 0 transactions, nothing committed",
        "pause a at 1s for 1s: 2 transactions, staleness p50 600 ms, max 900 ms",
        "kill warehouse at 3s: 2 transactions, staleness p50 100 ms, max 2,500 ms"]


def test_commits_are_counted_in_each_second_from_the_load_start_and_none_outside_it():
    commits = [99.9, 100.0, 100.5, 101.999, 103.0, 104.0]
    assert plot.per_second(commits, 100.0, 4) == [2, 1, 0, 1]


def test_a_fault_begun_a_moment_before_the_load_is_drawn_from_its_start():
    applied = [{"fault": "kill crm at 0s", "began": 99.99, "ended": 99.995},
               {"fault": "pause crm at 0s for 2s", "began": 99.99, "ended": 102.0}]
    assert plot.fault_windows(applied, 100.0) == [("kill crm at 0s", 0.0, 0.0), ("pause crm at 0s for 2s", 0.0, 2.0)]


def test_the_fault_plot_is_a_png_where_it_was_asked_for(tmp_path):
    applied = [{"fault": "pause crm at 1s for 2s", "began": 101.0, "ended": 103.0},
               {"fault": "kill crm at 4s", "began": 104.0, "ended": 104.0},
               {"fault": "kill warehouse at 5s", "began": 105.0, "ended": 112.5}]   # restarted after the load
    lags = [(100.0 + i / 10, 0.004 if i < 10 else 2.0) for i in range(100)]
    path = plot.plot_faults(tmp_path / "plots" / "faults.png", applied, lags, 100.0, 110.0)
    assert path == tmp_path / "plots" / "faults.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_schedule_drawn_for_fedlab_run_holds_only_what_the_run_can_apply():
    restartable = [f for seed in range(6)
                   for f in read(f"random:{seed}", SOURCES, 60.0, local.refuser("sze-ling", True))]
    assert ("warehouse",) in {f.targets for f in restartable if f.kind == "kill"}
    for seed in range(6):
        faults = read(f"random:{seed}", SOURCES, 60.0, local.refuser("strobe", False))
        assert all(local.refusal(f) is None and (f.kind, f.targets) != ("kill", ("warehouse",)) for f in faults), faults
