"""What `make demo` and `make test` need from the machine, checked before either starts.

    python3 fedlab/preflight.py demo|test

runs on the system's Python, before the venv exists, so it imports nothing outside the standard
library. Each missing prerequisite gets one line naming what is missing, why, and the Debian
package (or where else it comes from); then it exits 1 if any of them stops the command.

Two kinds of prerequisite:

- *required* ones stop the command anywhere: Python 3.11+ with its venv module, and Java 17+,
  without which neither Spark nor anything else here starts;
- the *test servers'* ones (PostgreSQL, helm, Go for the object store, promtool, go-tpc) stop `make test` only
  under CI=true. Elsewhere the line is a warning, and each test that needs the missing program
  is skipped saying why (tests/prerequisites.py): a developer without PostgreSQL can still run
  the rest, and CI can never pass by skipping.

The same finders serve the code that uses the programs (the PostgreSQL server of the checker and
the tests, helm's binary, the object store's build), so that the preflight and the failure it
warns of cannot disagree about what is installed.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

POSTGRES_SEARCHED = "/usr/lib/postgresql/*/bin"   # Debian's layout, one directory per major version
POSTGRES_PROGRAMS = ("initdb", "pg_ctl", "postgres")
CHECKOUT = Path(__file__).resolve().parent.parent   # helm/ beside fedlab/ in a checkout
# go-tpc, CH-benCHmark's driver (loadgen/ch/go_tpc.py): v1.0.12 is the only version with PostgreSQL
# support the Go module proxy serves; `make go-tpc` installs it here, a folder the Makefile owns.
GO_TPC_VERSION = "v1.0.12"
GO_TPC_DIR = CHECKOUT / ".cache" / "go-tpc" / GO_TPC_VERSION


@dataclass(frozen=True)
class Prerequisite:
    name: str
    install: str                                # the Debian package, or where else it comes from
    needed_for: str
    required: bool                              # stops the command even outside CI
    problem: Callable[[], str | None]           # what is wrong, or None when it is there

    def line(self, problem: str) -> str:
        return f"{self.name} {problem}: install {self.install}; {self.needed_for} needs it"


# ---------------------------------------------------------------------- finders
def python_problem() -> str | None:
    found = sys.version_info[:2]
    return None if found >= (3, 11) else f"is {found[0]}.{found[1]}, 3.11+ is needed"


def venv_problem() -> str | None:
    # Debian splits ensurepip out of python3: `python3 -m venv` then fails halfway.
    return None if importlib.util.find_spec("ensurepip") else "has no venv module (ensurepip is missing)"


def java_problem() -> str | None:
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get("JAVA_HOME") \
        else shutil.which("java")
    if java is None:
        return "is not found (no java on PATH or in $JAVA_HOME/bin)"
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    major = re.search(r'version "(\d+)', out)
    if major is None or int(major.group(1)) < 17:
        return f"is too old ({out.splitlines()[0] if out else java}), 17+ is needed"
    return None


def postgres_programs() -> Path | None:
    """The directory holding PostgreSQL's initdb, pg_ctl and postgres: on PATH, else the newest
    under Debian's /usr/lib/postgresql/N/bin."""
    on_path = shutil.which("pg_ctl")
    candidates = [Path(on_path).parent] if on_path else []
    candidates += sorted((Path(d) for d in glob.glob(POSTGRES_SEARCHED)), key=_major_version, reverse=True)
    return next((d for d in candidates if all(os.access(d / p, os.X_OK) for p in POSTGRES_PROGRAMS)), None)


def _major_version(bin_dir: Path) -> int:
    name = bin_dir.parent.name
    return int(name) if name.isdigit() else 0


def postgres_problem() -> str | None:
    if postgres_programs():
        return None
    return f"is not installed (no {', '.join(POSTGRES_PROGRAMS)} on PATH or in {POSTGRES_SEARCHED})"


def _helm_script(file: str):
    """helm/<file> of this checkout, loaded by path (helm/ is not a package)."""
    name = f"preflight_{Path(file).stem}"
    spec = importlib.util.spec_from_file_location(name, CHECKOUT / "helm" / file)
    module = sys.modules[name] = importlib.util.module_from_spec(spec)   # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def helm_problem() -> str | None:
    return _helm_script("fedlab_helm.py").helm_problem()


def go_problem() -> str | None:
    return _helm_script("object_store.py").build_problem()


def promtool_path() -> str | None:
    """Prometheus's promtool: on PATH, or where Debian's prometheus package puts it."""
    return shutil.which("promtool") or ("/usr/bin/promtool" if os.access("/usr/bin/promtool", os.X_OK) else None)


def promtool_problem() -> str | None:
    return None if promtool_path() else "is not found (not on PATH, no /usr/bin/promtool)"


def go_tpc_path() -> str | None:
    """go-tpc at GO_TPC_VERSION, where `make go-tpc` installs it. Not looked for on PATH: another
    version there may lack PostgreSQL, or create another schema."""
    found = GO_TPC_DIR / "go-tpc"
    return str(found) if os.access(found, os.X_OK) else None


def go_tpc_problem() -> str | None:
    return None if go_tpc_path() else f"is not installed (no {GO_TPC_DIR / 'go-tpc'})"


# ---------------------------------------------------------------------- the table
PYTHON = Prerequisite("Python", "python3 (3.11+: Debian bookworm's)", "everything", True, python_problem)
VENV = Prerequisite("Python", "python3-venv", "the .venv that make builds", True, venv_problem)
JAVA = Prerequisite("Java 17+", "openjdk-17-jdk-headless", "the warehouse's Spark", True, java_problem)
POSTGRES = Prerequisite("PostgreSQL", "postgresql-15", "the checker's second oracle", False, postgres_problem)
HELM = Prerequisite("helm", "npm (helm comes through it, from the npm registry)", "the chart's tests", False,
                    helm_problem)
GO = Prerequisite("Go", "Go 1.26.6+ from go.dev (Debian's golang-go is too old)",
                  "building the object store (SeaweedFS's weed)", False, go_problem)
PROMTOOL = Prerequisite("promtool", "prometheus (`make promtool`)",
                        "checking the metrics pages, the alert rules and the dashboard's queries", False, promtool_problem)
GO_TPC = Prerequisite(f"go-tpc {GO_TPC_VERSION}", "it with `make go-tpc` (Go's `go install`, from the Go module proxy)",
                      "checking the CH-benCHmark catalog and views against go-tpc's database", False, go_tpc_problem)

NEEDED = {"demo": (PYTHON, VENV, JAVA), "test": (PYTHON, VENV, JAVA, POSTGRES, HELM, GO, PROMTOOL, GO_TPC)}


def lines(command: str, ci: bool) -> tuple[list[str], bool]:
    """One line per missing prerequisite of `command`, and whether any of them stops it."""
    out, stop = [], False
    for prerequisite in NEEDED[command]:
        problem = prerequisite.problem()
        if problem is None:
            continue
        stops = prerequisite.required or ci
        stop |= stops
        out.append(("preflight: " if stops else "preflight: warning: ") + prerequisite.line(problem)
                   + ("" if stops else "; the tests that need it are skipped"))
    return out, stop


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in NEEDED:
        print(f"usage: preflight.py {'|'.join(NEEDED)}", file=sys.stderr)
        return 2
    out, stop = lines(argv[0], ci=os.environ.get("CI") == "true")
    for line in out:
        print(line, file=sys.stderr)
    return 1 if stop else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
