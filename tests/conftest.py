"""Shared fixtures: one Spark session (with Delta), one local Ray instance and one PostgreSQL
server (tests/postgres_support.py) for the whole run.

All start lazily, only when a test asks for them, and stop at the end of the session. A test is
marked by what it needs, from the fixtures it uses (`NEEDS`), so that `make check` can leave out
every test that needs Spark, Ray, PostgreSQL or helm (`-m "not spark and not ray ..."`).
"""

from __future__ import annotations

import os

import pytest
from background_bench import start_all
from postgres_support import postgres_dsn  # noqa: F401  (the session's PostgreSQL server, started on first use)

# fixture -> the markers of what a test that uses it needs (`bench`: tests/test_bench*.py's
# `fedlab bench` run, in a subprocess with Spark and Ray)
NEEDS = {"spark": ("spark",), "ray_runtime": ("ray",), "postgres_dsn": ("postgres",), "helm": ("helm",),
         "bench": ("spark", "ray", "slow")}

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


def pytest_collection_modifyitems(items):
    for item in items:
        for fixture, markers in NEEDS.items():
            if fixture in getattr(item, "fixturenames", ()):
                for marker in markers:
                    item.add_marker(marker)


HEAVY = ("spark", "ray", "postgres", "helm", "slow")   # tests that keep both cores busy while they run


def pytest_collection_finish(session):
    """The selected tests' background benches start now, so that their minutes pass beside the
    rest of the suite (tests/background_bench.py): the tests that need none of Spark, Ray,
    PostgreSQL or helm and are not slow run first, on one core beside the benches, then the
    others, then the benches' own tests."""
    selected = {item.module.__name__ for item in session.items if hasattr(item, "module")}
    session.config.background_benches = start_all(selected)
    benched = {bench.module for bench in session.config.background_benches}

    def place(item):
        waits = hasattr(item, "module") and item.module.__name__ in benched
        return waits, any(item.get_closest_marker(m) for m in HEAVY)

    session.items.sort(key=place)


def pytest_sessionfinish(session):
    for bench in getattr(session.config, "background_benches", ()):
        bench.stop()
