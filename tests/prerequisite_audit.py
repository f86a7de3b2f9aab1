"""Every test that starts Spark, Ray, PostgreSQL, helm or the object store carries the marker that
says so (tests/conftest.py's NEEDS gives it to every test using the fixtures; a test that starts
them otherwise, `fedlab run` in a subprocess say, is marked by hand).

An unmarked one would run in `make quick`, which promises none of them, and would fail instead
of being skipped where they are missing. So each program a test starts is watched, not guessed
from its source: an audit hook (tests/audit/sitecustomize.py) sees every program this process
and every Python process below it starts, and names the marker the program needs. At each test's
teardown its uses are held against its markers; a missing one is an error naming both.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest

AUDIT = Path(__file__).resolve().parent / "audit"
LOG = pytest.StashKey[Path]()


def _hook_module():
    spec = importlib.util.spec_from_file_location("fedlab_test_audit", AUDIT / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pytest_configure(config):
    fd, log = tempfile.mkstemp(prefix="fedlab-prerequisite-audit-", suffix=".log")   # one per pytest-xdist worker
    os.close(fd)
    os.environ["FEDLAB_AUDIT_LOG"] = log
    config.stash[LOG] = Path(log)
    site = sys.modules.get("sitecustomize")
    if site is None or Path(getattr(site, "__file__", "")).parent != AUDIT:   # a pytest-xdist worker has it
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(AUDIT), os.environ.get("PYTHONPATH")]))
        _hook_module().install()


def pytest_unconfigure(config):
    config.stash[LOG].unlink(missing_ok=True)


@pytest.hookimpl(tryfirst=True)   # before its fixtures, session-scoped ones included, start anything
def pytest_runtest_setup(item):
    os.environ["FEDLAB_AUDIT_TEST"] = item.nodeid


@pytest.hookimpl(wrapper=True)   # ends with the test's call: the last test does not own the session's teardown
def pytest_runtest_call(item):
    try:
        return (yield)
    finally:
        os.environ.pop("FEDLAB_AUDIT_TEST", None)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item):
    os.environ.pop("FEDLAB_AUDIT_TEST", None)   # a setup that failed had no call
    used = {}
    for line in item.config.stash[LOG].read_text().splitlines():
        test, marker, program = line.split("\t")
        if test == item.nodeid and not item.get_closest_marker(marker):
            used.setdefault(marker, program)
    if used:
        pytest.fail("; ".join(f"{item.nodeid} started {program} but is not marked {marker} "
                              f"(use its fixture, or pytest.mark.{marker})" for marker, program in used.items()),
                    pytrace=False)
