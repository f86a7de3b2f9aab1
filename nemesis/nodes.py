"""Whole-node faults on a Kubernetes cluster, for the node nemesis (nemesis.node).

Two parts, because a node's power and cable belong to the machine while cordons and taints belong
to Kubernetes:
- `Machines`: the nodes of the local cluster tool (../shared/tools/local-k8s, `local-k8s node`),
  each worker `nN` a network namespace `lk8s-nN` with its own containerd, kubelet and kube-proxy.
  `crash` kills every process of the node at once (a power loss), `start` brings its daemons
  back on their kept state, `cut` drops every packet on the node's one link (`eth0` in its
  namespace) both ways, so the node, its pods and its kubelet lose the other nodes and the control
  plane, and `mend` takes the rules away;
- `Operator`: what an operator does with kubectl: cordon, drain, uncordon, and the taint
  `node.kubernetes.io/out-of-service` of Kubernetes' non-graceful node shutdown.

Why the taint: a node that lost power cannot confirm that its pods are dead, so Kubernetes never
replaces a StatefulSet pod there (two pods of one identity could otherwise run at once). Once the
node controller has marked the node NotReady (no heartbeat for its `--node-monitor-grace-period`,
50 s by default), the Kubernetes documentation ("Non-graceful node shutdown handling") has the
operator taint it out of service: the pods bound to it are force-deleted, their volumes detached,
and the StatefulSet controller creates them again, on another node when their volumes allow.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
_RULE = ["-m", "comment", "--comment", "fedlab-nemesis-node", "-j", "DROP"]
# Inbound before anything else sees it, outbound after everything else has: kube-proxy and a
# NetworkPolicy agent in the node's namespace rewrite the filter and nat tables, never these.
_CUTS = (("raw", "PREROUTING", "-i"), ("mangle", "POSTROUTING", "-o"))


class Machines:
    """The local cluster tool's worker nodes (`nN`), by power and by cable."""

    def __init__(self, tool: str):
        self.tool = tool

    def crash(self, node: str) -> None:
        self._node("crash", node)

    def start(self, node: str) -> None:
        """Starts the node's daemons again and waits until the node is Ready (the tool's own wait)."""
        self._node("start", node)

    def cut(self, node: str) -> None:
        for table, chain, way in _CUTS:
            self._iptables(node, "-t", table, "-I", chain, way, "eth0", *_RULE)

    def mend(self, node: str) -> int:
        """Takes the cut away; returns how many packets it dropped."""
        dropped = 0
        for table, chain, way in _CUTS:
            listing = self._iptables(node, "-t", table, "-L", chain, "-v", "-n", "-x", check=False)
            dropped += sum(int(line.split()[0]) for line in listing.splitlines() if "fedlab-nemesis-node" in line)
            self._iptables(node, "-t", table, "-D", chain, way, "eth0", *_RULE, check=False)
        return dropped

    def _node(self, verb: str, node: str) -> None:
        proc = subprocess.run([self.tool, "node", verb, str(worker_number(node))], capture_output=True, text=True,
                              timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"local-k8s node {verb} {worker_number(node)}: {(proc.stderr or proc.stdout).strip()[-300:]}")

    def _iptables(self, node: str, *args: str, check: bool = True) -> str:
        proc = subprocess.run(["ip", "netns", "exec", f"lk8s-{node}", "iptables", "-w", *args], capture_output=True,
                              text=True, timeout=30)
        if check and proc.returncode != 0:
            raise RuntimeError(f"iptables {' '.join(args[:4])} in node {node}'s namespace: {proc.stderr.strip()[:200]}")
        return proc.stdout


def worker_number(node: str) -> int:
    """N of the local cluster tool's worker node `nN`; node 1 (the control plane's host) and any
    other node are not the tool's to crash or cut.

    >>> worker_number("n3")
    3
    """
    found = re.fullmatch(r"n(\d+)", node)
    if found is None or int(found.group(1)) < 2:
        raise RuntimeError(f"node {node} is not one of the local cluster tool's worker nodes (n2, n3, ...): "
                           "it cannot be crashed, restarted or cut (node 1 runs the control plane)")
    return int(found.group(1))


class Operator:
    """An operator's kubectl verbs on nodes."""

    def __init__(self, kubectl: str = "kubectl", env: dict | None = None):
        self.kubectl, self.env = kubectl, env

    def names(self) -> list[str]:
        return [n["metadata"]["name"] for n in json.loads(self._run("get", "nodes", "-o", "json"))["items"]]

    def ready(self, node: str) -> bool:
        conditions = json.loads(self._run("get", "node", node, "-o", "json"))["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    def wait_not_ready(self, node: str, timeout: float, stopping) -> float | None:
        """Seconds until Kubernetes marks `node` not Ready, or None after `timeout` or once
        `stopping` (an Event) is set."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            if not self.ready(node):
                return time.monotonic() - began
            if stopping.wait(1.0):
                return None
        return None

    def taint_out_of_service(self, node: str) -> None:
        self._run("taint", "node", node, f"{OUT_OF_SERVICE}=nodeshutdown:NoExecute", "--overwrite")

    def untaint(self, node: str) -> None:
        self._run("taint", "node", node, f"{OUT_OF_SERVICE}-", check=False)

    def cordon(self, node: str) -> None:
        self._run("cordon", node)

    def drain(self, node: str) -> str:
        """Cordons `node` and evicts its pods as `kubectl drain` does (each pod's grace period
        honoured); returns kubectl's last line."""
        out = self._run("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                        "--timeout=180s", timeout=240)
        return out.strip().splitlines()[-1] if out.strip() else "drained"

    def uncordon(self, node: str) -> None:
        self._run("uncordon", node, check=False)

    def _run(self, *args: str, check: bool = True, timeout: float = 60) -> str:
        proc = subprocess.run([self.kubectl, *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])}: {(proc.stderr or proc.stdout).strip()[:300]}")
        return proc.stdout
