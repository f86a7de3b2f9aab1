"""What a source's operator set at run time: the warehouse address and the fault rates.

They are kept in a small JSON file beside the source's database and applied again when Ray
restarts the source's actor (source_node.actor), so that a restarted source goes on delivering to
the warehouse it was last pointed at, under the faults last set. A source started afresh begins
from its constructor's settings and overwrites the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


class RunSettings:
    def __init__(self, path: str | os.PathLike, warehouse_address: str | None, restarted: bool):
        """`restarted`: the file's settings, where there is one, replace `warehouse_address` and no faults."""
        self.path = Path(path)
        values = {"warehouse_address": warehouse_address, "faults": {}}
        if restarted and self.path.exists():
            values.update(json.loads(self.path.read_text()))
        self.warehouse_address: str | None = values["warehouse_address"]
        self.faults: dict[str, float] = values["faults"]
        self._save()

    def set_warehouse(self, address: str | None) -> None:
        self.warehouse_address = address
        self._save()

    def add_faults(self, rates: dict[str, float]) -> None:
        self.faults.update(rates)
        self._save()

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"warehouse_address": self.warehouse_address, "faults": self.faults}))
        os.replace(tmp, self.path)
