"""The Delta view store: batches committed with one journal append each, the view read as its base
plus the journal's deltas and compacted, the change log, idempotent re-commits, restart from
Delta, crash recovery, and full materialization checked against DuckDB.

Expected view contents are computed independently here with collections.Counter; DuckDB is the
oracle for `materialize`. Tiny data, few batches: every Delta commit costs a few Spark jobs.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from fedlab.fedmodel.transactions import Notification, RelationChange
from fedlab.warehouse.spark_session import (
    JAVA_OPTS,
    JVM_NICE,
    _with_jars,
    cached_delta_jars,
    class_archive,
    driver_java_options,
    jvm_pid,
    local_fs_jar,
)
from fedlab.warehouse.store.delta_append import DeltaAppender
from fedlab.warehouse.store.delta_store import AppliedTxn, DeltaViewStore, StoreError
from fedlab.warehouse.store.materialize import materialize
from fedlab.warehouse.store.sparktypes import from_spark

pytestmark = pytest.mark.spark

COLUMNS = ["k", "name", "day", "price"]
TYPES = ["BIGINT", "VARCHAR", "DATE", "DOUBLE"]
INITIAL = {(1, "a", "2024-01-01", 1.5): 2, (2, "b", None, 2.0): 1, (3, "c", "2024-01-03", None): 1}


def txn(seq, dsv, delta, source="ds1"):
    return AppliedTxn(seq, source, dsv, f"{source}-t{dsv}", 1000.0 + dsv, 2000.0 + seq,
                      {source: dsv}, list(delta))


def notification(source, dsv):
    return Notification(source, dsv, f"{source}-t{dsv}",
                        (RelationChange("R1", dsv, inserted=((dsv, "x"),)),), 1000.0 + dsv)


def state(dsv):
    return {"relations": {"R1": {"processing": dsv, "refreshed": dsv}}, "sources": {"ds1": {"applied_dsv": dsv}}}


# Three batches. Row (4, ...) is inserted in batch 1 and deleted in batch 2; the initial row 2 is
# deleted in batch 1; row 1 goes from 2 to 3 to 1; batch 3 inserts and deletes the same row in
# two transactions (net zero: the MERGE must not see it, the change log must keep both).
R4 = (4, "d", "2024-02-04", 4.0)
R5 = (5, "e", None, None)
BATCHES = [
    (1, [txn(0, 1, [((1, "a", "2024-01-01", 1.5), 1), (R4, 1)]),
         txn(1, 2, [((2, "b", None, 2.0), -1)])]),
    (2, [txn(2, 3, [(R4, -1), (R5, 2)]),
         txn(3, 4, [((1, "a", "2024-01-01", 1.5), -2)])]),
    (3, [txn(4, 5, [((6, "f", "2024-03-06", 6.5), 1)]),
         txn(5, 6, [((6, "f", "2024-03-06", 6.5), -1), (R5, 1)])]),
]


def net_delta(applied):
    total = Counter()
    for a in applied:
        for row, change in a.delta:
            total[row] += change
    return [(row, c) for row, c in total.items() if c]


def expected_view(upto):
    view = Counter(INITIAL)
    for batch_id, applied in BATCHES[:upto]:
        for a in applied:
            for row, change in a.delta:
                view[row] += change
    return {row: c for row, c in view.items() if c}


def commit(store, batch_id, applied, notifications=()):
    return store.commit_batch(batch_id, applied, net_delta(applied), state(applied[-1].dsv),
                              list(notifications))


@pytest.fixture(scope="module")
def committed(spark, tmp_path_factory):
    """A store initialized and carried through the three batches (duplicate notifications included)."""
    root = str(tmp_path_factory.mktemp("delta-store"))
    store = DeltaViewStore(spark, root, COLUMNS, TYPES)
    assert store.initialize(INITIAL, state(0)) is True
    assert store.initialize({(9, "z", None, 0.0): 1}, state(0)) is False  # already there: no-op
    notes = [[notification("ds1", 1), notification("ds1", 2), notification("ds1", 2)],
             [notification("ds1", 2), notification("ds1", 3), notification("ds1", 4)],
             [notification("ds1", 5), notification("ds1", 6)]]
    for (batch_id, applied), batch_notes in zip(BATCHES, notes):
        assert commit(store, batch_id, applied, batch_notes) is True
    return root, store


def test_view_is_the_net_effect_and_zero_counts_disappear(committed):
    _, store = committed
    view = store.read_view()
    assert view == expected_view(3)
    assert R4 not in view and (2, "b", None, 2.0) not in view and (6, "f", "2024-03-06", 6.5) not in view
    assert view[(1, "a", "2024-01-01", 1.5)] == 1 and view[R5] == 3


def test_change_log_keeps_each_transaction_in_apply_order(committed):
    _, store = committed
    log = store.read_change_log()
    assert log == [a for _, applied in BATCHES for a in applied]
    assert [e.batch_id for e in log] == [1, 1, 2, 2, 3, 3]
    assert log[5].delta == [((6, "f", "2024-03-06", 6.5), -1), (R5, 1)]
    assert [e.seq for e in store.read_change_log(after_seq=3)] == [4, 5]


def test_recommitting_a_batch_is_a_no_op(committed):
    _, store = committed
    assert commit(store, 3, BATCHES[2][1]) is False
    assert commit(store, 2, BATCHES[1][1]) is False
    with pytest.raises(StoreError, match="already committed"):  # seq 6 is not in batch 3
        commit(store, 3, BATCHES[2][1] + [txn(6, 7, [(R5, 1)])])
    assert store.read_view() == expected_view(3)
    assert len(store.read_change_log()) == 6


def test_notifications_are_stored_once_per_source_and_dsv(committed):
    _, store = committed
    stored = store.read_notifications()
    assert [(n.source, n.dsv) for n in stored] == [("ds1", d) for d in range(1, 7)]
    assert stored[2] == notification("ds1", 3)


def test_load_from_a_new_store_object_returns_the_same_state(committed, spark):
    root, store = committed
    restored = DeltaViewStore(spark, root, COLUMNS, TYPES).load()
    assert restored.view == expected_view(3)
    assert restored.state == state(6)
    assert (restored.last_seq, restored.last_batch, restored.pending) == (5, 3, [])
    assert store.read_version_state(1) == state(2)


def test_bad_batches_are_rejected_before_anything_is_written(committed):
    _, store = committed
    applied = [txn(6, 7, [(R5, 1)])]
    with pytest.raises(StoreError, match="differs from the sum"):
        store.commit_batch(4, applied, [(R5, 2)], state(7), [])
    with pytest.raises(StoreError, match="seq must grow"):
        commit(store, 4, [txn(5, 7, [(R5, 1)])])
    with pytest.raises(StoreError, match="version_state must be"):
        store.commit_batch(4, applied, [(R5, 1)], {"sources": {"ds1": 7}}, [])
    with pytest.raises(StoreError, match="does not match the view's types"):
        commit(store, 4, [txn(6, 7, [(("6", "f", "2024-03-06", 6.5), 1)])])
    with pytest.raises(StoreError, match="does not match the view's types"):
        commit(store, 4, [txn(6, 7, [((6, "f", "2024-13-45", 6.5), 1)])])
    with pytest.raises(StoreError, match="must not include 'count'"):
        DeltaViewStore(store._spark, store.root, COLUMNS + ["count"], TYPES + ["BIGINT"])
    assert store.last_batch_id == 3


def test_crash_windows_are_closed_by_recovery(spark, tmp_path, monkeypatch):
    root = str(tmp_path / "crash")
    store = DeltaViewStore(spark, root, COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))
    batch1 = BATCHES[0][1]
    real_write, real_append = DeltaViewStore._write, DeltaAppender.append

    # 1. A crash before the journal append (the commit point) leaves nothing of the batch.
    def crash(self, table, *args, **kwargs):
        raise RuntimeError(f"simulated crash before writing {table}")
    monkeypatch.setattr(DeltaAppender, "append", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        commit(store, 1, batch1)
    # 2. The journal append reached Delta but the caller never heard back: batch 1 is committed;
    #    the next call recovers and re-committing it is a no-op.
    def append_then_crash(self, table, *args, **kwargs):
        real_append(self, table, *args, **kwargs)
        raise RuntimeError("simulated crash after writing journal")
    monkeypatch.setattr(DeltaAppender, "append", append_then_crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        commit(store, 1, batch1)
    monkeypatch.setattr(DeltaAppender, "append", real_append)
    assert commit(store, 1, batch1) is False
    restored = DeltaViewStore(spark, root, COLUMNS, TYPES).load()
    assert (restored.view, restored.state, restored.last_seq, restored.last_batch) == (expected_view(1), state(2), 1, 1)

    # 3. A delta that removes more than the view holds is refused and logs nothing, by a store
    #    object that learnt the counts from Delta alone.
    fresh = DeltaViewStore(spark, root, COLUMNS, TYPES)
    with pytest.raises(StoreError, match="with count < 0"):
        commit(fresh, 2, [txn(2, 3, [(R4, -5)])])
    assert fresh.read_view() == expected_view(1) and len(fresh.read_change_log()) == 2

    # 4. A batch that applied nothing (only notifications arrived) is committed by its state row.
    waiting = {**state(2), "relations": {"R1": {"processing": 3, "refreshed": 2}}}
    assert store.commit_batch(2, [], [], waiting, [notification("ds1", 3)]) is True
    assert (store.read_version_state(), store.last_batch_id) == (waiting, 2)
    assert [n.dsv for n in store.read_notifications()] == [3]

    # 5. A compaction that crashed before its overwrite leaves the old base, which the journal completes.
    monkeypatch.setattr(DeltaViewStore, "_write", crash)
    with pytest.raises(RuntimeError, match="simulated crash before writing view"):
        store.compact()
    monkeypatch.setattr(DeltaViewStore, "_write", real_write)
    assert DeltaViewStore(spark, root, COLUMNS, TYPES).read_view() == expected_view(1)


# The salem algorithm's timed view delta: rows (view row, count, (commit_time, source, dsv), epoch),
# journaled beside the batch and read as the view as of a wall time. Epoch 7 is the live one.
R1 = (1, "a", "2024-01-01", 1.5)
R2 = (2, "b", None, 2.0)
R6 = (6, "f", "2024-03-06", 6.5)
TIMED = {1: [(R5, 2, (1002.0, "ds2", 1), 7),        # applied by batch 2: ignored from then on
             (R1, -1, (1003.0, "ds1", 2), 7),       # the count may be negative
             (R6, 1, (1004.0, "ds2", 2), 7),
             (R6, -1, (1005.0, "ds1", 3), 7),       # R6 gone again
             (R4, 0, (1005.5, "ds2", 2), 7),        # dropped
             (R4, 1, (1001.0, "ds1", 1), 7),        # at ds1's applied_dsv: already in the view
             ((9, "z", None, 0.0), 5, (1002.5, "ds2", 3), 6)],   # an older epoch: dead
         2: [(R2, -1, (1006.0, "ds1", 4), 7),       # the view's only R2: gone
             (R5, 1, (1007.0, "ds2", 3), 7)]}
SALEM = [(1, [txn(0, 1, [(R4, 1)])], {"ds1": 1, "ds2": 0}, 1001_000_000, 1008_000_000),
         (2, [txn(1, 1, [(R5, 2)], source="ds2")], {"ds1": 1, "ds2": 1}, 1002_000_000, 1009_500_000)]


def salem_state(applied_dsv, materialized_us, reach_us):
    return {"sources": {s: {"applied_dsv": d} for s, d in applied_dsv.items()},
            "salem": {"view_delta": {"epoch": 7, "materialized_us": materialized_us, "reach_us": reach_us}}}


def expected_as_of(upto, at):
    """The view of batch `upto` plus its live timed rows beyond the view committed by `at`, by Counter."""
    view, applied_dsv = Counter(INITIAL), SALEM[upto - 1][2]
    for _, applied, *_ in SALEM[:upto]:
        for a in applied:
            for row, change in a.delta:
                view[row] += change
    for batch_id in range(1, upto + 1):
        for row, change, (stamp, source, dsv), epoch in TIMED[batch_id]:
            if epoch == 7 and dsv > applied_dsv[source] and stamp <= at:
                view[row] += change
    return {row: c for row, c in view.items() if c}


def test_the_view_as_of_a_time_adds_the_timed_view_delta(spark, tmp_path):
    root = str(tmp_path / "salem")
    store = DeltaViewStore(spark, root, COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))
    with pytest.raises(StoreError, match="^the view in Delta has no view delta: only the salem algorithm keeps one$"):
        store.view_as_of(1001.0)
    with pytest.raises(StoreError, match="timed rows are"):
        store.commit_batch(1, SALEM[0][1], net_delta(SALEM[0][1]), salem_state(*SALEM[0][2:]),
                           timed=[(R6, 1, (1004.0, "ds2"), 7)])
    for n, (batch_id, applied, *point) in enumerate(SALEM):
        # batch 2 by a store object that learnt everything from Delta: the epochs in `seq` must not
        # pass for change-log seq numbers
        writer = store if n == 0 else DeltaViewStore(spark, root, COLUMNS, TYPES)
        assert writer.commit_batch(batch_id, applied, net_delta(applied), salem_state(*point),
                                   timed=TIMED[batch_id]) is True
    plain = Counter(INITIAL) + Counter({R4: 1, R5: 2})
    assert store.read_view() == plain and store.read_view(1) == {**INITIAL, R4: 1}   # timed rows are not applied
    for at in (1002.0, 1003.0, 1004.5, 1009.4999):
        assert store.view_as_of(at) == expected_as_of(2, at), at
    assert expected_as_of(2, 1009.0) == {R1: 1, (3, "c", "2024-01-03", None): 1, R4: 1, R5: 3}   # by hand
    assert store.view_as_of(1005.0, batch=1) == expected_as_of(1, 1005.0) == {**INITIAL, R1: 1, R4: 1, R5: 2}
    assert store.view_as_of_df(1004.5).columns == COLUMNS + ["count"]
    with pytest.raises(StoreError, match=r"^time 1009.5 is beyond the view delta's high-water mark "
                                         r"\(readable up to 1009.500000 \(1970-01-01T00:16:49.500000Z\), exclusive\)$"):
        store.view_as_of(1009.5)
    with pytest.raises(StoreError, match=r"^time 1001.5 is before the view's state in Delta \(at 1002.000000 "):
        store.view_as_of(1001.5)
    assert store.view_as_of(1001.5, batch=1) == expected_as_of(1, 1001.5)
    assert writer.compact() is True   # up to batch 2, the writer's: folds the deltas, not the timed rows
    assert read_optimized(spark, root) == plain and store.view_as_of(1006.0) == expected_as_of(2, 1006.0)


def collected(df):
    return {tuple(from_spark(v) for v in r[:-1]): r[-1] for r in df.collect()}


def read_optimized(spark, root):
    """The view table alone, as a Spark reader that skips the journal sees it."""
    return collected(spark.read.format("delta").load(f"{root}/view"))


def test_compaction_folds_the_deltas_into_the_base_and_reads_stay_exact(spark, tmp_path):
    root = str(tmp_path / "compact")
    store = DeltaViewStore(spark, root, COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))
    commit(store, 1, BATCHES[0][1])
    assert read_optimized(spark, root) == INITIAL            # the base waits for a compaction
    assert store.read_view() == expected_view(1)
    before = store.view_df()   # a reader pins the base whose tag it read
    assert store.compact() is True and store.compact() is False
    assert read_optimized(spark, root) == expected_view(1)
    assert collected(before) == expected_view(1)   # evaluated after the compaction: batch 1 once
    for batch_id, applied in BATCHES[1:]:
        commit(store, batch_id, applied)
    assert read_optimized(spark, root) == expected_view(1)
    assert store.read_view() == expected_view(3)
    assert DeltaViewStore(spark, root, COLUMNS, TYPES).load().view == expected_view(3)
    assert store.compact() is True
    assert read_optimized(spark, root) == store.read_view() == expected_view(3)
    commit(store, 4, [txn(6, 7, [(R5, -3)])])
    after = {r: c for r, c in expected_view(3).items() if r != R5}
    assert DeltaViewStore.at(spark, root).read_view() == after
    assert collected(spark.sql(readme_sql(spark, root))) == after


def test_a_crash_cancels_a_compaction_before_its_commit_and_the_next_folds_the_same_deltas(spark, tmp_path, caplog):
    """A crash's stop cancels the compactor's Spark jobs rather than waiting for them
    (Compactor.stop): the compaction commits nothing, the base stays whole and reads exact, and
    the next compactor folds the same deltas. Cancelled after its first job began, a compaction
    can still have reached its commit (the driver's, which no cancel stops): then its base is
    whole too; tried until one is caught before it."""
    from fedlab.warehouse.committer import Compactor

    root = str(tmp_path / "cancel")
    store = DeltaViewStore(spark, root, COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))
    tracker = spark.sparkContext.statusTracker()
    caught = 0
    for batch_id, applied in BATCHES:
        commit(store, batch_id, applied)
        compactor = Compactor(store, 0.01, lambda b=batch_id: b)
        compactor.start()
        deadline = time.monotonic() + 60
        while not tracker.getJobIdsForGroup(compactor.jobs):
            assert time.monotonic() < deadline, "the compactor started no Spark job"
            time.sleep(0.001)
        with caplog.at_level(logging.INFO, logger="fedlab.warehouse"):
            compactor.stop(crash=True)
        # a cancelled compaction is said to be one, not logged as a failure
        assert [r.levelno for r in caplog.records if r.name == "fedlab.warehouse"] in ([], [logging.INFO])
        caplog.clear()
        base = read_optimized(spark, root)
        assert base in (expected_view(batch_id - 1), expected_view(batch_id))   # never half a compaction
        assert store.read_view() == expected_view(batch_id)
        caught += base == expected_view(batch_id - 1)
        if caught:
            break
    assert caught, "every compaction reached its commit before the cancel"
    assert store.compact() is True and read_optimized(spark, root) == store.read_view() == expected_view(batch_id)


def test_checkpoints_are_written_beside_the_commits_and_read_back(spark, tmp_path, monkeypatch):
    """No batch commit writes a checkpoint (it was a Spark job that held the next batch back);
    `checkpoint` writes one per table once CHECKPOINT_EVERY commits have accrued, and a store
    opened afterwards reads the view through it."""
    from fedlab.warehouse.store import delta_store

    monkeypatch.setattr(delta_store, "CHECKPOINT_EVERY", 3)
    root = tmp_path / "checkpoints"
    store = DeltaViewStore(spark, str(root), COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))

    def checkpoints(table):
        return sorted(p.name for p in (root / table / "_delta_log").glob("*.checkpoint.parquet"))

    commit(store, 1, BATCHES[0][1])
    assert store.checkpoint() == [] and checkpoints("journal") == []   # versions 0-1: too few
    for batch_id, applied in BATCHES[1:]:
        commit(store, batch_id, applied)
    assert checkpoints("journal") == []                                 # the commits wrote none,
    properties = dict(spark.sql(f"SHOW TBLPROPERTIES delta.`{root}/journal`").collect())
    assert int(properties["delta.checkpointInterval"]) > 10**6          # nor will they
    assert store.checkpoint() == ["journal"]
    assert checkpoints("journal") == ["00000000000000000003.checkpoint.parquet"]
    assert store.checkpoint() == []                                     # nothing new since
    assert DeltaViewStore(spark, str(root), COLUMNS, TYPES).load().view == expected_view(3)


def files_read(df) -> int:
    """How many files the scan of `df` read, once evaluated (Delta's data skipping leaves out the
    files whose statistics rule them out)."""
    execution = df._jdf.queryExecution()
    df.collect()
    leaves = execution.executedPlan().collectLeaves().iterator()
    scanned = 0
    while leaves.hasNext():
        metrics = leaves.next().metrics()
        if metrics.contains("numFiles"):
            scanned += metrics.apply("numFiles").value()
    return scanned


def test_a_restart_reads_the_base_and_the_batches_after_it(spark, tmp_path):
    """Each batch file names its batches and seqs (its statistics), so a read of the batches above
    the base skips the others; the base's tag names the batch from which the journal holds the
    notifications a restart maintains again, so a notification received long before the base and
    not applied yet is restored with the rest."""
    root = str(tmp_path / "tail")
    store = DeltaViewStore(spark, root, COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))
    waiting = notification("ds2", 5)   # ds2 is not in the state: it waits, not applied, for ever here
    commit(store, 1, BATCHES[0][1], [waiting])
    for batch_id, applied in BATCHES[1:]:
        commit(store, batch_id, applied)
    for batch_id in range(4, 12):   # more batches, each a transaction that changes nothing
        commit(store, batch_id, [txn(batch_id + 2, batch_id + 3, [])])
    assert store.compact() is True
    assert spark.sql(f"DESCRIBE HISTORY delta.`{root}/view` LIMIT 1").first()["userMetadata"] == \
        "fedlab-batch=11 needed-from=1"
    for batch_id in range(12, 15):
        commit(store, batch_id, [txn(batch_id + 2, batch_id + 3, [])])
    journal = spark.read.format("delta").load(f"{root}/journal")
    assert files_read(journal.where("batch_id > 11")) == 1 + 3   # batch 0's file (no statistics) and the tail's
    # as the restart and the compaction read them: a kind named beside the bounds skips as well
    assert files_read(journal.where("kind != 'txn' AND batch_id > 11")) == 1 + 3
    assert files_read(journal.where("kind = 'txn' AND seq > 14")) == 1 + 2
    restored = DeltaViewStore(spark, root, COLUMNS, TYPES).load()
    assert (restored.view, restored.last_seq, restored.last_batch) == (expected_view(3), 16, 14)
    assert restored.pending == [waiting] and restored.state == state(17)
    # once ds2's notification is reflected, the base's tag moves past it: the journal below is history
    reflecting = {**state(17), "sources": {"ds1": {"applied_dsv": 17}, "ds2": {"applied_dsv": 5}}}
    assert store.commit_batch(15, [txn(17, 18, [])], [], reflecting) is True
    assert store.compact() is True
    assert spark.sql(f"DESCRIBE HISTORY delta.`{root}/view` LIMIT 1").first()["userMetadata"] == \
        "fedlab-batch=15 needed-from=16"
    assert DeltaViewStore(spark, root, COLUMNS, TYPES).load().pending == []


def test_the_retention_removes_the_folded_journal_and_old_files_but_no_read_changes(spark, tmp_path, monkeypatch):
    """Past the retention the journal's folded batches leave the table (their change log with
    them) and both tables' old files and log go; the view, a restart and the change log of the
    batches kept read as before. A store without a retention removes nothing."""
    from fedlab.warehouse.store import delta_store

    monkeypatch.setattr(delta_store, "CHECKPOINT_EVERY", 3)
    root = tmp_path / "retained"
    with pytest.raises(StoreError, match="retention is a positive number of seconds"):
        DeltaViewStore(spark, str(root), COLUMNS, TYPES, retention=0)
    retention = 1.0   # seconds; the last retain() below holds however long it takes (its `now`)
    store = DeltaViewStore(spark, str(root), COLUMNS, TYPES, retention=retention)
    store.initialize(INITIAL, state(0))
    for batch_id, applied in BATCHES:
        commit(store, batch_id, applied, [notification("ds2", 5)] if batch_id == 2 else [])
    assert store.compact() is True
    assert DeltaViewStore(spark, str(root), COLUMNS, TYPES).retain() == {"removed": 0, "vacuumed": False}
    # nothing is removed before the retention has passed since it was written
    assert store.retain(now=time.time() - 60)["removed"] == 0
    properties = dict(spark.sql(f"SHOW TBLPROPERTIES delta.`{root}/journal`").collect())
    assert properties["delta.logRetentionDuration"] == properties["delta.deletedFileRetentionDuration"] == \
        "interval 1 seconds"
    # past it, the batches below the one the base's tag names go, ds2's notification's (batch 2) stays
    time.sleep(retention + 0.1)
    assert store.retain()["removed"] == 1
    assert [e.batch_id for e in store.read_change_log()] == [2, 2, 3, 3]
    restored = DeltaViewStore(spark, str(root), COLUMNS, TYPES).load()
    assert (restored.view, restored.pending) == (expected_view(3), [notification("ds2", 5)])
    # once ds2's notification is reflected, every folded batch goes but the base's own
    commit(store, 4, [txn(6, 7, [])])
    reflecting = {**state(7), "sources": {"ds1": {"applied_dsv": 7}, "ds2": {"applied_dsv": 5}}}
    store.commit_batch(5, [txn(7, 8, [])], [], reflecting)
    assert store.compact() is True
    first_checkpoint = store.checkpoint()
    time.sleep(retention + 0.1)
    assert store.retain()["removed"] == 3
    for batch_id in range(6, 10):
        commit(store, batch_id, [txn(batch_id + 2, batch_id + 3, [])])
    assert store.compact() is True and store.checkpoint() and first_checkpoint == ["journal", "view"]
    time.sleep(retention + 0.1)
    store._vacuumed = float("-inf")
    # Removed a minute from now, the folded batches 5-8 are tombstones younger than the retention
    # whenever VACUUM runs, however slowly this machine gets there; the older tombstones are not.
    assert store.retain(now=time.time() + 60) == {"removed": 4, "vacuumed": True}
    journal = root / "journal"
    files = {p.name for p in journal.glob("*.parquet")}
    assert len(files) == 2 + 4, files   # batch 0's (no statistics: never removed), 9's and the four just removed
    # the log's commits and checkpoints that the newer checkpoint replaces, written a retention
    # ago: gone (Delta itself would keep them until the next day)
    kept = sorted(int(p.name.split(".")[0]) for p in (journal / "_delta_log").glob("*.json"))
    checkpoints = [int(p.name.split(".")[0]) for p in (journal / "_delta_log").glob("*.checkpoint*.parquet")]
    assert len(checkpoints) == 1 and kept[0] == checkpoints[0] > 0, (kept, checkpoints)
    assert DeltaViewStore(spark, str(root), COLUMNS, TYPES).load().view == expected_view(3)
    assert store.read_view() == expected_view(3) and store.read_change_log()[-1].seq == 11
    assert DeltaViewStore.at(spark, str(root)).read_view() == expected_view(3)
    old_views = len(list((root / "view").glob("*.parquet")))
    assert old_views <= 2, old_views   # the base of batch 9 (and one a compaction ago)


def readme_sql(spark, root):
    """The snapshot read in SQL, as docs/guide.md gives it to Spark users."""
    history = spark.sql(f"DESCRIBE HISTORY delta.`{root}/view`").collect()
    v, b = next((h["version"], re.match(r"fedlab-batch=(\d+)", h["userMetadata"])[1]) for h in history if h["userMetadata"])
    return (f"SELECT {', '.join(COLUMNS)}, sum(count) AS count "
            f"FROM (SELECT * FROM delta.`{root}/view` VERSION AS OF {v} "
            f"UNION ALL SELECT row.*, count FROM delta.`{root}/journal` WHERE kind = 'delta' AND batch_id > {b}) "
            "GROUP BY ALL HAVING sum(count) <> 0")


def test_materialize_matches_duckdb(spark):
    r1 = (["a", "b", "d"], ["BIGINT", "VARCHAR", "DATE"],
          [(1, "x", "2024-01-01"), (2, "x", "2024-01-02"), (3, "y", None), (4, None, "2024-01-04"), (5, "z", "2024-01-05"),
           (6, "x", "2024-01-01")])
    r2 = (["b", "c", "w"], ["VARCHAR", "BIGINT", "DOUBLE"],
          [("x", 10, 1.5), ("x", 20, 2.5), ("y", 10, None), (None, 30, 3.0), ("z", 40, 0.5)])
    sql = "SELECT R1.d, R2.c, R2.w FROM R1 JOIN R2 ON R1.b = R2.b WHERE R2.c < 40 AND R1.a <> 2"
    got = materialize(spark, sql, {"R1": r1, "R2": r2})

    con = duckdb.connect()
    for name, (columns, types, rows) in {"R1": r1, "R2": r2}.items():
        con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in zip(columns, types))})")
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(columns))})", rows)
    oracle = {tuple(v.isoformat() if hasattr(v, "isoformat") else v for v in r[:-1]): r[-1]
              for r in con.execute(f"SELECT *, COUNT(*) FROM ({sql}) GROUP BY ALL").fetchall()}
    assert got == oracle
    assert got[("2024-01-01", 10, 1.5)] == 2 and (None, 10, None) in got and sum(got.values()) == 5


def test_materialize_takes_division_by_zero_as_null(spark):
    r1 = (["a", "b"], ["BIGINT", "BIGINT"], [(1, 0), (2, 1), (6, 2)])
    got = materialize(spark, "SELECT R1.a FROM R1 WHERE R1.a / R1.b > 2", {"R1": r1})
    assert got == {(6,): 1}   # a / 0 is NULL: the row fails the predicate instead of failing the job


def test_the_spark_jvm_yields_the_cpu_to_the_sources_and_the_core(spark):
    """Every JVM thread, those Spark started after the renice included, runs at JVM_NICE."""
    spark.range(10).count()   # a job: executor and scheduler threads exist
    tasks = list(Path(f"/proc/{spark.sparkContext._gateway.proc.pid}/task").iterdir())
    nices = {os.getpriority(os.PRIO_PROCESS, int(t.name)) for t in tasks if t.exists()}
    assert min(nices) >= int(os.environ.get("FEDLAB_JVM_NICE", JVM_NICE)), nices


def test_a_plain_spark_reader_reads_the_appended_batches_and_their_tags(committed):
    """Batches are appended without a Spark job (warehouse.store.delta_append): any Delta reader
    still reads every batch's rows, and the table's history names each batch."""
    root, store = committed
    spark = spark_of(committed)
    journal = spark.read.format("delta").load(f"{root}/journal")
    assert sorted(r[0] for r in journal.where("kind = 'state'").select("batch_id").collect()) == [0, 1, 2, 3]
    changes = journal.where("kind = 'txn'").orderBy("seq").select("seq", "dsv").collect()
    assert [(r[0], r[1]) for r in changes] == [(a.seq, a.dsv) for _, applied in BATCHES for a in applied]
    deltas = journal.where("kind = 'delta' AND batch_id = 2").select("row.k", "count").collect()
    assert sorted((r[0], r[1]) for r in deltas) == sorted((row[0], c) for row, c in net_delta(BATCHES[1][1]))
    history = spark.sql(f"DESCRIBE HISTORY delta.`{root}/journal`").select("version", "userMetadata").collect()
    assert sorted(h[1] for h in history) == [f"fedlab-batch={b}" for b in range(4)]


def test_initializing_a_store_readies_the_journal_appender_without_writing(spark, tmp_path):
    """The appender is made, and Jackson warmed by parsing an AddFile, when the store is
    initialized (warehouse.store.delta_append), not by the first batch; that leaves the journal's
    files and history as they were. A restart leaves it to prepare_commits (tests/test_delta_reader.py)."""
    root = str(tmp_path / "store")
    first = DeltaViewStore(spark, root, COLUMNS, TYPES)
    first.initialize(INITIAL, state(0))
    assert first._appender is not None
    journal = tmp_path / "store" / "journal"
    history = spark.sql(f"DESCRIBE HISTORY delta.`{journal}`").select("version").collect()
    assert [h[0] for h in history] == [0]


def test_a_batch_commits_from_a_thread_without_an_active_session(spark, tmp_path):
    """Delta reads a snapshot's state in the committing thread's active session when a prefetch
    of it failed; the appender makes its session the active one of the thread it commits from,
    as a restarted warehouse's committer, which makes no DataFrame before its first batch, needs
    (DeltaAppender._activate)."""
    store = DeltaViewStore(spark, str(tmp_path / "store"), COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))
    sessions = getattr(spark._jvm, "org.apache.spark.sql.classic.SparkSession")
    active = {}

    def committer():
        sessions.clearActiveSession()
        active["before"] = sessions.getActiveSession().isDefined()
        commit(store, *BATCHES[0])
        active["after"] = sessions.getActiveSession().isDefined()
    thread = threading.Thread(target=committer)
    thread.start()
    thread.join()
    assert active == {"before": False, "after": True}
    assert store.read_view() == expected_view(1)


def test_a_batch_commit_starts_no_process_in_the_jvm(spark, tmp_path):
    """Hadoop's local file system starts chmod and readlink for most files a commit writes;
    fedlab's (warehouse/jvm) does the same in-process. Flight Recorder counts the processes."""
    assert spark.sparkContext._jsc.hadoopConfiguration().get("fs.file.impl") == "fedlab.hadoop.LocalFileSystem"
    store = DeltaViewStore(spark, str(tmp_path / "store"), COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))
    jvm = spark._jvm
    recording = jvm.jdk.jfr.Recording()
    recording.enable("jdk.ProcessStart")
    recording.start()
    for batch_id, applied in BATCHES:
        commit(store, batch_id, applied)
    recording.stop()
    events = jvm.jdk.jfr.consumer.RecordingFile.readAllEvents(_dump(jvm, recording, tmp_path / "commit.jfr"))
    recording.close()
    assert [e.getString("command") for e in events] == []
    assert store.read_view() == expected_view(3)


def test_the_local_file_system_renames_only_onto_a_free_name(spark, tmp_path):
    """Delta's log store commits a version by renaming onto its file name: the rename must fail
    when another writer took that name first (FileContext's put-if-absent)."""
    jvm = spark._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(conf)
    assert context.getDefaultFileSystem().getClass().getName() == "fedlab.hadoop.LocalFs"
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text(name)
    path = lambda name: jvm.org.apache.hadoop.fs.Path(f"file://{tmp_path / name}")  # noqa: E731
    no_overwrite = spark.sparkContext._gateway.new_array(jvm.org.apache.hadoop.fs.Options.Rename, 1)
    no_overwrite[0] = jvm.org.apache.hadoop.fs.Options.Rename.NONE
    with pytest.raises(Exception, match="FileAlreadyExists"):
        context.rename(path("a"), path("b"), no_overwrite)
    context.rename(path("a"), path("d"), no_overwrite)
    assert not (tmp_path / "a").exists() and (tmp_path / "d").read_text() == "a" and (tmp_path / "b").read_text() == "b"
    # a file created through it gets the permissions Hadoop asks for, set without a chmod process
    fs = path("e").getFileSystem(conf)
    fs.create(path("e"), jvm.org.apache.hadoop.fs.permission.FsPermission.createImmutable(0o640), False, 4096, 1,
              1 << 20, None).close()
    assert (tmp_path / "e").stat().st_mode & 0o777 == 0o640


def _dump(jvm, recording, path):
    target = jvm.java.io.File(str(path)).toPath()
    recording.dump(target)
    return target


def test_a_relative_directory_opens_the_same_view(committed, monkeypatch):
    # docs/guide.md opens runs/demo-.../warehouse/delta: Spark SQL took a relative path for a table name.
    root, _ = committed
    monkeypatch.chdir(Path(root).parent)
    assert DeltaViewStore.at(spark_of(committed), Path(root).name).read_view() == expected_view(3)


def spark_of(committed):
    return committed[1]._spark


def run_dir_for(tmp_path, store_root):
    """A run directory whose run file names `store_root` as the warehouse's Delta tables."""
    from fedlab.fedmodel.catalog import Catalog, Relation
    from fedlab.live.runfile import RunFile

    catalog = Catalog((Relation("R1", "ds1", tuple(COLUMNS), tuple(TYPES), ("k",)),))
    RunFile(catalog, f"SELECT {', '.join(COLUMNS)} FROM R1", "sze-ling", {"ds1": None}, tmp_path / "history",
            store_root).write(tmp_path)
    return tmp_path


def test_fedlab_view_prints_the_view_of_the_last_batch(committed, tmp_path, capsys):
    import argparse
    import json

    from fedlab.live import delta_view

    root, _ = committed
    run = run_dir_for(tmp_path, root)
    assert delta_view.main(argparse.Namespace(run_dir=str(run), limit=0, json=True)) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["batch"], shown["versions"], shown["columns"]) == (3, {"ds1": 6}, COLUMNS)
    assert {tuple(r[:-1]): r[-1] for r in shown["rows"]} == expected_view(3)
    assert delta_view.main(argparse.Namespace(run_dir=str(run), limit=1, json=False)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f"batch 3, reflecting ds1 DSV 6; {len(expected_view(3))} rows "
                             f"({sum(expected_view(3).values())} with multiplicity)")
    assert lines[1] == "k\tname\tday\tprice\tcount" and len(lines) == 4
    assert lines[3] == f"... {len(expected_view(3)) - 1} more rows (--limit 0 prints all)"


def test_fedlab_view_as_of_refuses_a_store_without_a_view_delta(committed, tmp_path, capsys):
    import argparse

    from fedlab.live import delta_view

    root, _ = committed
    run = run_dir_for(tmp_path, root)
    assert delta_view.main(argparse.Namespace(run_dir=str(run), limit=0, json=False, as_of=1003.0)) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [
        f"fedlab view: {root}: the view in Delta has no view delta: only the salem algorithm keeps one"]


@pytest.mark.parametrize("layout, message", [
    ("no run file", "no run file"),
    ("no store", "no Delta view at"),
    ("old run file", "names no Delta store"),
])
def test_fedlab_view_refuses_a_run_without_a_store_in_one_line(tmp_path, layout, message):
    import json
    import subprocess
    import sys

    if layout != "no run file":
        run_dir_for(tmp_path, str(tmp_path / "warehouse" / "delta"))
    if layout == "old run file":
        doc = json.loads((tmp_path / "run.json").read_text())
        del doc["warehouse_delta"]
        (tmp_path / "run.json").write_text(json.dumps(doc))
    done = subprocess.run([sys.executable, "-m", "fedlab.cli", "view", str(tmp_path)], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""


def test_the_driver_jvm_starts_from_the_class_data_archive_when_there_is_one(spark, tmp_path, monkeypatch):
    """warehouse.spark_session.class_archive: the suite's session started from it when `make test`
    dumped it first; its options name it only when it exists, and FEDLAB_JAVA_OPTS stands alone."""
    jars, local_fs = cached_delta_jars(object_store=True), local_fs_jar()   # as tests/conftest.py's session
    started_with = Path(f"/proc/{jvm_pid(spark)}/cmdline").read_bytes().decode()
    assert (f"-XX:SharedArchiveFile={class_archive(jars, local_fs)}" in started_with) == class_archive(jars, local_fs).is_file()
    monkeypatch.setenv("FEDLAB_JARS_DIR", str(tmp_path))
    monkeypatch.delenv("FEDLAB_JAVA_OPTS", raising=False)
    assert driver_java_options(jars, local_fs) == JAVA_OPTS
    class_archive(jars, local_fs).write_bytes(b"")
    assert driver_java_options(jars, local_fs) == f"{JAVA_OPTS} -XX:SharedArchiveFile={class_archive(jars, local_fs)}"
    # other jars, another archive (`jars` is empty where Ivy, not Maven, brought Delta)
    assert class_archive([*jars, str(tmp_path / "other.jar")], local_fs) != class_archive(jars, local_fs)
    monkeypatch.setenv("FEDLAB_JAVA_OPTS", "-Xmx1g")
    assert driver_java_options(jars, local_fs) == "-Xmx1g"


def test_on_kubernetes_executors_take_the_jars_from_their_image_not_from_the_driver():
    """warehouse.spark_session._with_jars: locally the driver hands its jars to the executors; on
    Kubernetes the executors run the driver's image, so the jars go as local: URIs, and never on
    the class paths, where they would shadow Spark's own Jackson."""
    from pyspark.sql import SparkSession

    jars = ["/opt/fedlab/jars/a.jar", "/opt/fedlab/jars/b.jar"]
    local = _with_jars(SparkSession.Builder(), "local[2]", jars)._options
    assert local["spark.jars"] == "/opt/fedlab/jars/a.jar,/opt/fedlab/jars/b.jar"
    cluster = _with_jars(SparkSession.Builder(), "k8s://https://kubernetes.default.svc:443", jars)._options
    assert cluster["spark.jars"] == "local:///opt/fedlab/jars/a.jar,local:///opt/fedlab/jars/b.jar"
    assert not {"spark.driver.extraClassPath", "spark.executor.extraClassPath"} & set(cluster)

class _AppendBeforeCommit:
    """The journal's DeltaLog, but another writer appends a batch after each of the first
    `times` transactions starts from its snapshot: a retention's removal and a batch commit
    interleaved as they are under load (the committer beside the compactor)."""

    def __init__(self, log, append, times: int):
        self._log, self._append, self._times = log, append, times

    def update(self, *args):
        return self._log.update(*args)

    def startTransaction(self, *args):   # noqa: N802 - the JVM's name
        txn = self._log.startTransaction(*args)
        if self._times:
            self._times -= 1
            self._append()
        return txn


def test_a_removal_beside_a_batch_commit_goes_in_anyway(spark, tmp_path, monkeypatch):
    """A removal of folded journal files that Delta finds in conflict with a batch appended
    after its snapshot is tried again, and lands beside the batches. When every try meets a
    batch (2 of an hour's ~49 retention passes did, after ten), a last one holds the committer's
    lock: the committer's next batch waits for it and lands after it. Without that lock it fails."""
    from delta.exceptions import ConcurrentAppendException

    from fedlab.warehouse.store import delta_append
    from fedlab.warehouse.store.delta_append import remove_json, table_files

    root = tmp_path / "interleaved"
    store = DeltaViewStore(spark, str(root), COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))
    for batch_id, applied in BATCHES:
        commit(store, batch_id, applied)
    appender = store._journal_appender()
    beside = DeltaViewStore(spark, str(root), COLUMNS, TYPES)   # the committer's store
    batches = iter(range(10, 20))
    committers: list[threading.Thread] = []

    def append():
        """The committer's next batch, from its own thread; waited for unless it blocks."""
        batch_id = next(batches)
        committer = threading.Thread(target=commit, args=(beside, batch_id, [txn(batch_id, batch_id + 1, [])]))
        committer.start()
        committer.join(timeout=3)
        committers.append(committer)

    journal = str(root / "journal")
    oldest = table_files(spark, journal).orderBy("modificationTime").first()
    removal = [remove_json(oldest["path"], oldest["size"], time.time())]
    monkeypatch.setattr(delta_append, "REMOVE_ATTEMPTS", 2)
    log = appender._log
    appender._log = _AppendBeforeCommit(log, append, times=3)
    with pytest.raises(ConcurrentAppendException):   # every try met a batch, the last one too
        appender.remove(removal)
    appender._log = _AppendBeforeCommit(log, append, times=3)
    appender.remove(removal, exclusive=beside._lock)
    assert committers[-1].is_alive()   # the last try's batch waited for the removal
    for committer in committers:
        committer.join(timeout=30)
    appender._log = log
    batch_ids = {r["batch_id"] for r in spark.read.format("delta").load(journal).select("batch_id").collect()}
    assert set(range(10, 16)) <= batch_ids, batch_ids   # every batch appended beside it is in
    assert oldest["path"] not in {r["path"] for r in table_files(spark, journal).collect()}
