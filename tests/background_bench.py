"""`fedlab bench` runs that pass beside the rest of the suite.

A short live bench takes a minute or more, most of it waiting on a load of a few transactions per
second. So a test module declares its bench at import (`BackgroundBench(...)`), and as soon as
collection ends the session starts every bench whose tests were selected, one after another in a
runner process of their own (`python tests/background_bench.py FOLDER`). The tests that wait for a
bench run last (tests/conftest.py); by then it has usually ended, and the module's fixture only
reads its result.

The runner and the tests meet in one folder (`FEDLAB_BENCH_DIR`, made by the session's main
process) rather than in memory, because under pytest-xdist the process that starts the benches
(worker gw0, which collects like any other) need not be the one whose tests wait for them:

    FOLDER/jobs.json           the benches to run, in order: [{module, args, timeout}]
    FOLDER/runner.pid          the runner's process group, ended with the session
    FOLDER/<module>/b          the bench's --out folder
    FOLDER/<module>/outcome.json   {code, out, err}, written when the bench has ended

    BENCH = BackgroundBench(__name__, "--algorithms", "sze-ling", ...)

    @pytest.fixture(scope="module")
    def bench():
        return BENCH.result()   # (the bench's --out folder, the summary it printed)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDER = "FEDLAB_BENCH_DIR"
DECLARED: dict[str, BackgroundBench] = {}   # test module name -> its bench


class BackgroundBench:
    """`fedlab bench ARGS --out DIR --json` as a user runs it, declared by the test module named
    `module`, started by `start_all` and awaited by `result`, which asserts that it succeeded."""

    def __init__(self, module: str, *args: str, timeout: float = 900):
        self.module, self.args, self.timeout = module, list(args), timeout
        DECLARED[module] = self

    def result(self) -> tuple[Path, dict]:
        """The bench's --out folder and its summary, once it has ended."""
        folder = Path(os.environ[FOLDER]) / self.module
        outcome = folder / "outcome.json"
        deadline = time.monotonic() + self.timeout + 60
        while not outcome.exists():
            assert time.monotonic() < deadline, f"the bench of {self.module} did not end within {self.timeout:g} s"
            time.sleep(1)
        result = json.loads(outcome.read_text())
        assert result["code"] == 0, result["out"][-3000:] + result["err"][-3000:]
        return folder / "b", json.loads(result["out"].strip().splitlines()[-1])


def make_folder() -> None:
    """The session's folder for benches, in the environment its workers inherit (main process only)."""
    folder = tempfile.mkdtemp(prefix="fedlab-bench-")
    os.chmod(folder, 0o755)   # a PostgreSQL source's server user must reach its data directory
    os.environ[FOLDER] = folder


def start_all(modules: set[str]) -> None:
    """Starts the runner on the benches of these test modules, one after another."""
    jobs = [{"module": b.module, "args": b.args, "timeout": b.timeout}
            for b in (DECLARED[m] for m in sorted(modules) if m in DECLARED)]
    if not jobs:
        return
    folder = Path(os.environ[FOLDER])
    (folder / "jobs.json").write_text(json.dumps(jobs))
    runner = subprocess.Popen([sys.executable, __file__, str(folder)], cwd=ROOT, start_new_session=True)
    (folder / "runner.pid").write_text(str(runner.pid))


def stop_all() -> None:
    """Ends the runner and whatever bench it still runs, and removes the folder (main process only)."""
    folder = Path(os.environ.pop(FOLDER, ""))
    pid = folder / "runner.pid"
    if pid.exists():
        try:
            os.killpg(int(pid.read_text()), signal.SIGKILL)
        except ProcessLookupError:   # it had ended
            pass
    if folder.name:
        shutil.rmtree(folder, ignore_errors=True)


def _run(folder: Path) -> None:
    """The runner: each job's bench to its end, its outcome written whole (a rename) so that a
    waiting test never reads half of one."""
    for job in json.loads((folder / "jobs.json").read_text()):
        out_dir = folder / job["module"]
        out_dir.mkdir()
        try:
            done = subprocess.run([sys.executable, "-m", "fedlab.cli", "bench", *job["args"], "--out",
                                   str(out_dir / "b"), "--json"], cwd=ROOT, capture_output=True, text=True,
                                  timeout=job["timeout"])
            outcome = {"code": done.returncode, "out": done.stdout, "err": done.stderr}
        except subprocess.TimeoutExpired as err:   # its partial output comes as bytes
            outcome = {"code": -1, "out": (err.stdout or b"").decode(errors="replace"),
                       "err": f"(the bench did not end within {job['timeout']} s)"}
        (out_dir / "outcome.tmp").write_text(json.dumps(outcome))
        (out_dir / "outcome.tmp").rename(out_dir / "outcome.json")


if __name__ == "__main__":
    _run(Path(sys.argv[1]))
