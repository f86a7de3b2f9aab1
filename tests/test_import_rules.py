"""docs/architecture.md's rules of the layout (section 2), checked on the source: the imports of
every module of fedlab, read with ast (nothing is imported, no Spark), each violation one line
naming the file, the line, the import and the rule it breaks.

- the pure core (warehouse/core/, with the fedmodel modules it reaches) imports nothing but
  computation: an allow-list, which leaves out every I/O module (grpc, ray, pyspark, delta, socket,
  threading, subprocess, sqlite3, duckdb, psycopg, os, time, random, ...), and reads no clock;
- the checker reaches nothing of the maintenance path: of fedlab, only itself and the fedmodel
  modules that describe the data both sides exchange;
- fedmodel imports only itself;
- nothing imports upward: fedmodel < fedio < source_node, warehouse < loadgen, checker < the tools
  that run the federation (simulation, bench, live, roles, nemesis) < the command.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RULES = "docs/architecture.md 2"

# What the core may import besides itself and fedmodel: computation only. sqlglot parses and
# rewrites the view's SQL (fedmodel.viewdef), in memory. datetime is the type of date columns;
# reading the clock through it is refused below (CLOCK_READS).
PURE = {"__future__", "abc", "bisect", "collections", "dataclasses", "datetime", "enum", "functools", "heapq",
        "itertools", "math", "operator", "re", "typing", "sqlglot"}
CLOCK_READS = {"now", "utcnow", "today"}
# The one exception: the registry finds plug-ins through the installed packages' entry points
# (docs/new-algorithm.md), read once per name when an algorithm is looked up, never while handling
# an event.
CORE_EXCEPTIONS = {("fedlab.warehouse.core.registry", "importlib.metadata")}

# The model both sides speak, as data: relations and keys, the rows' codec, the transactions as a
# source logs them, the message logs' format. Not viewdef's join graph, condense, as_of, subquery
# and the rest, which compute maintenance.
CHECKER_READS = {"fedlab.fedmodel.catalog", "fedlab.fedmodel.codec", "fedlab.fedmodel.errors",
                 "fedlab.fedmodel.message_log", "fedlab.fedmodel.transactions", "fedlab.preflight"}

# Lowest first; a package imports from lower layers only, and from its own layer only in the
# tooling that runs the federation, whose packages use each other (the bench runs live
# federations and the simulator, the simulator reports with the bench's metrics). The sources and
# the warehouse meet on the wire only; the load and the checker know nothing of the tools that use
# them. "fedlab" is the command (fedlab.cli and its subcommands in fedlab/), above everything;
# fedlab.preflight, where the machine's programs are (PostgreSQL's for the checker's server), below
# everything: it imports nothing of fedlab, as it runs before fedlab is installed.
RUNNING = {"simulation", "bench", "live", "roles", "nemesis"}
LAYERS = [{"preflight"}, {"fedmodel"}, {"fedio"}, {"source_node", "warehouse"}, {"loadgen", "checker"}, RUNNING,
          {"fedlab"}]


@dataclass(frozen=True)
class Import:
    line: int
    name: str   # the module, in full: "fedlab.warehouse.core.events", "grpc", "importlib.metadata"


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    imports: tuple[Import, ...]
    clock_reads: tuple[int, ...]   # lines calling .now(), .utcnow() or .today()

    def where(self, line: int, root: Path) -> str:
        return f"{self.path.relative_to(root)}:{line}"


def module_name(path: Path, root: Path) -> str:
    """fedlab's name of a file: fedlab/cli.py is fedlab.cli, warehouse/core/events.py is
    fedlab.warehouse.core.events (setup.py maps the folders)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "fedlab" else ["fedlab", *parts])


def absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The module a `from` import reads from, a relative one resolved against its importer."""
    if not node.level:
        return node.module
    parts = importer.split(".")
    base = parts[:len(parts) - node.level + is_package]
    return ".".join([*base, node.module] if node.module else base)


def walk(root: Path) -> dict[str, Module]:
    """Every module of fedlab under `root`: fedlab/ and each package folder beside it, by name."""
    folders = [init.parent for init in sorted(root.glob("*/__init__.py"))]
    paths = {module_name(path, root): path for folder in folders for path in sorted(folder.rglob("*.py"))}
    modules = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(), str(path))
        imports, clock = [], []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imports += [Import(node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = absolute(node, name, path.name == "__init__.py")
                # `from fedlab.checker import windows` imports the module fedlab.checker.windows
                imports += [Import(node.lineno, f"{source}.{alias.name}") if f"{source}.{alias.name}" in paths
                            else Import(node.lineno, source) for alias in node.names]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in CLOCK_READS:
                clock.append(node.lineno)
        modules[name] = Module(name, path, tuple(dict.fromkeys(imports)), tuple(clock))
    return modules


def package(name: str) -> str | None:
    """The package folder a fedlab module is in ("fedlab.warehouse.core.events": warehouse), "fedlab"
    for the command's modules, None for the namespace package itself (which imports nothing)."""
    parts = name.split(".")
    if parts[0] != "fedlab" or len(parts) == 1:
        return None
    return parts[1] if parts[1] in set().union(*LAYERS[:-1]) else "fedlab"


def inside(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def reached(modules: dict[str, Module], prefix: str) -> list[Module]:
    """The modules under `prefix` and every fedlab module they import, directly or not."""
    seen, todo = {}, [name for name in modules if inside(name, prefix)]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen[name] = modules[name]
            todo += [imp.name for imp in modules[name].imports if imp.name in modules]
    return list(seen.values())


def core_io(modules: dict[str, Module], root: Path) -> list[str]:
    """The core's imports (and those of the fedmodel modules it reaches) that are not computation,
    the core's fedlab imports outside itself and fedmodel, and its clock reads."""
    rule = f"the pure core imports no I/O and reads no clock ({RULES})"
    out = []
    for module in reached(modules, "fedlab.warehouse.core"):
        for imp in module.imports:
            if package(imp.name) is None and imp.name.split(".")[0] not in PURE \
                    and (module.name, imp.name) not in CORE_EXCEPTIONS:
                out.append(f"{module.where(imp.line, root)}: {module.name} imports {imp.name}: {rule}")
            elif not (package(imp.name) is None or inside(imp.name, "fedlab.warehouse.core")
                      or inside(imp.name, "fedlab.fedmodel")):
                out.append(f"{module.where(imp.line, root)}: {module.name} imports {imp.name}: {rule}; "
                           f"of fedlab it imports only itself and fedmodel (the adapters do the I/O)")
        out += [f"{module.where(line, root)}: {module.name} reads the clock: {rule}" for line in module.clock_reads]
    return out


def checker_reach(modules: dict[str, Module], root: Path) -> list[str]:
    """The checker's fedlab imports outside itself and CHECKER_READS, also through what it imports."""
    rule = (f"the checker imports nothing of the maintenance path: of fedlab, only itself and "
            f"{', '.join(sorted(CHECKER_READS))} ({RULES})")
    return [f"{module.where(imp.line, root)}: {module.name} imports {imp.name}: {rule}"
            for module in reached(modules, "fedlab.checker") for imp in module.imports
            if package(imp.name) is not None and not inside(imp.name, "fedlab.checker")
            and imp.name not in CHECKER_READS]


def fedmodel_outside(modules: dict[str, Module], root: Path) -> list[str]:
    rule = f"fedmodel imports only itself of fedlab ({RULES})"
    return [f"{module.where(imp.line, root)}: {module.name} imports {imp.name}: {rule}"
            for module in modules.values() if inside(module.name, "fedlab.fedmodel") for imp in module.imports
            if package(imp.name) is not None and not inside(imp.name, "fedlab.fedmodel")]


def upward(modules: dict[str, Module], root: Path) -> list[str]:
    """Imports of a package of a higher layer, or of another package of the same lower layer."""
    layer = {name: number for number, members in enumerate(LAYERS) for name in members}
    order = " < ".join(", ".join(sorted(members)) for members in LAYERS)
    out = []
    for module in modules.values():
        mine = package(module.name)
        for imp in module.imports:
            theirs = package(imp.name)
            if mine is None or theirs is None or theirs == mine:
                continue
            if layer[theirs] > layer[mine] or (layer[theirs] == layer[mine] and mine not in RUNNING):
                out.append(f"{module.where(imp.line, root)}: {module.name} imports {imp.name}: nothing imports "
                           f"upward ({order}; {RULES})")
    return out


MODULES = walk(ROOT)


def test_the_core_imports_no_io():
    assert not core_io(MODULES, ROOT), "\n".join(core_io(MODULES, ROOT))


def test_the_checker_imports_nothing_of_the_maintenance_path():
    assert not checker_reach(MODULES, ROOT), "\n".join(checker_reach(MODULES, ROOT))


def test_fedmodel_imports_only_itself():
    assert not fedmodel_outside(MODULES, ROOT), "\n".join(fedmodel_outside(MODULES, ROOT))


def test_nothing_imports_upward():
    assert not upward(MODULES, ROOT), "\n".join(upward(MODULES, ROOT))


def test_the_walk_sees_every_package_and_the_rules_every_layer():
    assert {package(name) for name in MODULES} - {None} == set().union(*LAYERS)
    assert reached(MODULES, "fedlab.warehouse.core") and reached(MODULES, "fedlab.checker")


def test_each_rule_names_the_file_line_and_rule_of_a_violating_import(tmp_path):
    files = {
        "fedmodel/__init__.py": "",
        "fedmodel/rows.py": "from fedlab.fedio.channels import TlsFiles\n",
        "fedio/__init__.py": "",
        "fedio/channels.py": "import grpc\n",
        "source_node/__init__.py": "",
        "source_node/engines.py": "",
        "warehouse/__init__.py": "",
        "warehouse/service.py": "",
        "warehouse/core/__init__.py": "",
        "warehouse/core/events.py": "import dataclasses\nimport threading\n",
        "warehouse/core/timer.py": "import datetime\n\nNOW = datetime.datetime.now()\n",
        "warehouse/core/ports.py": "from fedlab.warehouse import service\nfrom fedlab.fedmodel import rows\n",
        "checker/__init__.py": "",
        "checker/oracle.py": "from fedlab.source_node.engines import open_store\n",
        "checker/levels.py": "from ..warehouse.core import events\n",   # relative: fedlab.warehouse.core.events
        "loadgen/__init__.py": "",
        "loadgen/driver.py": "from fedlab.bench import metrics\n",
        "bench/__init__.py": "",
        "bench/metrics.py": "from fedlab.live import run\n",
        "live/__init__.py": "",
        "live/run.py": "from fedlab.checker import oracle\nfrom fedlab.warehouse.service import Service\n",
        "fedlab/__init__.py": "",
        "fedlab/cli.py": "from fedlab.live import run\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    modules = walk(tmp_path)

    core = core_io(modules, tmp_path)
    # fedmodel.rows and fedio.channels are reached through the core's import of fedmodel.rows
    assert sorted(line.split(": ")[0] for line in core) == [
        "fedio/channels.py:1", "fedmodel/rows.py:1", "warehouse/core/events.py:2", "warehouse/core/ports.py:1",
        "warehouse/core/timer.py:3"]
    assert any("imports threading: the pure core imports no I/O" in line for line in core)
    assert any("warehouse/core/timer.py:3: fedlab.warehouse.core.timer reads the clock" in line for line in core)
    assert any(line.startswith("fedio/channels.py:1: fedlab.fedio.channels imports grpc") for line in core)

    checker = checker_reach(modules, tmp_path)
    assert sorted(line.split(": ")[0] for line in checker) == ["checker/levels.py:1", "checker/oracle.py:1"]
    assert ("checker/oracle.py:1: fedlab.checker.oracle imports fedlab.source_node.engines: the checker imports nothing "
            f"of the maintenance path: of fedlab, only itself and {', '.join(sorted(CHECKER_READS))} ({RULES})") in checker
    assert any("fedlab.checker.levels imports fedlab.warehouse.core.events" in line for line in checker)
    assert [line.split(": ")[0] for line in fedmodel_outside(modules, tmp_path)] == ["fedmodel/rows.py:1"]
    # the bench may use a live run, the load may not use the bench
    up = upward(modules, tmp_path)
    assert sorted(line.split(": ")[0] for line in up) == ["fedmodel/rows.py:1", "loadgen/driver.py:1"]
    assert "nothing imports upward (preflight < fedmodel < fedio < source_node, warehouse < checker, loadgen < bench, " in up[0]
