"""A nemesis schedule (nemesis.schedule) applied to a Helm release from its Kubernetes node,
as root: from outside every process under test, as Jepsen's nemesis faults a cluster. `make
e2e-k8s` runs one; `python -m fedlab.nemesis.node --namespace NS --release R --nemesis S` runs
one by hand on the local cluster (docs/kubernetes.md, "The nemesis from the node").

- `pause T at A for D`: T's pods' cgroups frozen (the cgroup freezer: every process stops where it
  is, its sockets open), thawed after D;
- `partition X|Y at A for D`: in the network namespace of each pod on either side (entered with
  nsenter), iptables drops what comes from the other side's pod IPs; connections hang with no
  error. `X->Y`: only Y's pods drop, so X cannot reach Y while Y's packets still reach X;
- `clock S +N at A` (or `-N`): source S's wall clock set N seconds off from A on, through the
  clock shim the chart preloads into source pods under `chaos.applier: node`
  (helm/image/clock_offset.c). The monotonic clock is not moved. A later clause on S sets another
  offset (the clock jumps); the end of the schedule sets it back to 0;
- `kill T at A`: every process of T's containers SIGKILLed, as a crash (the kubelet starts the
  container again; an executor pod stays failed and Spark asks for another); `kill raylet:S` kills
  only the raylet of source S's Ray node;
- whole-node faults (nemesis.nodes), on the local cluster tool's worker nodes:
  `crash node:N` kills the node's every process at once; once Kubernetes has marked it NotReady,
  the nemesis taints it out of service, as the Kubernetes documentation has an operator do after
  a non-graceful shutdown, so that its StatefulSet pods start again elsewhere where their volumes
  allow (a source's node-local volume does not: it waits for its node). `restart node:N` starts
  the node a crash took and takes the taint away. `partition node:N for D` drops every packet on
  the node's link, both ways, healed after D. `drain node:N for D` cordons the node and evicts its
  pods as `kubectl drain` does; uncordoned after D.

Targets: a source's name, `sources`, `warehouse`, `load` (the load Job's pod), `executors`
(Spark's executor pods), `ray-head`, and as a partition's second side `everything` (every other
pod of the release); a node by its name or by what runs on it (`node:warehouse`). Pods are found by the chart's labels, processes by their
cgroups under /proc. Whatever is applied is reverted when its window ends, when the schedule ends
or is stopped, and when it fails: thawed, rules deleted, clocks set back. Packet-level delay and
loss stay with the in-process fault injector: this kernel has no netem qdisc.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from fedlab.fedmodel.errors import ModelError
from fedlab.nemesis import schedule
from fedlab.nemesis.nodes import OUT_OF_SERVICE, Machines, Operator
from fedlab.nemesis.schedule import Fault
from fedlab.nemesis.applier import Events, Nemesis, signal_process

CLOCK_FILE = "/tmp/fedlab-clock-offset"   # FEDLAB_CLOCK_OFFSET_FILE in the chart's source pods
RULE = ["-j", "DROP", "-m", "comment", "--comment", "fedlab-nemesis"]
COMPONENTS = {"sources": "source", "warehouse": "warehouse", "load": "load", "executors": "spark-executor",
              "ray-head": "ray-head"}
PROC = Path("/proc")
CGROUPS = Path("/sys/fs/cgroup")


def refusal(fault: Fault) -> str | None:
    """Why the node cannot apply `fault`, or None if it can."""
    if fault.kind == "clock" and fault.targets[0] in schedule.ROLES + schedule.CLUSTER_ROLES:
        return "only source pods carry the clock shim (a source's name, not a role)"
    return None


@dataclass(frozen=True)
class Pod:
    name: str
    uid: str
    ip: str
    node: str = ""


class Release:
    """The release's pods, by target, and their processes as this node sees them."""

    def __init__(self, namespace: str, release: str, kubectl: str = "kubectl", env: dict | None = None):
        self.namespace, self.release, self.kubectl, self.env = namespace, release, kubectl, env

    def sources(self) -> list[str]:
        pods = self._get(f"app.kubernetes.io/instance={self.release},app.kubernetes.io/component=source")
        return sorted({p["metadata"]["labels"].get("fedlab.io/source", "") for p in pods} - {""})

    def pods(self, target: str) -> list[Pod]:
        """The running pods `target` names (a source, a role, `raylet:S`: S's pod, or `everything`:
        all the release's)."""
        target = target.removeprefix(schedule.RAYLET)
        selector = f"app.kubernetes.io/instance={self.release}"
        if target != schedule.EVERYTHING:
            selector += ",app.kubernetes.io/component="
            selector += COMPONENTS[target] if target in COMPONENTS else f"source,fedlab.io/source={target}"
        return [Pod(p["metadata"]["name"], p["metadata"]["uid"], p["status"]["podIP"], p["spec"].get("nodeName", ""))
                for p in self._get(selector) if p["status"].get("phase") == "Running" and p["status"].get("podIP")]

    def on_node(self, node: str) -> list[str]:
        """The names of the release's pods bound to `node`, whatever their phase."""
        return sorted(p["metadata"]["name"] for p in self._get(f"app.kubernetes.io/instance={self.release}")
                      if p["spec"].get("nodeName") == node)

    def _get(self, selector: str) -> list[dict]:
        proc = subprocess.run([self.kubectl, "-n", self.namespace, "get", "pods", "-l", selector, "-o", "json"],
                              env=self.env, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"kubectl get pods -l {selector}: {proc.stderr.strip()[:300]}")
        return json.loads(proc.stdout)["items"]


def pod_processes(pod: Pod) -> dict[str, list[int]]:
    """The pod's processes on this node, by the cgroup of their container (its last path part)."""
    def of_pod(path: str) -> bool:   # the cgroupfs driver's pod<uid>, or the systemd driver's ...-pod<uid_>.slice
        return any(part == f"pod{pod.uid}" or part.endswith(f"-pod{pod.uid.replace('-', '_')}.slice")
                   for part in path.split("/")[:-1])

    found: dict[str, list[int]] = {}
    for entry in sorted(PROC.iterdir(), key=lambda e: e.name):
        if not entry.name.isdigit():
            continue
        try:
            lines = (entry / "cgroup").read_text().splitlines()
        except OSError:   # the process ended meanwhile
            continue
        path = _cgroup_path(lines)
        if path and of_pod(path):
            found.setdefault(path, []).append(int(entry.name))
    return found


def _cgroup_path(lines: list[str]) -> str | None:
    """A process's cgroup path: the freezer hierarchy's under cgroup v1, the unified one under v2."""
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "freezer" in controllers.split(",") or controllers == "":
            return path
    return None


def _comm(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


class NodeNemesis(Nemesis):
    """Applies `faults` to `release` (a Release) from this node, timed from `start()`
    (nemesis.applier); `events` gets one line per action."""

    def __init__(self, release: Release, faults: list[Fault], events: list[str], machines: Machines | None = None,
                 operator: Operator | None = None):
        super().__init__(faults, events)
        self.release = release
        self.machines = machines      # a whole-node fault's power and cable (None: the schedule has none)
        self.operator = operator or Operator(release.kubectl, release.env)
        self._lock = threading.Lock()
        self._closed = False
        self._frozen: dict[Path, str] = {}                      # freezer file -> pod, while frozen
        self._rules: dict[tuple[int, str], str] = {}            # (sandbox pid, source IP) -> pod, while dropped
        self._clocks: dict[str, Pod] = {}                       # pod name -> pod, while its clock is off
        self._crashed: dict[str, str] = {}                      # `node:N` target -> the node it crashed
        self._cut: set[str] = set()                             # nodes cut from the others
        self._drained: set[str] = set()                         # nodes cordoned by a drain

    def _begin(self, fault: Fault, elapsed: float):
        if fault.of_node:
            act = {"crash": self._crash, "restart": self._restart, "partition": self._cut_node, "drain": self._drain}
        else:
            act = {"pause": self._pause, "partition": self._partition, "clock": self._clock, "kill": self._kill}
        return act[fault.kind](fault, elapsed)

    def _pods(self, target: str) -> list[Pod]:
        pods = self.release.pods(target)
        if not pods:
            raise RuntimeError(f"no running pod for {target!r} in release {self.release.release}")
        return pods

    def _pause(self, fault: Fault, elapsed: float):
        files = []
        for pod in self._pods(fault.targets[0]):
            file = _freezer(pod)
            with self._lock:
                if self._closed:
                    break
                _write(file, "FROZEN" if file.name == "freezer.state" else "1")
                self._frozen[file] = pod.name
            files.append(file)
            self.events.append(f"froze pod {pod.name} at {elapsed:.1f}s for {fault.length:g}s")
        return lambda at: self._thaw(files, at)

    def _thaw(self, files: list[Path], elapsed: float | None) -> None:
        with self._lock:
            for file in files:
                pod = self._frozen.pop(file, None)
                if pod is not None:
                    _thaw(file)
                    self.events.append(f"thawed pod {pod}" + (f" at {elapsed:.1f}s" if elapsed is not None else ""))

    def _partition(self, fault: Fault, elapsed: float):
        x, y = (self._pods(t) for t in fault.targets)
        y = [pod for pod in y if pod not in x]   # `everything` is everything else
        cuts = [(receiver, sender) for receiver in y for sender in x]   # X's packets dropped at Y
        if not fault.one_way:
            cuts += [(receiver, sender) for receiver in x for sender in y]
        sandboxes = {pod.name: _sandbox(pod) for pod in {receiver for receiver, _ in cuts}}
        rules = []
        for receiver, sender in cuts:
            sandbox = sandboxes[receiver.name]
            with self._lock:
                if self._closed:
                    break
                _iptables(sandbox, "-I", "INPUT", "-s", sender.ip, *RULE)
                self._rules[(sandbox, sender.ip)] = receiver.name
            rules.append((sandbox, sender.ip))
        arrow = "->" if fault.one_way else "|"
        self.events.append(f"partitioned {arrow.join(fault.targets)} at {elapsed:.1f}s for {fault.length:g}s "
                           f"({len(rules)} drop rules in {len(sandboxes)} pods)")
        return lambda at: self._heal(rules, at)

    def _heal(self, rules: list[tuple[int, str]], elapsed: float | None) -> None:
        with self._lock:
            dropped = 0
            for sandbox, ip in rules:
                if self._rules.pop((sandbox, ip), None) is not None:
                    dropped += _dropped(sandbox, ip)
                    _iptables(sandbox, "-D", "INPUT", "-s", ip, *RULE, check=False)
            if rules:
                self.events.append("healed the partition" + (f" at {elapsed:.1f}s" if elapsed is not None else "")
                                   + f": {dropped} packets had been dropped")

    def _clock(self, fault: Fault, elapsed: float):
        for pod in self._pods(fault.targets[0]):
            with self._lock:
                if self._closed:
                    break
                _write(_in_container(pod, CLOCK_FILE), f"{fault.offset:g}\n", atomic=True)
                self._clocks[pod.name] = pod
            self.events.append(f"set the clock of pod {pod.name} {fault.offset:+g}s off at {elapsed:.1f}s")
        return None   # held until another clause on it, or the end of the schedule

    def _kill(self, fault: Fault, elapsed: float):
        target = fault.targets[0]
        for pod in self._pods(target):
            pids = [p for container in _split(pod)[1] for p in container]
            if target.startswith(schedule.RAYLET):
                pids = [p for p in pids if _comm(p) == "raylet"]
            for pid in pids:
                signal_process(pid, signal.SIGKILL)
            what = "the raylet of" if target.startswith(schedule.RAYLET) else "every process of"
            self.events.append(f"killed {what} pod {pod.name} ({len(pids)} processes) at {elapsed:.1f}s")
        return None

    # ---- whole nodes ----

    def _node(self, fault: Fault) -> tuple[str, str]:
        """The node a node fault names, and what of the release runs there (for its event line)."""
        name = fault.targets[0].removeprefix(schedule.NODE)
        if name in schedule.ROLES + schedule.CLUSTER_ROLES or name in self.release.sources():
            node = self._pods(name)[0].node
        elif name in self.operator.names():
            node = name
        else:
            raise RuntimeError(f"no node {name!r} and no source or role of that name "
                               f"(nodes: {', '.join(self.operator.names())})")
        return node, ", ".join(self.release.on_node(node)) or "none of the release's pods"

    def _crash(self, fault: Fault, elapsed: float):
        node, pods = self._node(fault)
        with self._lock:
            if self._closed:
                return None
            self.machines.crash(node)
            self._crashed[fault.targets[0]] = node
        self.events.append(f"crashed node {node} at {elapsed:.1f}s: every process killed ({pods})")
        threading.Thread(target=self._declare_dead, args=(node, time.monotonic()), name="operator", daemon=True).start()
        return None

    def _declare_dead(self, node: str, crashed: float) -> None:
        """What the operator does once Kubernetes sees the node gone: taints it out of service, so
        that its pods are deleted and their controllers start them again (nodes.py says why)."""
        waited = self.operator.wait_not_ready(node, 300.0, self._stop)
        with self._lock:
            if waited is None or self._closed or node not in self._crashed.values():
                return
            self.operator.taint_out_of_service(node)
        self.events.append(f"node {node} NotReady {time.monotonic() - crashed:.1f}s after its crash: "
                           f"tainted {OUT_OF_SERVICE}, so its pods are deleted and start again where they can")

    def _restart(self, fault: Fault, elapsed: float | None):
        with self._lock:
            node = self._crashed.pop(fault.targets[0])
            began = time.monotonic()
            self.machines.start(node)
            self.operator.untaint(node)
        self.events.append(f"restarted node {node}" + (f" at {elapsed:.1f}s" if elapsed is not None else "")
                           + f": Ready after {time.monotonic() - began:.1f}s, its out-of-service taint removed")
        return None

    def _cut_node(self, fault: Fault, elapsed: float):
        node, pods = self._node(fault)
        with self._lock:
            if self._closed:
                return None
            self.machines.cut(node)
            self._cut.add(node)
        self.events.append(f"cut node {node} from the other nodes and the control plane at {elapsed:.1f}s "
                           f"for {fault.length:g}s ({pods})")
        return lambda at: self._mend(node, at)

    def _mend(self, node: str, elapsed: float | None) -> None:
        with self._lock:
            if node in self._cut:
                self._cut.discard(node)
                dropped = self.machines.mend(node)
                self.events.append(f"mended node {node}'s link" + (f" at {elapsed:.1f}s" if elapsed is not None else "")
                                   + f": {dropped} packets had been dropped")

    def _drain(self, fault: Fault, elapsed: float):
        node, pods = self._node(fault)
        with self._lock:
            if self._closed:
                return None
            self.operator.cordon(node)
            self._drained.add(node)
        self.events.append(f"cordoned node {node} at {elapsed:.1f}s and draining it for {fault.length:g}s ({pods})")

        def drain():   # evictions wait for each pod's grace period: the schedule goes on meanwhile
            try:
                self.events.append(f"drained node {node}: {self.operator.drain(node)}")
            except RuntimeError as err:
                self.events.append(f"draining node {node} did not finish: {err}")
        threading.Thread(target=drain, name="drain", daemon=True).start()
        return lambda at: self._uncordon(node, at)

    def _uncordon(self, node: str, elapsed: float | None) -> None:
        with self._lock:
            if node in self._drained:
                self._drained.discard(node)
                self.operator.uncordon(node)
                self.events.append(f"uncordoned node {node}" + (f" at {elapsed:.1f}s" if elapsed is not None else ""))

    def close(self) -> None:
        """Thaws every frozen pod, deletes every drop rule, sets every clock back, mends, uncordons
        and restarts every node; applies nothing after."""
        with self._lock:
            self._closed = True
        self._thaw(list(self._frozen), None)
        self._heal(list(self._rules), None)
        for node in list(self._cut):
            self._mend(node, None)
        for node in list(self._drained):
            self._uncordon(node, None)
        with self._lock:
            crashed = list(self._crashed.items())
        for target, node in crashed:
            self._restart(Fault("restart", (target,), 0.0), None)
        with self._lock:
            for pod in self._clocks.values():
                # Found again: a container restarted since keeps the pod's /tmp, and the offset in it.
                try:
                    _write(_in_container(pod, CLOCK_FILE), "0\n", atomic=True)
                    self.events.append(f"set the clock of pod {pod.name} back")
                except (OSError, RuntimeError):   # the pod is gone, and its clock with it
                    self.events.append(f"pod {pod.name} is gone: no clock to set back")
            self._clocks.clear()


def _freezer(pod: Pod) -> Path:
    """The pod's freezer control file: the parent of its containers' cgroups."""
    paths = list(pod_processes(pod))
    if not paths:
        raise RuntimeError(f"pod {pod.name} has no process on this node")
    pod_path = str(Path(paths[0]).parent).lstrip("/")
    v1 = CGROUPS / "freezer" / pod_path / "freezer.state"
    return v1 if v1.exists() else CGROUPS / pod_path / "cgroup.freeze"


def _thaw(file: Path) -> None:
    try:
        _write(file, "THAWED" if file.name == "freezer.state" else "0")
    except OSError:   # the pod is gone: nothing left frozen
        pass


def _split(pod: Pod) -> tuple[int | None, list[list[int]]]:
    """The pid of the pod's sandbox (its pause process, which holds the pod's network namespace
    for its whole life, across container restarts), and the pids of each of its containers."""
    sandbox, containers = None, []
    for pids in pod_processes(pod).values():
        found = [p for p in pids if _comm(p) == "pause"]
        if found:
            sandbox = found[0]
        else:
            containers.append(pids)
    return sandbox, containers


def _sandbox(pod: Pod) -> int:
    sandbox = _split(pod)[0]
    if sandbox is None:
        raise RuntimeError(f"pod {pod.name} has no sandbox process on this node")
    return sandbox


def _in_container(pod: Pod, path: str) -> Path:
    """`path` as the pod's containers see it (their mounts, through /proc/PID/root)."""
    containers = _split(pod)[1]
    if not containers:
        raise RuntimeError(f"pod {pod.name} has no container process on this node")
    return PROC / str(containers[0][0]) / "root" / path.lstrip("/")


def _iptables(pid: int, *args: str, check: bool = True) -> None:
    proc = subprocess.run(["nsenter", "-t", str(pid), "-n", "iptables", "-w", *args], capture_output=True,
                          text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"iptables {' '.join(args[:4])} in the netns of pid {pid}: {proc.stderr.strip()[:200]}")


def _dropped(pid: int, ip: str) -> int:
    """How many packets the drop rule for `ip` dropped in pid's network namespace."""
    proc = subprocess.run(["nsenter", "-t", str(pid), "-n", "iptables", "-w", "-L", "INPUT", "-v", "-n", "-x"],
                          capture_output=True, text=True, timeout=30)
    for line in proc.stdout.splitlines():
        fields = line.split()
        if "fedlab-nemesis" in line and len(fields) > 7 and fields[7] == ip:
            return int(fields[0])
    return 0


def _write(file: Path, text: str, atomic: bool = False) -> None:
    if not atomic:
        file.write_text(text)
        return
    partial = file.with_name(file.name + ".partial")
    partial.write_text(text)
    partial.chmod(0o644)
    partial.replace(file)


def machines(faults: list[Fault]) -> Machines | None:
    """The local cluster tool's nodes, for a schedule with whole-node faults ($LOCAL_K8S, else
    `local-k8s` on PATH); None for one without. RuntimeError when the tool cannot be found."""
    if not any(f.of_node for f in faults):
        return None
    tool = os.environ.get("LOCAL_K8S") or shutil.which("local-k8s")
    if not tool:
        raise RuntimeError("whole-node faults need the local cluster tool: set LOCAL_K8S to its path, or put "
                           "local-k8s on PATH (eval \"$(local-k8s env)\")")
    return Machines(tool)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m fedlab.nemesis.node",
                                description="apply a nemesis schedule to a fedlab release, from its node (as root)")
    p.add_argument("--namespace", required=True)
    p.add_argument("--release", required=True)
    p.add_argument("--nemesis", required=True, help="the schedule, e.g. 'partition warehouse|s1 at 10s for 10s; "
                                                    "clock s2 +300s at 30s', or random:SEED")
    p.add_argument("--duration", type=float, default=90.0, help="seconds a random:SEED schedule spans (default 90)")
    args = p.parse_args(argv)
    release = Release(args.namespace, args.release)
    try:
        faults = schedule.read(args.nemesis, release.sources(), args.duration, refusal)
        tool = machines(faults)
    except (ModelError, RuntimeError) as err:
        print(err, file=sys.stderr)
        return 2
    nemesis = NodeNemesis(release, faults, Events(lambda line: print(line, flush=True)), tool)
    signal.signal(signal.SIGTERM, lambda *_: nemesis.stop())
    try:
        nemesis.start().wait()
    except KeyboardInterrupt:
        pass
    finally:
        nemesis.stop()
    if nemesis.error is not None:
        print(f"nemesis: {nemesis.error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
