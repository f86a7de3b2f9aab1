"""`fedlab load`: commit the configured workload at the sources (the chart's load role).

Reads the run configuration (run.yaml), waits for the sources and the warehouse to answer (the
view is then materialised, and sees the whole load), reads what the sources hold, loads the
initial data, then drives update transactions open-loop at --rate for --duration
(loadgen.driver.drive, one client per source, over gRPC CommitBatch) and prints the achieved rate.
Finally it waits (--settle) until the warehouse's Status shows every committed transaction
applied and durable in Delta (what the checker reads), and writes a summary to <run dir>/load.json.

Workloads (run.yaml `workload`):
  kind: synthetic   loadgen.synthetic_load over the configured catalog: initialRows (per
                    relation, default 1000), mix {insert, delete, modify}, skew (Zipf; 0: uniform)
  kind: tpch        loadgen.workload's TPC-H streams: scale (default 0.01), stream (rf, mixed,
                    skewed; default mixed), data_dir (tpchgen-cli's cache); the catalog must hold
                    the TPC-H relations. Empty sources are first loaded with the generated data.
--tls-cert, --tls-key and --tls-ca (all three or none): mutual TLS to the sources and the warehouse.
Exit status: 0 when the load ran and the view caught up, 1 when it did not, 2 on bad input.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from pathlib import Path
from typing import Callable

import grpc

from fedlab.fedio.channels import client_channel
from fedlab.fedmodel.codec import decode_rows
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import VIEW_METADATA
from fedlab.fedmodel.transactions import TransactionRequest
from fedlab.fedmodel.wire import pb, rpc
from fedlab.roles.chaos_k8s import ChaosError, parse_duration
from fedlab.roles.process import RoleError, add_metrics_argument, add_tls_arguments, default_host, fail, tls_files
from fedlab.roles.runconfig import RunConfig, load_config
from fedlab.loadgen.driver import DriveResult, drive, grpc_committer

_TPCH_BATCH = 2000          # rows per initial-load transaction of the TPC-H data


def add_arguments(parser) -> None:
    parser.add_argument("--config", required=True, metavar="FILE", help="run configuration (run.yaml)")
    parser.add_argument("--duration", help="how long to drive, e.g. 120s, 2m (default: the config's load.duration)")
    parser.add_argument("--rate", type=float, help="transactions per second (default: the config's load.rate)")
    parser.add_argument("--seed", type=int, help="seed of the update stream (default: the config's run.seed)")
    parser.add_argument("--wait", type=float, default=600.0, metavar="SECONDS",
                        help="how long to wait for the sources and the warehouse to answer (default 600)")
    parser.add_argument("--settle", type=float, default=600.0, metavar="SECONDS",
                        help="how long to wait for the view to catch up after the load (default 600; 0: do not wait)")
    add_tls_arguments(parser)
    add_metrics_argument(parser)


def main(args) -> int:
    try:
        tls = tls_files(args)
        config = load_config(args.config)
        duration = parse_duration(args.duration or config.load.get("duration") or "60s")
        rate = args.rate if args.rate is not None else float(config.load.get("rate") or 10)
        if not rate > 0:
            raise RoleError(f"--rate must be positive, got {rate:g}")
    except (ModelError, RoleError, ChaosError, ValueError) as err:
        return fail("load", err)
    seed = args.seed if args.seed is not None else config.seed
    sources = {s: rpc.SourceStub(client_channel(a, tls)) for s, a in config.addresses.items()}
    try:
        _wait_for_federation(config, sources, tls, args.wait)
        initial, stream = _workload(config, _current_rows(config, sources, args.wait), seed)
    except (ModelError, RoleError, ValueError) as err:
        return fail("load", err)

    commit_batch = grpc_committer(config.catalog, sources)
    loaded = 0
    for source, request in initial:
        outcome, = commit_batch(source, [request])
        if isinstance(outcome, ModelError):
            raise outcome
        loaded += sum(len(rows) for rows in request.inserts.values())
    print(f"initial data: {loaded} rows inserted", flush=True)

    reported = [0]   # the last 10-second mark a progress line was printed for

    def progress(elapsed: float, result) -> None:
        if int(elapsed) // 10 > reported[0]:
            reported[0] = int(elapsed) // 10
            print(f"  {elapsed:5.0f} s: offered {result.offered}, committed {result.committed}, "
                  f"rejected {result.rejected}", flush=True)
    result = DriveResult()
    try:
        _serve_metrics(result, args.metrics_port)
    except ModelError as err:
        return fail("load", err)
    print(f"driving {rate:g} txn/s for {duration:g} s", flush=True)   # the e2e times its faults from here
    drive(commit_batch, stream, sorted(sources), rate, duration, progress, result=result)
    print(f"load: offered {result.offered}, committed {result.committed}, rejected {result.rejected} in "
          f"{result.seconds:.1f} s; achieved rate {result.achieved_rate:.1f} txn/s (target {rate:g})", flush=True)
    for line in result.rejections():
        print(f"  rejected: {line}", file=sys.stderr)
    caught_up = _wait_until_applied(config, sources, args.settle, tls) if args.settle > 0 else None
    if caught_up is not None:
        print("the view reflects every commit" if caught_up else
              f"the view did not catch up within {args.settle:g} s", flush=True)
    if config.run_dir is not None:
        config.run_dir.mkdir(parents=True, exist_ok=True)
        (config.run_dir / "load.json").write_text(json.dumps({
            "initial_rows": loaded, "offered": result.offered, "committed": result.committed,
            "rejected": result.rejected, "rejections": result.rejections(), "seconds": round(result.seconds, 3), "target_rate": rate,
            "achieved_rate": round(result.achieved_rate, 2), "caught_up": caught_up}, indent=2) + "\n")
    return 0 if caught_up is not False and result.committed else 1


def _serve_metrics(result: DriveResult, port: int | None) -> None:
    """The load's Prometheus endpoint (loadgen.metrics), with a port; it serves until the process ends."""
    if port is None:
        return
    from fedlab.fedio.metrics_endpoint import MetricsEndpoint, new_registry
    from fedlab.loadgen.metrics import LoadCollector

    registry = new_registry()
    registry.register(LoadCollector(result))
    endpoint = MetricsEndpoint.serve(registry, default_host(), port)
    print(f"load metrics on port {endpoint.port}", flush=True)


def _workload(config: RunConfig, current: dict[str, list[tuple]], seed: int):
    """(initial-load transactions, update stream) for the configured workload."""
    spec = dict(config.workload)
    kind = spec.pop("kind", "synthetic")
    if kind == "synthetic":
        from fedlab.loadgen.synthetic_load import SyntheticStream

        stream = SyntheticStream(config.catalog, config.view.join, current, spec.get("mix"), spec.get("skew", 0.0), seed)
        return stream.initial_load(int(spec.get("initialRows", 1000))), stream
    if kind == "tpch":
        from fedlab.loadgen.tpch import generate
        from fedlab.loadgen.workload import Workload

        data = current
        initial = []
        if not any(current.values()):
            scale = float(spec.get("scale", 0.01))
            data = generate(scale, str(Path(spec.get("data_dir") or "/tmp/fedlab-tpch") / f"sf{scale:g}"))
            initial = [(rel.source, TransactionRequest(f"load-{rel.name}-{i}", inserts={rel.name: rows[i:i + _TPCH_BATCH]}))
                       for rel in config.catalog.relations if (rows := data.get(rel.name, []))
                       for i in range(0, len(rows), _TPCH_BATCH)]
        return initial, Workload.named(str(spec.get("stream", "mixed"))).stream(config.catalog, data, seed)
    raise RoleError(f"workload kind {kind!r} is not supported by fedlab load (synthetic or tpch)")


def _wait_for_federation(config: RunConfig, sources: dict, tls, wait: float) -> None:
    """Waits until every source answers, then the warehouse if there is one (it answers once it
    has materialised or restored the view, so the view starts before the load and sees all of it)."""
    calls = [(f"source {name}", lambda stub=stub: stub.Health(pb.HealthRequest(), timeout=10))
             for name, stub in sources.items()]
    if config.warehouse_address:
        calls += [(f"the warehouse's view {name}", status) for name, status in _statuses(config, tls).items()]
    deadline = time.monotonic() + wait
    for who, call in calls:
        _answered(who, call, deadline)


def _answered(who: str, call, deadline: float):
    """What `call()` returns, asked again every 2 s while it fails (the peer restarting, paused or
    cut off, which the nemesis does at any moment) until `deadline`; then RoleError naming `who`."""
    while True:
        try:
            return call()
        except grpc.RpcError as err:
            if time.monotonic() > deadline:
                raise RoleError(f"{who} did not answer before --wait ran out ({err.code().name})") from None
            time.sleep(2)


def _statuses(config: RunConfig, tls) -> dict[str, Callable[[], pb.StatusReply]]:
    """Each view's Status call (warehouse.view_group), at the warehouse that keeps it, by view."""
    stubs = {w: rpc.WarehouseStub(client_channel(config.address_of(w), tls)) for w in config.warehouse_names}
    return {v.name: functools.partial(stubs[w].Status, pb.StatusRequest(), timeout=10,
                                      metadata=((VIEW_METADATA, v.name),))
            for w in config.warehouse_names for v in config.kept_by(w)}


def _current_rows(config: RunConfig, sources: dict, wait: float) -> dict[str, list[tuple]]:
    """Every source's rows now, each source's read whole again if its snapshot stream broke."""
    rows = {r.name: [] for r in config.catalog.relations}
    deadline = time.monotonic() + wait
    for name, stub in sources.items():
        chunks = _answered(f"source {name}'s snapshot",
                           lambda stub=stub: list(stub.Snapshot(pb.SnapshotRequest(), timeout=600)), deadline)
        for chunk in chunks:
            rows[config.catalog.relation(chunk.relation).name].extend(decode_rows(chunk.rows)[1])
    return rows


def _wait_until_applied(config: RunConfig, sources: dict, settle: float, tls) -> bool | None:
    """Whether the warehouse came to reflect every commit at the sources; None with no warehouse address."""
    if not config.warehouse_address:
        return None
    statuses = _statuses(config, tls)
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        try:
            target = {s: stub.Health(pb.HealthRequest(), timeout=10).dsv for s, stub in sources.items()}
            # Durable as well as applied: the checker judges the warehouse's durable history, which
            # a restarted warehouse's Delta batches catch up on after its core moves again.
            replies = [status() for status in statuses.values()]
            reached = [r.applied_dsv for r in replies] + [r.durable_dsv for r in replies]
            if all(a.get(s, 0) >= d for a in reached for s, d in target.items()):
                return True
        except grpc.RpcError:
            pass   # a source or the warehouse restarting (chaos): ask again
        time.sleep(1)
    return False
