"""source_node.faults: rates are honoured, decisions are reproducible, rates change at run time."""

from __future__ import annotations

import statistics

import pytest

from fedlab.fedmodel.errors import ModelError
from fedlab.source_node.faults import FaultInjector

N = 20000


def decisions(f: FaultInjector, kind: str, n: int = N) -> list[list[float]]:
    return [f.decide(kind) for _ in range(n)]


def test_no_faults_by_default():
    assert decisions(FaultInjector(seed=1), "notification", 100) == [[0.0]] * 100


def test_drop_rate_is_honoured():
    got = decisions(FaultInjector(seed=2, drop=0.3), "notification")
    assert abs(sum(d == [] for d in got) / N - 0.3) < 0.02


def test_duplicate_rate_applies_to_messages_not_dropped():
    got = decisions(FaultInjector(seed=3, drop=0.5, duplicate=0.2), "answer")
    kept = [d for d in got if d]
    assert abs(len(kept) / N - 0.5) < 0.02
    assert abs(sum(len(d) == 2 for d in kept) / len(kept) - 0.2) < 0.02
    assert all(len(d) in (1, 2) for d in kept)


def test_delays_are_exponential_with_the_configured_mean():
    delays = [x for d in decisions(FaultInjector(seed=4, delay_mean=0.05), "notification") for x in d]
    assert abs(statistics.fmean(delays) - 0.05) < 0.0025
    # Exponential: the median is mean * ln 2, and spread is wide enough to reorder messages.
    assert abs(statistics.median(delays) - 0.05 * 0.6931) < 0.003
    assert min(delays) >= 0.0


def test_same_seed_gives_the_same_decisions():
    rates = dict(drop=0.2, duplicate=0.3, delay_mean=0.01)
    assert decisions(FaultInjector(seed=5, **rates), "answer", 500) == decisions(FaultInjector(seed=5, **rates), "answer", 500)
    assert decisions(FaultInjector(seed=5, **rates), "answer", 500) != decisions(FaultInjector(seed=6, **rates), "answer", 500)


def test_each_kind_has_its_own_stream_whatever_the_interleaving():
    alone = FaultInjector(seed=7, drop=0.5)
    mixed = FaultInjector(seed=7, drop=0.5)
    expected = decisions(alone, "notification", 300)
    got = []
    for _ in range(300):
        mixed.decide("answer")
        got.append(mixed.decide("notification"))
    assert got == expected


def test_rates_scoped_to_one_kind_leave_the_other_alone():
    f = FaultInjector(seed=8, answer_drop=1.0)
    assert decisions(f, "answer", 100) == [[]] * 100
    assert decisions(f, "notification", 100) == [[0.0]] * 100


def test_configure_changes_rates_at_run_time_and_keeps_the_others():
    f = FaultInjector(seed=9, duplicate=1.0)
    f.configure(notification_drop=1.0)
    assert f.decide("notification") == []
    assert f.decide("answer") == [0.0, 0.0]
    f.configure(notification_drop=0.0, duplicate=0.0)
    assert f.decide("notification") == [0.0]
    assert f.rates()["answer"] == {"drop": 0.0, "duplicate": 0.0, "delay_mean": 0.0}


@pytest.mark.parametrize("rates, message", [
    ({"loss": 0.1}, "unknown fault rate 'loss'"),
    ({"drop": 1.5}, "probability between 0 and 1"),
    ({"answer_delay_mean": -1}, "finite and not negative"),
    ({"duplicate": "often"}, "must be a number"),
])
def test_bad_rates_are_refused_and_change_nothing(rates, message):
    f = FaultInjector(seed=10, drop=0.25)
    with pytest.raises(ModelError, match=message):
        f.configure(answer_drop=0.5, **rates)
    assert f.rates()["answer"]["drop"] == 0.25


def test_unknown_message_kind_is_refused():
    with pytest.raises(ModelError, match="unknown message kind"):
        FaultInjector().decide("gossip")
