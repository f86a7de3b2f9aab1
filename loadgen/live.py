"""What every live command (`fedlab run`, `fedlab demo`, `fedlab bench`) does before and around
a Federation: the process environment, the cached TPC-H data, the warehouse's Spark session, the
sources' fault rates.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_DATA_DIR = ".cache/tpch"


def prepare_environment() -> None:
    """Spark on the loopback address (it warns otherwise) and Ray without token auth (which would
    write ~/.ray); set before either starts."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def tpch_data(scale: float, data_dir: str | None = None) -> dict[str, list[tuple]]:
    """TPC-H rows at `scale`, generated once into <data_dir>/sf<scale> and reused."""
    from loadgen.tpch import generate

    return generate(scale, str(Path(data_dir or DEFAULT_DATA_DIR).resolve() / f"sf{scale}"))


def warehouse_spark(run_dir: str | Path):
    """The warehouse's Spark session (Delta enabled), its warehouse folder under `run_dir`."""
    from warehouse.spark_session import spark_session

    spark = spark_session(warehouse_dir=str(Path(run_dir) / "spark-warehouse"))
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def set_faults(fed, **rates: float) -> None:
    """The same message fault rates at every source actor of `fed` (source_node.faults names)."""
    import ray

    ray.get([a.set_faults.remote(**rates) for a in fed.actors.values()])
