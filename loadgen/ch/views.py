"""CH-benCHmark's 22 queries as fedlab views: those fedlab maintains in loadgen/views/ch/qN.sql,
each with a header saying what was changed from go-tpc's text. The reference text of every query
is go-tpc's own (`original`), read from the module source `go install` fetched for `make go-tpc`
(not kept here: it is go-tpc's code). docs/ch-benchmark.md says, query by query, what fedlab's
parser answers to the original and why the others have no view.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

from fedlab.loadgen import view_files
from fedlab.loadgen.ch.catalog import ch_catalog
from fedlab.preflight import GO_TPC_VERSION

VIEWS_DIR = Path(__file__).resolve().parent.parent / "views" / "ch"
QUERIES = tuple(f"q{n}" for n in range(1, 23))


def view_names() -> list[str]:
    """The queries that have a view in loadgen/views/ch/."""
    return view_files.names(VIEWS_DIR)


def load_view(name: str) -> str:
    """The SQL of the named view, parsed against the CH-benCHmark catalog (loadgen.view_files.load)."""
    return view_files.load(VIEWS_DIR, name, ch_catalog(), "CH-benCHmark", VIEWS_DIR.parents[2])


def original(name: str) -> str:
    """go-tpc's text of query `name` (q1 ... q22), as go-tpc runs it."""
    return _originals()[name]


@cache
def _originals() -> dict[str, str]:
    """The queries of go-tpc's ch/query.go (qN = `...`), from Go's module cache; RuntimeError
    when the module is not there (`make go-tpc` fetches it)."""
    try:
        cache_dir = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise RuntimeError(f"go-tpc's queries are read from Go's module cache: {err}") from None
    source = Path(cache_dir.strip()) / f"github.com/pingcap/go-tpc@{GO_TPC_VERSION}" / "ch" / "query.go"
    if not source.is_file():
        raise RuntimeError(f"no {source}: `make go-tpc` fetches go-tpc's module")
    return {f"q{n}": text for n, text in re.findall(r"\bq(\d+) = `(.*?)`", source.read_text(), re.S)}
