"""Shared fixtures: one Spark session (with Delta), one local Ray instance, one PostgreSQL server
(tests/postgres_support.py) and one object store (tests/object_store_support.py) for the whole run.

All start lazily, only when a test asks for them, and stop at the end of the session. A test is
marked by what it needs, from the fixtures it uses (`NEEDS`), so that `make quick` can leave out
every test that needs Spark, Ray, PostgreSQL, the object store or helm (`-m "not spark and not
ray ..."`).
"""

from __future__ import annotations

import os

import prerequisite_audit
import pytest
from background_bench import DECLARED, make_folder, start_all, stop_all
from k8s_support import load_fedlab_helm
from object_store_support import object_store  # noqa: F401  (the session's object store, started on first use)
from postgres_support import postgres_dsn  # noqa: F401  (the session's PostgreSQL server, started on first use)
from prerequisites import require

from fedlab.preflight import HELM, JAVA

# fixture -> the markers of what a test that uses it needs (`bench`: tests/test_bench*.py's
# `fedlab bench` run, in a subprocess with Spark and Ray)
NEEDS = {"spark": ("spark",), "ray_runtime": ("ray",), "postgres_dsn": ("postgres",), "helm": ("helm",),
         "object_store": ("objectstore",), "bench": ("spark", "ray", "slow")}

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from fedlab.warehouse.spark_session import spark_session

    require(JAVA)
    # with the object-store packages, for tests/test_object_store.py: one session serves every test
    session = spark_session(warehouse_dir=str(tmp_path_factory.mktemp("spark-warehouse")), object_store=True)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def ray_runtime(tmp_path_factory):
    from fedlab.source_node.ray_runtime import start_ray, stop_ray

    start_ray(temp_dir=str(tmp_path_factory.mktemp("ray")))
    yield
    stop_ray()


@pytest.fixture(scope="session")
def helm():
    """helm/fedlab_helm.py, with the official helm binary it finds or fetches."""
    require(HELM)
    return load_fedlab_helm()


HEAVY = ("spark", "ray", "postgres", "helm", "objectstore", "slow")   # tests that keep both cores busy while they run
SHARED = "shared"   # their pytest-xdist group: one worker runs them all, on one Spark, Ray, PostgreSQL and object store


def pytest_configure(config):
    config.pluginmanager.register(prerequisite_audit)
    if not hasattr(config, "workerinput"):   # the main process, not a pytest-xdist worker
        make_folder()


@pytest.hookimpl(tryfirst=True)   # before -m deselects by these markers and pytest-xdist reads the group
def pytest_collection_modifyitems(items):
    for item in items:
        for fixture, markers in NEEDS.items():
            if fixture in getattr(item, "fixturenames", ()):
                for marker in markers:
                    item.add_marker(marker)
        if any(item.get_closest_marker(m) for m in HEAVY):
            item.add_marker(pytest.mark.xdist_group(SHARED))


@pytest.hookimpl(tryfirst=True)   # before a pytest-xdist worker reports its collection, in this order
def pytest_collection_finish(session):
    """The selected tests' background benches start now, so that their minutes pass beside the
    rest of the suite (tests/background_bench.py), and the tests are put in the order they run:
    those that need none of Spark, Ray, PostgreSQL or helm and are not slow first, then the others,
    then the benches' own tests. Under `pytest -n 2 --dist loadgroup` (make test) the heavy ones
    are one group, the largest, which one worker takes first and runs in this order while the other
    worker runs the light ones; pytest-xdist's workers all collect, and gw0 starts the benches."""
    selected = {item.module.__name__ for item in session.items if hasattr(item, "module")}
    benched = selected & set(DECLARED)
    if getattr(session.config, "workerinput", {}).get("workerid", "gw0") == "gw0":
        start_all(benched)

    def place(item):
        waits = hasattr(item, "module") and item.module.__name__ in benched
        return waits, any(item.get_closest_marker(m) for m in HEAVY)

    session.items.sort(key=place)


def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        stop_all()
