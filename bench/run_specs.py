"""The runs one `fedlab bench` asks for, checked before anything starts.

Every combination of algorithm, view, scale factor and chaos setting is one run; all runs share
the workload, the seed, the offered rate and the ramp, so they differ only in what is compared.
An algorithm is written `name` or `name:access` (`sze-ling:scan` is Sze-Ling's compensation with
the Strobe family's left/right scans instead of join-graph sub-queries). `lazy` runs once per
value of the combine bound (`--combine-max 1,10,100,1000`), labelled `lazy@N` (`lazy@NxJ` with
`--max-jobs J` above 1: J jobs may overlap). A placement says which
source holds which TPC-H relation: `default` (loadgen.tpch: customer, orders and lineitem all at
"sales", so Q3 is a one-source view) or `spread` (customer, orders and lineitem at three
different sources, so Q3 joins across all three).

With `--federation` the runs are over synthetic federations instead of TPC-H
(`synthetic_federations`: every shape at every `--sources` count, each relation at a source of
its own, loadgen.federation_shapes): the view of a run is then its federation's, named
like `chain-6`, and it has no scale factor.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.source_node.engines import DEFAULT_ENGINE
from fedlab.warehouse.core.registry import Settings
from fedlab.warehouse.settings import SettingError, WarehouseSettings

if TYPE_CHECKING:   # the driver's module imports gRPC: `fedlab bench --help` need not wait for it
    from fedlab.loadgen.driver_process import SyntheticRecipe

PLACEMENTS = {
    "default": None,   # loadgen.tpch.DEFAULT_PLACEMENT
    "spread": {"crm": ["customer", "nation", "region"], "ordering": ["orders"],
               "fulfilment": ["lineitem", "part", "partsupp", "supplier"]},
}
ONE_PER_SOURCE = "one per source"   # the placement of a synthetic federation's relations
DEFAULT_SOURCES = "3,6,12,24"       # --sources: how many sources the synthetic federations have
DEFAULT_RELATION_ROWS = 2000


class BenchArgumentError(ValueError):
    """Bad bench arguments (one line, exit status 2)."""


@dataclass(frozen=True, kw_only=True)
class BenchPlan:
    """What one `fedlab bench` asks for, before `run_specs` checks it and spells it out as runs:
    built in one place from the command line (bench.command.plan_from) or by a test.
    Each default has its home here; the command's flags show these. Lists are comma-separated
    text, as on the command line; `synthetic` (synthetic_federations) replaces the TPC-H views,
    scale factors and placements."""
    algorithms: str = "sze-ling,sze-ling:scan,recompute"   # what the performance targets compare (bench.targets)
    views: str = "q3,q5"
    scales: str = "0.1"
    placements: str = "spread"
    chaos: tuple[str, ...] = ("notification_drop=0.05,notification_reorder=0.1",)   # a run per setting ("none": none)
    rate: float = 500.0            # offered txn/s during the load phase
    duration: float = 15.0         # seconds of the load phase
    ramp_start: float = 256.0
    ramp_factor: float = 2.0
    ramp_max: float = 8192.0       # 0: no ramp
    ramp_step: float = 8.0         # seconds per ramp step
    settle: float = 30.0           # seconds a run waits for the view to reflect every commit
    seed: int = 1
    workload: str = "mixed"
    source_engine: str = DEFAULT_ENGINE
    capture: str | None = None     # a PostgreSQL source's: "triggers" (None) or "logical" (source_node.engines)
    batch_interval: float = WarehouseSettings.batch_interval
    repeat: int = 1
    combine: str = "1,10,100,1000"   # lazy's bounds, a run each
    max_jobs: int = 1
    synthetic: tuple[SyntheticRecipe, ...] = ()
    outside_writers: float = 0.0   # pgbench's txn/s on a PostgreSQL source (live.outside_writers)
    reorder_allowance: float | None = None   # None: the core's default
    journal_retention: float | None = WarehouseSettings.journal_retention
    history_retention: float | None = WarehouseSettings.history_retention
    nemesis: str = ""              # a fault schedule for every run's load (nemesis.schedule)


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    algorithm: str
    access: str | None
    view: str
    scale: float | None           # TPC-H's scale factor; None for a synthetic federation
    chaos: str
    faults: dict = field(hash=False)
    rate: float
    duration: float
    ramp_rates: tuple
    ramp_step: float
    settle: float
    seed: int
    workload: str
    placement: str
    source_engine: str
    capture: str | None           # a PostgreSQL source's (source_node.engines)
    batch_interval: float         # the warehouse's seconds between Delta batches (at most)
    trial: int                    # which repetition of the same run (--repeat)
    combine_max: int | None       # lazy's bound (warehouse.core.sze_ling.deferral); None for the others
    max_jobs: int                 # lazy's jobs in progress at once
    synthetic: SyntheticRecipe | None   # the synthetic federation the run is over, instead of TPC-H
    outside_writers: float        # pgbench's transactions per second on the sales source during the load
    reorder_allowance: float      # seconds a gap in notifications waits for a resend
    journal_retention: float | None   # seconds the Delta journal keeps its history (None: forever)
    history_retention: float | None   # seconds the change history, the logs keep (None: forever)
    nemesis: tuple = ()           # process faults applied from outside during the load (nemesis)

    @property
    def label(self) -> str:
        return (self.algorithm + (f":{self.access}" if self.access else "")
                + (f"@{self.combine_max}" if self.combine_max is not None else "")
                + (f"x{self.max_jobs}" if self.combine_max is not None and self.max_jobs > 1 else ""))

    @property
    def access_path(self) -> str:
        """The access path the run used: the one asked for, or the algorithm's own default."""
        from fedlab.warehouse.core import registry

        return registry.get(self.algorithm).access(self.access) or "whole relations"

    @property
    def data(self) -> str:
        """The sources' initial data, naming the database files prepared from it (runs of one name
        share them): TPC-H's scale factor and placement, or the synthetic federation."""
        return self.synthetic.name if self.synthetic else f"sf{self.scale:g}-{self.placement}"

    def catalog(self) -> Catalog:
        """The relations of the run's sources: TPC-H's in the run's placement, or the synthetic federation's."""
        from fedlab.loadgen.tpch import tpch_catalog

        return self.synthetic.federation.catalog if self.synthetic else tpch_catalog(PLACEMENTS[self.placement])

    def view_sql(self) -> str:
        from fedlab.loadgen.tpch import load_view

        return self.synthetic.federation.view_sql if self.synthetic else load_view(self.view)

    def folder(self, index: int, several: dict[str, bool], name: str | None = None) -> str:
        """The run directory's name: its index, its label (or `name`: a shared stream's "shared")
        and whatever differs between the bench's runs."""
        parts = [f"{index:02d}", name or self.label.replace(":", "-").replace("@", "-")]
        if several["view"]:
            parts.append(self.view)
        if several["scale"]:
            parts.append(f"sf{self.scale:g}")
        if several["chaos"]:
            parts.append("chaos" if self.chaos else "nochaos")
        if several["placement"]:
            parts.append(self.placement)
        if several["trial"]:
            parts.append(f"r{self.trial}")
        return "-".join(parts)


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def synthetic_federations(shapes: str, sizes: str, rows: int, seed: int) -> list[SyntheticRecipe]:
    """The synthetic federations `--federation` and `--sources` ask for: every shape at every
    size, the smallest size first (an interrupted bench has compared the shapes as far as it got),
    `rows` rows per relation drawn with `seed`; BenchArgumentError naming the first bad argument."""
    from fedlab.loadgen.driver_process import SyntheticRecipe
    from fedlab.loadgen.federation_shapes import SHAPES

    shape_list = list(dict.fromkeys(_split(shapes)))
    for shape in shape_list:
        if shape not in SHAPES:
            raise BenchArgumentError(f"--federation: unknown shape {shape!r} (one of {', '.join(SHAPES)})")
    if not shape_list:
        raise BenchArgumentError(f"--federation: name at least one shape ({', '.join(SHAPES)})")
    try:
        size_list = sorted({int(n) for n in _split(sizes)})
    except ValueError:
        raise BenchArgumentError(f"--sources: expected whole numbers such as {DEFAULT_SOURCES}, got {sizes!r}") from None
    if not size_list or size_list[0] < 2:
        raise BenchArgumentError(f"--sources: a view joins two sources at least; expected whole numbers of at least 2, "
                        f"got {sizes!r}")
    if rows < 1:
        raise BenchArgumentError(f"--relation-rows must be 1 or more, got {rows}")
    return [SyntheticRecipe(shape, n, rows, seed) for n in size_list for shape in shape_list]


def run_specs(plan: BenchPlan) -> list[RunSpec]:
    """The runs `plan` asks for, in order; BenchArgumentError naming the first bad argument. With
    `repeat` > 1 the whole list runs that many times over (trial 1 of every run, then trial 2...),
    so that a drift of the machine over the bench spreads over every run alike."""
    from fedlab.bench.ramp import rates

    # the phases check their arguments in this order, which decides the bad one named first
    algorithm_runs = _algorithm_runs(plan.algorithms, plan.combine, plan.max_jobs)
    data, sources = _synthetic_runs(plan.synthetic) if plan.synthetic else _tpch(plan.views, plan.scales,
                                                                                 plan.placements)
    chaos_list = list(plan.chaos or BenchPlan.chaos)
    faults = _faults(chaos_list, sources)
    _validate_load(plan)
    _validate_outside_writers(plan.outside_writers, plan.source_engine, data)
    if plan.capture is not None and plan.source_engine != "postgres":
        raise BenchArgumentError(f"--capture {plan.capture} is for --source-engine postgres")
    _check_views(algorithm_runs, data)
    allowance = _reorder_allowance(plan.reorder_allowance)
    journal, history = _retention(plan.journal_retention, plan.history_retention)
    step_rates = tuple(rates(plan.ramp_start, plan.ramp_factor, plan.ramp_max)) if plan.ramp_max > 0 else ()
    specs = [RunSpec(algorithm=name, access=access, view=view, scale=scale, chaos="" if spec == "none" else spec,
                     faults=faults[spec], rate=plan.rate, duration=plan.duration, ramp_rates=step_rates,
                     ramp_step=plan.ramp_step, settle=plan.settle, seed=plan.seed, workload=plan.workload,
                     placement=placement, source_engine=plan.source_engine, capture=plan.capture, batch_interval=plan.batch_interval,
                     trial=trial, combine_max=combine_max, max_jobs=plan.max_jobs, synthetic=recipe,
                     outside_writers=plan.outside_writers, reorder_allowance=allowance,
                     journal_retention=journal, history_retention=history)
             for trial in range(1, plan.repeat + 1)
             for view, scale, placement, recipe in data for spec in chaos_list
             for name, access, combine_max in algorithm_runs]
    return [replace(spec, nemesis=_nemesis(plan.nemesis, spec)) for spec in specs] if plan.nemesis else specs


def _check_views(algorithm_runs: list[tuple[str, str | None, int | None]], data: list[tuple]) -> None:
    """BenchArgumentError for an algorithm that cannot maintain a TPC-H view of the bench (an outer
    join, which some refuse: registry.check_view), before any run starts."""
    from fedlab.fedmodel.aggregate_view import parse_query
    from fedlab.loadgen.tpch import load_view, tpch_catalog
    from fedlab.warehouse.core import registry

    for view in dict.fromkeys(v for v, _scale, _placement, recipe in data if recipe is None):
        join = parse_query(load_view(view), tpch_catalog()).join
        for name, access, _ in algorithm_runs:
            try:
                registry.check_view(name, join, access)
            except registry.AlgorithmError as err:
                raise BenchArgumentError(f"--algorithms: {name} over --views {view}: {err}") from None


def _algorithm_runs(algorithms: str, combine: str, max_jobs: int) -> list[tuple[str, str | None, int | None]]:
    """(algorithm, access path or None, combine bound) of each run over one view: lazy once per
    combine bound, the others once (no bound)."""
    from fedlab.warehouse.core import registry

    pairs = []
    for item in _split(algorithms):
        name, _, access = item.partition(":")
        try:
            registry.get(name).access(access or None)
        except registry.AlgorithmError as err:
            raise BenchArgumentError(f"--algorithms: {item}: {err}") from None
        pairs.append((name, access or None))
    if not pairs:
        raise BenchArgumentError("--algorithms: name at least one algorithm")
    try:
        bounds = [int(n) for n in _split(combine)]
    except ValueError:
        raise BenchArgumentError(f"--combine-max: expected whole numbers such as 1,10,100, got {combine!r}") from None
    if not bounds or any(n < 1 for n in bounds):
        raise BenchArgumentError(f"--combine-max: expected whole numbers of at least 1, got {combine!r}")
    if max_jobs < 1:
        raise BenchArgumentError(f"--max-jobs must be 1 or more, got {max_jobs}")
    return [(name, access, n) for name, access in pairs for n in (bounds if name == "lazy" else [None])]


def _synthetic_runs(synthetic: tuple[SyntheticRecipe, ...]) -> tuple[list[tuple], list[str]]:
    """(view, scale, placement, synthetic federation) of each synthetic run, and the sources every
    federation has."""
    data = [(recipe.name, None, ONE_PER_SOURCE, recipe) for recipe in synthetic]
    # A fault for one source must name a source of every federation compared.
    sources = sorted(set.intersection(*(set(recipe.federation.catalog.sources) for recipe in synthetic)))
    return data, sources


def _faults(chaos_list: list[str], sources: list[str]) -> dict[str, dict]:
    """The message fault rates of each --chaos setting ("none": none), by setting."""
    from fedlab.live.run import parse_chaos

    faults = {}
    for spec in chaos_list:
        try:
            faults[spec], kills = parse_chaos("" if spec == "none" else spec, sources)
        except ValueError as err:
            raise BenchArgumentError(str(err)) from None
        if kills:
            raise BenchArgumentError("--chaos: the bench injects message faults only (use fedlab run for process kills)")
    return faults


def _validate_load(plan: BenchPlan) -> None:
    """BenchArgumentError naming the first of the load's and the timings' arguments that the bench cannot run."""
    from fedlab.loadgen.workload import WORKLOADS

    if plan.workload not in WORKLOADS:
        raise BenchArgumentError(f"--workload: unknown workload {plan.workload!r} (one of {', '.join(WORKLOADS)})")
    if not (plan.rate > 0 and plan.duration > 0 and plan.ramp_step > 0 and plan.ramp_start > 0
            and plan.ramp_factor > 1 and plan.settle >= 0 and plan.batch_interval > 0):
        raise BenchArgumentError("--rate, --duration, --ramp-step, --ramp-start and --batch-interval must be positive, "
                        "--ramp-factor above 1")
    if plan.repeat < 1:
        raise BenchArgumentError(f"--repeat must be 1 or more, got {plan.repeat}")


def _reorder_allowance(seconds: float | None) -> float:
    """The reorder allowance every run's warehouse takes (None: the core's default), judged as the
    warehouse's settings judge it."""
    try:
        return WarehouseSettings(core=Settings(reorder_allowance=seconds)).reorder_allowance
    except SettingError as err:
        raise BenchArgumentError(f"--reorder-allowance {err.why}") from None


def _retention(journal: float | None, history: float | None) -> tuple[float | None, float | None]:
    """The retentions every run's warehouse takes (--journal-retention, --history-retention),
    judged as the warehouse's settings judge them."""
    try:
        settings = WarehouseSettings(journal_retention=journal, history_retention=history)
    except SettingError as err:
        raise BenchArgumentError(f"--{err.setting.replace('_', '-')} {err.why}") from None
    return settings.journal_retention, settings.history_retention


def _nemesis(text: str, spec: RunSpec) -> tuple:
    """The fault schedule `text` for one run: its faults, checked against the run's sources and
    what a local run of its algorithm can apply (nemesis.local)."""
    from fedlab.nemesis.local import refuser
    from fedlab.nemesis.schedule import read
    from fedlab.warehouse.core import registry

    refuse = refuser(spec.algorithm, registry.get(spec.algorithm).assumptions.restartable)
    try:
        return tuple(read(text, sorted(spec.catalog().sources), spec.duration, refuse))
    except ModelError as err:
        raise BenchArgumentError(str(err)) from None


def _validate_outside_writers(rate: float, source_engine: str, data: list[tuple]) -> None:
    """BenchArgumentError when pgbench cannot write a source of every run (live.outside_writers)."""
    from fedlab.live.outside_writers import source_written, written_source
    from fedlab.loadgen.tpch import tpch_catalog

    if not rate:
        return
    if any(recipe is not None for *_, recipe in data):
        raise BenchArgumentError("--outside-writers: the pgbench scripts write TPC-H's relations, not a synthetic federation's")
    try:
        source_written(rate, source_engine, tpch_catalog())   # the rate and the engine
    except ModelError as err:
        raise BenchArgumentError(str(err)) from None
    for placement in {placement for _, _, placement, _ in data}:
        try:
            written_source(tpch_catalog(PLACEMENTS[placement]))
        except ModelError as err:
            raise BenchArgumentError(f"{err}: give --placement default") from None


def _tpch(views: str, scales: str, placements: str) -> tuple[list[tuple], list[str]]:
    """(view, scale, placement, None) of each TPC-H run, placement by placement, and the sources
    every placement has."""
    from fedlab.loadgen.tpch import DEFAULT_PLACEMENT, load_view, view_names

    view_list = _split(views)
    for v in view_list:
        if v not in view_names():
            raise BenchArgumentError(f"--views: unknown view {v!r} (one of {', '.join(view_names())})")
        try:
            load_view(v)
        except ModelError as err:
            raise BenchArgumentError(f"--views: {err}") from None
    try:
        scale_list = [float(s) for s in _split(scales)]
    except ValueError:
        raise BenchArgumentError(f"--scale: expected numbers such as 0.01,0.1, got {scales!r}") from None
    if not view_list or not scale_list or any(not s > 0 for s in scale_list):
        raise BenchArgumentError("--views and --scale need at least one view and positive scale factors")
    placement_list = _split(placements)
    for p in placement_list:
        if p not in PLACEMENTS:
            raise BenchArgumentError(f"--placement: unknown placement {p!r} (one of {', '.join(PLACEMENTS)})")
    if not placement_list:
        raise BenchArgumentError("--placement: name at least one placement")
    # A fault for one source must name a source of every placement compared.
    sources = sorted(set.intersection(*(set(PLACEMENTS[p] or DEFAULT_PLACEMENT) for p in placement_list)))
    return [(view, scale, placement, None) for placement in placement_list for view in view_list
            for scale in scale_list], sources


def stream_units(specs: list[RunSpec], same_stream: bool) -> list[tuple[str, list[RunSpec]]]:
    """What runs on a federation of its own, in order: ("alone", [spec]) for each spec; with
    `same_stream`, the specs that differ only in their algorithm and view run first together
    ("shared": one federation, load and fault schedule, a subscriber each: issue 35), then each
    alone, so that the summary can say how much they disturb each other. A group of one spec has
    nothing to share a stream with and runs alone only.

    >>> a, = run_specs(BenchPlan(algorithms="sze-ling", views="q3", chaos=("none",)))
    >>> b = replace(a, algorithm="versioned")
    >>> units = stream_units([a, b, replace(a, view="q5"), replace(a, chaos="drop")], True)
    >>> [(kind, [(s.algorithm, s.view) for s in unit]) for kind, unit in units][:2]
    [('shared', [('sze-ling', 'q3'), ('versioned', 'q3'), ('sze-ling', 'q5')]), ('alone', [('sze-ling', 'q3')])]
    >>> [kind for kind, _ in units]
    ['shared', 'alone', 'alone', 'alone', 'alone']
    """
    if not same_stream:
        return [("alone", [spec]) for spec in specs]
    groups: dict[RunSpec, list[RunSpec]] = {}
    for spec in specs:
        groups.setdefault(replace(spec, algorithm="", access=None, combine_max=None, max_jobs=1, view=""),
                          []).append(spec)
    units = []
    for group in groups.values():
        if len(group) > 1:
            units.append(("shared", group))
        units += [("alone", [spec]) for spec in group]
    return units
