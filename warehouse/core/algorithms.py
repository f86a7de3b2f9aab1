"""The maintenance algorithms by name; each offers warehouse.core.algorithm.Algorithm.

- `sze-ling`: Sze & Ling 2000, complete: version-number compensation, DSV ordering with resend
  of lost notifications, partial self-maintenance, key-based refresh, join-graph access.
- `conventional`: incremental maintenance with no compensation ([BLT86], the Strobe paper's
  Example 1): updates processed and applied in arrival order; where the view holds the key, a
  deletion deletes view rows by key without a query (Example 1, step 3: "since the current view
  is empty, no action is taken for this deletion"). The reference for what goes wrong.
- `lazy`: Zhou & Larson 2007 over Sze-Ling's machinery: transactions wait, and several (across
  sources) are combined and condensed into one task when the warehouse is idle, when enough
  wait or the oldest has waited long enough, or when a query reads the view
  (warehouse.core.sze_ling.deferral). Strongly consistent: the skipped states are never shown.
- `versioned`: Sze-Ling's algorithm with sources that answer as of a version (Vinh 2020,
  formula 12; fedmodel.as_of): every sub-query asks for its relations at exactly its task's
  initial versions, so no answer needs compensating; a source whose recent changes no longer
  reach back that far (it restarted) answers at its current state and is compensated as usual.
  All four are configurations of the one engine (warehouse.core.sze_ling.engine).
- `strobe`, `t-strobe`, `g-strobe` (warehouse.core.baselines.strobe) and `c-strobe`
  (warehouse.core.baselines.c_strobe): Zhuge, Garcia-Molina & Wiener 1996, on the view widened with every
  relation's key (warehouse.core.baselines.keyed_view), scan access by default.
- `recompute`: periodic recomputation from whole-relation answers
  (warehouse.core.baselines.periodic_recompute), every `period` of time.
- `salem`: Salem, Beyer, Lindsay & Cochrane 2000: Propagate's asynchronous steps
  (ComputeDelta's forward queries and recursive compensation) into a timestamped view delta,
  applied one commit at a time or, with `apply="on-demand"`, rolled to a point in time when asked
  (warehouse.core.salem).
Any incremental one can be paired with another access path (`join-graph` or `scan`), so that a
run can separate the effect of compensation from that of the access path.
"""

from __future__ import annotations

from dataclasses import replace

from fedmodel.viewdef import ViewDef
from warehouse.core.baselines.c_strobe import CStrobe
from warehouse.core.baselines.keyed_view import widen
from warehouse.core.baselines.periodic_recompute import PeriodicRecompute
from warehouse.core.baselines.strobe import GStrobe, Strobe, TStrobe
from warehouse.core.occurrences import Occurrences
from warehouse.core.planner import ACCESS_PATHS
from warehouse.core.salem.propagate import Salem, SalemOptions
from warehouse.core.sze_ling.deferral import Deferral
from warehouse.core.sze_ling.engine import MaintenanceEngine, Options

ENGINE_ALGORITHMS = {
    "sze-ling": Options(),
    "conventional": Options(compensate=False, ordered=False, self_maintenance=False, key_shortcuts=True),
    "lazy": Options(deferral=Deferral()),
    "versioned": Options(as_of=True),
}
STROBE_FAMILY = {"strobe": Strobe, "t-strobe": TStrobe, "g-strobe": GStrobe, "c-strobe": CStrobe}
ALGORITHMS = (*ENGINE_ALGORITHMS, *STROBE_FAMILY, "recompute", "salem")
# The Strobe paper assumes each source's messages are processed in the order it sent them
# (section 3.3); an adapter whose messages may overtake each other restores that order for these.
ASSUMES_FIFO = frozenset(STROBE_FAMILY)


def check(name: str, access: str | None = None) -> None:
    """Raises ValueError for an unknown algorithm or access path."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r} (one of {', '.join(ALGORITHMS)})")
    if access is not None and access not in ACCESS_PATHS:
        raise ValueError(f"unknown access path {access!r} (one of {', '.join(ACCESS_PATHS)})")


def options_for(name: str, access: str | None = None, deferral: Deferral | None = None) -> Options:
    """The engine's options for `sze-ling`, `conventional`, `lazy` (with `deferral`'s bounds) or `versioned`."""
    check(name, access)
    if name not in ENGINE_ALGORITHMS:
        raise ValueError(f"{name!r} is not a configuration of the engine (one of {', '.join(ENGINE_ALGORITHMS)})")
    options = ENGINE_ALGORITHMS[name]
    if access:
        options = replace(options, access=access)
    if deferral is not None and options.deferral is not None:
        options = replace(options, deferral=deferral)
    return options


def maintained_view(name: str, view: ViewDef) -> ViewDef:
    """The view the algorithm keeps: the user's, or for the Strobe family the key-widened one."""
    check(name)
    return widen(view) if name in STROBE_FAMILY else view


def create(name: str, view, rows: dict, brv: dict, dsv: dict, access: str | None = None,
           force_queries=(), global_transactions: dict | None = None, period: float | None = None,
           deferral: Deferral | None = None, salem: SalemOptions | None = None, **timings):
    """The algorithm `name` over `view`, whose maintained view (`maintained_view(name, view)`)
    is `rows`, materialised at source states `dsv` / relation versions `brv`.

    `force_queries` (Sze-Ling Example 8) and `global_transactions` (txn id -> (global id, parts),
    Strobe Example 5) come from scenarios; `period` is recompute's, `deferral` lazy's, `salem`
    salem's (apply mode, step, rolling intervals); `timings` are `query_timeout`, `resend_timeout` and `reorder_allowance`
    (warehouse.core.sze_ling.engine.Options; salem takes them too, the Strobe family the first, recompute none).
    """
    check(name, access)
    brv = {**brv, **{r: brv[view.base_of(r)] for r in view.relations if view.base_of(r) in brv}}
    if name in ENGINE_ALGORITHMS:
        algorithm = MaintenanceEngine(view, rows, brv, dsv, replace(options_for(name, access, deferral), **timings),
                                      force_queries)
    elif name == "salem":
        timing = {k: v for k, v in timings.items() if k in ("query_timeout", "resend_timeout", "reorder_allowance")}
        algorithm = Salem(view, rows, brv, dsv, replace(salem or SalemOptions(), **timing))
    elif name == "recompute":
        algorithm = PeriodicRecompute(view, rows, brv, dsv, **({"period": period} if period else {}))
    else:
        kwargs = {"query_timeout": timings["query_timeout"]} if "query_timeout" in timings else {}
        algorithm = STROBE_FAMILY[name](view, rows, brv, dsv, access or "scan",
                                        global_transactions=global_transactions, **kwargs)
    # A view that reads a relation twice: the algorithm maintains it over its occurrences.
    return Occurrences(algorithm, view) if view.bases else algorithm


def restore(name: str, view, rows: dict, state: dict, access: str | None = None, **kwargs):
    """The algorithm `name` again after a crash, from what its durable store kept: the view
    `rows` and the version state (`version_state()`) they were made durable with. The live
    warehouse restarts from Delta with it, the simulator from its simulated durable store.
    `kwargs` as for `create`."""
    if maintained_view(name, view) is not view:
        raise ValueError(f"{name} keeps a key-widened view that the durable store does not hold; "
                         "it cannot restart from it")
    brv = {r: v["refreshed"] for r, v in state.get("relations", {}).items()}
    dsv = {s: v["applied_dsv"] for s, v in state.get("sources", {}).items()}
    return create(name, view, rows, brv, dsv, access, **kwargs)


def not_reflected(notifications, state: dict) -> list:
    """The notifications a durable store keeps beside the version `state` it makes durable: those
    the view does not reflect yet (above the state's applied DSV of their source). A restart
    maintains exactly those again (`restore`, then the notifications above applied_dsv); the
    others are in the view and the change log already. The live warehouse (a Delta batch) and the
    simulator's durable store keep the same.

    >>> from fedmodel.transactions import Notification
    >>> notes = [Notification("ds1", d, f"t{d}", ()) for d in (3, 4, 5)] + [Notification("ds2", 2, "u", ())]
    >>> [(n.source, n.dsv) for n in not_reflected(notes, {"sources": {"ds1": {"applied_dsv": 4}}})]
    [('ds1', 5), ('ds2', 2)]
    """
    applied = {s: v.get("applied_dsv", 0) for s, v in state.get("sources", {}).items()}
    return [n for n in notifications if n.dsv > applied.get(n.source, 0)]
