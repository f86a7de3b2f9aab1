"""A real Prometheus beside the cluster e2e (helm/e2e_k8s.py's Run, which helm/e2e_nodes.py
extends): it scrapes every pod of the release for the whole run and evaluates the chart's alert
rules, and at the end the run asks it whether the metrics say what the run's other witnesses say.

- `alert_rules`: rules/fedlab-alerts.yaml as the chart renders it for the release
  (metrics.rules.enabled), a rule file that `promtool check rules` must pass.
- `PodTargets`, `pod_targets`: the release namespace's pods as Prometheus's Kubernetes discovery
  (role pod) gives them, meta labels and all, in a file_sd file kept up to date from a watch of
  the pods. Debian's Prometheus is built without the Kubernetes discovery; what it would hand on
  is handed on here.
- `scrape_config`: the relabelling of an annotation-based scrape config of a cluster's
  Prometheus: pods annotated prometheus.io/scrape="true", scraped from the pod's IP at the
  annotated port and path (the host reaches every node's pods on the local cluster tool), the
  pod's labels, namespace and name on its series. The alert rules name app_kubernetes_io_component,
  fedlab_io_source and fedlab_io_warehouse.
- `Prometheus`: /usr/bin/prometheus on 127.0.0.1 and a free port, its storage in the run's
  temporary folder, its log kept for the post-mortem; its HTTP API.
- `MetricsCheck`: at the end, through that API, that every pod alive is scraped once and up, every
  series docs/operations.md lists exists, the counts agree with the checker's verdict and the
  load Jobs' logs, every dashboard query and alert rule runs (a panel's returns data), and
  `promtool check metrics` passes on each live pod's page.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import fedlab_helm
import yaml
from e2e_cluster import E2EFailure, Kube

REPO = Path(__file__).resolve().parent.parent
OPERATIONS = REPO / "docs" / "operations.md"
DASHBOARD = REPO / "helm" / "federation" / "dashboards" / "fedlab.json"
PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
# Short enough that a load Job's pod, which ends a second or two after its last commit once the
# view holds it, is scraped after its last commit.
SCRAPE_INTERVAL = "2s"
RATE_INTERVAL = "30s"   # $__rate_interval of the dashboard's queries: several scrapes, as Grafana takes
STEP = 15               # seconds between the points of a panel's range query
EVALUATION = 5          # seconds between evaluations of the alert rules
LOAD_LINE = re.compile(r"^load: offered (\d+), committed (\d+), rejected (\d+)", re.MULTILINE)
META = "__meta_kubernetes_pod_"
DEFAULT_VIEW = "warehouse"   # the first warehouse's view (fedmodel.messages.DEFAULT_SUBSCRIBER)


def alert_rules(values_files: list, helm_home: Path, release: str, namespace: str) -> dict:
    """The chart's alert rules for this release and values, as its PrometheusRule's spec: a rule file."""
    try:
        stream = fedlab_helm.template(values_files, home=helm_home, release=release, namespace=namespace,
                                      sets=["metrics.rules.enabled=true"])
    except RuntimeError as err:
        raise E2EFailure(f"the chart's alert rules did not render: {err}") from None
    rules = [d for d in fedlab_helm.documents(stream) if d["kind"] == "PrometheusRule"]
    if len(rules) != 1:
        raise E2EFailure(f"the chart rendered {len(rules)} PrometheusRules with metrics.rules.enabled=true, want 1")
    return rules[0]["spec"]


def pod_targets(pod: dict) -> list[dict]:
    """What Prometheus's Kubernetes discovery (role pod) gives for `pod`, as file_sd target groups:
    one per declared container port (one per container without ports), with the pod's meta
    labels. None for a pod without an IP yet.

    >>> pod = {"metadata": {"name": "p", "namespace": "lab", "labels": {"app.kubernetes.io/component": "source"},
    ...                     "annotations": {"prometheus.io/port": "9464"}},
    ...        "spec": {"containers": [{"name": "c", "ports": [{"name": "grpc", "containerPort": 50051},
    ...                                                        {"name": "metrics", "containerPort": 9464}]}]},
    ...        "status": {"phase": "Running", "podIP": "10.244.1.5"}}
    >>> [g["targets"] for g in pod_targets(pod)]
    [['10.244.1.5:50051'], ['10.244.1.5:9464']]
    >>> labels = pod_targets(pod)[0]["labels"]
    >>> labels["__meta_kubernetes_pod_label_app_kubernetes_io_component"], labels["__meta_kubernetes_pod_phase"]
    ('source', 'Running')
    """
    meta, status = pod["metadata"], pod["status"]
    ip = status.get("podIP")
    if not ip:
        return []
    labels = {"__meta_kubernetes_namespace": meta["namespace"], f"{META}name": meta["name"], f"{META}ip": ip,
              f"{META}phase": status.get("phase", ""),
              **{f"{META}label_{_sanitized(k)}": v for k, v in (meta.get("labels") or {}).items()},
              **{f"{META}annotation_{_sanitized(k)}": v for k, v in (meta.get("annotations") or {}).items()}}
    groups = []
    for container in pod["spec"]["containers"]:
        own = {**labels, f"{META}container_name": container["name"]}
        for port in container.get("ports") or [None]:
            if port is None:
                groups.append({"targets": [ip], "labels": own})
            else:
                groups.append({"targets": [f"{ip}:{port['containerPort']}"],
                               "labels": {**own, f"{META}container_port_name": port.get("name", ""),
                                          f"{META}container_port_number": str(port["containerPort"])}})
    return groups


def _sanitized(name: str) -> str:
    """A Kubernetes label or annotation name as a Prometheus label name ends: app_kubernetes_io_component."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


class PodTargets:
    """The pods of the kube's namespace as file_sd targets (pod_targets), the file written again on
    every change a watch of the pods reports. A watch the API server ends is started again, from
    a fresh list."""

    def __init__(self, kube: Kube, path: Path):
        self.kube, self.path = kube, path
        self._stopping = threading.Event()
        self._proc: subprocess.Popen | None = None
        self._thread = threading.Thread(target=self._watch, name="pod-targets", daemon=True)

    def start(self) -> PodTargets:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._proc is not None:
            self._proc.terminate()
        self._thread.join(10)

    def _watch(self) -> None:
        while not self._stopping.is_set():
            pods: dict[str, dict] = {}
            self._proc = subprocess.Popen([self.kube.kubectl, "-n", self.kube.namespace, "get", "pods", "--watch",
                                           "--output-watch-events", "-o", "json"], env=self.kube.env,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            if self._stopping.is_set():   # stop() came between the check above and this watch's start
                self._proc.terminate()
            buffer = ""
            for line in self._proc.stdout:
                buffer += line
                if not line.rstrip().endswith("}"):
                    continue
                try:   # one event a line, as kubectl prints them; or an indented one, whole at its last line
                    event, buffer = json.loads(buffer), ""
                except json.JSONDecodeError:
                    continue
                name = event["object"]["metadata"]["name"]
                if event["type"] == "DELETED":
                    pods.pop(name, None)
                else:
                    pods[name] = event["object"]
                self.write([group for pod in pods.values() for group in pod_targets(pod)])
            self._proc.wait()
            self._stopping.wait(1)

    def write(self, groups: list[dict]) -> None:
        """The targets file, replaced whole: Prometheus never reads half of one."""
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        os.replace(tmp, self.path)


def scrape_config(targets: Path, rule_file: Path) -> dict:
    """Prometheus's configuration: the pods of the file_sd file `targets` that are annotated for
    scraping and run, with their labels, namespace and name on their series; `rule_file`'s rules.

    >>> config = scrape_config(Path("/pods.json"), Path("/r.yaml"))
    >>> [r.get("target_label", r["action"]) for r in config["scrape_configs"][0]["relabel_configs"]]
    ['keep', 'drop', '__metrics_path__', '__address__', 'labelmap', 'namespace', 'pod']
    """
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                   "evaluation_interval": f"{EVALUATION}s"},
        "rule_files": [str(rule_file)],
        "scrape_configs": [{
            "job_name": "fedlab-pods",
            "file_sd_configs": [{"files": [str(targets)], "refresh_interval": "5s"}],
            "relabel_configs": [
                {"source_labels": [f"{META}annotation_prometheus_io_scrape"], "regex": "true", "action": "keep"},
                # A finished Job's pod has given its address back, maybe to another pod.
                {"source_labels": [f"{META}phase"], "regex": "Succeeded|Failed", "action": "drop"},
                {"source_labels": [f"{META}annotation_prometheus_io_path"], "regex": "(.+)",
                 "target_label": "__metrics_path__", "action": "replace"},
                # One target per pod: its containers' other ports are rewritten to the same address.
                {"source_labels": [f"{META}ip", f"{META}annotation_prometheus_io_port"], "regex": r"(.+);(\d+)",
                 "replacement": "$1:$2", "target_label": "__address__", "action": "replace"},
                {"regex": f"{META}label_(.+)", "action": "labelmap"},
                {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace", "action": "replace"},
                {"source_labels": [f"{META}name"], "target_label": "pod", "action": "replace"},
            ]}],
    }


class Prometheus:
    """/usr/bin/prometheus scraping the pods of a file_sd file, and its HTTP API."""

    def __init__(self, proc: subprocess.Popen, url: str, targets: Path, log_path: Path, log_file):
        self.proc, self.url, self.targets, self.log_path, self._log_file = proc, url, targets, log_path, log_file
        self.started = time.time()
        self.pods: PodTargets | None = None

    @classmethod
    def start(cls, folder: Path, rules: dict, log_path: Path, kube: Kube | None = None) -> Prometheus:
        """Prometheus with `rules`, its log at `log_path`, scraping the pods of `kube`'s namespace
        as they come and go; without `kube`, the targets its `targets` file names."""
        for binary in (PROMETHEUS, PROMTOOL):
            if not os.access(binary, os.X_OK):
                raise E2EFailure(f"no {binary}: the e2e scrapes the release with Debian's prometheus "
                                 "(`make promtool` installs it)")
        folder.mkdir(parents=True, exist_ok=True)
        rule_file = folder / "fedlab-alerts.yaml"
        rule_file.write_text(yaml.safe_dump(rules, sort_keys=False))
        checked = subprocess.run([PROMTOOL, "check", "rules", str(rule_file)], capture_output=True, text=True,
                                 timeout=60)
        if checked.returncode != 0:
            raise E2EFailure(f"promtool check rules failed on the chart's rendered alert rules: "
                             f"{(checked.stdout + checked.stderr).strip()[-600:]}")
        targets = folder / "pods.json"
        targets.write_text("[]")
        config = folder / "prometheus.yml"
        config.write_text(yaml.safe_dump(scrape_config(targets, rule_file), sort_keys=False))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "w")
        proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=log_file, stderr=subprocess.STDOUT)
        prometheus = cls(proc, f"http://127.0.0.1:{port}", targets, log_path, log_file)
        prometheus._wait_ready(30)
        if kube is not None:
            prometheus.pods = PodTargets(kube, targets).start()
        return prometheus

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                self.stop()
                raise E2EFailure(f"Prometheus exited with code {self.proc.returncode}: {self.log_tail(5)}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise E2EFailure(f"Prometheus not ready after {timeout:g} s: {self.log_tail(5)}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.pods is not None:
            self.pods.stop()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log_file.close()

    def usage(self) -> str:
        """Prometheus's own resident memory and CPU time so far, from /proc."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        rss = int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE).group(1))
        ticks = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(ticks[11]) + int(ticks[12])) / os.sysconf("SC_CLK_TCK")   # utime, stime
        return f"{rss / 1024:.0f} MB resident, {cpu:.1f} s of CPU"

    def log_tail(self, lines: int) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def api(self, path: str, about: str, **params) -> dict | list:
        """GET /api/v1/<path> with `params` (a list: a repeated parameter); E2EFailure naming
        `about` when Prometheus answers with an error."""
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=60) as reply:
                body = json.load(reply)
        except urllib.error.HTTPError as err:   # a bad query: 400 or 422, with the error in the body
            body = json.load(err)
        except OSError as err:
            raise E2EFailure(f"Prometheus did not answer {path} for {about}: {err}") from None
        if body.get("status") != "success":
            raise E2EFailure(f"{about}: Prometheus answered {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, about: str) -> list[dict]:
        """The instant vector (or range vector: each series' raw samples) of `expr` now."""
        return self.api("query", about, query=expr, time=f"{time.time():.3f}")["result"]

    def query_range(self, expr: str, about: str) -> list[dict]:
        """`expr` over the whole run, a point every STEP seconds, as a dashboard panel asks for it."""
        return self.api("query_range", about, query=expr, start=f"{self.started:.3f}", end=f"{time.time():.3f}",
                        step=STEP)["result"]

    def series(self, selector: str, about: str) -> list[dict]:
        """Every series `selector` matched at any time of the run, by its labels."""
        return self.api("series", about, **{"match[]": selector}, start=f"{self.started:.3f}",
                        end=f"{time.time():.3f}")

    def label_values(self, label: str, selector: str, about: str) -> list[str]:
        return self.api(f"label/{label}/values", about, **{"match[]": selector}, start=f"{self.started:.3f}",
                        end=f"{time.time():.3f}")

    @property
    def window(self) -> str:
        """A range that covers the whole run, for `..._over_time` and range vectors."""
        return f"{int(time.time() - self.started) + 60}s"


def documented_series(text: str) -> list[str]:
    """The series the tables of docs/operations.md list, a histogram by its _bucket series.

    >>> documented_series("| `fedlab_source_dsv` | gauge | the DSV |\\n| `fedlab_x_seconds` | histogram | a |")
    ['fedlab_source_dsv', 'fedlab_x_seconds_bucket']
    """
    return [name + ("_bucket" if kind == "histogram" else "")
            for name, kind in re.findall(r"^\| `(fedlab_\w+)` \| (gauge|counter|histogram) \|", text, re.MULTILINE)]


def load_counts(log_text: str) -> dict[str, int]:
    """What a load Job's log says it did at the end (roles/load.py).

    >>> load_counts("driving 10 txn/s for 90 s\\nload: offered 900, committed 897, rejected 3 in 90.1 s; ...")
    {'offered': 900, 'committed': 897, 'rejected': 3}
    """
    found = LOAD_LINE.search(log_text)
    if found is None:
        raise E2EFailure("a load Job's log has no 'load: offered N, committed M, rejected R' line")
    return dict(zip(("offered", "committed", "rejected"), map(int, found.groups())))


def as_promql(query: str, variables: dict[str, list[str]]) -> str:
    """A Grafana query as Prometheus receives it from the dashboard: each variable replaced by its
    values (several as a regex alternation, as Grafana writes a multi-value variable inside a
    regex matcher), $__rate_interval and $__interval by durations.

    >>> as_promql('sum(rate(x{namespace=~"$namespace", view=~"${view}"}[$__rate_interval]))',
    ...           {"namespace": ["lab"], "view": ["a", "b"]})
    'sum(rate(x{namespace=~"lab", view=~"(a|b)"}[30s]))'
    """
    builtins = {"__rate_interval": RATE_INTERVAL, "__interval": f"{STEP}s"}

    def value(found: re.Match) -> str:
        name = found.group(1) or found.group(2)
        if name in builtins:
            return builtins[name]
        if name not in variables:
            raise E2EFailure(f"the dashboard query {query!r} names ${name}, which is none of its variables")
        values = variables[name]
        return values[0] if len(values) == 1 else "(" + "|".join(values) + ")"

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, query)


def _alert(labels: dict) -> str:
    """An alert by its name and what it is about.

    >>> _alert({"alertname": "FedlabSourceDown", "pod": "e2e-fedlab-src-s2-0", "instance": "10.244.3.6:9464"})
    'FedlabSourceDown e2e-fedlab-src-s2-0'
    """
    return " ".join([labels["alertname"], *(labels[k] for k in ("pod", "view", "source", "subscriber") if k in labels)])


def _sample(result: list[dict], *labels: str):
    """An instant vector's values by the values of `labels` (one label: by its value).

    >>> _sample([{"metric": {"source": "s1", "view": "v"}, "value": [1.5, "7"]}], "view", "source")
    {('v', 's1'): 7.0}
    """
    key = (lambda m: m.get(labels[0])) if len(labels) == 1 else (lambda m: tuple(m.get(k) for k in labels))
    return {key(r["metric"]): float(r["value"][1]) for r in result}


class MetricsCheck:
    """What the run asks Prometheus at its end (`run`). Each step returns its figures by name, or
    raises E2EFailure naming the series, query or agreement that failed."""

    def __init__(self, prometheus: Prometheus, kube: Kube, release: str):
        self.prom, self.kube, self.release = prometheus, kube, release
        self.ns = f'namespace="{kube.namespace}"'
        self.absent: set[str] = set()   # documented series that nothing in this run had cause to make

    def run(self, sources: list[str], verdicts: dict[str, dict], load_logs: dict[str, str]) -> dict[str, str]:
        """`verdicts`: the last checker's figures by view (e2e_k8s.checker_reports; "" for a run of
        one view); `load_logs`: each load Job's log by the Job's name."""
        loads = {job: load_counts(text) for job, text in load_logs.items()}
        self.wait_scraped()
        return {**self.targets(), **self.series(loads), **self.agreements(sources, verdicts, loads),
                **self.dashboard(sorted(view or DEFAULT_VIEW for view in verdicts)), **self.rules(), **self.pages()}

    def wait_scraped(self, timeout: float = 30) -> None:
        """Until every target has been scraped since now: what the checks read is the end state."""
        since, deadline = time.time(), time.monotonic() + timeout
        while True:
            last = self.prom.query(f"min(timestamp(up{{{self.ns}}}))", "the targets' last scrapes")
            if last and float(last[0]["value"][1]) > since:
                return
            if time.monotonic() > deadline:
                raise E2EFailure(f"Prometheus did not scrape every target of the release within {timeout:g} s")
            time.sleep(1)

    def targets(self) -> dict[str, str]:
        """Every running pod annotated for scraping is one target, up; every component had targets."""
        pods = self.kube.json("pods", "-l", f"app.kubernetes.io/instance={self.release}")["items"]
        expected = sorted(p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"
                          and not p["metadata"].get("deletionTimestamp")
                          and (p["metadata"].get("annotations") or {}).get("prometheus.io/scrape") == "true")
        active = self.prom.api("targets", "the targets", state="active")["activeTargets"]
        scraped = sorted(t["labels"].get("pod", "?") for t in active)
        if scraped != expected:
            raise E2EFailure(f"Prometheus's targets are not the running annotated pods, once each: targets "
                             f"{scraped}, pods {expected}")
        down = [f"{t['labels']['pod']} ({t['scrapeUrl']}: {t['lastError']})" for t in active if t["health"] != "up"]
        if down:
            raise E2EFailure(f"targets down at the end: {'; '.join(down)}")
        by_component: dict[str, list] = {}
        for labels in self.prom.series(f"up{{{self.ns}}}", "the up series of the run"):
            by_component.setdefault(labels.get("app_kubernetes_io_component", "?"), []).append(labels)
        missing = {"source", "warehouse", "load"} - set(by_component)
        if missing:
            raise E2EFailure(f"no `up` series of component {', '.join(sorted(missing))} over the run "
                             f"(components: {', '.join(sorted(by_component))})")
        # A pod deleted and made again keeps its name and takes a new address: a target of its own.
        return {"targets": f"{len(active)} up at the end, one per running pod; scraped over the run: " + ", ".join(
            f"{c} {len({t['pod'] for t in ts})} pods at {len(ts)} addresses" for c, ts in sorted(by_component.items()))}

    def series(self, loads: dict[str, dict]) -> dict[str, str]:
        """Every series docs/operations.md lists exists; the load's rejections only if a load
        rejected something (its log says how many)."""
        found = self.prom.series(f'{{__name__=~"fedlab_.+", {self.ns}}}', "the fedlab series of the run")
        names = {labels["__name__"] for labels in found}
        if not any(counts["rejected"] for counts in loads.values()):
            self.absent.add("fedlab_load_rejected_total")
        documented = documented_series(OPERATIONS.read_text())
        missing = [name for name in documented if name not in names | self.absent]
        if missing:
            raise E2EFailure(f"series docs/operations.md lists and Prometheus never scraped: {', '.join(missing)}")
        head = self.prom.api("status/tsdb", "the TSDB's figures")["headStats"]
        return {"series": f"all {len(documented) - len(self.absent)} documented exist"
                          f"{' (no load rejected anything: no fedlab_load_rejected_total)' if self.absent else ''}; "
                          f"{len(names)} fedlab names, {len(found)} fedlab series over the run, "
                          f"{head['numSeries']} series in all"}

    def agreements(self, sources: list[str], verdicts: dict[str, dict], loads: dict[str, dict]) -> dict[str, str]:
        """The counts at the end against the checker's verdict and the loads' logs. The sources'
        commits derive from their DSVs, which a restart keeps; a warehouse's gauges are its state."""
        commits = _sample(self.prom.query(f"max by (source) (fedlab_source_commits_total{{{self.ns}}})",
                                          "the sources' commits"), "source")
        dsv = _sample(self.prom.query(f"max by (source) (fedlab_source_dsv{{{self.ns}}})", "the sources' DSVs"),
                      "source")
        if sorted(commits) != sorted(sources) or sorted(dsv) != sorted(sources):
            raise E2EFailure(f"fedlab_source_commits_total / fedlab_source_dsv at the end: sources {sorted(commits)} / "
                             f"{sorted(dsv)}, want {sorted(sources)}")
        total = int(sum(commits.values()))
        for view, verdict in verdicts.items():
            if verdict["transactions"] != total:
                raise E2EFailure(f"the sources' fedlab_source_commits_total sum to {total}, the checker counts "
                                 f"{verdict['transactions']} transactions for view {view or DEFAULT_VIEW}")
        applied = self._per_view("fedlab_warehouse_applied_dsv")
        views = sorted(view or DEFAULT_VIEW for view in verdicts)
        if sorted({view for view, _ in applied}) != views:
            raise E2EFailure(f"fedlab_warehouse_applied_dsv at the end has views {sorted({v for v, _ in applied})}, "
                             f"the checker judged {views}")
        wrong = {k: (v, dsv.get(k[1])) for k, v in applied.items() if v != dsv.get(k[1])}
        if wrong:
            raise E2EFailure("fedlab_warehouse_applied_dsv is not the source's fedlab_source_dsv at the end, "
                             f"(view, source): (applied, source's) {wrong}")
        for lag in ("fedlab_warehouse_lag_versions", "fedlab_warehouse_lag_seconds"):
            behind = {k: v for k, v in self._per_view(lag).items() if v}
            if behind:
                raise E2EFailure(f"{lag} is not 0 at the end, (view, source): {behind}")
        dsvs = ", ".join(f"{s} {v:.0f}" for s, v in sorted(dsv.items()))
        return {"agreement with the checker": f"the sources' commits sum to {total}, the checker's transactions of "
                                              f"each of the {len(verdicts)} views",
                "agreement of the views": f"applied DSV = the source's ({dsvs}) and lag 0 for each of the "
                                          f"{len(applied)} (view, source) pairs",
                "agreement with the loads": self._loads(loads)}

    def _per_view(self, name: str) -> dict[tuple[str, str], float]:
        return _sample(self.prom.query(f"max by (view, source) ({name}{{{self.ns}}})", name), "view", "source")

    def _loads(self, loads: dict[str, dict]) -> str:
        """Each load Job's counters as Prometheus last scraped its pod, against its log's last line.
        The pods have ended: each series' raw samples over the run, the last of each series (one
        per pod, and per reason for the rejections) summed by Job. How many scrapes saw the final
        committed count tells how close the pod's end came to its last scrape."""
        finals: dict[str, int] = {}
        for what in ("offered", "committed", "rejected"):
            name = f"fedlab_load_{what}_total"
            seen: dict[str, float] = {}
            last: dict[str, float] = {}
            for series in self.prom.query(f"{name}{{{self.ns}}}[{self.prom.window}]", name):
                job = series["metric"].get("job_name", "?")
                values = [float(v) for _, v in series["values"]]
                seen[job] = seen.get(job, 0) + values[-1]
                last[job] = max(last.get(job, 0), float(series["values"][-1][0]))
                if what == "committed":
                    finals[job] = len(values) - next(i for i, v in enumerate(values) if v == values[-1])
            for job, counts in loads.items():
                if seen.get(job, 0) != counts[what]:
                    when = (f" (its last sample at {time.strftime('%H:%M:%S', time.localtime(last[job]))})"
                            if job in last else "")
                    raise E2EFailure(f"load Job {job}: {name} as last scraped is {seen.get(job, 0):.0f}{when}, "
                                     f"its log says {what} {counts[what]}")
        return "offered, committed and rejected as last scraped = each Job's log: " + ", ".join(
            f"{'-'.join(job.rsplit('-', 2)[-2:])} committed {c['committed']} of {c['offered']} "
            f"(the final count in {finals.get(job, 0)} scrapes)" for job, c in loads.items())

    def dashboard(self, views: list[str]) -> dict[str, str]:
        """The dashboard's variables offer the release's namespace and views; each panel query
        returns data over the run (but one over series this run had no cause to make); the
        annotations' queries run."""
        board = json.loads(DASHBOARD.read_text())
        variables: dict[str, list[str]] = {}
        for variable in board["templating"]["list"]:
            if variable["type"] != "query":
                continue
            inner = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"])
            if inner is None:
                raise E2EFailure(f"dashboard variable ${variable['name']}: not a label_values query")
            variables[variable["name"]] = self.prom.label_values(inner.group(2), as_promql(inner.group(1), variables),
                                                                 f"dashboard variable ${variable['name']}")
        if self.kube.namespace not in variables.get("namespace", []) or sorted(variables.get("view", [])) != views:
            raise E2EFailure(f"the dashboard's variables offer namespaces {variables.get('namespace')} and views "
                             f"{variables.get('view')}, want {self.kube.namespace} and {views}")
        variables["namespace"] = [self.kube.namespace]
        panels = [p for p in board["panels"] if p.get("targets")]
        for panel in panels:
            for target in panel["targets"]:
                expr = as_promql(target["expr"], variables)
                result = self.prom.query_range(expr, f"dashboard panel {panel['title']!r}, query {expr}")
                if not result and not set(re.findall(r"\bfedlab_\w+", expr)) <= self.absent:
                    raise E2EFailure(f"dashboard panel {panel['title']!r}: no data over the run from {expr}")
        marked = [f"{a['name']}: {len(self.prom.query_range(as_promql(a['expr'], variables), a['name']))} series"
                  for a in board["annotations"]["list"] if "expr" in a]
        queries = sum(len(p["targets"]) for p in panels)
        return {"dashboard": f"the {queries} queries of its {len(panels)} panels returned data over the run "
                             f"($namespace {self.kube.namespace}, $view {'|'.join(views)}, $__rate_interval "
                             f"{RATE_INTERVAL}); annotations {'; '.join(marked)}"}

    def rules(self) -> dict[str, str]:
        """Every alert rule evaluated without error through the run and evaluates now; which fired."""
        rules = [r for g in self.prom.api("rules", "the rules")["groups"] for r in g["rules"]]
        if not rules:
            raise E2EFailure("Prometheus loaded no alert rule")
        for rule in rules:
            if rule["health"] != "ok":
                raise E2EFailure(f"alert rule {rule['name']}: health {rule['health']} ({rule.get('lastError')})")
            self.prom.query(rule["query"], f"alert rule {rule['name']}'s expression")
        # A firing alert's series has a sample per evaluation while it fires.
        firing = self.prom.query(f'count_over_time(ALERTS{{alertstate="firing"}}[{self.prom.window}])', "the alerts fired")
        fired = sorted(f"{_alert(r['metric'])} {float(r['value'][1]) * EVALUATION:.0f} s" for r in firing)
        return {"alert rules": f"{len(rules)} evaluated every {EVALUATION} s without error, each runs now; fired: "
                               + ("; ".join(fired) if fired else "none")}

    def pages(self) -> dict[str, str]:
        """`promtool check metrics` on the page of every pod alive, fetched from its IP."""
        sizes = []
        for target in self.prom.api("targets", "the targets", state="active")["activeTargets"]:
            pod = target["labels"]["pod"]
            try:
                with urllib.request.urlopen(target["scrapeUrl"], timeout=10) as reply:
                    text = reply.read().decode()
            except OSError as err:
                raise E2EFailure(f"{pod}: {target['scrapeUrl']} did not answer: {err}") from None
            checked = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True,
                                     timeout=60)
            if checked.returncode != 0:
                raise E2EFailure(f"promtool check metrics on {pod}'s page: "
                                 f"{(checked.stdout + checked.stderr).strip()[:600]}")
            sizes.append(f"{pod} {len(text):,} bytes")
        return {"promtool check metrics": f"passed on {len(sizes)} pages: {', '.join(sorted(sizes))}"}
