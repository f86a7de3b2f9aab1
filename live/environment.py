"""What every live command (`fedlab run`, `fedlab demo`, `fedlab bench`) does before and around
a Federation: the process environment, the warehouse's Spark session, the sources' fault rates.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

from fedlab.fedmodel.errors import ModelError


def prepare_environment() -> None:
    """Spark on the loopback address (it warns otherwise) and Ray without token auth (which would
    write ~/.ray); set before either starts."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def warehouse_spark(run_dir: str | Path, object_store: bool = False):
    """The warehouse's Spark session (Delta enabled; with `object_store`, for tables under s3a://
    too), its warehouse folder under `run_dir`; the JVM's output (Ivy's resolution report, Spark's
    start-up warnings) goes to run_dir/spark.log."""
    from fedlab.warehouse.spark_session import spark_session

    with stderr_to(Path(run_dir) / "spark.log"):
        spark = spark_session(warehouse_dir=str(Path(run_dir) / "spark-warehouse"), object_store=object_store)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def stderr_to(log_path: Path):
    """Within the block, this process's standard error goes to `log_path`, and so does, for
    good, that of every process started meanwhile (it inherits the file): a JVM's or Ray's
    start-up chatter stays out of the terminal, which keeps the progress and the summary."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    terminal = os.dup(2)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)
        os.close(terminal)


NO_FAULTS = {"drop": 0.0, "duplicate": 0.0, "delay_mean": 0.0}


def set_faults(fed, rates: dict[str, float]) -> None:
    """Message fault rates at the sources of `fed` (see faults_by_source)."""
    for source, source_rates in faults_by_source(rates, fed.actors).items():
        if source_rates:
            fed.control(source).set_faults(**source_rates)


def faults_by_source(rates: dict[str, float], sources) -> dict[str, dict[str, float]]:
    """Each source's rates (source_node.faults names): a name with a source before a colon
    (`sales:drop`) is that source's alone, any other every source's; later names win.

    >>> faults_by_source({"drop": 0.1, "b:answer_drop": 0.5}, ["a", "b"])
    {'a': {'drop': 0.1}, 'b': {'drop': 0.1, 'answer_drop': 0.5}}
    """
    out: dict[str, dict[str, float]] = {source: {} for source in sources}
    for name, value in rates.items():
        source, _, rate = name.rpartition(":")
        if source and source not in out:
            raise ModelError(f"faults: no source named {source!r} (sources: {', '.join(out)})")
        for target in [source] if source else out:
            out[target][rate] = value
    return out
