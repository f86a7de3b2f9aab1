"""A PostgreSQL database go-tpc prepared for CH-benCHmark, and the rows it generated there.

`prepare(dsn, warehouses)` runs `go-tpc tpcc prepare` (TPC-C's nine relations, loaded with
`warehouses` warehouses; 0 loads the 100,000 items alone) and then `go-tpc ch prepare`
(supplier, nation and region, loaded with TPC-H's dbgen data at scale 1: 10,000 suppliers, 25
nations, 5 regions; and a view, revenue1, that query 15 reads) into the empty database `dsn`
names; go-tpc is fedlab.preflight's, installed by `make go-tpc`.

`TpccRun.start(dsn, ...)` runs go-tpc's TPC-C transactions against the database in a process of
its own, and `finish()` gives go-tpc's own report of them (`summary`): the client no one here
wrote, whose figures (tpmC: New-Orders a minute) can be set beside other systems'. With a `duty`
below 1 the process is paced from outside (`Pacer`).

`rows_of(dsn)` reads what go-tpc generated for the sources that are not go-tpc's (supplier,
nation and region by default: loadgen/ch/catalog.py places them at `suppliers` and `geography`)
in catalog column order and types, each column read as catalog.READ_AS says, so that they can be
given to those sources as their initial rows.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from fedlab.loadgen.ch.catalog import JOIN_COLUMNS, READ_AS, ch_catalog
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
        for table, column, expression in JOIN_COLUMNS:
            con.execute(f"ALTER TABLE {table} ADD COLUMN {column} integer")
            con.execute(f"UPDATE {table} SET {column} = {expression}")
            con.execute(f"CREATE FUNCTION keep_{column}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                        f"NEW.{column} := (SELECT {expression} FROM (SELECT (NEW).*) AS r); RETURN NEW; END $$")
            con.execute(f"CREATE TRIGGER keep_{column} BEFORE INSERT OR UPDATE ON {table} "
                        f"FOR EACH ROW EXECUTE FUNCTION keep_{column}()")
            con.execute(f"VACUUM ANALYZE {table}")


PACE_PERIOD = 0.1   # seconds: a pace's run and stop add up to this


class Pacer:
    """Lets a process run `duty` of every PACE_PERIOD and stops it (SIGSTOP) for the rest, until
    it exits: a rate limit for go-tpc, which has none. TPC-C's keying and thinking times (its
    `--wait`) pace each client at the specification's rate, 12.86 New-Orders a minute per
    warehouse at most, far below what a machine sustains; unpaced, 8 clients commit as fast as
    the server lets them. All of go-tpc stops at once, so no client waits on a lock another one
    holds while stopped. go-tpc's own latencies then include the stops; its counts and tpmC
    (over wall time) are the paced rate."""

    def __init__(self, process: subprocess.Popen, duty: float):
        self.process, self.duty = process, duty
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="go-tpc-pacer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self.duty * PACE_PERIOD) and self._signal(signal.SIGSTOP):
            self._done.wait((1 - self.duty) * PACE_PERIOD)
            if not self._signal(signal.SIGCONT):
                return
        self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> bool:
        """False once the process has exited."""
        if self.process.poll() is not None:
            return False
        try:
            os.kill(self.process.pid, sig)
        except ProcessLookupError:   # exited, and reaped by finish(), since poll()
            return False
        return True

    def stop(self) -> None:
        """Ends the pacing with the process running."""
        self._done.set()
        self._thread.join()


@dataclass
class TpccRun:
    """`go-tpc tpcc run` against a prepared database, its output in a file."""
    process: subprocess.Popen
    output: Path
    pacer: Pacer | None = None

    @classmethod
    def start(cls, dsn: str, warehouses: int, clients: int, seconds: float, output: Path,
              duty: float = 1.0) -> "TpccRun":
        """go-tpc's five transactions at its default weights (New-Order 45%, Payment 43%, the rest
        4% each) over `clients` connections for `seconds`, without keying or thinking time (as fast
        as they commit), paced to run `duty` of the time (`Pacer`). `--ignore-error`: a
        transaction that fails (a server restarted under it) is counted as go-tpc's `_ERR` and the
        client goes on, as an application would."""
        go_tpc = go_tpc_path()
        if go_tpc is None:
            raise RuntimeError(GO_TPC.line(go_tpc_problem()))
        options, password = _connection(dsn)
        env = {**os.environ, "PGPASSWORD": password} if password else None
        command = [go_tpc, "tpcc", "run", "--warehouses", str(warehouses), "-T", str(clients),
                   "--time", f"{seconds:g}s", "--ignore-error", "--silence", "--interval", "600s", *options]
        with open(output, "w") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        return cls(process, output, Pacer(process, duty) if duty < 1 else None)

    @property
    def pid(self) -> int:
        return self.process.pid

    def finish(self, timeout: float) -> dict:
        """Waits for go-tpc (killing it after `timeout` seconds) and returns `summary` of its
        output, with its exit status."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        finally:
            if self.pacer is not None:
                self.pacer.stop()
        return {**summary(self.output.read_text()), "exit": self.process.returncode}


def summary(text: str) -> dict:
    """go-tpc's final report: tpmC (New-Orders a minute), tpmTotal, and per transaction type its
    count, per minute, average and 99th percentile latency in ms; failures under `errors`.

    >>> report = summary(
    ...     "[Summary] NEW_ORDER - Takes(s): 29.9, Count: 11971, TPM: 24020.8, Sum(ms): 92000.1, Avg(ms): 7.7, "
    ...     "50th(ms): 6.3, 90th(ms): 12.6, 95th(ms): 16.3, 99th(ms): 39.8, 99.9th(ms): 65.0, Max(ms): 96.5\\n"
    ...     "[Summary] NEW_ORDER_ERR - Takes(s): 29.9, Count: 3, TPM: 6.0, Sum(ms): 1.0, Avg(ms): 0.3, "
    ...     "50th(ms): 0.3, 90th(ms): 0.3, 95th(ms): 0.3, 99th(ms): 0.3, 99.9th(ms): 0.3, Max(ms): 0.3\\n"
    ...     "tpmC: 24020.8, tpmTotal: 53363.4, efficiency: 186798.8%\\n")
    >>> report["tpmC"], report["transactions"]["NEW_ORDER"], report["errors"]
    (24020.8, {'count': 11971, 'per_minute': 24020.8, 'avg_ms': 7.7, 'p99_ms': 39.8}, {'NEW_ORDER': 3})
    """
    found: dict = {"tpmC": None, "tpmTotal": None, "transactions": {}, "errors": {}}
    for line in text.splitlines():
        if match := re.match(r"\[Summary\] (\S+)\s+- (.*)", line):
            fields = dict(part.split(": ", 1) for part in match.group(2).split(", "))
            name = match.group(1)
            if name.endswith("_ERR"):
                found["errors"][name[:-4]] = int(fields["Count"])
            else:
                found["transactions"][name] = {"count": int(fields["Count"]), "per_minute": float(fields["TPM"]),
                                               "avg_ms": float(fields["Avg(ms)"]), "p99_ms": float(fields["99th(ms)"])}
        elif match := re.match(r"tpmC: ([\d.]+), tpmTotal: ([\d.]+)", line):
            found["tpmC"], found["tpmTotal"] = float(match.group(1)), float(match.group(2))
    return found


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
