#!/usr/bin/env python3
"""`make e2e-nodes`: the federation across several nodes of the local cluster tool, with Delta on
an object store and whole nodes failing under load.

On a machine where `local-k8s install` has run and node 1 is up (`local-k8s up full`), as root:

1. adds WORKERS worker nodes (`local-k8s node add N`, each a network namespace with its own
   containerd, kubelet and kube-proxy) and imports the fedlab image into each;
2. keeps node 1 for the control plane and the clients: it is tainted as a control-plane node
   (`node-role.kubernetes.io/control-plane:NoSchedule`, what kubeadm sets) and labelled
   `fedlab.io/e2e-clients`, where only the load (ci/nodes-values.yaml) goes, out of every fault;
3. enforces NetworkPolicies on every node (helm/netpol_agent.py, one agent per node);
4. starts the S3 object store on the host bridge every node reaches (helm/object_store.py,
   SeaweedFS), with a bucket and a credentials Secret for the chart;
5. runs everything `make e2e-k8s` runs (helm/e2e_k8s.py: TLS, NetworkPolicies, the chaos Job,
   the upgrade and the 13 faults from the node, the checker after each load, a Prometheus that
   scrapes every pod throughout and is asked at the end), with the values of
   ci/nodes-values.yaml: sources on nodes of their own, Delta under s3a://, the run directory on a
   volume every node mounts; it prints the placement it got (`placement: POD NODE`) and fails if
   the chart's rules did not hold;
6. a third load under whole-node faults (NODE_NEMESIS): a crash, a partition and a drain of the
   warehouse's node and of a source's node, each the node nemesis's (nemesis.node), then
   the checker again: every view complete, nothing lost or doubled;
7. takes down what it made, also on failure: the release, the object store, the agents, node 1's
   taint and label, and the worker nodes.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE / "image"))

import e2e_cluster as cluster  # noqa: E402
import e2e_k8s  # noqa: E402
import fedlab_helm  # noqa: E402
import object_store  # noqa: E402
from build_local import IMAGE, local_k8s, tool_env  # noqa: E402
from e2e_cluster import E2EFailure, Kube, log  # noqa: E402

WORKERS = 4
NODES_VALUES = e2e_k8s.CHART / "ci" / "nodes-values.yaml"
CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane"
CLIENTS_LABEL = "fedlab.io/e2e-clients"
BRIDGE = "10.250.0.1"   # the host on the worker nodes' bridge (local-k8s node add), reached by every pod
STORE_PORT = 8333
BUCKET = "fedlab-e2e"
S3_SECRET = "fedlab-e2e-s3"
# The third load's faults, timed from its upgrade. A node is found by what runs on it when the
# clause begins: after the warehouse's node crashed, node:warehouse is where it went.
NODE_NEMESIS = ("crash node:warehouse at 10s; restart node:warehouse at 85s; crash node:s1 at 100s; "
                "restart node:s1 at 150s; partition node:warehouse at 170s for 15s; partition node:s2 at 200s for 15s; "
                "drain node:warehouse at 230s for 20s; drain node:s1 at 265s for 20s")
NODE_LOAD = "300s"
# `--recovery`: one fault of each kind that Kubernetes answers by restarting a pod, far enough
# apart that each recovers alone, for the time from the pod's start to the view moving again.
RECOVERY_NEMESIS = "kill warehouse at 15s; kill s1 at 90s; kill raylet:s2 at 165s; kill ray-head at 240s"
RECOVERY_LOAD = "330s"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="fedlab end-to-end run across several nodes of the local cluster")
    p.add_argument("--workers", type=int, default=WORKERS, help=f"worker nodes beside node 1 (default {WORKERS})")
    p.add_argument("--node-nemesis", default=NODE_NEMESIS, help="the whole-node faults of the third load")
    p.add_argument("--keep", action="store_true", help="leave the release, the nodes and the object store up")
    p.add_argument("--recovery", nargs="?", const=RECOVERY_NEMESIS, metavar="SCHEDULE",
                   help="instead of the three loads, one load under SCHEDULE (RECOVERY_NEMESIS by default): "
                        "how long each pod's restart takes to bring the view back to moving")
    args, rest = p.parse_known_args(argv)
    if os.geteuid() != 0:
        print("e2e-nodes: FAILED: it needs root (it adds nodes, network namespaces and iptables rules)")
        return 1
    tool = local_k8s()
    os.environ.update(tool_env(tool))
    os.environ["LOCAL_K8S"] = str(tool)
    kubectl, helm = fedlab_helm.ensure_kubectl(), fedlab_helm.ensure_helm()
    e2e_args = e2e_k8s.parse_args(rest + (["--keep"] if args.keep else []))
    kube = Kube(kubectl, e2e_args.namespace, dict(os.environ))
    if kube.run("get", "nodes", namespaced=False, check=False, quiet=True).returncode != 0:
        print("e2e-nodes: FAILED: no local cluster answers: run `local-k8s up full` first")
        return 1
    nodes = Nodes(tool, kube, args.workers)
    try:
        nodes.up()
        run = NodesRun(e2e_args, kube, helm, nodes, args.node_nemesis)
        if args.recovery:
            run.phases = lambda: run.recovery_phases(args.recovery)
        return run.run()
    except E2EFailure as failure:
        print(f"e2e-nodes: FAILED: {failure}", flush=True)
        return 1
    finally:
        if not args.keep:
            nodes.down()


class Nodes:
    """The worker nodes, node 1's part, the NetworkPolicy agents and the object store: made by
    `up`, taken down by `down` whatever `up` got to."""

    def __init__(self, tool: Path, kube: Kube, workers: int):
        self.tool, self.kube, self.workers = tool, kube, workers
        self.node1 = ""
        self.store = None
        self.figures: dict[str, str] = {}

    @property
    def names(self) -> list[str]:
        return [f"n{n}" for n in range(2, 2 + self.workers)]

    def up(self) -> None:
        self.node1 = self.kube.json("nodes", namespaced=False)["items"][0]["metadata"]["name"]
        archive = Path(os.environ["LOCAL_K8S_HOME"]) / "images" / "load" / (IMAGE.replace("/", "_").replace(":", "_") + ".tar")
        if not archive.is_file():
            raise E2EFailure(f"no image archive at {archive}: run `make image` first")
        self.tool_node("all-down")   # what an interrupted run left
        for name in self.names:
            began = time.monotonic()
            self.tool_node("add", name[1:], env={"LK8S_NODE_IMAGES": str(archive)})
            log(f"node {name} Ready with the image after {time.monotonic() - began:.0f} s")
        self.kube.run("taint", "node", self.node1, f"{CONTROL_PLANE_TAINT}=:NoSchedule", "--overwrite", namespaced=False)
        self.kube.run("label", "node", self.node1, f"{CLIENTS_LABEL}=true", "--overwrite", namespaced=False)
        log(f"node 1 ({self.node1}) keeps the control plane and the load: tainted {CONTROL_PLANE_TAINT}")
        agent = subprocess.run([sys.executable, str(HERE / "netpol_agent.py"), "start"], text=True, capture_output=True)
        print(agent.stdout + agent.stderr, end="", flush=True)
        if agent.returncode != 0:
            raise E2EFailure("the NetworkPolicy agents did not start")
        # Beside the cluster, as a cloud's object store is: the host, on the bridge every node reaches.
        self.access_key, self.secret_key = secrets.token_hex(8), secrets.token_hex(20)
        # Each run starts from an empty store, as from new nodes: what an interrupted run left goes.
        data = cluster.LOCAL_ROOT / "object-store"
        object_store.discard(data)
        try:
            self.store = object_store.start(data, self.access_key, self.secret_key,
                                            host=BRIDGE, port=STORE_PORT, bucket=BUCKET)
        except object_store.ObjectStoreError as err:
            raise E2EFailure(f"the object store did not start: {err}") from None
        self.figures["object store"] = (f"SeaweedFS S3 at {self.store.endpoint}, bucket {BUCKET}, "
                                        f"{self.store.rss_mb():.0f} MB resident at start")

    def memory(self) -> str:
        """Each worker node's resident memory (its daemons, shims and pods), from the tool."""
        shown = []
        for name in self.names:
            out = self.tool_node("rss", name[1:], check=False)
            total = next((line.split()[-2] for line in out.splitlines() if line.startswith("total")), "?")
            shown.append(f"{name} {total} MiB")
        return ", ".join(shown)

    def down(self) -> None:
        subprocess.run([sys.executable, str(HERE / "netpol_agent.py"), "stop"], capture_output=True)
        if self.store is not None:
            object_store.discard(self.store.data)
        if self.node1:
            self.kube.run("taint", "node", self.node1, f"{CONTROL_PLANE_TAINT}:NoSchedule-", namespaced=False,
                          check=False, quiet=True)
            self.kube.run("label", "node", self.node1, f"{CLIENTS_LABEL}-", namespaced=False, check=False, quiet=True)
        self.tool_node("all-down", check=False)
        log("worker nodes, agents and object store taken down")

    def tool_node(self, *args: str, env: dict | None = None, check: bool = True) -> str:
        proc = subprocess.run([str(self.tool), "node", *args], env={**os.environ, **(env or {})}, text=True,
                              capture_output=True, timeout=900)
        if check and proc.returncode != 0:
            raise E2EFailure(f"local-k8s node {' '.join(args)} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
        return proc.stdout


class NodesRun(e2e_k8s.Run):
    """The e2e's run over the worker nodes, with placement asserted and a load under node faults."""

    values_files = [e2e_k8s.VALUES, NODES_VALUES]

    def __init__(self, args, kube: Kube, helm: str, nodes: Nodes, node_nemesis: str):
        super().__init__(args, kube, helm)
        self.nodes, self.node_nemesis = nodes, node_nemesis

    def phases(self) -> None:
        self.install()
        self.figures["worker nodes"] = f"{len(self.nodes.names)}: {self.nodes.memory()}"
        self.figures.update(self.nodes.figures)
        self.check_placement("after the install")
        self.check_promises()
        first = self.helm_test("after the install")
        nemesis, window = self.load_under(self.args.nemesis, ["--set", f"load.rate={self.args.upgrade_rate:g}"])
        second = self.helm_test("after the upgrade")
        self.report_faults(nemesis, window)
        # A longer load, the chaos Job's spec as it was (a Job's template cannot change).
        nemesis, window = self.load_under(self.node_nemesis, ["--set", f"load.duration={NODE_LOAD}", "--set",
                                                              f"chaos.duration={self.values['load']['duration']}"])
        third = self.helm_test("after the node faults")
        self.report_faults(nemesis, window)
        self.check_placement("after the node faults", assert_rules=False)
        if not first["transactions"] < second["transactions"] < third["transactions"]:
            raise E2EFailure(f"a load committed nothing: {first['transactions']}, {second['transactions']}, "
                             f"{third['transactions']} transactions after each")

    def recovery_phases(self, schedule: str) -> None:
        self.install()
        self.check_placement("after the install")
        self.helm_test("after the install")
        nemesis, window = self.load_under(schedule, ["--set", f"load.duration={RECOVERY_LOAD}", "--set",
                                                             f"chaos.duration={self.values['load']['duration']}"])
        self.helm_test("after the pods' restarts")
        self.report_faults(nemesis, window)

    def on_this_machine(self) -> bool:
        return True   # the nodes are this run's own

    def storage_values(self) -> list[str]:
        """The sources' databases on node-local volumes, the warehouse's run directory on one every
        node mounts, its Delta tables in the object store under a prefix of this namespace's."""
        sources = len(self.values["sources"])
        cluster.provide_node_volumes(self.kube, self.nodes.names, sources, self.kube.namespace)
        cluster.provide_shared_volume(self.kube, f"data-{self.fullname}-warehouse-0", self.kube.namespace)
        self.local_volumes = True
        self.kube.run("delete", "secret", S3_SECRET, "--ignore-not-found", check=False, quiet=True)
        self.kube.run("create", "secret", "generic", S3_SECRET, f"--from-literal=AWS_ACCESS_KEY_ID={self.nodes.access_key}",
                      f"--from-literal=AWS_SECRET_ACCESS_KEY={self.nodes.secret_key}", quiet=True)
        uri = f"s3a://{BUCKET}/{self.kube.namespace}/{secrets.token_hex(4)}"
        log(f"volumes: {sources} node-local on each worker for the sources, one on every node for the run "
            f"directory; Delta under {uri} ({self.nodes.store.endpoint})")
        self.figures["Delta"] = f"{uri} on {self.nodes.store.endpoint}"
        return ["--set", f"sourceDefaults.storage.storageClassName={cluster.LOCAL_CLASS}",
                "--set", f"warehouse.storage.storageClassName={cluster.SHARED_CLASS}",
                "--set", "warehouse.storage.type=objectStore", "--set", f"warehouse.storage.uri={uri}",
                "--set", f"warehouse.storage.credentialsSecret={S3_SECRET}",
                "--set", f"warehouse.storage.s3a.endpoint={self.nodes.store.endpoint}"]

    def uninstall(self) -> None:
        super().uninstall()
        self.kube.run("delete", "secret", S3_SECRET, "--ignore-not-found", check=False)

    def check_placement(self, when: str, assert_rules: bool = True) -> None:
        """Prints where every pod of the release runs (`placement: POD NODE`) and fails if the
        chart's placement rules did not hold: sources on distinct nodes, the Ray head on none of
        theirs, executors on no warehouse's node, nothing but the load on node 1."""
        deadline = time.monotonic() + 180   # executors start after their driver
        while True:
            pods = self._placed()
            executors = [p for p in pods if p[1] == "spark-executor"]
            if len(executors) >= self._executors() or time.monotonic() > deadline:
                break
            time.sleep(3)
        log(f"placement {when}:")
        for name, _, node in pods:
            print(f"placement: {name} {node}", flush=True)
        self.figures[f"placement {when}"] = ", ".join(f"{name} {node}" for name, _, node in pods)
        if not assert_rules:
            return
        on = {component: [node for _, c, node in pods if c == component] for _, component, _ in pods}
        sources = on.get("source", [])
        if len(sources) != len(self.values["sources"]) or len(set(sources)) != len(sources):
            raise E2EFailure(f"placement: the sources share a node or are not all running: {sources}")
        if set(on.get("ray-head", [])) & set(sources) or not on.get("ray-head"):
            raise E2EFailure(f"placement: the Ray head is on a source's node ({on.get('ray-head')} among {sources})")
        if len(on.get("spark-executor", [])) < self._executors():
            raise E2EFailure(f"placement: {len(on.get('spark-executor', []))} executors running, want {self._executors()}")
        if set(on["spark-executor"]) & set(on.get("warehouse", [])):
            raise E2EFailure(f"placement: an executor runs on a warehouse's node ({on['spark-executor']} among "
                             f"{on.get('warehouse')})")
        misplaced = [name for name, component, node in pods if node == self.nodes.node1 and component != "load"]
        if misplaced:
            raise E2EFailure(f"placement: {', '.join(misplaced)} on node 1, which keeps the control plane")

    def _placed(self) -> list[tuple[str, str, str]]:
        items = self.kube.json("pods", "-l", f"app.kubernetes.io/instance={self.args.release}")["items"]
        return sorted((p["metadata"]["name"], p["metadata"]["labels"].get("app.kubernetes.io/component", ""),
                       p["spec"].get("nodeName", "")) for p in items if p["status"].get("phase") == "Running")

    def _executors(self) -> int:
        per = self.values["warehouse"]["spark"]["executor"]["instances"]
        return per * (1 + len(self.values.get("warehouses", [])))


if __name__ == "__main__":
    sys.exit(main())
