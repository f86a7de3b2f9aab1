"""Peak memory and CPU seconds of the processes of a live run, sampled with psutil.

The processes: this one (the warehouse's Python side), its children (the Spark JVM, the load
driver's process, Ray's own services and workers: ray.init starts them from here), and each
source actor's worker process, named by the pid the actor reports. A sampler thread reads every
process's resident set size and CPU seconds twice a second; the peak of the sum of the resident
sets is the figure the 8 GB target is about, and each role's own peak is kept beside it.

`cpu_seconds()` sums each role's CPU seconds so far (a process that ended keeps what it had used
when last seen), so that the difference of two calls says where a stretch of the run spent the
machine: the bench takes one around every load step to name what a missed rate is bound by.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil

WAREHOUSE = "warehouse (python)"
JVM = "spark JVM"
DRIVER = "load driver"
RESCAN_EVERY = 10   # samples between looks for processes started meanwhile
PROFILER = "profilers (py-spy)"   # fedlab bench --profile: counted apart, as its overhead
POSTGRES = "postgres server"     # PostgreSQL sources' server and its backends (the sources' own work)
OUTSIDE_WRITERS = "outside writers (pgbench)"   # --outside-writers: load, not the testbed's own cost
RAY = "ray and helpers"   # Ray's services and workers: each process is `RAY: <name>`, reported as one role


class ResourceSampler:
    def __init__(self, source_pids: dict[str, int] | None = None, interval: float = 0.5):
        self.role_of_pid = {pid: f"source {name}" for name, pid in (source_pids or {}).items()}
        self.role_of_pid[os.getpid()] = WAREHOUSE
        self.interval = interval
        self.me = psutil.Process(os.getpid())
        self.peak_total = 0.0
        self.peak_by_role: dict[str, float] = {}
        self.resident: dict[str, float] = {}   # role -> MB at the last sample
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-resources", daemon=True)
        self._cpu_start: dict[str, float] = {}
        self._cpu_of_pid: dict[int, float] = {}   # last seen user + system seconds
        self._known: dict[int, psutil.Process] = {}
        self._parents: dict[int, str] = {}   # pid -> the role of its children too (name(with_children=True))
        self._lock = threading.Lock()
        self.warehouse_cpu_seconds = 0.0

    def name(self, pid: int, role: str, with_children: bool = False) -> None:
        """Names a process the sampler would otherwise call by its executable (e.g. the driver's);
        `with_children`: and every process it starts, also one that is not this process's
        descendant (a PostgreSQL server's backends, one per connection)."""
        self.role_of_pid[pid] = role
        if with_children:
            self._parents[pid] = role

    def start(self) -> "ResourceSampler":
        self._cpu_start = self.cpu_seconds()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        end = self.cpu_seconds()
        # The warehouse side: its Python process and the Spark JVM.
        self.warehouse_cpu_seconds = round(sum(end.get(r, 0.0) - self._cpu_start.get(r, 0.0) for r in (WAREHOUSE, JVM)), 2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample(rescan=self.samples % RESCAN_EVERY == 0)

    def _processes(self, rescan: bool) -> list[psutil.Process]:
        """The processes to read; looked for afresh only when `rescan`: finding children reads
        every process's /proc entry, the bulk of what sampling cost (5% of the warehouse's
        process at 100 txn/s when done every sample)."""
        if rescan or not self._known:
            found = {self.me.pid: self.me}
            try:
                found.update({p.pid: p for p in self.me.children(recursive=True)})
            except psutil.Error:
                pass
            for pid in list(self.role_of_pid):
                if pid not in found:
                    try:
                        found[pid] = psutil.Process(pid)
                    except psutil.Error:   # a killed actor: Ray may be restarting it
                        continue
                if pid in self._parents:
                    try:
                        children = found[pid].children(recursive=True)
                    except psutil.Error:
                        continue
                    for child in children:
                        found[child.pid] = child
                        self.role_of_pid[child.pid] = self._parents[pid]
            self._known = {pid: self._known.get(pid, proc) for pid, proc in found.items()}
        return list(self._known.values())

    def _role(self, proc: psutil.Process) -> str:
        """What a process is, decided once per pid: a JVM renames its main thread (the process
        name psutil reads becomes e.g. "Thread-165"), so the executable is what tells a JVM."""
        if proc.pid not in self.role_of_pid:
            try:
                exe = os.path.basename(proc.exe() or "")
                name = proc.name()
            except psutil.Error:
                return "other"
            self.role_of_pid[proc.pid] = JVM if exe == "java" else f"{RAY}: {name}"
        return self.role_of_pid[proc.pid]

    def sample(self, rescan: bool = True) -> None:
        by_role: dict[str, float] = {}
        for proc in self._processes(rescan):
            reading = stat_reading(f"/proc/{proc.pid}/stat")
            if reading is None:
                continue
            cpu, rss = reading
            role = self._role(proc)
            by_role[role] = by_role.get(role, 0.0) + rss / 2 ** 20
            with self._lock:
                self._cpu_of_pid[proc.pid] = cpu
        with self._lock:
            self.samples += 1
            self.resident = by_role
            self.peak_total = max(self.peak_total, sum(by_role.values()))
            for role, mb in by_role.items():
                self.peak_by_role[role] = max(self.peak_by_role.get(role, 0.0), mb)

    def resident_mb(self) -> dict[str, float]:
        """role -> MB its processes hold resident now (sampled now), Ray's many helpers as one."""
        self.sample(rescan=False)
        with self._lock:
            return grouped(self.resident)

    def cpu_seconds(self) -> dict[str, float]:
        """role -> CPU seconds its processes used so far (sampled now)."""
        self.sample()
        by_role: dict[str, float] = {}
        with self._lock:
            for pid, seconds in self._cpu_of_pid.items():
                role = self.role_of_pid.get(pid, "other")
                by_role[role] = by_role.get(role, 0.0) + seconds
        return by_role

    def figures(self) -> dict:
        return {"peak_memory_mb": round(self.peak_total, 1),
                # short-lived helpers Ray spawns (bash, chmod) show up with next to nothing
                "peak_memory_by_process_mb": {r: round(mb, 1) for r, mb in sorted(self.peak_by_role.items()) if mb >= 1},
                "warehouse_cpu_seconds": self.warehouse_cpu_seconds, "memory_samples": self.samples}


def stat_cpu_seconds(stat_path: str | Path) -> float:
    """User + system CPU seconds in a /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat file
    (read directly: cheap enough to take around every Delta batch); 0.0 once it is gone."""
    reading = stat_reading(stat_path)
    return reading[0] if reading is not None else 0.0


_TICK, _PAGE = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")


def stat_reading(stat_path: str | Path) -> tuple[float, int] | None:
    """(user + system CPU seconds, resident bytes) from one read of a /proc/<pid>/stat file, or
    None once the process is gone: the sampler's one read per process a sample."""
    try:
        fields = Path(stat_path).read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK, int(fields[21]) * _PAGE


def machine_seconds(stat_path: str | Path = "/proc/stat") -> tuple[float, float, float]:
    """(busy, stolen, all) CPU seconds of the whole machine so far, every CPU summed, from the first
    line of /proc/stat: busy is what any process or the kernel ran, stolen what the hypervisor gave
    to other guests while this one wanted to run (a noisy neighbour)."""
    try:
        ticks = [int(t) for t in Path(stat_path).read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0, 0.0, 0.0
    user, nice, system, idle, iowait, irq, softirq, steal = ticks
    return (user + nice + system + irq + softirq) / _TICK, steal / _TICK, sum(ticks) / _TICK

def grouped(by_role: dict[str, float]) -> dict[str, float]:
    """`by_role` with Ray's many helper processes summed as one role (RAY).

    >>> grouped({"source a": 1.0, "ray and helpers: raylet": 0.5, "ray and helpers: gcs_server": 0.25})
    {'source a': 1.0, 'ray and helpers': 0.75}
    """
    out: dict[str, float] = {}
    for role, value in by_role.items():
        group = RAY if role.startswith(RAY) else role
        out[group] = out.get(group, 0.0) + value
    return out


def cpu_use(before: dict[str, float], after: dict[str, float], wall_seconds: float, cpus: int,
            machine: tuple[tuple, tuple] | None = None) -> dict:
    """Where a stretch of the run spent the machine, from two `cpu_seconds()` readings: CPU seconds
    per role (Ray's many helpers as one, every role named even at 0.0), and how busy the machine
    was (1.0: every core all along). With two `machine_seconds()` readings, also how much of the machine went to processes outside
    the federation (`others`) and to other guests of the hypervisor (`stolen`): a run that either
    took a share of is not comparable with one that nothing disturbed.

    >>> cpu_use({"source a": 1.0, "ray and helpers: raylet": 0.5}, {"source a": 4.0, "spark JVM": 1.0,
    ...         "ray and helpers: raylet": 0.7, "ray and helpers: gcs_server": 0.3}, 5.0, 2,
    ...         machine=((100.0, 3.0, 500.0), (105.5, 3.5, 510.0)))
    {'seconds': 5.0, 'busy': 0.45, 'by_role': {'source a': 3.0, 'spark JVM': 1.0, 'ray and helpers': 0.5}, 'others': 0.1, 'stolen': 0.05}
    """
    by_role = grouped({role: seconds - before.get(role, 0.0) for role, seconds in after.items()})
    # every role measured stays named, an idle one at 0.0: a source that cost nothing is a finding
    used = {role: round(max(0.0, s), 3) for role, s in sorted(by_role.items(), key=lambda kv: -kv[1])}
    busy = sum(used.values()) / (wall_seconds * cpus) if wall_seconds and cpus else None
    use = {"seconds": round(wall_seconds, 2), "busy": round(busy, 3) if busy is not None else None, "by_role": used}
    if machine is not None and machine[1][2] > machine[0][2]:
        (busy0, stolen0, all0), (busy1, stolen1, all1) = machine
        spent = all1 - all0
        use["others"] = round(max(0.0, (busy1 - busy0 - sum(used.values())) / spent), 3)
        use["stolen"] = round((stolen1 - stolen0) / spent, 3)
    return use


def busy_text(cpu: dict) -> str:
    """How busy the federation kept the machine, and what else took 1% of it or more meanwhile.

    >>> busy_text({"busy": 0.94, "others": 0.12, "stolen": 0.004}), busy_text({"busy": 0.5})
    ('94% busy (outside the federation 12%)', '50% busy')
    """
    disturbed = [f"{name} {cpu[key]:.0%}" for key, name in (("others", "outside the federation"), ("stolen", "stolen"))
                 if cpu.get(key, 0) >= 0.01]
    return f"{cpu['busy']:.0%} busy" + (f" ({', '.join(disturbed)})" if disturbed else "")


def cpu_ms_per_txn(cpu: dict, committed: int | None) -> float | None:
    """CPU milliseconds every process used per source transaction committed in a phase
    (`cpu` as `cpu_use` returns it); None without commits."""
    return round(1000 * sum(cpu["by_role"].values()) / committed, 2) if committed else None


def shares(by_role: dict[str, float]) -> str:
    """Each role's share of the CPU in `by_role` (a cpu_use reading), the biggest first, from 2%.

    >>> shares({"source a": 3.0, "spark JVM": 1.0, "ray and helpers": 0.05})
    'source a 74%, spark JVM 25%'
    """
    used = sum(by_role.values())
    return ", ".join(f"{role} {seconds / used:.0%}" for role, seconds in by_role.items()
                     if used and seconds / used >= 0.02)
