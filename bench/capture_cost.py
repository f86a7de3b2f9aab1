"""`fedlab bench-capture`: what change capture costs the writers of a PostgreSQL source (issue 70).

    fedlab bench-capture                                  # 1, 8 and 32 clients, 10 s a figure, 2 trials
    fedlab bench-capture --clients 1,8 --seconds 5 --repeat 1 --out runs/capture

The writers are pgbench, PostgreSQL's own client, with the outside writers' scripts and weights
(live.outside_writers: new urgent orders with two line items, a line item's quantity raised, a
new order deleted with its lines), unthrottled: each client commits as fast as it can, for
`--seconds`, at each `--clients` count. Their throughput and average latency, as pgbench reports
them, under three captures on one private server (checker.pg_server):
- `none`: the plain tables;
- `triggers`: source_node.postgres_store's statement triggers and commit stamp, in every writer's
  transaction;
- `logical`: source_node.logical_capture: nothing in the writers' path, the node decodes the WAL
  concurrently.
Each capture's store stays open through its figures, as a source node keeps it, and a thread
stands for a warehouse that keeps up: every 0.2 s it acknowledges and applies everything the
store has numbered (so the logical slot advances, and the outbox is released). After each run
the bench waits for the node to have every pgbench commit (numbered from the WAL, or read from
the change tables) and records `captured`, the transactions that changed something (a remove.sql
that found no order of its own changes nothing, and gets no DSV), `behind_at_exit`, those the
node did not have yet when pgbench ended, and `catch_up_s`, how long it took to get them: a node
starved of CPU by the writers lets them run faster for a while, and pays afterwards.

The rows: TPC-H SF 0.01's customer, orders and lineitem, of the source `written_source` names,
loaded once into a template database by the triggers store, whose capture then goes (DROP SCHEMA
fedlab CASCADE takes the triggers with their functions): the tables as the stores create them,
with the same rows, keys and statistics. Each (capture, trial) gets a fresh copy (CREATE DATABASE
... TEMPLATE), where the store installs its capture around the rows already there; the client
counts follow one another on it. The captures take turns trial by trial, in reverse order every
other trial, so that a load on the machine that comes and goes weighs on each alike. A copy is
dropped, with its logical slot, before the next capture runs: a walsender reads the whole
server's WAL, other databases' writers included.

Per figure also the CPU per committed transaction, from pgbench's start until the node caught
up: the machine's (/proc/stat: pgbench, the server and the node together), the server's (its
processes, backends that ended included) and the node's (this process: the store's threads).
The figures go to OUT/bench_capture.json, OUT/bench_capture.png (throughput by clients, a line
per capture) and a table: medians over the trials with their range, and each capture's
throughput relative to `none`'s (the issue's target: logical capture costs the writers at most
5%). A machine with fewer cores than the writers keep busy gives the node's decoding only what
they leave: on 2 cores at 8 clients it ends thousands of transactions behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import psycopg

from fedlab.bench.resources import machine_seconds
from fedlab.bench.trials import spread
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.subquery import Subquery, SubqueryRelation
from fedlab.live.outside_writers import MIX, pgbench_command, pgbench_program, report, written_source
from fedlab.source_node.engines import open_store

CAPTURES = ("none", "triggers", "logical")
SCALE = 0.01
TEMPLATE = "tpch"
KEEP_UP_EVERY = 0.2      # seconds between the stand-in warehouse's acknowledgements
STALLED = 10.0           # seconds a node catching up may take without numbering a transaction
TARGET = 0.95            # issue 70: logical capture keeps at least 95% of the writers' throughput


def add_arguments(parser) -> None:
    parser.add_argument("--clients", default="1,8,32", metavar="N,N,...",
                        help="pgbench's client counts, a figure each (default 1,8,32)")
    parser.add_argument("--captures", default=",".join(CAPTURES), metavar="CAPTURE,...",
                        help=f"the captures measured, of {', '.join(CAPTURES)} (default all three)")
    parser.add_argument("--seconds", type=int, default=10, help="pgbench's run per figure (default 10)")
    parser.add_argument("--repeat", type=int, default=2, metavar="N",
                        help="trials, the median reported with the range (default 2)")
    parser.add_argument("--out", metavar="DIR", help="where bench_capture.json and bench_capture.png go "
                                                     "(default runs/bench-capture-TIMESTAMP)")


def main(args) -> int:
    from rich.console import Console

    try:
        clients, captures = plan(args)
        pgbench = _pgbench()
    except ModelError as err:
        print(f"fedlab bench-capture: {err}", file=sys.stderr)
        return 2
    out = Path(args.out or f"runs/bench-capture-{time.strftime('%Y%m%d-%H%M%S')}")
    progress, console = Console(stderr=True), Console()
    for c in (progress, console):
        if not c.is_terminal:   # a log file: a figure's line and the table whole, not wrapped at 80 columns
            c.width = max(c.width, 200)
    try:
        result = measure(pgbench, clients, captures, args.seconds, args.repeat, progress.print)
    except ModelError as err:
        print(f"fedlab bench-capture: {err}", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_capture.json").write_text(json.dumps(result, indent=2) + "\n")
    plot(result, out / "bench_capture.png")
    print_table(console, result)
    print(f"figures: {out / 'bench_capture.json'}, plot: {out / 'bench_capture.png'}")
    return 0


def plan(args) -> tuple[list[int], list[str]]:
    """The client counts and captures asked for; ModelError for arguments the bench cannot run."""
    try:
        clients = [int(c) for c in args.clients.split(",")]
    except ValueError:
        raise ModelError(f"--clients: client counts separated by commas, got {args.clients!r}") from None
    if min(clients) < 1 or len(set(clients)) < len(clients):
        raise ModelError(f"--clients: each count at least 1 and given once, got {args.clients}")
    captures = args.captures.split(",")
    unknown = [c for c in captures if c not in CAPTURES]
    if unknown:
        raise ModelError(f"--captures: unknown capture {unknown[0]!r} (of {', '.join(CAPTURES)})")
    if len(set(captures)) < len(captures):
        raise ModelError(f"--captures: each capture once, got {args.captures}")
    if args.seconds < 1:
        raise ModelError(f"--seconds: at least 1 (pgbench runs whole seconds), got {args.seconds}")
    if args.repeat < 1:
        raise ModelError(f"--repeat: at least 1 trial, got {args.repeat}")
    return clients, captures


def _pgbench() -> str:
    from fedlab.checker.pg_server import find_binaries

    server_bin = find_binaries()
    pgbench = pgbench_program(server_bin)
    if pgbench is None:
        raise ModelError(f"pgbench is not installed (not in {server_bin}, not on PATH)")
    return pgbench


# ---- measuring ----

def measure(pgbench: str, clients: list[int], captures: list[str], seconds: int, repeat: int,
            progress: Callable[[str], None] = lambda line: None) -> dict:
    """Every figure (see the module docstring), a record per (trial, capture, clients) in the
    order they ran, and their medians."""
    from fedlab.checker.pg_server import PostgresServer
    from fedlab.loadgen.tpch import tpch_catalog, tpch_data

    catalog = tpch_catalog()
    source = written_source(catalog)
    data = tpch_data(SCALE)
    rows = {r.name: data[r.name] for r in catalog.relations_at(source)}
    started, figures, total = time.monotonic(), [], repeat * len(captures) * len(clients)
    progress(f"starting a private PostgreSQL server; loading TPC-H SF {SCALE:g} "
             f"({', '.join(f'{len(r):,} {name}' for name, r in rows.items())})")
    with PostgresServer.start() as server:
        _template(server.database(TEMPLATE), catalog, source, rows)
        with psycopg.connect(server.dsn) as con:
            (version,), = con.execute("SHOW server_version").fetchall()
        for trial in range(1, repeat + 1):
            for capture in captures if trial % 2 else captures[::-1]:
                with CapturedDatabase(server, catalog, source, capture, f"{capture}_{trial}") as db:
                    for n in clients:
                        figure = {"trial": trial, **db.run(pgbench, n, seconds)}
                        figures.append(figure)
                        progress(f"[{len(figures)}/{total}] {_figure_line(figure)}")
    settings = {"clients": clients, "captures": captures, "seconds": seconds, "repeat": repeat, "scale": SCALE,
                "mix": dict(MIX)}
    return {"settings": settings, "machine": {"cpus": os.cpu_count(), "postgresql": version},
            "figures": figures, "summary": summary(figures, clients, captures), "target": TARGET,
            "seconds": round(time.monotonic() - started, 1)}


def _template(dsn: str, catalog, source: str, rows: dict[str, list[tuple]]) -> None:
    """The source's tables as its store creates them, with `rows`, and no capture."""
    open_store(catalog, source, dsn, "postgres", rows, capture="triggers").close()
    with psycopg.connect(dsn, autocommit=True) as con:
        con.execute("DROP SCHEMA fedlab CASCADE")   # its functions, and the triggers that call them
        # Every copy starts with its pages' visibility settled, rather than its first figure settling it.
        con.execute("VACUUM ANALYZE")


class CapturedDatabase:
    """A fresh copy of the template with `capture` installed: its store open (`none`: no store)
    and kept up with by a stand-in warehouse; dropped, with its replication slot, on close."""

    def __init__(self, server, catalog, source: str, capture: str, name: str):
        self.server, self.capture, self.name = server, capture, name
        with psycopg.connect(server.dsn, autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
        self.dsn = server.dsn_for(name)
        self.admin = psycopg.connect(self.dsn, autocommit=True)
        self.store = None if capture == "none" else open_store(catalog, source, self.dsn, "postgres", {},
                                                               capture=capture)
        self._stop = threading.Event()
        self._keeper = None
        if self.store is not None:
            self._keeper = threading.Thread(target=self._keep_up, name=f"keep-up-{name}", daemon=True)
            self._keeper.start()

    def _keep_up(self) -> None:
        """A warehouse that keeps up: acknowledges and applies everything numbered, every
        KEEP_UP_EVERY seconds (the logical slot is confirmed as far)."""
        while not self._stop.wait(KEEP_UP_EVERY):
            dsv = self.store.dsv
            self.store.acknowledge(dsv)
            self.store.applied_through(dsv)

    def run(self, pgbench: str, clients: int, seconds: int) -> dict:
        """pgbench for `seconds` over `clients` connections, unthrottled: its figures, the CPU per
        committed transaction, and (with a capture) what the store numbered."""
        before = self.store.dsv if self.store is not None else None
        command = pgbench_command(pgbench, self.dsn, clients, min(clients, os.cpu_count() or 1), seconds, SCALE)
        cpu_before = self._cpu()
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=seconds + 120)
        ended = time.monotonic()
        at_exit = self.store.dsv if self.store is not None else None
        final = self._caught_up() if self.store is not None else None
        caught_up = time.monotonic()
        self._backends_gone()
        cpu = [after - start for after, start in zip(self._cpu(), cpu_before)]
        figures = report(done.stdout, None, done.returncode)
        if "error" in figures:
            raise ModelError(f"pgbench, {clients} clients, capture {self.capture}: {figures['error']}")
        committed = figures["committed"]
        figure = {"capture": self.capture, "clients": clients, "committed": committed, "failed": figures["failed"],
                  "tps": figures["tps"], "latency_ms": figures["latency_ms"],
                  "cpu_ms_per_txn": {name: round(1000 * s / committed, 3) if committed else None
                                     for name, s in zip(("machine", "server", "node"), cpu)}}
        if self.store is None:
            figure["cpu_ms_per_txn"]["node"] = None   # no node: this process only waited for pgbench
        else:
            figure.update(captured=final - before, behind_at_exit=final - at_exit,
                          catch_up_s=round(caught_up - ended, 3))
        return figure

    def _caught_up(self) -> int:
        """Waits until the node has every commit made so far; the DSV of their state. A one-row
        read gives it: the logical store reads once its stream has passed the read's state (up to
        STREAM_WAIT seconds at a time), the triggers store's listener then has to reach it."""
        probe = Subquery("caught-up", self.store.source,
                         (SubqueryRelation("customer", None, ("c_custkey",), ("c_custkey",)),), ((1,),))
        while True:
            numbered = self.store.dsv
            try:
                final = self.store.answer(probe).dsv
                break
            except ModelError:
                if self.store.dsv == numbered:   # not slow but stuck
                    raise
        progressed = time.monotonic()
        while (numbered := self.store.dsv) < final:
            time.sleep(0.01)
            if self.store.dsv > numbered:
                progressed = time.monotonic()
            elif time.monotonic() - progressed > STALLED:
                raise ModelError(f"the {self.capture} node stopped at DSV {numbered} of {final}")
        return final

    def _cpu(self) -> tuple[float, float, float]:
        """CPU seconds so far: the machine's, the server's, this process's (the store's threads)."""
        return machine_seconds()[0], _server_seconds(self.server.pid), time.process_time()

    def _backends_gone(self) -> None:
        # pgbench's backends end just after it does; their CPU is the server's once they have.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'").fetchone()[0]:
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join()
        if self.store is not None:
            self.store.close()
        self._drop_slot()
        self.admin.close()
        with psycopg.connect(self.server.dsn, autocommit=True) as con:
            con.execute(f'DROP DATABASE "{self.name}" WITH (FORCE)')

    def _drop_slot(self) -> None:
        """Drops the database's replication slot (logical's); its walsender, whose client just
        went, may hold it a moment longer."""
        deadline = time.monotonic() + 10
        while True:
            try:
                self.admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                                   "WHERE database = %s", [self.name])
                return
            except psycopg.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def __enter__(self) -> "CapturedDatabase":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _server_seconds(pid: int) -> float:
    """CPU seconds the server's processes used so far: the postmaster's, each running child's
    (backends, walsenders, background workers), and those of the children that ended, which the
    kernel adds to the postmaster's children's times as it reaps them."""
    import psutil

    postmaster = psutil.Process(pid)
    seconds = 0.0
    for child in postmaster.children():
        try:
            used = child.cpu_times()
        except psutil.Error:   # ended meanwhile: in the children's times below
            continue
        seconds += used.user + used.system
    used = postmaster.cpu_times()
    return seconds + used.user + used.system + used.children_user + used.children_system


# ---- the figures ----

def summary(figures: list[dict], clients: list[int], captures: list[str]) -> list[dict]:
    """Per (capture, clients): each figure's median and range over the trials, and the median
    throughput relative to `none`'s at the same client count (when `none` was measured).

    >>> rows = summary([{"capture": "none", "clients": 1, "tps": 100.0, "latency_ms": 1.0},
    ...                 {"capture": "logical", "clients": 1, "tps": 97.0, "latency_ms": 1.03}],
    ...                [1], ["none", "logical"])
    >>> rows[1]["tps"]["median"], rows[1]["relative_to_none"]
    (97.0, 0.97)
    """
    rows = []
    for capture in captures:
        for n in clients:
            mine = [f for f in figures if f["capture"] == capture and f["clients"] == n]
            row = {"capture": capture, "clients": n, "tps": spread(f["tps"] for f in mine),
                   "latency_ms": spread(f["latency_ms"] for f in mine)}
            for name in ("machine", "server", "node"):
                row[f"{name}_cpu_ms_per_txn"] = spread(f.get("cpu_ms_per_txn", {}).get(name) for f in mine)
            for name in ("behind_at_exit", "catch_up_s"):
                row[name] = spread(f.get(name) for f in mine)
            rows.append(row)
    none = {r["clients"]: r["tps"]["median"] for r in rows if r["capture"] == "none"}
    for r in rows:
        if r["capture"] != "none" and none.get(r["clients"]):
            r["relative_to_none"] = round(r["tps"]["median"] / none[r["clients"]], 3)
    return rows


def _clients(n: int) -> str:
    return f"{n} client{'s' * (n != 1)}"


def _figure_line(f: dict) -> str:
    cpu = f["cpu_ms_per_txn"]
    line = (f"{f['capture']:<8} {_clients(f['clients']):>11}, trial {f['trial']}: {f['committed']:,} committed, "
            f"{f['tps']:.1f} tps, latency {f['latency_ms']:.2f} ms, CPU per transaction {cpu['machine']} ms "
            f"(server {cpu['server']} ms)")
    if "captured" in f:
        line += (f", node {cpu['node']} ms; captured {f['captured']:,}, {f['behind_at_exit']:,} behind when "
                 f"pgbench ended, caught up in {f['catch_up_s']:.2f} s")
    return line


def _ranged(s: dict | None, digits: int) -> str:
    if s is None:
        return "-"
    median, low, high = (format(s[k], f".{digits}f") for k in ("median", "min", "max"))
    return median if s["min"] == s["max"] else f"{median} ({low}-{high})"


def relative_lines(result: dict) -> list[str]:
    """Each capture's throughput against `none`'s, client count by client count, and the target."""
    lines = []
    for r in result["summary"]:
        if "relative_to_none" in r:
            share = r["relative_to_none"]
            verdict = f"; target at least {TARGET:.0%}: {'met' if share >= TARGET else 'missed'}" \
                if r["capture"] == "logical" else ""
            lines.append(f"{r['capture']} at {_clients(r['clients'])}: {share:.1%} of none's throughput, the node "
                         f"{r['behind_at_exit']['median']:g} transactions behind when pgbench ended, caught up in "
                         f"{r['catch_up_s']['median']:.2f} s{verdict}")
    return lines


def print_table(console, result: dict) -> None:
    from rich.table import Table

    settings = result["settings"]
    table = Table("capture", "clients", "tps", "latency ms", "of none's tps", "CPU ms/txn: machine", "server", "node",
                  "node caught up (s)",
                  title=f"fedlab bench-capture: pgbench unthrottled, {settings['seconds']} s a figure, median "
                        f"(range) of {settings['repeat']} trial{'s' * (settings['repeat'] > 1)}, PostgreSQL "
                        f"{result['machine']['postgresql']}, {result['machine']['cpus']} cores")
    for r in result["summary"]:
        share = r.get("relative_to_none")
        table.add_row(r["capture"], str(r["clients"]), _ranged(r["tps"], 1), _ranged(r["latency_ms"], 2),
                      "-" if share is None else f"{share:.1%}",
                      *(_ranged(r[f"{name}_cpu_ms_per_txn"], 3) for name in ("machine", "server", "node")),
                      _ranged(r["catch_up_s"], 2))
    console.print(table)
    for line in relative_lines(result):
        console.print(line)


def plot(result: dict, path: Path) -> None:
    """Throughput by clients, a line per capture: the median, the range as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = result["settings"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for capture in settings["captures"]:
        rows = [r for r in result["summary"] if r["capture"] == capture]
        medians = [r["tps"]["median"] for r in rows]
        ax.errorbar([r["clients"] for r in rows], medians, capsize=3, marker="o", label=capture,
                    yerr=[[m - r["tps"]["min"] for m, r in zip(medians, rows)],
                          [r["tps"]["max"] - m for m, r in zip(medians, rows)]])
    ax.set_xscale("log", base=2)
    ax.set_xticks(settings["clients"], [str(c) for c in settings["clients"]])
    ax.set_xlabel("pgbench clients")
    ax.set_ylabel("committed transactions per second")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Writers' throughput by capture (pgbench unthrottled, {settings['seconds']} s, "
                 f"median and range of {settings['repeat']})", fontsize=9)
    ax.legend()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
