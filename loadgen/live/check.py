"""`fedlab check RUN_DIR`: the consistency level a live run kept, judged from the files it left.

The run file (loadgen.live.runfile) says where the two sides of the history are:
- each source's committed transactions, from its database file (SQLite or DuckDB, whichever
  made it: source_node.engines.open_store) or its PostgreSQL database (the run's private server
  is started again from its data directory in the run directory when it no longer runs): the
  log (outbox) holds every notification from DSV 2 on, with full row images; the source's
  initial state is its final state with the log undone, newest first;
- the warehouse's view states, from its change history (fedmodel.change_history): the view it materialised first
  (initial_view.json, at some source versions) and each applied transaction's delta and version
  vector (changes.jsonl); the states are the cumulative sums, kept as their deltas (a whole view
  per state would be the states times the view: gigabytes for a benchmark's run).
The verdict comes from loadgen.checker: an oracle over the sources' histories that shares no code
with the maintenance path, evaluated by DuckDB or, with --oracle postgres, by PostgreSQL (the
server at --pg-dsn or $FEDLAB_PG_DSN, else a throwaway one). Sources should be stopped: a running
DuckDB source holds its file; a running SQLite source's file is read at one moment of the run.
`--source NAME=HOST:PORT` reads that source's history from the running source instead (the
Source.History RPC, loadgen.live.remote_source; with --tls-* over mutual TLS): on a cluster the files
are on the sources' volumes, out of the Helm test's reach.
When the nodes kept message logs (fedmodel.message_log: each source's `<db stem>.messages.jsonl`
beside its file, the warehouse's `messages.jsonl` in its history folder), the report also sums
them up: messages sent, dropped, duplicated, delayed and received per kind, and the rows and bytes
sent.

Exit status: 0 when the level asked for with --expect (default complete) holds, 1 when it does
not, 2 when the history cannot be read.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import psycopg
from psycopg.conninfo import conninfo_to_dict

from fedio.message_log import read as read_message_logs
from fedmodel import change_history, message_log
from fedmodel.catalog import Catalog
from fedmodel.change_history import ChangeHistoryError
from fedmodel.errors import ModelError
from fedmodel.transactions import Notification
from loadgen.bench.metrics import clock_skew, commit_times, first_receipts, percentiles, reflections
from loadgen.checker.explain import few, logged_happenings, render
from loadgen.checker.levels import Verdict, classify
from loadgen.checker.oracle import ORACLES, Engine, Oracle, OracleError, engine_named
from loadgen.checker.pg_server import PostgresServer, PostgresServerError
from loadgen.live.remote_source import RemoteSource, read_history, remote_sources
from loadgen.live.runfile import RunFile
from loadgen.roles.process import RoleError, add_tls_arguments, tls_files
from loadgen.simulation.scenario import LEVELS
from source_node.engines import open_store

ALIASES = {"convergent": "convergence"}   # the Helm chart's spelling (run.expect)


class HistoryError(ModelError):
    """A run whose history cannot be read (exit status 2)."""


@dataclass
class LiveHistory:
    """Both sides of a live run's history, in the checker's terms."""

    run: RunFile
    initial: dict[str, list[tuple]]              # every relation at DSV 1 of its source
    log: dict[str, list[Notification]]           # per source, its committed transactions from DSV 2
    start_versions: dict[str, int]               # the versions the warehouse materialised the view at
    start_view: dict[tuple, int]
    states: list[dict]                           # [{"transaction", "source", "dsv", "versions", "delta"}]
    final_view: dict[tuple, int]                 # the view after the last state

    def of(self, subscriber: str) -> "LiveHistory":
        """The same sources' history with the warehouse subscribed as `subscriber` on the other side
        (a run of several warehouses: loadgen.live.runfile); HistoryError for a name the run lacks."""
        if subscriber == self.run.subscriber:
            return self
        try:
            run = self.run.of(subscriber)
        except ModelError as err:
            raise HistoryError(str(err)) from None
        return LiveHistory(run, self.initial, self.log, *warehouse_states(run.warehouse_history))

    def oracle(self, engine: Engine | None = None) -> Oracle:
        # A history of the join the warehouse maintains (history_sql) holds, for an outer-join
        # view, its terms' padded rows: the oracle derives them from the SQL on its own.
        return Oracle(self.run.catalog, self.run.judged_sql, self.initial, self.log, engine,
                      terms=self.run.history_sql is not None)


def load_history(run_dir: str | Path, remote: dict[str, RemoteSource] | None = None) -> LiveHistory:
    """Reads the run file and both sides of the history, each source in `remote` from the running
    source rather than its file; HistoryError when any part is unreadable."""
    try:
        run = RunFile.read(run_dir)
    except ModelError as err:
        raise HistoryError(str(err)) from None
    remote = remote or {}
    for source in remote:
        if source not in run.catalog.sources:
            raise HistoryError(f"--source {source}: the run has no source of that name")
    initial, log = {}, {}
    for source in run.catalog.sources:
        if source not in run.sources and source not in remote:
            raise HistoryError(f"run file: no entry for source {source}")
    with _reachable(run, set(remote)) as where:
        for source in run.catalog.sources:
            rows, log[source] = source_history(run.catalog, source, remote.get(source) or where[source])
            initial.update(rows)
    return LiveHistory(run, initial, log, *warehouse_states(run.warehouse_history))


@contextmanager
def _reachable(run: RunFile, remote: set[str]):
    """The sources' locations, reachable: a run's private PostgreSQL server (its data directory in
    the run directory) is started again for the read when it no longer runs, and stopped after."""
    dsns = {s: w for s, w in run.sources.items() if isinstance(w, str) and s not in remote}
    if run.postgres is None or not dsns or _answers(next(iter(dsns.values()))):
        yield dict(run.sources)
        return
    try:
        server = PostgresServer.start(data=run.postgres)
    except PostgresServerError as err:
        raise HistoryError(f"the sources' PostgreSQL server ({run.postgres}): {err}") from None
    try:
        yield {**run.sources, **{s: server.dsn_for(conninfo_to_dict(d)["dbname"]) for s, d in dsns.items()}}
    finally:
        server.stop()


def _answers(dsn: str) -> bool:
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error:
        return False
    return True


def source_history(catalog: Catalog, source: str,
                   where: Path | RemoteSource | None) -> tuple[dict[str, list[tuple]], list[Notification]]:
    """The source's relations at DSV 1 and its committed transactions from DSV 2, from its file
    or, for a RemoteSource, from the running source."""
    dsv, relations, log = committed_history(catalog, source, where)
    if [n.dsv for n in log] != list(range(2, dsv + 1)):
        first = log[0].dsv if log else dsv + 1
        raise HistoryError(f"source {source}: its log holds DSVs {first}..{log[-1].dsv if log else dsv} "
                           f"of 2..{dsv}; a log with retention cannot be checked")
    tables = {name: {catalog.relation(name).key_of(r): r for r in rows} for name, (_, rows) in relations.items()}
    for n in reversed(log):
        for change in n.changes:
            rel = catalog.relation(change.relation)
            table = tables[rel.name]
            for row in change.added:
                if table.pop(rel.key_of(row), None) != tuple(row):
                    raise HistoryError(f"source {source}: the log does not match the data: DSV {n.dsv} "
                                       f"added {list(row)} to {rel.name}, which does not hold it")
            for row in change.removed:
                table[rel.key_of(row)] = tuple(row)
    return {name: list(table.values()) for name, table in tables.items()}, log


def committed_history(catalog: Catalog, source: str,
                      where: Path | str | RemoteSource | None) -> tuple[int, dict[str, tuple[int, list[tuple]]], list[Notification]]:
    """How a source's history is obtained: (DSV, {relation: (BRV, rows)} at that DSV, its logged
    notifications from DSV 2), from its database file or PostgreSQL database (a DSN), or over
    gRPC from a RemoteSource."""
    if isinstance(where, RemoteSource):
        try:
            return read_history(catalog, source, where)
        except ModelError as err:
            raise HistoryError(str(err)) from None
    path = where
    if path is None:
        raise HistoryError(f"source {source}: the run file names no database file for it "
                           "(its file is not reachable from the run directory; give --source NAME=HOST:PORT)")
    if not isinstance(path, str) and not path.is_file():
        raise HistoryError(f"source {source}: no database file at {path}")
    try:
        store = open_store(catalog, source, path)
    except (sqlite3.Error, duckdb.Error) as err:
        raise HistoryError(f"source {source}: cannot open {path}: {str(err).strip().splitlines()[0]} "
                           "(is the source still running?)") from None
    except ModelError as err:
        raise HistoryError(f"source {source}: {err}") from None
    try:
        dsv, relations = store.snapshot()
        # Cut at the snapshot's DSV: a source still running may have logged more since.
        log = [n for n in store.notifications_from(2) if n.dsv <= dsv]
    finally:
        store.close()
    return dsv, relations, log


def warehouse_states(folder: Path | None) -> tuple[dict[str, int], dict[tuple, int], list[dict], dict[tuple, int]]:
    """(versions of the first view, the first view, every later state with its delta, the view
    after the last) from the warehouse's change history (fedmodel.change_history)."""
    if folder is None:
        raise HistoryError("run file: names no warehouse history")
    try:
        return change_history.read(folder)
    except ChangeHistoryError as err:
        raise HistoryError(str(err)) from None


def message_totals(run: RunFile) -> dict[str, dict[str, int]]:
    """fedmodel.message_log.totals over every node's log; empty when no node kept one."""
    try:
        return message_log.totals(read_message_logs((p for p in run.message_logs().values() if p is not None),
                                                    run.subscriber))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise HistoryError(f"message log: malformed ({err})") from None


def judge(history: LiveHistory, oracle: str = "duckdb", pg_dsn: str | None = None) -> Verdict:
    """The history's verdict, the oracle evaluated by the engine named `oracle` (ORACLES)."""
    try:
        with engine_named(oracle, pg_dsn) as engine:
            try:
                return classify(history.oracle(engine), history.states, history.final_view,
                                history.start_versions, history.start_view)
            except (ModelError, duckdb.Error, ValueError) as err:
                raise HistoryError(f"cannot evaluate the view over the sources' histories: {err}") from None
    except OracleError as err:   # the engine itself: unknown, unreachable, would not start
        raise HistoryError(str(err)) from None


def check(run_dir: str | Path, remote: dict[str, RemoteSource] | None = None,
          oracle: str = "duckdb", pg_dsn: str | None = None, subscriber: str | None = None) -> Verdict:
    """The verdict on the run's warehouse, or with `subscriber` on the one subscribed by that name."""
    history = load_history(run_dir, remote)
    return judge(history.of(subscriber) if subscriber else history, oracle, pg_dsn)


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (it holds run.json)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--expect", default="complete", type=str.lower,
                        choices=[*LEVELS, *ALIASES],
                        help="the level the run must keep (default complete; exit 1 if it does not)")
    parser.add_argument("--oracle", default="duckdb", type=str.lower,
                        help=f"the engine that evaluates the view over the sources' states: {' or '.join(ORACLES)} "
                             "(default duckdb)")
    parser.add_argument("--pg-dsn", metavar="DSN",
                        help="with --oracle postgres: the server to use (default $FEDLAB_PG_DSN; "
                             "without either, a private throwaway server is started and removed)")
    parser.add_argument("--subscriber", metavar="NAME",
                        help="judge only the warehouse subscribed to the sources by this name (default: every "
                             "warehouse of the run, each on its own: fedlab bench --same-stream runs several)")
    parser.add_argument("--source", action="append", metavar="NAME=HOST:PORT",
                        help="read this source's history from the running source, not its file (repeatable)")
    parser.add_argument("--connect-wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait up to this long for each --source to accept a connection (default 0: fail at "
                             "once; on a cluster a source pod may be restarting)")
    add_tls_arguments(parser)


def main(args) -> int:
    """Judges each warehouse of the run (or the one --subscriber names) on its own; exit 0 when
    every one kept the level expected. A run of one warehouse prints as it always did; of several,
    one block (a JSON object under "subscribers") per warehouse, by subscriber name."""
    expect = ALIASES.get(args.expect, args.expect)
    try:
        pg_dsn = _pg_dsn(args)
        history = load_history(args.run_dir, remote_sources(args.source or [], tls_files(args), args.connect_wait))
        names = [args.subscriber] if args.subscriber else history.run.subscribers
        judged = {name: _judged(history.of(name), args.oracle, pg_dsn, args.json) for name in names}
    except (HistoryError, ModelError, RoleError) as err:
        print(f"fedlab check: {err}", file=sys.stderr)
        return 2
    oks = {name: LEVELS.index(j["verdict"].level) >= LEVELS.index(expect) for name, j in judged.items()}
    if args.json:
        docs = {name: _json_verdict(j, args.oracle) for name, j in judged.items()}
        print(json.dumps(docs[names[0]] if len(names) == 1 else {"subscribers": docs}, default=str))
    else:
        for name, j in judged.items():
            if len(names) > 1:
                print(f"== subscriber {name} ({j['history'].run.algorithm})")
            _print_text(j["verdict"], expect, oks[name], args.oracle, j["messages"], j["staleness"],
                        j["clocks"], j["happenings"])
    return 0 if all(oks.values()) else 1


def _judged(history: LiveHistory, oracle: str, pg_dsn: str | None, as_json: bool) -> dict:
    """One warehouse's verdict and the figures printed beside it."""
    verdict = judge(history, oracle, pg_dsn)
    logs = [p for p in history.run.message_logs().values() if p is not None]
    # The logs are read again only to explain a run that fell short.
    happenings = logged_happenings(read_message_logs(logs, history.run.subscriber)) \
        if verdict.anomalies and not as_json else None
    return {"history": history, "verdict": verdict, "messages": message_totals(history.run),
            "staleness": staleness_summary(history), "happenings": happenings,
            "clocks": clock_skew(commit_times(history.log), first_receipts(history.run.message_logs()))}


def _json_verdict(judged: dict, oracle: str) -> dict:
    verdict = judged["verdict"].to_dict()
    return {**{k: verdict[k] for k in ("level", "claims_held", "claims_ordered", "lost", "doubled", "transactions",
                                       "states", "first_violation", "order_violation", "anomalies", "off_time_line")},
            "oracle": oracle, "messages": judged["messages"], "staleness": judged["staleness"],
            "clock_skew": judged["clocks"]}


def _lag_line(lag: dict) -> str:
    """One line of staleness figures, e.g. `applied p50 0.4 s, p99 2.1 s, max 3.0 s (n=900); ...`."""
    parts = []
    for kind, label in (("applied", "applied"), ("durable", "durable in the store")):
        p = lag[kind]
        parts.append(f"{label}: none measured" if not p["n"] else
                     f"{label} p50 {p['p50']:.1f} s, p99 {p['p99']:.1f} s, max {p['max']:.1f} s (n={p['n']})")
    return "; ".join(parts)


def _pg_dsn(args) -> str | None:
    """The DSN of the PostgreSQL server to use; None: start a private one (or no PostgreSQL)."""
    if args.oracle not in ORACLES:
        raise HistoryError(f"unknown oracle {args.oracle!r} (one of {', '.join(ORACLES)})")
    if args.oracle != "postgres":
        if args.pg_dsn:
            raise HistoryError("--pg-dsn is for --oracle postgres")
        return None
    return args.pg_dsn or os.environ.get("FEDLAB_PG_DSN") or None


def staleness_summary(history: LiveHistory) -> dict:
    """Seconds from each source commit to the first view state that reflects it, in the core
    (`applied`) and durable in the warehouse's store (`durable`): p50/p95/p99/max/mean and n."""
    seen = reflections(history.log, history.run.warehouse_history, history.start_versions)
    return {kind: percentiles((lag for _, lag in seen.lags(to_delta=kind == "durable")), scale=1.0)
            for kind in ("applied", "durable")}


def _clock_line(clocks: dict[str, dict]) -> str:
    """What the sources' commit stamps say of their clocks (metrics.clock_skew), in one line."""
    if not clocks:
        return "no source's commit stamps show another clock than the warehouse's"
    said = []
    for source, c in clocks.items():
        said.append(f"{source} ran at least {c['ahead_s']:.1f} s ahead" if c["ahead_s"] else
                    f"{source}'s notifications took a median {c['median_delivery_s']:.1f} s (its clock behind, "
                    "or its notifications held up)")
    return "; ".join(said) + ": staleness from their commits spans two clocks"


def _print_text(v: Verdict, expect: str, ok: bool, oracle: str, messages: dict, lag: dict, clocks: dict,
                happenings) -> None:
    print(f"level: {v.explained_level()}")
    print(f"expected at least {expect}: {'ok' if ok else 'NOT MET'} (oracle: {oracle})")
    print(f"transactions: {v.transactions}  states: {v.states}")
    print(f"staleness: {_lag_line(lag)}")
    print(f"clocks: {_clock_line(clocks)}")
    print(f"messages: {_message_line(messages)}")
    print(f"lost: {few(v.lost) if v.lost else 'none'}")
    print(f"doubled: {few(v.doubled) if v.doubled else 'none'}")
    off = v.off_time_line
    print("points in time: every state" if off is None else
          f"points in time: not state {off['state']} ({off['txn']}): it includes {off['includes']} "
          f"but leaves out {off['leaves_out']}")
    for line in render(v, happenings):
        print(line)


def _message_line(totals: dict) -> str:
    """`notification 12 sent (40 rows, 9120 bytes), 1 dropped, 11 received; answer ...`."""
    if not totals:
        return "no message logs"
    parts = []
    for kind, counts in totals.items():
        events = [f"{counts[e]} {e}" + (f" ({counts.get('rows', 0)} rows, {counts.get('bytes', 0)} bytes)"
                                        if e == "sent" else "")
                  for e in message_log.EVENTS if counts.get(e)]
        parts.append(f"{kind} {', '.join(events)}")
    return "; ".join(parts)


