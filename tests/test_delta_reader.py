"""A restart reads the Delta tables' logs and files in Python (warehouse.store.delta_reader), and
reads exactly what delta-spark reads: on tables delta-spark wrote, with checkpoints, compactions,
the retention's removals and VACUUM, and a checkpoint with commits after it. It runs no Spark job,
and a table it does not handle is read through Spark, which it says.

The expected views are tests/test_delta_store.py's, computed with a Counter.
"""

from __future__ import annotations

import logging
import time

import pytest
from test_delta_store import BATCHES, COLUMNS, INITIAL, TYPES, commit, expected_view, notification, state, txn

from fedlab.warehouse.store import delta_store
from fedlab.warehouse.store.delta_reader import UnsupportedTable, open_table
from fedlab.warehouse.store.delta_store import DeltaViewStore

pytestmark = pytest.mark.spark

R7 = (7, "g", "2024-04-07", 7.0)


def same_as_spark(store: DeltaViewStore) -> None:
    """What a restart reads of the tables, through the log and through Spark: the same."""
    logged, sparked = store._found_in_log(), store._found_by_spark()
    assert (logged.stored, logged.logged, logged.base) == (sparked.stored, sparked.logged, sparked.base)
    assert sorted(logged.view, key=repr) == sorted(sparked.view, key=repr)
    assert sorted(logged.tail, key=repr) == sorted(sparked.tail, key=repr)


def test_a_restart_reads_through_the_log_what_spark_reads_batch_by_batch(spark, tmp_path):
    root = str(tmp_path / "batches")
    store = DeltaViewStore(spark, root, COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))
    same_as_spark(store)   # batch 0 alone: a journal file without statistics
    for batch_id, applied in BATCHES:
        commit(store, batch_id, applied, [notification("ds1", a.dsv) for a in applied])
        same_as_spark(store)
    restored = DeltaViewStore(spark, root, COLUMNS, TYPES).load()
    assert (restored.view, restored.state, restored.last_seq, restored.last_batch) == (expected_view(3), state(6), 5, 3)


def test_a_checkpoint_with_commits_after_it_and_a_compacted_base(spark, tmp_path, monkeypatch):
    """The journal replayed from a checkpoint and the JSON commits after it; the view's base a
    compaction's overwrite (its old files removed) under an ADD CONSTRAINT; a notification and
    salem's timed rows still needed from below the base."""
    monkeypatch.setattr(delta_store, "CHECKPOINT_EVERY", 3)
    root = tmp_path / "checkpointed"
    store = DeltaViewStore(spark, str(root), COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))
    waiting = notification("ds2", 5)
    commit(store, 1, BATCHES[0][1], [waiting])
    timed = [(R7, 1, (1000.5, "ds1", 99), 1)]   # beyond the state's applied DSV of ds1: still needed
    assert store.commit_batch(2, BATCHES[1][1], [(r, c) for a in BATCHES[1][1] for r, c in a.delta],
                              {**state(4), "salem": {"view_delta": {"epoch": 1, "materialized_us": 0, "reach_us": 1}}},
                              timed=timed)
    commit(store, 3, BATCHES[2][1])
    assert store.compact() is True and store.checkpoint() == ["journal"]
    for batch_id in range(4, 7):
        commit(store, batch_id, [txn(batch_id + 2, batch_id + 3, [])])
    assert [p.name for p in (root / "journal" / "_delta_log").glob("*.checkpoint.parquet")] == \
        ["00000000000000000003.checkpoint.parquet"]
    assert open_table(str(root / "journal")).snapshot().version == 6
    same_as_spark(store)
    restored = DeltaViewStore(spark, str(root), COLUMNS, TYPES).load()
    assert (restored.view, restored.pending, restored.last_batch) == (expected_view(3), [waiting], 6)
    # compacted again past the pending notification's batch: the base's tag still names it
    assert store.compact() is True
    same_as_spark(store)
    assert DeltaViewStore(spark, str(root), COLUMNS, TYPES).load().pending == [waiting]


def test_after_the_retention_removed_files_and_vacuum_trimmed_the_log(spark, tmp_path, monkeypatch):
    """The journal's folded batches removed (remove actions), both tables vacuumed and their logs
    trimmed to the newest checkpoint: the log starts at a checkpoint, with no commit before it."""
    monkeypatch.setattr(delta_store, "CHECKPOINT_EVERY", 3)
    root = tmp_path / "retained"
    store = DeltaViewStore(spark, str(root), COLUMNS, TYPES, retention=1.0)
    store.initialize(INITIAL, state(0))
    for batch_id, applied in BATCHES:
        commit(store, batch_id, applied)
    assert store.compact() is True and store.checkpoint()
    for batch_id in range(4, 8):
        commit(store, batch_id, [txn(batch_id + 2, batch_id + 3, [])])
    assert store.compact() is True and store.checkpoint()
    time.sleep(1.1)
    assert store.retain() == {"removed": 6, "vacuumed": True}   # batches 1-6: the base folded 7
    for batch_id in range(8, 10):
        commit(store, batch_id, [txn(batch_id + 2, batch_id + 3, [])])
    log = sorted(p.name for p in (root / "journal" / "_delta_log").iterdir() if p.name[0].isdigit())
    assert log[0].endswith(".checkpoint.parquet") and not log[0].startswith("00000000000000000000"), log
    same_as_spark(store)
    restored = DeltaViewStore(spark, str(root), COLUMNS, TYPES).load()
    assert (restored.view, restored.last_seq, restored.last_batch) == (expected_view(3), 11, 9)


def test_a_restart_runs_no_spark_job_and_leaves_the_appender_to_prepare_commits(spark, tmp_path):
    """The store loaded from a fresh object asks nothing of Spark; prepare_commits then readies
    the journal's appender (warehouse.store.delta_append) without writing."""
    root = tmp_path / "no-jobs"
    first = DeltaViewStore(spark, str(root), COLUMNS, TYPES)
    first.initialize(INITIAL, state(0))
    commit(first, 1, BATCHES[0][1])
    journal = root / "journal"
    files = sorted(str(p.relative_to(journal)) for p in journal.rglob("*") if p.is_file())
    context = spark.sparkContext
    context.setJobGroup("restart", "a restart's reads")
    try:
        reopened = DeltaViewStore(spark, str(root), COLUMNS, TYPES)
        assert reopened.load().view == expected_view(1)
        assert list(context.statusTracker().getJobIdsForGroup("restart")) == []
    finally:
        context.setJobGroup(None, None)
    assert reopened._appender is None
    reopened.prepare_commits()
    assert reopened._appender is not None
    assert sorted(str(p.relative_to(journal)) for p in journal.rglob("*") if p.is_file()) == files
    assert commit(reopened, 2, BATCHES[1][1]) is True


def test_a_table_the_reader_does_not_handle_is_read_through_spark_and_said_so(spark, tmp_path, caplog):
    root = tmp_path / "upgraded"
    store = DeltaViewStore(spark, str(root), COLUMNS, TYPES)
    store.initialize(INITIAL, state(0))
    commit(store, 1, BATCHES[0][1])
    spark.sql(f"ALTER TABLE delta.`{root}/journal` SET TBLPROPERTIES "
              "('delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')")
    with pytest.raises(UnsupportedTable, match="needs Delta reader version 2"):
        open_table(str(root / "journal")).snapshot()
    with caplog.at_level(logging.WARNING, logger=delta_store.__name__):
        restored = DeltaViewStore(spark, str(root), COLUMNS, TYPES).load()
    assert (restored.view, restored.last_batch) == (expected_view(1), 1)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith(f"reading the Delta tables under {root} through Spark: ")
    assert "needs Delta reader version 2" in said[0]


def test_only_local_paths_and_s3a_are_read():
    with pytest.raises(UnsupportedTable, match="no reader for gs://"):
        open_table("gs://bucket/delta/view")
