"""`fedlab bench --profile`: sampling profilers on every process of a live run during its load
phase, each process's samples drawn as a flame graph and ranked by its hottest frames.

- Python processes (the warehouse, each source actor, the load driver): py-spy, attached from
  outside (`py-spy record --nonblocking`: it reads the process's memory without stopping it), at
  PYSPY_RATE samples a second, of the thread that holds the GIL (`--gil`): Python's own CPU, and
  the C it calls without letting the GIL go (protobuf, msgpack, json). Work in C that releases
  the GIL (SQLite's steps, gRPC's core threads) is not sampled; `python_share` says how much of
  the process's CPU the samples account for. Sampling every thread instead cost 14% of a core
  per process here (37 threads in a source) and counted threads woken but not yet running as
  busy; the GIL's holder alone costs a tenth of that.
- The Spark JVM: Java Flight Recorder, started and stopped inside the JVM through the py4j
  gateway (no attach), with execution samples every JFR_PERIOD_MS of the threads running Java
  code, and the processes the JVM starts (jdk.ProcessStart: Hadoop's shell-outs).

Beside the samples, a census of every thread of those processes (bench.threads): its CPU
and its context switches over the load, per committed transaction, which the samples miss (gRPC's
threads in C, the cost of being woken).

What profiling costs is measured, not assumed: the CPU the py-spy processes used and the CPU of
the JVM's own JFR threads, returned as `overhead`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from fedlab.bench.flamegraph import hottest, read_collapsed, read_jfr, svg
from fedlab.bench.resources import stat_cpu_seconds
from fedlab.bench.threads import ThreadCensus
from fedlab.warehouse.spark_session import jvm_pid

PYSPY_RATE = 50
JFR_PERIOD_MS = 10
JVM = "spark JVM"


def pyspy_binary() -> str | None:
    """The py-spy executable beside this interpreter (the venv's), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


class Profilers:
    def __init__(self, folder: Path, python_pids: dict[str, int], spark=None):
        """`python_pids`: role -> pid of each Python process to sample; `spark`: the session
        whose driver JVM Flight Recorder samples (None: no JVM profile)."""
        self.folder = Path(folder)
        self.python_pids = dict(python_pids)
        self.spark = spark
        self.notes: list[str] = []
        self._spies: dict[str, tuple[subprocess.Popen, Path]] = {}
        self._recording = None
        self._jfr_cpu_before = 0.0
        self._started = 0.0
        self._census: ThreadCensus | None = None

    @property
    def profiler_pids(self) -> list[int]:
        return [proc.pid for proc, _ in self._spies.values()]

    def start(self) -> "Profilers":
        self.folder.mkdir(parents=True, exist_ok=True)
        binary = pyspy_binary()
        if binary is None:
            self.notes.append("profile: py-spy is not installed (pip install py-spy): no Python process was sampled")
        for role, pid in self.python_pids.items() if binary else ():
            out = self.folder / f"{_file_name(role)}.stacks"
            proc = subprocess.Popen([binary, "record", "--pid", str(pid), "--rate", str(PYSPY_RATE), "--nonblocking",
                                     "--gil", "--format", "raw", "--output", str(out)],
                                    stdout=subprocess.DEVNULL, stderr=open(self.folder / "py-spy.log", "ab"))
            self._spies[role] = (proc, out)
        if self.spark is not None:
            self._start_jfr()
        jvm = {JVM: self._jvm_pid()} if self.spark is not None and self._jvm_pid() else {}
        self._census = ThreadCensus({**self.python_pids, **jvm}, set(self.python_pids), binary).start()
        self._started = time.monotonic()
        return self

    def _start_jfr(self) -> None:
        jvm = self.spark._jvm
        try:
            recording = jvm.jdk.jfr.Recording()
            recording.setName("fedlab-bench")
            recording.enable("jdk.ExecutionSample").withPeriod(jvm.java.time.Duration.ofMillis(JFR_PERIOD_MS))
            recording.enable("jdk.ProcessStart")
            self._jfr_cpu_before = _jfr_thread_cpu(self._jvm_pid())
            recording.start()
            self._recording = recording
        except Exception as err:  # a JVM without Flight Recorder: the Python profiles still stand
            self.notes.append(f"profile: Java Flight Recorder could not start in the Spark JVM ({err})")

    def _jvm_pid(self) -> int | None:
        return jvm_pid(self.spark)

    def stop(self, transactions: int) -> dict:
        """Stops every profiler and writes its flame graph; returns the figures for the summary,
        the thread census per one of the `transactions` committed meanwhile."""
        seconds = time.monotonic() - self._started
        threads = self._census.stop(transactions, "txn") if self._census is not None else {}
        overhead = {"py-spy": 0.0, "JFR": 0.0}
        for proc, _ in self._spies.values():
            try:
                times = psutil.Process(proc.pid).cpu_times()
                overhead["py-spy"] += times.user + times.system
            except psutil.Error:
                pass
            proc.send_signal(signal.SIGINT)   # py-spy writes what it sampled, then exits
        processes = {}
        for role, (proc, out) in self._spies.items():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            if not out.exists():
                self.notes.append(f"profile: py-spy recorded nothing for {role} (see {self.folder / 'py-spy.log'})")
                continue
            processes[role] = self._draw(role, read_collapsed(out.read_text()))
        if self._recording is not None:
            overhead["JFR"] = max(0.0, _jfr_thread_cpu(self._jvm_pid()) - self._jfr_cpu_before)
            processes.update(self._stop_jfr())
        return {"seconds": round(seconds, 1), "pyspy_rate": PYSPY_RATE, "jfr_period_ms": JFR_PERIOD_MS,
                "overhead_cpu_seconds": {k: round(v, 2) for k, v in overhead.items()},
                "overhead_share_of_machine": round(sum(overhead.values()) / (seconds * (os.cpu_count() or 1)), 4)
                if seconds else None,
                "processes": processes, "threads": threads, "notes": self.notes}

    def _stop_jfr(self) -> dict:
        recording, self._recording = self._recording, None
        path = self.folder / "spark-jvm.jfr"
        recording.stop()
        recording.dump(self.spark._jvm.java.io.File(str(path)).toPath())
        recording.close()
        jfr = shutil.which("jfr") or (str(Path(os.environ["JAVA_HOME"]) / "bin" / "jfr") if "JAVA_HOME" in os.environ else None)
        if jfr is None or not Path(jfr).exists():
            self.notes.append(f"profile: the JDK's `jfr` tool was not found to read {path}")
            return {}
        printed = subprocess.run([jfr, "print", "--events", "jdk.ExecutionSample", "--stack-depth", "96", str(path)],
                                 capture_output=True, text=True, timeout=300)
        figures = self._draw(JVM, read_jfr(printed.stdout))
        spawned = subprocess.run([jfr, "summary", str(path)], capture_output=True, text=True, timeout=60).stdout
        figures["processes_started"] = next((int(line.split()[1]) for line in spawned.splitlines()
                                             if line.strip().startswith("jdk.ProcessStart")), 0)
        return {JVM: figures}

    def _draw(self, role: str, stacks) -> dict:
        graph = self.folder / f"{_file_name(role)}.svg"
        graph.write_text(svg(stacks, f"{role}: load phase"))
        return {"samples": sum(stacks.values()), "flame_graph": str(graph),
                "hottest": [{"frame": f, "samples": n, "share": s} for f, n, s in hottest(stacks, 10)]}


def python_shares(profile: dict, cpu_seconds: dict[str, float]) -> dict:
    """`profile["processes"]` with each Python process's `python_share`: the CPU its GIL samples
    account for over the CPU it used in the same stretch (`cpu_seconds`: role -> seconds).

    >>> python_shares({"pyspy_rate": 100, "processes": {"source a": {"samples": 150}, "spark JVM": {"samples": 9}}},
    ...               {"source a": 2.0, "spark JVM": 4.0})
    {'source a': {'samples': 150, 'python_share': 0.75}, 'spark JVM': {'samples': 9}}
    """
    out = {}
    for role, figures in profile["processes"].items():
        seconds = cpu_seconds.get(role)
        python = role != JVM and seconds
        out[role] = {**figures, "python_share": round(figures["samples"] / profile["pyspy_rate"] / seconds, 2)} if python else figures
    return out


def _file_name(role: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in role).strip("-")


def _jfr_thread_cpu(pid: int | None) -> float:
    """CPU seconds used so far by the JVM's Flight Recorder threads (named "JFR ...")."""
    if pid is None:
        return 0.0
    total = 0.0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            if (task / "comm").read_text().startswith("JFR"):
                total += stat_cpu_seconds(task / "stat")
        except OSError:   # a thread that ended meanwhile
            pass
    return total
