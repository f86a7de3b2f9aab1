"""fedlab's docstrings' examples, each module's once, under its fedlab name: pytest's
--doctest-modules would import the package folders under their own names (warehouse.service beside
fedlab.warehouse.service, a second copy with registries of its own).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import fedlab

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = sorted(init.parent.name for init in ROOT.glob("*/__init__.py") if init.parent.name != "fedlab")


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
