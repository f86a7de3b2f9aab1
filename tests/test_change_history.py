"""The warehouse's change history (fedmodel.change_history): what the warehouse writes is what the
checker and the bench read, a crash mid-line loses only that line, and a malformed file gets one
line naming where."""

from __future__ import annotations

import pytest

from fedlab.fedmodel import change_history
from fedlab.fedmodel.change_history import ChangeHistory, ChangeHistoryError
from fedlab.warehouse.store.delta_store import AppliedTxn


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
    assert list(change_history.applied_states(tmp_path)) == [
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


def test_the_last_seq_is_read_from_the_end_of_a_long_history(tmp_path):
    history = ChangeHistory(tmp_path, ["A", "count"])
    history.write_initial({}, {"x": 1})
    big = [(("a" * 50_000,), 1)]   # lines longer than the first read from the end
    history.append([applied(seq, seq + 1, big if seq % 2 else [(("b",), seq)]) for seq in range(1, 8)])
    with open(tmp_path / change_history.CHANGES, "a") as out:
        out.write('{"seq": 8, "delta": [["' + "c" * 100_000)   # a crash mid-line, longer still
    assert ChangeHistory(tmp_path, ["A", "count"]).last_seq() == 7
    assert (tmp_path / change_history.CHANGES).read_text().endswith("\n")


def test_with_a_retention_the_history_keeps_its_last_states_and_the_view_before_them(tmp_path):
    history = ChangeHistory(tmp_path, ["A", "count"], retention=100.0)
    history.write_initial({("a1",): 1}, {"x": 1, "y": 1})
    view, seq, clock = {("a1",): 1}, 0, 1000.0
    for minute in range(6):   # a state every 10 s; a rotation due every 50 s
        for _ in range(6):
            seq, clock = seq + 1, clock + 10
            history.append([applied(seq, seq + 1, [((f"a{seq + 1}",), 1)])])
            view[(f"a{seq + 1}",)] = 1
            if history.rotation_due(clock):
                history.rotate(dict(view), clock)
        versions, first, states, final = change_history.read(tmp_path)
        assert final == view   # whatever was trimmed, the start plus the states kept is the view
        assert states[0]["dsv"] == versions["x"] + 1 and states[-1]["dsv"] == seq + 1
    # a retention's worth of states is kept (100 s: ten), and at most one and a half
    assert 10 <= len(states) <= 16, len(states)
    assert len(list(change_history.applied_states(tmp_path))) == len(states)
    assert history.last_seq() == seq == ChangeHistory(tmp_path, ["A", "count"], retention=100.0).last_seq()
    segments = sorted(p.name for p in tmp_path.iterdir())
    assert len(segments) <= 6, segments
