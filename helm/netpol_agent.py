#!/usr/bin/env python3
"""NetworkPolicy enforcement on the local cluster tool's nodes, whose CNI bridge enforces none,
so that the end-to-end runs test the chart's NetworkPolicies for real.

    python helm/netpol_agent.py start    # once the cluster (and its worker nodes) are up (eval "$(local-k8s env)")
    python helm/netpol_agent.py stop     # before `local-k8s node all-down` / `local-k8s down`

The enforcer is kube-router's network policy controller (`--run-firewall` only: no routing, no
service proxy), iptables and ipset, one process per node: on the host for node 1, and inside each
worker node's network namespace (`lk8s-nN`, entered with nsenter, with the node's own kubeconfig)
for the nodes `local-k8s node add` made, since a pod's packets are filtered in its node's
namespace. It is built once from the Go module proxy, which serves v2.1.0 only here
(security flaws are reported against that version: it runs for the test's lifetime only, on a
throwaway cluster with no egress). The Kubernetes SIG's kube-network-policies was tried first: it
needs nftables' queue expression, which this machine's kernel lacks. `stop` ends every process
and removes its iptables chains and ipsets, in each namespace still there.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

MODULE = "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
VERSION = "v2.1.0"
STATE = Path(os.environ.get("TMPDIR", "/tmp")) / "fedlab-kube-router"


def binary() -> Path:
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "fedlab" / f"kube-router-{VERSION}"
    target = folder / "kube-router"
    if not target.is_file():
        print(f"[netpol] go install {MODULE}@{VERSION} (once; a few minutes)", flush=True)
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(["go", "install", f"{MODULE}@{VERSION}"], check=True,
                       env={**os.environ, "CGO_ENABLED": "0", "GOBIN": str(folder)})
    return target


def ensure_ipset() -> None:
    """kube-router's firewall needs the ipset utility, which a fresh machine may lack: Debian's
    package, installed once (the package registries are reachable; the local cluster tool installs
    its own packages the same way)."""
    if shutil.which("ipset"):
        return
    print("[netpol] apt-get install ipset (once)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "ipset"]):
        subprocess.run(command, check=True, env=env, capture_output=True)


def nodes() -> list[tuple[str, str | None]]:
    """Each node's name and network namespace (None: the host's, node 1's)."""
    names = subprocess.run(["kubectl", "get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"],
                           check=True, capture_output=True, text=True).stdout.split()
    namespaces = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    return [(name, f"lk8s-{name}" if f"lk8s-{name}" in namespaces else None) for name in names]


def in_netns(netns: str | None, command: list[str]) -> list[str]:
    return command if netns is None else ["nsenter", f"--net=/run/netns/{netns}", "--", *command]


def start() -> int:
    kubeconfig = os.environ.get("KUBECONFIG")
    if not kubeconfig:
        print('netpol: no KUBECONFIG: run eval "$(local-k8s env)" first', file=sys.stderr)
        return 2
    stop()
    try:
        ensure_ipset()
    except (OSError, subprocess.CalledProcessError) as err:
        print(f"netpol: the ipset utility is missing and could not be installed: {err}", file=sys.stderr)
        return 1
    started = {}
    for node, netns in nodes():
        # A worker node reaches the API server at the host bridge's address, as its kubelet does.
        config = kubeconfig if netns is None else str(Path(os.environ.get("LOCAL_K8S_HOME", Path.home() / ".cache/local-k8s"))
                                                        / "nodes" / node / "kubeconfig")
        folder = STATE / node
        folder.mkdir(parents=True, exist_ok=True)
        log = open(folder / "kube-router.log", "w")
        proc = subprocess.Popen(in_netns(netns, [str(binary()), f"--kubeconfig={config}", f"--hostname-override={node}",
                                                 "--run-firewall=true", "--run-router=false",
                                                 "--run-service-proxy=false", "--metrics-port=0", "--v=1"]),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        (folder / "pid").write_text(f"{proc.pid} {netns or ''}")
        started[node] = proc, netns
    deadline = time.monotonic() + 60
    while started and time.monotonic() < deadline:   # its chain in FORWARD means the policies are being applied
        for node, (proc, netns) in list(started.items()):
            if proc.poll() is not None:
                print(f"netpol: kube-router on node {node} exited ({proc.returncode}); see "
                      f"{STATE / node / 'kube-router.log'}", file=sys.stderr)
                return 1
            rules = subprocess.run(in_netns(netns, ["iptables", "-S", "FORWARD"]), capture_output=True, text=True).stdout
            if "KUBE-ROUTER-FORWARD" in rules:
                print(f"[netpol] kube-router {VERSION} enforcing NetworkPolicies on node {node} (pid {proc.pid})")
                del started[node]
        time.sleep(1)
    if started:
        print(f"netpol: kube-router did not set up its chains within 60 s on {', '.join(started)}; see "
              f"{STATE}/NODE/kube-router.log", file=sys.stderr)
        return 1
    return 0


def stop() -> int:
    stopped = []
    for pid_file in sorted(STATE.glob("*/pid")) + sorted(STATE.glob("pid")):   # and an older agent's single file
        pid, _, netns = pid_file.read_text().partition(" ")
        try:
            os.kill(int(pid), signal.SIGTERM)
            time.sleep(1)
        except ProcessLookupError:
            pass
        pid_file.unlink()
        netns = netns.strip() or None
        if netns is None or Path(f"/run/netns/{netns}").exists():
            remove_rules(netns)
        stopped.append(pid_file.parent.name if pid_file.parent != STATE else "node 1")
    if stopped:
        print(f"[netpol] kube-router stopped on {', '.join(stopped)}, its rules and ipsets removed")
    return 0


# The chains and ipsets kube-router's policy controller makes (its --cleanup-config crashes in
# v2.1.0 before removing them, and the rules would go on filtering after the process ends).
_CHAINS = ("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-")
_SETS = ("KUBE-SRC-", "KUBE-DST-")


def remove_rules(netns: str | None) -> None:
    def run(*command: str, check: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(in_netns(netns, list(command)), check=check, capture_output=True, text=True)

    dump = run("iptables-save", "-t", "filter", check=True).stdout
    chains = [line[1:].split()[0] for line in dump.splitlines() if line.startswith(":") and line[1:].startswith(_CHAINS)]
    for line in dump.splitlines():   # jumps from the built-in chains first
        words = line.split()
        if line.startswith("-A ") and words[1] in ("INPUT", "FORWARD", "OUTPUT") and "-j" in words \
                and words[words.index("-j") + 1].startswith(_CHAINS):
            run("iptables", "-D", *shlex.split(line)[1:])
    for flag in ("-F", "-X"):
        for chain in chains:
            run("iptables", flag, chain)
    if not shutil.which("ipset"):
        return   # then kube-router could make none
    for name in run("ipset", "list", "-n").stdout.split():
        if name.startswith(_SETS):
            run("ipset", "destroy", name)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) == 2 else ""
    if command not in ("start", "stop"):
        print("usage: netpol_agent.py start|stop", file=sys.stderr)
        sys.exit(2)
    sys.exit(start() if command == "start" else stop())
