"""`fedlab bench` runs that pass beside the rest of the suite.

A short live bench takes a minute or more, most of it waiting on a load of a few transactions per
second, while the suite's other tests keep one of the two cores busy. So a test module declares
its bench at import (`BackgroundBench(...)`), the session starts every bench whose tests were
selected as soon as collection ends, one after another in a process of their own, and runs those
tests last (tests/conftest.py); by then the bench has usually ended, and the module's fixture
only reads its result.

    BENCH = BackgroundBench(__name__, "--algorithms", "sze-ling", ...)

    @pytest.fixture(scope="module")
    def bench():
        return BENCH.result()   # (the bench's --out folder, the summary it printed)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DECLARED: dict[str, BackgroundBench] = {}   # test module name -> its bench


class BackgroundBench:
    """`fedlab bench ARGS --out DIR --json` as a user runs it, declared by the test module named
    `module`, run by `start_all` and awaited by `result`, which asserts that it succeeded."""

    def __init__(self, module: str, *args: str, timeout: float = 900):
        self.module, self.args, self.timeout = module, args, timeout
        self.base: Path | None = None
        self.scheduled = False                   # start_all will run it
        self._done = threading.Event()
        self._process: subprocess.Popen | None = None
        self._outcome: tuple[int, str, str] | None = None
        DECLARED[module] = self

    def run(self) -> None:
        """Runs the bench to its end (in the starting thread of `start_all`)."""
        self.base = Path(tempfile.mkdtemp(prefix="fedlab-bench-"))
        os.chmod(self.base, 0o755)   # a PostgreSQL source's server user must reach its data directory
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "loadgen.cli", "bench", *self.args, "--out", str(self.base / "b"), "--json"],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                out, err = self._process.communicate(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self._process.kill()
                out, err = self._process.communicate()
                err += f"\n(the bench did not end within {self.timeout:g} s)"
            self._outcome = (self._process.returncode, out, err)
        finally:
            self._done.set()

    def result(self) -> tuple[Path, dict]:
        """The bench's --out folder and its summary, once it has ended; runs it here if the
        session did not start it (a module run on its own under another runner)."""
        if not self.scheduled:
            self.run()
        self._done.wait()
        code, out, err = self._outcome
        assert code == 0, out[-3000:] + err[-3000:]
        return self.base / "b", json.loads(out.strip().splitlines()[-1])

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        if self.base is not None:
            shutil.rmtree(self.base, ignore_errors=True)


def start_all(modules: set[str]) -> list[BackgroundBench]:
    """Starts the benches of these test modules, one after another, in a thread of their own."""
    benches = [DECLARED[m] for m in sorted(modules) if m in DECLARED]
    for bench in benches:
        bench.scheduled = True
    if benches:
        threading.Thread(target=lambda: [b.run() for b in benches], name="background-benches", daemon=True).start()
    return benches
