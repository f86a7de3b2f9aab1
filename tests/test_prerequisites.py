"""Prerequisites: `make test` and `make demo` name each missing one with its Debian package before
they start (fedlab/preflight.py); a missing one skips a test on a developer's machine and fails it
under CI=true, so that CI never passes by skipping (tests/prerequisites.py); and tests are marked
by what they need (tests/conftest.py from their fixtures, tests/prerequisite_audit.py from what
they really start), which is what `make quick` leaves out."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from prerequisites import missing

from fedlab import preflight

REPO = Path(__file__).resolve().parent.parent


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


@pytest.fixture
def bare_machine(tmp_path, monkeypatch):
    """A PATH with java and nothing else, no PostgreSQL where Debian puts it, no promtool where Debian's
    package puts it, no helm, weed or go-tpc where make caches them."""
    java = Path(os.path.realpath(shutil.which("java")))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "java").symlink_to(java)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("FEDLAB_HELM", raising=False)
    monkeypatch.setenv("FEDLAB_HELM_CACHE", str(tmp_path / "helm"))
    monkeypatch.setenv("FEDLAB_OBJECTSTORE_DIR", str(tmp_path / "objectstore"))
    monkeypatch.setattr(preflight, "POSTGRES_SEARCHED", str(tmp_path / "postgresql" / "*" / "bin"))
    monkeypatch.setattr(preflight, "promtool_path", lambda: None)   # /usr/bin/promtool, where it is installed
    monkeypatch.setattr(preflight, "GO_TPC_DIR", tmp_path / "go-tpc")


def test_the_preflight_names_each_missing_test_server_with_its_package(bare_machine):
    warned, stop = preflight.lines("test", ci=False)
    packages = ("install postgresql-15;", "install npm", "install Go 1.26.6+ from go.dev", "install prometheus",
                "install it with `make go-tpc`")
    assert not stop and len(warned) == len(packages)
    for line, package in zip(warned, packages):
        assert line.startswith("preflight: warning: ") and package in line and line.endswith("are skipped")
    failed, stop = preflight.lines("test", ci=True)
    assert stop and [f.replace("preflight: ", "preflight: warning: ", 1) for f in failed] == \
        [w.removesuffix("; the tests that need it are skipped") for w in warned]
    assert preflight.lines("demo", ci=True) == ([], False)   # the demo needs none of them


def test_the_preflight_stops_make_without_java_in_one_line(tmp_path):
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, str(REPO / "fedlab" / "preflight.py"), "demo"], capture_output=True,
                         text=True, env=env)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.splitlines() == ["preflight: Java 17+ is not found (no java on PATH or in $JAVA_HOME/bin): "
                                       "install openjdk-17-jdk-headless; the warehouse's Spark needs it"]


def test_make_test_and_make_demo_begin_with_the_preflight():
    makefile = (REPO / "Makefile").read_text()

    def prerequisites(target):
        return re.search(rf"^{target}:(.*)$", makefile, re.M).group(1).split()

    assert prerequisites("test")[0] == "preflight-test"
    assert prerequisites("demo")[0] == "venv" and prerequisites("venv")[0] == "preflight-demo"
    assert "fedlab/preflight.py test" in makefile and "fedlab/preflight.py demo" in makefile


def test_make_installs_go_tpc_at_the_version_and_where_the_preflight_looks_for_it():
    makefile = (REPO / "Makefile").read_text()
    assert re.search(rf"^GO_TPC_VERSION\s*:= {re.escape(preflight.GO_TPC_VERSION)}$", makefile, re.M)
    assert re.search(r"^GO_TPC_DIR\s*:= \.cache/go-tpc/\$\(GO_TPC_VERSION\)$", makefile, re.M)
    assert preflight.GO_TPC_DIR == REPO / ".cache" / "go-tpc" / preflight.GO_TPC_VERSION
    assert "GOBIN=$(abspath $(GO_TPC_DIR)) go install github.com/pingcap/go-tpc/cmd/go-tpc@$(GO_TPC_VERSION)" in makefile
    assert "go-tpc" in re.search(r"^preflight-test:(.*)$", makefile, re.M).group(1).split()


AUDITED = """
    import subprocess
    import sys

    import pytest

    def run(program):
        subprocess.run([sys.executable, "-c", f"import subprocess; subprocess.run([{str(program)!r}])"])

    def test_unmarked(program):
        run(program)

    @pytest.mark.postgres
    def test_marked(program):
        run(program)

    def test_starts_nothing():
        subprocess.run([sys.executable, "-c", "pass"])
"""


def test_a_test_that_starts_a_prerequisite_without_its_marker_is_an_error(tmp_path):
    """The audit sees a program started two processes down (a Python subprocess starting initdb)."""
    initdb = tmp_path / "bin" / "initdb"
    initdb.parent.mkdir()
    initdb.write_text("#!/bin/sh\n")
    initdb.chmod(0o755)
    (tmp_path / "test_audited.py").write_text(textwrap.dedent(AUDITED))
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import pytest

        @pytest.fixture
        def program():
            return {str(initdb)!r}
    """))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent))
    env.pop("FEDLAB_AUDIT_TEST", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "prerequisite_audit", "-p", "no:cacheprovider",
                          "-o", "addopts=", "-o", "markers=postgres", "test_audited.py"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert "3 passed, 1 error" in out.stdout, out.stdout + out.stderr
    assert (f"test_audited.py::test_unmarked started {initdb} but is not marked postgres "
            "(use its fixture, or pytest.mark.postgres)") in out.stdout
