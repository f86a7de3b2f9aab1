"""The Kubernetes chaos client (roles/chaos_k8s.py) against recorded API responses.

The kubernetes client runs for real (URL and query building, body serialization, deserialization
into V1 models, ApiException on error statuses); only urllib3's pool manager underneath it answers
from tests/k8s_recorded/ (see k8s_support.FakeKubeAPI).
"""

from __future__ import annotations

import copy
import json

import pytest
from k8s_support import FakeKubeAPI, Recorded, fake_core_api, recorded, split_manifests

from fedlab.fedmodel.errors import ModelError
from fedlab.live.run import parse_chaos
from fedlab.roles import chaos_k8s
from fedlab.roles.chaos_k8s import ChaosClient, ChaosError, FaultRule, KillRule, Plan, Schedule, parse_duration

NS = "fedlab"
PODS = f"/api/v1/namespaces/{NS}/pods"
FAULTS = f"/api/v1/namespaces/{NS}/configmaps/fedlab-faults"
SOURCES = "app.kubernetes.io/instance=fedlab,app.kubernetes.io/component=source"
WAREHOUSE = "app.kubernetes.io/instance=fedlab,app.kubernetes.io/component=warehouse"


class FakeClock:
    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        assert seconds > 0
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


@pytest.fixture
def api():
    fake = FakeKubeAPI()
    fake.add("GET", PODS, recorded("list-pods-sources"))
    for name in ("fedlab-src-s1-0", "fedlab-src-s2-0", "fedlab-src-s4-0", "fedlab-warehouse-0"):
        fake.add("DELETE", f"{PODS}/{name}", recorded(f"delete-pod-{name}"))
    fake.add("GET", FAULTS, recorded("read-configmap-faults"))
    fake.add("PATCH", FAULTS, recorded("patch-configmap-faults"))
    return fake


def deletes(fake):
    return [r for r in fake.requests if r["method"] == "DELETE"]


# ---- schedules, durations, plans ----

@pytest.mark.parametrize("text,seconds", [("500ms", 0.5), ("20s", 20), ("1.5m", 90), ("2h", 7200),
                                          ("12", 12), (3, 3.0), ("0s", 0)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten", "5d", "-3s", "1.s"])
def test_bad_durations_are_rejected(text):
    with pytest.raises(ChaosError, match="bad duration"):
        parse_duration(text)


def test_schedules():
    assert list(Schedule.parse("once").times(60)) == [0.0]
    assert list(Schedule.parse("once@30s").times(60)) == [30.0]
    assert list(Schedule.parse("once@90s").times(60)) == []
    assert list(Schedule.parse("every:20s").times(60)) == [20.0, 40.0]
    assert list(Schedule.parse("every:20s@5s").times(60)) == [5.0, 25.0, 45.0]
    assert list(Schedule.parse("every:250ms").times(1)) == [0.25, 0.5, 0.75]


@pytest.mark.parametrize("text", ["sometimes", "every:", "every:0s", "once@x", "every20s"])
def test_bad_schedules_are_rejected(text):
    with pytest.raises(ChaosError):
        Schedule.parse(text)


def test_a_repeating_schedule_needs_a_duration():
    with pytest.raises(ChaosError, match="duration"):
        list(Schedule.parse("every:20s").times(None))


def test_timeline_orders_faults_before_kills_at_the_same_time():
    plan = Plan.from_dict({
        "kills": [{"selector": SOURCES, "schedule": "every:20s", "count": 1},
                  {"selector": WAREHOUSE, "schedule": "once@40s"}],
        "faults": [{"schedule": "once@40s", "rates": {"drop": 0.1}}]})
    steps = [(t, r.describe()) for t, r in plan.timeline(60)]
    assert steps == [(20.0, f"kill 1 of [{SOURCES}] every:20s"),
                     (40.0, "faults {'drop': 0.1} once@40s"),
                     (40.0, f"kill 1 of [{SOURCES}] every:20s"),
                     (40.0, f"kill 1 of [{WAREHOUSE}] once@40s")]


@pytest.mark.parametrize("doc,message", [
    ({"kills": [{"schedule": "once"}]}, "selector"),
    ({"kills": [{"selector": "a=b", "count": 0}]}, "count"),
    ({"faults": [{"schedule": "once", "rates": {"drop": 1.5}}]}, "drop is a probability"),
    ({"faults": [{"schedule": "once", "rates": {"loss": 0.1}}]}, "unknown fault rate 'loss'"),
    ({"faults": [{"schedule": "once", "rates": {"reorder": 0.1}}]}, "unknown fault rate 'reorder'"),
    ({"faults": [{"schedule": "once", "rates": {"answer_delay_mean": -5}}]}, "finite and not negative"),
    ({"faults": [{"schedule": "once", "rates": {"drop": "high"}}]}, "must be a number"),
    ({"kill": []}, "unknown keys"),
])
def test_bad_plans_are_rejected_with_a_clear_message(doc, message):
    with pytest.raises(ChaosError, match=message):
        Plan.from_dict(doc)


# ---- rate text: --faults reads it as fedlab run --chaos does ----

@pytest.mark.parametrize("text,rates", [
    ("drop=0.05, duplicate = 0.01,delay_mean=0.2", {"drop": 0.05, "duplicate": 0.01, "delay_mean": 0.2}),
    ("reorder=0.2,answer_delay=0.5,notification_reorder=0",
     {"delay_mean": 0.2, "answer_delay_mean": 0.5, "notification_delay_mean": 0.0}),
    ("notification_drop=1,answer_delay_mean=0.1,", {"notification_drop": 1.0, "answer_delay_mean": 0.1}),
])
def test_chaos_k8s_and_fedlab_run_read_the_same_rates(text, rates):
    assert chaos_k8s.parse_rates(text) == rates
    assert parse_chaos(text) == (rates, {})


@pytest.mark.parametrize("text,message", [
    ("loss=0.1", "unknown fault rate 'loss'; use drop, duplicate, delay_mean, "
                 "optionally prefixed by notification_ or answer_"),
    ("answer_reorder=soon", "answer_reorder must be a number, got 'soon'"),
    ("drop=1.5", "drop is a probability between 0 and 1, got 1.5"),
    ("delay=-1", "delay is a mean delay in seconds, finite and not negative, got -1.0"),
    ("delay=inf", "delay is a mean delay in seconds, finite and not negative, got inf"),
    ("drop=0.1,duplicate", "bad fault rate 'duplicate': use name=value, e.g. drop=0.05"),
])
def test_chaos_k8s_and_fedlab_run_refuse_the_same_rates_alike(text, message):
    with pytest.raises(ChaosError) as k8s:
        chaos_k8s.parse_rates(text)
    with pytest.raises(ModelError) as run:
        parse_chaos(text)
    assert (str(k8s.value), str(run.value)) == (f"faults: {message}", f"--chaos: {message}")


# ---- against recorded API responses ----

def test_kill_lists_by_selector_and_deletes_with_grace_period_zero(api):
    chaos = ChaosClient(fake_core_api(api), NS, seed=7)
    event = chaos.kill(KillRule(SOURCES, Schedule.parse("once"), count=1))

    listing = api.requests[0]
    assert listing["method"] == "GET" and listing["path"] == PODS
    assert listing["query"]["labelSelector"] == SOURCES
    # s3 is terminating and s5 has failed: only s1, s2 and s4 are candidates
    assert event["candidates"] == 3
    assert len(event["victims"]) == 1 and event["victims"][0] in {"fedlab-src-s1-0", "fedlab-src-s2-0", "fedlab-src-s4-0"}
    (delete,) = deletes(api)
    assert delete["path"] == f"{PODS}/{event['victims'][0]}"
    assert delete["query"] == {"gracePeriodSeconds": "0"}
    assert delete["body"] == {"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
    assert event["results"] == {event["victims"][0]: "deleted"}


def test_the_recorded_pods_come_back_as_client_models(api):
    pods = ChaosClient(fake_core_api(api), NS).candidates(SOURCES)
    assert [p.metadata.name for p in pods] == ["fedlab-src-s1-0", "fedlab-src-s2-0", "fedlab-src-s4-0"]
    assert pods[0].metadata.labels["fedlab.io/source"] == "s1"
    assert pods[0].status.phase == "Running" and pods[0].status.pod_ip == "10.244.1.11"
    assert pods[0].spec.containers[0].security_context.read_only_root_filesystem is True


def test_victims_are_chosen_reproducibly_from_the_seed(api):
    def victims(seed, count):
        fake = FakeKubeAPI(routes={k: list(v) for k, v in api.routes.items()})
        return ChaosClient(fake_core_api(fake), NS, seed=seed).kill(
            KillRule(SOURCES, Schedule.parse("once"), count=count))["victims"]

    assert victims(3, 1) == victims(3, 1)
    assert len({tuple(victims(s, 1)) for s in range(20)}) > 1  # the seed matters
    assert victims(1, 2) == sorted(victims(1, 2)) and len(victims(1, 2)) == 2
    # asking for more than there are deletes every candidate once
    assert victims(1, 10) == ["fedlab-src-s1-0", "fedlab-src-s2-0", "fedlab-src-s4-0"]


def test_a_pod_that_is_already_gone_is_reported_not_fatal(api):
    api.add("DELETE", f"{PODS}/fedlab-src-s2-0", recorded("delete-pod-not-found"))
    api.add("GET", PODS, recorded("list-pods-sources"))
    event = ChaosClient(fake_core_api(api), NS, seed=0).kill(KillRule(SOURCES, Schedule.parse("once"), 3))
    assert event["results"] == {"fedlab-src-s1-0": "deleted", "fedlab-src-s2-0": "gone",
                                "fedlab-src-s4-0": "deleted"}


def test_no_matching_pods_means_no_deletion(api):
    api.add("GET", PODS, recorded("list-pods-empty"))
    event = ChaosClient(fake_core_api(api), NS).kill(KillRule(WAREHOUSE, Schedule.parse("once"), 1))
    assert event["victims"] == [] and event["candidates"] == 0
    assert deletes(api) == []


def test_missing_rbac_gives_a_clear_error(api):
    api.add("GET", PODS, recorded("list-pods-forbidden"))
    with pytest.raises(ChaosError) as err:
        ChaosClient(fake_core_api(api), NS).kill(KillRule(SOURCES, Schedule.parse("once"), 1))
    text = str(err.value)
    assert "HTTP 403" in text and "cannot list resource \"pods\"" in text and "ServiceAccount needs" in text


def test_set_faults_merges_into_the_configmap_and_bumps_the_version(api):
    chaos = ChaosClient(fake_core_api(api), NS, faults_configmap="fedlab-faults")
    new = chaos.set_faults({"drop": 0.05, "duplicate": 0.02, "delay_mean": 0.2})
    get, patch = api.requests
    assert (get["method"], get["path"]) == ("GET", FAULTS)
    assert (patch["method"], patch["path"]) == ("PATCH", FAULTS)
    assert patch["headers"]["Content-Type"] == "application/strategic-merge-patch+json"
    written = json.loads(patch["body"]["data"]["faults.json"])
    assert written == {"drop": 0.05, "duplicate": 0.02, "delay_mean": 0.2, "seed": 1, "version": 1}
    assert new == written


def test_a_missing_faults_configmap_is_a_clear_error(api):
    api.add("GET", FAULTS, recorded("read-configmap-not-found"))
    with pytest.raises(ChaosError, match="reading ConfigMap fedlab-faults: HTTP 404 configmaps \"fedlab-faults\" not found"):
        ChaosClient(fake_core_api(api), NS, faults_configmap="fedlab-faults").set_faults({"drop": 0.1})


def test_run_follows_the_schedule_and_resets_the_faults(api):
    clock = FakeClock()
    plan = Plan((KillRule(SOURCES, Schedule.parse("every:20s"), 1),
                 KillRule(WAREHOUSE, Schedule.parse("once@30s"), 1)),
                (FaultRule(Schedule.parse("once"), {"drop": 0.1, "answer_duplicate": 0.5}),), reset_faults=True)

    # answer each listing with the recorded pods its selector matches
    original = api.request

    def request(method, url, **kw):
        if method == "GET" and "component%3Dwarehouse" in url:
            api.routes[("GET", PODS)] = [recorded("list-pods-warehouse")]
        elif method == "GET" and "component%3Dsource" in url:
            api.routes[("GET", PODS)] = [recorded("list-pods-sources")]
        return original(method, url, **kw)

    api.request = request
    events = chaos_k8s.run(plan, ChaosClient(fake_core_api(api), NS, "fedlab-faults", seed=5), duration=50,
                           start_delay=10, clock=clock, sleep=clock.sleep)
    actions = [(e["t"], e["action"]) for e in events]
    assert actions == [(-10, "start"), (0.0, "faults"), (20.0, "kill"), (30.0, "kill"), (40.0, "kill"),
                       (50, "faults"), (50, "end")]
    assert clock.sleeps == [10, 20, 10, 10, 10]          # start delay, then up to each action and the end
    assert events[3]["victims"] == ["fedlab-warehouse-0"]
    assert events[5]["reset"] is True
    patches = [json.loads(r["body"]["data"]["faults.json"]) for r in api.requests if r["method"] == "PATCH"]
    assert patches[0] == {"drop": 0.1, "answer_duplicate": 0.5, "duplicate": 0, "delay_mean": 0,
                          "seed": 1, "version": 1}
    # the reset zeroes every rate of the file it reads (the recorded one: the plain rates)
    assert {k: v for k, v in patches[-1].items() if k not in ("seed", "version")} == {
        "drop": 0, "duplicate": 0, "delay_mean": 0}
    assert [r["path"] for r in deletes(api)][1] == f"{PODS}/fedlab-warehouse-0"


def test_main_runs_a_plan_file_and_prints_json_lines(api, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"kills": [{"selector": SOURCES, "schedule": "once@1s", "count": 2}],
                                "faults": [{"schedule": "once", "rates": {"duplicate": 0.2}}],
                                "reset_faults": False}))
    log = tmp_path / "chaos.jsonl"
    clock = FakeClock()
    rc = chaos_k8s.main(["--namespace", NS, "--plan", str(plan), "--faults-configmap", "fedlab-faults",
                         "--duration", "5s", "--seed", "11", "--log", str(log)],
                        core_api=fake_core_api(api), clock=clock, sleep=clock.sleep)
    assert rc == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["action"] for e in lines] == ["start", "faults", "kill", "end"]
    assert len(lines[2]["victims"]) == 2
    assert [json.loads(line) for line in log.read_text().splitlines()] == lines


def not_ready(name: str) -> Recorded:
    """A recorded pod list with every pod's Ready condition False."""
    doc = recorded(name)
    body = copy.deepcopy(doc.body)
    for pod in body["items"]:
        for condition in pod["status"]["conditions"]:
            if condition["type"] == "Ready":
                condition["status"] = "False"
    return Recorded(doc.status, body)


def test_wait_ready_polls_until_every_matching_pod_is_ready():
    fake = FakeKubeAPI()
    fake.add("GET", PODS, recorded("list-pods-empty"), not_ready("list-pods-warehouse"), recorded("list-pods-warehouse"))
    clock = FakeClock()
    names = ChaosClient(fake_core_api(fake), NS, None, 1).wait_ready(WAREHOUSE, 60, clock, clock.sleep)
    assert names == ["fedlab-warehouse-0"] and clock.sleeps == [2.0, 2.0]


def test_wait_ready_gives_up_naming_the_pods_it_waited_for():
    fake = FakeKubeAPI()
    fake.add("GET", PODS, not_ready("list-pods-warehouse"))
    clock = FakeClock()
    with pytest.raises(ChaosError, match=r"not Ready within 5 s \(fedlab-warehouse-0\)"):
        ChaosClient(fake_core_api(fake), NS, None, 1).wait_ready(WAREHOUSE, 5, clock, clock.sleep)


def test_main_counts_the_schedule_from_when_the_federation_is_ready(capsys):
    fake = FakeKubeAPI()
    fake.add("GET", PODS, not_ready("list-pods-warehouse"), recorded("list-pods-warehouse"))
    fake.add("DELETE", f"{PODS}/fedlab-warehouse-0", recorded("delete-pod-fedlab-warehouse-0"))
    clock = FakeClock()
    rc = chaos_k8s.main(["--namespace", NS, "--wait-ready", WAREHOUSE, "--selector", WAREHOUSE,
                         "--schedule", "once@10s", "--duration", "20s"],
                        core_api=fake_core_api(fake), clock=clock, sleep=clock.sleep)
    assert rc == 0
    events = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [e["action"] for e in events] == ["ready", "start", "kill", "end"]
    assert events[0]["pods"] == ["fedlab-warehouse-0"]
    assert clock.sleeps[0] == 2.0 and sum(clock.sleeps[1:]) == pytest.approx(20)   # the schedule after the wait


def test_main_single_rule_from_flags(api, capsys):
    clock = FakeClock()
    rc = chaos_k8s.main(["--namespace", NS, "--selector", WAREHOUSE, "--schedule", "once"],
                        core_api=fake_core_api(FakeKubeAPI(routes={
                            ("GET", PODS): [recorded("list-pods-warehouse")],
                            ("DELETE", f"{PODS}/fedlab-warehouse-0"): [recorded("delete-pod-fedlab-warehouse-0")]})),
                        clock=clock, sleep=clock.sleep)
    assert rc == 0
    kill = [json.loads(x) for x in capsys.readouterr().out.splitlines()][1]
    assert kill["victims"] == ["fedlab-warehouse-0"] and kill["results"] == {"fedlab-warehouse-0": "deleted"}


@pytest.mark.parametrize("argv,message", [
    (["--namespace", NS], "nothing to do"),
    (["--namespace", NS, "--selector", SOURCES, "--schedule", "every:10s"], "--duration"),
    (["--namespace", NS, "--faults", "drop=0.1"], "--faults-configmap"),
    (["--namespace", NS, "--faults", "drop=2", "--faults-configmap", "x"], "probability"),
    (["--namespace", NS, "--faults", "loss=0.1", "--faults-configmap", "x"], "unknown fault rate 'loss'"),
    (["--namespace", NS, "--schedule", "once"], "--selector"),
])
def test_main_rejects_bad_arguments_before_touching_the_cluster(argv, message, capsys):
    untouched = FakeKubeAPI()
    assert chaos_k8s.main(argv, core_api=fake_core_api(untouched)) == 2
    assert message in capsys.readouterr().err
    assert untouched.requests == []


def test_the_charts_chaos_job_and_plan_are_understood_by_the_client(helm, tmp_path):
    """The arguments and the plan the chart renders parse with this client's parser and plan loader."""
    docs = split_manifests(helm.template([helm.CHART / "ci" / "tls-values.yaml"], home=tmp_path))
    job = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"].endswith("-chaos"))
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["fedlab", "chaos-k8s"]
    args = chaos_k8s.build_parser().parse_args(
        [a.replace("$(POD_NAMESPACE)", NS) for a in container["args"][2:]])
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-chaos"))
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(cm["data"]["plan.json"])
    args.plan = str(plan_file)
    plan = chaos_k8s.plan_from_args(args)
    assert args.faults_configmap == "fedlab-faults" and args.namespace == NS
    assert [k.selector for k in plan.kills] == [SOURCES, SOURCES + ",fedlab.io/source=s2", WAREHOUSE]
    assert plan.faults[0].rates == {"drop": 0.1, "duplicate": 0.05, "delay_mean": 0.3} and plan.reset_faults is True
    timeline = plan.timeline(parse_duration(args.duration))
    assert timeline and all(t < 120 for t, _ in timeline)
    # every selector the plan uses matches the labels the chart puts on the pods it targets
    pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
            for d in docs if d["kind"] == "StatefulSet"}
    for rule in plan.kills:
        wanted = dict(part.split("=") for part in rule.selector.split(","))
        assert any(all(labels.get(k) == v for k, v in wanted.items()) for labels in pods.values()), rule.selector
    # the Role lets the chaos ServiceAccount do exactly what the client does
    role = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-chaos"))
    rules = {tuple(r["resources"]): set(r["verbs"]) for r in role["rules"]}
    assert rules[("pods",)] == {"get", "list", "delete"}
    assert rules[("configmaps",)] == {"get", "patch", "update"}
    assert next(r for r in role["rules"] if r["resources"] == ["configmaps"])["resourceNames"] == ["fedlab-faults"]
