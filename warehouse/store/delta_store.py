"""The materialized view and the warehouse's journal in Delta Lake: one Delta commit per batch.

Two path-based Delta tables live under `root_dir` (one writer process per root):

- `journal`: append-only, ONE append per batch -- the batch's COMMIT POINT, so a batch is in
  Delta whole or not at all (one Parquet file and one delta-spark commit, without a Spark job:
  warehouse.store.delta_append), whose statistics name its least and greatest batch_id, kind and seq,
  so that Delta's data skipping leaves it out of a read of other batches or seqs: a read of the
  batches above the base, or of the change log above a seq, costs those, not the journal's
  history. Every row is tagged with its batch_id and `kind`:
  - `txn`: the change log, one row per applied source transaction, in apply order: seq, source,
    dsv, txn_id, commit_time, applied_time, versions (JSON {source: dsv}: the versions the view
    reflects after this transaction) and body (JSON [[row, signed count change], ...]);
  - `delta`: the batch's net view delta, one row per view row it changes: `row` (a struct of the
    view's columns) and `count` (the signed change);
  - `notification`: each received notification the batch's state does not reflect yet, once,
    keyed by (source, dsv): txn_id, commit_time and body (JSON, fedmodel.transactions.
    notification_to_dict); a restart maintains those again (the warehouse passes no others:
    warehouse.core.registry.not_reflected);
  - `state`: one row per batch, body the version state after it (JSON), seq the change log's last
    seq after it;
  - `view_delta`: the salem algorithm's timed view delta, the rows the batch added to it (not in
    the view: past the view's point), one per (view row, timestamp key): `row` and `count` as for
    `delta`, the key in commit_time, source and dsv, and in `seq` the delta's epoch (a row of an
    epoch other than the state's is dead).
- `view`: the view's base, its columns plus `count` (BIGINT multiplicity, CHECK count > 0), as
  of the batch its newest tagged commit names (commit-info userMetadata `fedlab-batch=b
  needed-from=n`). `compact()` folds the journal's deltas into it, in one overwrite tagged with
  the batch folded up to and the first batch holding what a restart reads beyond it (`_Needed`:
  the notifications received and not reflected then, salem's timed rows beyond the view's point).

A restart (`load()`) reads the base and the journal's batches from min(b, n) on: what it costs
is the view and what is in flight, however long the run. With a retention (`retain()`, after
each compaction) the journal's files below that and older than it leave the table, and both
tables are vacuumed and their logs trimmed to as long: a long run's tables hold its last minutes.

The view as of the last committed batch is the base plus the `delta` rows of every batch above
the base's, summed per row (`view_df()`, `read_view()`): a merge-on-read table, in Apache Hudi's
terms, and this read its snapshot query; reading `view` alone is its read-optimized query
(cheaper, as of the last compaction). The reader pins the base version whose tag it read, so a
compaction in between cannot make it count a delta twice.

The view as of a wall time T (`view_as_of_df()`, `view_as_of()`; salem only) is that snapshot
plus the `view_delta` rows of batches up to it beyond the view's point -- of the state's epoch,
dsv above the source's applied_dsv -- committed at or before T, summed per row. The batch's state
says which times it answers: "salem" -> "view_delta" -> {"epoch", "materialized_us", "reach_us"},
T readable when materialized_us <= T * 1e6 < reach_us. Compaction folds only `delta` rows.

Why merge-on-read: a MERGE into the view costs five Spark jobs whatever the batch holds, measured
on 2 idle cores at 2.0 s wall and 2.5 s of JVM CPU for 2,000 transactions into a 3,000-row view,
where an append costs 0.3 s. Under 500 txn/s the JVM, niced behind the sources and the core,
took 5-8.5 s per MERGE batch, and a Spark reader saw transactions 14 s (p50) after they committed.

Version state (the dict handed to `initialize`/`commit_batch` and returned by `load`) is
{scope: {name: {field: int}}}, e.g. {"relations": {"R1": {"processing": 12, "refreshed": 11}},
"sources": {"ds1": {"applied_dsv": 40}}}.

Crashes: a batch is one append, so no crash leaves part of one; a compaction is one overwrite, and
a crash before it leaves the old base, which the journal's deltas above it still complete. A
write that Delta committed while the caller never heard back (crash, lost py4j reply, exception
after the commit) is closed by recovery (`load()`, the first `commit_batch` of a new store object,
or the next call after a failed one): it rebuilds the store's idea of itself from Delta instead of
trusting memory, so nothing is applied twice and nothing logged is missing from the view.
Re-committing a batch id at or below the last committed one is a no-op (the first committed
content of a batch wins). The store keeps the view's counts in memory, so a delta that would take
a count below 0 (remove rows the view does not hold) is refused before anything is written.
Why not Delta's txnAppId/txnVersion: in delta-spark 4.4 looking the recorded version up
(Snapshot.transactions) runs a full state reconstruction on every write -- measured here at 3
extra Spark jobs and ~2-4 s per write -- while the batch-id column costs nothing until recovery.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from fedlab.fedmodel import json_text
from fedlab.fedmodel.errors import first_line
from fedlab.fedmodel.transactions import Notification, notification_from_dict, notification_to_dict
from fedlab.warehouse.core.registry import not_reflected
from fedlab.warehouse.spark_session import started
from fedlab.warehouse.store.delta_append import DeltaAppender, delta_log, remove_json, table_files
from fedlab.warehouse.store.delta_reader import TableLog, UnsupportedTable, open_table
from fedlab.warehouse.store.sparktypes import SPARK_TYPES, create_df, from_spark, quote, spark_schema, to_arrow, validate_types

log = logging.getLogger(__name__)

INITIAL_BATCH = 0
_TAG = "fedlab-batch="
_NEEDED_FROM = "needed-from="
# The table properties that keep a table's log and removed files (`retain`); the second may not
# exceed the first.
_KEPT = ("delta.logRetentionDuration", "delta.deletedFileRetentionDuration")
# A file of a table's log that a checkpoint after it replaces: a commit, its checksum, a checkpoint.
_LOG_FILE = re.compile(r"(\d{20})\.(?:json|crc|checkpoint(?:\.\d+\.\d+)?\.parquet)")
_DEFAULT = "spark.databricks.delta.properties.defaults."   # a new table's property, from the session
# Commits that change no row of their table, untagged: the view's constraint, a table property.
_ROWS_UNCHANGED = ("ADD CONSTRAINT", "SET TBLPROPERTIES")
# The newest commits of a table among which its newest tagged one is looked for (`_tagged`).
_HISTORY = 10

_JOURNAL = (("batch_id", "BIGINT"), ("kind", "VARCHAR"), ("seq", "BIGINT"), ("source", "VARCHAR"),
            ("dsv", "BIGINT"), ("txn_id", "VARCHAR"), ("commit_time", "DOUBLE"), ("applied_time", "DOUBLE"),
            ("versions", "VARCHAR"), ("body", "VARCHAR"))
_ROW, _COUNT = "row", "count"   # the journal's view-delta columns: struct of the view's columns, change
_TXN, _DELTA, _NOTIFICATION, _STATE = "txn", "delta", "notification", "state"
_VIEW_DELTA = "view_delta"      # a timed view delta's rows (the salem algorithm): not in the view yet
# The journal's columns each batch file names its bounds of (delta_append.file_stats), so that a
# read of the batches above one, or of the change log above a seq, skips the files below. `kind`
# seldom skips (a batch holds several kinds) but must be there: a filter naming a column whose
# bounds a file lacks keeps that file, whatever its other columns' bounds say (Delta's data
# skipping), and every read of the journal names a kind.
_INDEXED = ("batch_id", "kind", "seq")
# SQL settings of the store's child session, for many small jobs (measured on 2 cores): without
# AQE and code generation (whole-stage and expression codegen: Spark then evaluates interpreted,
# as it does when codegen fails) each new plan no longer compiles Java source (the test file ran
# in ~60 s instead of ~75 s). No file statistics: readers scan the whole view and journal (no
# data skipping to feed). No checkpoint written by a commit (an interval no table reaches): the
# store writes them beside the committer (`checkpoint`). Override per store with
# DeltaViewStore(..., session_conf={...}).
SESSION_CONF = {"spark.sql.adaptive.enabled": "false",
                "spark.sql.codegen.wholeStage": "false",
                "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                "spark.databricks.delta.stats.collect": "false",
                "spark.databricks.delta.properties.defaults.checkpointInterval": str(2**31 - 1),
                # VACUUM with the store's retention, below Delta's week (`retain`), without a
                # commit of its own in either table's log.
                "spark.databricks.delta.retentionDurationCheck.enabled": "false",
                "spark.databricks.delta.vacuum.logging.enabled": "false",
                # VACUUM lists a table's files in a Spark job of this many tasks (default 10,000:
                # 50-90 s for a table of a few files on 2 busy cores; 1-3 s with 2).
                "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2"}
# A table's commits between two checkpoints (`checkpoint`): a reader replays at most about as
# many JSON commits after the last one.
CHECKPOINT_EVERY = 100


class StoreError(RuntimeError):
    """The store cannot do what was asked (not initialized, bad batch, inconsistent input)."""


@dataclass
class AppliedTxn:
    """One applied source transaction, as the change log keeps it."""

    seq: int                 # apply order over the whole run
    source: str
    dsv: int
    txn_id: str
    commit_time: float       # at the source (epoch seconds)
    applied_time: float      # at the warehouse (epoch seconds)
    versions: dict           # {source: dsv} the view reflects once this transaction is applied
    delta: list              # [(view row tuple, signed count change)]
    batch_id: int | None = field(default=None, compare=False)  # set when read back


class DeltaViewStore:
    """The warehouse's durable state under `root_dir`; see the module docstring for the tables."""

    def __init__(self, spark, root_dir: str, view_columns: list[str], view_types: list[str],
                 session_conf: Mapping[str, str] | None = None, retention: float | None = None,
                 hadoop: Callable[[str], str | None] | None = None):
        """`spark`: a SparkSession, or a Future of one still starting (warehouse.spark_session.
        start_beside): a restart (`load`) reads without it, whatever else waits for it.
        `retention`: seconds the journal keeps the batches the view's base folded, and both
        tables their superseded files and log (`retain`; None: for ever, what a reader that
        writes nothing opens). `hadoop`: a Hadoop setting by name, for reading s3a:// without
        Spark (default: the session's Hadoop configuration)."""
        if any(c.lower() == _COUNT for c in view_columns):
            raise StoreError("view_columns must not include 'count': the store adds the multiplicity")
        if len(view_columns) != len(view_types) or not view_columns:
            raise StoreError("view_columns and view_types must be non-empty and of equal length")
        if retention is not None and not 0 < retention < math.inf:
            raise StoreError(f"retention is a positive number of seconds or None (forever), got {retention!r}")
        self.root = _absolute(root_dir)
        self.columns = list(view_columns)
        self.types = validate_types(view_types)
        self.retention = retention
        self._session, self._child = spark, None
        self._session_lock = threading.Lock()
        # Tables created with a retention keep their log and removed files as long from the start:
        # setting it on a table later is a commit that fails a batch committed beside it.
        kept = {} if retention is None else {_DEFAULT + p.removeprefix("delta."): _interval(retention) for p in _KEPT}
        self._session_conf = {**SESSION_CONF, **kept, **(session_conf or {})}
        self._hadoop = hadoop
        self._lock = threading.RLock()
        self._last_batch: int | None = None   # None: unknown, recover from Delta first
        self._last_seq = -1
        self._applied: dict[str, int] = {}    # per source, the applied DSV of the last batch's state
        self._needed = _Needed()              # what of the journal a restart still reads beyond the base
        self._counts: dict[tuple, int] = {}   # the view as of _last_batch: refuses a count below 0
        self._appender: DeltaAppender | None = None   # the journal's batches (warehouse.store.delta_append)
        self._tables: dict[str, TableLog] = {}       # each table's log, read without Spark (`_found_in_log`)
        self._checkpointed: dict[str, int] = {}        # table -> the version of this store's last checkpoint
        self._vacuumed = float("-inf")                 # when this store last vacuumed (time.time())
        self._logs_kept = False                        # both tables' log retention is the store's (retain)

    @classmethod
    def at(cls, spark, root_dir: str) -> "DeltaViewStore":
        """The store under `root_dir`, its view's columns and types read from the view table: what
        a Spark user outside the warehouse opens to read the view (`view_df()`)."""
        fields = [f for f in spark.read.format("delta").load(f"{_absolute(root_dir)}/view").schema.fields
                  if f.name.lower() != _COUNT]
        names = {spark_type: name for name, spark_type in SPARK_TYPES.items()}
        return cls(spark, root_dir, [f.name for f in fields], [names[f.dataType] for f in fields])

    @property
    def _spark(self):
        """The store's child session of `spark` (the SparkContext shared, its SQL conf and temp
        views private), made on first use, once a session still starting is up."""
        with self._session_lock:
            if self._child is None:
                child = started(self._session).newSession()
                for key, value in self._session_conf.items():
                    child.conf.set(key, value)
                self._child = child
            return self._child

    # ------------------------------------------------------------------ tables
    def path(self, table: str) -> str:
        return f"{self.root}/{table}"

    def _sql_name(self, table: str) -> str:
        return "delta." + quote(self.path(table))

    def _read(self, table: str, version: int | None = None):
        reader = self._spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(self.path(table))

    def _exists(self, table: str) -> bool:
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(self._spark, self.path(table))

    def _write(self, table: str, df, tag: str, mode: str = "append") -> None:
        """One Delta commit, its commit info's userMetadata `tag` (`_tag`)."""
        df.write.format("delta").mode(mode).option("userMetadata", tag).save(self.path(table))

    def _view_frame(self, rows: Mapping[tuple, int]):
        return create_df(self._spark, self.columns + [_COUNT], self.types + ["BIGINT"],
                         [r + (c,) for r, c in rows.items()])

    def _journal_table(self, records: list[tuple], batch_id: int, delta: Mapping[tuple, int],
                       timed: Sequence[tuple] = ()) -> pa.Table:
        """One batch's journal rows: `records` (txn, notification and state rows, in the journal's
        columns, `row` and `count` null), then the rows that carry a view row in `row` and `count`:
        one `delta` row per changed view row and one `view_delta` row per timed row (row, count,
        (commit_time, source, dsv), epoch) -- its key in source/dsv/commit_time, its epoch in seq.
        The table's schema is the journal's (`_journal_schema`)."""
        blank = (None,) * (len(_JOURNAL) - 2)
        carried = [((batch_id, _DELTA) + blank, row, change) for row, change in delta.items()]
        carried += [((batch_id, _VIEW_DELTA, epoch, source, dsv, None, time, None, None, None), row, change)
                    for row, change, (time, source, dsv), epoch in timed]
        heads = records + [head for head, _, _ in carried]
        view_rows = [(None,) * len(self.columns)] * len(records) + [row for _, row, _ in carried]
        columns, types = zip(*_JOURNAL)
        table = to_arrow(columns, types, heads)
        rows = to_arrow(self.columns, self.types, view_rows)
        struct = pa.StructArray.from_arrays([c.combine_chunks() for c in rows.columns], fields=list(rows.schema),
                                            mask=pa.array([True] * len(records) + [False] * len(carried)))
        return table.append_column(_ROW, struct).append_column(
            _COUNT, pa.array([None] * len(records) + [change for _, _, change in carried], pa.int64()))

    def _journal_schema(self) -> StructType:
        columns, types = zip(*_JOURNAL)
        return StructType([*spark_schema(columns, types).fields, StructField(_ROW, spark_schema(self.columns, self.types)),
                           StructField(_COUNT, LongType())])

    # ------------------------------------------------------------------ initialize / load
    def initialize(self, rows_with_counts, version_state: Mapping) -> bool:
        """First materialization: creates both tables; a no-op (False) if already done.

        The journal, with batch 0's state row, is written last and marks a finished
        initialization; a crash before it makes the next call redo it (the view is overwritten).
        """
        with self._lock:
            if self._exists("journal"):  # only ever created with batch 0's state row, last
                return False
            rows = _counted_rows(rows_with_counts, len(self.columns))
            state_row = _state_row(INITIAL_BATCH, version_state, -1)
            self._write("view", self._view_frame(rows), _tag(INITIAL_BATCH, INITIAL_BATCH + 1), "overwrite")
            self._add_count_constraint()
            # Created by the DataFrame writer, which fixes its schema; batches append (delta_append).
            self._write("journal", self._spark.createDataFrame(self._journal_table([state_row], INITIAL_BATCH, {}),
                                                               schema=self._journal_schema()), _tag(INITIAL_BATCH))
            self._last_batch, self._last_seq, self._needed = INITIAL_BATCH, -1, _Needed()
            self._applied = _applied_dsv(version_state)
            self._counts = rows
            self._journal_appender()
            return True

    def _journal_appender(self) -> DeltaAppender:
        """The journal's appender, made once the journal exists: at initialization, by
        `prepare_commits`, or else by the first batch."""
        if self._appender is None:
            self._appender = DeltaAppender(self._spark, self.path("journal"))
        return self._appender

    def prepare_commits(self) -> None:
        """Readies the journal's appender (DeltaAppender: delta-spark's log of the journal, its
        snapshot, Jackson warmed), so that the first batch does not pay for it. A restart does
        not (`load` reads without Spark): a restarted warehouse calls this beside its core, whose
        batches wait for it; on Kubernetes it is the first Spark job, on an executor still starting."""
        with self._lock:
            self._journal_appender()

    def _add_count_constraint(self) -> None:
        try:
            self._spark.sql(f"ALTER TABLE {self._sql_name('view')} "
                            "ADD CONSTRAINT count_positive CHECK (`count` > 0)")
        except Exception as err:  # a redone initialization: the overwrite kept the constraint
            if "already exists" not in str(err).lower():
                raise

    def load(self) -> "Restored":
        """Restart from Delta: what the last committed batch left (`Restored`), read from the
        view's base and the journal's batches after it (`_recover`)."""
        with self._lock:
            state, pending = self._recover()
            return Restored(dict(self._counts), state, self._last_seq, self._last_batch, pending)

    def _recover(self) -> tuple[dict, list[Notification]]:
        """Rebuilds what the store believes from Delta; returns the last batch's version state and
        the notifications journaled that it does not reflect, in (source, DSV) order.

        Three reads, none of the journal's history: the base's tag (the batch B it folded, and
        the batch P from which the journal held what a restart needs then: `compact`), the base,
        and the journal's batches from min(B, P) on -- B's own for its state, should none follow.
        The journal's batch files carry their bounds (delta_append.file_stats), so the read skips
        the rest of it (tests/test_delta_store.py counts the files a restart reads). They are read
        from the tables' logs and files in Python (`_found_in_log`: no Spark job, no executor to
        wait for); through Spark (`_found_by_spark`) when that reader cannot, which it logs."""
        self._last_batch = None
        try:
            found = self._found_in_log()
        except (UnsupportedTable, OSError) as err:
            log.warning("reading the Delta tables under %s through Spark: %s", self.root, first_line(err))
            found = self._found_by_spark()
        want = [c.lower() for c in self.columns]
        if [c.lower() for c in found.stored] != want + [_COUNT] or [c.lower() for c in found.logged] != want:
            raise StoreError(f"the view under {self.root} has columns {found.stored}, "
                             f"not {self.columns} + count")
        base, tail = found.base, found.tail
        batches = [r["batch_id"] for r in tail if r["kind"] == _STATE]
        if not batches:
            raise StoreError(f"the journal under {self.root} holds no state of batch {base.batch} or later")
        last = max(batches)
        state_row = next(r for r in tail if r["kind"] == _STATE and r["batch_id"] == last)
        state = json_text.loads(state_row["body"])
        counts = Counter({row[:-1]: int(row[-1]) for row in found.view})
        needed = _Needed()
        notifications = []
        for r in tail:
            if r["kind"] == _DELTA and r["batch_id"] > base.batch:
                counts[r[_ROW]] += r[_COUNT]
            elif r["kind"] == _NOTIFICATION and r["batch_id"] >= base.needed_from:
                notifications.append(notification_from_dict(json_text.loads(r["body"])))
                needed.add(r["batch_id"], notifications[-1:])
            elif r["kind"] == _VIEW_DELTA and r["batch_id"] >= base.needed_from:
                needed.add(r["batch_id"], (), [(None, None, (None, r["source"], r["dsv"]), r["seq"])])
        pending = needed.settle(state)
        self._counts = {row: c for row, c in counts.items() if c}
        self._last_seq = state_row["seq"] if state_row["seq"] is not None else self._logged_seq()
        self._applied, self._needed = _applied_dsv(state), needed
        self._last_batch = last
        return state, pending

    def _found_in_log(self) -> "_Found":
        """What `_recover` reads, from the tables' logs and Parquet files (warehouse.store.delta_reader)."""
        journal, view = self._table("journal"), self._table("view")
        if not journal.exists():
            raise StoreError(f"no initialized view store under {self.root}; call initialize() first")
        base = _newest_tagged([(v, c.get("userMetadata"), c.get("operation")) for v, c in view.history(_HISTORY)],
                              f"the view under {self.root}")
        newest, at_base = journal.snapshot(), view.snapshot(base.version)
        start = min(base.batch, base.needed_from)
        tail = journal.read(newest.files("batch_id", start), list(_TAIL))
        tail = tail.filter((pc.field("batch_id") >= start) & (pc.field("kind") != _TXN)).to_pylist()
        for r in tail:
            r[_ROW] = None if r[_ROW] is None else tuple(from_spark(v) for v in r[_ROW].values())
        rows = view.read(at_base.files(), at_base.columns)
        return _Found(view.snapshot().columns, newest.field_names(_ROW), base, tail,
                      [] if rows is None else [tuple(from_spark(v) for v in r.values()) for r in rows.to_pylist()])

    def _found_by_spark(self) -> "_Found":
        """What `_recover` reads, through Spark."""
        if not self._exists("journal"):
            raise StoreError(f"no initialized view store under {self.root}; call initialize() first")
        base = self._base()
        tail = []
        for r in self._read("journal").where((F.col("batch_id") >= min(base.batch, base.needed_from))
                                             & (F.col("kind") != _TXN)).select(*_TAIL).collect():
            record = r.asDict()
            record[_ROW] = None if record[_ROW] is None else tuple(from_spark(v) for v in record[_ROW])
            tail.append(record)
        return _Found(self._read("view").columns, self._read("journal").schema[_ROW].dataType.fieldNames(), base, tail,
                      [tuple(from_spark(v) for v in r) for r in self._read("view", base.version).collect()])

    def _table(self, table: str) -> TableLog:
        """`table` as the log reader reads it; on s3a:// with the S3A settings `hadoop` gives, by
        default those of Spark's Hadoop configuration, which its own reads and writes take."""
        if table not in self._tables:
            setting = self._hadoop or (lambda key: self._spark._jsc.hadoopConfiguration().get(key))
            self._tables[table] = open_table(self.path(table), setting)
        return self._tables[table]

    def _logged_seq(self) -> int:
        """The change log's last seq, from the whole journal: for a journal whose state rows do not
        carry it (written before they did)."""
        last = self._journal(_TXN).agg(F.max("seq")).first()[0]
        return -1 if last is None else int(last)

    # ------------------------------------------------------------------ commit
    def commit_batch(self, batch_id: int, applied: list[AppliedTxn], view_delta, version_state: Mapping,
                     notifications: Sequence[Notification] = (), timed: Sequence[tuple] = ()) -> bool:
        """Durably commits one batch (one journal append); False (nothing written) if that batch
        id is committed already.

        `timed` is the batch's new rows of a timed view delta (the salem algorithm), each
        (view row, signed count, (commit_time, source, dsv), epoch): journaled as `view_delta`
        rows in the same append (zero counts dropped), read by view_as_of(); they change neither
        the view nor its counts, and are not part of the check below.

        Re-committing a committed batch id with entries the change log does not hold (seq above
        `last_seq`) raises StoreError instead: they must go into a new batch.

        `view_delta` is the batch's net delta [(row, count change)]; it must equal the sum of
        the applied transactions' deltas (every view change is in the change log, so the view
        stays checkable). Batch ids and seq numbers must grow. On any error the store forgets
        what it believed and recovers from Delta on the next call.
        """
        if not isinstance(batch_id, int) or isinstance(batch_id, bool) or batch_id <= INITIAL_BATCH:
            raise StoreError(f"batch ids are integers above {INITIAL_BATCH}, got {batch_id!r}")
        with self._lock:
            if self._last_batch is None:
                self._recover()
            if batch_id <= self._last_batch:
                self._check_no_new_entries(batch_id, applied)
                return False
            net = self._check_batch(batch_id, applied, view_delta, version_state)
            timed = self._check_timed(batch_id, timed)
            fresh = self._fresh(notifications)
            last_seq = applied[-1].seq if applied else self._last_seq
            records = [*(_txn_row(batch_id, a) for a in applied),
                       *(_notification_row(batch_id, n) for n in fresh),
                       _state_row(batch_id, version_state, last_seq)]
            try:
                self._journal_appender().append(self._journal_table(records, batch_id, net, timed), f"{_TAG}{batch_id}",
                                                indexed=_INDEXED)
            except Exception:
                self._last_batch = None
                raise
            self._needed.add(batch_id, fresh, timed)
            self._needed.settle(version_state)
            self._applied = _applied_dsv(version_state)
            for row, change in net.items():
                count = self._counts.get(row, 0) + change
                if count:
                    self._counts[row] = count
                else:
                    del self._counts[row]
            self._last_batch, self._last_seq = batch_id, last_seq
            return True

    def _check_no_new_entries(self, batch_id: int, applied: list[AppliedTxn]) -> None:
        """A re-commit may only repeat durable entries; newer ones would otherwise be lost silently."""
        newer = [a.seq for a in applied if a.seq > self._last_seq]
        if newer:
            raise StoreError(f"batch {batch_id} is already committed (the change log ends at seq "
                             f"{self._last_seq}); entries with seq {newer[0]}..{newer[-1]} are not in it: "
                             "commit them under a new batch id")

    def _check_batch(self, batch_id, applied, view_delta, version_state) -> dict:
        """Everything that can be checked without Spark, before anything is written."""
        seqs = [a.seq for a in applied]
        if any(b <= a for a, b in zip([self._last_seq] + seqs, seqs)):
            raise StoreError(f"batch {batch_id}: seq must grow past {self._last_seq}, got {seqs}")
        _state_row(batch_id, version_state, -1)  # validates the shape
        net = _net(view_delta)
        if net != _net(d for a in applied for d in a.delta):
            raise StoreError(f"batch {batch_id}: view_delta differs from the sum of the applied "
                             "transactions' deltas; every view change must be in the change log")
        if any(len(r) != len(self.columns) for r in net):
            raise StoreError(f"batch {batch_id}: view rows need {len(self.columns)} values")
        try:
            to_arrow(self.columns, self.types, net)
        except ValueError as err:
            raise StoreError(f"batch {batch_id}: a view row does not match the view's types: {err}") from None
        below = [row for row, change in net.items() if self._counts.get(row, 0) + change < 0]
        if below:
            raise StoreError(f"batch {batch_id}: the view delta would leave row {below[0]} with count < 0 "
                             "(it removes rows the view does not hold); nothing was applied")
        return net

    def _check_timed(self, batch_id: int, timed: Sequence[tuple]) -> list[tuple]:
        """The timed rows with a nonzero count, as (row tuple, int, (float, str, int), int), each
        checked against the view's columns and types before anything is written."""
        kept = []
        for entry in timed:
            try:
                row, change, (time, source, dsv), epoch = entry
                row = tuple(row)
            except (TypeError, ValueError):
                row = change = time = source = dsv = epoch = None
            if (not all(_is_int(v) for v in (change, dsv, epoch)) or not isinstance(source, str)
                    or isinstance(time, bool) or not isinstance(time, (int, float))):
                raise StoreError(f"batch {batch_id}: timed rows are (view row, count, (commit_time, source, dsv), "
                                 f"epoch) with int count, dsv and epoch, got {entry!r}")
            if len(row) != len(self.columns):
                raise StoreError(f"batch {batch_id}: view rows need {len(self.columns)} values, got {row!r}")
            if change:
                kept.append((row, int(change), (float(time), source, int(dsv)), int(epoch)))
        try:
            to_arrow(self.columns, self.types, [row for row, *_ in kept])
        except ValueError as err:
            raise StoreError(f"batch {batch_id}: a timed row does not match the view's types: {err}") from None
        return kept

    def _fresh(self, notifications: Sequence[Notification]) -> list[Notification]:
        """The notifications to journal, once each: those not journaled since the last batch's
        state stopped reflecting them, and that it does not reflect (no restart needs those)."""
        fresh = {}
        for n in notifications:
            key = (n.source, int(n.dsv))
            if key not in self._needed.notifications and n.dsv > self._applied.get(n.source, 0):
                fresh.setdefault(key, n)
        return list(fresh.values())

    def compact(self) -> bool:
        """Folds the journal's deltas up to the last committed batch into the view's base: one
        overwrite tagged with that batch and the batch from which the journal holds what a
        restart reads beyond it (`_Needed.start`); False if the base is there already.

        May run beside commit_batch: it only reads batches already in the journal, which never
        change. Two compactions may race (a successor process's, say): each writes a whole base
        tagged with the batch it folded up to, so whichever commits last leaves a correct one.
        """
        with self._lock:
            if self._last_batch is None:
                self._recover()
            upto, needed_from = self._last_batch, self._needed.start(self._last_batch)
        base = self._base()
        if base.batch >= upto:
            return False
        self._write("view", self._snapshot(base.version, base.batch, upto), _tag(upto, needed_from), "overwrite")
        return True

    def tag_jobs(self, group: str) -> None:
        """The Spark jobs the calling thread starts from now on belong to `group` (cancel_jobs)."""
        self._spark.sparkContext.setJobGroup(group, f"{self.root}: {group}")

    def cancel_jobs(self, group: str) -> None:
        """Cancels the running Spark jobs of `group`: the operation that started them fails before
        its Delta commit (a commit is the driver's, not a job), so it leaves no trace but files
        out of the table, which VACUUM deletes."""
        self._spark.sparkContext.cancelJobGroup(group)

    def checkpoint(self) -> list[str]:
        """Writes a Delta checkpoint of each table whose log grew by CHECKPOINT_EVERY commits
        since this store's last one; returns the tables it checkpointed.

        Called beside the committer, not by it: a checkpoint is a Spark job, and written by the
        commit that reached Delta's interval it held the next batch back (5 s of a 20 s bench at
        100 txn/s: the staleness to Delta's p99 went from 1.1 to 5.3 s in that trial). A
        checkpoint of an older version beside a newer commit is what Delta allows any writer.
        """
        done = []
        for table in ("journal", "view"):
            log = delta_log(self._spark, self.path(table))
            version = log.unsafeVolatileSnapshot().version()
            if version - self._checkpointed.get(table, 0) >= CHECKPOINT_EVERY:
                log.checkpoint()
                self._checkpointed[table] = version
                done.append(table)
        return done

    def retain(self, now: float | None = None) -> dict:
        """Applies the retention (`retention` seconds; nothing without one): the journal's files
        all of whose batches lie below what a restart reads (the base's batch, and the batch its
        tag names as needed from: `compact`) and that were written longer ago than the retention
        leave the journal, in one Delta commit (a DELETE of `batch_id` below that batch, without
        rewriting a file); and at most every half retention both tables are vacuumed, deleting
        the files out of their table for longer than the retention, and their logs trimmed to
        as long (`_trim_log`). Returns {"removed": journal files taken out, "vacuumed": whether
        it vacuumed}.

        What a reader loses past it: the change log and notifications of batches folded that long
        ago (read_change_log, read_notifications), and the tables' versions older than it (time
        travel). The view (view_df, view_as_of) and a restart lose nothing: they read the base
        and the batches after the one the base's tag names. Runs beside commit_batch: a journal
        append adds a file and reads none, so the two commits never conflict."""
        if self.retention is None:
            return {"removed": 0, "vacuumed": False}
        now = time.time() if now is None else now
        self._keep_logs()
        base = self._base()
        keep_from = min(base.batch, base.needed_from)
        old = table_files(self._spark, self.path("journal")).where((F.get_json_object("stats", "$.maxValues.batch_id").cast("long") < keep_from)
                          & (F.col("modificationTime") < int((now - self.retention) * 1000)))
        removed = [remove_json(r["path"], r["size"], now) for r in old.select("path", "size").collect()]
        if removed:
            self._journal_appender().remove(removed, exclusive=self._lock)
        vacuumed = now - self._vacuumed >= self.retention / 2
        if vacuumed:
            for table in ("journal", "view"):
                self._spark.sql(f"VACUUM {self._sql_name(table)}")
                self._trim_log(table, int((now - self.retention) * 1000))
            self._vacuumed = now
        return {"removed": len(removed), "vacuumed": vacuumed}

    def _trim_log(self, table: str, before_ms: int) -> int:
        """Deletes the files of `table`'s log that its newest checkpoint replaces (`_LOG_FILE`,
        of a lower version) and that were written before `before_ms` (ms since the epoch),
        oldest first and up to the first younger one, so that the log keeps no gap; returns how
        many went. Delta deletes them itself when it writes a checkpoint, but only those older
        than the retention floored to midnight UTC (its MetadataCleanup): a run's log would stay
        whole until the next day, 4 commits a second of the journal's."""
        log = delta_log(self._spark, self.path(table))
        newest = log.readLastCheckpointFile()
        if newest.isEmpty():
            return 0
        replaced = newest.get().version()
        fs = log.logPath().getFileSystem(self._spark._jsc.hadoopConfiguration())
        files = []
        for status in fs.listStatus(log.logPath()):
            match = _LOG_FILE.fullmatch(status.getPath().getName())
            if match and int(match[1]) < replaced:
                files.append((int(match[1]), status.getModificationTime(), status.getPath()))
        deleted = 0
        for _, written, path in sorted(files, key=lambda f: f[:2]):
            if written >= before_ms:
                break
            deleted += bool(fs.delete(path, False))
        return deleted

    def _keep_logs(self) -> None:
        """Sets both tables' retention of their log and removed files (`_KEPT`) to the store's,
        where it is not that yet (once per store object: a restarted warehouse may have been
        given another)."""
        if self._logs_kept:
            return
        wanted = _interval(self.retention)
        for table in ("journal", "view"):
            configuration = delta_log(self._spark, self.path(table)).unsafeVolatileSnapshot().metadata().configuration()
            if any(not configuration.contains(p) or configuration.apply(p) != wanted for p in _KEPT):
                settings = ", ".join(f"'{p}' = '{wanted}'" for p in _KEPT)
                self._spark.sql(f"ALTER TABLE {self._sql_name(table)} SET TBLPROPERTIES ({settings})")
        self._logs_kept = True

    # ------------------------------------------------------------------ reads
    def view_df(self, batch: int | None = None):
        """The view as of `batch` (default: the last committed), a Spark DataFrame of its columns
        plus `count` (the snapshot read: the base plus the journal's deltas above it, up to
        `batch`); StoreError if the base has been compacted past `batch` meanwhile."""
        base = self._base()
        if batch is not None and base.batch > batch:
            raise StoreError(f"the view's base was compacted past batch {batch} meanwhile; read again")
        return self._snapshot(base.version, base.batch, batch)

    def read_view(self, batch: int | None = None) -> dict[tuple, int]:
        """The view as {row: multiplicity} (DATE values as ISO strings), as of `batch` (see view_df)."""
        return {tuple(from_spark(v) for v in r[:-1]): int(r[-1]) for r in self.view_df(batch).collect()}

    def newest_batch(self) -> int:
        """The last batch the journal holds, read from Delta (what an unpinned snapshot read
        reflects): the batch of its newest tagged commit (`_tagged`), not a scan of the journal."""
        return self._tagged("journal").batch

    def _base(self) -> "_Base":
        """The view's base: its newest commit tagged with a batch (`_tagged`)."""
        return self._tagged("view")

    def _tagged(self, table: str) -> "_Base":
        """The newest commit of `table` tagged with a batch (`_tag`), its version and tag. Every
        commit is tagged but a few (the view's constraint, right after the first; a table
        property; the journal's retention, `retain`, one a compaction): the newest few suffice,
        and a long run's history (a compaction a minute) is not read whole. When only commits
        that change no row lie above the tagged one, the newest's version is the one read, the
        same rows: Delta keeps the newest version's snapshot, and rebuilds an older one on each
        read (a second here)."""
        history = self._spark.sql(f"DESCRIBE HISTORY {self._sql_name(table)} LIMIT {_HISTORY}")
        return _newest_tagged([(int(v), m, op) for v, m, op in history.select("version", "userMetadata", "operation").collect()],
                              f"the {table} under {self.root}")

    def _snapshot(self, version: int, base_batch: int, upto: int | None = None, also=None):
        """The base at `version` plus the deltas of the batches in (base_batch, upto], summed per
        row; with `also` (a condition on the journal: view_as_of's) the journal rows it picks too.
        Only `delta` rows otherwise: compaction never folds a timed view delta into the view."""
        columns = [F.col(quote(c)) for c in self.columns]
        picked = (F.col("kind") == _DELTA) & (F.col("batch_id") > int(base_batch))
        if upto is not None:
            picked = picked & (F.col("batch_id") <= int(upto))
        if also is not None:
            picked = picked | also
        deltas = self._read("journal").where(picked).select(
            *(F.col(_ROW).getField(c).alias(c) for c in self.columns), F.col(_COUNT))
        rows = self._read("view", version).select(*columns, F.col(quote(_COUNT))).unionByName(deltas)
        summed = rows.groupBy(*columns).agg(F.sum(quote(_COUNT)).alias(_COUNT))
        return summed.where(F.col(quote(_COUNT)) != 0)   # a negative count shows (and fails a compaction)

    def view_as_of_df(self, as_of: float, batch: int | None = None):
        """The view as of wall time `as_of` (seconds since the epoch), a Spark DataFrame of its
        columns plus `count` (rows with a nonzero count), read from `batch` (default: the last
        committed): the view of that batch (view_df) plus the rows of the timed view delta the
        salem algorithm journals (kind `view_delta`) of batches up to it that lie beyond the
        view's point -- of the state's epoch, dsv above the source's applied_dsv -- and committed
        at or before `as_of`, summed per row. The batch's version state scopes it:
        state["salem"]["view_delta"] = {"epoch", "materialized_us", "reach_us"} (wall times in
        microseconds: the view's point, floored, and the delta's exclusive high-water mark) and
        state["sources"][source]["applied_dsv"] (a source it does not name has applied none).
        StoreError unless materialized_us <= as_of * 1e6 < reach_us."""
        if isinstance(as_of, bool) or not isinstance(as_of, (int, float)) or not math.isfinite(as_of):
            raise StoreError(f"a time to read the view as of is seconds since the epoch, got {as_of!r}")
        batch, state = self._state_at(batch)
        timed = state.get("salem", {}).get("view_delta")
        if timed is None:
            raise StoreError("the view in Delta has no view delta: only the salem algorithm keeps one")
        if not {"epoch", "materialized_us", "reach_us"} <= set(timed):
            raise StoreError(f"batch {batch}'s view delta state {timed} lacks epoch, materialized_us or reach_us")
        at_us = float(as_of) * 1e6
        if at_us >= timed["reach_us"]:
            raise StoreError(f"time {as_of} is beyond the view delta's high-water mark (readable up to "
                             f"{_when(timed['reach_us'])}, exclusive)")
        if at_us < timed["materialized_us"]:
            raise StoreError(f"time {as_of} is before the view's state in Delta (at {_when(timed['materialized_us'])})")
        bound = None   # the source's applied_dsv, per journal row
        for source, fields in sorted(state.get("sources", {}).items()):
            if "applied_dsv" in fields:
                bound = (F.when if bound is None else bound.when)(F.col("source") == source,
                                                                  F.lit(int(fields["applied_dsv"])))
        beyond = F.lit(True) if bound is None else bound.isNull() | (F.col("dsv") > bound)
        picked = ((F.col("kind") == _VIEW_DELTA) & (F.col("batch_id") <= batch)
                  & (F.col("seq") == int(timed["epoch"])) & beyond & (F.col("commit_time") <= float(as_of)))
        base = self._base()
        if base.batch > batch:
            raise StoreError(f"the view's base was compacted past batch {batch} meanwhile; read again")
        # Rows of batches below the one the base's tag names as needed from lie below the view's
        # point or in an older epoch, at `batch` as at the base's batch: the read skips them.
        return self._snapshot(base.version, base.batch, batch, also=picked & (F.col("batch_id") >= base.needed_from))

    def view_as_of(self, as_of: float, batch: int | None = None) -> dict[tuple, int]:
        """The view as of wall time `as_of` as {row: count} (see view_as_of_df; DATEs as ISO strings)."""
        return {tuple(from_spark(v) for v in r[:-1]): int(r[-1]) for r in self.view_as_of_df(as_of, batch).collect()}

    def read_change_log(self, after_seq: int | None = None, batch_id: int | None = None) -> list[AppliedTxn]:
        """Change-log entries in apply order (optionally only seq > after_seq, or one batch)."""
        df = self._journal(_TXN)
        if after_seq is not None:
            df = df.where(f"seq > {int(after_seq)}")
        if batch_id is not None:
            df = df.where(f"batch_id = {int(batch_id)}")
        return [_log_entry(r) for r in df.orderBy("seq").collect()]

    def read_version_state(self, batch_id: int | None = None) -> dict:
        """The version state after `batch_id` (default: the last batch); {} if there is no such batch."""
        try:
            return self._state_at(batch_id)[1]
        except StoreError:
            return {}

    def _state_at(self, batch_id: int | None) -> tuple[int, dict]:
        """(batch, its version state), the last batch's by default: one Spark job; StoreError if
        the journal holds no such batch."""
        which = self.newest_batch() if batch_id is None else int(batch_id)
        row = self._journal(_STATE).where(f"batch_id = {which}").select("batch_id", "body").first()
        if row is None:
            raise StoreError(f"the journal under {self.root} holds no batch {batch_id}")
        return int(row[0]), json_text.loads(row[1])

    def read_notifications(self, source: str | None = None) -> list[Notification]:
        """Stored notifications, ordered by (source, dsv)."""
        df = self._journal(_NOTIFICATION)
        if source is not None:
            df = df.where(df.source == source)
        return [notification_from_dict(json_text.loads(r[0]))
                for r in df.orderBy("source", "dsv").select("body").collect()]

    def _journal(self, kind: str):
        return self._read("journal").where(f"kind = '{kind}'")

    def view(self) -> dict[tuple, int]:
        """The view as of the last committed batch, as this store holds it in memory (DATE values
        as ISO strings): what a reader of Delta sees, without a read."""
        with self._lock:
            if self._last_batch is None:
                self._recover()
            return dict(self._counts)

    @property
    def last_batch_id(self) -> int | None:
        """The last committed batch id, or None until the store has recovered/initialized."""
        return self._last_batch

    @property
    def last_seq(self) -> int:
        """The seq of the last change-log entry known durable (-1: none)."""
        return self._last_seq


# ---------------------------------------------------------------------- row helpers
def _absolute(root_dir) -> str:
    """A local directory as an absolute path, from this process's working directory: the JVM has
    its own, and Spark SQL (DESCRIBE HISTORY delta.`dir`, which finds the view's base) takes a
    relative one for a table name. A URI (s3a://...) stays as it is."""
    root = str(root_dir).rstrip("/")
    return root if "://" in root else os.path.abspath(root)


def _interval(seconds: float) -> str:
    """A retention as a Delta table property says it.

    >>> _interval(600), _interval(0.5)
    ('interval 600 seconds', 'interval 1 seconds')
    """
    return f"interval {int(math.ceil(seconds))} seconds"


def _when(us: int) -> str:
    """A wall time in microseconds since the epoch, as seconds and in UTC."""
    at = datetime.fromtimestamp(us / 1e6, timezone.utc).isoformat(timespec="microseconds")
    return f"{us / 1e6:.6f} ({at.replace('+00:00', 'Z')})"


def _tag(batch_id: int, needed_from: int | None = None) -> str:
    """A commit's userMetadata naming its batch (a journal append's), and for the view's base the
    batch from which the journal holds what a restart reads beyond it (`_Needed.start`).

    >>> _tag(12), _tag(12, 9), _parse_tag(_tag(12, 9)), _parse_tag(_tag(12)), _parse_tag("other")
    ('fedlab-batch=12', 'fedlab-batch=12 needed-from=9', (12, 9), (12, 0), None)
    """
    return f"{_TAG}{batch_id}" + ("" if needed_from is None else f" {_NEEDED_FROM}{needed_from}")


def _parse_tag(user_metadata: str | None) -> tuple[int, int] | None:
    """(batch, needed from) of a tag (`_tag`), None for another commit. A base tagged before tags
    named what a restart needs is taken to need the journal from its start."""
    match = re.fullmatch(re.escape(_TAG) + r"(-?\d+)(?: " + re.escape(_NEEDED_FROM) + r"(-?\d+))?", user_metadata or "")
    return (int(match.group(1)), int(match.group(2) or INITIAL_BATCH)) if match else None


@dataclass(frozen=True)
class _Base:
    """A tagged commit of a table (`DeltaViewStore._tagged`): its version and what its tag says."""

    version: int
    batch: int
    needed_from: int


def _newest_tagged(history: Iterable[tuple[int, str | None, str | None]], what: str) -> _Base:
    """The newest tagged commit among `history`'s (version, userMetadata, operation), newest
    first (see `DeltaViewStore._tagged`); StoreError naming `what` when none is."""
    above = []   # the untagged commits newer than the tagged one, newest first
    for version, meta, operation in history:
        tag = _parse_tag(meta)
        if tag is not None:
            rows_unchanged = above and all(op in _ROWS_UNCHANGED for _, op in above)
            return _Base(above[0][0] if rows_unchanged else version, *tag)
        above.append((version, operation))
    raise StoreError(f"{what} has no commit tagged with a batch")


# The journal's columns a restart reads (`_recover`).
_TAIL = ("batch_id", "kind", "seq", "source", "dsv", "body", _ROW, _COUNT)


@dataclass(frozen=True)
class _Found:
    """What a restart reads of the tables (`DeltaViewStore._recover`), by either reader: the
    view's and the journal's view columns now, the base's tag, the journal's rows of its batches
    from the one the tag names on (but the change log's), as {column: value} with `row` a tuple,
    and the base's rows, its count last (values as the federation's rows carry them: from_spark)."""

    stored: list[str]
    logged: list[str]
    base: _Base
    tail: list[dict]
    view: list[tuple]


@dataclass(frozen=True)
class Restored:
    """What a restart takes from Delta (`DeltaViewStore.load`): the view as of the last batch, its
    version state, the change log's last seq, the last batch's id, and the notifications
    journaled that the state does not reflect (a restart maintains them again, in this order)."""

    view: dict
    state: dict
    last_seq: int
    last_batch: int
    pending: list


class _Needed:
    """What of the journal a restart, or a read of the view as of a time, reads beyond the view's
    base, kept as batches commit: the notifications journaled that the last batch's state does
    not reflect (warehouse.core.registry.not_reflected: a restart maintains them again), and the
    batches whose timed view delta rows (salem) lie beyond the view's point in its epoch
    (view_as_of reads them). Both are what is in flight, so the batch they start from is near
    the last, and the journal below it and the base is history (`retain`)."""

    def __init__(self):
        self.notifications: dict[tuple[str, int], tuple[int, Notification]] = {}   # key -> (batch, it)
        self.timed: dict[int, tuple[int, dict[str, int]]] = {}   # batch -> (epoch, {source: its rows' top DSV})

    def add(self, batch_id: int, notifications: Iterable[Notification], timed: Iterable[tuple] = ()) -> None:
        """Journaled in batch `batch_id`: `notifications`, and `timed` rows (row, count,
        (commit_time, source, dsv), epoch)."""
        for n in notifications:
            self.notifications[(n.source, int(n.dsv))] = (batch_id, n)
        for *_, (_, source, dsv), epoch in timed:
            _, top = self.timed.setdefault(batch_id, (epoch, {}))
            top[source] = max(top.get(source, 0), dsv)

    def settle(self, state: Mapping) -> list[Notification]:
        """Forgets what the version `state` reflects; returns the notifications it does not."""
        pending = not_reflected([n for _, n in self.notifications.values()], state)
        kept = {(n.source, n.dsv) for n in pending}
        self.notifications = {key: entry for key, entry in self.notifications.items() if key in kept}
        applied, epoch = _applied_dsv(state), state.get("salem", {}).get("view_delta", {}).get("epoch")
        self.timed = {b: (e, top) for b, (e, top) in self.timed.items()
                      if e == epoch and any(dsv > applied.get(s, 0) for s, dsv in top.items())}
        return pending

    def start(self, last_batch: int) -> int:
        """The first batch holding anything kept here; past `last_batch` when there is none."""
        return min([b for b, _ in self.notifications.values()] + list(self.timed), default=last_batch + 1)


def _applied_dsv(state: Mapping) -> dict[str, int]:
    """Per source, the applied DSV a version state names (a source it does not name: none)."""
    return {s: fields["applied_dsv"] for s, fields in state.get("sources", {}).items() if "applied_dsv" in fields}


def _net(pairs: Iterable) -> dict[tuple, int]:
    """Sums (row, count change) pairs per row and drops rows whose sum is 0."""
    total: Counter = Counter()
    for row, change in pairs:
        total[tuple(row)] += int(change)
    return {r: c for r, c in total.items() if c}


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _counted_rows(rows_with_counts, width: int) -> dict[tuple, int]:
    items = rows_with_counts.items() if isinstance(rows_with_counts, Mapping) else rows_with_counts
    rows = _net(items)
    bad = [(r, c) for r, c in rows.items() if c < 0 or len(r) != width]
    if bad:
        raise StoreError(f"initial view rows need {width} values and a positive count, got {bad[:3]}")
    return rows


def _state_row(batch_id: int, state: Mapping, last_seq: int) -> tuple:
    """The batch's version state row, its seq the change log's last one after the batch (-1: none)."""
    try:
        for scope, names in state.items():
            for name, fields in names.items():
                for fld, value in fields.items():
                    if isinstance(value, bool) or not isinstance(value, int):
                        raise TypeError(value)
    except (AttributeError, TypeError):
        raise StoreError("version_state must be {scope: {name: {field: int}}}, e.g. "
                         "{'relations': {'R1': {'processing': 3, 'refreshed': 3}}}") from None
    return (batch_id, _STATE, last_seq, None, None, None, None, None, None, json_text.dumps(state, sort_keys=True))


def _txn_row(batch_id: int, a: AppliedTxn) -> tuple:
    delta = [[list(r), int(c)] for r, c in a.delta]
    return (batch_id, _TXN, a.seq, a.source, a.dsv, a.txn_id, float(a.commit_time), float(a.applied_time),
            json_text.dumps(a.versions), json_text.dumps(delta))


def _log_entry(r) -> AppliedTxn:
    versions = {k: int(v) for k, v in json_text.loads(r["versions"]).items()}
    delta = [(tuple(row), int(c)) for row, c in json_text.loads(r["body"])]
    return AppliedTxn(int(r["seq"]), r["source"], int(r["dsv"]), r["txn_id"], r["commit_time"],
                      r["applied_time"], versions, delta, batch_id=int(r["batch_id"]))


def _notification_row(batch_id: int, n: Notification) -> tuple:
    return (batch_id, _NOTIFICATION, None, n.source, int(n.dsv), n.txn_id, float(n.commit_time), None, None,
            json_text.dumps(notification_to_dict(n)))
