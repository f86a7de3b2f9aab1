"""One Delta commit of an Arrow table without a Spark job: the rows go into one Parquet file beside
the table's others, and one AddFile naming it is committed through delta-spark's own transaction
(`DeltaLog.startTransaction().commit`: the log store's put-if-absent, conflict detection and
the checkpoints, as every Delta write of Spark's ends; the session writes no checksum file,
warehouse.spark_session).

Why not `df.write.format("delta").mode("append")`: for the few hundred rows of a warehouse batch
that is a Spark job -- planning, a task serialized with the whole Hadoop configuration, a Parquet
writer set up -- and it cost 0.35-0.45 s of JVM CPU per batch, measured on 2 cores (a bare
`spark.range(100)` Parquet append alone costs 0.2 s). Written here, a batch costs the Parquet
encoding in Arrow (a millisecond) and the transaction (tens of milliseconds: fedlab bench
--profile).

What readers see is unchanged: a Delta table any Spark reader reads, its schema the one the
table was created with (by the DataFrame writer, warehouse.store.delta_store); the Parquet file
carries that schema because both are built from the same column list. The file is written
through the JVM's Hadoop file system, so a table on an object store (s3a://...) is written the
same way as a local one.

The classes used (DeltaLog, Action, DeltaOperations.Write, OptimisticTransaction.commit) are
delta-spark's Scala API, not its Python one: tests/test_delta_store.py pins their behaviour at
the version pyproject.toml pins.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import ContextManager, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from delta.exceptions import ConcurrentAppendException

# Tries of a removal that Delta finds in conflict with a batch appended meanwhile (`remove`).
REMOVE_ATTEMPTS = 10


class DeltaAppender:
    """Appends Arrow tables to the Delta table at `path`, one commit each.

    The JVM's classes are looked up once, here: py4j resolves `jvm.org.apache...` one name at a
    time, asking the JVM to load each prefix ("org", "org.apache", ...) as a class, and every miss
    searches every jar on the class path. Looked up per append, that was 40% of the JVM's CPU at
    100 txn/s (its Flight Recorder profile: py4j's getUnknownMember in ZipFile lookups).

    The first `Action.fromJson` of a JVM builds Jackson's deserializers for Delta's action classes:
    190 of the first append's 230 ms of JVM CPU on this 2-core machine (20 ms each after it), and
    620 ms in a profiled bench at 100 txn/s. It is paid here, by parsing one AddFile, so that it
    is paid when the store opens and not in the first batch, whose transactions would wait for it.
    """

    def __init__(self, spark, path: str):
        jvm = spark._jvm
        self._path = path
        self._session = spark._jsparkSession
        self._sessions = _scala_object(jvm.org.apache.spark.sql.classic, "SparkSession")
        self._log = delta_log(spark, path)
        self._hadoop_path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._hadoop_path(path).getFileSystem(spark._jsc.hadoopConfiguration())
        self._none = _scala_object(jvm.scala, "None")
        self._some = jvm.scala.Some
        self._write = _scala_object(jvm.org.apache.spark.sql.delta, "DeltaOperations$Write")
        self._manual_update = _scala_object(jvm.org.apache.spark.sql.delta, "DeltaOperations$ManualUpdate")
        self._action = _scala_object(jvm.org.apache.spark.sql.delta.actions, "Action")
        self._append_mode = jvm.org.apache.spark.sql.SaveMode.Append
        self._to_seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq
        self._singleton_list = jvm.java.util.Collections.singletonList
        self._array_list = jvm.java.util.ArrayList
        self._action.fromJson(_add_json("warm-up.parquet", 0))

    def append(self, table: pa.Table, user_metadata: str, indexed: Sequence[str] = ()) -> int:
        """Commits `table` as one new file of the table, the commit info's userMetadata set;
        returns the table version committed. The file's statistics name its row count and, for
        each of the `indexed` columns (top-level integer or short string columns), its least and
        greatest value and its nulls: what Delta's data skipping reads to leave a file out of a filtered scan.
        A failure before the commit leaves at most an unreferenced file, which no reader sees
        (and VACUUM removes)."""
        buffer = pa.BufferOutputStream()
        pq.write_table(table, buffer, compression="snappy")
        data = buffer.getvalue().to_pybytes()
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        out = self._fs.create(self._hadoop_path(f"{self._path}/{name}"), False)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        none = self._none
        add = _add_json(name, len(data), file_stats(table, indexed))
        actions = self._to_seq(self._singleton_list(self._action.fromJson(add))).toList()
        operation = self._write.apply(self._append_mode, none, none, self._some(user_metadata), none, none, none,
                                      none, none)
        # From the snapshot this object's last commit left: no listing of the log to find it (the
        # journal has one writer; another's commit in between would fail this one's put-if-absent
        # and Delta would check the two for conflicts, as for any stale snapshot).
        snapshot = self._some(self._log.unsafeVolatileSnapshot())
        self._activate()
        return self._log.startTransaction(none, snapshot).commit(actions, operation)

    def _activate(self) -> None:
        """Makes the session the calling thread's active one in the JVM. Delta reads a snapshot's
        state in the committing thread's active session when a prefetch of it failed
        (NonFateSharingFuture: DELTA_SPARK_SESSION_NOT_SET otherwise), and only PySpark's own
        entry points (createDataFrame, a session's start) set one: a warehouse whose committer
        made no DataFrame, as after a restore without Spark, failed its batches on the cluster
        until one did."""
        self._sessions.setActiveSession(self._session)

    def remove(self, removals: list[str], exclusive: ContextManager = contextlib.nullcontext()) -> int:
        """Commits the RemoveFile actions `removals` (JSON, `remove_json`), without a Spark job and
        without rewriting a file (a "Manual Update" in the table's history). Returns the table
        version committed.

        It touches no file an append adds, yet Delta finds it in conflict with a batch appended
        between its snapshot and its commit: the tables are Serializable (what delta-spark's
        commits record here), under which a transaction that removes files without naming what
        it read is taken to have read the whole table, and a blind append beside it to have
        changed what it read. Each conflict is tried again on a fresh snapshot, up to
        REMOVE_ATTEMPTS times: without that, 30 of the ~49 retention passes from the eleventh minute
        of an hour's bench at 200 txn/s failed, each skipping its VACUUM and log trim too; with it,
        2 still did. Then once more holding `exclusive` (the lock its writer's batch commits take),
        so that no batch lands between its snapshot and its commit: a batch waits one removal's
        commit rather than the retention a minute."""
        listed = self._array_list()
        for removal in removals:
            listed.add(self._action.fromJson(removal))
        actions = self._to_seq(listed).toList()
        for _ in range(REMOVE_ATTEMPTS):
            try:
                return self._commit_removal(actions)
            except ConcurrentAppendException:
                pass
        with exclusive:
            return self._commit_removal(actions)

    def _commit_removal(self, actions) -> int:
        none = self._none
        self._activate()
        snapshot = self._some(self._log.update(False, none, none))
        return self._log.startTransaction(none, snapshot).commit(actions, self._manual_update)


def _add_json(name: str, size: int, stats: dict | None = None) -> str:
    """The AddFile action of a new data file `name` of `size` bytes, as Delta's log writes it
    (with `stats`, its statistics as `file_stats` gives them)."""
    add = {"path": name, "partitionValues": {}, "size": size, "modificationTime": int(time.time() * 1000),
           "dataChange": True}
    if stats is not None:
        add["stats"] = json.dumps(stats)
    return json.dumps({"add": add})


def remove_json(path: str, size: int, when: float) -> str:
    """The RemoveFile action of the table's data file `path` (as its AddFile names it) of `size`
    bytes, removed at `when` (seconds since the epoch: VACUUM deletes it a retention after)."""
    return json.dumps({"remove": {"path": path, "deletionTimestamp": int(when * 1000), "dataChange": True,
                                  "extendedFileMetadata": True, "partitionValues": {}, "size": size}})


def file_stats(table: pa.Table, columns: Sequence[str]) -> dict:
    """A data file's statistics in Delta's format: {"numRecords", "minValues", "maxValues",
    "nullCount"} over `columns` (integers, or strings shorter than the 32 characters Delta keeps
    of a bound; a column whose values are all null has no bounds).

    >>> file_stats(pa.table({"b": [3, 3, 4], "s": [None, 7, None], "k": ["txn", "delta", "txn"]}), ["b", "s", "k"])
    {'numRecords': 3, 'minValues': {'b': 3, 's': 7, 'k': 'delta'}, 'maxValues': {'b': 4, 's': 7, 'k': 'txn'}, 'nullCount': {'b': 0, 's': 2, 'k': 0}}
    """
    low, high, nulls = {}, {}, {}
    for column in columns:
        values = table[column]
        bounds = pc.min_max(values)
        if bounds["min"].is_valid:
            low[column], high[column] = bounds["min"].as_py(), bounds["max"].as_py()
        nulls[column] = values.null_count
    return {"numRecords": table.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}


def table_files(spark, path: str):
    """The data files of the Delta table at `path` in its latest snapshot this process knows (its
    AddFile actions: path, size, modificationTime, stats, ...), as a pyspark DataFrame."""
    from pyspark.sql.classic.dataframe import DataFrame

    return DataFrame(delta_log(spark, path).unsafeVolatileSnapshot().allFiles().toDF(), spark)


def delta_log(spark, path: str):
    """delta-spark's DeltaLog of the table at `path` (Delta keeps one per table and process)."""
    return spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)


def _scala_object(package, name: str):
    """A Scala `object` (the MODULE$ of class name$) through py4j."""
    return getattr(getattr(package, name + "$"), "MODULE$")
