"""warehouse.fifo_order: each source's messages processed in the order the source sent them
(Zhuge et al. 1996, section 3.3), as the live warehouse does for the Strobe family."""

from __future__ import annotations

import doctest

import pytest

import fedlab.warehouse.fifo_order
from fedlab.fedmodel.subquery import Answer
from fedlab.fedmodel.transactions import Notification
from fedlab.simulation.matrix import schedule
from fedlab.simulation.scenario import ScenarioError, parse_scenario
from fedlab.simulation.simulate import simulate
from fedlab.warehouse.core.events import AnswerArrived, NotificationArrived
from fedlab.warehouse.fifo_order import FifoOrder


def note(dsv: int, source: str = "x") -> NotificationArrived:
    return NotificationArrived(Notification(source, dsv, f"t{dsv}", ()))


def answer(dsv: int, id: str = "q", source: str = "x") -> AnswerArrived:
    return AnswerArrived(Answer(id, source, dsv, ()))


def order_of(events) -> list:
    return [(type(e).__name__[0], e.notification.dsv if isinstance(e, NotificationArrived) else e.answer.dsv)
            for e in events]


def test_an_answer_waits_for_the_notification_of_every_update_it_reflects():
    order = FifoOrder({"x": 1})
    assert order.arrived("x", [answer(3)]) == []
    assert order_of(order.arrived("x", [note(2)])) == [("N", 2)]
    assert order_of(order.arrived("x", [note(3)])) == [("N", 3), ("A", 3)]


def test_a_notification_waits_while_a_query_to_its_source_is_in_flight_then_follows_older_answers():
    order = FifoOrder({"x": 1})
    order.query_sent("x")
    assert order.arrived("x", [note(2), note(3)]) == []
    released = order.arrived("x", [answer(2, "a"), answer(1, "b")], query_done=True)
    assert order_of(released) == [("A", 1), ("N", 2), ("A", 2), ("N", 3)]


def test_a_failed_query_releases_what_it_held_and_a_resent_notification_is_dropped():
    order = FifoOrder({"x": 1, "y": 1})
    order.query_sent("x")
    assert order.arrived("x", [note(2)]) == []
    assert order_of(order.arrived("y", [note(2, "y")])) == [("N", 2)]   # other sources are not held
    assert order_of(order.arrived("x", [], query_done=True)) == [("N", 2)]
    assert order.arrived("x", [note(2)]) == [] and order.repeats == 1


def test_the_module_examples_run():
    assert doctest.testmod(fedlab.warehouse.fifo_order).failed == 0


# ---- the same FIFO order in the simulator (the scenario's fifo_repair) ----

@pytest.mark.parametrize("algorithm", ["c-strobe", "sweep"])
def test_the_simulator_repairs_reordering_with_the_live_warehouses_fifo_order(algorithm):
    """Under reordering both fall short of complete in some of these schedules; with the live
    warehouse's FIFO order they keep their claim in every one (what the live tests see)."""
    def levels(fifo_repair: bool) -> list[str]:
        return [simulate(parse_scenario(schedule(algorithm, "reordering", seed, fifo_repair=fifo_repair), "s"))
                ["consistency"] for seed in range(15)]
    assert set(levels(True)) == {"complete"}
    assert set(levels(False)) != {"complete"}


def test_fifo_repair_in_a_scenario_file_is_true_or_false():
    doc = schedule("strobe", "fifo", 0)
    doc["fifo_repair"] = "yes"
    with pytest.raises(ScenarioError, match="fifo_repair is true"):
        parse_scenario(doc, "f.yaml")
