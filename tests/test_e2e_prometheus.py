"""The e2e's own Prometheus (helm/e2e_prometheus.py), off the cluster: the configuration it
generates, with the chart's alert rules as the e2e renders them, is one Prometheus accepts; the
pods it is handed as the Kubernetes discovery would hand them are scraped as the chart's
annotations say, once each, with the labels the alert rules name; and the series it requires are
the ones docs/operations.md lists, which the code exports."""

from __future__ import annotations

import json
import time

import pytest
import yaml
from k8s_support import CHART, REPO, load_fedlab_helm, load_helm_script
from test_chart_metrics import exported_series, promtool, run_promtool  # noqa: F401  (promtool: a fixture)

from fedlab.fedio.metrics_endpoint import MetricsEndpoint, new_registry


def pod(name: str, phase: str, labels: dict, annotations: dict, ports: list[int]) -> dict:
    return {"metadata": {"name": name, "namespace": "fedlab-e2e", "labels": labels, "annotations": annotations},
            "spec": {"containers": [{"name": "main", "ports": [{"containerPort": p} for p in ports]}]},
            "status": {"phase": phase, "podIP": "127.0.0.1"}}


def e2e_prometheus():
    load_fedlab_helm()
    load_helm_script("e2e_cluster.py", "e2e_cluster")   # both imported by it under these names
    return load_helm_script("e2e_prometheus.py", "e2e_prometheus")


def e2e_rules(e2e, tmp_path) -> dict:
    return e2e.alert_rules([CHART / "ci" / "e2e-values.yaml", CHART / "ci" / "nodes-values.yaml"],
                           tmp_path / "helm", "e2e", "fedlab-e2e")


def test_the_config_with_the_rules_the_e2e_renders_passes_promtool(helm, promtool, tmp_path):  # noqa: F811
    e2e = e2e_prometheus()
    rules = e2e_rules(e2e, tmp_path)
    exprs = [r["expr"] for group in rules["groups"] for r in group["rules"]]
    assert len(exprs) >= 5 and all('namespace="fedlab-e2e"' in e for e in exprs)
    rule_file, targets, config = tmp_path / "rules.yaml", tmp_path / "pods.json", tmp_path / "prometheus.yml"
    rule_file.write_text(yaml.safe_dump(rules))
    targets.write_text("[]")
    config.write_text(yaml.safe_dump(e2e.scrape_config(targets, rule_file)))
    out = run_promtool(promtool, "check", "config", config)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in out.stdout + out.stderr


def test_the_series_the_e2e_requires_are_the_documented_ones_the_code_exports():
    text = (REPO / "docs" / "operations.md").read_text()
    required = e2e_prometheus().documented_series(text)
    assert len(required) == text.count("\n| `fedlab_") and len(set(required)) == len(required)
    assert set(required) <= exported_series()


@pytest.mark.slow
def test_an_annotated_running_pod_is_scraped_once_with_the_labels_the_rules_name(helm, promtool, tmp_path):  # noqa: F811
    e2e = e2e_prometheus()
    page = MetricsEndpoint.serve(new_registry(), "127.0.0.1", 0)
    annotated = {"prometheus.io/scrape": "true", "prometheus.io/port": str(page.port), "prometheus.io/path": "/metrics"}
    source = {"app.kubernetes.io/component": "source", "fedlab.io/source": "s1"}
    pods = [pod("e2e-fedlab-src-s1-0", "Running", source, annotated, [50051, page.port]),   # two ports, one target
            pod("e2e-fedlab-load-1-x", "Succeeded", {"app.kubernetes.io/component": "load"}, annotated, [page.port]),
            pod("e2e-fedlab-ray-head-y", "Running", {"app.kubernetes.io/component": "ray-head"}, {}, [page.port])]
    prometheus = e2e.Prometheus.start(tmp_path / "prometheus", e2e_rules(e2e, tmp_path), tmp_path / "prometheus.log")
    try:
        prometheus.targets.write_text(json.dumps([group for p in pods for group in e2e.pod_targets(p)]))
        deadline = time.monotonic() + 30
        while True:
            active = prometheus.api("targets", "the targets", state="active")["activeTargets"]
            rules = [r for g in prometheus.api("rules", "the rules")["groups"] for r in g["rules"]]
            if (active and all(t["health"] == "up" for t in active) and all(r["health"] != "unknown" for r in rules)) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert [t["labels"]["pod"] for t in active] == ["e2e-fedlab-src-s1-0"], active
        assert active[0]["health"] == "up" and active[0]["scrapeUrl"] == f"http://127.0.0.1:{page.port}/metrics"
        up = prometheus.query('up{namespace="fedlab-e2e", app_kubernetes_io_component="source", fedlab_io_source="s1"}',
                              "the source's up")
        assert [r["value"][1] for r in up] == ["1"]
        assert rules and all(r["health"] == "ok" for r in rules), rules
    finally:
        prometheus.stop()
        page.close()
