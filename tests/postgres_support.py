"""The PostgreSQL server the tests share: a throwaway one (checker.pg_server) on a private
socket, started on first use and removed at the end of the session.

PostgreSQL is a test requirement, not an optional extra: when its programs are missing, a test
that asks for the server is skipped or fails as tests/prerequisites.py says.
"""

from __future__ import annotations

import pytest
from prerequisites import missing

from fedlab.checker.pg_server import PostgresServer, PostgresServerError


@pytest.fixture(scope="session")
def postgres_dsn():
    """The DSN of a running PostgreSQL server, for `fedlab check --oracle postgres --pg-dsn`."""
    try:
        server = PostgresServer.start()
    except PostgresServerError as err:
        missing(f"these tests need a PostgreSQL server: {err}")
    yield server.dsn
    server.stop()


def fresh_database(dsn: str, name: str) -> str:
    """Creates database `name` on the server at `dsn` (dropping one left from an earlier run) and
    returns its DSN."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as con:
        drop_slots(con, name)
        con.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        con.execute(f'CREATE DATABASE "{name}"')
    return dsn.replace("dbname=postgres", f"dbname={name}")


def drop_slots(con, database: str) -> None:
    """Drops the replication slots of `database` (a logical capture's): a database with one cannot
    be dropped, and a slot left behind keeps the server's WAL."""
    con.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s",
                [database])
