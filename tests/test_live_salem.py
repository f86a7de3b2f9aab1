"""Salem's point-in-time refresh live: Ray source actors, the warehouse on Spark with Delta, the
view delta propagated to its high-water mark and the view rolled, afterwards, to points chosen by
wall time and by vector, through the warehouse's gRPC Refresh and `fedlab refresh`; each
refreshed view compared with the checker's oracle at the vector the wall time names, computed
here from the times the test saw each commit return (each source's last transaction committed at
or before the time). The run is then judged by `fedlab check`'s checker.
"""

from __future__ import annotations

import argparse
import time

import grpc
import pytest
from live_support import FIXTURE_A, MirroredLoad

from fedlab.fedio.channels import client_channel
from fedlab.fedmodel.wire import pb, rpc
from fedlab.checker.oracle import Oracle
from fedlab.live import refresh
from fedlab.live.check import check
from fedlab.live.federation import Federation
from fedlab.simulation.scenario import parse_scenario
from fedlab.warehouse.core.events import RefreshRequested
from fedlab.warehouse.core.registry import Settings
from fedlab.warehouse.core.salem.propagate import SalemOptions
from fedlab.warehouse.core.salem.timeline import PointError
from fedlab.warehouse.settings import WarehouseSettings
from fedlab.warehouse.store.delta_store import StoreError

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]

TRANSACTIONS = 14


class TimedCommits:
    """Commits through the federation, noting when each call started and returned."""

    def __init__(self, fed: Federation):
        self.fed = fed
        self.commits: list[tuple[str, int, float, float]] = []   # source, dsv, sent, returned

    def __call__(self, source, request):
        sent = time.time()
        reply = self.fed.commit(source, request)
        self.commits.append((source, reply.dsv, sent, time.time()))
        time.sleep(0.05)   # commits apart: a time between two of them names one point
        return reply


def _vector_at(commits, initial: dict[str, int], k: int) -> tuple[float, dict[str, int]]:
    """A wall time between the k-th commit's return and the next one's call, and the vector it names."""
    at = (commits[k][3] + commits[k + 1][2]) / 2
    vector = dict(initial)
    for source, dsv, _sent, _returned in commits[:k + 1]:
        vector[source] = dsv
    return at, vector


def _refresh_to_the_mark(fed: Federation, final: dict[str, int], timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = fed.warehouse.refresh(durable=True, point=RefreshRequested())
        if done["applied_dsv"] == final:
            return done
        time.sleep(0.3)
    raise AssertionError(f"the view delta did not reach {final}: {fed.warehouse.status()}")


def test_the_view_is_rolled_to_points_in_time_chosen_after_they_passed(spark, ray_runtime, tmp_path):
    scenario = parse_scenario(dict(FIXTURE_A), "live salem")
    run_dir = tmp_path / "salem"
    fed = Federation(scenario.catalog, scenario.view.sql, scenario.initial, run_dir, spark,
                     WarehouseSettings("salem", Settings(salem=SalemOptions(apply="on-demand"))))
    timed = TimedCommits(fed)
    load = MirroredLoad(scenario, timed, workload_seed=3, choice_seed=4)
    initial = {s: m.dsv for s, m in load.mirrors.items()}
    fed.start()
    try:
        load.commit(TRANSACTIONS)
        oracle = Oracle(scenario.catalog, scenario.view.sql, scenario.initial, load.history)
        final = oracle.final_versions()
        commits = timed.commits
        # Nothing is applied until asked: the view is the initial one while the delta grows.
        time.sleep(1.5)
        assert fed.warehouse.view_rows() == oracle.view_at(initial)

        # By wall time, through the warehouse's gRPC Refresh, once the delta reaches past it.
        at, vector = _vector_at(commits, initial, 4)
        stub = rpc.WarehouseStub(client_channel(fed.warehouse_address, None))
        deadline = time.monotonic() + 60
        while True:
            try:
                reply = stub.Refresh(pb.RefreshRequest(as_of_time=at), timeout=60)
                break
            except grpc.RpcError as err:   # the mark has not passed it yet
                assert "beyond the high-water mark" in err.details(), err.details()
                assert time.monotonic() < deadline, err.details()
                time.sleep(0.3)
        assert dict(reply.applied_dsv) == vector
        assert fed.warehouse.view_rows() == oracle.view_at(vector)

        # Refused with the warehouse's one-line reason: a point before the view's state.
        with pytest.raises(grpc.RpcError) as refused:
            stub.Refresh(pb.RefreshRequest(as_of_time=commits[1][3] + 0.01), timeout=60)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "before the view's current state" in refused.value.details()

        # By vector, through `fedlab refresh` (the run file names the warehouse), once the mark passes it.
        _later, vector = _vector_at(commits, initial, 9)
        parser = argparse.ArgumentParser()
        refresh.add_arguments(parser)
        args = parser.parse_args([str(run_dir), "--as-of", ",".join(f"{s}={d}" for s, d in vector.items())])
        deadline = time.monotonic() + 60
        while refresh.main(args) != 0:
            assert time.monotonic() < deadline, fed.warehouse.status()
            time.sleep(0.3)
        assert fed.warehouse.algorithm.applied_dsv() == vector
        assert fed.warehouse.view_rows() == oracle.view_at(vector)

        # A Spark reader of Delta rolls the view itself: the view there plus the view delta rows
        # up to a time (the rows are kept with the batches that moved the mark).
        later, vector = _vector_at(commits, initial, 11)
        deadline = time.monotonic() + 60
        while True:
            try:
                assert fed.warehouse.store.view_as_of(later) == oracle.view_at(vector)
                break
            except StoreError as err:   # the mark in Delta has not passed it yet
                assert "beyond the view delta's high-water mark" in str(err), err
                assert time.monotonic() < deadline, err
                time.sleep(0.3)

        # To the high-water mark: every transaction.
        done = _refresh_to_the_mark(fed, final)
        assert done["high_water"] == final
        assert fed.warehouse.view_rows() == oracle.view_at(final)

        # A vector no wall time names: a later commit of one source without an earlier one of another.
        early, _later_elsewhere = next((a, b) for a in commits for b in reversed(commits) if a[0] != b[0])
        off = {**final, early[0]: early[1] - 1}
        with pytest.raises(PointError, match="not a point in time"):
            fed.warehouse.refresh(point=RefreshRequested(vector=tuple(off.items())))
    finally:
        fed.stop()
    verdict = check(run_dir)
    assert verdict.transactions == TRANSACTIONS
    assert verdict.level == "complete", verdict.first_violation
