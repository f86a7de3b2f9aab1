"""SWEEP and Nested SWEEP (Agrawal, El Abbadi, Singh & Yurek 1997).

The scenario files (tests/scenarios/sweep_*.yaml) show the sweep and its local compensation on
the Strobe paper's Fixture A; here their states and traces are read, each decision of
warehouse/core/baselines/sweep.py is pinned by driving the algorithm event by event, and both
are run over random federations under FIFO delivery without loss, where the claims hold.
"""

from __future__ import annotations

from collections import Counter

import pytest
from scenario_support import SCENARIOS, events, run, seeds, states

from fedlab.fedmodel.subquery import Answer, RelationAnswer
from fedlab.fedmodel.transactions import Notification, RelationChange
from fedlab.simulation.scenario import LEVELS, load_scenario, parse_scenario
from fedlab.simulation.simulate import simulate
from fedlab.loadgen.synthetic import random_scenario
from fedlab.warehouse.core.baselines.sweep import NestedSweep, Sweep
from fedlab.warehouse.core.events import (
    AnswerArrived,
    NotificationArrived,
    SendSubquery,
    StateApplied,
    TimerFired,
    ViewQueried,
    ViewReady,
)

# ---- Fixture A, driven event by event ----

def fixture_a(cls=Sweep, r1=((1, 2),), **kwargs):
    """Fixture A over r1 (x), r2 = {} (y), r3 = {[3,4]} (z): V is empty; `r1` is only what answers hold."""
    view = load_scenario(SCENARIOS / "sweep_example1.yaml").view.join
    return cls(view, {}, {"r1": 1, "r2": 1, "r3": 1}, {"x": 1, "y": 1, "z": 1}, **kwargs)


def note(source, dsv, txn, relation, inserted=(), deleted=()):
    return NotificationArrived(Notification(source, dsv, txn, (RelationChange(relation, dsv, tuple(inserted),
                                                                             tuple(deleted)),)))


def answer(sq, dsv, rows):
    (rel,) = sq.relation_names
    return AnswerArrived(Answer(sq.id, sq.source, dsv, (RelationAnswer(rel, dsv, tuple(rows)),)))


def sent(actions) -> list:
    return [a.subquery for a in actions if isinstance(a, SendSubquery)]


def applied(actions) -> list[StateApplied]:
    return [a for a in actions if isinstance(a, StateApplied)]


def test_an_insert_queued_behind_the_update_is_subtracted_from_the_answer():
    alg = fixture_a()
    (q1,) = sent(alg.handle(note("y", 2, "U1", "r2", inserted=[(2, 3)])))
    assert (q1.source, q1.relation_names, q1.probe) == ("x", ("r1",), ((2,),))
    alg.handle(note("x", 2, "U2", "r1", inserted=[(5, 2)]))       # committed before x read r1
    (q2,) = sent(alg.handle(answer(q1, 2, [(1, 2), (5, 2)])))     # so the answer holds it
    assert q2.source == "z"
    (state,) = applied(alg.handle(answer(q2, 1, [(3, 4)])))
    assert (state.txn_id, state.delta) == ("U1", {(1, 2, 3, 4): 1})   # not (5, 2, 3, 4)
    assert alg.counters.compensations == 1


def test_a_delete_queued_behind_the_update_is_added_back_to_the_answer():
    alg = fixture_a()
    (q1,) = sent(alg.handle(note("y", 2, "U1", "r2", inserted=[(2, 3)])))
    alg.handle(note("x", 2, "U2", "r1", deleted=[(1, 2)]))
    (q2,) = sent(alg.handle(answer(q1, 2, [])))
    assert q2.probe == ((3,),)                                     # [1,2] join [2,3] goes on to r3
    (state,) = applied(alg.handle(answer(q2, 1, [(3, 4)])))
    assert state.delta == {(1, 2, 3, 4): 1}


def test_an_update_received_after_the_answer_is_not_compensated():
    alg = fixture_a()
    (q1,) = sent(alg.handle(note("y", 2, "U1", "r2", inserted=[(2, 3)])))
    (q2,) = sent(alg.handle(answer(q1, 1, [(1, 2)])))
    alg.handle(note("x", 2, "U2", "r1", deleted=[(1, 2)]))         # after x's answer: not in it
    (state,) = applied(alg.handle(answer(q2, 1, [(3, 4)])))
    assert state.delta == {(1, 2, 3, 4): 1} and alg.counters.compensations == 0


def test_compensation_trusts_the_queue_not_the_answers_dsv():
    # FIFO broken: x's answer reflects U2 (its DSV says 2) before U2's notification arrives.
    # SWEEP, as the paper, does not read the DSV: U1's change holds [5,2,3,4], and U2 adds it again.
    alg = fixture_a()
    (q1,) = sent(alg.handle(note("y", 2, "U1", "r2", inserted=[(2, 3)])))
    (q2,) = sent(alg.handle(answer(q1, 2, [(1, 2), (5, 2)])))
    (s1,) = applied(alg.handle(answer(q2, 1, [(3, 4)])))
    assert s1.delta == {(1, 2, 3, 4): 1, (5, 2, 3, 4): 1}
    (q3,) = sent(alg.handle(note("x", 2, "U2", "r1", inserted=[(5, 2)])))
    (q4,) = sent(alg.handle(answer(q3, 2, [(2, 3)])))
    alg.handle(answer(q4, 1, [(3, 4)]))
    assert alg.view_rows()[(5, 2, 3, 4)] == 2


def test_a_sweep_whose_partial_change_is_empty_sends_no_further_subquery():
    alg = fixture_a(r1=())
    (q1,) = sent(alg.handle(note("y", 2, "U1", "r2", inserted=[(2, 3)])))
    actions = alg.handle(answer(q1, 1, []))                        # no r1 partner: r3 is not asked
    assert sent(actions) == [] and [s.txn_id for s in applied(actions)] == ["U1"]
    assert alg.counters.subqueries == 1


def test_a_notification_that_changes_no_view_relation_still_gets_its_state():
    alg = fixture_a()
    (state,) = applied(alg.handle(note("x", 2, "N", "elsewhere", inserted=[(1,)])))
    assert (state.txn_id, state.delta, state.versions["x"]) == ("N", {}, 2)


def test_a_repeated_notification_is_processed_again():
    alg = fixture_a()
    for _ in range(2):
        (q1,) = sent(alg.handle(note("y", 2, "U1", "r2", inserted=[(2, 3)])))
        (q2,) = sent(alg.handle(answer(q1, 1, [(1, 2)])))
        alg.handle(answer(q2, 1, [(3, 4)]))
    assert alg.view_rows() == {(1, 2, 3, 4): 2}


def test_an_unanswered_subquery_is_sent_again_after_the_query_timeout_and_a_late_copy_ignored():
    alg = fixture_a(query_timeout=2.0)
    (q1,) = sent(alg.handle(note("y", 2, "U1", "r2", inserted=[(2, 3)])))
    assert sent(alg.handle(TimerFired(1.0))) == []
    assert sent(alg.handle(TimerFired(2.0))) == [q1]
    (q2,) = sent(alg.handle(answer(q1, 1, [(1, 2)])))
    assert alg.handle(answer(q1, 1, [(1, 2)])) == [] and alg.counters.duplicates == 1
    assert q2.source == "z" and alg.next_timer() == 0.0 + 2.0    # sent when the answer came (time 0)


def test_a_read_waits_until_the_view_reflects_what_was_received():
    alg = fixture_a()
    assert alg.handle(ViewQueried()) == [ViewReady()]               # nothing received: at once
    (q1,) = sent(alg.handle(note("y", 2, "U1", "r2", inserted=[(2, 3)])))
    assert alg.handle(ViewQueried()) == []
    (q2,) = sent(alg.handle(answer(q1, 1, [(1, 2)])))
    assert ViewReady() in alg.handle(answer(q2, 1, [(3, 4)]))


# ---- Nested SWEEP ----

def burst(cls, **kwargs):
    """U1 inserts [2,3] into r2; while x's answer for it is out, U2 and U3 insert [7,3] and [8,3]."""
    alg = fixture_a(cls, r1=((1, 2), (6, 7), (9, 8)), **kwargs)
    out = []
    (q,) = sent(alg.handle(note("y", 2, "U1", "r2", inserted=[(2, 3)])))
    alg.handle(note("y", 3, "U2", "r2", inserted=[(7, 3)]))
    alg.handle(note("y", 4, "U3", "r2", inserted=[(8, 3)]))
    pending = [q]
    while pending:
        sq = pending.pop(0)
        rows = {"r1": [(1, 2), (6, 7), (9, 8)], "r2": [(2, 3), (7, 3), (8, 3)], "r3": [(3, 4)]}[sq.relation_names[0]]
        actions = alg.handle(answer(sq, 4, rows))
        pending += sent(actions)
        out += applied(actions)
    return alg, out


def test_nested_sweep_folds_a_burst_into_one_state_with_fewer_subqueries():
    sweep, sweep_states = burst(Sweep)
    nested, nested_states = burst(NestedSweep)
    assert [s.txn_id for s in sweep_states] == ["U1", "U2", "U3"]
    assert [s.notes for s in nested_states] == [("U1", "U2", "U3")]   # U2, U3 folded: round 2, one sweep
    assert sweep.view_rows() == nested.view_rows() == {(1, 2, 3, 4): 1, (6, 7, 3, 4): 1, (9, 8, 3, 4): 1}
    assert (sweep.counters.subqueries, nested.counters.subqueries) == (6, 4)


def test_nested_sweep_folds_what_arrives_during_a_round_into_the_same_state():
    alg = fixture_a(NestedSweep)
    (q1,) = sent(alg.handle(note("y", 2, "U1", "r2", inserted=[(2, 3)])))
    alg.handle(note("x", 2, "U2", "r1", inserted=[(5, 2)]))       # arrives during U1's round
    (q2,) = sent(alg.handle(answer(q1, 2, [(1, 2), (5, 2)])))
    actions = alg.handle(answer(q2, 1, [(3, 4)]))                  # round 1 done: U2 folded, round 2
    assert applied(actions) == [] and alg.counters.folded == 1
    (q3,) = sent(actions)
    assert (q3.source, q3.relation_names) == ("y", ("r2",))
    (q4,) = sent(alg.handle(answer(q3, 2, [(2, 3)])))
    (state,) = applied(alg.handle(answer(q4, 2, [(3, 4)])))
    assert state.notes == ("U1", "U2") and state.delta == {(1, 2, 3, 4): 1, (5, 2, 3, 4): 1}


def test_nested_sweep_applies_after_depth_rounds_under_a_steady_stream():
    alg = fixture_a(NestedSweep, r1=(), depth=2)
    (q,) = sent(alg.handle(note("y", 2, "U1", "r2", inserted=[(2, 3)])))
    found = []
    for dsv in range(3, 7):                                        # one more update per round
        alg.handle(note("y", dsv, f"U{dsv - 1}", "r2", inserted=[(dsv * 10, 3)]))
        actions = alg.handle(answer(q, 1, []))
        found += [s.notes for s in applied(actions)]
        (q,) = sent(actions)
    assert found[:2] == [("U1", "U2"), ("U3", "U4")]


# ---- the scenario files ----

def test_example1_timing_under_sweep_ends_right_with_a_state_per_update():
    result = run("sweep_example1.yaml")
    assert result["expectations_met"]
    assert states(result) == [("U1", [[1, 2, 3, 4]]), ("U2", [])]
    assert events(result, "local-compensation") == []          # x answered U1 before U2 committed


def test_an_interfering_insert_and_delete_are_compensated_locally_without_a_query():
    result = run("sweep_interfering_insert_and_delete.yaml")
    assert result["expectations_met"] and result["consistency"] == "complete"
    assert states(result) == [("U1", [[1, 2, 3, 4]]), ("U2", []), ("U3", [[5, 2, 3, 4]])]
    (comp,) = events(result, "local-compensation")
    assert (comp["relation"], comp["transactions"], comp["removed"]) == ("r1", ["U2", "U3"], [[[1, 2], -1], [[5, 2], 1]])
    assert len(events(result, "subquery")) == 6        # two per update: no compensating query


def test_a_transaction_over_two_relations_of_one_source_gets_one_state():
    result = run("sweep_multi_relation_transaction.yaml")
    assert result["expectations_met"] and result["consistency"] == "complete"
    assert states(result) == [("T1", [[1, 2, 3, 4]]), ("T2", [])]
    comp = events(result, "local-compensation")[0]              # ΔR1 sees r2 old: T1's own [2,3] is taken out
    assert (comp["for"], comp["relation"], comp["removed"]) == ("r1", "r2", [[[2, 3], 1]])


def test_each_subquery_names_one_relation_on_either_access_path():
    for access in ("scan", "join-graph"):
        scenario = load_scenario(SCENARIOS / "sweep_multi_relation_transaction.yaml")
        scenario.access = access
        result = simulate(scenario)
        assert result["consistency"] == "complete"
        assert all(len(e["relations"]) == 1 for e in events(result, "subquery"))


# ---- random federations under FIFO without loss ----

def fifo_levels(name: str, seeds: range, transactions: str = "source-local", access: str | None = None) -> Counter:
    levels = Counter()
    for seed in seeds:
        doc = random_scenario(seed, drop=0.0, reorder=0.0, duplicate=0.0, steps=50, algorithm="strobe")
        doc["algorithm"] = name
        doc["steps"][0]["random"]["transactions"] = transactions
        if access:
            doc["access"] = access
        levels[simulate(parse_scenario(doc, f"{name} seed {seed}"))["consistency"]] += 1
    return levels


@pytest.mark.parametrize("name, claim", [("sweep", "complete"), ("nested-sweep", "strong")])
def test_the_papers_claim_holds_on_random_federations_under_fifo(name, claim):
    levels = fifo_levels(name, seeds(60))
    assert all(LEVELS.index(lv) >= LEVELS.index(claim) for lv in levels), levels


def test_sweep_stays_complete_on_join_graph_access():
    levels = fifo_levels("sweep", seeds(15), access="join-graph")
    assert set(levels) == {"complete"}, levels


# ---- the plug-ins ----

def test_the_plugins_claim_complete_and_strong_under_fifo_without_loss_and_cannot_restart():
    from fedlab.warehouse.core.baselines.sweep import NESTED_SWEEP, SWEEP
    assert (SWEEP.name, SWEEP.level, NESTED_SWEEP.name, NESTED_SWEEP.level) == ("sweep", "complete", "nested-sweep", "strong")
    view = fixture_a().view
    for plugin in (SWEEP, NESTED_SWEEP):
        a = plugin.assumptions
        assert (a.fifo, a.no_loss, a.keys_in_view, a.restartable) == (True, True, False, False)
        assert plugin.default_access == "scan" and plugin.maintained_view(view) is view   # counts, no keys


def test_the_factory_takes_the_access_path_and_query_timeout_from_settings():
    from fedlab.warehouse.core.baselines.sweep import NESTED_SWEEP, SWEEP
    from fedlab.warehouse.core.registry import Settings
    from fedlab.warehouse.core.timings import QUERY_TIMEOUT
    view = fixture_a().view
    alg = SWEEP.factory(view, {}, {"r1": 1, "r2": 1, "r3": 1}, {"x": 1, "y": 1, "z": 1},
                        Settings(access="join-graph", query_timeout=5.0))
    assert (type(alg), alg.access, alg.timeout) == (Sweep, "join-graph", 5.0)
    nested = NESTED_SWEEP.factory(view, {}, {"r1": 1, "r2": 1, "r3": 1}, {"x": 1, "y": 1, "z": 1}, Settings())
    assert (type(nested), nested.access, nested.timeout, nested.depth) == (NestedSweep, "scan", QUERY_TIMEOUT, 4)
