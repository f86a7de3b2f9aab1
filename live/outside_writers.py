"""Applications writing a PostgreSQL source from outside fedlab: PostgreSQL's own benchmark
client, pgbench, with the scripts in loadgen/pgbench.

Beside the load fedlab's driver commits through the source node, `pgbench` runs on the source's
database over its own connections, at a fixed rate (`--rate`, its schedule: a slow server makes
it fall behind, not the offered rate drop): new urgent orders of German customers with two line
items (weight 5), one line item's quantity raised (3), and one of those new orders deleted with
its lines (2). They change the TPC-H relations customer, orders and lineitem of one source (in
the default placement, "sales") and keep its foreign keys, on which the warehouse relies; the
capture triggers (source_node.postgres_store) see them as any other writer's, and `fedlab check`
judges them with the rest.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import fedlab.loadgen
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError

SCRIPTS = Path(fedlab.loadgen.__file__).with_name("pgbench")
MIX = (("new_order.sql", 5), ("bump.sql", 3), ("remove.sql", 2))
RELATIONS = ("customer", "orders", "lineitem")   # what the scripts read and write
CLIENTS = 8


def written_source(catalog: Catalog) -> str:
    """The source the scripts write: the one holding customer, orders and lineitem; ModelError
    when no source holds all three (the scripts join them in one database)."""
    sources = {catalog.relation(r).source for r in RELATIONS if catalog.has_relation(r)}
    if len(sources) != 1 or not all(catalog.has_relation(r) for r in RELATIONS):
        raise ModelError("--outside-writers: the pgbench scripts need customer, orders and lineitem at one source "
                         "(TPC-H's default placement)")
    return sources.pop()


def add_outside_writers_argument(parser) -> None:
    """--outside-writers, for `fedlab demo` and `fedlab bench`."""
    parser.add_argument("--outside-writers", type=float, default=0.0, metavar="TXN_PER_S",
                        help="with --source-engine postgres: pgbench also writes the sales source at this many "
                             f"transactions per second during the load, over {CLIENTS} connections of its own "
                             "(live/outside_writers.py)")


def source_written(rate: float, engine: str, catalog: Catalog) -> str | None:
    """The source pgbench writes at `rate` (--outside-writers; None for 0, none asked for);
    ModelError for a combination that cannot run, before anything starts."""
    if not rate:
        return None
    if engine != "postgres":
        raise ModelError("--outside-writers: pgbench writes PostgreSQL sources; add --source-engine postgres")
    if not rate > 0:
        raise ModelError(f"--outside-writers: a rate in transactions per second above 0, got {rate:g}")
    return written_source(catalog)


@dataclass
class OutsideWriters:
    """pgbench running against one database until `seconds` are over."""

    process: subprocess.Popen
    rate: float

    @classmethod
    def start(cls, server_bin: Path, dsn: str, rate: float, seconds: float, scale: float) -> "OutsideWriters":
        """pgbench at `rate` transactions per second for `seconds`, over CLIENTS connections to
        `dsn`; `scale`: TPC-H's scale factor, which bounds the keys the scripts pick at random;
        `server_bin`: the server's programs, where its pgbench is looked for first. (`fedlab demo`
        checks the rate before anything starts.)"""
        pgbench = pgbench_program(server_bin)
        if pgbench is None:
            raise ModelError(f"--outside-writers: pgbench is not installed (not in {server_bin}, not on PATH)")
        command = pgbench_command(pgbench, dsn, CLIENTS, 2, seconds, scale, rate)
        return cls(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), rate)

    def finish(self, timeout: float = 120.0) -> dict:
        """Waits for pgbench to end; what it committed, failed and how fast, as it reports it."""
        output, _ = self.process.communicate(timeout=timeout)
        return report(output, self.rate, self.process.returncode)


def pgbench_program(server_bin: Path) -> str | None:
    """The pgbench to run: the server's own, in `server_bin`, else the one on PATH; None: neither."""
    return str(server_bin / "pgbench") if (server_bin / "pgbench").is_file() else shutil.which("pgbench")


def pgbench_command(pgbench: str, dsn: str, clients: int, jobs: int, seconds: float, scale: float,
                    rate: float | None = None) -> list[str]:
    """pgbench running the scripts of MIX, weighted, over `clients` connections to `dsn` (on `jobs`
    threads) for `seconds`, at `rate` transactions per second (its schedule; None: as fast as they
    commit); `scale`: TPC-H's scale factor, which bounds the keys the scripts pick at random."""
    keys = [f"customers={max(1, round(150_000 * scale))}", f"orders={max(1, round(6_000_000 * scale))}"]
    return [pgbench, "--no-vacuum", f"--client={clients}", f"--jobs={jobs}", *([f"--rate={rate:g}"] if rate else []),
            f"--time={max(1, round(seconds))}", *(f"--define={k}" for k in keys),
            *(f"--file={SCRIPTS / name}@{weight}" for name, weight in MIX), dsn]


def report(output: str, rate: float | None, returncode: int) -> dict:
    """pgbench's figures from its output (`rate`: the one offered, None for none); its last error
    line when it did not end well.

    >>> report("number of transactions actually processed: 2500\\nnumber of failed transactions: 0 (0.000%)\\n"
    ...        "latency average = 3.1 ms\\ntps = 249.5 (without initial connection time)", 250, 0)
    {'rate': 250, 'committed': 2500, 'failed': 0, 'tps': 249.5, 'latency_ms': 3.1}
    """
    def number(pattern: str):
        found = re.search(pattern, output)
        return float(found.group(1)) if found else None

    committed, failed = number(r"actually processed: (\d+)"), number(r"number of failed transactions: (\d+)")
    figures = {"rate": rate, "committed": int(committed or 0), "failed": int(failed or 0),
               "tps": number(r"tps = ([\d.]+)"), "latency_ms": number(r"latency average = ([\d.]+) ms")}
    if returncode != 0 or committed is None:
        errors = [line for line in output.splitlines() if "error" in line.lower()]
        figures["error"] = (errors or output.splitlines() or [f"pgbench exited with {returncode}"])[-1][:300]
    return figures


def outside_writers_line(figures: dict) -> str:
    """pgbench's figures (`report`) in one line, for the demo's and the bench's summaries."""
    line = (f"outside writers (pgbench, {figures['rate']:g} txn/s offered): {figures['committed']} committed "
            f"({figures['tps'] or 0:.1f}/s, latency {figures['latency_ms']} ms), {figures['failed']} failed")
    return line + (f"; pgbench: {figures['error']}" if "error" in figures else "")
