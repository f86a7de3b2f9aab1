"""The materialized view and the warehouse's journal in Delta Lake: two Delta commits per batch.

Two path-based Delta tables live under `root_dir` (one writer process per root):

- `view`: the view's columns plus `count` (BIGINT multiplicity, CHECK count > 0; a row whose
  count reaches 0 is deleted, and a delta that would take a count below 0 or insert a row with
  a negative count fails the whole MERGE instead of corrupting the view). What a Spark user reads.
- `journal`: append-only, one append per batch, every row tagged with its batch_id and `kind`:
  - `txn`: the change log, one row per applied source transaction, in apply order: seq, source,
    dsv, txn_id, commit_time, applied_time, versions (JSON {source: dsv}: the versions the view
    reflects after this transaction) and body (JSON [[row, signed count change], ...]);
  - `notification`: every received notification once, keyed by (source, dsv): txn_id,
    commit_time and body (JSON, fedmodel.transactions.notification_to_dict);
  - `state`: one row per batch, body the version state after it (JSON).

Version state (the dict handed to `initialize`/`commit_batch` and returned by `load`) is
{scope: {name: {field: int}}}, e.g. {"relations": {"R1": {"processing": 12, "refreshed": 11}},
"sources": {"ds1": {"applied_dsv": 40}}}.

Every Delta commit of batch k carries the commit-info userMetadata `fedlab-batch=k`. Committing
a batch writes, in this order:
  1. view: ONE MERGE of the net delta -- tentative until step 2; a delta that breaks the count
     constraint fails here, before anything of the batch is logged;
  2. journal: ONE append of the batch's transactions, new notifications and version state --
     the COMMIT POINT of every batch (a batch that applied nothing still has its state row).
Two commits, not one per kind of record: a Delta commit has a fixed cost (a Spark job and a log
entry: 0.3-1 s on two cores) that dominated a batch when each kind had its own table.
Recovery (`load()`, or the first `commit_batch` of a new store object, or the next call after a
failed one) reads the highest committed batch c from the journal, then, if the view's newest
tagged commit belongs to a batch above c (a MERGE whose batch never reached its commit point),
rewrites the view as of its last commit tagged <= c (roll back, by Delta time travel: read
versionAsOf, overwrite). That closes a crash between the two steps, and a write that Delta
committed while the caller never heard back (crash, lost py4j reply, exception after the
commit): the next call rebuilds its idea of the store from Delta instead of trusting memory, so
nothing is applied twice and nothing logged is missing from the view. Re-committing a batch id
at or below the last committed one is a no-op (the first committed content of a batch wins).
Why not Delta's txnAppId/txnVersion: in delta-spark 4.4 looking the recorded version up
(Snapshot.transactions) runs a full state reconstruction on every write -- measured here at 3
extra Spark jobs and ~2-4 s per write -- while the batch-id column costs nothing until recovery.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from fedmodel.transactions import Notification, notification_from_dict, notification_to_dict
from warehouse.store.sparktypes import SPARK_TYPES, check_types, create_df, from_spark, quote, to_arrow

INITIAL_BATCH = 0
_TAG = "fedlab-batch="
_DCOUNT = "__fedlab_dcount"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"

_JOURNAL = (("batch_id", "BIGINT"), ("kind", "VARCHAR"), ("seq", "BIGINT"), ("source", "VARCHAR"),
            ("dsv", "BIGINT"), ("txn_id", "VARCHAR"), ("commit_time", "DOUBLE"), ("applied_time", "DOUBLE"),
            ("versions", "VARCHAR"), ("body", "VARCHAR"))
_TXN, _NOTIFICATION, _STATE = "txn", "notification", "state"
# SQL settings of the store's child session, for many small jobs (measured on 2 cores):
# without AQE a MERGE runs 5 Spark jobs instead of 11; without code generation (whole-stage and
# expression codegen: Spark then evaluates interpreted, as it does when codegen fails) the test
# file runs in ~60 s instead of ~75 s, since each new plan no longer compiles Java source. The
# MERGE source is a local, fixed relation, so Delta need not materialize it. No file statistics
# and no repartition before a MERGE's write: readers scan the whole view (no data skipping to
# feed), and a batch touches rows all over it. A checkpoint every 100 commits, not 10: writing one
# is a Spark job of its own. The last three took a batch of 500 transactions on a 100k-row view
# from 6.3 to 3.6 s of JVM CPU (4.2 to 2.7 s wall). Override per store with
# DeltaViewStore(..., session_conf={...}) for views large enough to favour codegen.
SESSION_CONF = {"spark.sql.adaptive.enabled": "false",
                "spark.sql.codegen.wholeStage": "false",
                "spark.sql.codegen.factoryMode": "NO_CODEGEN",
                "spark.databricks.delta.merge.materializeSource": "none",
                "spark.databricks.delta.stats.collect": "false",
                "spark.databricks.delta.merge.repartitionBeforeWrite.enabled": "false",
                "spark.databricks.delta.properties.defaults.checkpointInterval": "100"}


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
                 session_conf: Mapping[str, str] | None = None):
        if any(c.lower() in ("count", _DCOUNT) for c in view_columns):
            raise StoreError("view_columns must not include 'count': the store adds the multiplicity")
        if len(view_columns) != len(view_types) or not view_columns:
            raise StoreError("view_columns and view_types must be non-empty and of equal length")
        self.root = str(root_dir).rstrip("/")
        self.columns = list(view_columns)
        self.types = check_types(view_types)
        # A child session: same SparkContext, but its SQL conf and temp views stay private.
        self._spark = spark.newSession()
        for key, value in {**SESSION_CONF, **(session_conf or {})}.items():
            self._spark.conf.set(key, value)
        _quiet_merge_stats_warning(spark)
        self._lock = threading.RLock()
        self._last_batch: int | None = None   # None: unknown, recover from Delta first
        self._last_seq = -1
        self._log_len = 0
        self._notified: set[tuple[str, int]] = set()
        self.timings: dict[str, float] = {}   # seconds per step of the last commit_batch

    # ------------------------------------------------------------------ tables
    def path(self, table: str) -> str:
        return f"{self.root}/{table}"

    def _sql_name(self, table: str) -> str:
        return "delta." + quote(self.path(table))

    def _read(self, table: str):
        return self._spark.read.format("delta").load(self.path(table))

    def _exists(self, table: str) -> bool:
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(self._spark, self.path(table))

    def _write(self, table: str, schema, rows: list, mode: str = "append") -> None:
        columns, types = zip(*schema)
        create_df(self._spark, columns, types, rows).write.format("delta").mode(mode).save(self.path(table))

    def _tagged(self, batch_id: int):
        """Context: every Delta commit made inside carries userMetadata 'fedlab-batch=<id>'."""
        return _SessionConf(self._spark, _USER_METADATA, f"{_TAG}{batch_id}")

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
            state_row = _state_row(INITIAL_BATCH, version_state)
            with self._tagged(INITIAL_BATCH):
                self._write("view", self._view_schema("count"), [r + (c,) for r, c in rows.items()], "overwrite")
                self._add_count_constraint()
                self._write("journal", _JOURNAL, [state_row])
            self._last_batch, self._last_seq, self._log_len, self._notified = INITIAL_BATCH, -1, 0, set()
            return True

    def _view_schema(self, count_column: str):
        return tuple(zip(self.columns + [count_column], self.types + ["BIGINT"]))

    def _add_count_constraint(self) -> None:
        try:
            self._spark.sql(f"ALTER TABLE {self._sql_name('view')} "
                            "ADD CONSTRAINT count_positive CHECK (`count` > 0)")
        except Exception as err:  # a redone initialization: the overwrite kept the constraint
            if "already exists" not in str(err).lower():
                raise

    def load(self):
        """Restart from Delta: (view {row: count}, version state, change-log length, last batch id).

        Recovers first: undoes the view MERGE of a batch a crash left without its journal append.
        """
        with self._lock:
            self._recover()
            state = self.read_version_state(self._last_batch)
            return self.read_view(), state, self._log_len, self._last_batch

    def _recover(self) -> None:
        self._last_batch = None
        if not self._exists("journal"):
            raise StoreError(f"no initialized view store under {self.root}; call initialize() first")
        committed, log_len, last_seq = self._spark.sql(
            f"SELECT max(batch_id), count_if(kind = '{_TXN}'), max(seq) FROM {self._sql_name('journal')}").first()
        stored = self._read("view").columns
        if [c.lower() for c in stored] != [c.lower() for c in self.columns + ["count"]]:
            raise StoreError(f"the view under {self.root} has columns {stored}, "
                             f"not {self.columns} + count")
        self._undo_uncommitted_view(int(committed))
        self._log_len, self._last_seq = int(log_len), -1 if last_seq is None else int(last_seq)
        self._notified = {(r[0], int(r[1])) for r in self._journal(_NOTIFICATION).select("source", "dsv").collect()}
        self._last_batch = int(committed)

    def _undo_uncommitted_view(self, committed: int) -> None:
        """Roll back: undoes any MERGE of a batch above `committed` (time travel + overwrite)."""
        history = self._spark.sql(f"DESCRIBE HISTORY {self._sql_name('view')} LIMIT 20"
                                  ).select("version", "userMetadata").collect()
        newer = False
        for version, meta in history:  # newest first
            batch = _batch_of(meta)
            if batch is not None and batch > committed:
                newer = True
            elif batch is not None:
                if newer:  # rewrite the view as it was (cheaper than RESTORE here: 2 jobs)
                    old = self._spark.read.format("delta").option("versionAsOf", version).load(self.path("view"))
                    with self._tagged(committed):
                        old.write.format("delta").mode("overwrite").save(self.path("view"))
                return
        if newer:
            raise StoreError(f"view under {self.root}: cannot find the commit of batch {committed} to restore")

    # ------------------------------------------------------------------ commit
    def commit_batch(self, batch_id: int, applied: list[AppliedTxn], view_delta, version_state: Mapping,
                     notifications: Sequence[Notification] = ()) -> bool:
        """Durably commits one batch; False (nothing written) if that batch id is committed already.

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
            try:
                with self._tagged(batch_id):
                    self._commit(batch_id, applied, net, version_state, notifications)
            except Exception:
                self._last_batch = None
                raise
            self._last_batch, self._log_len = batch_id, self._log_len + len(applied)
            self._last_seq = applied[-1].seq if applied else self._last_seq
            return True

    def _commit(self, batch_id, applied, net, version_state, notifications) -> None:
        clock = [time.perf_counter()]

        def lap(name):
            clock.append(time.perf_counter())
            self.timings[name] = clock[-1] - clock[-2]

        self.timings = {}
        self._merge_view(batch_id, net)
        lap("view_merge")
        fresh = self._fresh(notifications)
        self._write("journal", _JOURNAL, [*(_txn_row(batch_id, a) for a in applied),
                                          *(_notification_row(batch_id, n) for n in fresh.values()),
                                          _state_row(batch_id, version_state)])
        self._notified.update(fresh)
        lap("journal")
        self.timings["total"] = clock[-1] - clock[0]

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
        _state_row(batch_id, version_state)  # validates the shape
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
        return net

    def _fresh(self, notifications: Sequence[Notification]) -> dict[tuple[str, int], Notification]:
        """The notifications not journaled yet, once each."""
        fresh = {}
        for n in notifications:
            key = (n.source, int(n.dsv))
            if key not in self._notified and key not in fresh:
                fresh[key] = n
        return fresh

    def _merge_view(self, batch_id: int, net: Mapping[tuple, int]) -> None:
        """Applies the net delta with ONE MERGE: update counts, delete at 0, insert new rows."""
        if not net:
            return
        create_df(self._spark, *zip(*self._view_schema(_DCOUNT)), [r + (c,) for r, c in net.items()]
                  ).createOrReplaceTempView("fedlab_view_delta")
        cols = [quote(c) for c in self.columns]
        on = " AND ".join(f"t.{c} <=> s.{c}" for c in cols)
        d = quote(_DCOUNT)
        sql = (f"MERGE INTO {self._sql_name('view')} AS t USING fedlab_view_delta AS s ON {on} "
               f"WHEN MATCHED AND t.`count` + s.{d} = 0 THEN DELETE "
               f"WHEN MATCHED THEN UPDATE SET t.`count` = t.`count` + s.{d} "
               f"WHEN NOT MATCHED THEN INSERT ({', '.join(cols)}, `count`) "
               f"VALUES ({', '.join('s.' + c for c in cols)}, s.{d})")
        try:
            self._spark.sql(sql)
        except Exception as err:
            if "count_positive" in str(err):
                raise StoreError(f"batch {batch_id}: the view delta would leave a row with count <= 0 "
                                 "(it removes rows the view does not hold); nothing was applied") from err
            raise
        finally:
            self._spark.catalog.dropTempView("fedlab_view_delta")

    def compact(self, tables: Sequence[str] = ("journal",)) -> None:
        """OPTIMIZEs the journal (one small file per batch otherwise); between batches only.

        Only rewrites files, never content; the commits carry the last batch's tag.
        """
        with self._lock:
            if self._last_batch is None:
                self._recover()
            with self._tagged(self._last_batch):
                for table in tables:
                    self._spark.sql(f"OPTIMIZE {self._sql_name(table)}")

    # ------------------------------------------------------------------ reads
    def read_view(self) -> dict[tuple, int]:
        """The view as {row: multiplicity} (DATE values as ISO strings)."""
        rows = self._read("view").select(*[quote(c) for c in self.columns + ["count"]]).collect()
        return {tuple(from_spark(v) for v in r[:-1]): int(r[-1]) for r in rows}

    def read_change_log(self, after_seq: int | None = None, batch_id: int | None = None) -> list[AppliedTxn]:
        """Change-log entries in apply order (optionally only seq > after_seq, or one batch)."""
        df = self._journal(_TXN)
        if after_seq is not None:
            df = df.where(f"seq > {int(after_seq)}")
        if batch_id is not None:
            df = df.where(f"batch_id = {int(batch_id)}")
        return [_log_entry(r) for r in df.orderBy("seq").collect()]

    def read_version_state(self, batch_id: int | None = None) -> dict:
        """The version state after `batch_id` (default: the last batch)."""
        states = self._journal(_STATE)
        which = f"(SELECT max(batch_id) FROM {self._sql_name('journal')})" if batch_id is None else str(int(batch_id))
        row = states.where(f"batch_id = {which}").select("body").first()
        return json.loads(row[0]) if row is not None else {}

    def read_notifications(self, source: str | None = None) -> list[Notification]:
        """Stored notifications, ordered by (source, dsv)."""
        df = self._journal(_NOTIFICATION)
        if source is not None:
            df = df.where(df.source == source)
        return [notification_from_dict(json.loads(r[0]))
                for r in df.orderBy("source", "dsv").select("body").collect()]

    def _journal(self, kind: str):
        return self._read("journal").where(f"kind = '{kind}'")

    @property
    def last_batch_id(self) -> int | None:
        """The last committed batch id, or None until the store has recovered/initialized."""
        return self._last_batch

    @property
    def last_seq(self) -> int:
        """The seq of the last change-log entry known durable (-1: none)."""
        return self._last_seq


def _quiet_merge_stats_warning(spark) -> None:
    """Without file statistics every MERGE logs that it could not validate its row counts."""
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.sql.delta.commands.MergeIntoCommand", jvm.org.apache.logging.log4j.Level.ERROR)


class _SessionConf:
    """Sets one SQL conf of a session for the duration of a `with` block."""

    def __init__(self, spark, key: str, value: str):
        self.spark, self.key, self.value = spark, key, value

    def __enter__(self):
        self.spark.conf.set(self.key, self.value)

    def __exit__(self, *exc):
        self.spark.conf.unset(self.key)


# ---------------------------------------------------------------------- row helpers
def _batch_of(user_metadata: str | None) -> int | None:
    match = re.fullmatch(re.escape(_TAG) + r"(-?\d+)", user_metadata or "")
    return int(match.group(1)) if match else None


def _net(pairs: Iterable) -> dict[tuple, int]:
    """Sums (row, count change) pairs per row and drops rows whose sum is 0."""
    total: Counter = Counter()
    for row, change in pairs:
        total[tuple(row)] += int(change)
    return {r: c for r, c in total.items() if c}


def _counted_rows(rows_with_counts, width: int) -> dict[tuple, int]:
    items = rows_with_counts.items() if isinstance(rows_with_counts, Mapping) else rows_with_counts
    rows = _net(items)
    bad = [(r, c) for r, c in rows.items() if c < 0 or len(r) != width]
    if bad:
        raise StoreError(f"initial view rows need {width} values and a positive count, got {bad[:3]}")
    return rows


def _state_row(batch_id: int, state: Mapping) -> tuple:
    try:
        for scope, names in state.items():
            for name, fields in names.items():
                for fld, value in fields.items():
                    if isinstance(value, bool) or not isinstance(value, int):
                        raise TypeError(value)
    except (AttributeError, TypeError):
        raise StoreError("version_state must be {scope: {name: {field: int}}}, e.g. "
                         "{'relations': {'R1': {'processing': 3, 'refreshed': 3}}}") from None
    return (batch_id, _STATE, None, None, None, None, None, None, None, json.dumps(state, sort_keys=True))


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), default=_json_default)


def _json_default(value):
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"cannot store {value!r} as JSON")


def _txn_row(batch_id: int, a: AppliedTxn) -> tuple:
    delta = [[list(r), int(c)] for r, c in a.delta]
    return (batch_id, _TXN, a.seq, a.source, a.dsv, a.txn_id, float(a.commit_time), float(a.applied_time),
            _json(a.versions), _json(delta))


def _log_entry(r) -> AppliedTxn:
    versions = {k: int(v) for k, v in json.loads(r["versions"]).items()}
    delta = [(tuple(row), int(c)) for row, c in json.loads(r["body"])]
    return AppliedTxn(int(r["seq"]), r["source"], int(r["dsv"]), r["txn_id"], r["commit_time"],
                      r["applied_time"], versions, delta, batch_id=int(r["batch_id"]))


def _notification_row(batch_id: int, n: Notification) -> tuple:
    return (batch_id, _NOTIFICATION, None, n.source, int(n.dsv), n.txn_id, float(n.commit_time), None, None,
            _json(notification_to_dict(n)))
