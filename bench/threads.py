"""`fedlab bench`: each process's CPU and wake-ups, thread by thread, over the idle federation and
(with --profile) over the load phase.

A sampling profiler sees the Python that holds the GIL; it does not see gRPC's threads in C, nor
what a thread costs merely by being woken. On this 2-core virtual machine a wake-up is dear: a
thread handing one item to another at 100 items a second costs about 0.19 ms of CPU per item,
0.05 ms at 1,000 a second, most of it the two threads' sleeps and wake-ups (measured with a
Condition). So the census reads, for every thread of every process at the start and the end of
the load, its CPU seconds (/proc/PID/task/TID/stat) and its context switches, voluntary ones
(it went to sleep: each is a wake-up later) and involuntary ones (preempted), from
/proc/PID/task/TID/status. Python threads are named by their Python names, which `py-spy dump`
reads from outside; the others (gRPC's event engine, the JVM's) by their kernel name (comm).
Threads of one pool (`ThreadPoolExecutor-0_3`) count as one row.

Reading /proc twice per thread costs nothing measurable; `py-spy dump` stops nobody (--nonblocking).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

TOP = 6   # threads per process kept in the summary


@dataclass(frozen=True)
class ThreadReading:
    comm: str
    cpu_seconds: float
    switches: int   # voluntary + involuntary context switches so far


def read_threads(pid: int) -> dict[int, ThreadReading]:
    """Every thread of `pid` now: tid -> its reading (a thread that ends meanwhile is left out)."""
    readings = {}
    tick = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            comm = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            status = (task / "status").read_text()
        except OSError:
            continue
        switches = sum(int(m) for m in re.findall(r"^(?:non)?voluntary_ctxt_switches:\s+(\d+)", status, re.M))
        readings[int(task.name)] = ThreadReading(comm, (int(fields[11]) + int(fields[12])) / tick, switches)
    return readings


def python_thread_names(pid: int, pyspy: str | None, attempts: int = 3) -> dict[int, str]:
    """tid -> Python thread name of a Python process, as py-spy reads them ({} without py-spy, or
    when every attempt failed). A non-blocking dump reads the process's memory while it runs, and
    a read that catches it mid-change fails (seen on a busy machine): it is tried again."""
    if pyspy is None:
        return {}
    for _ in range(attempts):
        try:
            out = subprocess.run([pyspy, "dump", "--pid", str(pid), "--json", "--nonblocking"],
                                 capture_output=True, text=True, timeout=60).stdout
            names = {t["os_thread_id"]: t["thread_name"] for t in json.loads(out) if t.get("os_thread_id")}
        except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
            continue
        if names:
            return names
    return {}


def pool_name(name: str) -> str:
    """One row for a pool's threads: the name without its worker number.

    >>> [pool_name(n) for n in ("ThreadPoolExecutor-0_3", "dispatch-crm", "Thread-7 (_serve)", "event_engine")]
    ['ThreadPoolExecutor-0', 'dispatch-crm', 'Thread (_serve)', 'event_engine']
    """
    name = re.sub(r"_\d+$", "", name)
    return re.sub(r"^Thread-\d+", "Thread", name)


def census(before: dict[int, ThreadReading], after: dict[int, ThreadReading], names: dict[int, str],
           per: float, unit: str) -> dict:
    """What each thread (pooled by name) used between two readings of one process, the most CPU
    first: CPU ms and context switches per `unit` (`per` of them passed: the transactions
    committed, or the seconds), and the process's totals.

    >>> b = {1: ThreadReading("python", 1.0, 10), 2: ThreadReading("event_engine", 0.0, 0)}
    >>> a = {1: ThreadReading("python", 1.5, 110), 2: ThreadReading("event_engine", 0.1, 40),
    ...      3: ThreadReading("python", 0.2, 50)}
    >>> c = census(b, a, {1: "core", 3: "ThreadPoolExecutor-0_1"}, 100, "txn")
    >>> c["per"], c["cpu_ms"], c["threads"][0]
    ('txn', 8.0, {'thread': 'core', 'cpu_ms': 5.0, 'switches': 1.0})
    """
    rows: dict[str, list[float]] = {}
    for tid, now in after.items():
        then = before.get(tid, ThreadReading(now.comm, 0.0, 0))
        row = rows.setdefault(pool_name(names.get(tid, now.comm)), [0.0, 0])
        row[0] += now.cpu_seconds - then.cpu_seconds
        row[1] += now.switches - then.switches
    per = max(per, 1e-9)
    ranked = sorted(rows.items(), key=lambda kv: -kv[1][0])
    return {"per": unit, "cpu_ms": round(1000 * sum(r[0] for r in rows.values()) / per, 3),
            "switches": round(sum(r[1] for r in rows.values()) / per, 2),
            "threads": [{"thread": name, "cpu_ms": round(1000 * cpu / per, 3), "switches": round(switches / per, 2)}
                        for name, (cpu, switches) in ranked[:TOP] if cpu > 0 or switches > 0]}


class ThreadCensus:
    """Readings of every thread of the given processes at start() and stop()."""

    def __init__(self, pids: dict[str, int], python_roles: set[str], pyspy: str | None):
        """`pids`: role -> pid; `python_roles`: those whose Python thread names py-spy reads."""
        self.pids = dict(pids)
        self.python_roles = set(python_roles)
        self.pyspy = pyspy
        self._before: dict[str, dict[int, ThreadReading]] = {}

    def start(self) -> "ThreadCensus":
        self._before = {role: read_threads(pid) for role, pid in self.pids.items()}
        return self

    def stop(self, per: float, unit: str) -> dict:
        """role -> census over the stretch, per `unit` (`per` of them passed)."""
        out = {}
        for role, pid in self.pids.items():
            names = python_thread_names(pid, self.pyspy) if role in self.python_roles else {}
            out[role] = census(self._before.get(role, {}), read_threads(pid), names, per, unit)
        return out
