"""A nemesis schedule (nemesis.schedule) applied to a local run (`fedlab run --nemesis`).

Faults come from outside the code under test, as the operating system or Ray deliver them:
- `pause SOURCE` (or `sources`): SIGSTOP to the source actor's process, SIGCONT when the pause
  ends. Its gRPC server, sender and database stop mid-call; its peers' deadlines, resend timers
  and the driver's unheard-commit retry are what carry the run through;
- `kill SOURCE`: the actor killed through Ray, which starts it again on its database file;
- `kill warehouse`: the warehouse crashed and started again from Delta (what
  `--chaos kill-warehouse` does);
- `pause warehouse`: the run's first warehouse held as a frozen process is, its calls
  unanswered and its views' cores idle (it runs in the run's own process, where SIGSTOP would stop
  everything: warehouse.view_group.ViewGroup.pause), while the run's other warehouses
  (`fedlab run --warehouses N`) go on: a subscriber that lags behind the others by the pause.

The rest need what a local run does not have, each refused before the run starts with the
reason: the load generator runs inside the run's own process (no pause, no partition from it);
every process shares the machine's one network namespace and clock (no partition, no clock
offset), and the machine is the run's only node (no whole-node fault).

Whatever it paused is thawed when the schedule ends, the run fails, or the process is stopped.
"""

from __future__ import annotations

import signal
import threading

from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER
from fedlab.nemesis import schedule
from fedlab.nemesis.schedule import Fault
from fedlab.nemesis.applier import Nemesis, signal_process


def refusal(fault: Fault) -> str | None:
    """Why a local run cannot apply `fault`, or None if it can."""
    if fault.of_node:
        return "a local run has one machine: whole-node faults need a cluster's nodes (nemesis.node)"
    if any(t in schedule.CLUSTER_ROLES or t.startswith(schedule.RAYLET) or t == schedule.EVERYTHING
           for t in fault.targets):
        return "only a cluster has Spark executors, a Ray head of their own and raylets per node (nemesis.node)"
    if fault.kind == "partition":
        return "a local run's processes share one network namespace, where a partition cannot tell them apart"
    if fault.kind == "clock":
        return "a local run's processes share the machine's clock"
    if "load" in fault.targets:
        return "the load generator runs inside the run's own process"
    if fault.kind == "kill" and "sources" in fault.targets:
        return "kill one source at a time"
    return None


def refuser(algorithm: str, restartable: bool):
    """`refuse(fault)`: why a local run of `algorithm` cannot apply a process fault (None: it can),
    `refusal`'s reasons and a warehouse kill for an algorithm that cannot restart from Delta."""
    def refuse(fault: Fault) -> str | None:
        if fault.kind == "kill" and fault.targets == ("warehouse",) and not restartable:
            return f"{algorithm} cannot restart from Delta"
        return refusal(fault)
    return refuse


class LocalNemesis(Nemesis):
    """Applies `faults` to the local federation `fed` (live.federation.Federation), timed
    from `start()` (nemesis.applier)."""

    def __init__(self, fed, faults: list[Fault], events: list[str]):
        super().__init__(faults, events)
        self.fed = fed
        self._paused: dict[int, str] = {}   # pid -> source, while frozen
        self._closed = False                 # after close(), nothing is frozen again
        self._lock = threading.Lock()

    def _begin(self, fault: Fault, elapsed: float):
        if fault.kind == "pause" and fault.targets == ("warehouse",):
            return self._hold_warehouse(fault, elapsed)
        if fault.kind == "pause":
            pids = self._freeze(fault, elapsed)
            return lambda at: self._thaw(pids, at)
        self._kill(fault, elapsed)   # the source's restart is Ray's; the warehouse is back when this returns
        return None

    def close(self) -> None:
        """Thaws whatever is frozen, and freezes nothing after."""
        with self._lock:
            self._closed = True
            for pid in list(self._paused):
                signal_process(pid, signal.SIGCONT)
            self._paused.clear()
            for group in self.fed.groups.values():
                group.resume()

    def _hold_warehouse(self, fault: Fault, elapsed: float):
        """The federation's warehouse held as a frozen process would be (it runs in this process,
        beside the run's other warehouses, which go on: warehouse.view_group.ViewGroup.pause)."""
        with self._lock:
            if self._closed:
                return None
            group = self.fed.groups[DEFAULT_SUBSCRIBER]
            group.pause()
        self.events.append(f"paused the warehouse at {elapsed:.1f}s for {fault.length:g}s")

        def resume(at: float) -> None:
            group.resume()
            self.events.append(f"resumed the warehouse at {at:.1f}s")
        return resume

    def _sources(self, fault: Fault) -> list[str]:
        return sorted(self.fed.actors) if fault.targets == ("sources",) else list(fault.targets)

    def _freeze(self, fault: Fault, elapsed: float) -> list[int]:
        pids = []
        for source in self._sources(fault):
            self.fed.refresh_address(source)   # a source an earlier fault restarted serves elsewhere
            pid = self.fed.control(source).health(timeout=60)["pid"]
            with self._lock:
                if self._closed:
                    break
                signal_process(pid, signal.SIGSTOP)
                self._paused[pid] = source
            pids.append(pid)
            self.events.append(f"paused source {source} (pid {pid}) at {elapsed:.1f}s for {fault.length:g}s")
        return pids

    def _thaw(self, pids: list[int], elapsed: float) -> None:
        with self._lock:
            for pid in pids:
                signal_process(pid, signal.SIGCONT)
                if pid in self._paused:
                    self.events.append(f"resumed source {self._paused.pop(pid)} (pid {pid}) at {elapsed:.1f}s")

    def _kill(self, fault: Fault, elapsed: float) -> None:
        import ray

        target = fault.targets[0]
        if target == "warehouse":
            self.fed.restart_warehouse()
            self.events.append(f"restarted the warehouse at {elapsed:.1f}s")
        else:
            ray.kill(self.fed.actors[target], no_restart=False)
            self.events.append(f"killed source {target} at {elapsed:.1f}s")

