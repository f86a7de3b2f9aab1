"""Reading a YAML file of ours (scenario, run config, catalog) with one-line errors."""

from __future__ import annotations

from pathlib import Path

import yaml

from fedlab.fedmodel.errors import ModelError


def read_yaml(path: str | Path, what: str, error: type[ModelError] = ModelError) -> dict:
    """The file's mapping; `error` with '<what> <path>: <problem>' when it cannot be had."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as err:
        raise error(f"{what} {path}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise error(f"{what} {path}: not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(doc, dict):
        raise error(f"{what} {path}: expected a mapping")
    return doc
