"""Outer-join views (LEFT, RIGHT, FULL): maintained through the padded rows of their terms
(fedmodel.outer_joins, warehouse.core.outer_join_state), refused by the algorithms that cannot,
and judged by an oracle that pads each state as DuckDB pads the relations of that state.

The scenarios (tests/scenarios/outer_join_*.yaml) hold, per kind of outer join, a row whose last
partner is deleted and which returns padded with NULLs and a padded row that gains a partner;
test_paper_examples checks their expectations under their own algorithm, this file under every
algorithm that takes outer joins. pg_ivm's outer-join views are in test_pg_ivm_views.py, random
federations with outer joins in test_simulator_property.py.
"""

from __future__ import annotations

import random
from collections import Counter

import duckdb
import pytest
from scenario_support import SCENARIOS, run, seeds, under_random_faults

from fedlab.fedmodel.aggregate_view import parse_query
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.outer_join_view import OuterJoinView, parse_outer_join
from fedlab.fedmodel.terms_sql import maintained_sql
from fedlab.fedmodel.transactions import Notification, RelationChange
from fedlab.checker.levels import classify
from fedlab.checker.oracle import Oracle
from fedlab.simulation.scenario import load_scenario, parse_scenario
from fedlab.simulation.simulate import simulate
from fedlab.warehouse.core import registry
from fedlab.warehouse.core.outer_join_state import OuterJoinState
from fedlab.warehouse.core.recompute import recompute

OUTER_SCENARIOS = sorted(p.name for p in SCENARIOS.glob("outer_join_*.yaml"))
TAKING = [p.name for p in registry.plugins() if p.outer_joins]
REFUSING = [p.name for p in registry.plugins() if not p.outer_joins]

# Relations keyed by all their columns, as pg_ivm's tables are, with NULLs among their values.
SOURCES = {"ds1": {"r": {"columns": ["i"], "types": ["BIGINT"]}, "t": {"columns": ["j"], "types": ["BIGINT"]}},
           "ds2": {"s": {"columns": ["i", "j"], "types": ["BIGINT", "BIGINT"]}}}
INITIAL = {"r": [[1], [2], [None]], "s": [[1, 1], [2, None], [None, 2], [4, 3]], "t": [[1], [3], [None]]}
VIEWS = [f"SELECT r.i, s.i AS si, s.j, t.j AS tj FROM r {a} JOIN s ON r.i = s.i {b} JOIN t ON s.j = t.j"
         for a in ("LEFT", "RIGHT", "FULL") for b in ("LEFT", "RIGHT", "FULL", "")]


def test_the_algorithms_that_take_outer_joins_are_those_that_fold_the_padded_terms():
    assert set(TAKING) >= {"sze-ling", "lazy", "versioned", "conventional", "recompute"}
    assert {"strobe", "c-strobe", "sweep", "eca", "salem"} <= set(REFUSING)


@pytest.mark.parametrize("name", OUTER_SCENARIOS)
@pytest.mark.parametrize("algorithm", [a for a in TAKING if registry.get(a).level != "none"])
def test_an_outer_join_scenario_ends_with_its_view_at_the_level_each_algorithm_claims(name, algorithm):
    expected = load_scenario(SCENARIOS / name).expect_view
    result = run(name, algorithm)
    assert sorted(map(tuple, result["view"]), key=repr) == sorted(expected, key=repr)
    levels = registry.LEVELS
    assert levels.index(result["consistency"]) >= levels.index(registry.get(algorithm).level), \
        result["checker"]["first_violation"]


@pytest.mark.parametrize("algorithm", REFUSING)
def test_an_algorithm_that_cannot_keep_outer_joins_refuses_in_one_line_naming_it(algorithm):
    with pytest.raises(registry.AlgorithmError) as err:
        run(OUTER_SCENARIOS[0], algorithm)
    message = str(err.value)
    assert message.startswith(f"{algorithm} cannot maintain outer joins") and "\n" not in message


def test_scan_access_refuses_outer_joins_in_one_line():
    with pytest.raises(registry.AlgorithmError) as err:
        simulate(load_scenario(SCENARIOS / OUTER_SCENARIOS[0]), "sze-ling", access="scan")
    assert "outer joins with scan access" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("sql", VIEWS)
def test_nulls_in_join_columns_and_all_null_rows_are_kept_under_faults(sql):
    """A row of NULLs joins nothing, so nothing subsumes it (its term cannot be told, and need not
    be); a NULL join value leaves its row padded."""
    doc = under_random_faults("nulls", {"sources": SOURCES, "initial": INITIAL}, sql, seed=len(sql))
    result = simulate(parse_scenario(doc, "nulls"))
    assert result["consistency"] == "complete", (sql, result["checker"]["first_violation"])
    assert result["checker"]["transactions"] == len(result["states"]) > 0


def test_a_row_shows_while_no_larger_term_holds_its_base_rows():
    catalog = Catalog.from_dict({"sources": SOURCES})
    view = parse_outer_join("SELECT r.i, s.j FROM r LEFT JOIN s ON r.i = s.i", catalog)
    assert isinstance(view, OuterJoinView) and view.join.column_names == ("i", "j", "s_i")
    state = OuterJoinState(view, {(1, None, None): 1, (None, None, None): 1})
    assert state.rows() == {(1, None): 1, (None, None): 1}
    assert state.apply({(1, 5, 1): 1}) == {(1, None): -1, (1, 5): 1}   # the first partner comes
    assert state.apply({(1, 6, 1): 1}) == {(1, 6): 1}                  # a second one: no padding to drop
    assert state.apply({(1, 5, 1): -1, (1, 6, 1): -1}) == {(1, 5): -1, (1, 6): -1, (1, None): 1}
    assert state.rows() == {(1, None): 1, (None, None): 1}


def _history(seed: int, catalog: Catalog) -> dict[str, list[Notification]]:
    """Random transactions at each source: a few inserts and deletes of rows with NULLs, valid
    against the source's state (relations are sets)."""
    rng = random.Random(seed)
    state = {name: {tuple(r) for r in rows} for name, rows in INITIAL.items()}
    history: dict[str, list[Notification]] = {s: [] for s in catalog.sources}
    brv = Counter()
    for n in range(12):
        source = rng.choice(sorted(catalog.sources))
        rel = rng.choice(catalog.relations_at(source))
        rows = state[rel.name]
        if rows and rng.random() < 0.4:
            change = RelationChange(rel.name, brv[rel.name] + 2, deleted=(rng.choice(sorted(rows, key=repr)),))
            rows.discard(change.deleted[0])
        else:
            row = tuple(rng.choice([None, 1, 2, 3, 4]) for _ in rel.columns)
            if row in rows:
                continue
            rows.add(row)
            change = RelationChange(rel.name, brv[rel.name] + 2, inserted=(row,))
        brv[rel.name] += 1
        history[source].append(Notification(source, len(history[source]) + 2, f"x{n}", (change,)))
    return history


def _at(vector: dict[str, int], catalog: Catalog, history) -> dict[str, set]:
    rows = {name: {tuple(r) for r in rows} for name, rows in INITIAL.items()}
    for source, log in history.items():
        for n in log[:vector[source] - 1]:
            for change in n.changes:
                rows[change.relation] -= set(change.deleted)
                rows[change.relation] |= set(change.inserted)
    return rows


@pytest.mark.parametrize("seed", seeds(20))
def test_the_oracle_reads_each_state_as_duckdb_reads_the_view_over_that_states_relations(seed):
    """The oracle tags each relation's rows with the state they exist at and pairs rows of one
    state only; DuckDB, handed the relations of one state as tables, evaluates the view itself."""
    catalog = Catalog.from_dict({"sources": SOURCES})
    history = _history(seed, catalog)
    rng = random.Random(seed)
    vectors = [{s: rng.randint(1, len(log) + 1) for s, log in history.items()} for _ in range(6)]
    sql = VIEWS[seed % len(VIEWS)]
    oracle = Oracle(catalog, sql, {r: [tuple(x) for x in rows] for r, rows in INITIAL.items()}, history)
    for vector, got in zip(vectors, oracle.views_at(vectors)):
        db = duckdb.connect()
        for name, rows in _at(vector, catalog, history).items():
            rel = catalog.relation(name)
            db.execute(f"CREATE TABLE {name} ({', '.join(f'{c} BIGINT' for c in rel.columns)})")
            if rows:
                db.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' for _ in rel.columns)})", list(rows))
        assert got == dict(Counter(db.execute(sql).fetchall())), (sql, vector)


# Beside VIEWS: selections in ON and WHERE, and NOT EXISTS (its join holds both terms).
SELECTING = ["SELECT r.i, s.j FROM r LEFT JOIN s ON r.i = s.i AND s.j > 1 WHERE r.i < 4",
             "SELECT r.i FROM r WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.i = r.i AND s.j <> 2)"]


@pytest.mark.parametrize("seed", seeds(20))
def test_the_terms_sql_a_whole_view_evaluation_runs_gives_the_rows_the_core_folds(seed):
    """fedmodel.terms_sql, which the live warehouse's Spark jobs evaluate, in DuckDB over each
    state's relations, against warehouse.core.recompute (the simulator's evaluation)."""
    catalog = Catalog.from_dict({"sources": SOURCES})
    history = _history(seed, catalog)
    rng = random.Random(seed)
    sql = (VIEWS + SELECTING)[seed % (len(VIEWS) + len(SELECTING))]
    join = parse_query(sql, catalog).join
    for _ in range(3):
        relations = _at({s: rng.randint(1, len(log) + 1) for s, log in history.items()}, catalog, history)
        db = duckdb.connect()
        for name, rows in relations.items():
            rel = catalog.relation(name)
            db.execute(f"CREATE TABLE {name} ({', '.join(f'{c} BIGINT' for c in rel.columns)})")
            if rows:
                db.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' for _ in rel.columns)})", list(rows))
        got = Counter(db.execute(maintained_sql(join)).fetchall())
        assert got == recompute(join, {n: list(rows) for n, rows in relations.items()}), sql


@pytest.mark.parametrize("seed", seeds(20))
def test_the_checker_derives_the_terms_rows_on_its_own_at_states_and_along_a_chain(seed):
    """A live run's history holds an outer-join view's join, its terms' padded rows; the checker
    reads them from the join's SQL by its own rule (checker.oracle.terms_sql), which must
    give what the core folds (warehouse.core.recompute) at every state, both ways it evaluates."""
    catalog = Catalog.from_dict({"sources": SOURCES})
    history = _history(seed, catalog)
    rng = random.Random(seed)
    sql = (VIEWS + SELECTING)[seed % (len(VIEWS) + len(SELECTING))]
    join = parse_query(sql, catalog).join
    oracle = Oracle(catalog, join.sql, {r: [tuple(x) for x in rows] for r, rows in INITIAL.items()}, history,
                    terms=True)
    vectors = [{s: rng.randint(1, len(log) + 1) for s, log in history.items()} for _ in range(5)]
    expected = [recompute(join, {n: list(rows) for n, rows in _at(v, catalog, history).items()}) for v in vectors]
    assert oracle.views_at(vectors) == expected, sql
    along, summed = [], Counter()
    for change in oracle.changes_along(vectors):
        summed.update(change)
        along.append({r: c for r, c in summed.items() if c})
    assert along == expected, sql


def test_the_verdict_on_an_outer_join_history_sees_a_padded_row_missing_from_a_state():
    """A live history of an outer-join view's join (each transaction its own state, as the core
    folds it) is complete by the checker's own terms; the same history with one padded row left
    out of the state it arrives in is not, and that state is the first violation."""
    catalog = Catalog.from_dict({"sources": SOURCES})
    history = _history(5, catalog)
    join = parse_query(VIEWS[0], catalog).join
    initial = {r: [tuple(x) for x in rows] for r, rows in INITIAL.items()}
    versions, states = {s: 1 for s in catalog.sources}, []
    before = start = recompute(join, {n: list(rows) for n, rows in _at(versions, catalog, history).items()})
    for source in sorted(catalog.sources):
        for note in history[source]:
            versions = {**versions, source: note.dsv}
            now = recompute(join, {n: list(rows) for n, rows in _at(versions, catalog, history).items()})
            delta = Counter(now)
            delta.subtract(before)
            states.append({"transaction": note.txn_id, "source": source, "dsv": note.dsv, "versions": versions,
                           "delta": {r: c for r, c in delta.items() if c}})
            before = now
    oracle = Oracle(catalog, join.sql, initial, history, terms=True)
    assert classify(oracle, states, before, {s: 1 for s in catalog.sources}, start).level == "complete"
    i, row = next((i, r) for i, s in enumerate(states) for r, c in s["delta"].items() if c > 0 and None in r)
    broken = [*states[:i], {**states[i], "delta": {r: c for r, c in states[i]["delta"].items() if r != row}},
              *states[i + 1:]]
    verdict = classify(oracle, broken, before, {s: 1 for s in catalog.sources}, start)
    assert verdict.level != "complete" and verdict.first_violation["state"] == i


@pytest.mark.parametrize("command", [["run", "--duration", "1s", "--algorithm", "strobe"],
                                     ["bench", "--algorithms", "sze-ling,strobe"],
                                     ["demo", "--algorithm", "strobe"]])
def test_a_live_command_refuses_an_outer_join_view_an_algorithm_cannot_keep_before_anything_starts(
        command, tmp_path, capsys):
    from fedlab import cli

    out = tmp_path / "out"
    flag = "--out" if command[0] == "bench" else "--run-dir"
    views_flag = "--views" if command[0] == "bench" else "--view"
    assert cli.main([*command, views_flag, "customer_urgent_orders", flag, str(out)]) == 2
    captured = capsys.readouterr()
    printed = (captured.out + captured.err).strip()
    assert "strobe cannot maintain outer joins (LEFT, RIGHT, FULL JOIN)" in printed
    assert "\n" not in printed and not out.exists()


def _role_config(folder, algorithm: str):
    """A warehouse role's config (roles.runconfig) of `algorithm` over a FULL JOIN view."""
    (folder / "catalog.yaml").write_text(
        "sources:\n  ds1: {r: {columns: [i], types: [BIGINT]}}\n  ds2: {s: {columns: [i], types: [BIGINT]}}\n")
    (folder / "config.yaml").write_text(f"run: {{algorithm: {algorithm}}}\ncatalog: catalog.yaml\n"
                                        "view: SELECT r.i, s.i AS si FROM r FULL JOIN s ON r.i = s.i\n"
                                        "sources: [{name: ds1, address: 'h1:1'}, {name: ds2, address: 'h2:1'}]\n")
    return folder / "config.yaml"


def test_the_warehouse_role_takes_an_outer_join_view(tmp_path):
    from fedlab.roles.runconfig import load_config

    assert load_config(_role_config(tmp_path, "sze-ling")).view.join.outer is not None


def test_the_warehouse_role_refuses_an_outer_join_view_its_algorithm_cannot_keep(tmp_path):
    from fedlab.roles.runconfig import ConfigError, load_config

    with pytest.raises(ConfigError) as err:
        load_config(_role_config(tmp_path, "salem"))
    assert "salem cannot maintain outer joins (LEFT, RIGHT, FULL JOIN)" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("seed", seeds(24))
def test_an_outer_join_view_is_complete_across_warehouse_crashes_and_source_restarts(seed):
    """A restarted warehouse restores the terms' rows and rebuilds the counts that decide what is
    subsumed from them (warehouse.core.outer_join_state); the views go on through complete states."""
    sql = VIEWS[seed % len(VIEWS)]
    doc = {"name": "crashes", "sources": SOURCES, "initial": INITIAL, "view": sql,
           "steps": [{"random": {"seed": seed, "steps": 60, "drop": 0.1, "reorder": 0.2, "duplicate": 0.05,
                                 "restart": 0.05, "warehouse_restart": 0.08}}, {"run": "all"}]}
    result = simulate(parse_scenario(doc, "crashes"))
    assert result["consistency"] == "complete", (sql, result["checker"]["first_violation"])
    assert result["counters"].get("warehouse_restarts", 0) > 0
