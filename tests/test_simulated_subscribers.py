"""Several warehouses subscribed to one simulated federation (simulation.subscribers): each
view judged by the checker's oracle; one warehouse down or lagging holds back only its own
notifications (the others stay complete and keep nothing unacknowledged), its sources keep what it
lacks, and when it comes back it catches up, complete; removing it releases what was kept."""

from __future__ import annotations

import random

import pytest
from scenario_support import SCENARIOS

from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.simulation.scenario import load_scenario, parse_scenario
from fedlab.simulation.simulate import judge
from fedlab.simulation.simulator import RandomTransactions
from fedlab.simulation.subscribers import Subscribers

TWO_SOURCES = load_scenario(SCENARIOS / "sze_ling_example1.yaml")
# ds1 also holds Q, which the view does not read: the second warehouse's copies leave its changes out.
WITH_UNREAD = parse_scenario({
    "name": "a source with a relation the view does not read",
    "sources": {"ds1": {"R1": {"columns": ["A", "B"], "key": ["A"]}, "Q": {"columns": ["K"], "key": ["K"]}},
                "ds2": {"R2": {"columns": ["B", "C"], "key": ["B"]}}},
    "view": "SELECT C FROM R1 JOIN R2 ON R1.B = R2.B",
    "initial": {"R1": [["a1", "b1"]], "R2": [["b1", "c1"]], "Q": [["k0"]]},
    "steps": []})


def random_commits(fed: Subscribers, rng: random.Random, n: int) -> None:
    workload = RandomTransactions(next(iter(fed.warehouses.values())).scenario, rng)
    done = 0
    while done < n:
        source = rng.choice(sorted(fed.sources))
        request = workload.transaction(fed.sources[source])
        if request is not None:
            fed.commit(source, request)
            done += 1


def assert_complete_and_caught_up(fed: Subscribers, name: str) -> None:
    w = fed.warehouses[name]
    verdict = judge(w)
    assert verdict.level == "complete", (name, verdict.first_violation)
    assert len(w.run.states) == sum(store.dsv - 1 for store in fed.sources.values()), name
    assert all(store.unacknowledged(name) == [] for store in fed.sources.values()), name


@pytest.mark.parametrize("seed", range(3))
def test_every_subscriber_keeps_its_view_complete(seed):
    fed = Subscribers(TWO_SOURCES, ["warehouse", "w2", "w3"], "sze-ling")
    rng = random.Random(seed)
    for _ in range(4):
        random_commits(fed, rng, 5)
        fed.run_all()
    for name in fed.warehouses:
        assert_complete_and_caught_up(fed, name)


@pytest.mark.parametrize("seed", range(3))
def test_a_down_subscriber_stalls_no_other_and_catches_up_when_back(seed):
    fed = Subscribers(TWO_SOURCES, ["warehouse", "w2"], "sze-ling")
    rng = random.Random(seed)
    random_commits(fed, rng, 4)
    fed.run_all()
    fed.down("w2")
    lacks_from = {s: store.dsv + 1 for s, store in fed.sources.items()}
    for _ in range(3):
        random_commits(fed, rng, 5)
        fed.run_all()
        assert_complete_and_caught_up(fed, "warehouse")   # never held back by w2
        for s, store in fed.sources.items():   # the log keeps what w2 lacks, every DSV of it
            assert [n.dsv for n in store.unacknowledged("w2")] == list(range(lacks_from[s], store.dsv + 1))
            assert store.retained_from() <= lacks_from[s]
    fed.back("w2")
    fed.run_all()
    for name in fed.warehouses:
        assert_complete_and_caught_up(fed, name)
    assert all(store.retained_from() == store.dsv + 1 for store in fed.sources.values())


def test_a_lagging_subscriber_takes_its_backlog_later_and_stays_complete():
    fed = Subscribers(TWO_SOURCES, ["warehouse", "slow"], "sze-ling")
    rng = random.Random(7)
    for _ in range(3):
        random_commits(fed, rng, 5)
        fed.run("warehouse")   # only the fast one takes its messages
        assert_complete_and_caught_up(fed, "warehouse")
    assert sum(len(store.unacknowledged("slow")) for store in fed.sources.values()) == 15
    fed.run("slow")
    assert_complete_and_caught_up(fed, "slow")


def test_removing_a_down_subscriber_releases_what_was_kept_for_it():
    fed = Subscribers(TWO_SOURCES, ["warehouse", "w2"], "sze-ling")
    fed.down("w2")
    random_commits(fed, random.Random(3), 6)
    fed.run_all()
    assert any(store.retained_from() <= store.dsv for store in fed.sources.values())
    for store in fed.sources.values():
        store.unsubscribe("w2")
        assert store.retained_from() == store.dsv + 1
    assert_complete_and_caught_up(fed, "warehouse")


def test_a_subscriber_reads_only_its_views_relations_and_stays_complete():
    fed = Subscribers(WITH_UNREAD, ["warehouse", "w2"], "sze-ling")
    fed.commit("ds1", TransactionRequest("q1", inserts={"Q": [("k1",)]}))
    fed.commit("ds1", TransactionRequest("r1", inserts={"R1": [("a2", "b1")]}))
    w2 = fed.warehouses["w2"]
    sent = [m.payload for m in w2.flight if m.kind == "notification"]
    assert [(n.dsv, [c.relation for c in n.changes]) for n in sent] == [(2, []), (3, ["R1"])]
    fed.run_all()
    for name in fed.warehouses:
        assert_complete_and_caught_up(fed, name)
    assert sorted(w2.view_rows()) == [("c1", 2)]
