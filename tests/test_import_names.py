"""fedlab's one import name: the package folders at the top of the repository install as
fedlab.warehouse, fedlab.loadgen, ... (setup.py maps them), and nothing names them by their folder
names. Run from the repository, such an import would still work: a second copy of every module
beside fedlab's, with registries of its own.

The docstrings' examples run here too, each module's once, under its fedlab name: pytest's
--doctest-modules would import the folders under their own names.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import pkgutil
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import fedlab

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = sorted(init.parent.name for init in ROOT.glob("*/__init__.py") if init.parent.name != "fedlab")
OLD = "|".join(FOLDERS)
# A command or an import in any file: python -m FOLDER.module, ["-m", "FOLDER.module"], import FOLDER.module.
OLD_IN_TEXT = re.compile(rf"""-m["',\s]+({OLD})\b|\bimport ({OLD})\b|\bfrom ({OLD})(\.\w+)* import\b""")
MODULE_PATH = re.compile(rf"({OLD})(\.\w+)+(:\w+)?")


def tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", *patterns], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in listed.stdout.split("\0") if name]


def names_a_module(text: str) -> bool:
    """Whether a dotted string is a module of a package folder, or something in one
    ("simulation", "checker.levels.SEARCH_LIMIT"), not a key that looks alike."""
    parts = text.split(":")[0].split(".")
    return any(ROOT.joinpath(*parts[:n]).with_suffix(".py").is_file() or ROOT.joinpath(*parts[:n], "__init__.py").is_file()
               for n in range(2, len(parts) + 1))


def old_names_in_python(source: str) -> list[str]:
    """The modules a Python file names by a folder's name: in its imports, its doctest examples'
    imports, and strings naming a module (importlib, resources.files, monkeypatch targets)."""
    tree = ast.parse(source)
    strings = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    examples = [example.source for text in strings for example in doctest.DocTestParser().get_examples(text)]
    trees = [tree, *map(ast.parse, examples)]
    found = []
    for node in (node for tree in trees for node in ast.walk(tree)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE_PATH.fullmatch(node.value):
            found += [node.value] if names_a_module(node.value) else []
    return [name for name in found if name.split(".")[0] in FOLDERS]


def test_nothing_names_a_package_folder_as_a_module():
    offending = []
    for path in tracked():
        if path.suffix == ".py":
            offending += [f"{path.relative_to(ROOT)}: {name}" for name in old_names_in_python(path.read_text())]
        if path.match("docs/results*.md"):
            continue   # the results' dated entries quote the commands as they were run then
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue   # a binary file: docs/plots/*.png
        for number, line in enumerate(text.splitlines(), 1):
            if OLD_IN_TEXT.search(line):
                offending.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offending, "\n".join(offending)


def test_entry_points_and_package_data_name_fedlab_modules():
    for path in tracked("pyproject.toml", "*/pyproject.toml"):
        project = tomllib.loads(path.read_text())
        groups = [project["project"].get("scripts", {}), *project["project"].get("entry-points", {}).values()]
        named = [value.split(":")[0] for group in groups for value in group.values()]
        named += list(project.get("tool", {}).get("setuptools", {}).get("package-data", {}))
        assert not [name for name in named if name.split(".")[0] in FOLDERS], path


def test_the_folders_are_imported_as_fedlab_subpackages():
    for folder in FOLDERS:
        package = importlib.import_module(f"fedlab.{folder}")
        assert Path(package.__file__).resolve() == ROOT / folder / "__init__.py"
        assert folder not in sys.modules


def fedlab_modules() -> list[str]:
    """Every module of fedlab by its import name: fedlab/ and the package folders it maps (walked
    one by one: an editable install finds them beside fedlab/, not in it)."""
    packages = [fedlab, *(importlib.import_module(f"fedlab.{folder}") for folder in FOLDERS)]
    names = {package.__name__ for package in packages}
    for package in packages:
        names.update(info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."))
    return sorted(names)


def docstring_examples() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder()
    return [test for name in fedlab_modules() for test in finder.find(importlib.import_module(name)) if test.examples]


@pytest.mark.parametrize("test", docstring_examples(), ids=lambda test: test.name)
def test_docstring_examples(test):
    runner = doctest.DocTestRunner(verbose=False, optionflags=doctest.ELLIPSIS)   # pytest's doctest flags
    report = []
    runner.run(test, out=report.append)
    assert not runner.failures, "".join(report)


@pytest.mark.slow
def test_the_wheel_installs_fedlab_only(tmp_path):
    """A regular install (the Dockerfile's): every module, the generated stubs and the data files
    under fedlab/, nothing else at the top. Built from a copy: the build writes the stubs."""
    source = tmp_path / "source"
    for path in tracked():
        (source / path.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, source / path.relative_to(ROOT))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(tmp_path), str(source)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("fedlab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {name.split("/")[0] for name in names if ".dist-info/" not in name} == {"fedlab"}
    expected = {f"fedlab/{path.relative_to(ROOT)}" for folder in FOLDERS for path in tracked(f"{folder}/*.py")}
    expected |= {f"fedlab/{path.relative_to(ROOT)}" for path in tracked(
        "loadgen/views/*.sql", "simulation/calibration/*.json", "warehouse/jvm/fedlab/hadoop/*.java")}
    expected |= {str(path.relative_to(ROOT)) for path in tracked("fedlab/*.py")}
    expected |= {"fedlab/fedmodel/wire/federation_pb2.py",
                 "fedlab/fedmodel/wire/federation_pb2_grpc.py"}
    assert expected <= names, sorted(expected - names)
