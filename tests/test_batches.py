"""warehouse.core.batches: the batch protocol the live warehouse and the simulator share."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fedlab.fedmodel.transactions import Notification
from fedlab.warehouse.core.batches import BatchLedger, Marks, for_every_view
from fedlab.warehouse.core.events import Acknowledge
from fedlab.warehouse.core.receipts import Receipts


def note(dsv: int, source: str = "s") -> Notification:
    return Notification(source, dsv, f"{source}{dsv}", ())


def state(**applied_dsv: int) -> dict:
    return {"sources": {s: {"applied_dsv": d} for s, d in applied_dsv.items()}}


def test_a_source_hears_only_what_a_committed_batch_held_when_it_was_taken():
    ledger = BatchLedger({"s": 1})
    ledger.receive(note(2))
    batch = ledger.take(state(s=1))
    ledger.receive(note(3))                 # arrives while the batch is written
    assert ledger.acked("s") == 1 and ledger.reached("s").dsv == 3
    ledger.committed(batch)
    assert ledger.acked("s") == 2           # 3 is in no durable batch yet
    assert [n.dsv for n in ledger.take(state(s=1)).notifications] == [3]


def test_a_notification_the_state_reflects_is_durable_in_the_view_not_kept_beside_it():
    ledger = BatchLedger({"s": 1})
    for d in (2, 3):
        ledger.receive(note(d))
    batch = ledger.take(state(s=2))
    assert [n.dsv for n in batch.notifications] == [3]
    ledger.committed(batch)
    assert (ledger.acked("s"), ledger.view_dsv("s")) == (3, 2)


def test_a_copy_is_kept_once_even_after_its_batch_committed():
    ledger = BatchLedger({"s": 1})
    assert ledger.receive(note(2))
    ledger.committed(ledger.take(state(s=1)))
    assert not ledger.receive(note(2))
    assert ledger.take(state(s=1)) is None


def test_a_failed_commit_is_taken_again_with_what_came_since():
    ledger = BatchLedger({"s": 1})
    ledger.apply("a1")
    first = ledger.take(state(s=1))
    assert not ledger.failed(first, last_durable=0)   # the store does not hold it
    ledger.apply("a2")
    again = ledger.take(state(s=1))
    assert (again.id, again.applied) == (1, ["a1", "a2"])


def test_a_failed_commit_the_store_holds_counts_as_committed():
    ledger = BatchLedger({"s": 1})
    ledger.receive(note(2))
    ledger.apply("a1")
    batch = ledger.take(state(s=2))
    ledger.apply("a2")
    assert ledger.failed(batch, last_durable=1)
    assert ledger.acked("s") == 2 and ledger.last_batch == 1
    nxt = ledger.take(state(s=2))
    assert (nxt.id, nxt.applied, nxt.notifications) == (2, ["a2"], [])


def test_a_restart_acknowledges_up_to_the_first_gap_in_what_was_kept():
    # DSV 3 never arrived: a source told 4 would drop 3 from its outbox for good.
    ledger = BatchLedger({"s": 1}, kept=[note(2), note(4)], last_batch=7)
    assert ledger.acked("s") == 2 and ledger.reached("s").beyond == (4,)
    assert ledger.take(state(s=1)) is None and ledger.last_batch == 7


def test_reading_past_a_gap_acknowledges_it_at_the_next_batch():
    ledger = BatchLedger({"s": 1})
    ledger.receive(note(4))
    ledger.read_past("s", 3)                # a resynchronisation no longer needs 2 and 3
    ledger.committed(ledger.take(state(s=4)))
    assert ledger.acked("s") == 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["receive", "apply", "take", "commit", "fail", "fail-durable"]),
                          st.integers(2, 9)), max_size=60))
def test_every_received_notification_and_applied_state_is_durable_once(ops):
    """Whatever the order of arrivals, applies and (failed) commits: every applied state is in
    exactly one durable batch, in apply order; every notification received is kept in one, or
    reflected by the state of one; and the acknowledged mark never passes a DSV that is in none."""
    ledger = BatchLedger({"s": 1})
    applied, durable_states, durable_notes, reflected = [], [], [], 1
    batch, n_applied = None, 0
    for op, dsv in ops + [("take", 0), ("commit", 0)]:
        if op == "receive":
            ledger.receive(note(dsv))
        elif op == "apply":
            n_applied += 1
            applied.append(n_applied)
            ledger.apply(n_applied)
        elif op == "take":
            batch = ledger.take(state(s=min(reflected + 1, 9)))
        elif batch is not None:
            if op == "fail":
                assert not ledger.failed(batch, ledger.last_batch)
            else:
                if op == "commit":
                    ledger.committed(batch)
                else:
                    assert ledger.failed(batch, batch.id)
                durable_states += batch.applied
                durable_notes += [n.dsv for n in batch.notifications]
                reflected = max(reflected, batch.state["sources"]["s"]["applied_dsv"])
            batch = None
    assert durable_states == applied
    assert len(durable_notes) == len(set(durable_notes))
    durable = set(durable_notes) | set(range(1, reflected + 1))
    assert all(d in durable for d in range(1, ledger.acked("s") + 1))
    received = {dsv for op, dsv in ops if op == "receive"}
    assert received <= durable


@given(st.lists(st.tuples(st.integers(0, 12), st.sets(st.integers(1, 20), max_size=8)), min_size=1, max_size=4),
       st.integers(0, 20))
def test_for_every_view_holds_a_dsv_only_where_every_view_holds_it(views, probe):
    marks = [Marks(dsv, Acknowledge("s", dsv, tuple(sorted(d for d in beyond if d > dsv))), dsv)
             for dsv, beyond in views]
    combined = for_every_view(marks)

    def held(m: Marks, d: int) -> bool:
        return d <= m.reached.dsv or d in m.reached.beyond

    assert held(combined, probe) == all(held(m, probe) for m in marks)
    assert combined.acked == min(m.acked for m in marks) and combined.view_dsv == min(m.view_dsv for m in marks)


@given(st.lists(st.tuples(st.sampled_from(["add", "advance"]), st.integers(1, 30)), max_size=40))
def test_receipts_say_what_arrived_after_any_adds_and_advances(ops):
    receipts, arrived = Receipts({"s": 0}), set()
    for op, dsv in ops:
        if op == "add":
            receipts.add("s", dsv)
            arrived.add(dsv)
        else:
            receipts.advance("s", dsv)
            arrived |= set(range(1, dsv + 1))
        contiguous = next(d for d in range(0, 32) if d + 1 not in arrived)
        assert receipts.contiguous("s") == contiguous
        assert receipts.beyond("s") == {d for d in arrived if d > contiguous}
        assert receipts.highest("s") == max(arrived, default=0)
