"""source_node.resend_policy: when a source sends an unacknowledged notification again, the same
rule for the live sender and the simulated sources; and what it changes end to end: a
notification above a gap that can no longer close is not resent every round, so every algorithm
ends on a truncated log."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedlab.fedmodel.transactions import Notification
from fedlab.simulation.scenario import load_scenario
from fedlab.simulation.simulate import simulate
from fedlab.source_node.resend_policy import ResendPolicy
from fedlab.warehouse.core import registry

SHORT, LONG = 1.0, 10.0


def notes(*dsvs: int) -> list[Notification]:
    return [Notification("ds1", d, f"t{d}", ()) for d in dsvs]


def dsvs(sent) -> list[int]:
    return [n.dsv for n in sent]


@pytest.fixture
def policy():
    return ResendPolicy(SHORT, LONG)


def test_a_notification_goes_at_once_then_again_after_the_short_interval(policy):
    assert dsvs(policy.due(notes(2, 3), now=0.0)) == [2, 3]
    assert dsvs(policy.due(notes(2, 3), now=0.5)) == []
    assert dsvs(policy.due(notes(2, 3), now=1.0)) == [2, 3]


def test_a_slow_warehouse_stretches_the_short_interval_to_four_round_trips(policy):
    policy.round_trip.sample(0.75)                      # its replies take 0.75 s: wait 3 s, not 1
    policy.due(notes(2), now=0.0)
    assert dsvs(policy.due(notes(2), now=SHORT)) == []
    assert dsvs(policy.due(notes(2), now=3.0)) == [2]


def test_what_the_warehouse_received_waits_the_long_interval_even_above_a_gap(policy):
    policy.due(notes(2, 3, 4), now=0.0)
    policy.heard("w1", received=1, beyond=[3, 4], now=0.0)   # 2 was lost; 3 and 4 reached the core
    assert dsvs(policy.due(notes(2, 3, 4), now=1.0)) == [2]
    assert policy.held(3) and policy.held(4) and not policy.held(2)
    assert dsvs(policy.due(notes(2, 3, 4), now=10.0)) == [2, 3, 4]


def test_what_the_warehouse_received_goes_again_only_once_its_reports_stop(policy):
    """Acknowledgements wait for Delta, which under load takes longer than the long interval:
    while reports keep coming, what they say was received does not travel again."""
    policy.due(notes(2, 3), now=0.0)
    for t in range(1, 30):
        policy.heard("w1", received=3, now=float(t))
        assert dsvs(policy.due(notes(2, 3), now=t + 0.5)) == []
    assert dsvs(policy.due(notes(2, 3), now=29 + LONG - 0.1)) == []
    assert dsvs(policy.due(notes(2, 3), now=29 + LONG)) == [2, 3]   # silent for LONG: a restart no reply revealed


def test_a_new_incarnation_gets_at_once_what_it_lacks(policy):
    policy.due(notes(2, 3, 4), now=0.0)
    policy.heard("w1", received=4, now=0.0)
    assert not policy.restarted_by("w1") and policy.restarted_by("w2")
    policy.heard("w2", received=2, answered=[4], now=0.0)   # the reply to 4's copy: it has 4
    assert dsvs(policy.due(notes(2, 3, 4), now=0.1)) == [3]


def test_acknowledged_notifications_leave_for_good_and_forget_sends_everything_again(policy):
    policy.due(notes(2, 3), now=0.0)
    assert policy.next_due() == SHORT
    assert dsvs(policy.due(notes(3), now=SHORT)) == [3]        # 2 was acknowledged: out of the outbox
    assert dsvs(policy.due(notes(3, 4), now=SHORT + 0.1)) == [4]
    policy.forget()
    assert policy.next_due() is None
    assert dsvs(policy.due(notes(3, 4), now=SHORT + 0.2)) == [3, 4]


def test_only_new_notifications_leave_between_looks_at_the_whole_outbox(policy):
    assert dsvs(policy.due(notes(2), now=0.0)) == [2]
    assert dsvs(policy.due(notes(2, 3), now=0.5)) == [3]
    assert policy.next_due() == SHORT                            # 2 is the first due again
    assert dsvs(policy.due(notes(2, 3, 4), now=1.0)) == [2, 4]
    assert policy.next_due() == 1.5                              # 3 left at 0.5


def test_a_copy_sent_on_request_restarts_its_interval(policy):
    policy.due(notes(2), now=0.0)
    assert dsvs(policy.asked(notes(2), "w1", now=0.9)) == [2]
    assert dsvs(policy.due(notes(2), now=1.0)) == []
    assert dsvs(policy.due(notes(2), now=2.0)) == [2]


def test_a_resend_request_gets_only_what_its_warehouse_lacks(policy):
    policy.due(notes(2, 3, 4, 5), now=0.0)
    policy.heard("w1", received=1, beyond=[3, 5], now=0.0)   # 2 and 4 were lost
    assert dsvs(policy.asked(notes(2, 3, 4), "w1", now=0.5)) == [2, 4]
    assert dsvs(policy.asked(notes(2, 3, 4), "w2", now=0.5)) == [2, 3, 4]   # another process: all


SCENARIO = Path(__file__).parent / "scenarios" / "resynchronise_after_log_truncation.yaml"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algorithm", registry.names())
def test_every_algorithm_ends_when_a_lost_notification_is_gone_from_the_log(algorithm):
    result = simulate(load_scenario(SCENARIO), algorithm)
    # The notification above the gap reached the warehouse once, and went again at most on the
    # long timer, not every round.
    assert result["counters"].get("notification_resends", 0) <= 2, result["counters"]
    if algorithm == "sze-ling":   # the only one that notices the gap and resynchronises
        assert result["expectations_met"], result["failures"]
