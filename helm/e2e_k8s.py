#!/usr/bin/env python3
"""End-to-end run on the cluster of the current kube context (`make e2e-k8s`).

1. Installs helm/federation with ci/e2e-values.yaml (two sources, two warehouses keeping a view
   each, a 90 s load, chaos deleting source pods and both warehouse pods and injecting message
   faults) and mutual TLS on, with
   `--wait`, then waits for the load Job and the chaos Job to succeed.
2. Checks what the chart promises on the running release (helm/e2e_cluster.py): non-root and
   read-only root filesystems in every pod, the chaos ServiceAccount's rights, the NetworkPolicies
   (a probe pod without the right labels cannot reach a source), and that each warehouse pod
   chaos deleted came back from its Delta tables.
3. `helm test`: the checker over the sources' History RPC; its verdict must be complete with
   nothing lost or doubled. Prints the run's figures.
4. `helm upgrade` with another load rate: a second load Job at that rate against the same
   federation (Run.load_under), while the nemesis applies NEMESIS from this node (nemesis.node:
   partitions both ways, one way and of a source from everything, pauses of a source, the
   warehouse and the Ray head, a wall clock set ahead and jumped back, kills of the executors, a
   raylet, the Ray head with a source, and the warehouse); `helm test` again must find the view
   complete over both loads. The nemesis needs root on the cluster's only node (the local
   cluster tool's, as CI runs it); elsewhere the run says it was not applied.
5. Through a Prometheus on this machine that scraped every pod of the release from before the
   install (helm/e2e_prometheus.py): every pod alive is a target and up, every documented series
   exists, the counts agree with the last checker's verdict and the load Jobs' logs, every
   dashboard query and alert rule runs, and promtool passes each pod's page. On a cluster that is
   not this machine, whose pods it does not reach, this is not checked.
6. `helm uninstall`, and the release's claims and (local) volumes deleted, also on failure.

The image must be where the cluster finds it: `make image` on the local cluster tool, or build
the Dockerfile and push it, then --image REPO:TAG. On a cluster without a default StorageClass
whose only node is this machine (the local cluster tool), the run makes its own `local`
PersistentVolumes. With no kube context at all it prints "skipped: no cluster" and exits 0; a
context whose API server does not answer is a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import e2e_cluster as cluster  # noqa: E402
import e2e_prometheus  # noqa: E402
import fedlab_helm  # noqa: E402
import yaml  # noqa: E402
from e2e_cluster import E2EFailure, Kube, log  # noqa: E402

CHART = HERE / "federation"
VALUES = CHART / "ci" / "e2e-values.yaml"
NO_WATCH_LIST = CHART / "ci" / "no-watch-list-values.yaml"
# Applied from the node during the upgrade's load (90 s), timed from the upgrade's end: every
# fault kind, and kills one at a time and together.
NEMESIS = ("partition warehouse|s1 at 8s for 10s; partition load->s2 at 10s for 6s; pause s2 at 20s for 8s; "
           "clock s1 +300s at 22s; pause warehouse at 32s for 6s; pause ray-head at 34s for 5s; "
           "kill executors at 42s; clock s1 -120s at 46s; kill raylet:s2 at 50s; kill ray-head at 58s; "
           "kill s1 at 58s; partition s2|everything at 64s for 5s; kill warehouse at 72s")
PROMETHEUS_LOG = HERE.parent / "runs" / "e2e-k8s" / "prometheus.log"
TLS_SECRET = "fedlab-e2e-tls"
API_CA = "fedlab-e2e-kube-api-ca"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="fedlab end-to-end run on Kubernetes")
    p.add_argument("--image", default=os.environ.get("FEDLAB_IMAGE", "localhost/fedlab:0.1.0"),
                   help="REPO:TAG of the image (default: the one `make image` builds)")
    p.add_argument("--pull-policy", help="the pods' imagePullPolicy (default: Never for a localhost/ image, "
                                        "which no registry serves; IfNotPresent otherwise)")
    p.add_argument("--namespace", default="fedlab-e2e")
    p.add_argument("--release", default="e2e")
    p.add_argument("--values", action="append", default=[], help="extra values files")
    p.add_argument("--upgrade-rate", type=float, default=20.0, help="load rate of the helm upgrade's second load")
    p.add_argument("--nemesis", default=NEMESIS, help="the schedule applied from the node during the upgrade's "
                                                      "load ('' for none)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds for the install and the run")
    p.add_argument("--keep", action="store_true", help="leave the release installed")
    p.add_argument("--no-network-policy-check", action="store_true",
                   help="do not probe the NetworkPolicies (for a cluster whose network plugin enforces none)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    kubectl, helm = fedlab_helm.ensure_kubectl(), fedlab_helm.ensure_helm()
    env = dict(os.environ)
    context = cluster.current_context(kubectl, env)
    if context is None:
        print("skipped: no cluster (no current kube context)")
        return 0
    kube = Kube(kubectl, args.namespace, env)
    version = kube.run("version", "-o", "yaml", namespaced=False, check=False, timeout=20, quiet=True)
    if version.returncode != 0:
        print(f"e2e: FAILED: the kube context {context!r} does not answer: {version.stderr.strip()[:200]}")
        return 1
    server = yaml.safe_load(version.stdout).get("serverVersion", {}).get("gitVersion", "?")
    log(f"cluster {context!r} (Kubernetes {server})")
    try:
        return Run(args, kube, helm).run()
    except E2EFailure as failure:
        print(f"e2e: FAILED: {failure}", flush=True)
        return 1


class Run:
    """The run's steps on one release; helm/e2e_nodes.py extends it across several nodes."""

    values_files = [VALUES]

    def __init__(self, args, kube: Kube, helm: str):
        self.args, self.kube, self.helm = args, kube, helm
        self.values = yaml.safe_load(VALUES.read_text())
        fullname = args.release if "fedlab" in args.release else f"{args.release}-fedlab"
        self.fullname = fullname[:26].rstrip("-")
        self.local_volumes = False
        self.pull_policy = args.pull_policy or ("Never" if args.image.startswith("localhost/") else "IfNotPresent")
        self.started = time.monotonic()
        self.figures: dict[str, str] = {}
        self.revision = 0                   # the release's Helm revision: its load Job is load-<revision>
        self.starts: list[tuple[float, str]] = []   # (time, pod) of each restart over the last load
        self.verdicts: dict[str, dict] = {}          # the last checker's figures, by view (checker_reports)
        self.load_logs: dict[str, str] = {}          # each load Job's log, by the Job's name
        self.prometheus: e2e_prometheus.Prometheus | None = None

    def run(self) -> int:
        with tempfile.TemporaryDirectory(prefix="fedlab-e2e-") as home:
            self.home = Path(home)
            self.helm_env = fedlab_helm.helm_env(self.home / "helm")
            try:
                self.start_prometheus()
                self.phases()
                self.check_metrics()
                self.report()
                return 0
            except BaseException:
                self.post_mortem()
                raise
            finally:
                if self.prometheus is not None:
                    self.prometheus.stop()
                if not self.args.keep:
                    self.uninstall()

    def phases(self) -> None:
        self.install()
        self.check_promises()
        first = self.helm_test("after the install")
        nemesis, window = self.load_under(self.args.nemesis, ["--set", f"load.rate={self.args.upgrade_rate:g}"])
        second = self.helm_test("after the upgrade")
        self.report_faults(nemesis, window)
        if second["transactions"] <= first["transactions"]:
            raise E2EFailure(f"the upgrade's load committed nothing: {second['transactions']} transactions "
                             f"after it, {first['transactions']} before")

    # ---- steps ----

    def install(self) -> None:
        self.kube.run("create", "namespace", self.kube.namespace, namespaced=False, check=False)
        extra = self.storage_values() + self.tls_values() + self.api_ca_values() + self.watch_values()
        started = time.monotonic()
        self.helm_cmd("upgrade", "--install", *self.chart_args(extra),
                      timeout=self.args.timeout)
        self.revision = 1
        log(f"installed and ready after {time.monotonic() - started:.0f} s")
        self.figures["install until ready"] = f"{time.monotonic() - started:.0f} s"
        self.wait_load(f"{self.fullname}-load-1")
        print(cluster.wait_job(self.kube, f"{self.fullname}-chaos", self.args.timeout), flush=True)
        self.figures["install until the load's end"] = f"{time.monotonic() - started:.0f} s"
        log(f"the load and chaos Jobs finished {time.monotonic() - started:.0f} s after the install began")

    def wait_load(self, job: str) -> None:
        self.load_logs[job] = cluster.wait_job(self.kube, job, self.args.timeout)
        print(self.load_logs[job], flush=True)

    def chart_args(self, extra: list[str]) -> list[str]:
        repo, _, tag = self.args.image.rpartition(":")
        if not repo or "/" in tag:
            repo, tag = self.args.image, "latest"
        values = [a for f in [*self.values_files, *self.args.values] for a in ("-f", str(f))]
        return [self.args.release, str(CHART), "--namespace", self.kube.namespace, *values,
                "--set", f"image.repository={repo}", "--set", f"image.tag={tag}",
                "--set", f"image.pullPolicy={self.pull_policy}", *extra,
                "--wait", "--timeout", f"{self.args.timeout}s"]

    def storage_values(self) -> list[str]:
        if cluster.has_default_storage_class(self.kube):
            return []
        node = cluster.local_node(self.kube)
        if node is None:
            raise E2EFailure("the cluster has no default StorageClass and is not this machine: give one "
                             "(--values with sourceDefaults.storage.storageClassName and warehouse.storage.storageClassName)")
        claims = [f"data-{self.fullname}-src-{s['name']}-0" for s in self.values["sources"]]
        claims.append(f"data-{self.fullname}-warehouse-0")
        cluster.provide_local_volumes(self.kube, node, claims, self.kube.namespace)
        self.local_volumes = True
        log(f"no default StorageClass: {len(claims)} local volumes on node {node} under "
            f"{cluster.LOCAL_ROOT / self.kube.namespace}")
        return ["--set", f"sourceDefaults.storage.storageClassName={cluster.LOCAL_CLASS}",
                "--set", f"warehouse.storage.storageClassName={cluster.LOCAL_CLASS}"]

    def tls_values(self) -> list[str]:
        self.kube.run("delete", "secret", TLS_SECRET, "--ignore-not-found", check=False, quiet=True)
        services = [f"{self.fullname}-src-{s['name']}" for s in self.values["sources"]]
        for warehouse in [f"{self.fullname}-warehouse", *(f"{self.fullname}-wh-{w['name']}"
                                                          for w in self.values.get("warehouses", []))]:
            services += [warehouse, f"{warehouse}-headless"]
        hosts = [h for s in services for h in (s, f"{s}.{self.kube.namespace}", f"{s}.{self.kube.namespace}.svc")]
        cluster.create_tls_secret(self.kube, TLS_SECRET, hosts + ["localhost", "127.0.0.1"], self.home / "tls")
        return ["--set", "tls.enabled=true", "--set", f"tls.secretName={TLS_SECRET}"]

    def api_ca_values(self) -> list[str]:
        if not cluster.publish_api_ca(self.kube, API_CA, self.home / "api-ca"):
            return []
        log(f"the namespace's kube-root-ca.crt is empty: the API server's CA is in ConfigMap {API_CA}")
        return ["--set", f"kubeApiCaConfigMap={API_CA}"]

    def watch_values(self) -> list[str]:
        if not cluster.refuses_watch_list(self.kube):
            return []
        log("the API server refuses watch-list requests: Spark follows its executors by polling "
            f"({NO_WATCH_LIST.name})")
        return ["-f", str(NO_WATCH_LIST)]

    def check_promises(self) -> None:
        probed = cluster.check_pod_security(self.kube, self.args.release)
        log(f"non-root (uid {cluster.IMAGE_UID}) and read-only root filesystem in {len(probed)} containers: "
            + ", ".join(probed))
        rights = cluster.check_chaos_rbac(self.kube, f"{self.fullname}-chaos")
        log("chaos ServiceAccount: " + "; ".join(rights))
        source = self.values["sources"][0]["name"]
        port = self.values.get("sourceDefaults", {}).get("port", 50051)
        load_labels = {"app.kubernetes.io/name": "fedlab", "app.kubernetes.io/instance": self.args.release,
                       "app.kubernetes.io/component": "load"}
        if self.args.no_network_policy_check:
            log("NetworkPolicy: not probed (--no-network-policy-check)")
        else:
            log("NetworkPolicy: " + cluster.check_network_policy(self.kube, self.args.image, self.pull_policy,
                                                                 f"{self.fullname}-src-{source}:{port}", load_labels))
        self.check_warehouse_resumed()

    def check_warehouse_resumed(self) -> None:
        """Chaos deleted every warehouse's pod (its Job's JSON events say so): each pod now running
        restored its views from their Delta tables."""
        pods = self.warehouse_pods()
        events = [json.loads(line) for line in self.kube.logs(f"job/{self.fullname}-chaos").splitlines()
                  if line.startswith("{")]
        kills = {victim: event["results"][victim] for event in events if event.get("action") == "kill"
                 for victim in event["victims"]}
        self.figures["chaos"] = ", ".join(f"{victim} {outcome}" for victim, outcome in sorted(kills.items()))
        for pod in pods:
            if kills.get(pod) != "deleted":
                raise E2EFailure(f"the chaos Job did not delete {pod} (its kills: {self.figures['chaos'] or 'none'})")
            restored = re.search(r"restored from Delta: (\d+) view rows, (\d+) notifications to re-apply",
                                 self.kube.logs(pod))
            if restored is None:
                raise E2EFailure(f"{pod} did not log 'restored from Delta' after chaos deleted it")
            self.figures[f"restart of {pod}"] = f"restored {restored.group(1)} view rows from Delta"
            log(f"warehouse pod {pod} deleted by chaos came back: {restored.group(0)}")

    def warehouse_pods(self) -> list[str]:
        """The pods of the release's warehouses: the first, then those of `warehouses` in the values."""
        return [f"{self.fullname}-warehouse-0",
                *(f"{self.fullname}-wh-{w['name']}-0" for w in self.values.get("warehouses", []))]

    def helm_test(self, when: str) -> dict:
        proc = self.helm_cmd("test", self.args.release, "--namespace", self.kube.namespace, "--logs",
                             "--timeout", "900s", check=False, timeout=960)
        if proc.returncode != 0:
            raise E2EFailure(f"the Helm test (the checker) {when} failed: see its log above")
        reports = checker_reports(proc.stdout)
        self.verdicts = reports
        for view, figures in reports.items():
            about = f"checker {when}" + (f", view {view}" if view else "")
            if figures["verdict"] != "complete" or figures["lost"] or figures["doubled"]:
                raise E2EFailure(f"the {about}: verdict {figures['verdict']}, {figures['lost']} lost, "
                                 f"{figures['doubled']} doubled")
            self.figures[about] = (f"{figures['verdict']}, {figures['transactions']} transactions, "
                                   f"{figures['states']} view states, staleness {figures['staleness']}")
            log(f"{about}: {self.figures[about]}")
        figures = next(iter(reports.values()))
        clocks = re.search(r"^clocks: (.*)$", proc.stdout, re.MULTILINE)   # what skew the commit stamps show
        if clocks:
            self.figures[f"clocks {when}"] = clocks.group(1)
        return figures

    def start_prometheus(self) -> None:
        """Prometheus on this machine, scraping the release's pods from before the install to the
        end (helm/e2e_prometheus.py), with the chart's alert rules as this release renders them."""
        if not self.on_this_machine():
            log("Prometheus: not run (this machine does not reach the pods of a cluster that is not its own)")
            self.figures["Prometheus"] = "not run: the cluster is not this machine"
            return
        began = time.monotonic()
        rules = e2e_prometheus.alert_rules([*self.values_files, *self.args.values], self.home / "helm",
                                           self.args.release, self.kube.namespace)
        self.prometheus = e2e_prometheus.Prometheus.start(self.home / "prometheus", rules, PROMETHEUS_LOG, self.kube)
        log(f"Prometheus at {self.prometheus.url}, up in {time.monotonic() - began:.1f} s, scrapes the pods of namespace "
            f"{self.kube.namespace} every {e2e_prometheus.SCRAPE_INTERVAL}, with "
            f"{sum(len(g['rules']) for g in rules['groups'])} alert rules (its log: {PROMETHEUS_LOG})")

    def check_metrics(self) -> None:
        """What Prometheus scraped over the run agrees with the last checker's verdict and the
        loads' logs (e2e_prometheus.MetricsCheck); its figures go into the report."""
        if self.prometheus is None:
            return
        began = time.monotonic()
        check = e2e_prometheus.MetricsCheck(self.prometheus, self.kube, self.args.release)
        for name, line in check.run([s["name"] for s in self.values["sources"]], self.verdicts, self.load_logs).items():
            self.figures[f"Prometheus, {name}"] = line
            log(f"Prometheus, {name}: {line}")
        self.figures["Prometheus"] = (f"scraped the release for {time.time() - self.prometheus.started:.0f} s "
                                      f"({self.prometheus.usage()}); checked in {time.monotonic() - began:.1f} s")

    def load_under(self, schedule: str, values: list[str]) -> tuple:
        """`helm upgrade` with `values`: a new load Job against the same federation, while the
        node applies `schedule`; returns the nemesis (None where it cannot run) and the load's
        wall-clock window."""
        started = time.monotonic()
        # --force-conflicts: the chaos Job changed the faults ConfigMap; the upgrade sets it back to the values.
        self.helm_cmd("upgrade", *self.chart_args(["--reuse-values", "--force-conflicts", *values]),
                      timeout=self.args.timeout)
        self.revision += 1
        # Restarts of what the faults take: the warehouses, the sources, the Ray head.
        watched = "app.kubernetes.io/component in (warehouse,source,ray-head)"
        job = f"{self.fullname}-load-{self.revision}"
        with cluster.PodStarts(self.kube, f"app.kubernetes.io/instance={self.args.release},{watched}") as starts:
            # The schedule counts from the load's first transaction: before it, the load waits
            # for the federation (restarted by the upgrade) to answer.
            cluster.wait_log_line(self.kube, f"job/{job}", "driving ", self.args.timeout)
            nemesis = self.start_nemesis(schedule)
            load_from = time.time()
            try:
                self.wait_load(job)
                if nemesis is not None:
                    nemesis.wait()
            finally:
                if nemesis is not None:
                    nemesis.stop()
        self.starts = starts.starts
        log(f"upgraded ({' '.join(values[1::2])}): the load Job finished after {time.monotonic() - started:.0f} s")
        if nemesis is not None:
            if nemesis.error is not None:
                raise E2EFailure(f"the nemesis failed: {nemesis.error}")
            self.figures[f"nemesis from the node, load {self.revision}"] = f"{len(nemesis.faults)} faults: {schedule}"
        return nemesis, (load_from, time.time())

    def report_faults(self, nemesis, window: tuple[float, float]) -> None:
        """What each fault of the node's nemesis did over a load, from the warehouse's history on
        its volume: how long the view stood still in each fault's phase (by the warehouse's clock
        alone), the staleness of the transactions committed in it, and the fault plot
        (nemesis.effects), written to runs/e2e-k8s/faults-<revision>.png. Staleness leaves
        out the sources whose clock the schedule set wrong: their commit stamps are off by the
        offset (docs/kubernetes.md, "The nemesis from the node")."""
        if nemesis is None:
            return
        from fedlab.nemesis.effects import by_source, figures, recovery, standstills

        history = self.kube.run("exec", f"{self.fullname}-warehouse-0", "--", "sh", "-c",
                                "cat /var/fedlab/data/run/*/warehouse/history/changes.jsonl", quiet=True).stdout
        states = [json.loads(line) for line in history.splitlines() if line.strip()]
        skewed = {f.targets[0] for f in nemesis.faults if f.kind == "clock"}
        # Each source's own staleness too: a fault that took one source shows what the others' updates met.
        lags_of: dict[str, list] = {}
        for state in states:
            if state["source"] not in skewed:
                lags_of.setdefault(state["source"], []).append((state["commit_time"],
                                                                state["applied_time"] - state["commit_time"]))
        lags = [pair for pairs in lags_of.values() for pair in pairs]
        plot = HERE.parent / "runs" / "e2e-k8s" / f"faults-{self.revision}.png"
        shown = figures(nemesis.applied, lags, *window, plot)
        stills = standstills(nemesis.applied, [s["applied_time"] for s in states], *window)
        per_source = by_source(nemesis.applied, lags_of, *window)
        log(f"what each fault did (staleness of the sources whose clock was right: all but "
            f"{', '.join(sorted(skewed)) or 'none'}); the plot: {shown['fault_plot']}")
        for phase, still, applied, sources in zip(shown["fault_phases"], stills,
                                                  [{"began": window[0]}, *nemesis.applied], per_source):
            lag = phase["staleness_ms"]
            began = applied["began"] + still["from_s"]
            ended = recovery(began, began + still["still_s"], self.starts)
            line = (f"the view stood still {still['still_s']:.1f} s, {still['from_s']:.1f} s into the phase"
                    + (f" (moving {ended[1]:.1f} s after {ended[0]} started again)" if ended else "") + "; "
                    + (f"{phase['committed']} committed, staleness p50 {lag['p50']:,.0f} ms, max {lag['max']:,.0f} ms"
                       if lag["n"] else "nothing committed"))
            self.figures[f"  {phase['phase']}"] = line
            self.figures[f"  {phase['phase']}, by source"] = sources
            log(f"  {phase['phase']}: {line}")
            log(f"    by source: {sources}")
        # Where a warehouse's restart went: its own account of its last start.
        started = {pod for _, pod in self.starts}
        for pod in (pod for pod in self.warehouse_pods() if pod in started):
            text = self.kube.logs(pod)
            took = [found[-1] for found in (re.findall(r"up in [^\n]*", text),
                                            re.findall(r"restored from Delta[^\n]*", text),
                                            re.findall(r"Spark session started in [^\n]*", text),
                                            re.findall(r"Delta journal ready for batches in [^\n]*", text)) if found]
            if took:
                self.figures[f"  {pod}'s last start"] = "; ".join(took)
                log(f"  {pod}'s last start: {'; '.join(took)}")

    def start_nemesis(self, schedule: str):
        """The node nemesis over a load, or None (and why) where it cannot run."""
        if not schedule:
            return None
        if os.geteuid() != 0 or not self.on_this_machine():
            log("nemesis: not applied (it needs root on the cluster's nodes, this machine)")
            self.figures["nemesis from the node"] = "not applied: not root on the cluster's node"
            return None
        from fedlab.nemesis import node, schedule as schedules
        from fedlab.nemesis.applier import Events
        from fedlab.roles.chaos_k8s import parse_duration

        release = node.Release(self.kube.namespace, self.args.release, self.kube.kubectl, self.kube.env)
        duration = parse_duration(str(self.values["load"]["duration"]))   # what a random:SEED schedule spans
        faults = schedules.read(schedule, release.sources(), duration, node.refusal)
        log(f"nemesis from the node: {schedule}")
        return node.NodeNemesis(release, faults, Events(lambda line: log(f"nemesis: {line}")),
                                node.machines(faults)).start()

    def post_mortem(self, lines: int = 25) -> None:
        """What a failed run's reader needs before the release is gone: where each pod is, the
        namespace's warnings, and the last log lines of every pod that is not ready."""
        try:
            print("e2e: the namespace as the run failed", flush=True)
            for args in (("get", "pods", "-o", "wide"),
                         ("get", "events", "--field-selector", "type=Warning", "--sort-by", ".lastTimestamp")):
                print(self.kube.run(*args, check=False, timeout=30, quiet=True).stdout, flush=True)
            for pod in self.kube.json("pods").get("items", []):
                statuses = pod["status"].get("containerStatuses", [])
                if statuses and all(s.get("ready") for s in statuses):
                    continue
                name = pod["metadata"]["name"]
                restarted = any(s.get("restartCount") for s in statuses)
                for previous in (True, False) if restarted else (False,):
                    text = self.kube.logs(name, previous=previous).splitlines()[-lines:]
                    print(f"e2e: {name}, {'previous' if previous else 'current'} container, last lines:",
                          *text, sep="\n  ", flush=True)
        except Exception as err:  # the cluster may be what failed: the run's own error comes next
            print(f"e2e: no post-mortem ({type(err).__name__}: {err})", flush=True)
        if self.prometheus is not None:
            print(f"e2e: Prometheus's log ({self.prometheus.log_path}) ends:", self.prometheus.log_tail(lines),
                  sep="\n", flush=True)

    def on_this_machine(self) -> bool:
        """Whether the cluster's nodes are this machine's, where the nemesis and Prometheus reach them."""
        return cluster.local_node(self.kube) is not None

    def uninstall(self) -> None:
        self.helm_cmd("uninstall", self.args.release, "--namespace", self.kube.namespace, "--wait",
                      "--timeout", "300s", check=False, timeout=360)
        # helm uninstall leaves the Helm test's pod (a hook), which holds the warehouse's claim.
        release = f"app.kubernetes.io/instance={self.args.release}"
        self.kube.run("delete", "pod", "-l", release, "--ignore-not-found", check=False, timeout=180)
        self.kube.run("delete", "pvc", "-l", release, "--ignore-not-found", check=False, timeout=180)
        self.kube.run("delete", "secret", TLS_SECRET, "--ignore-not-found", check=False)
        self.kube.run("delete", "configmap", API_CA, "--ignore-not-found", check=False)
        if self.local_volumes:
            cluster.remove_local_volumes(self.kube, self.kube.namespace)

    def report(self) -> None:
        print(f"e2e: passed in {time.monotonic() - self.started:.0f} s", flush=True)
        for name, value in self.figures.items():
            print(f"  {name}: {value}")

    def helm_cmd(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        print("+ helm", " ".join(args), flush=True)
        proc = subprocess.run([self.helm, *args], env=self.helm_env, text=True, capture_output=True,
                              timeout=timeout + 60)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if check and proc.returncode != 0:
            raise E2EFailure(f"helm {' '.join(args[:2])} failed with exit code {proc.returncode}")
        return proc


def checker_reports(log_text: str) -> dict[str, dict]:
    """Each view's figures in `fedlab check`'s text report, by the name its block is headed with
    ("== subscriber NAME (...)": a warehouse keeping several views); "" for a report of one view.

    >>> block = "level: complete\\ntransactions: 12  states: 9\\nstaleness: p50 0.4 s\\nlost: none\\ndoubled: none\\n"
    >>> sorted(checker_reports("== subscriber warehouse (sze-ling)\\n" + block + "== subscriber big (versioned)\\n" + block))
    ['big', 'warehouse']
    """
    parts = re.split(r"^== subscriber (\S+) .*$", log_text, flags=re.MULTILINE)
    if len(parts) == 1:
        return {"": checker_figures(log_text)}
    return {name: checker_figures(text) for name, text in zip(parts[1::2], parts[2::2])}


def checker_figures(log_text: str) -> dict:
    """The figures in `fedlab check`'s text report (live.check._print_text).

    >>> checker_figures("level: complete\\ntransactions: 12  states: 9\\nstaleness: applied p50 0.4 s\\n"
    ...                 "lost: none\\ndoubled: 2 ('s1', 4)")
    {'verdict': 'complete', 'transactions': 12, 'states': 9, 'staleness': 'applied p50 0.4 s', 'lost': False, 'doubled': True}
    """
    def field(name: str) -> str:
        found = re.search(rf"^{name}: (.*)$", log_text, re.MULTILINE)
        if found is None:
            raise E2EFailure(f"the checker's report has no '{name}:' line")
        return found.group(1).strip()

    counts = re.match(r"(\d+)\s+states: (\d+)", field("transactions"))
    if counts is None:
        raise E2EFailure(f"the checker's report has a malformed transactions line: {field('transactions')}")
    return {"verdict": field("level").split()[0], "transactions": int(counts.group(1)), "states": int(counts.group(2)),
            "staleness": field("staleness"), "lost": field("lost") != "none", "doubled": field("doubled") != "none"}


if __name__ == "__main__":
    sys.exit(main())
