"""The load driver in a process of its own, for offering thousands of transactions per second.

Generating a TPC-H transaction and encoding it costs the driver about 0.1 ms; at a few thousand
per second that is most of a core, and in the warehouse's process it would compete with the
maintenance core for the interpreter. `DriverProcess` runs `loadgen.driver.drive` in a spawned
process that builds the same update stream from the same data, which a recipe says how to obtain
rather than copying it through a pipe: `DataRecipe`, TPC-H read from the cache's files as the
stream needs it (loadgen.tpch.TblRows); `SyntheticRecipe`, a synthetic federation's
rows drawn again from their seed (loadgen.federation_shapes). It commits at the
sources' gRPC addresses, one client per source. The stream lives as long as the process, so
successive `drive` calls (the load phase, then each ramp step) continue one stream, as they do
in-process.

    with DriverProcess(catalog, DataRecipe(0.1), "mixed", seed=1, addresses=fed.addresses) as driver:
        result = driver.drive(rate=500, duration=15, progress=lambda elapsed, result: ...)
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import asdict, dataclass
from typing import Callable

from fedlab.fedio.channels import TlsFiles
from fedlab.fedmodel.catalog import Catalog
from fedlab.loadgen.reservoir import Reservoir
from fedlab.loadgen.driver import DriveResult
from fedlab.loadgen.federation_shapes import ShapedFederation, shaped_federation

PROGRESS_EVERY = 0.5   # seconds between progress messages from the child


@dataclass(frozen=True)
class DataRecipe:
    """How to obtain the federation's initial data: TPC-H at `scale` from the cache in `data_dir`,
    the first `orders` orders only when `orders` > 0 (loadgen.tpch.sample_orders)."""

    scale: float
    data_dir: str | None = None
    orders: int = 0

    def data(self) -> dict[str, list[tuple]]:
        """The initial rows, every one in memory (for writing the sources' databases)."""
        from fedlab.loadgen.tpch import sample_orders, tpch_data

        data = tpch_data(self.scale, self.data_dir)
        return sample_orders(data, self.orders) if self.orders > 0 else data

    def rows(self):
        """The initial rows for an update stream, read from the cached .tbl files on demand."""
        from fedlab.loadgen.tpch import TblRows, ensure_generated, tpch_folder

        return TblRows(ensure_generated(self.scale, tpch_folder(self.scale, self.data_dir)), self.orders)

    def stream(self, catalog: Catalog, workload: str, seed: int):
        """The `workload` update stream (loadgen.workload.WORKLOADS) over the rows."""
        from fedlab.loadgen.workload import Workload

        return Workload.named(workload).stream(catalog, self.rows(), seed=seed)


class CommitTimings:
    """One source's group commit calls in a drive: how many, their seconds, the transactions they
    held, and a bounded sample of each call's seconds (loadgen.reservoir)."""

    def __init__(self):
        self.calls, self.seconds, self.transactions = 0, 0.0, 0
        self.samples = Reservoir()

    def add(self, seconds: float, transactions: int) -> None:
        self.calls += 1
        self.seconds += seconds
        self.transactions += transactions
        self.samples.extend([seconds])

    def to_dict(self) -> dict:
        return {"calls": self.calls, "seconds": self.seconds, "transactions": self.transactions,
                "samples": self.samples.values}


@dataclass(frozen=True)
class SyntheticRecipe:
    """The synthetic federation `shape` over `sources` sources (loadgen.federation_shapes),
    `rows` rows per relation drawn with `seed`; its update stream is loadgen.synthetic_load's."""

    shape: str
    sources: int
    rows: int
    seed: int

    @property
    def name(self) -> str:
        return f"{self.shape}-{self.sources}"

    @property
    def federation(self) -> ShapedFederation:
        return shaped_federation(self.shape, self.sources)

    def data(self) -> dict[str, list[tuple]]:
        return self.federation.rows(self.rows, self.seed)

    def stream(self, catalog: Catalog, workload: str, seed: int):
        """The synthetic stream over the rows, its mix and skew those `workload` names (synthetic_load.named_mix)."""
        from fedlab.fedmodel.viewdef import parse_view
        from fedlab.loadgen.synthetic_load import SyntheticStream, named_mix

        view = parse_view(self.federation.view_sql, catalog)
        return SyntheticStream(catalog, view, self.data(), seed=seed, **named_mix(workload))


class DriverProcess:
    def __init__(self, catalog: Catalog, recipe: DataRecipe | SyntheticRecipe, workload: str, seed: int,
                 addresses: dict[str, str], tls: TlsFiles | None = None, timeout: float = 600.0):
        """Starts the process and waits (up to `timeout` seconds) until its stream is built."""
        context = multiprocessing.get_context("spawn")   # fork would copy gRPC's and Spark's threads
        self._pipe, child = context.Pipe()
        self._process = context.Process(target=_serve, name="fedlab-driver", daemon=True,
                                        args=(child, catalog.to_dict(), recipe, workload, seed, dict(addresses), tls))
        self._process.start()
        child.close()
        self._expect("ready", timeout)

    @property
    def pid(self) -> int:
        return self._process.pid

    def drive(self, rate: float, duration: float,
              progress: Callable[[float, DriveResult], None] = lambda elapsed, result: None) -> tuple[DriveResult, dict]:
        """Offers `rate` txn/s for `duration` s (loadgen.driver.drive in the child); returns the
        result and the commit timings per source ({source: CommitTimings.to_dict()})."""
        self._pipe.send(("drive", rate, duration))
        while True:
            message = self._receive(duration + 600)
            if message[0] == "progress":
                progress(message[1], DriveResult(**message[2]))
            elif message[0] == "done":
                return DriveResult(**message[1]), message[2]
            else:
                raise RuntimeError(f"load driver: {message[1]}")

    def close(self) -> None:
        if self._process.is_alive():
            self._pipe.send(("stop",))
            self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()
        self._pipe.close()

    def __enter__(self) -> "DriverProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _expect(self, kind: str, timeout: float):
        message = self._receive(timeout)
        if message[0] != kind:
            raise RuntimeError(f"load driver: {message[1]}")
        return message

    def _receive(self, timeout: float):
        if not self._pipe.poll(timeout):
            self.close()
            raise RuntimeError(f"load driver: no answer within {timeout:g} s")
        try:
            return self._pipe.recv()
        except EOFError:
            raise RuntimeError(f"load driver: the process ended (exit code {self._process.exitcode})") from None


def _serve(pipe, catalog_dict: dict, recipe: DataRecipe | SyntheticRecipe, workload: str, seed: int, addresses: dict[str, str],
           tls: TlsFiles | None) -> None:
    """The child: builds the stream, then drives at the parent's request until told to stop."""
    from fedlab.fedio.channels import client_channel
    from fedlab.fedmodel.wire import rpc
    from fedlab.loadgen.driver import drive, grpc_committer

    try:
        catalog = Catalog.from_dict(catalog_dict)
        stream = recipe.stream(catalog, workload, seed)
        stubs = {s: rpc.SourceStub(client_channel(a, tls)) for s, a in addresses.items()}
        commit = grpc_committer(catalog, stubs)
    except Exception as err:   # anything: the parent gets one line instead of a silent child
        pipe.send(("error", f"{type(err).__name__}: {err}"))
        return
    pipe.send(("ready",))
    while (command := pipe.recv())[0] == "drive":
        _, rate, duration = command
        timings: dict[str, CommitTimings] = {}

        def timed(source, requests):
            start = time.perf_counter()
            try:
                return commit(source, requests)
            finally:
                timings.setdefault(source, CommitTimings()).add(time.perf_counter() - start, len(requests))

        last = [0.0]

        def progress(elapsed: float, result: DriveResult) -> None:
            if elapsed - last[0] >= PROGRESS_EVERY:
                last[0] = elapsed
                pipe.send(("progress", elapsed, asdict(result)))

        try:
            result = drive(timed, stream, sorted(addresses), rate, duration, progress)
        except Exception as err:
            pipe.send(("error", f"{type(err).__name__}: {err}"))
            return
        pipe.send(("done", asdict(result), {source: t.to_dict() for source, t in timings.items()}))
