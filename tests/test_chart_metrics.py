"""The chart's Prometheus metrics (helm/federation, `metrics` in values.yaml): every pod that runs
a role serves /metrics and says so, the ServiceMonitor finds each of them once, the
NetworkPolicies let scrapes in and nothing more, and the alert rules and the dashboard's queries
are PromQL that promtool accepts, over series the code exports, doing what their names say.

promtool is Debian's prometheus package (`make promtool` installs it); without it the tests that
need it skip, or fail under CI=true (tests/prerequisites.py). Three renders, made once, serve all
but the refusals.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess

import pytest
import yaml
from k8s_support import CHART, KUBE_VERSIONS, REPO, refusal, split_manifests, validate_strict
from prerequisites import require

from fedlab.preflight import PROMTOOL, promtool_path
from test_helm_chart import by_kind, fedlab_command, one, pod_labels, pod_spec, reachable, workloads

ROLES = ("source", "warehouse", "load")
PORT = 9464
DASHBOARD = CHART / "dashboards" / "fedlab.json"
EXPORTERS = [REPO / "source_node" / "metrics.py", REPO / "warehouse" / "metrics.py", REPO / "loadgen" / "metrics.py"]
PROMETHEUS = {"app.kubernetes.io/name": "prometheus"}

# Everything on: a second warehouse keeping a second view, the ServiceMonitor, the rules with a
# threshold of their own, and one peer allowed to scrape.
MONITORED = {
    "views": [{"name": "big_orders", "view": "SELECT o.o_orderkey, o.o_total FROM orders o", "warehouse": "wh2"}],
    "warehouses": [{"name": "wh2"}],
    "metrics": {"serviceMonitor": {"enabled": True, "interval": "30s", "labels": {"release": "kube-prometheus-stack"}},
                "rules": {"enabled": True, "lagSeconds": 45, "lagFor": "3m"},
                "scrapeFrom": [{"podSelector": {"matchLabels": PROMETHEUS}}]},
}
# Metrics off: whatever else asks for them.
UNMONITORED = {"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}, "rules": {"enabled": True},
                           "scrapeFrom": [{"podSelector": {"matchLabels": PROMETHEUS}}]}}


@pytest.fixture(scope="session")
def renders(helm, tmp_path_factory):
    """name -> the manifests of the defaults, of MONITORED and of UNMONITORED."""
    home, folder = tmp_path_factory.mktemp("helm-home"), tmp_path_factory.mktemp("metrics-values")
    out = {"default": split_manifests(helm.template([], home=home))}
    for name, values in [("monitored", MONITORED), ("unmonitored", UNMONITORED)]:
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump(values))
        out[name] = split_manifests(helm.template([path], home=home))
    return out


@pytest.fixture(scope="session")
def promtool():
    require(PROMTOOL)
    return promtool_path()


def run_promtool(promtool, *args) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *map(str, args)], capture_output=True, text=True, timeout=60)


def role_pods(docs):
    """(role, workload) of every pod whose container runs `fedlab source|warehouse|load`."""
    found = []
    for doc in workloads(docs):
        argv = fedlab_command(pod_spec(doc)["containers"][0])
        if argv[:1] == ["fedlab"] and argv[1] in ROLES:
            found.append((argv[1], doc))
    return found


def pod_annotations(doc) -> dict:
    meta = doc["metadata"] if doc["kind"] == "Pod" else doc["spec"]["template"]["metadata"]
    return meta.get("annotations") or {}


def container_ports(doc) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for c in pod_spec(doc)["containers"] for p in c.get("ports", [])}


def role_arguments(role, doc) -> argparse.Namespace:
    """The container's command line as the role's own parser reads it."""
    from fedlab.roles import load, source_role, warehouse_role

    parser = argparse.ArgumentParser()
    {"source": source_role, "warehouse": warehouse_role, "load": load}[role].add_arguments(parser)
    return parser.parse_args(fedlab_command(pod_spec(doc)["containers"][0])[2:])


def alert_rules(docs) -> dict:
    """The PrometheusRule's spec: a rule file, as the chart rendered it."""
    return one(docs, "PrometheusRule", "fedlab")["spec"]


def rule_expressions(docs) -> list[str]:
    return [r["expr"] for group in alert_rules(docs)["groups"] for r in group["rules"]]


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_queries(board) -> list[str]:
    """Every PromQL expression of the dashboard: its panels', its annotations' and, inside
    label_values(...), its variables'."""
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    queries += [a["expr"] for a in board["annotations"]["list"] if "expr" in a]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["query"]["query"])
            assert inner, variable["query"]
            queries.append(inner.group(1))
    return queries


def as_promql(grafana_query: str) -> str:
    """A Grafana query with its variables replaced by what Prometheus would receive."""
    query = re.sub(r"\$__(rate_interval|interval|range)\b", "5m", grafana_query)
    return re.sub(r"\$\{?\w+\}?", ".*", query)   # $namespace, $view: inside regex matchers


def exported_series() -> set[str]:
    """The series names the exporters' Collectors produce: a gauge's family name, a counter's
    with _total, a histogram's with _bucket, _sum and _count."""
    text = "\n".join(p.read_text() for p in EXPORTERS)
    names = set()
    for kind, name in re.findall(r'series\(\s*(Counter|Gauge)MetricFamily,\s*"(fedlab_\w+)"', text):
        names.add(name + "_total" if kind == "Counter" else name)
    for name in re.findall(r'histogram\(\s*"(fedlab_\w+)"', text):
        names |= {name + "_bucket", name + "_sum", name + "_count"}
    return names


# ---- every role's pod serves /metrics, and says so ----

def test_every_role_pod_serves_metrics_and_carries_the_scrape_annotations(renders):
    for name, roles in [("default", ["source"] * 3 + ["warehouse", "load"]),
                        ("monitored", ["source"] * 3 + ["warehouse"] * 2 + ["load"])]:
        pods = role_pods(renders[name])
        assert sorted(role for role, _ in pods) == sorted(roles), name
        for role, doc in pods:
            where = f"{name}: {doc['kind']}/{doc['metadata']['name']}"
            assert pod_annotations(doc).items() >= {"prometheus.io/scrape": "true", "prometheus.io/port": str(PORT),
                                                    "prometheus.io/path": "/metrics"}.items(), where
            assert container_ports(doc).get("metrics") == PORT, where
            assert role_arguments(role, doc).metrics_port == PORT, where


def test_no_other_pod_opens_a_metrics_port(renders):
    roles = {id(doc) for _, doc in role_pods(renders["monitored"])}
    others = [d for d in workloads(renders["monitored"]) if id(d) not in roles]
    assert {pod_labels(d)["app.kubernetes.io/component"] for d in others} >= {"ray-head", "check", "spark-executor"}
    for doc in others:
        assert "metrics" not in container_ports(doc) and "prometheus.io/scrape" not in pod_annotations(doc)


def test_with_metrics_off_nothing_serves_or_scrapes_them(renders):
    docs = renders["unmonitored"]
    for role, doc in role_pods(docs):
        assert not any(k.startswith("prometheus.io/") for k in pod_annotations(doc)), doc["metadata"]["name"]
        assert "metrics" not in container_ports(doc)
        assert role_arguments(role, doc).metrics_port is None
    assert not [s for s in by_kind(docs, "Service") if any(p["name"] == "metrics" for p in s["spec"]["ports"])]
    assert not by_kind(docs, "ServiceMonitor") and not by_kind(docs, "PrometheusRule")
    names = {d["metadata"]["name"] for d in docs}
    assert not names & {"fedlab-dashboard", "fedlab-metrics", "fedlab-load"}


# ---- the ServiceMonitor ----

def test_the_service_monitor_scrapes_each_role_pod_once_through_its_services_metrics_port(renders):
    docs = renders["monitored"]
    monitor = one(docs, "ServiceMonitor", "fedlab")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": ["fedlab"]}
    assert spec["endpoints"] == [{"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "30s"}]
    services = by_kind(docs, "Service")
    selected = {s["metadata"]["name"] for s in services
                if spec["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()}
    with_port = {s["metadata"]["name"]: s for s in services if any(p["name"] == "metrics" for p in s["spec"]["ports"])}
    assert selected == set(with_port) == {"fedlab-src-s1", "fedlab-src-s2", "fedlab-src-s3", "fedlab-warehouse",
                                          "fedlab-wh-wh2", "fedlab-load"}
    # each role pod behind exactly one of them, whose metrics port leads to the pod's
    for _, doc in role_pods(docs):
        behind = [name for name, s in with_port.items() if s["spec"]["selector"].items() <= pod_labels(doc).items()]
        assert len(behind) == 1, (doc["metadata"]["name"], behind)
        port = next(p for p in with_port[behind[0]]["spec"]["ports"] if p["name"] == "metrics")
        assert port["targetPort"] == "metrics" and port["port"] == PORT
    # the labels the alert rules name (app_kubernetes_io_component, ...) come from the pods
    assert set(spec["podTargetLabels"]) == {"app.kubernetes.io/component", "fedlab.io/source", "fedlab.io/warehouse"}


def test_the_service_monitor_and_rules_render_only_when_asked(renders):
    assert not by_kind(renders["default"], "ServiceMonitor") and not by_kind(renders["default"], "PrometheusRule")


def test_the_monitored_value_set_validates_strictly(renders):
    """Everything but the Prometheus Operator's kinds, whose schemas kubernetes-validate lacks."""
    for doc in renders["monitored"]:
        if doc["apiVersion"] != "monitoring.coreos.com/v1":
            validate_strict(doc, KUBE_VERSIONS[-1])


# ---- NetworkPolicies ----

def _pod(component, **more):
    return {"app.kubernetes.io/name": "fedlab", "app.kubernetes.io/instance": "fedlab",
            "app.kubernetes.io/component": component, **more}


def test_scrapes_from_anywhere_reach_the_metrics_port_and_nothing_else(renders):
    policies = by_kind(renders["default"], "NetworkPolicy")
    anyone = [{"app": "something-else"}, PROMETHEUS, _pod("chaos")]
    for component in ROLES:
        assert all(reachable(policies, src, _pod(component), PORT) for src in anyone), component
    for component in ("ray-head", "check", "chaos", "spark-executor"):
        assert not any(reachable(policies, src, _pod(component), PORT) for src in anyone), component
    for component, port in [("source", 50051), ("warehouse", 50052), ("warehouse", 7078), ("source", 6380),
                            ("load", 50051)]:
        assert not any(reachable(policies, src, _pod(component), port) for src in anyone), (component, port)


def test_scrape_from_names_the_only_peers_that_reach_the_metrics_port(renders):
    policies = by_kind(renders["monitored"], "NetworkPolicy")
    rule = one(policies, "NetworkPolicy", "fedlab-metrics")["spec"]["ingress"]
    assert rule == [{"ports": [{"protocol": "TCP", "port": PORT}], "from": MONITORED["metrics"]["scrapeFrom"]}]
    for component in ROLES:
        assert reachable(policies, PROMETHEUS, _pod(component), PORT)
        assert not reachable(policies, {"app": "something-else"}, _pod(component), PORT)
    assert not reachable(policies, PROMETHEUS, _pod("source"), 50051)


def test_the_policy_agent_implements_what_the_metrics_policy_uses(renders):
    """helm/netpol_agent.py runs kube-router v2.1.0, whose controller reads pod and namespace
    selectors, IP blocks, numeric ports and a rule without `from` (every source); the chart's
    metrics policy uses nothing else (no named port, no endPort)."""
    for name in ("default", "monitored"):
        policy = one(by_kind(renders[name], "NetworkPolicy"), "NetworkPolicy", "fedlab-metrics")
        for rule in policy["spec"]["ingress"]:
            assert all(isinstance(p["port"], int) and "endPort" not in p for p in rule["ports"])
            assert all(set(peer) <= {"podSelector", "namespaceSelector", "ipBlock"} for peer in rule.get("from", []))


# ---- the dashboard ----

def test_the_dashboard_ships_in_a_configmap_for_grafanas_sidecar(renders):
    cm = one(renders["default"], "ConfigMap", "fedlab-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"] == {"fedlab.json": DASHBOARD.read_text()}


def test_every_dashboard_query_goes_to_the_datasource_variable():
    board = dashboard()
    variable = next(v for v in board["templating"]["list"] if v["name"] == "datasource")
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    via = {"type": "prometheus", "uid": "${datasource}"}
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == via and panel["targets"], panel["title"]
            assert all(t["datasource"] == via for t in panel["targets"]), panel["title"]
    for annotation in board["annotations"]["list"]:
        if not annotation.get("builtIn"):
            assert annotation["datasource"] == via, annotation["name"]


def test_the_dashboard_shows_lag_staleness_throughput_subqueries_delta_and_faults():
    board = dashboard()
    panels = " ".join(t["expr"] for p in board["panels"] for t in p.get("targets", []))
    for quantile in ("0.5", "0.99"):
        for histogram in ("staleness_seconds", "subquery_seconds", "delta_commit_seconds"):
            assert f"histogram_quantile({quantile}, sum by (le, " in panels
            assert f"fedlab_warehouse_{histogram}_bucket" in panels
    for series in ("fedlab_warehouse_lag_versions", "fedlab_warehouse_lag_seconds", "rate(fedlab_source_commits_total",
                   "rate(fedlab_warehouse_applied_transactions_total", "rate(fedlab_load_offered_total",
                   "rate(fedlab_load_committed_total", "rate(fedlab_load_rejected_total",
                   "fedlab_warehouse_subqueries_in_flight", "fedlab_warehouse_delta_commit_failures_total"):
        assert series in panels, series
    faults = [a["expr"] for a in board["annotations"]["list"] if "expr" in a]
    assert any("fedlab_source_fault_probability" in e and e.endswith("> 0") for e in faults)


# ---- the alert rules and every query: PromQL over series the code exports ----

def test_the_alert_rules_as_rendered_pass_promtool(renders, promtool, tmp_path):
    rules = alert_rules(renders["monitored"])
    path = tmp_path / "fedlab-alerts.yaml"
    path.write_text(yaml.safe_dump(rules))
    out = run_promtool(promtool, "check", "rules", path)
    assert out.returncode == 0, out.stdout + out.stderr
    alerts = {r["alert"]: r for group in rules["groups"] for r in group["rules"]}
    assert {"FedlabViewLagging", "FedlabDeltaCommitsFailing", "FedlabSourceDown", "FedlabSourceNotAnswering",
            "FedlabOutboxGrowing"} <= set(alerts)
    # the thresholds come from the values, and the rules watch this release's namespace only
    assert alerts["FedlabViewLagging"]["expr"].endswith("> 45") and alerts["FedlabViewLagging"]["for"] == "3m"
    assert all('namespace="fedlab"' in r["expr"] for r in alerts.values())


def test_every_promql_expression_of_the_dashboard_and_the_rules_parses(renders, promtool, tmp_path):
    exprs = [as_promql(q) for q in dashboard_queries(dashboard())]
    exprs += rule_expressions(renders["monitored"])
    rules = [{"record": f"fedlab:expression_{i}", "expr": e} for i, e in enumerate(exprs)]
    path = tmp_path / "expressions.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "expressions", "rules": rules}]}))
    out = run_promtool(promtool, "check", "rules", path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout + out.stderr


def test_every_fedlab_series_used_is_one_the_code_exports(renders):
    exported = exported_series()
    assert {"fedlab_source_dsv", "fedlab_source_commits_total", "fedlab_warehouse_staleness_seconds_bucket",
            "fedlab_load_offered_total"} <= exported   # the exporters are read as they are written
    exprs = dashboard_queries(dashboard())
    exprs += rule_expressions(renders["monitored"])
    used = {name for e in exprs for name in re.findall(r"\bfedlab_[a-z0-9_]+\b", e)}
    exporters = ", ".join(str(p.relative_to(REPO)) for p in EXPORTERS)
    assert used and not used - exported, f"not exported by {exporters}: {sorted(used - exported)}"


UNIT_TESTS = """
rule_files: [alerts.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - {series: 'fedlab_warehouse_lag_seconds{namespace="fedlab", view="warehouse", source="s1"}', values: '90x20'}
      - {series: 'fedlab_warehouse_lag_seconds{namespace="fedlab", view="warehouse", source="s2"}', values: '0x20'}
      - {series: 'fedlab_warehouse_lag_seconds{namespace="other", view="warehouse", source="s1"}', values: '900x20'}
      - {series: 'fedlab_warehouse_delta_commits_failing{namespace="fedlab", view="warehouse"}', values: '0 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16'}
      - {series: 'up{namespace="fedlab", app_kubernetes_io_component="source", fedlab_io_source="s2", instance="10.0.0.2:9464"}', values: '1 1 0x18'}
      - {series: 'up{namespace="fedlab", app_kubernetes_io_component="warehouse", fedlab_io_warehouse="warehouse", instance="10.0.0.9:9464"}', values: '1x20'}
      - {series: 'fedlab_warehouse_subqueries_in_flight{namespace="fedlab", view="warehouse", source="s3"}', values: '2x20'}
      - {series: 'fedlab_warehouse_subquery_seconds_count{namespace="fedlab", view="warehouse", source="s3"}', values: '5x20'}
      - {series: 'fedlab_warehouse_subqueries_in_flight{namespace="fedlab", view="warehouse", source="s1"}', values: '2x20'}
      - {series: 'fedlab_warehouse_subquery_seconds_count{namespace="fedlab", view="warehouse", source="s1"}', values: '0+3x20'}
      - {series: 'fedlab_source_outbox_backlog{namespace="fedlab", source="s1", subscriber="wh2"}', values: '0+10x20'}
      - {series: 'fedlab_source_outbox_backlog{namespace="fedlab", source="s1", subscriber="warehouse"}', values: '3 5 2 4 1 3 2 5 3 1 4 2 3 5 2 4 1 3 2 5 3'}
    alert_rule_test:
      - {eval_time: 1m, alertname: FedlabViewLagging, exp_alerts: []}
      - eval_time: 15m
        alertname: FedlabViewLagging
        exp_alerts: [{exp_labels: {severity: warning, namespace: fedlab, view: warehouse, source: s1}}]
      - {eval_time: 3m, alertname: FedlabDeltaCommitsFailing, exp_alerts: []}
      - eval_time: 15m
        alertname: FedlabDeltaCommitsFailing
        exp_alerts: [{exp_labels: {severity: critical, namespace: fedlab, view: warehouse}}]
      - {eval_time: 3m, alertname: FedlabSourceDown, exp_alerts: []}
      - eval_time: 15m
        alertname: FedlabSourceDown
        exp_alerts:
          - exp_labels: {severity: critical, namespace: fedlab, app_kubernetes_io_component: source,
                         fedlab_io_source: s2, instance: "10.0.0.2:9464"}
      - {eval_time: 15m, alertname: FedlabWarehouseDown, exp_alerts: []}
      - eval_time: 15m
        alertname: FedlabSourceNotAnswering
        exp_alerts: [{exp_labels: {severity: warning, namespace: fedlab, view: warehouse, source: s3}}]
      - {eval_time: 5m, alertname: FedlabOutboxGrowing, exp_alerts: []}
      - eval_time: 15m
        alertname: FedlabOutboxGrowing
        exp_alerts: [{exp_labels: {severity: warning, namespace: fedlab, source: s1, subscriber: wh2}}]
"""


def test_each_alert_fires_on_the_trouble_it_names_and_not_before(renders, promtool, tmp_path):
    """promtool's rule unit tests over made-up series, against the rules as rendered (lagSeconds
    45 for 3m, the other thresholds the defaults); the annotations are left out, which promtool
    would otherwise compare word for word."""
    rules = alert_rules(renders["monitored"])
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "alerts.yaml").write_text(yaml.safe_dump(rules))
    (tmp_path / "tests.yaml").write_text(UNIT_TESTS)
    out = run_promtool(promtool, "test", "rules", tmp_path / "tests.yaml")
    assert out.returncode == 0, out.stdout + out.stderr


# ---- values the chart refuses ----

@pytest.mark.parametrize("sets, message", [
    (["metrics.port=50051"], "metrics.port: 50051 is taken by another port of a fedlab pod"),
    (["metrics.port=10050"], "metrics.port: 10050 is taken by another port of a fedlab pod"),
    (["metrics.port=80"], "/metrics/port"),
    (["metrics.rules.lagFor=five minutes"], "/metrics/rules/lagFor"),
])
def test_a_metrics_port_or_duration_the_pods_cannot_use_is_refused(helm, tmp_path, sets, message):
    said = refusal(helm, tmp_path, sets)
    assert message in said or message.strip("/").replace("/", ".") in said, said
