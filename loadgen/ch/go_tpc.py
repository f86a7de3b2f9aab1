"""A PostgreSQL database go-tpc prepared for CH-benCHmark, and the rows it generated there.

`prepare(dsn, warehouses)` runs `go-tpc tpcc prepare` (TPC-C's nine relations, loaded with
`warehouses` warehouses; 0 loads the 100,000 items alone) and then `go-tpc ch prepare`
(supplier, nation and region, loaded with TPC-H's dbgen data at scale 1: 10,000 suppliers, 25
nations, 5 regions; and a view, revenue1, that query 15 reads) into the empty database `dsn`
names; go-tpc is fedlab.preflight's, installed by `make go-tpc`.

`rows_of(dsn)` reads what go-tpc generated for the sources that are not go-tpc's (supplier,
nation and region by default: loadgen/ch/catalog.py places them at `suppliers` and `geography`)
in catalog column order and types, each column read as catalog.READ_AS says, so that they can be
given to those sources as their initial rows.
"""

from __future__ import annotations

import os
import subprocess

from fedlab.loadgen.ch.catalog import GENERATED as GENERATED_COLUMNS
from fedlab.loadgen.ch.catalog import READ_AS, ch_catalog
from fedlab.preflight import GO_TPC, go_tpc_path, go_tpc_problem

GENERATED = ("supplier", "nation", "region")


def prepare(dsn: str, warehouses: int, foreign_keys: bool = False) -> None:
    """Prepares CH-benCHmark in the empty database `dsn` (a libpq connection string) with go-tpc;
    `foreign_keys`: with go-tpc's foreign keys (`--use-fk`). RuntimeError, with go-tpc's reason,
    when go-tpc fails or is not installed."""
    go_tpc = go_tpc_path()
    if go_tpc is None:
        raise RuntimeError(GO_TPC.line(go_tpc_problem()))
    tpcc = ["tpcc", "prepare", "--warehouses", str(warehouses)]
    if warehouses == 0:
        tpcc += ["--parts", "0"]   # go-tpc refuses fewer warehouses than partitions, 1 by default
    if foreign_keys:
        tpcc.append("--use-fk")
    options, password = _connection(dsn)
    # lib/pq reads a password left out of the URL from PGPASSWORD: not on go-tpc's command line, which
    # every user of the machine can read.
    env = {**os.environ, "PGPASSWORD": password} if password else None
    for command in (tpcc, ["ch", "prepare"]):
        done = subprocess.run([go_tpc, *command, *options], capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"go-tpc {' '.join(command[:2])} failed (exit {done.returncode}): {_why(done)}")
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as con:   # the join columns (loadgen/ch/catalog.py)
        for table, column, expression in GENERATED_COLUMNS:
            con.execute(f"ALTER TABLE {table} ADD COLUMN {column} integer GENERATED ALWAYS AS ({expression}) STORED")


def _why(done: subprocess.CompletedProcess) -> str:
    """go-tpc's reason for failing: its panic's line (its stderr's last lines are the stack)."""
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return next((line for line in said if line.startswith("panic:")), said[-1] if said else "no message")


def _connection(dsn: str) -> tuple[list[str], str]:
    """go-tpc's options for the server and database of `dsn`, and the password. Its PostgreSQL driver (lib/pq) takes
    a URL built from --targets host:port; a unix socket's directory cannot be a URL's host, and one
    given as a parameter loses to the URL's host, so for a socket the host is left empty (which
    -H refuses, --targets does not: go-tpc hides that flag but reads it first)."""
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(dsn)
    host, port = str(given.get("host", "localhost")), str(given.get("port", 5432))
    params = "sslmode=disable"
    if host.startswith("/"):
        host, params = "", f"host={host}&{params}"
    return (["--driver", "postgres", "--targets", f"{host}:{port}", "-U", str(given.get("user", "postgres")),
             "-D", str(given["dbname"]), "--conn-params", params], str(given.get("password", "")))


def rows_of(dsn: str, relations: tuple[str, ...] = GENERATED) -> dict[str, list[tuple]]:
    """The rows of `relations` in the database `dsn`, each a tuple in catalog column order and
    types (catalog.READ_AS), ordered by key. DateStyle ISO: a timestamp's text is its ISO form."""
    import psycopg

    catalog = ch_catalog()
    out = {}
    with psycopg.connect(dsn, options="-c DateStyle=ISO") as con:
        for name in relations:
            rel = catalog.relation(name)
            columns = ", ".join(f"{c}::{READ_AS[t]}" for c, t in zip(rel.columns, rel.types))
            out[name] = [tuple(row) for row in con.execute(
                f"SELECT {columns} FROM {name} ORDER BY {', '.join(rel.key)}")]
    return out
