"""The oracle's PostgreSQL backend: the versioned relations copied into temporary tables of one
session, the view's temporal SQL (checker.oracle, in the postgres dialect) run there.

Temporary tables are private to the session, so any number of checkers may share a server, and
nothing of a database the DSN names is read or written. Text columns use the "C" collation, byte
order like DuckDB's, whatever the database's locale: a selection such as `name < 'M'` must mean
the same in both backends.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import pyarrow as pa

from fedlab.checker.oracle import OracleError
from fedlab.checker.pg_server import PostgresServer, PostgresServerError

_TYPES = {pa.int64(): "bigint", pa.float64(): "double precision", pa.string(): 'text COLLATE "C"',
          pa.date32(): "date", pa.bool_(): "boolean"}


@contextlib.contextmanager
def postgres_backend(dsn: str | None) -> Iterator["PostgresBackend"]:
    """A backend on the server at `dsn`; without one, on a throwaway server removed afterwards."""
    if dsn:
        with PostgresBackend(dsn) as backend:
            yield backend
        return
    try:
        server = PostgresServer.start()
    except PostgresServerError as err:
        raise OracleError(f"postgres oracle: cannot start a private server: {err}") from None
    with server, PostgresBackend(server.dsn) as backend:
        yield backend


class PostgresBackend:
    dialect = "postgres"

    def __init__(self, dsn: str):
        import psycopg  # only this oracle needs the driver

        self._errors = psycopg.Error
        try:
            self._conn = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        except psycopg.Error as err:
            raise OracleError(f"postgres oracle: cannot connect with the given DSN: {_one_line(err)}") from None
        self._loaded: dict[str, pa.Table] = {}   # what each temporary table holds now

    def query(self, sql: str, tables: dict[str, pa.Table]) -> list[tuple]:
        try:
            for name, table in tables.items():
                # The relations stay the same for every call of one oracle; only the states change.
                if self._loaded.get(name) is not table:
                    self._load(name, table)
            return self._conn.execute(sql).fetchall()
        except self._errors as err:
            raise OracleError(f"postgres oracle: {_one_line(err)}") from None

    def _load(self, name: str, table: pa.Table) -> None:
        columns = ", ".join(f'"{f.name}" {_TYPES[f.type]}' for f in table.schema)
        with self._conn.transaction():
            # pg_temp: never a table of the database itself, whatever its name.
            self._conn.execute(f'DROP TABLE IF EXISTS pg_temp."{name}"')
            self._conn.execute(f'CREATE TEMPORARY TABLE "{name}" ({columns})')
            with self._conn.cursor().copy(f'COPY pg_temp."{name}" FROM STDIN') as copy:
                for row in zip(*(c.to_pylist() for c in table.columns)):
                    copy.write_row(row)
            self._conn.execute(f'ANALYZE pg_temp."{name}"')
        self._loaded[name] = table

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "PostgresBackend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _one_line(err: Exception) -> str:
    return "; ".join(line.strip() for line in str(err).splitlines() if line.strip()) or type(err).__name__
