"""The faults file (`--faults-file`): message-fault rates that a running role follows.

The chart's faults ConfigMap holds faults.json: the rates as source_node.faults
.FaultInjector.configure names them, plus `seed` and `version` (the chaos Job bumps it with every
change). The file is polled (every second): a mounted ConfigMap changes by a symlink swap, which
file-change notifications miss. Each new content is applied whole: a rate the file no longer
names goes back to 0. A file that turns bad mid-run is reported and the rates in force stay.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Callable

from fedlab.fedmodel.errors import ModelError
from fedlab.source_node.faults import RATES, FaultInjector

_NOT_RATES = ("seed", "version")


class FaultsFile:
    def __init__(self, path: str | Path, interval: float = 1.0):
        self.path = Path(path)
        self.interval = interval
        self._text: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read(self) -> tuple[int, dict[str, float]]:
        """(seed, rates) in the file, rates complete (every rate the file omits is 0); ModelError if bad."""
        try:
            text = self.path.read_text()
        except OSError as err:
            raise ModelError(f"faults file {self.path}: cannot read: {err.strerror}") from None
        return self._parse(text)

    def _parse(self, text: str) -> tuple[int, dict[str, float]]:
        try:
            doc = json.loads(text)
        except ValueError as err:
            raise ModelError(f"faults file {self.path}: not JSON: {err}") from None
        if not isinstance(doc, dict):
            raise ModelError(f"faults file {self.path}: expected an object of rates")
        rates = {r: 0.0 for r in RATES}   # generic names first, so that kind-prefixed ones win
        rates.update({k: v for k, v in doc.items() if k not in _NOT_RATES})
        try:
            FaultInjector(**rates)        # validates every name and value
        except ModelError as err:
            raise ModelError(f"faults file {self.path}: {err}") from None
        seed = doc.get("seed", 0)
        return (seed if isinstance(seed, int) else 0), rates

    def watch(self, apply: Callable[[dict[str, float]], None]) -> None:
        """Calls `apply(rates)` now and whenever the file's content changes, from a daemon thread."""
        self._text = None
        self._check(apply)
        self._thread = threading.Thread(target=self._poll, args=(apply,), name="faults-file", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _poll(self, apply) -> None:
        while not self._stop.wait(self.interval):
            self._check(apply)

    def _check(self, apply) -> None:
        try:
            text = self.path.read_text()
        except OSError:
            return   # a ConfigMap mid-swap, or the file removed: keep the rates in force
        if text == self._text:
            return
        self._text = text
        try:
            _, rates = self._parse(text)
            apply(rates)
        except Exception as err:  # a bad file mid-run must not stop the role
            print(f"fedlab: {err}; the fault rates in force stay", file=sys.stderr, flush=True)
            return
        print(f"fedlab: fault rates from {self.path}: {json.dumps({k: v for k, v in rates.items() if v})}",
              file=sys.stderr, flush=True)
