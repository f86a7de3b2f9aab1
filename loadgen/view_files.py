"""View definitions kept as SQL files, one view a file named for it (TPC-H's in loadgen/views/,
CH-benCHmark's in loadgen/views/ch/): their names, and a view's SQL parsed against its catalog
before anything starts, so that a view the parser refuses stops a command in one line naming
the file.
"""

from __future__ import annotations

from pathlib import Path

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError


def names(folder: Path) -> list[str]:
    """The names of the view definitions in `folder` (file names without .sql)."""
    return sorted(p.stem for p in folder.glob("*.sql"))


def load(folder: Path, name: str, catalog: Catalog, benchmark: str, root: Path) -> str:
    """The SQL of view `name` of `folder`, parsed against `catalog`: ModelError naming the
    available views for an unknown name, or the file (from `root`, the repository's root) and the
    construct for a view the parser refuses."""
    from fedlab.fedmodel.aggregate_view import parse_query

    known = names(folder)
    if name not in known:
        raise ModelError(f"unknown {benchmark} view {name!r}; choose one of {', '.join(known)}")
    path = folder / f"{name}.sql"
    sql = path.read_text().strip()
    try:
        parse_query(sql, catalog)
    except ModelError as err:
        raise ModelError(f"{path.relative_to(root)}: {err}") from None
    return sql
