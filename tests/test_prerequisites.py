"""A missing prerequisite (PostgreSQL's server programs) skips a test on a developer's machine
and fails it under CI=true, so that CI never passes by skipping; tests are marked by what they
need from the fixtures they use (tests/conftest.py), which is what `make quick` leaves out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from postgres_support import missing


def test_a_missing_prerequisite_skips_with_the_reason_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="need PostgreSQL"):
        missing("these tests need PostgreSQL")


def test_a_missing_prerequisite_fails_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="need PostgreSQL"):
        missing("these tests need PostgreSQL")


def test_a_test_that_uses_the_postgres_server_is_marked_and_make_check_leaves_it_out():
    def collected(marks: str) -> list[str]:
        out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                              "-m", marks, "tests/test_check_postgres.py"], capture_output=True, text=True,
                             cwd=Path(__file__).parent.parent).stdout
        return [line for line in out.splitlines() if "::" in line]

    uses_server = [t for t in collected("postgres") if "[postgres]" in t]
    assert uses_server and not any("[postgres]" in t for t in collected("not postgres"))
