"""Which database engine holds a source, and opening a source's file with the engine that made it.

Three engines (`--source-engine`): "sqlite", the default (source_node.sqlite_store: an OLTP
engine, as a source is; docs/architecture.md 5), "duckdb" (source_node.duckdb_store), kept as a tested
choice, and "postgres" (source_node.postgres_store): a PostgreSQL database that applications
write with plain SQL, named by a connection string instead of a file. A source's file is named
after its engine (`<source>.sqlite`, `<source>.duckdb`), and an existing file is recognised by
its header, not its name: `fedlab check` opens whichever engine made a file, and a source told to
use one engine refuses a file the other made, with one line.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError

ENGINES = ("sqlite", "duckdb", "postgres")
DEFAULT_ENGINE = "sqlite"
_NAMES = {"sqlite": "SQLite", "duckdb": "DuckDB", "postgres": "PostgreSQL"}
FILE_ENGINES = ("sqlite", "duckdb")   # the engines whose source is a file
CAPTURES = ("triggers", "logical")    # how a PostgreSQL source sees other applications' commits
DEFAULT_CAPTURE = "triggers"


def file_name(source: str, engine: str = DEFAULT_ENGINE) -> str:
    """The name of `source`'s database file under `engine`: `<source>.sqlite` or `<source>.duckdb`."""
    _validate_engine(engine)
    if engine not in FILE_ENGINES:
        raise ModelError(f"a {_NAMES[engine]} source is a database named by a connection string, not a file")
    return f"{source}.{engine}"


def engine_of(path: str | os.PathLike) -> str | None:
    """The engine that made the database file at `path`, from its header; None when there is no
    file yet (or an empty one). ModelError for a file that is neither engine's. A PostgreSQL
    connection string is "postgres"."""
    if is_dsn(path):
        return "postgres"
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except FileNotFoundError:
        return None
    if not head:
        return None
    if head.startswith(b"SQLite format 3\x00"):
        return "sqlite"
    if head[8:12] == b"DUCK":
        return "duckdb"
    raise ModelError(f"{path} is neither a SQLite nor a DuckDB database")


def is_dsn(path) -> bool:
    """Whether a source's location is a PostgreSQL connection string rather than a file."""
    text = str(path)
    return text.startswith(("postgresql://", "postgres://")) or "dbname=" in text


def open_store(catalog: Catalog, source: str, path: str | os.PathLike, engine: str | None = None,
               initial: dict[str, list[tuple]] | None = None, log_retention: int | None = None,
               probes: Iterable[tuple[str, Sequence[str]]] = (), prune_applied: bool = False,
               log_keep_seconds: float | None = None, capture: str | None = None,
               max_retained_wal: int | None = None):
    """The store of `source` in the file at `path`, created (with `initial`) if there is none.

    `engine` None: the engine that made the file, which must exist. `probes` (SQLite only): the
    (relation, columns) pairs to index at once (source_node.probes). A PostgreSQL `path` is a
    connection string (its database is set up the first time: source_node.postgres_store);
    `prune_applied` (PostgreSQL only) empties its change tables as the warehouse applies them;
    `log_keep_seconds` keeps that many seconds of its log (source_node.subscriber_outbox).
    `capture` (PostgreSQL only): "triggers" (source_node.postgres_store) or "logical", from the
    WAL (source_node.logical_capture), whose slot keeps at most `max_retained_wal` bytes; None:
    the capture the database was installed with, triggers for a new one.
    """
    found = None if str(path) == ":memory:" else engine_of(path)
    if engine is None:
        if found is None:
            raise ModelError(f"no source database at {path}")
        engine = found
    _validate_engine(engine)
    if found is not None and found != engine:
        raise ModelError(f"{path} is a {_NAMES[found]} database, not {_NAMES[engine]} "
                         f"(it was made with --source-engine {found})")
    if capture is not None and capture not in CAPTURES:
        raise ModelError(f"unknown capture {capture!r} (one of {', '.join(CAPTURES)})")
    if engine != "postgres" and (capture is not None or max_retained_wal is not None):
        raise ModelError(f"capture {capture} and a retained-WAL bound are for PostgreSQL sources; "
                         f"{path} is a {_NAMES[engine]} file")
    if prune_applied and engine != "postgres":
        raise ModelError(f"pruning applied changes is for PostgreSQL sources; {path} is a {_NAMES[engine]} file")
    # Imported here: a process that never opens a DuckDB store never loads DuckDB (0.2 s).
    if engine == "sqlite":
        from fedlab.source_node.sqlite_store import SQLiteStore

        return SQLiteStore(catalog, source, path, initial, log_retention, probes, log_keep_seconds)
    if engine == "postgres" and capture is None:
        from fedlab.source_node.postgres_store import installed_capture

        capture = installed_capture(str(path)) or DEFAULT_CAPTURE
    if engine == "postgres" and capture == "logical":
        from fedlab.source_node.logical_capture import LogicalPostgresStore

        return LogicalPostgresStore(catalog, source, str(path), initial, log_retention, prune_applied,
                                    log_keep_seconds, max_retained_wal=max_retained_wal)
    if engine == "postgres":
        if max_retained_wal is not None:
            raise ModelError("a retained-WAL bound is for capture logical; capture triggers keeps no slot")
        from fedlab.source_node.postgres_store import PostgresStore

        return PostgresStore(catalog, source, str(path), initial, log_retention, prune_applied, log_keep_seconds)
    from fedlab.source_node.duckdb_store import DuckDBStore

    return DuckDBStore(catalog, source, path, initial, log_retention, log_keep_seconds)


def _validate_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise ModelError(f"unknown source engine {engine!r} (one of {', '.join(ENGINES)})")

