"""Shared fixtures: one Spark session (with Delta), one local Ray instance and one PostgreSQL
server (tests/postgres_support.py) for the whole run.

All start lazily, only when a test asks for them, and stop at the end of the session.
"""

from __future__ import annotations

import os

import pytest

from postgres_support import postgres_dsn  # noqa: F401  (the session's PostgreSQL server, started on first use)

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from warehouse.spark_session import spark_session

    session = spark_session(warehouse_dir=str(tmp_path_factory.mktemp("spark-warehouse")))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def ray_runtime(tmp_path_factory):
    from source_node.ray_runtime import start_ray, stop_ray

    start_ray(temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield
    stop_ray()
