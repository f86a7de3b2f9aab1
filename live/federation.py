"""A live federation on this machine (docs/architecture.md 6, embedded default): a local Ray instance with one
source actor per source (gRPC + SQLite, or DuckDB), the warehouse in this process (Spark local + Delta
tables under the run directory), and a client that commits transactions at the sources.

Used by `fedlab demo`, `fedlab run` and the integration tests; everything it starts it stops.
The run directory gets a run file (live.runfile), so `fedlab check RUN_DIR` can judge the run.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import grpc
import ray

from fedlab.fedio.channels import TlsFiles, client_channel
from fedlab.fedio.metrics_endpoint import MetricsEndpoint, new_registry
from fedlab.fedmodel.aggregate_view import parse_query
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.codec import decode_rows
from fedlab.fedmodel.errors import ModelError, first_line
from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER, VIEW_METADATA, to_pb
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.fedmodel.viewdef import read_at
from fedlab.fedmodel.wire import pb, rpc
from fedlab.checker.pg_server import PostgresServer
from fedlab.live.environment import stderr_to
from fedlab.live.runfile import RunFile, Subscriber, history_sql
from fedlab.loadgen.driver import grpc_committer
from fedlab.loadgen.metrics import LoadCollector
from fedlab.source_node.actor import start_source_actor
from fedlab.source_node.control import SourceControl, wait_for_address
from fedlab.source_node.engines import DEFAULT_ENGINE, file_name, open_store
from fedlab.source_node.probes import probed_columns
from fedlab.source_node.ray_runtime import start_ray
from fedlab.source_node.settings import SourceSettings
from fedlab.warehouse.incarnation import Incarnation
from fedlab.warehouse.service import Warehouse, delta_dir, from_pb_rows
from fedlab.warehouse.settings import WarehouseSettings
from fedlab.warehouse.store.materialize import materialize
from fedlab.warehouse.view_group import ViewGroup


def prepare_source_files(catalog: Catalog, initial: dict[str, list[tuple]], folder: Path,
                         engine: str = DEFAULT_ENGINE) -> Path:
    """Writes every source's database, holding `initial`, into `folder` (once: existing files are
    kept) for Federation(initial=folder): runs that start from the same data copy a file
    instead of loading and checking hundreds of thousands of rows again."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for source in catalog.sources:
        path = folder / file_name(source, engine)
        if not path.exists():
            write_source_file(catalog, source, initial, path, engine)
    return folder


def write_source_file(catalog: Catalog, source: str, initial: dict[str, list[tuple]], path: Path,
                      engine: str) -> None:
    """Writes `source`'s database at `path`, holding its relations' rows of `initial`. The actor
    then opens a file, never receives the rows: Ray would keep large constructor arguments in its
    object store for as long as the actor may restart."""
    partial = path.with_name(path.name + ".partial")   # a crash leaves no half-loaded file behind
    partial.unlink(missing_ok=True)
    open_store(catalog, source, partial, engine,
               {r.name: initial.get(r.name, []) for r in catalog.relations_at(source)}).close()
    for suffix in ("-wal", "-shm", ""):   # the main file last: its name says the rest is there
        if Path(f"{partial}{suffix}").exists():
            Path(f"{partial}{suffix}").rename(f"{path}{suffix}")


def source_log_keep(settings: WarehouseSettings) -> float | None:
    """Seconds a source's log and message log keep under the warehouse's history retention: twice
    as long, so that a checker finds every transaction after the first view the history keeps
    (fedmodel.change_history: at most one and a half retentions back, plus the last transactions
    in flight then); None: all."""
    return None if settings.history_retention is None else 2 * settings.history_retention


class Federation:
    def __init__(self, catalog: Catalog, view_sql: str, initial: dict[str, list[tuple]] | Path, run_dir: str | Path,
                 spark, warehouse: WarehouseSettings = WarehouseSettings(), tls: TlsFiles | None = None,
                 source_engine: str = DEFAULT_ENGINE, log_retention: dict[str, int] | None = None,
                 capture: str | None = None):
        """`initial`: the initial rows per relation, or a folder of source databases holding them
        already (prepare_source_files), copied for the sources to start from instead of loading
        the rows again; `warehouse`: the warehouse's algorithm and settings (warehouse.settings);
        `tls`: mutual TLS on every channel (sources, warehouse, this client), e.g. the throwaway
        certificates of roles.certs; `source_engine`: the sources' database
        (source_node.engines), each told the column sets the view's sub-queries probe;
        `log_retention`: per source, how many notifications its outbox keeps at most (unbounded by
        default), so that a lost one can be gone for good; `capture`: a PostgreSQL source's
        (source_node.engines: triggers by default, or logical)."""
        self.catalog = catalog
        self.tls = tls
        self.view_sql = view_sql
        self.initial = initial
        self.run_dir = Path(run_dir)
        self.spark = spark
        self.settings = warehouse
        self.log_retention = log_retention or {}
        self.source_engine = source_engine
        self.capture = capture
        self.actors: dict = {}
        self.postgres = None   # the sources' private PostgreSQL server (source_engine "postgres")
        self.addresses: dict[str, str] = {}
        self.stubs: dict[str, rpc.SourceStub] = {}
        self.warehouse_address = ""
        # The views kept, by warehouse (its subscriber name at the sources), each by the name the run
        # file gives it, which also names its folder in the run directory: what each warehouse is
        # started with, and again after a kill. The first is the federation's own warehouse (the
        # default subscriber) with the federation's view, named so (its folder `warehouse`).
        self._plans: dict[str, dict[str, tuple[WarehouseSettings, str]]] = {
            DEFAULT_SUBSCRIBER: {DEFAULT_SUBSCRIBER: (warehouse, view_sql)}}
        self.groups: dict[str, ViewGroup] = {}   # the warehouses running, by subscriber name
        self._addresses: dict[str, str] = {}     # where each serves
        # where each process serves its Prometheus metrics (the run file's `metrics`)
        self.metrics: dict = {"sources": {}, "warehouses": {}}
        self._load_metrics: MetricsEndpoint | None = None
        self._run_file_lock = threading.Lock()

    @property
    def warehouse(self) -> Warehouse | None:
        """The federation's view, kept by its own warehouse."""
        group = self.groups.get(DEFAULT_SUBSCRIBER)
        return group.first if group is not None else None

    @property
    def views(self) -> dict[str, Warehouse]:
        """Every view kept, by its name in the run file (the federation's own: DEFAULT_SUBSCRIBER)."""
        return {name: w for group in self.groups.values() for name, w in group.views.items()}

    def add_view(self, name: str, view_sql: str, settings: WarehouseSettings | None = None,
                 subscriber: str = DEFAULT_SUBSCRIBER) -> None:
        """Before start: another view, `view_sql` kept by `settings` (default the federation's
        warehouse's; another algorithm, say), its Delta tables and history under <run>/<name>, named
        in the run file. It is kept by the warehouse subscribed to the sources as `subscriber`: by
        default the federation's own, whose views share its notifications and connections
        (warehouse.view_group); another name starts another warehouse for it (and for any other
        view added with that name), subscribed for the relations its views read."""
        if self.groups:
            raise ModelError(f"view {name!r}: views are added before the federation starts")
        if any(name in plan for plan in self._plans.values()):
            raise ModelError(f"view {name!r} is kept once")
        self._plans.setdefault(subscriber, {})[name] = (settings or self.settings, view_sql)

    def start(self, ray_temp_dir: str | None = None) -> "Federation":
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with stderr_to(self.run_dir / "ray.log"):
            start_ray(temp_dir=ray_temp_dir)
        probes = list(dict.fromkeys(probe for plan in self._plans.values() for _, sql in plan.values()
                                    for probe in probed_columns(parse_query(sql, self.catalog).join)))
        if self.source_engine == "postgres":
            self._start_postgres()
        for source in self.catalog.sources:
            if self.postgres is None:
                self._write_source_file(source)
            settings = SourceSettings(tls=self.tls, engine=self.source_engine, capture=self.capture, probes=probes,
                                      log_retention=self.log_retention.get(source),
                                      log_keep_seconds=source_log_keep(self.settings), metrics_port=0)
            self.actors[source] = start_source_actor(self.catalog, source, self._db_path(source), settings=settings,
                                                     home=self.run_dir)
        self.addresses = {source: wait_for_address(source, self.tls) for source in self.actors}
        self.stubs = {s: rpc.SourceStub(client_channel(a, self.tls)) for s, a in self.addresses.items()}
        for source in self.actors:
            self.metrics["sources"][source] = self.control(source).health()["metrics"]
        self._committer = grpc_committer(self.catalog, self.stubs, reconnect=self.refresh_address)
        for subscriber in self._plans:
            if subscriber != DEFAULT_SUBSCRIBER:   # subscribed before it reads the snapshots
                self._subscribe(subscriber, None)
            self._start_group(subscriber)
        return self

    def _write_run_file(self) -> None:
        """The run file: the federation's view at the top level, the others beside it, each with
        its warehouse's address once it serves (a restarted one's anew), and where each process
        serves its metrics. The load's thread writes it too, when a source moved."""
        entries = {name: Subscriber(sql, settings.algorithm, self.run_dir / name / "history",
                                    delta_dir(str(self.run_dir / name)),
                                    history_sql(parse_query(sql, self.catalog)), self._addresses.get(subscriber),
                                    subscriber if subscriber != name else None)
                   for subscriber, plan in self._plans.items() for name, (settings, sql) in plan.items()}
        own = entries.pop(DEFAULT_SUBSCRIBER)
        with self._run_file_lock:
            RunFile(self.catalog, own.view_sql, own.algorithm, {s: self._db_path(s) for s in self.catalog.sources},
                    own.warehouse_history, own.warehouse_delta, self.postgres.data if self.postgres else None,
                    history_sql=own.history_sql, warehouse_address=own.warehouse_address,
                    others=entries, metrics=self.metrics).write(self.run_dir)

    def restart_warehouse(self) -> None:
        """Stops the warehouse as a crash would (nothing more committed) and starts a new one on the
        same Delta tables: it restores the view, the version state and the notifications received
        but not applied; sources resend what it had not acknowledged. (The process-level kill is
        tests/test_process_chaos.py, with `fedlab warehouse` in its own process.)"""
        self.groups.pop(DEFAULT_SUBSCRIBER).close(commit=False)
        self._start_group(DEFAULT_SUBSCRIBER)

    def add_subscriber(self, name: str, settings: WarehouseSettings | None = None,
                       view_sql: str | None = None) -> Warehouse:
        """Once started: another warehouse, subscribed to every source as `name`
        (source_node.subscriptions) for the relations its view reads there, keeping `view_sql`
        (default the federation's view) by `settings` (default the federation's warehouse's),
        its Delta tables and history under <run>/<name>, named in the run file. It subscribes
        before it reads the sources' snapshots, so that it lacks nothing committed after them, and
        is told where to send once it serves."""
        self._plans[name] = {name: (settings or self.settings, view_sql or self.view_sql)}
        self._subscribe(name, None)
        return self._start_group(name).first

    def kill_subscriber(self, name: str) -> None:
        """Stops the warehouse `name` as a crash would (nothing more committed); its sources keep
        what it has not acknowledged, and the others go on."""
        self.groups.pop(name).close(commit=False)

    def restart_subscriber(self, name: str) -> Warehouse:
        """A new warehouse `name` on the killed one's Delta tables (as restart_warehouse)."""
        return self._start_group(name).first

    def _start_group(self, subscriber: str) -> ViewGroup:
        """Starts the warehouse `subscriber` with its views: each restores from its Delta tables
        or materialises from the sources' snapshots; once it serves, the sources send to it."""
        incarnation = Incarnation()
        group = ViewGroup({name: Warehouse(self.catalog, sql, self.run_dir / name, self.addresses, self.spark,
                                           replace(settings, subscriber=subscriber), tls=self.tls, incarnation=incarnation)
                           for name, (settings, sql) in self._plans[subscriber].items()}, self.tls)
        # Registered before it opens, which takes seconds: a source actor restarted meanwhile on a
        # new port reaches it by refresh_address, and one restarted while it was built, here.
        self.groups[subscriber] = group
        for source, address in self.addresses.items():
            if group.first.sources[source] != address:
                group.set_source_address(source, address)
        self._write_run_file()
        group.open()
        address = self._addresses[subscriber] = f"127.0.0.1:{group.serve(metrics_port=0)}"
        self.metrics["warehouses"][subscriber] = f"127.0.0.1:{group.metrics_port}"
        self._write_run_file()
        if subscriber == DEFAULT_SUBSCRIBER:
            self.warehouse_address = address
            # A source killed beside the warehouse may still be restarting (a restore takes well
            # under a second): _call waits for its new address and tries again.
            for source in self.actors:
                self._call(source, lambda stub, s=source: SourceControl(self.addresses[s], stub=stub).set_warehouse(address))
        else:
            self._subscribe(subscriber, address)
        return group

    def _subscribe(self, subscriber: str, address: str | None) -> None:
        """Subscribes `subscriber` at every source for the relations its views read there."""
        joins = [parse_query(sql, self.catalog).join for _, sql in self._plans[subscriber].values()]
        for source in self.actors:
            self.control(source).subscribe(subscriber, address, read_at(joins, source))

    def _db_path(self, source: str) -> Path | str:
        """The source's database file, or for PostgreSQL its database's connection string."""
        if self.postgres is not None:
            return self.postgres.dsn_for(source)
        return self.run_dir / file_name(source, self.source_engine)

    def _write_source_file(self, source: str) -> None:
        """The source's database file, copied from the prepared ones or written with the rows."""
        if isinstance(self.initial, Path):
            prepared = self.initial / file_name(source, self.source_engine)
            for suffix in ("", "-wal", "-shm"):
                if Path(f"{prepared}{suffix}").exists():
                    shutil.copyfile(f"{prepared}{suffix}", f"{self._db_path(source)}{suffix}")
        else:
            write_source_file(self.catalog, source, self.initial, self._db_path(source), self.source_engine)

    def _start_postgres(self) -> None:
        """A private PostgreSQL server with its data in RUN_DIR/postgres (so `fedlab check` can start
        it again), a database per source named after it, created with the initial rows."""
        if isinstance(self.initial, Path):
            raise ModelError("PostgreSQL sources start from rows, not from prepared source files")
        self.postgres = PostgresServer.start(data=self.run_dir / "postgres")
        for source in self.catalog.sources:
            open_store(self.catalog, source, self.postgres.database(source), "postgres",
                       {r.name: self.initial.get(r.name, []) for r in self.catalog.relations_at(source)},
                       capture=self.capture).close()

    def commit(self, source: str, request: TransactionRequest) -> pb.CommitReply:
        return self._call(source, lambda stub: stub.Commit(to_pb(request, self.catalog), timeout=30))

    def commit_batch(self, source: str, requests: list[TransactionRequest]) -> list:
        """Commits `requests` at `source` as one group (CommitBatch); one outcome per request, in
        order: its CommitReply, or a ModelError saying why the source rejected it. A group whose
        outcome went unheard is sent again, never committed twice (driver.grpc_committer)."""
        return self._committer(source, requests)

    def source_versions(self) -> dict[str, int]:
        return {s: self._call(s, lambda stub: stub.Health(pb.HealthRequest(), timeout=30).dsv) for s in self.stubs}

    def _call(self, source: str, rpc_call):
        """One RPC to a source; if its server is unreachable, the actor may have been restarted on
        a new port: ask Ray for its address, re-point this client and the warehouse, try once more.
        The address may have been refreshed by another thread (the load) since this call failed:
        the call goes again whenever the stub it failed on is no longer the source's.
        UNAVAILABLE from a server that is gone means the request never reached it; a crash in the
        middle of a commit can also end in UNAVAILABLE, so callers kill actors between commits."""
        stub = self.stubs[source]
        try:
            return rpc_call(stub)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            self.refresh_address(source)
            if self.stubs[source] is stub:
                raise
        return rpc_call(self.stubs[source])

    def control(self, source: str) -> SourceControl:
        """The operator's calls to `source` (source_node.control), over the federation's channel."""
        return SourceControl(self.addresses[source], stub=self.stubs[source])

    def refresh_address(self, source: str) -> bool:
        """Re-reads the actor's address (waiting while Ray restarts it); True if it changed."""
        address = wait_for_address(source, self.tls)
        if address == self.addresses[source]:
            return False
        self.addresses[source] = address
        self.stubs[source] = rpc.SourceStub(client_channel(address, self.tls))
        for group in self.groups.values():
            group.set_source_address(source, address)
        try:   # its metrics serve on a new port too
            self.metrics["sources"][source] = self.control(source).health()["metrics"]
        except grpc.RpcError:   # gone again: the next refresh reads it
            pass
        self._write_run_file()
        return True

    def metrics_lines(self) -> list[str]:
        """Where each process serves its metrics, a line each, as run and demo print them first."""
        m = self.metrics
        return [*(f"metrics of source {s}: http://{a}/metrics" for s, a in m["sources"].items()),
                *(f"metrics of warehouse {w}: http://{a}/metrics" for w, a in m["warehouses"].items()),
                *([f"metrics of the load: http://{m['load']}/metrics"] if "load" in m else []),
                f"watch them with: fedlab top {self.run_dir}"]

    def serve_load_metrics(self, result) -> str:
        """Serves the metrics of the load driving this federation from this process
        (loadgen.metrics: `result` is the loadgen.driver.DriveResult it fills), named in the run
        file; returns where."""
        registry = new_registry()
        registry.register(LoadCollector(result))
        self._load_metrics = MetricsEndpoint.serve(registry, "127.0.0.1", 0)
        self.metrics["load"] = self._load_metrics.address
        self._write_run_file()
        return self.metrics["load"]

    def wait_until_applied(self, timeout: float = 120.0, warehouse: Warehouse | None = None) -> bool:
        """Waits until the view (of `warehouse`, default the first) reflects every committed
        transaction of every source (asked at least once, whatever the timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            target = self.source_versions()
            applied = (warehouse or self.warehouse).status()["applied_dsv"]
            if all(applied.get(s, 0) >= d for s, d in target.items()):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    def snapshots(self) -> tuple[dict, dict[str, int]]:
        """Every relation's rows, read at one state per source, and those states' DSVs."""
        snaps, dsv = {}, {}
        for source, stub in self.stubs.items():
            for chunk in stub.Snapshot(pb.SnapshotRequest(), timeout=600):
                rel = self.catalog.relation(chunk.relation)
                snaps.setdefault(rel.name, (list(rel.columns), list(rel.types), []))[2].extend(from_pb_rows(rel, chunk.rows))
                dsv[source] = chunk.dsv
        for rel in self.catalog.relations:
            snaps.setdefault(rel.name, (list(rel.columns), list(rel.types), []))
        return snaps, dsv

    def recompute(self) -> dict[tuple, int]:
        """The view recomputed from scratch over current source snapshots (a Spark job)."""
        snaps, _ = self.snapshots()
        return materialize(self.spark, self.view_sql, snaps)

    def read_view(self, view: str | None = None) -> dict[tuple, int]:
        """The view (`view`: one of the federation's warehouse's, by name) as the warehouse serves
        it over gRPC (ReadView), count last."""
        stub = rpc.WarehouseStub(client_channel(self.warehouse_address, self.tls))
        out = {}
        metadata = ((VIEW_METADATA, view),) if view is not None else ()
        for chunk in stub.ReadView(pb.ReadViewRequest(), timeout=60, metadata=metadata):
            for row in decode_rows(chunk.rows)[1]:
                out[tuple(row[:-1])] = row[-1]
        return out

    def stop(self) -> None:
        if self._load_metrics is not None:
            self._load_metrics.close()
            self._load_metrics = None
        for group in self.groups.values():   # kept, closed: what they hold can still be read
            group.close()
        for source, actor in self.actors.items():
            try:
                self.control(source).stop()
                ray.get(actor.stop.remote(), timeout=30)   # delivered once the node has stopped
            except Exception as err:   # it may still hold its port or database: say so, stop the rest
                if not _already_gone(err):
                    print(f"source {source}: its actor did not stop cleanly ({type(err).__name__}: "
                          f"{first_line(err)}); killed", file=sys.stderr)
            ray.kill(actor, no_restart=True)
        self.actors.clear()
        if self.postgres is not None:
            self.postgres.stop()   # its data stays in the run directory, for the checker
            self.postgres = None


def _already_gone(err: Exception) -> bool:
    """A source actor Ray reports dead, or one whose server no longer answers (gone, or restarting):
    nothing left to stop."""
    if isinstance(err, grpc.RpcError):
        return err.code() == grpc.StatusCode.UNAVAILABLE
    return isinstance(err, ray.exceptions.RayActorError)
