"""`fedlab check RUN_DIR`: the consistency level a live run kept, judged from the files it left.

The run file (live.runfile) says where the two sides of the history are:
- each source's committed transactions, from its database file (SQLite or DuckDB, whichever
  made it: source_node.engines.open_store) or its PostgreSQL database (the run's private server
  is started again from its data directory in the run directory when it no longer runs): the
  log (outbox) holds every notification from DSV 2 on, with full row images; the source's
  initial state is its final state with the log undone, newest first;
- the warehouse's view states, from its change history (fedmodel.change_history): the view it materialised first
  (initial_view.json, at some source versions) and each applied transaction's delta and version
  vector (changes.jsonl); the states are the cumulative sums, kept as their deltas (a whole view
  per state would be the states times the view: gigabytes for a benchmark's run).
The verdict comes from checker: an oracle over the sources' histories that shares no code
with the maintenance path, evaluated by DuckDB or, with --oracle postgres, by PostgreSQL (the
server at --pg-dsn or $FEDLAB_PG_DSN, else a throwaway one). Sources should be stopped: a running
DuckDB source holds its file; a running SQLite source's file is read at one moment of the run.
`--source NAME=HOST:PORT` reads that source's history from the running source instead (the
Source.History RPC, live.remote_source; with --tls-* over mutual TLS): on a cluster the files
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
from collections import Counter
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Iterator

import duckdb
import psycopg
from psycopg.conninfo import conninfo_to_dict

from fedlab.fedio.message_log import read as read_message_logs
from fedlab.fedio.message_log import trimmed as trimmed_message_logs
from fedlab.fedmodel import change_history, message_log
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.change_history import ChangeHistoryError
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import Notification
from fedlab.bench.metrics import DsvTimes, clock_skew, first_receipts, percentiles, reflections
from fedlab.checker.explain import few, logged_happenings, render
from fedlab.checker import windows
from fedlab.checker.levels import Verdict, classify
from fedlab.checker.oracle import ORACLES, Backend, Oracle, OracleError, backend_named
from fedlab.checker.pg_server import PostgresServer, PostgresServerError
from fedlab.checker.points_in_time import first_off_the_line
from fedlab.checker.windows import CHUNK, Complete, LoadedLog, LogError, Shortfall, SourceLog, read_log, relations_at
from fedlab.live.remote_source import RemoteSource, read_history, remote_sources
from fedlab.live.runfile import RunFile
from fedlab.roles.process import RoleError, add_tls_arguments, tls_files
from fedlab.simulation.scenario import LEVELS
from fedlab.source_node.engines import open_store

ALIASES = {"convergent": "convergence"}   # the Helm chart's spelling (run.expect)


class HistoryError(ModelError):
    """A run whose history cannot be read (exit status 2)."""


class LiveHistory:
    """Both sides of a live run's history, in the checker's terms, read as they are needed: each
    source's log (`sources`: a file read a range of DSVs at a time, or the history a running
    source sent) and the warehouse's change history, a state at a time (`read_states`). The whole
    of either (`initial`, `log`, `states`, `final_view`) is read only when asked for: a complete
    run is judged without it (checker.windows)."""

    def __init__(self, run: RunFile, sources: dict[str, SourceLog], read: dict | None = None):
        """`read`: the sources' whole histories read so far, by the versions they start from,
        shared by the histories `of` gives (several views read the same sources once)."""
        self.run, self.sources = run, sources
        self._read = {} if read is None else read
        if run.warehouse_history is None:
            raise HistoryError("run file: names no warehouse history")
        try:
            # the versions the warehouse materialised the view at, and that view
            self.start_versions, self.start_view = change_history.read_start(run.warehouse_history)
        except ChangeHistoryError as err:
            raise HistoryError(str(err)) from None

    def of(self, subscriber: str) -> "LiveHistory":
        """The same sources' history with the warehouse subscribed as `subscriber` on the other side
        (a run of several warehouses: live.runfile); HistoryError for a name the run lacks."""
        if subscriber == self.run.subscriber:
            return self
        try:
            run = self.run.of(subscriber)
        except ModelError as err:
            raise HistoryError(str(err)) from None
        return LiveHistory(run, self.sources, self._read)

    def read_states(self) -> Iterator[dict]:
        """The warehouse's states after its first view, in apply order, a state at a time."""
        try:
            yield from change_history.states(self.run.warehouse_history)
        except ChangeHistoryError as err:
            raise HistoryError(str(err)) from None

    @property
    def _whole_sources(self) -> tuple[dict[str, list[tuple]], dict[str, list[Notification]]]:
        start = tuple(sorted(self.start_versions.items()))
        if start not in self._read:
            initial, log = {}, {}
            for source, where in self.sources.items():
                rows, log[source] = whole_source(self.run.catalog, source, where, self.start_versions.get(source, 1))
                initial.update(rows)
            self._read[start] = initial, log
        return self._read[start]

    @property
    def initial(self) -> dict[str, list[tuple]]:
        """Every relation at the DSV of its source the warehouse's history starts from
        (`start_versions`: 1 unless the warehouse started later or its history was trimmed)."""
        return self._whole_sources[0]

    @property
    def log(self) -> dict[str, list[Notification]]:
        """Per source, its committed transactions after the history's start."""
        return self._whole_sources[1]

    @cached_property
    def _whole_states(self) -> tuple[list[dict], dict[tuple, int]]:
        view = Counter(self.start_view)
        states = []
        for state in self.read_states():
            view.update(state["delta"])
            states.append(state)
        return states, {r: c for r, c in view.items() if c}

    @property
    def states(self) -> list[dict]:
        """[{"transaction", "source", "dsv", "versions", "delta"}], in apply order."""
        return self._whole_states[0]

    @property
    def final_view(self) -> dict[tuple, int]:
        """The view after the last state."""
        return self._whole_states[1]

    def commit_times(self) -> DsvTimes:
        """(source, DSV) -> when it committed, by its source's clock, for every transaction its log
        holds (bench.metrics.DsvTimes: eight bytes each), read CHUNK DSVs at a time."""
        times = DsvTimes()
        for source, where in self.sources.items():
            for first in range(2, where.dsv + 1, CHUNK):
                try:
                    notes = where.read(first, min(where.dsv, first + CHUNK - 1))
                except ModelError as err:
                    raise HistoryError(f"source {source}: {err}") from None
                for n in notes:
                    times[source, n.dsv] = n.commit_time
        return times

    def oracle(self, backend: Backend | None = None) -> Oracle:
        # A history of the join the warehouse maintains (history_sql) holds, for an outer-join
        # view, its terms' padded rows: the oracle derives them from the SQL on its own.
        return Oracle(self.run.catalog, self.run.judged_sql, self.initial, self.log, backend,
                      terms=self.run.history_sql is not None, start=self.start_versions)


@contextmanager
def open_history(run_dir: str | Path, remote: dict[str, RemoteSource] | None = None) -> Iterator[LiveHistory]:
    """The run's history (LiveHistory), each source in `remote` read from the running source (its
    history sent whole) rather than from its file; a run's private PostgreSQL server is up while
    it is open. HistoryError when the run file or the warehouse's first view is unreadable."""
    try:
        run = RunFile.read(run_dir)
    except ModelError as err:
        raise HistoryError(str(err)) from None
    remote = remote or {}
    for source in remote:
        if source not in run.catalog.sources:
            raise HistoryError(f"--source {source}: the run has no source of that name")
    for source in run.catalog.sources:
        if source not in run.sources and source not in remote:
            raise HistoryError(f"run file: no entry for source {source}")
    with _reachable(run, set(remote)) as where:
        sources = {source: _remote_log(run.catalog, source, remote[source]) if source in remote
                   else FileLog(run.catalog, source, where[source]) for source in run.catalog.sources}
        yield LiveHistory(run, sources)


def load_history(run_dir: str | Path, remote: dict[str, RemoteSource] | None = None) -> LiveHistory:
    """The run's whole history, read now (the sources' logs, the warehouse's states); HistoryError
    when any part is unreadable."""
    with open_history(run_dir, remote) as history:
        history.log, history.states   # noqa: B018  (read while a PostgreSQL server, if any, is up)
    return history


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


class FileLog:
    """A source's history in its database file (SQLite or DuckDB, whichever made it:
    source_node.engines.open_store) or PostgreSQL database (a DSN), opened for each read: where
    it ended (its snapshot, read once) and its log a range of DSVs at a time
    (checker.windows.SourceLog)."""

    def __init__(self, catalog: Catalog, source: str, where: Path | str | None):
        self.catalog, self.source, self.where = catalog, source, where

    @cached_property
    def _snapshot(self) -> tuple[int, dict[str, tuple[int, list[tuple]]]]:
        with self._opened() as store:
            return store.snapshot()

    @property
    def dsv(self) -> int:
        return self._snapshot[0]

    def relations(self) -> dict[str, list[tuple]]:
        return {name: rows for name, (_, rows) in self._snapshot[1].items()}

    def versions(self) -> dict[str, tuple[int, list[tuple]]]:
        """{relation: (BRV, rows)} at DSV `dsv`."""
        return self._snapshot[1]

    def read(self, first: int, last: int) -> list[Notification]:
        # Cut at the snapshot's DSV: a source still running may have logged more since.
        with self._opened() as store:
            return store.notifications_from(first, min(last, self.dsv))

    @contextmanager
    def _opened(self):
        source, path = self.source, self.where
        if path is None:
            raise HistoryError(f"source {source}: the run file names no database file for it "
                               "(its file is not reachable from the run directory; give --source NAME=HOST:PORT)")
        if not isinstance(path, str) and not path.is_file():
            raise HistoryError(f"source {source}: no database file at {path}")
        try:
            store = open_store(self.catalog, source, path)
        except (sqlite3.Error, duckdb.Error) as err:
            raise HistoryError(f"source {source}: cannot open {path}: {str(err).strip().splitlines()[0]} "
                               "(is the source still running?)") from None
        except ModelError as err:
            raise HistoryError(f"source {source}: {err}") from None
        try:
            yield store
        finally:
            store.close()


def _remote_log(catalog: Catalog, source: str, where: RemoteSource) -> LoadedLog:
    """A running source's history, sent whole over gRPC (live.remote_source)."""
    try:
        dsv, relations, log = read_history(catalog, source, where)
    except ModelError as err:
        raise HistoryError(str(err)) from None
    return LoadedLog(dsv, {name: rows for name, (_, rows) in relations.items()}, log)


def whole_source(catalog: Catalog, source: str, where: SourceLog,
                 start: int = 1) -> tuple[dict[str, list[tuple]], list[Notification]]:
    """The source's relations at DSV `start` and its committed transactions after it."""
    try:
        return ({name: list(table.values()) for name, table in relations_at(catalog, where, start).items()},
                read_log(where, start + 1, where.dsv))
    except LogError as err:
        raise HistoryError(f"source {source}: {err}") from None


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
    log = FileLog(catalog, source, where)
    return log.dsv, log.versions(), log.read(2, log.dsv)


def message_totals(run: RunFile) -> dict[str, dict[str, int]]:
    """fedmodel.message_log.totals over every node's log, with what their retention trimmed
    (fedio.message_log.trimmed); empty when no node kept one."""
    logs = [p for p in run.message_logs().values() if p is not None]
    try:
        return message_log.added(message_log.totals(read_message_logs(logs, run.subscriber)),
                                 trimmed_message_logs(logs, run.subscriber))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise HistoryError(f"message log: malformed ({err})") from None


def judge(history: LiveHistory, oracle: str = "duckdb", pg_dsn: str | None = None,
          commits: DsvTimes | None = None) -> Verdict:
    """The history's verdict, the oracle evaluated by the backend named `oracle` (ORACLES): a
    complete run's a window of states at a time (checker.windows), in memory bounded by
    the data and the window; a run that falls short somewhere judged again whole
    (checker.levels), which says what went wrong. `commits`: the sources' commit times
    (LiveHistory.commit_times), read here when not given."""
    try:
        with backend_named(oracle, pg_dsn) as backend:
            try:
                judged = windows.judge(history.run.catalog, history.run.judged_sql, history.sources,
                                       history.start_versions, history.start_view, history.read_states(), backend,
                                       terms=history.run.history_sql is not None)
                if isinstance(judged, Shortfall):
                    verdict = classify(history.oracle(backend), history.states, history.final_view,
                                       history.start_versions, history.start_view)
            except LogError as err:
                raise HistoryError(str(err)) from None
            except (ModelError, duckdb.Error, ValueError) as err:
                raise HistoryError(f"cannot evaluate the view over the sources' histories: {err}") from None
    except OracleError as err:   # the backend itself: unknown, unreachable, would not start
        raise HistoryError(str(err)) from None
    if isinstance(judged, Complete):
        verdict = Verdict("complete", judged.states, judged.transactions)
    # Placed on the commit-time line by every commit the sources' logs hold, before the history's start too.
    verdict.off_time_line = first_off_the_line(_on_the_line(commits or history.commit_times()), history.read_states())
    return verdict


def _on_the_line(commits: DsvTimes) -> DsvTimes:
    """Each transaction's place on the commit-time line (checker.points_in_time.stamped):
    its commit time, or the latest of its source's earlier ones when the clock stepped back."""
    out, latest = DsvTimes(), {}
    for source, dsv in commits:   # each source's in DSV order
        latest[source] = max(latest.get(source, float("-inf")), commits[source, dsv])
        out[source, dsv] = latest[source]
    return out


def check(run_dir: str | Path, remote: dict[str, RemoteSource] | None = None,
          oracle: str = "duckdb", pg_dsn: str | None = None, subscriber: str | None = None) -> Verdict:
    """The verdict on the run's warehouse, or with `subscriber` on the one subscribed by that name."""
    with open_history(run_dir, remote) as history:
        return judge(history.of(subscriber) if subscriber else history, oracle, pg_dsn)


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run directory (it holds run.json)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--expect", default="complete", type=str.lower,
                        choices=[*LEVELS, *ALIASES],
                        help="the level the run must keep (default complete; exit 1 if it does not)")
    parser.add_argument("--oracle", default="duckdb", type=str.lower,
                        help=f"the backend that evaluates the view over the sources' states: {' or '.join(ORACLES)} "
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
        with open_history(args.run_dir, remote_sources(args.source or [], tls_files(args), args.connect_wait)) as history:
            names = [args.subscriber] if args.subscriber else history.run.subscribers
            commits = history.commit_times()
            judged = {name: _judged(history.of(name), args.oracle, pg_dsn, args.json, commits) for name in names}
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


def _judged(history: LiveHistory, oracle: str, pg_dsn: str | None, as_json: bool, commits: DsvTimes) -> dict:
    """One warehouse's verdict and the figures printed beside it (`commits`: the sources' commit times)."""
    verdict = judge(history, oracle, pg_dsn, commits)
    logs = [p for p in history.run.message_logs().values() if p is not None]
    # The logs are read again only to explain a run that fell short.
    happenings = logged_happenings(read_message_logs(logs, history.run.subscriber)) \
        if verdict.anomalies and not as_json else None
    return {"history": history, "verdict": verdict, "messages": message_totals(history.run),
            "staleness": staleness_summary(history, commits), "happenings": happenings,
            "clocks": clock_skew(commits, first_receipts(history.run.message_logs()))}


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


def staleness_summary(history: LiveHistory, commits: DsvTimes) -> dict:
    """Seconds from each source commit (`commits`) to the first view state that reflects it, in
    the core (`applied`) and durable in the warehouse's store (`durable`): p50/p95/p99/max/mean and n."""
    seen = reflections(commits, history.run.warehouse_history, history.start_versions)
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


