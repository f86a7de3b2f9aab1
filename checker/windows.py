"""A long run judged a window of view states at a time, in memory bounded by the data and the window.

The checker's whole-history judgment (checker.levels) holds every source transaction, with
its row images, and every view state at once: an hour at 200 transactions a second is 720,000 of
each, gigabytes. A run whose claims hold does not need them at once. Its states are judged in
windows of WINDOW states, in apply order, each against the oracle of that window alone
(checker.oracle with `start`: the sources' relations at the DSVs the window starts from
and their transactions up to the DSVs it reaches), the warehouse's view and the difference between
it and the true view carried from one window to the next (checker.replay). Only a
window's transactions are read from a source's log, CHUNK DSVs at a time; the relations are held
once, at the window's start, moved forward by its transactions.

This path settles one verdict only, the one a healthy run earns: complete consistency (Strobe
paper, section 4.2; Sze & Ling 2000). Every state equals the view at the vector it claims, the
claims never go back and each moves one transaction of one source past the one before, nothing is
lost or applied twice, and the last view is the view at the sources' final states. (A live run's
transactions are each one source's: no global transaction can be split, which it does not look for.) The first state
that breaks any of it ends the pass (`Shortfall`, with where and why): a run that falls short is
judged again whole, where the search for other source states and the named anomalies need every
state at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, Protocol

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.transactions import Notification
from fedlab.checker.oracle import Backend, Oracle, comparable
from fedlab.checker.replay import replay

WINDOW = 50_000   # view states judged together
CHUNK = 20_000    # a source's transactions read at once


class SourceLog(Protocol):
    """A source's committed history as the checker reads it: where it ended and its log."""

    dsv: int   # the DSV of the state `relations` is at: the last transaction the log must hold

    def relations(self) -> dict[str, list[tuple]]:
        """Every relation of the source at DSV `dsv`."""

    def read(self, first: int, last: int) -> list[Notification]:
        """The logged transactions from DSV `first` through `last`, in DSV order."""


@dataclass(frozen=True)
class LoadedLog:
    """A source's history held whole: its relations at DSV `dsv` and its transactions from any
    DSV on (a source read over gRPC, a simulated one)."""

    dsv: int
    at_end: dict[str, list[tuple]]
    log: list[Notification]

    def relations(self) -> dict[str, list[tuple]]:
        return self.at_end

    def read(self, first: int, last: int) -> list[Notification]:
        return [n for n in self.log if first <= n.dsv <= last]


class LogError(ValueError):
    """A source's log cannot be replayed: it misses transactions, or does not match its data."""


@dataclass(frozen=True)
class Shortfall:
    """Why a run is not judged complete in windows: the state it concerns (None: the whole run)
    and what was found. The whole-history judgment then says what went wrong."""

    state: int | None
    why: str


@dataclass(frozen=True)
class Complete:
    """A run judged complete in windows: its states and the source transactions they reflect."""

    states: int
    transactions: int
    windows: int


def judge(catalog: Catalog, view_sql: str, sources: dict[str, SourceLog], start_versions: dict[str, int],
          start_view: dict[tuple, int], states: Iterable[dict], backend: Backend, terms: bool = False,
          window: int = WINDOW) -> Complete | Shortfall:
    """Whether the run whose warehouse started from `start_view` at `start_versions` and went
    through `states` (dicts with "source", "dsv", "versions", "delta", in apply order) kept
    complete consistency over the sources' logs; see the module docstring. LogError when a
    source's log cannot be replayed."""
    order = sorted(catalog.sources)
    low = {s: start_versions.get(s, 1) for s in order}
    final = {s: sources[s].dsv for s in order}
    live = {s: _of(s, relations_at, catalog, sources[s], low[s]) for s in order}   # each relation's rows by key, at `at`
    at, claim, index, windows = dict(low), dict(low), 0, 0
    held = _comparable(start_view)
    for batch, last in _batches(states, window):
        claims = [{s: st["versions"].get(s, 1) for s in order} for st in batch]
        steps = (_step_shortfall(st, before, after, final) for st, before, after in zip(batch, [claim, *claims], claims))
        bad = next(((i, why) for i, why in enumerate(steps) if why), None)
        if bad is not None:   # the states before it are judged first: an earlier one may be the first wrong
            batch, claims, last = batch[:bad[0]], claims[:bad[0]], False
        top = final if last else (claims[-1] if claims else claim)
        history = {s: _of(s, read_log, sources[s], at[s] + 1, top[s]) for s in order}
        oracle = Oracle(catalog, view_sql, {name: list(rows.values()) for s in order for name, rows in live[s].items()},
                        history, backend, terms, start=at)
        truth = oracle.changes_along([claim, *claims, top])
        walked = replay(truth, [{"delta": _comparable(st["delta"])} for st in batch], held)
        if walked.first is not None:
            i = walked.first[0]
            return Shortfall(None if i is None else index + i,
                             "the view it started from is not the view where the sources started" if i is None
                             else "it is not the view at the source state it claims")
        if bad is not None:
            return Shortfall(index + bad[0], bad[1])
        for s in order:
            _forward(catalog, live[s], history[s])
        # every state held, so the last one's view is the true view at its claim: the next window's start
        held = walked.true_final
        at, claim, index, windows = top, (claims[-1] if claims else claim), index + len(batch), windows + 1
    if claim != final:
        return Shortfall(None, f"the last state's claim {claim} does not reach every source's last commit {final}")
    return Complete(index, sum(final[s] - low[s] for s in order), windows)


def _of(source: str, read, *args):
    """`read(*args)`, its LogError naming `source`."""
    try:
        return read(*args)
    except LogError as err:
        raise LogError(f"source {source}: {err}") from None


def _step_shortfall(state: dict, before: dict[str, int], after: dict[str, int], final: dict[str, int]) -> str | None:
    """Why a state's claim `after`, following `before`, is not one step of a complete run (None: it is)."""
    moved = [s for s in after if after[s] != before[s]]
    if any(after[s] < before[s] for s in after):
        return f"its claim {after} goes below the one before it ({before})"
    if len(moved) != 1 or after[moved[0]] != before[moved[0]] + 1:
        return f"its claim {after} moves past more or fewer than one transaction from {before}"
    if (moved[0], after[moved[0]]) != (state["source"], state["dsv"]):
        return f"it applies {state['source']}:{state['dsv']} but claims {moved[0]}:{after[moved[0]]}"
    if after[moved[0]] > final[moved[0]]:
        return f"its claim reaches past what {moved[0]} committed (DSV {final[moved[0]]})"
    return None


def _batches(states: Iterable[dict], size: int) -> Iterator[tuple[list[dict], bool]]:
    """The states `size` at a time, each batch with whether it is the last (there is always one)."""
    batch: list[dict] = []
    for state in states:
        if len(batch) == size:
            yield batch, False
            batch = []
        batch.append(state)
    yield batch, True


def _comparable(rows: dict[tuple, int]) -> dict[tuple, int]:
    """Rows keyed as the oracle keys its own (oracle.comparable), counts of rows that become one
    added up."""
    out: dict[tuple, int] = {}
    for row, count in rows.items():
        key = tuple(comparable(v) for v in row)
        out[key] = out.get(key, 0) + count
    return {r: c for r, c in out.items() if c}


def read_log(log: SourceLog, first: int, last: int) -> list[Notification]:
    """The log's transactions `first` through `last`, CHUNK at a time, every one of them there."""
    out: list[Notification] = []
    for lo in range(first, last + 1, CHUNK):
        hi = min(last, lo + CHUNK - 1)
        notes = log.read(lo, hi)
        if [n.dsv for n in notes] != list(range(lo, hi + 1)):
            held = f"{notes[0].dsv}..{notes[-1].dsv}" if notes else "none"
            raise LogError(f"its log holds DSVs {held} of {lo}..{hi}: transactions the check needs are gone "
                           "(a log with retention keeps only its newest)")
        out += notes
    return out


def relations_at(catalog: Catalog, log: SourceLog, dsv: int) -> dict[str, dict[tuple, tuple]]:
    """The source's relations at `dsv`, by key: its relations where its log ends, with its
    transactions back to `dsv` undone, newest first, CHUNK at a time."""
    tables = {name: {catalog.relation(name).key_of(r): tuple(r) for r in rows} for name, rows in log.relations().items()}
    for hi in range(log.dsv, dsv, -CHUNK):
        for n in reversed(read_log(log, max(dsv + 1, hi - CHUNK + 1), hi)):
            for change in n.changes:
                rel = catalog.relation(change.relation)
                table = tables[rel.name]
                for row in change.added:
                    if table.pop(rel.key_of(row), None) != tuple(row):
                        raise LogError(f"the log does not match the data: DSV {n.dsv} added {list(row)} to "
                                       f"{rel.name}, which does not hold it")
                for row in change.removed:
                    table[rel.key_of(row)] = tuple(row)
    return tables


def _forward(catalog: Catalog, tables: dict[str, dict[tuple, tuple]], notes: list[Notification]) -> None:
    """The source's relations moved forward by its transactions `notes`, in place."""
    for n in notes:
        for change in n.changes:
            rel = catalog.relation(change.relation)
            table = tables[rel.name]
            for row in change.removed:
                table.pop(rel.key_of(row), None)
            for row in change.added:
                table[rel.key_of(row)] = tuple(row)
