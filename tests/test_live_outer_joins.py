"""Outer-join and NOT EXISTS views live (fedmodel.outer_join_view): Ray source actors, the
warehouse on Spark with Delta. The warehouse maintains the terms' padded rows (its join) and shows
the user's view subsumed from them (warehouse.core.outer_join_state); its initial view and periodic
recomputation are Spark jobs over the terms' SQL (fedmodel.terms_sql). Each run is judged by
`fedlab check` on the join's states, whose terms the checker derives on its own
(checker.oracle.terms_sql), and the user's view read back (ReadView, Delta) is compared
with two recomputations of the user's SQL as written: Spark's over fresh source snapshots and the
checker's DuckDB oracle over the committed history."""

from __future__ import annotations

import random

import pytest
from live_support import MirroredLoad

from fedlab.fedmodel.aggregate_view import parse_query
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.terms_sql import maintained_sql
from fedlab.checker.oracle import Oracle
from fedlab.live import delta_view
from fedlab.live.check import judge, load_history
from fedlab.live.environment import NO_FAULTS, set_faults
from fedlab.live.federation import Federation
from fedlab.simulation.scenario import parse_scenario
from fedlab.loadgen.driver import drive
from fedlab.loadgen.tpch import load_view, tpch_catalog, tpch_data
from fedlab.loadgen.workload import Workload
from fedlab.warehouse.core.recompute import recompute
from fedlab.warehouse.core.registry import Settings
from fedlab.warehouse.settings import WarehouseSettings
from fedlab.warehouse.store.materialize import materialize

pytestmark = [pytest.mark.spark, pytest.mark.ray, pytest.mark.slow]

# Relations keyed by all their columns, NULLs among their values (tests/test_outer_joins.py's).
SOURCES = {"ds1": {"r": {"columns": ["i"], "types": ["BIGINT"]}, "t": {"columns": ["j"], "types": ["BIGINT"]}},
           "ds2": {"s": {"columns": ["i", "j"], "types": ["BIGINT", "BIGINT"]}}}
INITIAL = {"r": [[1], [2], [None]], "s": [[1, 1], [2, None], [None, 2], [4, 3]], "t": [[1], [3], [None]]}
VIEWS = [f"SELECT r.i, s.i AS si, s.j, t.j AS tj FROM r {a} JOIN s ON r.i = s.i {b} JOIN t ON s.j = t.j"
         for a in ("LEFT", "RIGHT", "FULL") for b in ("LEFT", "FULL", "")]
NOT_EXISTS = "SELECT r.i FROM r WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.i = r.i AND s.j <> 2)"
# The same with keys, as a live source's tables have them (their keys are NOT NULL).
KEYED = {"ds1": {"r": {"columns": ["k", "i"], "types": ["BIGINT"] * 2, "key": ["k"]},
                 "t": {"columns": ["k", "j"], "types": ["BIGINT"] * 2, "key": ["k"]}},
         "ds2": {"s": {"columns": ["k", "i", "j"], "types": ["BIGINT"] * 3, "key": ["k"]}}}
KEYED_INITIAL = {"r": [[1, 1], [2, 2], [3, None]], "s": [[1, 1, 1], [2, 2, None], [3, None, 2], [4, 4, 3]],
                 "t": [[1, 1], [2, 3], [3, None]]}


def test_spark_evaluates_the_terms_sql_to_the_rows_the_core_folds(spark):
    """The initial materialisation and every recomputation read an outer-join view's join from
    Spark over fedmodel.terms_sql: its rows must be warehouse.core.recompute's, NULLs and all."""
    catalog = Catalog.from_dict({"sources": SOURCES})
    rng = random.Random(3)
    for sql in [*VIEWS, NOT_EXISTS]:
        rows = {r: sorted({tuple(rng.choice([None, 1, 2, 3]) for _ in catalog.relation(r).columns)
                           for _ in range(5)} | {tuple(x) for x in INITIAL[r]}, key=repr) for r in INITIAL}
        join = parse_query(sql, catalog).join
        snapshots = {r: (list(catalog.relation(r).columns), list(catalog.relation(r).types), rows[r]) for r in rows}
        assert materialize(spark, maintained_sql(join), snapshots) == recompute(join, rows), sql


@pytest.mark.parametrize("view", ["customer_urgent_orders", "customers_without_urgent"])
def test_a_tpch_outer_join_view_is_kept_live_under_lost_and_reordered_messages_and_a_warehouse_restart(
        view, spark, ray_runtime, tmp_path):
    """The mixed TPC-H load deletes orders, moves them between customers and changes their
    priority: BUILDING customers lose their last urgent order and come back padded (or, NOT
    EXISTS, join the view), others gain one; 5% of the messages are lost, all delayed (mean 0.1 s,
    so reordered), and the warehouse restarts from Delta half-way, rebuilding the counts that
    decide what is subsumed from the join it restores."""
    catalog, data, sql = tpch_catalog(), tpch_data(0.01), load_view(view)
    run_dir = tmp_path / "run"
    fed = Federation(catalog, sql, data, run_dir, spark, WarehouseSettings())
    stream = Workload.named("mixed").stream(catalog, data, seed=4)
    fed.start()
    try:
        set_faults(fed, {"drop": 0.05, "delay_mean": 0.1})
        first = drive(fed.commit_batch, stream, catalog.sources, rate=40, duration=6)
        fed.restart_warehouse()
        second = drive(fed.commit_batch, stream, catalog.sources, rate=40, duration=6)
        set_faults(fed, NO_FAULTS)
        assert fed.wait_until_applied(timeout=180), fed.warehouse.status()
        fed.warehouse.refresh(durable=True)
        shown = fed.warehouse.view_rows()
        assert fed.read_view() == shown
        assert fed.recompute() == shown   # Spark evaluates the user's SQL over fresh snapshots
    finally:
        fed.stop()
    history = load_history(run_dir)
    verdict = judge(history)
    committed = first.committed + second.committed
    assert verdict.level == "complete" and verdict.transactions == verdict.states == committed > 400, \
        verdict.first_violation
    assert not verdict.lost and not verdict.doubled
    user = Oracle(catalog, sql, history.initial, history.log)   # the user's SQL as written, padded by DuckDB
    start, final = user.view_at(history.start_versions), user.view_at(user.final_versions())
    assert final == shown
    assert _came_back_padded(start, final, view), "the load made no row lose its last partner"
    assert dict(delta_view.read(history.run.warehouse_delta, parse_query(sql, catalog))["rows"]) == shown


def _came_back_padded(start: dict, final: dict, view: str) -> bool:
    """Whether some customer had an urgent order at the start and none at the end (its row padded,
    or for NOT EXISTS present)."""
    if view == "customers_without_urgent":
        return bool(set(final) - set(start))
    with_order = {row[0] for row in start if row[3] is not None}
    return any(row[3] is None and row[0] in with_order for row in final)


def test_periodic_recomputation_keeps_a_full_join_live_from_spark_jobs_over_its_terms(spark, ray_runtime, tmp_path):
    """`recompute` replaces the view every period with a Spark job's evaluation of the terms' SQL
    over whole relations it gathered: the FULL and LEFT joins' padded rows, NULLs in join columns
    among them, under lost answers; strong, as it claims."""
    sql = "SELECT r.i, s.i AS si, s.j, t.j AS tj FROM r FULL JOIN s ON r.i = s.i LEFT JOIN t ON s.j = t.j"
    scenario = parse_scenario({"name": "live full join", "sources": KEYED, "initial": KEYED_INITIAL, "view": sql,
                               "steps": []}, "live full join")
    run_dir = tmp_path / "run"
    fed = Federation(scenario.catalog, sql, scenario.initial, run_dir, spark,
                     WarehouseSettings("recompute", Settings(period=1.0)))
    load = MirroredLoad(scenario, fed.commit, workload_seed=3, choice_seed=4)
    fed.start()
    try:
        for source in fed.actors:
            fed.control(source).set_faults(answer_drop=0.2)
        load.commit(20, pause=0.1)
        for source in fed.actors:
            fed.control(source).set_faults(answer_drop=0.0)
        assert fed.wait_until_applied(timeout=120), fed.warehouse.status()
        shown = fed.warehouse.view_rows()
        assert fed.read_view() == shown
    finally:
        fed.stop()
    oracle = Oracle(scenario.catalog, sql, scenario.initial, load.history)
    assert oracle.view_at(oracle.final_versions()) == shown
    assert any(None in row for row in shown), "no padded row to check"
    verdict = judge(load_history(run_dir))
    assert verdict.level in ("strong", "complete") and verdict.states > 0, verdict.first_violation
