#!/usr/bin/env python3
"""NetworkPolicy enforcement on the local cluster tool's node, whose CNI bridge enforces none, so
that `make e2e-k8s` tests the chart's NetworkPolicies for real.

    python helm/netpol_agent.py start    # once the cluster is up (eval "$(local-k8s env)")
    python helm/netpol_agent.py stop     # before `local-k8s down`

The enforcer is kube-router's network policy controller (`--run-firewall` only: no routing, no
service proxy), iptables and ipset on the host, run as a host process beside the kubelet with the
cluster's kubeconfig. It is built once from the Go module proxy, which serves v2.1.0 only here
(security flaws are reported against that version: it runs for the test's lifetime only, on a
throwaway single-node cluster with no egress). The Kubernetes SIG's kube-network-policies was
tried first: it needs nftables' queue expression, which this machine's kernel lacks.
`stop` ends the process and removes its iptables chains and ipsets.
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
    node = subprocess.run(["kubectl", "get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"],
                          check=True, capture_output=True, text=True).stdout.strip()
    STATE.mkdir(parents=True, exist_ok=True)
    log = open(STATE / "kube-router.log", "w")
    proc = subprocess.Popen([str(binary()), f"--kubeconfig={kubeconfig}", f"--hostname-override={node}",
                             "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
                             "--metrics-port=0", "--v=1"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (STATE / "pid").write_text(str(proc.pid))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:   # its chain in FORWARD means the policies are being applied
        if proc.poll() is not None:
            print(f"netpol: kube-router exited ({proc.returncode}); see {STATE / 'kube-router.log'}", file=sys.stderr)
            return 1
        rules = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
        if "KUBE-ROUTER-FORWARD" in rules:
            print(f"[netpol] kube-router {VERSION} enforcing NetworkPolicies on node {node} (pid {proc.pid})")
            return 0
        time.sleep(1)
    print(f"netpol: kube-router did not set up its chains within 60 s; see {STATE / 'kube-router.log'}", file=sys.stderr)
    return 1


def stop() -> int:
    pid_file = STATE / "pid"
    if not pid_file.is_file():
        return 0
    try:
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
        time.sleep(2)
    except ProcessLookupError:
        pass
    pid_file.unlink()
    remove_rules()
    print("[netpol] kube-router stopped, its rules and ipsets removed")
    return 0


# The chains and ipsets kube-router's policy controller makes (its --cleanup-config crashes in
# v2.1.0 before removing them, and the rules would go on filtering after the process ends).
_CHAINS = ("KUBE-ROUTER-", "KUBE-NWPLCY-", "KUBE-POD-FW-")
_SETS = ("KUBE-SRC-", "KUBE-DST-")


def remove_rules() -> None:
    dump = subprocess.run(["iptables-save", "-t", "filter"], check=True, capture_output=True, text=True).stdout
    chains = [line[1:].split()[0] for line in dump.splitlines() if line.startswith(":") and line[1:].startswith(_CHAINS)]
    for line in dump.splitlines():   # jumps from the built-in chains first
        words = line.split()
        if line.startswith("-A ") and words[1] in ("INPUT", "FORWARD", "OUTPUT") and "-j" in words \
                and words[words.index("-j") + 1].startswith(_CHAINS):
            subprocess.run(["iptables", "-D", *shlex.split(line)[1:]], capture_output=True)
    for flag in ("-F", "-X"):
        for chain in chains:
            subprocess.run(["iptables", flag, chain], capture_output=True)
    if not shutil.which("ipset"):
        return   # then kube-router could make none
    sets = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True).stdout.split()
    for name in sets:
        if name.startswith(_SETS):
            subprocess.run(["ipset", "destroy", name], capture_output=True)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) == 2 else ""
    if command not in ("start", "stop"):
        print("usage: netpol_agent.py start|stop", file=sys.stderr)
        sys.exit(2)
    sys.exit(start() if command == "start" else stop())
