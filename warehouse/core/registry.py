"""Maintenance algorithms as plug-ins: what one declares, how the testbed finds it, and making one.

An algorithm is any object that follows the core protocol (warehouse.core.algorithm.Algorithm:
events in, actions out, carried out through warehouse.core.ports). A `Plugin` pairs a factory of
such objects with what the testbed needs to know about it: its name, its paper, the consistency
level it claims (Zhuge et al. 1996, section 4.2) and the assumptions under which it claims it.
Plug-ins are found through the Python entry-point group `fedlab.algorithms`, whose names are the
algorithms' names; the built-in ones (warehouse.core.builtin_plugins) register the same way in
fedlab's own pyproject.toml, so no code chooses an algorithm by its name. docs/new-algorithm.md
builds one as a package of its own.

    [project.entry-points."fedlab.algorithms"]
    my-algorithm = "mypackage.algorithm:PLUGIN"

The matrix (simulation.matrix) judges each algorithm against the level it claims, and
says which of its assumptions a condition breaks.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from importlib.metadata import entry_points
from typing import Callable

from fedlab.fedmodel.viewdef import ViewDef
from fedlab.warehouse.core.algorithm import Algorithm
from fedlab.warehouse.core.planner import ACCESS_PATHS

GROUP = "fedlab.algorithms"
LEVELS = ("none", "convergence", "weak", "strong", "complete")   # weakest first (the checker's)
TIMINGS = ("query_timeout", "resend_timeout", "reorder_allowance")


class AlgorithmError(ValueError):
    """An unknown algorithm, a plug-in that does not load, or a setting it cannot take: one line."""


@dataclass(frozen=True)
class Assumptions:
    """What an algorithm's claim rests on; a run that breaks one may fall short of the claim."""

    fifo: bool = False          # each source's messages are processed in the order it sent them
    no_loss: bool = False       # no message lost or repeated: it never asks again, never deduplicates
    keys_in_view: bool = False  # it maintains the view widened with every relation's key (keyed_view.widen)
    single_source: bool = False  # every relation of the view is at one source
    single_update: bool = False  # every source transaction changes one tuple
    restartable: bool = True    # it can restart from the durable store (view rows and version_state())

    def held(self) -> list[str]:
        """The assumptions it makes, by name (`restartable` is a capability, not an assumption)."""
        return [f.name for f in fields(self) if f.name != "restartable" and getattr(self, f.name)]


@dataclass(frozen=True)
class Settings:
    """What a command passes to the algorithm it runs; None: the algorithm's own default. Each
    factory takes what applies to it and leaves the rest."""

    access: str | None = None        # the access path (warehouse.core.planner)
    query_timeout: float | None = None
    resend_timeout: float | None = None
    reorder_allowance: float | None = None
    force_queries: tuple = ()        # Sze-Ling Example 8's forced sub-queries (scenarios)
    global_transactions: dict | None = None   # txn id -> (global id, parts) (Strobe Example 5)
    period: float | None = None      # periodic recomputation's period
    deferral: object = None          # lazy maintenance's bounds (warehouse.core.sze_ling.deferral)
    salem: object = None             # Salem's options (warehouse.core.salem.propagate.SalemOptions)

    def timings(self, *names: str) -> dict[str, float]:
        """The timings among `names` (all three without) that are set, by name."""
        return {n: getattr(self, n) for n in names or TIMINGS if getattr(self, n) is not None}


@dataclass(frozen=True)
class Plugin:
    """A maintenance algorithm as the testbed knows it.

    `factory(view, rows, brv, dsv, settings)` makes the algorithm over `view`, whose maintained
    view (`maintained_view`) is `rows`, materialised at source states `dsv` and relation versions
    `brv`. `default_access` is the access path it takes when none is asked for; None: it takes
    none (it reads whole relations)."""

    name: str
    paper: str
    level: str               # the consistency level it claims: one of LEVELS
    description: str         # one line
    factory: Callable[..., Algorithm]
    assumptions: Assumptions = Assumptions()
    default_access: str | None = "join-graph"
    point_in_time: bool = False   # it takes RefreshRequested: rolls its view to a point in time
    # It maintains a view with outer joins: the NULL-padded rows of their terms
    # (fedmodel.outer_joins), folded by warehouse.core.evaluation with every relation a term
    # lacks padded. An algorithm that joins rows its own way, or assumes a deletion removes view
    # rows by key, does not; it refuses such a view (`create`).
    outer_joins: bool = False

    def __post_init__(self):
        if self.level not in LEVELS:
            raise AlgorithmError(f"algorithm {self.name!r} claims level {self.level!r}: one of {', '.join(LEVELS)}")
        if self.default_access is not None and self.default_access not in ACCESS_PATHS:
            raise AlgorithmError(f"algorithm {self.name!r}: unknown default access path {self.default_access!r}")

    def maintained_view(self, view: ViewDef) -> ViewDef:
        """The view it keeps: the user's, or the key-widened one if it needs every key in the view."""
        if self.assumptions.keys_in_view:
            from fedlab.warehouse.core.baselines.keyed_view import widen
            return widen(view)
        return view

    def access(self, access: str | None) -> str | None:
        """The access path it runs with when `access` is asked for (None: its default)."""
        if access is None:
            return self.default_access
        if access not in ACCESS_PATHS:
            raise AlgorithmError(f"unknown access path {access!r} (one of {', '.join(ACCESS_PATHS)})")
        if self.default_access is None:
            raise AlgorithmError(f"{self.name} reads whole relations; it takes no access path")
        return access


def names() -> list[str]:
    """Every registered algorithm's name, without loading any: weakest claim first once loaded
    (`plugins`); here in the order of the entry points."""
    return list(dict.fromkeys(ep.name for ep in entry_points(group=GROUP)))


@cache
def get(name: str) -> Plugin:
    """The plug-in registered as `name`; AlgorithmError when none is, or it does not load."""
    found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
    if not found:
        raise AlgorithmError(f"unknown algorithm {name!r} (registered: {', '.join(names()) or 'none'})")
    ep = found[0]
    try:
        plugin = ep.load()
    except Exception as err:   # a plug-in's import may fail in any way; say which and how, once
        raise AlgorithmError(f"algorithm plug-in {name!r} ({ep.value}) failed to load: "
                             f"{type(err).__name__}: {err}") from None
    if not isinstance(plugin, Plugin):
        raise AlgorithmError(f"algorithm plug-in {name!r} ({ep.value}) is a {type(plugin).__name__}, "
                             "not a warehouse.core.registry.Plugin")
    if plugin.name != name:
        raise AlgorithmError(f"algorithm plug-in {name!r} ({ep.value}) calls itself {plugin.name!r}")
    return plugin


def plugins() -> list[Plugin]:
    """Every registered plug-in, weakest claim first, then by name; AlgorithmError for the first
    that does not load."""
    return sorted((get(n) for n in names()), key=lambda p: (LEVELS.index(p.level), p.name))


def create(name: str, view: ViewDef, rows: dict, brv: dict, dsv: dict, settings: Settings = Settings()) -> Algorithm:
    """The algorithm `name` over `view`, whose maintained view (`get(name).maintained_view(view)`)
    is `rows`, materialised at source states `dsv` / relation versions `brv`."""
    plugin = get(name)
    settings = Settings(**{**settings.__dict__, "access": plugin.access(settings.access)})
    check_view(name, view, settings.access)
    # A relation read twice (a self-join) has the versions of the relation it reads.
    brv = {**brv, **{r: brv[view.base_of(r)] for r in view.relations if view.base_of(r) in brv}}
    algorithm = plugin.factory(view, rows, brv, dsv, settings)
    if view.bases:   # a view that reads a relation twice: maintained over its occurrences
        from fedlab.warehouse.core.occurrences import Occurrences
        return Occurrences(algorithm, view)
    return algorithm


def check_view(name: str, view: ViewDef, access: str | None = None) -> None:
    """AlgorithmError (one line) when the algorithm `name` cannot maintain `view` (the join of a
    user's view) with `access` (None: its default): what `create` refuses, asked by the live
    commands before anything starts."""
    plugin = get(name)
    if view.outer is not None:
        _refuse_outer_joins(plugin, plugin.access(access))


def _refuse_outer_joins(plugin: Plugin, access: str | None) -> None:
    """AlgorithmError (one line) unless `plugin` maintains outer joins along the join graph."""
    if not plugin.outer_joins:
        raise AlgorithmError(f"{plugin.name} cannot maintain outer joins (LEFT, RIGHT, FULL JOIN): it joins "
                             "without the padded rows of their terms; sze-ling, lazy, versioned, conventional "
                             "and recompute do")
    if access == "scan":
        raise AlgorithmError(f"{plugin.name} cannot maintain outer joins with scan access, whose steps may "
                             "be cartesian products; use --access join-graph")


def restore(name: str, view: ViewDef, rows: dict, state: dict, settings: Settings = Settings()) -> Algorithm:
    """The algorithm `name` again after a crash, from what its durable store kept: the view
    `rows` and the version state (`version_state()`) they were made durable with. The live
    warehouse restarts from Delta with it, the simulator from its simulated durable store."""
    plugin = get(name)
    if not plugin.assumptions.restartable:
        why = ("its key-widened view is not what the store holds" if plugin.assumptions.keys_in_view
               else "its plug-in does not claim restarts")
        raise AlgorithmError(f"{name} cannot restart from the durable store ({why})")
    brv = {r: v["refreshed"] for r, v in state.get("relations", {}).items()}
    dsv = {s: v["applied_dsv"] for s, v in state.get("sources", {}).items()}
    return create(name, view, rows, brv, dsv, settings)


def not_reflected(notifications, state: dict) -> list:
    """The notifications a durable store keeps beside the version `state` it makes durable: those
    the view does not reflect yet (above the state's applied DSV of their source), in (source,
    DSV) order. A restart maintains exactly those again, in that order (`restore`, then these);
    the others are in the view and the change log already. The live warehouse (a Delta batch) and
    the simulator's durable store keep the same.

    >>> from fedlab.fedmodel.transactions import Notification
    >>> notes = [Notification("ds2", 2, "u", ())] + [Notification("ds1", d, f"t{d}", ()) for d in (5, 3, 4)]
    >>> [(n.source, n.dsv) for n in not_reflected(notes, {"sources": {"ds1": {"applied_dsv": 3}}})]
    [('ds1', 4), ('ds1', 5), ('ds2', 2)]
    """
    applied = {s: v.get("applied_dsv", 0) for s, v in state.get("sources", {}).items()}
    return sorted((n for n in notifications if n.dsv > applied.get(n.source, 0)), key=lambda n: (n.source, n.dsv))
