"""`fedlab simulate`: run a scenario file deterministically and judge it.

The run's consistency level comes from the checker (checker), whose DuckDB oracle shares
no code with the maintenance path. Exit status: 0 when every expectation holds, 1 when one fails
(with a diff), 2 when the file is invalid.
"""

from __future__ import annotations

import json
import sys

from fedlab.fedmodel.errors import ModelError
from fedlab.checker.explain import render, simulated_happenings
from fedlab.checker.levels import Verdict, classify
from fedlab.checker.oracle import Oracle
from fedlab.simulation.scenario import LEVELS, Scenario, load_scenario
from fedlab.simulation.simulator import Simulator, _rows
from fedlab.warehouse.core import registry
from fedlab.warehouse.core.planner import ACCESS_PATHS


def simulate(scenario: Scenario, algorithm: str | None = None, access: str | None = None) -> dict:
    """Runs the scenario; returns the result object that `--json` prints."""
    sim = Simulator(scenario, algorithm, access)
    run = sim.execute()
    verdict = judge(sim)
    failures = list(run.failures)
    final = sim.view_rows()
    if scenario.expect_view is not None and sorted(final, key=repr) != sorted(scenario.expect_view, key=repr):
        failures.append({"where": "expect.view", "expected": [list(r) for r in scenario.expect_view],
                         "got": [list(r) for r in final]})
    if scenario.expect_consistency and LEVELS.index(verdict.level) < LEVELS.index(scenario.expect_consistency):
        failures.append({"where": "expect.consistency", "expected": scenario.expect_consistency,
                         "got": verdict.level, "first_violation": verdict.first_violation})
    counters = {k: run.counters.get(k, 0) for k in
                ("subqueries", "messages", "rows_transferred", "bytes_transferred", "resends")}
    counters.update({k: v for k, v in run.counters.items() if k not in counters})
    counters.update({f"algorithm_{k}": v for k, v in sim.algorithm.counters.as_dict().items()})
    name = algorithm or scenario.algorithm
    join = scenario.view.join
    maintained = registry.get(name).maintained_view(join)
    return {
        "name": scenario.name,
        "algorithm": name,
        "columns": list(scenario.view.column_names),
        # The Strobe family keeps the view widened with every relation's key (keyed_view); a
        # aggregate view is kept from its join (fedmodel.aggregate_view).
        "maintained_columns": list(maintained.column_names),
        # ...and its final rows, from which the user's view (`view`, what the checker judges) comes.
        "maintained_view": ([list(r) for r in _rows(maintained, sim.algorithm.maintained_rows() if maintained is not join
                                                     else sim.algorithm.view_rows())]
                            if maintained is not scenario.view else None),
        "view": [list(r) for r in final],
        "states": [{"transaction": s["transaction"], "view": [list(r) for r in _rows(scenario.view, s["view"])]}
                   for s in run.states],
        "consistency": verdict.level,
        "checker": verdict.to_dict(),
        "expectations_met": not failures,
        "failures": failures,
        "counters": counters,
        "trace": run.trace,
    }


def judge(sim: Simulator) -> Verdict:
    """The checker's verdict on what `sim`'s warehouse applied (its run's states, its view now),
    by the oracle over the sources' committed history."""
    scenario = sim.scenario
    oracle = Oracle(scenario.catalog, scenario.view.sql, scenario.initial, sim.history())
    return classify(oracle, sim.run.states, sim.final_view(),
                    global_transactions={txn: g for txn, (g, _) in scenario.global_transactions.items()})


def add_arguments(parser) -> None:
    parser.add_argument("file", help="scenario file (YAML, see docs/scenarios.md)")
    parser.add_argument("--algorithm", help="override the file's algorithm (`fedlab algorithms` lists them)")
    parser.add_argument("--access", choices=ACCESS_PATHS, help="override the access path")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the trace")


def main(args) -> int:
    try:
        scenario = load_scenario(args.file)
        result = simulate(scenario, args.algorithm, args.access)
    except (ModelError, ValueError) as err:
        print(f"fedlab simulate: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, default=str))
    else:
        _print_text(result)
    return 0 if result["expectations_met"] else 1


def _print_text(result: dict) -> None:
    print(f"scenario: {result['name']}  algorithm: {result['algorithm']}")
    for entry in result["trace"]:
        print("  " + _describe(entry))
    print(f"final view ({', '.join(result['columns'])}): {result['view']}")
    if result["maintained_view"] is not None:
        print(f"the view the algorithm maintains ({', '.join(result['maintained_columns'])}): "
              f"{result['maintained_view']}")
    print(f"consistency: {Verdict(**result['checker']).explained_level()}")
    c = result["counters"]
    print(f"sub-queries {c['subqueries']}, messages {c['messages']}, rows {c['rows_transferred']}, "
          f"bytes {c['bytes_transferred']}, resends {c['resends']}")
    for line in render(Verdict(**result["checker"]), simulated_happenings(result["trace"], _describe)):
        print(line)
    for f in result["failures"]:
        print(f"FAILED {f['where']}: expected {f['expected']}, got {f['got']}")
    print("expectations met" if result["expectations_met"] else "expectations NOT met")


def _describe(e: dict) -> str:
    t = f"t={e['t']:g}"
    kind = e["event"]
    if kind == "commit":
        return f"{t} commit {e['txn']} at {e['source']} (DSV {e['dsv']})"
    if kind in ("deliver", "drop"):
        return f"{t} {kind} {e['kind']} {e['what']} ({e['source']})"
    if kind == "subquery":
        return f"{t} sub-query {e['id']} -> {e['source']} {'+'.join(e['relations'])} probe {e['probe']}"
    if kind == "answer":
        parts = ", ".join(f"{r} qvn {v['queried_version']}: {v['rows']}" for r, v in e["relations"].items())
        return f"{t} answer {e['subquery']} <- {e['source']} (DSV {e['dsv']}): {parts}"
    if kind == "compensate":
        return (f"{t} compensate {e['computation']}: {e['relation']} from {e['read_from']}, "
                f"{e['kind']} updates (queried {e['queried_version']}, initial {e['initial_version']}): "
                f"{e['before']} -> {e['after']}")
    if kind == "local-compensation":
        return (f"{t} local compensation of {e['for']}'s sweep: {e['removed']} of queued "
                f"{'+'.join(e['transactions'])} taken out of the {e['relation']} answer")
    if kind == "apply":
        return f"{t} apply {e['txn']} at versions {e['versions']}: view {[list(r) for r in e['view']]}"
    if kind == "key-delete":
        return f"{t} key_delete(A, {e['deleted']}) of {e['transaction']} removes {e['removed']}"
    if kind == "compensating-query":
        return f"{t} compensating query for {e['for']}, substituting {e['substituted']}"
    if kind == "restart":
        return f"{t} restart {e['source']}"
    if kind == "read":
        return f"{t} the view may be read: {[list(r) for r in e['view']]}"
    if kind == "evaluate-view":
        return f"{t} recompute round {e['round']}: evaluate the view over answers read at versions {e['versions']}"
    if kind == "resend-request":
        upto = f" through {e['through_dsv']}" if e.get("through_dsv") else ""
        return f"{t} resend request to {e['source']} from DSV {e['from_dsv']}{upto}"
    return f"{t} {kind} {({k: v for k, v in e.items() if k not in ('t', 'event')})}"
