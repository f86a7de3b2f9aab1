"""Scenario files: a federation, a view, and a script of commits and network events (YAML).

The format is documented in docs/scenarios.md and read by `fedlab simulate`; other tools (the
consistency matrix, saved counterexamples) write it too, so it is kept exactly. Everything that
can be checked before running is checked here, and a bad file raises ScenarioError with one
line naming the file, the place and the problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fedlab.fedmodel.aggregate_view import AggregateView, parse_query
from fedlab.fedmodel.catalog import Catalog, validate_row, validate_value
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.transactions import Modification, TransactionRequest
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.fedio.yamlfile import read_yaml
from fedlab.source_node.commit import validate_initial_state
from fedlab.warehouse.core import registry
from fedlab.warehouse.core.registry import LEVELS
from fedlab.warehouse.core.salem.propagate import SalemOptions
from fedlab.warehouse.core.sze_ling.deferral import Deferral

STEP_KINDS = ("commit", "deliver", "drop", "duplicate", "hold", "answer", "release", "expect_view", "run", "random",
              "restart", "read", "tick", "queries", "refresh", "fail_batch", "receive", "again", "narrow")
# What a deliver, drop or duplicate step names: a notification by its transaction, a sub-query by
# its id, an answer by the sub-query it answers, a resend request by the source it goes to.
MESSAGE_KINDS = ("notification", "subquery", "answer", "resend")
# A random step's rates, each a probability per decision, with its default (the simulator's
# RandomSchedule takes them by these names; the matrix's conditions set some of them).
RANDOM_RATES = {"drop": 0, "reorder": 0, "duplicate": 0, "commit_rate": 0.5, "restart": 0, "warehouse_restart": 0,
                "batch_failure": 0}
_RANDOM_KEYS = {"seed", "steps", "transactions", *RANDOM_RATES}
BATCH_FAILURES = ("refused", "stored")   # how a batch's commit fails: fail_batch
TRANSACTION_SCENARIOS = ("source-local", "single-update")  # the Strobe paper's section 3.1
# What a `tick` fires: a whole timer round, or one of its parts alone at the step's time (the
# timed mode's processes keep their own timers: simulation.timed).
TICKS = ("timers", "batch", "resends", "core")


class ScenarioError(ModelError):
    """An invalid scenario file."""


@dataclass
class Step:
    kind: str
    args: dict
    where: str
    doc: object = None   # the step as the file writes it (a run records its steps so: Run.steps)
    at: float | None = None   # its simulated time (a timed run writes it); None: one unit after the last


@dataclass
class Scenario:
    name: str
    algorithm: str
    catalog: Catalog
    view: ViewDef | AggregateView   # the user's; the algorithms maintain view.join
    initial: dict[str, list[tuple]]
    steps: list[Step]
    expect_view: list[tuple] | None = None
    expect_consistency: str | None = None
    force_queries: set[str] = field(default_factory=set)
    access: str | None = None
    log_retention: dict[str, int] = field(default_factory=dict)
    path: str = "<scenario>"
    global_transactions: dict[str, tuple[str, int]] = field(default_factory=dict)  # txn -> (global id, parts)
    period: float | None = None    # recompute's period
    deferral: Deferral | None = None   # lazy's bounds
    salem: SalemOptions | None = None  # salem's apply mode, step and rolling intervals
    fifo_repair: bool = False          # the live warehouse's per-source FIFO order (warehouse.fifo_order)


def _deferral(doc, where: str) -> Deferral:
    """`lazy: {combine_max: N, max_delay: S, idle_after: S, max_jobs: N}` (warehouse.core.sze_ling.deferral)."""
    fields = {"combine_max", "max_delay", "idle_after", "max_jobs"}
    if not isinstance(doc, dict) or set(doc) - fields:
        raise ScenarioError(f"{where}: takes {', '.join(sorted(fields))}")
    try:
        return Deferral(**doc)
    except ValueError as err:
        raise ScenarioError(f"{where}: {err}") from None


def load_scenario(path: str | Path) -> Scenario:
    return parse_scenario(read_yaml(path, "scenario", ScenarioError), str(path))


def parse_scenario(doc, where: str = "<scenario>") -> Scenario:
    if not isinstance(doc, dict):
        raise ScenarioError(f"{where}: a scenario is a YAML mapping")
    unknown = set(doc) - {"name", "algorithm", "access", "sources", "constraints", "view", "initial", "steps",
                          "expect", "log_retention", "period", "lazy", "salem", "fifo_repair"}
    if unknown:
        raise ScenarioError(f"{where}: unknown top-level key {sorted(unknown)[0]!r}")
    try:
        initial_doc = doc.get("initial") or {}
        if not isinstance(initial_doc, dict):
            raise ScenarioError(f"{where}: 'initial' must map relations to rows")
        catalog = Catalog.from_dict(doc, _mentioned_rows(doc), where)
        view = parse_query(doc.get("view", ""), catalog)
        initial = {}
        for name, rows in initial_doc.items():
            rel = catalog.relation(str(name))
            initial[rel.name] = _rows(rel, rows, f"{where}: initial.{name}")
            keys = [rel.key_of(r) for r in initial[rel.name]]
            if len(set(keys)) != len(keys):
                raise ScenarioError(f"{where}: initial.{name} repeats a key")
        for rel in catalog.relations:
            initial.setdefault(rel.name, [])
        validate_initial_state(catalog, initial, "initial")
    except ScenarioError:
        raise
    except ModelError as err:
        raise ScenarioError(f"{where}: {err}") from None
    scenario = Scenario(str(doc.get("name", Path(where).stem)), str(doc.get("algorithm", "sze-ling")),
                        catalog, view, initial, [], path=where, access=doc.get("access"))
    retention = doc.get("log_retention") or {}
    if not isinstance(retention, dict) or any(s not in catalog.sources or not _is_integer(n) or n < 0
                                               for s, n in retention.items()):
        raise ScenarioError(f"{where}: log_retention maps sources to how many notifications their log keeps")
    scenario.log_retention = dict(retention)
    if "period" in doc:
        period = doc["period"]
        if not _is_number(period) or period <= 0:
            raise ScenarioError(f"{where}: period must be a positive number (recompute's period in simulated time)")
        scenario.period = float(period)
    if "fifo_repair" in doc:
        if not isinstance(doc["fifo_repair"], bool):
            raise ScenarioError(f"{where}: fifo_repair is true (as the live warehouse) or false (the default)")
        scenario.fifo_repair = doc["fifo_repair"]
    if "lazy" in doc:
        scenario.deferral = _deferral(doc["lazy"], f"{where}: lazy")
    if "salem" in doc:
        scenario.salem = _salem(doc["salem"], scenario, f"{where}: salem")
    committed: set[str] = set()
    for i, step in enumerate(doc.get("steps") or []):
        scenario.steps.append(parse_step(scenario, step, committed, f"{where}: steps[{i}]"))
    expect = doc.get("expect") or {}
    if not isinstance(expect, dict) or set(expect) - {"view", "consistency"}:
        raise ScenarioError(f"{where}: 'expect' takes 'view' and 'consistency'")
    if "view" in expect:
        scenario.expect_view = _view_rows(view, expect["view"], f"{where}: expect.view")
    if "consistency" in expect:
        if expect["consistency"] not in LEVELS:
            raise ScenarioError(f"{where}: expect.consistency must be one of {', '.join(LEVELS)}")
        scenario.expect_consistency = expect["consistency"]
    return scenario


def _mentioned_rows(doc: dict) -> dict[str, list]:
    """Every row the file gives each relation (initial, and inserted, deleted or modified by a
    commit step), by relation name as written, for column types left to inference: a relation
    empty at first takes its types from the rows its transactions bring. The rows are taken as
    they are; the parse that follows checks them."""
    def mapping(value) -> dict:
        return value if isinstance(value, dict) else {}

    def listing(value) -> list:
        return value if isinstance(value, list) else []

    rows: dict[str, list] = {}

    def add(relation, items: list) -> None:
        rows.setdefault(str(relation), []).extend(r for r in items if isinstance(r, (list, tuple)))

    for relation, items in mapping(doc.get("initial")).items():
        add(relation, listing(items))
    for step in listing(doc.get("steps")):
        args = mapping(mapping(step).get("commit"))
        for part in ("insert", "delete"):
            for relation, items in mapping(args.get(part)).items():
                add(relation, listing(items))
        for relation, mods in mapping(args.get("modify")).items():
            add(relation, [m.get(side) for m in listing(mods) if isinstance(m, dict) for side in ("old", "new")])
    return rows


def _salem(doc, scenario: Scenario, where: str) -> SalemOptions:
    """`salem: {apply: continuous|on-demand, step_commits: N, intervals: {RELATION: SECONDS}}`
    (warehouse.core.salem.propagate)."""
    if scenario.algorithm != "salem":
        raise ScenarioError(f"{where}: these are salem's options; the algorithm is {scenario.algorithm}")
    if not isinstance(doc, dict) or set(doc) - {"apply", "step_commits", "intervals"}:
        raise ScenarioError(f"{where}: takes apply, step_commits and intervals")
    intervals = doc.get("intervals") or {}
    if not isinstance(intervals, dict) or (intervals and set(intervals) != set(scenario.view.join.relations)):
        raise ScenarioError(f"{where}: intervals map each of the view's relations "
                            f"({', '.join(scenario.view.join.relations)}) to seconds")
    try:
        return SalemOptions(apply=doc.get("apply", "continuous"), step_commits=doc.get("step_commits"),
                            intervals=tuple(intervals.items()))
    except ValueError as err:
        raise ScenarioError(f"{where}: {err}") from None


def _refresh(scenario: Scenario, args, where: str) -> dict:
    """`refresh: high-water`, `refresh: {as_of: TIME}` or `refresh: {vector: {SOURCE: DSV, ...}}`:
    salem's point-in-time refresh (warehouse.core.events.RefreshRequested)."""
    if not registry.get(scenario.algorithm).point_in_time:
        raise ScenarioError(f"{where}: refresh is a point-in-time refresh (salem's); the algorithm is {scenario.algorithm}")
    if args == "high-water":
        return {}
    if isinstance(args, dict) and set(args) == {"as_of"} and _is_number(args["as_of"]):
        return {"as_of": float(args["as_of"])}
    if (isinstance(args, dict) and set(args) == {"vector"} and isinstance(args["vector"], dict)
            and all(s in scenario.catalog.sources and _is_integer(d) for s, d in args["vector"].items())):
        return {"vector": tuple(sorted(args["vector"].items()))}
    raise ScenarioError(f"{where}: refresh takes 'high-water', {{as_of: TIME}} or {{vector: {{SOURCE: DSV}}}}")


def parse_step(scenario: Scenario, step, committed: set[str], where: str) -> Step:
    """One step, checked against the scenario and the transaction ids `committed` before it (a
    commit adds its own). The simulator reads the steps a `random` step decides with it too, so
    that what it records is what a file replays."""
    if not isinstance(step, dict) or len({k for k in step if k != "at"}) != 1:
        raise ScenarioError(f"{where}: a step is a mapping with exactly one key (one of {', '.join(STEP_KINDS)}), "
                            "and optionally its time, `at`")
    kind, args = next((k, v) for k, v in step.items() if k != "at")
    if kind not in STEP_KINDS:
        raise ScenarioError(f"{where}: unknown step {kind!r}")
    at = step.get("at")
    if at is not None and (not _is_number(at) or not 0 <= at < float("inf")):
        raise ScenarioError(f"{where}: at is the step's simulated time, a number of seconds >= 0, got {at!r}")
    return Step(kind, _arguments(scenario, kind, args, committed, where), where, step,
                None if at is None else float(at))


def _arguments(scenario: Scenario, kind: str, args, committed: set[str], where: str) -> dict:
    if kind == "commit":
        return {"request": _commit(scenario, args, committed, where), "source": args["source"]}
    if kind in ("deliver", "drop", "duplicate"):
        return _message(scenario, kind, args, committed, where)
    if kind == "receive":
        if not isinstance(args, dict) or set(args) != {"notification"}:
            raise ScenarioError(f"{where}: receive names a notification: {{notification: ID}}")
        return _message(scenario, kind, args, committed, where)
    if kind == "again":
        if not isinstance(args, dict) or set(args) != {"subquery"} or not isinstance(args["subquery"], str):
            raise ScenarioError(f"{where}: again names a sub-query sent before: {{subquery: ID}}")
        return {"name": args["subquery"]}
    if kind == "narrow":
        if not isinstance(args, dict) or set(args) != {"resend", "from", "to"} or args["resend"] not in scenario.catalog.sources:
            raise ScenarioError(f"{where}: narrow needs {{resend: SOURCE, from: SPAN, to: SPAN}} naming a known "
                                "source, each SPAN [FROM DSV, THROUGH DSV or null]")
        return {"source": args["resend"], "from": _span(args["from"], where), "to": _span(args["to"], where)}
    if kind == "queries":
        if args not in ("in-flight", "at-once"):
            raise ScenarioError(f"{where}: queries takes 'in-flight' or 'at-once'")
        return {"in_flight": args == "in-flight"}
    if kind in ("hold", "release", "answer"):
        key = "query_to" if kind == "answer" else "queries_to"
        source = args.get(key) if isinstance(args, dict) else None
        if source not in scenario.catalog.sources:
            raise ScenarioError(f"{where}: {kind} needs {{{key}: SOURCE}} naming a known source")
        return {"source": source}
    if kind == "expect_view":
        return {"rows": _view_rows(scenario.view, args, where)}
    if kind == "run":
        if args != "all":
            raise ScenarioError(f"{where}: run takes 'all'")
        return {}
    if kind == "read":
        if args != "view":
            raise ScenarioError(f"{where}: read takes 'view'")
        return {}
    if kind == "refresh":
        return _refresh(scenario, args, where)
    if kind == "tick":
        if args not in TICKS:
            raise ScenarioError(f"{where}: tick takes {', '.join(TICKS[:-1])} or {TICKS[-1]}")
        return {"fires": args}
    if kind == "fail_batch":
        if args not in BATCH_FAILURES:
            raise ScenarioError(f"{where}: fail_batch takes {' or '.join(BATCH_FAILURES)}")
        return {"failure": args}
    if kind == "restart":
        if isinstance(args, dict) and set(args) == {"warehouse"} and args["warehouse"] in (True, "mid-batch"):
            return {"warehouse": args["warehouse"]}
        source = args.get("source") if isinstance(args, dict) else None
        if source not in scenario.catalog.sources or set(args) != {"source"}:
            raise ScenarioError(f"{where}: restart needs {{source: SOURCE}} naming a known source, "
                                "or {warehouse: true} (or mid-batch)")
        return {"source": source}
    if not isinstance(args, dict) or set(args) - _RANDOM_KEYS:
        raise ScenarioError(f"{where}: random takes {', '.join(sorted(_RANDOM_KEYS))}")
    seed, steps = args.get("seed", 0), args.get("steps", 100)
    if not _is_integer(seed):
        raise ScenarioError(f"{where}: random.seed must be an integer, got {seed!r}")
    if not _is_integer(steps) or steps < 1:
        raise ScenarioError(f"{where}: random.steps must be a positive integer, got {steps!r}")
    rates = {}
    for rate, default in RANDOM_RATES.items():
        value = args.get(rate, default)
        if not _is_number(value) or not 0 <= value <= 1:
            raise ScenarioError(f"{where}: random.{rate} must be a number between 0 and 1, got {value!r}")
        rates[rate] = float(value)
    transactions = args.get("transactions", "source-local")
    if transactions not in TRANSACTION_SCENARIOS:
        raise ScenarioError(f"{where}: random.transactions must be one of {', '.join(TRANSACTION_SCENARIOS)}")
    return {"seed": seed, "steps": steps, **rates, "transactions": transactions}


def _span(value, where: str) -> tuple[int, int | None]:
    """A resend request's span: [FROM DSV, THROUGH DSV] (null: through the newest)."""
    if (not isinstance(value, (list, tuple)) or len(value) != 2 or not _is_integer(value[0])
            or not (value[1] is None or _is_integer(value[1]))):
        raise ScenarioError(f"{where}: a resend request's span is [FROM DSV, THROUGH DSV or null], got {value!r}")
    return int(value[0]), None if value[1] is None else int(value[1])


def _message(scenario: Scenario, kind: str, args, committed: set[str], where: str) -> dict:
    """The message a deliver, drop or duplicate step takes: `{KIND: NAME}` (MESSAGE_KINDS); of
    several in flight with that name, the oldest."""
    if not isinstance(args, dict) or len(args) != 1 or next(iter(args)) not in MESSAGE_KINDS:
        raise ScenarioError(f"{where}: {kind} names one message: {{notification: ID}}, {{subquery: ID}}, "
                            "{answer: SUBQUERY ID} or {resend: SOURCE}")
    what, name = next(iter(args.items()))
    if what == "notification" and str(name) not in committed:
        raise ScenarioError(f"{where}: {kind} needs {{notification: ID}} of a transaction committed earlier")
    if what == "resend" and name not in scenario.catalog.sources:
        raise ScenarioError(f"{where}: {kind} needs {{resend: SOURCE}} naming a known source")
    if what in ("subquery", "answer") and not isinstance(name, str):
        raise ScenarioError(f"{where}: {kind} needs {{{what}: ID}}, the id of a sub-query (q1, q2, ...)")
    return {"message": what, "name": str(name)}


def commit_step(source: str, request: TransactionRequest) -> dict:
    """The `commit` step, as a file writes it, that commits `request` at `source`."""
    doc = request.to_dict()
    parts = {key: doc[part] for key, part in (("insert", "inserts"), ("delete", "deletes"), ("modify", "modifies"))
             if doc[part]}
    return {"commit": {"source": source, "id": request.txn_id, **parts}}


def _commit(scenario: Scenario, args, committed: set[str], where: str) -> TransactionRequest:
    if not isinstance(args, dict) or "source" not in args or "id" not in args:
        raise ScenarioError(f"{where}: commit needs source and id")
    unknown = set(args) - {"source", "id", "insert", "delete", "modify", "force_queries", "global"}
    if unknown:
        raise ScenarioError(f"{where}: commit has unknown key {sorted(unknown)[0]!r}")
    source, txn = args["source"], str(args["id"])
    if source not in scenario.catalog.sources:
        raise ScenarioError(f"{where}: unknown source {source!r}")
    if txn in committed:
        raise ScenarioError(f"{where}: transaction id {txn!r} is used twice")
    committed.add(txn)
    if args.get("force_queries"):
        scenario.force_queries.add(txn)
    if "global" in args:
        part_of = args["global"]
        if (not isinstance(part_of, dict) or set(part_of) != {"id", "parts"} or not _is_integer(part_of["parts"])
                or part_of["parts"] < 1):
            raise ScenarioError(f"{where}: global needs {{id: GLOBAL_ID, parts: N}} (N >= 1 local commits form it)")
        scenario.global_transactions[txn] = (str(part_of["id"]), part_of["parts"])

    def relation(name):
        if not scenario.catalog.has_relation(str(name)):
            raise ScenarioError(f"{where}: unknown relation {name!r}")
        rel = scenario.catalog.relation(str(name))
        if rel.source != source:
            raise ScenarioError(f"{where}: relation {rel.name} is not at source {source}")
        return rel

    inserts = {relation(r).name: _rows(relation(r), rows, where) for r, rows in (args.get("insert") or {}).items()}
    deletes = {relation(r).name: _rows(relation(r), rows, where) for r, rows in (args.get("delete") or {}).items()}
    modifies = {}
    for r, mods in (args.get("modify") or {}).items():
        rel = relation(r)
        if not isinstance(mods, list) or not all(isinstance(m, dict) and set(m) == {"old", "new"} for m in mods):
            raise ScenarioError(f"{where}: modify.{r} is a list of {{old: ROW, new: ROW}}")
        modifies[rel.name] = [Modification(*_rows(rel, [m["old"], m["new"]], where)) for m in mods]
    if not (inserts or deletes or modifies):
        raise ScenarioError(f"{where}: commit {txn} changes nothing")
    return TransactionRequest(txn, inserts, deletes, modifies)


def _rows(rel, rows, where: str) -> list[tuple]:
    if not isinstance(rows, list):
        raise ScenarioError(f"{where}: rows of {rel.name} must be a list of rows")
    try:
        return [validate_row(rel, r, where) for r in rows]
    except ModelError as err:
        raise ScenarioError(str(err)) from None


def _view_rows(view: ViewDef | AggregateView, rows, where: str) -> list[tuple]:
    """Expected view rows: the view's columns, each of its type, then a positive count if it has one."""
    width = len(view.column_names)
    if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == width for r in rows):
        raise ScenarioError(f"{where}: view rows must be lists of {width} values ({', '.join(view.column_names)})")
    types = view.output_types
    for row in rows:
        try:
            for value, name, typ in zip(row, view.column_names, types):
                validate_value(value, typ, f"{where}: view column {name}")
        except ModelError as err:
            raise ScenarioError(str(err)) from None
        if view.has_count and (not _is_integer(row[-1]) or row[-1] < 1):
            raise ScenarioError(f"{where}: view row {row} has count {row[-1]!r}; the count (how many times "
                                "the row is in the view) is a positive integer")
    return [tuple(r) for r in rows]


def _is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)   # YAML's true is no number


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
