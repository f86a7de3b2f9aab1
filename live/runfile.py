"""The run file: `run.json` at the root of a live run's directory, naming what the checker reads.

A live run leaves its history in several places: each source's committed transactions in its
database file (the outbox log), the warehouse's view states under its data directory
(fedmodel.change_history). The run file says where they are, with what the checker
needs besides (the catalog and the view's SQL), so that `fedlab check RUN_DIR` needs nothing
else. Written by whoever starts the run (live.federation, `fedlab warehouse`).

    {"format": 1, "catalog": Catalog.to_dict(), "view": "SELECT ...", "algorithm": "sze-ling",
     "sources": {"ds1": "ds1.sqlite", "ds2": null}, "warehouse_history": "warehouse/history",
     "warehouse_delta": "warehouse/delta", "history_sql": null, "warehouse_address": "127.0.0.1:5051",
     "subscribers": {"w2": {"view": "SELECT ...", "algorithm": "versioned",
                            "warehouse_history": "w2/history", "warehouse_delta": "w2/delta",
                            "history_sql": null, "warehouse_address": "127.0.0.1:5052"},
                     "q5": {"view": "SELECT ...", ..., "subscriber": "warehouse"}}}

The top-level fields describe the view kept by the warehouse subscribed to the sources by the
default name (fedmodel.messages.DEFAULT_SUBSCRIBER), and name it so; `subscribers`, when present,
the other views over the same sources, each by its name with the same fields, and `subscriber`:
the name of the warehouse keeping it at the sources, when that is not its own (a warehouse that
keeps several views: warehouse.view_group). Other warehouses: a run of several algorithms on one
stream (`fedlab bench --same-stream`), or of several warehouses (`fedlab run --warehouses`).
`RunFile.read(run_dir, name)` reads one view's entry as the run file of its warehouse, whose
figures and verdict are then that view's: the sources log what they exchange with every
subscriber in one file, and its message lines are those whose peer its warehouse is
(fedmodel.message_log.concerns; views that share a warehouse share its messages).

Paths inside the run directory are stored relative to it (the directory can be copied and checked
elsewhere), others absolute (or a URI: the Delta tables may be in an object store). A source whose
file is not reachable from here is null; so is the Delta store in run files written before
`fedlab view` read it. `metrics`, when present, says where each process of the run serves its
Prometheus metrics while it runs (`fedlab top` reads them). A PostgreSQL source is its connection string; when the run started a
private server for its sources, `postgres` names that server's data directory, which the checker
starts again to read them (each source's database is named after it), and their message logs are
`<source>.messages.jsonl` in the run directory. `warehouse_address` is where the run's warehouse
serves (gRPC) while it runs: `fedlab refresh` asks it to roll the view to a point in time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.message_log import WAREHOUSE_LOG, WAREHOUSE_NODE, source_log_path
from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER
from fedlab.source_node.engines import is_dsn

RUN_FILE = "run.json"
FORMAT = 1


class RunFileError(ModelError):
    """A missing or malformed run file."""


@dataclass
class RunFile:
    catalog: Catalog
    view_sql: str
    algorithm: str
    sources: dict[str, Path | str | None]   # source -> its database file (or PostgreSQL DSN), None when not reachable
    warehouse_history: Path
    warehouse_delta: str | None = None   # the warehouse's Delta tables (warehouse.store.delta_store)
    postgres: Path | None = None         # the data directory of the sources' private PostgreSQL server
    folder: Path | None = None           # the run directory (set when read)
    # The SQL of the states the history holds, when it is not the view's: the join an aggregate view
    # (fedmodel.aggregate_view) or an outer-join view (fedmodel.outer_join_view) is kept from, which
    # the checker judges (an outer join's as its terms' padded rows, none subsumed: the oracle's
    # terms_sql); the user's view is a function of its states.
    history_sql: str | None = None
    warehouse_address: str | None = None   # host:port of the warehouse's gRPC service, once it serves
    subscriber: str = DEFAULT_SUBSCRIBER    # the name the warehouse above subscribes to the sources by
    others: dict[str, "Subscriber"] = field(default_factory=dict)   # the other views, by name
    # Where each process serves its Prometheus metrics while the run goes on (`fedlab top`):
    # {"sources": {source: host:port}, "warehouses": {subscriber: host:port}, "load": host:port}
    metrics: dict = field(default_factory=dict)

    @property
    def judged_sql(self) -> str:
        return self.history_sql or self.view_sql

    def write(self, run_dir: str | os.PathLike) -> Path:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        own = Subscriber(self.view_sql, self.algorithm, self.warehouse_history, self.warehouse_delta,
                         self.history_sql, self.warehouse_address)
        doc = {"format": FORMAT, "catalog": self.catalog.to_dict(), **own.to_dict(run_dir),
               "sources": {s: _relative(p, run_dir) for s, p in self.sources.items()},
               "postgres": _relative(self.postgres, run_dir),
               **({"subscribers": {name: w.to_dict(run_dir) for name, w in self.others.items()}} if self.others else {}),
               **({"metrics": self.metrics} if self.metrics else {})}
        path = run_dir / RUN_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, path)   # a reader never sees half a file
        return path

    def message_logs(self) -> dict[str, Path | None]:
        """node -> where it keeps its message log (fedmodel.message_log), present or not; None for
        a source whose file is not reachable from here. The warehouse's node is WAREHOUSE_NODE; the
        sources' logs hold lines about every subscriber (read them with `self.subscriber`)."""
        logs = {source: None if db is None else source_log_path(self.folder / source if is_dsn(db) else db)
                for source, db in self.sources.items()}
        return {**logs, WAREHOUSE_NODE: self.warehouse_history / WAREHOUSE_LOG}

    @property
    def subscribers(self) -> list[str]:
        """Every view's name, the top-level one's (its warehouse's subscriber name) first."""
        return [self.subscriber, *self.others]

    def of(self, name: str) -> "RunFile":
        """The run file of the view `name` (RunFile.subscribers), its fields at the top level and
        its warehouse's subscriber name; RunFileError naming the run's views when it has none of
        that name."""
        if name == self.subscriber:
            return self
        w = self.others.get(name)
        if w is None:
            raise RunFileError(f"{self.folder / RUN_FILE if self.folder else RUN_FILE}: no subscriber named "
                               f"{name!r} (the run's: {', '.join(self.subscribers)})")
        return replace(self, **{f.name: getattr(w, f.name) for f in fields(w) if f.name != "subscriber"},
                       subscriber=w.subscriber or name, others={})

    @staticmethod
    def read(run_dir: str | os.PathLike, subscriber: str | None = None) -> "RunFile":
        """The run file in `run_dir`; with `subscriber`, that warehouse's (RunFile.of)."""
        run_dir = Path(run_dir)
        path = run_dir / RUN_FILE
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise RunFileError(f"{path}: no run file (is {run_dir} the directory of a live run?)") from None
        except (OSError, ValueError) as err:
            raise RunFileError(f"{path}: unreadable: {err}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise RunFileError(f"{path}: not a run file of format {FORMAT}")
        try:
            catalog = Catalog.from_dict(doc["catalog"], where=f"{path}: catalog")
            sources = doc["sources"]
            own = Subscriber.from_dict({"algorithm": "", **doc}, run_dir)   # files from before named none
            run = RunFile(catalog, own.view_sql, own.algorithm,
                          {str(s): p if p is not None and is_dsn(p) else _absolute(p, run_dir)
                           for s, p in sources.items()},
                          own.warehouse_history, own.warehouse_delta, _absolute(doc.get("postgres"), run_dir),
                          run_dir, own.history_sql, own.warehouse_address,
                          others={str(name): Subscriber.from_dict(w, run_dir)
                                  for name, w in doc.get("subscribers", {}).items()},
                          metrics=dict(doc.get("metrics", {})))
        except (KeyError, TypeError, AttributeError) as err:
            raise RunFileError(f"{path}: missing or malformed field {err}") from None
        return run if subscriber is None else run.of(subscriber)


@dataclass(frozen=True)
class Subscriber:
    """One warehouse over the run's sources: what the run file says of it, in the same fields for
    the top level's (RunFile's, by the same names) and for each other subscriber's."""

    view_sql: str
    algorithm: str
    warehouse_history: Path
    warehouse_delta: str | None = None
    history_sql: str | None = None
    warehouse_address: str | None = None
    subscriber: str | None = None   # the warehouse keeping it, when its name is not the entry's

    def to_dict(self, run_dir: Path) -> dict:
        return {"view": self.view_sql, "algorithm": self.algorithm,
                "warehouse_history": _relative(self.warehouse_history, run_dir),
                "warehouse_delta": _relative(self.warehouse_delta, run_dir), "history_sql": self.history_sql,
                "warehouse_address": self.warehouse_address,
                **({"subscriber": self.subscriber} if self.subscriber else {})}

    @staticmethod
    def from_dict(doc: dict, run_dir: Path) -> "Subscriber":
        return Subscriber(str(doc["view"]), str(doc["algorithm"]), _absolute(doc["warehouse_history"], run_dir),
                          _location(doc.get("warehouse_delta"), run_dir), doc.get("history_sql"),
                          doc.get("warehouse_address"), doc.get("subscriber"))


def history_sql(view) -> str | None:
    """The SQL of the states a warehouse of `view` (a ViewDef, an AggregateView or an OuterJoinView)
    keeps in its history, when it is not the view's own: an aggregate or outer-join view's join."""
    return None if view.join is view else view.join.sql


def _relative(path: Path | str | None, run_dir: Path) -> str | None:
    if path is None or "://" in str(path) or is_dsn(path):   # a URI or a DSN stays as it is
        return None if path is None else str(path)
    path = Path(path).resolve()
    try:
        return str(path.relative_to(run_dir.resolve()))
    except ValueError:
        return str(path)


def _absolute(path: str | None, run_dir: Path) -> Path | None:
    return None if path is None else (run_dir / path)


def _location(path: str | None, run_dir: Path) -> str | None:
    """A directory or a URI, as text (pathlib would turn "s3a://bucket" into "s3a:/bucket")."""
    return path if path is None or "://" in path else str(_absolute(path, run_dir))
