"""The warehouse's change history (fedmodel.change_history): what the warehouse writes is what the
checker and the bench read, a crash mid-line loses only that line, and a malformed file gets one
line naming where."""

from __future__ import annotations

import pytest

from fedmodel import change_history
from fedmodel.change_history import ChangeHistory, ChangeHistoryError
from warehouse.store.delta_store import AppliedTxn


def applied(seq: int, dsv: int, delta: list) -> AppliedTxn:
    return AppliedTxn(seq, "x", dsv, f"t{dsv}", 100.0 + seq, 200.0 + seq, {"x": dsv, "y": 1}, delta)


def test_what_the_warehouse_writes_is_what_the_checker_and_the_bench_read(tmp_path):
    history = ChangeHistory(tmp_path, ["A", "count"])
    history.write_initial({("a1",): 2}, {"x": 1, "y": 1})
    history.append([applied(1, 2, [(("a2",), 1)]), applied(2, 3, [(("a1",), -2), (("a3",), 1)])], durable_time=300.0)
    versions, first, states, final = change_history.read(tmp_path)
    assert (versions, first, final) == ({"x": 1, "y": 1}, {("a1",): 2}, {("a2",): 1, ("a3",): 1})
    assert [(s["transaction"], s["dsv"], s["versions"], s["delta"]) for s in states] == [
        ("t2", 2, {"x": 2, "y": 1}, {("a2",): 1}), ("t3", 3, {"x": 3, "y": 1}, {("a1",): -2, ("a3",): 1})]
    assert change_history.applied_states(tmp_path) == [
        {"applied_time": 201.0, "durable_time": 300.0, "versions": {"x": 2, "y": 1}},
        {"applied_time": 202.0, "durable_time": 300.0, "versions": {"x": 3, "y": 1}}]


def test_a_line_cut_by_a_crash_is_dropped_when_the_warehouse_starts_again(tmp_path):
    history = ChangeHistory(tmp_path, ["A", "count"])
    history.write_initial({}, {"x": 1})
    history.append([applied(1, 2, [(("a2",), 1)])])
    with open(tmp_path / change_history.CHANGES, "a") as out:
        out.write('{"seq": 2, "sour')
    assert history.last_seq() == 1
    assert len(change_history.read(tmp_path)[2]) == 1


@pytest.mark.parametrize("line, says", [
    ('{"seq": 1}', "line 1: malformed ('delta')"),
    ("not json", "line 1: malformed (invalid literal"),
])
def test_a_malformed_history_is_named_by_file_and_line(tmp_path, line, says):
    ChangeHistory(tmp_path, ["A", "count"]).write_initial({}, {"x": 1})
    (tmp_path / change_history.CHANGES).write_text(line + "\n")
    with pytest.raises(ChangeHistoryError) as err:
        change_history.read(tmp_path)
    message = str(err.value)
    assert message.startswith(f"warehouse history: {tmp_path / change_history.CHANGES} ") and says in message
    assert "\n" not in message
