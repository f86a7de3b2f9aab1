"""The run configuration the role commands read (`--config`, the Helm chart's run.yaml) and the
catalog file (`--catalog`, the chart's catalog.yaml).

run.yaml, as helm/federation/templates/configmaps.yaml renders it:

    run: {id: lab, dir: /var/fedlab/data/run/lab, algorithm: sze-ling, seed: 1}
    catalog: /etc/fedlab/config/catalog.yaml      # relative paths: from the config file's folder
    view: "SELECT ..."
    views: [{name: revenue, view: "SELECT ...", algorithm: versioned, warehouse: wh2}]   # optional: more views
    sources: [{name: s1, address: "lab-fedlab-src-s1:50051"}, ...]
    warehouse: {address: "lab-fedlab-warehouse:50052", data: /var/fedlab/data/warehouse,
                spark_master: "k8s://..."}
    warehouses: [{name: wh2, address: "lab-fedlab-wh-wh2:50052"}]   # optional: more warehouses
    workload: {kind: synthetic, initialRows: 1000, mix: {...}, skew: 0.0}
    load: {duration: 120s, rate: 20}
    faults_file: /etc/fedlab/faults/faults.json
    tls: false

`views` are more views kept beside `view` (warehouse.view_group), each by its name (the first,
`view`, is named `warehouse`: fedmodel.messages.DEFAULT_SUBSCRIBER), its algorithm (default
run.algorithm) and the warehouse that keeps it (default the first, `warehouse`; another is one of
`warehouses`, each a subscriber of that name at the sources, `fedlab warehouse --name NAME`).
Beyond the chart: a source entry may name its database file (`db`), when the run directory can
reach it (a single machine); the run file then points the checker at it.
catalog.yaml is the scenario file's `sources` and `constraints` sections (Catalog.from_dict).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fedlab.fedmodel.aggregate_view import AggregateView, parse_query
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER
from fedlab.fedmodel.viewdef import ViewDef
from fedlab.fedio.yamlfile import read_yaml as read_yaml_file
from fedlab.warehouse.core import registry


class ConfigError(ModelError):
    """A missing or malformed configuration file (one line naming the file and the field)."""


@dataclass
class SourceEntry:
    name: str
    address: str
    db: Path | None = None


@dataclass
class MoreView:
    """A view the warehouse keeps beside the config's `view` (run.yaml's `views`)."""

    name: str
    view: ViewDef | AggregateView
    algorithm: str
    warehouse: str = DEFAULT_SUBSCRIBER   # the subscriber name of the warehouse keeping it


@dataclass
class RunConfig:
    path: Path
    run_id: str
    run_dir: Path | None
    algorithm: str
    seed: int
    catalog: Catalog
    view: ViewDef | AggregateView   # the user's; what sources are probed for and loads draw from is view.join
    sources: list[SourceEntry]
    warehouse_address: str | None
    warehouse_data: str | None
    spark_master: str | None
    workload: dict = field(default_factory=dict)
    load: dict = field(default_factory=dict)
    more_views: list[MoreView] = field(default_factory=list)
    more_warehouses: dict[str, str] = field(default_factory=dict)   # the other warehouses' addresses, by name

    @property
    def addresses(self) -> dict[str, str]:
        return {s.name: s.address for s in self.sources}

    @property
    def view_names(self) -> list[str]:
        """The name of each view, `view`'s first."""
        return [DEFAULT_SUBSCRIBER, *(v.name for v in self.more_views)]

    @property
    def warehouse_names(self) -> list[str]:
        """The name of each warehouse, the first's (DEFAULT_SUBSCRIBER) first."""
        return [DEFAULT_SUBSCRIBER, *self.more_warehouses]

    def kept_by(self, warehouse: str) -> list[MoreView]:
        """The views the warehouse `warehouse` keeps, `view` first (as a MoreView named
        DEFAULT_SUBSCRIBER) when it is the first warehouse."""
        first = [MoreView(DEFAULT_SUBSCRIBER, self.view, self.algorithm)] if warehouse == DEFAULT_SUBSCRIBER else []
        return first + [v for v in self.more_views if v.warehouse == warehouse]

    def address_of(self, warehouse: str) -> str | None:
        """Where the warehouse `warehouse` serves."""
        return self.warehouse_address if warehouse == DEFAULT_SUBSCRIBER else self.more_warehouses[warehouse]


def read_yaml(path: str | Path, what: str) -> dict:
    return read_yaml_file(path, what, ConfigError)


def load_catalog(path: str | Path) -> Catalog:
    doc = read_yaml(path, "catalog")
    try:
        return Catalog.from_dict(doc, where=f"catalog {path}")
    except ModelError as err:
        raise ConfigError(str(err)) from None
    except (KeyError, TypeError, AttributeError) as err:
        raise ConfigError(f"catalog {path}: malformed ({err})") from None


def load_config(path: str | Path) -> RunConfig:
    path = Path(path)
    doc = read_yaml(path, "config")
    where = f"config {path}"
    try:
        run = doc.get("run") or {}
        base = path.parent
        catalog = load_catalog(base / str(doc["catalog"]))
        view = parse_query(str(doc["view"]), catalog)
        sources = [SourceEntry(str(s["name"]), str(s["address"]), base / str(s["db"]) if s.get("db") else None)
                   for s in doc.get("sources") or []]
        warehouse = doc.get("warehouse") or {}
        config = RunConfig(path, str(run.get("id", "")), base / str(run["dir"]) if run.get("dir") else None,
                           str(run.get("algorithm", "sze-ling")), int(run.get("seed", 0)), catalog, view, sources,
                           warehouse.get("address"), warehouse.get("data"), warehouse.get("spark_master"),
                           dict(doc.get("workload") or {}), dict(doc.get("load") or {}),
                           [_more_view(v, i, catalog, str(run.get("algorithm", "sze-ling")), where)
                            for i, v in enumerate(doc.get("views") or [])],
                           _more_warehouses(doc.get("warehouses") or [], where))
    except KeyError as err:
        raise ConfigError(f"{where}: missing field {err}") from None
    except ConfigError:
        raise
    except ModelError as err:
        raise ConfigError(f"{where}: {err}") from None
    except (TypeError, ValueError, AttributeError) as err:
        raise ConfigError(f"{where}: malformed ({err})") from None
    unknown = sorted({s.name for s in config.sources} ^ set(catalog.sources))
    if unknown:
        raise ConfigError(f"{where}: sources {unknown} are not both in 'sources' and in the catalog")
    try:   # the chart's run.algorithm: any registered plug-in that maintains the view
        registry.check_view(config.algorithm, config.view.join)
    except registry.AlgorithmError as err:
        raise ConfigError(f"{where}: run.algorithm: {err}") from None
    twice = [n for i, n in enumerate(config.view_names) if n in config.view_names[:i]]
    if twice:
        raise ConfigError(f"{where}: views: {twice[0]!r} is named twice (the first view is {DEFAULT_SUBSCRIBER!r})")
    for i, v in enumerate(config.more_views):
        try:
            registry.check_view(v.algorithm, v.view.join)
        except registry.AlgorithmError as err:
            raise ConfigError(f"{where}: views[{i}] ({v.name}): {err}") from None
        if v.warehouse not in config.warehouse_names:
            raise ConfigError(f"{where}: views[{i}] ({v.name}): no warehouse named {v.warehouse!r} "
                              f"(the warehouses: {', '.join(config.warehouse_names)})")
    idle = [w for w in config.more_warehouses if not config.kept_by(w)]
    if idle:
        raise ConfigError(f"{where}: warehouses: {idle[0]!r} keeps no view (name it in a view's 'warehouse')")
    return config


def _more_view(doc: dict, i: int, catalog: Catalog, algorithm: str, where: str) -> MoreView:
    """views[i] of run.yaml; ConfigError naming the entry and what is wrong with it."""
    if not isinstance(doc, dict) or not doc.get("name") or not doc.get("view"):
        raise ConfigError(f"{where}: views[{i}]: needs a name and a view")
    try:
        return MoreView(str(doc["name"]), parse_query(str(doc["view"]), catalog), str(doc.get("algorithm") or algorithm),
                        str(doc.get("warehouse") or DEFAULT_SUBSCRIBER))
    except ModelError as err:
        raise ConfigError(f"{where}: views[{i}] ({doc['name']}): {err}") from None


def _more_warehouses(docs: list, where: str) -> dict[str, str]:
    """run.yaml's warehouses: each one's address by its name; ConfigError naming the entry."""
    addresses: dict[str, str] = {}
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or not doc.get("name") or not doc.get("address"):
            raise ConfigError(f"{where}: warehouses[{i}]: needs a name and an address")
        name = str(doc["name"])
        if name == DEFAULT_SUBSCRIBER or name in addresses:
            raise ConfigError(f"{where}: warehouses[{i}]: {name!r} is named twice (the first warehouse is "
                              f"{DEFAULT_SUBSCRIBER!r}, at warehouse.address)")
        addresses[name] = str(doc["address"])
    return addresses
