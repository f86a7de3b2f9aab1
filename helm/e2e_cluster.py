"""What `make e2e-k8s` (helm/e2e_k8s.py) asks of the cluster, through kubectl.

- `Kube`: kubectl in one namespace, with the calls the run needs (JSON reads, exec, logs, wait).
- Volumes for a cluster without a provisioner (the local one): a StorageClass with no provisioner
  and one `local` PersistentVolume per claim the chart will make, each pre-bound to its claim, on a
  host directory owned by the image's user (10001) so the non-root pods can write.
- The API server's CA for pods that call the API, where the namespace's kube-root-ca.crt is empty.
- The TLS Secret for `tls.enabled=true`: a throwaway CA and one certificate naming every Service
  of the release (roles.certs).
- Probes of what the chart promises: each pod runs as a non-root user on a read-only root
  filesystem; the chaos ServiceAccount may delete pods in its namespace and nothing else; a pod
  without the load generator's labels cannot reach a source's gRPC port, while one with them can.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import yaml

IMAGE_UID = 10001
LOCAL_CLASS = "fedlab-e2e-local"
SHARED_CLASS = "fedlab-e2e-shared"
LOCAL_ROOT = Path("/var/lib/fedlab-e2e")


class E2EFailure(Exception):
    """A promise of the chart that the cluster showed broken: one line saying which."""


class Kube:
    def __init__(self, kubectl: str, namespace: str, env: dict):
        self.kubectl, self.namespace, self.env = kubectl, namespace, env

    def run(self, *args: str, namespaced: bool = True, check: bool = True, timeout: float = 120,
            stdin: str | None = None, quiet: bool = False) -> subprocess.CompletedProcess:
        cmd = [self.kubectl, *(["-n", self.namespace] if namespaced else []), *args]
        if not quiet:
            print("+ kubectl", " ".join(cmd[1:]), flush=True)
        proc = subprocess.run(cmd, env=self.env, text=True, capture_output=True, timeout=timeout, input=stdin)
        if check and proc.returncode != 0:
            raise E2EFailure(f"kubectl {' '.join(args[:3])} failed: {(proc.stderr or proc.stdout).strip()[:400]}")
        return proc

    def json(self, *args: str, namespaced: bool = True) -> dict:
        return json.loads(self.run("get", *args, "-o", "json", namespaced=namespaced, quiet=True).stdout)

    def apply(self, manifest: dict | list, namespaced: bool = True) -> None:
        docs = manifest if isinstance(manifest, list) else [manifest]
        self.run("apply", "-f", "-", namespaced=namespaced, stdin=yaml.safe_dump_all(docs))

    def exec(self, pod: str, *command: str, container: str | None = None) -> subprocess.CompletedProcess:
        return self.run("exec", pod, *(["-c", container] if container else []), "--", *command, check=False,
                        timeout=60, quiet=True)

    def logs(self, target: str, previous: bool = False) -> str:
        return self.run("logs", target, *(["--previous"] if previous else []), check=False, timeout=60,
                        quiet=True).stdout


def wait_job(kube: Kube, name: str, timeout: float) -> str:
    """Waits until Job `name` succeeds and returns its log; E2EFailure with the log's end when it
    fails or is still running after `timeout` seconds. (helm's --wait-for-jobs can return while
    a Job still runs: Helm 4's status watcher.)"""
    deadline = time.monotonic() + timeout
    while True:
        status = kube.json("job", name).get("status", {})
        if status.get("succeeded"):
            return kube.logs(f"job/{name}")
        if status.get("failed") or time.monotonic() > deadline:
            tail = "\n".join(kube.logs(f"job/{name}").splitlines()[-15:])
            state = "failed" if status.get("failed") else f"still running after {timeout:g} s"
            raise E2EFailure(f"Job {name} {state}; its log ends:\n{tail}")
        time.sleep(5)


class PodStarts:
    """Every container (re)start of the pods a selector picks while it watches, as (wall-clock
    time, pod name), from one `kubectl get pods --watch`: when Kubernetes restarted what a fault
    took, so that a recovery is timed from it (nemesis.effects.recovery)."""

    def __init__(self, kube: Kube, selector: str):
        self.kube, self.selector = kube, selector
        self.starts: list[tuple[float, str]] = []
        self._seen: set[tuple[str, str, int]] = set()   # (pod uid, container, restart count)

    def __enter__(self) -> PodStarts:
        self._proc = subprocess.Popen([self.kube.kubectl, "-n", self.kube.namespace, "get", "pods", "-l", self.selector,
                                       "--watch", "-o", "json"], env=self.kube.env, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._read, name="pod-starts", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._proc.terminate()
        self._thread.join(10)

    def _read(self) -> None:
        decoder, buffer = json.JSONDecoder(), ""
        for line in self._proc.stdout:
            buffer += line
            try:
                pod, end = decoder.raw_decode(buffer.lstrip())
            except json.JSONDecodeError:
                continue
            buffer = buffer.lstrip()[end:]
            for status in pod.get("status", {}).get("containerStatuses", []):
                started = status.get("state", {}).get("running", {}).get("startedAt")
                key = (pod["metadata"]["uid"], status["name"], status.get("restartCount", 0))
                if started and key not in self._seen:
                    self._seen.add(key)
                    self.starts.append((_epoch(started), pod["metadata"]["name"]))


def _epoch(stamp: str) -> float:
    """An RFC 3339 time of the API (2026-12-06T05:30:22Z) in seconds since the epoch."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def wait_log_line(kube: Kube, target: str, text: str, timeout: float) -> None:
    """Waits until `target`'s log (a pod, or job/NAME) has a line containing `text`; E2EFailure
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while text not in kube.logs(target):
        if time.monotonic() > deadline:
            raise E2EFailure(f"{target} did not log {text!r} within {timeout:g} s")
        time.sleep(1)


def current_context(kubectl: str, env: dict) -> str | None:
    proc = subprocess.run([kubectl, "config", "current-context"], env=env, text=True, capture_output=True)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


# ---- volumes for a cluster without a provisioner ----

def has_default_storage_class(kube: Kube) -> bool:
    classes = kube.json("storageclass", namespaced=False)["items"]
    return any(c["metadata"].get("annotations", {}).get("storageclass.kubernetes.io/is-default-class") == "true"
               for c in classes)


def local_node(kube: Kube) -> str | None:
    """The cluster's node if it is this machine (one node whose InternalIP is one of ours)."""
    nodes = kube.json("nodes", namespaced=False)["items"]
    if len(nodes) != 1:
        return None
    addresses = {a["address"] for a in nodes[0]["status"].get("addresses", []) if a["type"] == "InternalIP"}
    ours = set(subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split())
    return nodes[0]["metadata"]["name"] if addresses & ours else None


def provide_local_volumes(kube: Kube, node: str, claims: list[str], run_id: str) -> None:
    """One pre-bound `local` PersistentVolume per claim, on LOCAL_ROOT/<run id>/<claim>."""
    _local_class(kube)
    for claim in claims:
        pv = _pv(kube, _pv_name(kube, claim), run_id, ["ReadWriteOnce"], LOCAL_CLASS,
                 {"local": {"path": str(_volume_folder(run_id, claim))},
                  "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                      {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}})
        pv["spec"]["claimRef"] = {"namespace": kube.namespace, "name": claim}
        kube.apply(pv, namespaced=False)


def provide_node_volumes(kube: Kube, nodes: list[str], per_node: int, run_id: str) -> None:
    """`per_node` unbound `local` PersistentVolumes on each of `nodes` (class LOCAL_CLASS, which binds
    a claim when its pod is scheduled): a source's claim lands on the node its pod's scheduling
    chose, anti-affinity included, and keeps the pod there from then on, as a node's own disk
    does."""
    _local_class(kube)
    for node in nodes:
        for i in range(per_node):
            name = f"{node}-{i}"
            path = _volume_folder(run_id, name)
            kube.apply(_pv(kube, f"{kube.namespace}-{name}", run_id, ["ReadWriteOnce"], LOCAL_CLASS,
                           {"local": {"path": str(path)},
                            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}),
                       namespaced=False)


def provide_shared_volume(kube: Kube, claim: str, run_id: str) -> None:
    """A ReadWriteMany volume for `claim` that a pod mounts on any node: a hostPath folder, which
    every node of the local cluster tool sees, since they all share the host's filesystem. It
    stands in for a network filesystem (NFS, EFS), so that a pod that keeps its files there (the
    warehouse's run directory) can start again on another node."""
    kube.apply({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": SHARED_CLASS},
                "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate",
                "reclaimPolicy": "Retain"}, namespaced=False)
    path = _volume_folder(run_id, claim)
    pv = _pv(kube, _pv_name(kube, claim), run_id, ["ReadWriteMany"], SHARED_CLASS,
             {"hostPath": {"path": str(path), "type": "Directory"}})
    pv["spec"]["claimRef"] = {"namespace": kube.namespace, "name": claim}
    kube.apply(pv, namespaced=False)


def _local_class(kube: Kube) -> None:
    kube.apply({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": LOCAL_CLASS},
                "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer",
                "reclaimPolicy": "Retain"}, namespaced=False)


def _volume_folder(run_id: str, name: str) -> Path:
    path = LOCAL_ROOT / run_id / name
    path.mkdir(parents=True, exist_ok=True)
    shutil.chown(path, IMAGE_UID, IMAGE_UID)
    return path


def _pv(kube: Kube, name: str, run_id: str, modes: list[str], storage_class: str, source: dict) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name[:63].rstrip("-"), "labels": {"fedlab.io/e2e": run_id}},
            "spec": {"capacity": {"storage": "20Gi"}, "accessModes": modes, "persistentVolumeReclaimPolicy": "Retain",
                     "storageClassName": storage_class, **source}}


def remove_local_volumes(kube: Kube, run_id: str) -> None:
    kube.run("delete", "pv", "-l", f"fedlab.io/e2e={run_id}", "--ignore-not-found", "--wait=false",
             namespaced=False, check=False)
    shutil.rmtree(LOCAL_ROOT / run_id, ignore_errors=True)


def _pv_name(kube: Kube, claim: str) -> str:
    return f"{kube.namespace}-{claim}"[:63].rstrip("-")


def refuses_watch_list(kube: Kube) -> bool:
    """Whether the API server refuses a watch-list request (sendInitialEvents), as one whose etcd
    sends no watch progress notifications does."""
    proc = kube.run("get", "--raw", "/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=true"
                    "&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=1",
                    namespaced=False, check=False, quiet=True)
    return "RequestWatchProgress is disabled" in proc.stdout + proc.stderr


# ---- the API server's CA, for pods that call the API ----

def publish_api_ca(kube: Kube, name: str, folder: Path, always: bool = False) -> bool:
    """Puts the API server's CA into ConfigMap `name` (key ca.crt) when the namespace's
    kube-root-ca.crt is empty (the local cluster tool's controller-manager publishes none), and
    returns True; with `always`, also copies a non-empty kube-root-ca.crt there. The CA is the
    kubeconfig's; a kubeconfig that skips verification has none, and then the certificates the
    API server presents are taken."""
    for _ in range(30):   # the publisher fills a new namespace's ConfigMap within moments
        found = kube.run("get", "configmap", "kube-root-ca.crt", "-o", "json", check=False, quiet=True)
        if found.returncode == 0:
            break
        time.sleep(1)
    published = json.loads(found.stdout).get("data", {}).get("ca.crt", "") if found.returncode == 0 else ""
    if published.strip() and not always:
        return False
    folder.mkdir(parents=True, exist_ok=True)
    ca = folder / "kube-api-ca.crt"
    view = json.loads(kube.run("config", "view", "--raw", "--minify", "-o", "json", namespaced=False, quiet=True).stdout)
    server = view["clusters"][0]["cluster"]
    if published.strip():
        ca.write_text(published)
    elif server.get("certificate-authority-data"):
        ca.write_bytes(base64.b64decode(server["certificate-authority-data"]))
    elif server.get("certificate-authority"):
        shutil.copy(server["certificate-authority"], ca)
    else:
        ca.write_text(_presented_chain(server["server"]))
    kube.run("delete", "configmap", name, "--ignore-not-found", check=False, quiet=True)
    kube.run("create", "configmap", name, f"--from-file=ca.crt={ca}")
    return not published.strip()


def _presented_chain(url: str) -> str:
    """The PEM certificates a TLS server presents (openssl s_client -showcerts)."""
    address = urllib.parse.urlsplit(url)
    proc = subprocess.run(["openssl", "s_client", "-showcerts", "-connect", f"{address.hostname}:{address.port or 443}"],
                          input="", capture_output=True, text=True, timeout=30)
    chain = re.findall(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", proc.stdout, re.DOTALL)
    if not chain:
        raise E2EFailure(f"could not read the API server's certificates from {url}")
    return "\n".join(chain) + "\n"


# ---- TLS ----

def create_tls_secret(kube: Kube, name: str, hosts: list[str], folder: Path) -> None:
    from fedlab.roles.certs import write_certificates

    write_certificates(folder, hosts)
    kube.run("create", "secret", "generic", name, *(f"--from-file={folder / f}" for f in ("ca.crt", "tls.crt", "tls.key")))


# ---- what the chart promises ----

def check_pod_security(kube: Kube, release: str) -> list[str]:
    """Every running container of the release runs as IMAGE_UID and cannot write its root filesystem."""
    seen = []
    for pod in kube.json("pods", "-l", f"app.kubernetes.io/instance={release}")["items"]:
        if pod["status"].get("phase") != "Running":
            continue
        name = pod["metadata"]["name"]
        for container in pod["spec"]["containers"]:
            probe = kube.exec(name, "sh", "-c", "id -u; touch /fedlab-probe 2>/dev/null && echo writable || echo read-only",
                              container=container["name"])
            uid, _, root_fs = probe.stdout.strip().partition("\n")
            if probe.returncode != 0 or uid != str(IMAGE_UID) or root_fs != "read-only":
                raise E2EFailure(f"pod {name}/{container['name']}: uid {uid or '?'}, root filesystem {root_fs or '?'} "
                                 f"(want uid {IMAGE_UID}, read-only){' ' + probe.stderr.strip() if probe.returncode else ''}")
            seen.append(f"{name}/{container['name']}")
    if not seen:
        raise E2EFailure("no running pod of the release to probe")
    return seen


def check_chaos_rbac(kube: Kube, service_account: str) -> list[str]:
    """The chaos ServiceAccount can delete pods in its namespace and nothing else asked here."""
    user = f"system:serviceaccount:{kube.namespace}:{service_account}"
    expectations = [(("delete", "pods"), kube.namespace, True),
                    (("delete", "pods"), "default", False),
                    (("delete", "pods"), "kube-system", False),
                    (("delete", "statefulsets.apps"), kube.namespace, False),
                    (("delete", "persistentvolumeclaims"), kube.namespace, False),
                    (("create", "pods"), kube.namespace, False),
                    (("list", "secrets"), kube.namespace, False),
                    (("delete", "nodes"), None, False)]
    report = []
    for (verb, resource), namespace, allowed in expectations:
        where = ["-n", namespace] if namespace else []
        proc = kube.run("auth", "can-i", verb, resource, "--as", user, *where, namespaced=False, check=False, quiet=True)
        answer = proc.stdout.strip() == "yes"
        if answer != allowed:
            raise E2EFailure(f"RBAC: {service_account} {'may' if answer else 'may not'} {verb} {resource}"
                             f"{' in ' + namespace if namespace else ''}")
        report.append(f"{verb} {resource}{' in ' + namespace if namespace else ''}: {'yes' if answer else 'no'}")
    return report


def check_network_policy(kube: Kube, image: str, pull_policy: str, target: str, allowed_labels: dict) -> str:
    """A pod with `allowed_labels` reaches `target` (host:port); the same pod without them does not."""
    # The allowed pod tries for up to half a minute: the policy agent lets a new pod in only once
    # it has seen it. The other is refused either way, before or after the agent has seen it.
    reached_with = _probe_connect(kube, "fedlab-e2e-probe-labelled", image, pull_policy, target, allowed_labels, 30)
    reached_without = _probe_connect(kube, "fedlab-e2e-probe-plain", image, pull_policy, target,
                                     {"fedlab.io/e2e-probe": "plain"}, 3)
    if not reached_with:
        raise E2EFailure(f"NetworkPolicy: a pod labelled as the load generator cannot reach {target}")
    if reached_without:
        raise E2EFailure(f"NetworkPolicy: a pod without the release's labels reached {target} "
                         "(is NetworkPolicy enforced by this cluster's network plugin?)")
    return f"{target}: reached with the load generator's labels, refused without them"


_CONNECT = """
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
for attempt in range(int(sys.argv[2])):
    try:
        socket.create_connection((host, int(port)), timeout=4).close()
        print("connected"); sys.exit(0)
    except OSError as err:
        last = err
        time.sleep(1)
print(f"refused: {last}")
"""


def _probe_connect(kube: Kube, name: str, image: str, pull_policy: str, target: str, labels: dict,
                   attempts: int) -> bool:
    kube.run("delete", "pod", name, "--ignore-not-found", "--wait=true", check=False, quiet=True)
    security = {"runAsNonRoot": True, "runAsUser": IMAGE_UID, "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"}}
    kube.apply({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": kube.namespace, "labels": labels},
                "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                         "containers": [{"name": "probe", "image": image, "imagePullPolicy": pull_policy,
                                         "command": ["python3", "-c", _CONNECT, target, str(attempts)],
                                         "securityContext": security,
                                         "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}}}]}})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        phase = kube.json("pod", name)["status"].get("phase")
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(2)
    out = kube.logs(name).strip()
    kube.run("delete", "pod", name, "--ignore-not-found", "--wait=false", check=False, quiet=True)
    print(f"  probe {name} -> {target}: {out or 'no output'}", flush=True)
    return out.startswith("connected")


def log(message: str) -> None:
    print(f"e2e: {message}", flush=True, file=sys.stdout)
