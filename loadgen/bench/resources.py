"""Peak memory and CPU seconds of the processes of a live run, sampled with psutil.

The processes: this one (the warehouse's Python side and the load driver share it), its
children (the Spark JVM, Ray's own services and workers: ray.init starts them from here), and
each source actor's worker process, named by the pid the actor reports. A sampler thread reads
every process's resident set size twice a second; the peak of the sum over all of them is the
figure the 8 GB target is about, and each role's own peak is kept beside it.
"""

from __future__ import annotations

import os
import threading

import psutil


class ResourceSampler:
    def __init__(self, source_pids: dict[str, int] | None = None, interval: float = 0.5):
        self.role_of_pid = {pid: f"source {name}" for name, pid in (source_pids or {}).items()}
        self.role_of_pid[os.getpid()] = "warehouse + driver (python)"
        self.interval = interval
        self.me = psutil.Process(os.getpid())
        self.peak_total = 0.0
        self.peak_by_role: dict[str, float] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-resources", daemon=True)
        self._cpu_start = 0.0
        self.warehouse_cpu_seconds = 0.0

    def start(self) -> "ResourceSampler":
        self._cpu_start = self._warehouse_cpu()
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()
        self.warehouse_cpu_seconds = round(self._warehouse_cpu() - self._cpu_start, 2)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def _processes(self) -> list[psutil.Process]:
        procs = {self.me.pid: self.me}
        try:
            procs.update({p.pid: p for p in self.me.children(recursive=True)})
        except psutil.Error:
            pass
        for pid in self.role_of_pid:
            if pid not in procs:
                try:
                    procs[pid] = psutil.Process(pid)
                except psutil.Error:   # a killed actor: Ray may be restarting it
                    pass
        return list(procs.values())

    def _role(self, proc: psutil.Process) -> str:
        """What a process is, decided once per pid: a JVM renames its main thread (the process
        name psutil reads becomes e.g. "Thread-165"), so the executable is what tells a JVM."""
        if proc.pid not in self.role_of_pid:
            try:
                exe = os.path.basename(proc.exe() or "")
                name = proc.name()
            except psutil.Error:
                return "other"
            self.role_of_pid[proc.pid] = "spark JVM" if exe == "java" else f"ray and helpers: {name}"
        return self.role_of_pid[proc.pid]

    def sample(self) -> None:
        by_role: dict[str, float] = {}
        for proc in self._processes():
            try:
                rss = proc.memory_info().rss / 2 ** 20
            except psutil.Error:
                continue
            role = self._role(proc)
            by_role[role] = by_role.get(role, 0.0) + rss
        self.samples += 1
        self.peak_total = max(self.peak_total, sum(by_role.values()))
        for role, mb in by_role.items():
            self.peak_by_role[role] = max(self.peak_by_role.get(role, 0.0), mb)

    def _warehouse_cpu(self) -> float:
        """User + system CPU seconds of this process and its JVM children (the warehouse side)."""
        total = 0.0
        procs = [self.me]
        try:
            procs += [p for p in self.me.children(recursive=True) if self._role(p) == "spark JVM"]
        except psutil.Error:
            pass
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                continue
        return total

    def figures(self) -> dict:
        return {"peak_memory_mb": round(self.peak_total, 1),
                # short-lived helpers Ray spawns (bash, chmod) show up with next to nothing
                "peak_memory_by_process_mb": {r: round(mb, 1) for r, mb in sorted(self.peak_by_role.items()) if mb >= 1},
                "warehouse_cpu_seconds": self.warehouse_cpu_seconds, "memory_samples": self.samples}
