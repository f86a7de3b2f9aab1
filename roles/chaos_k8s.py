"""Chaos on Kubernetes: delete federation pods and set message-fault rates on a schedule.

This is what the Helm chart's chaos Job runs (`fedlab chaos-k8s ...`, which hands its arguments
to `main`). It talks to the Kubernetes API through the official `kubernetes` client:

- kill rules: every time a rule's schedule fires, list the pods matching its label selector,
  leave out pods that are already terminating or finished, pick `count` of them at random
  (seeded), and delete each with grace period 0 (no SIGTERM courtesy: a crash, as far as the
  process can tell). A pod that is gone by the time it is deleted is reported, not an error.
- fault rules: merge the rule's rates into faults.json of the faults ConfigMap (the file that the
  sources and the warehouse mount and watch) and bump its version. Rates are named as
  source_node.faults.FaultInjector.configure names them: drop and duplicate (probabilities per
  message), delay_mean (seconds; delays reorder messages), each optionally prefixed by a message
  kind (notification_drop, answer_delay_mean, ...). --faults is text read as `fedlab run --chaos`
  reads its message faults (source_node.faults.parse_rates), where reorder or delay may stand for
  delay_mean; a plan's rates, like faults.json, use the names only.
- at the end (optionally) set every fault rate back to 0, so the run can quiesce.

Schedules: `once` (at the start), `once@30s` (30 s after the start), `every:20s` (at 20 s, 40 s,
...), `every:20s@5s` (at 5 s, 25 s, ...). Offsets count from the end of --start-delay; nothing
fires at or after --duration. Durations: 250ms, 20s, 1.5m, 2h, or a bare number of seconds.

The plan comes from --plan (JSON or YAML, as the chart renders it) and/or from flags:

    fedlab chaos-k8s --namespace fedlab --selector app.kubernetes.io/component=source \\
        --schedule every:20s --duration 2m --faults drop=0.05,delay_mean=0.2 \\
        --faults-configmap fedlab-faults

`--wait-ready SELECTOR` holds the schedule until the pods matching it are all Ready (the chart
waits for the warehouse, which is Ready once it has materialised or restored the view), so that
offsets count from a federation that is up however long it took to start.

Every action is printed as one JSON line (also to --log FILE if given).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from fedlab.fedmodel.errors import ModelError
from fedlab.source_node import faults

FAULTS_FILE_KEY = "faults.json"
_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class ChaosError(Exception):
    """A plan that cannot be run, or an API answer that stops the chaos."""


# ---- durations and schedules ----

_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text) -> float:
    """Seconds in '250ms', '20s', '1.5m', '2h' or '12' (seconds)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise ChaosError(f"a duration cannot be negative: {text!r}")
        return float(text)
    m = _DURATION.match(str(text))
    if not m:
        raise ChaosError(f"bad duration {text!r}: use e.g. 500ms, 20s, 2m, 1h")
    return float(m.group(1)) * _UNIT[m.group(2)]


@dataclass(frozen=True)
class Schedule:
    """When a rule fires: at `first` seconds, then every `every` seconds (None: once)."""

    first: float = 0.0
    every: Optional[float] = None
    text: str = "once"

    @staticmethod
    def parse(text: str) -> "Schedule":
        spec = str(text).strip()
        m = re.fullmatch(r"once(?:@(.+))?", spec)
        if m:
            return Schedule(parse_duration(m.group(1)) if m.group(1) else 0.0, None, spec)
        m = re.fullmatch(r"every:([^@]+)(?:@(.+))?", spec)
        if m:
            every = parse_duration(m.group(1))
            if every <= 0:
                raise ChaosError(f"bad schedule {spec!r}: the period must be positive")
            first = parse_duration(m.group(2)) if m.group(2) else every
            return Schedule(first, every, spec)
        raise ChaosError(f"bad schedule {spec!r}: use once, once@30s, every:20s or every:20s@5s")

    def times(self, duration: Optional[float]) -> Iterator[float]:
        """Offsets at which the rule fires, before `duration` (None: no end, only for `once`)."""
        if self.every is None:
            if duration is None or self.first < duration:
                yield self.first
            return
        if duration is None:
            raise ChaosError(f"schedule {self.text!r} repeats: give the chaos a --duration")
        t = self.first
        while t < duration:
            yield t
            t += self.every


# ---- the plan ----

@dataclass(frozen=True)
class KillRule:
    selector: str
    schedule: Schedule
    count: int = 1

    def describe(self) -> str:
        return f"kill {self.count} of [{self.selector}] {self.schedule.text}"


@dataclass(frozen=True)
class FaultRule:
    schedule: Schedule
    rates: dict

    def describe(self) -> str:
        return f"faults {self.rates} {self.schedule.text}"


def validate_rates(rates: dict, where: str = "faults") -> dict:
    """The rates as the sources' fault injector checks them (source_node.faults.validate_rates)."""
    if not isinstance(rates, dict):
        raise ChaosError(f"{where}: rates must be a mapping of rate names to numbers")
    try:
        return faults.validate_rates({str(k): v for k, v in rates.items()})
    except ModelError as err:
        raise ChaosError(f"{where}: {str(err).removeprefix('faults: ')}") from None


def parse_rates(text: str) -> dict:
    """--faults: 'drop=0.05,reorder=0.2' -> rates, read as `fedlab run --chaos` reads its message
    faults (source_node.faults.parse_rates), so both take the same names and aliases."""
    try:
        return faults.parse_rates(text)
    except ModelError as err:
        raise ChaosError(str(err)) from None


@dataclass(frozen=True)
class Plan:
    kills: tuple = ()
    faults: tuple = ()
    reset_faults: bool = True

    @staticmethod
    def from_dict(doc: dict, where: str = "plan") -> "Plan":
        if not isinstance(doc, dict):
            raise ChaosError(f"{where}: must be a mapping with 'kills' and/or 'faults'")
        unknown = set(doc) - {"kills", "faults", "reset_faults"}
        if unknown:
            raise ChaosError(f"{where}: unknown keys {sorted(unknown)}")
        kills = []
        for i, k in enumerate(doc.get("kills") or []):
            if not isinstance(k, dict) or not k.get("selector"):
                raise ChaosError(f"{where}: kills[{i}] needs a label 'selector'")
            count = k.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ChaosError(f"{where}: kills[{i}].count must be a positive integer, got {count!r}")
            kills.append(KillRule(str(k["selector"]), Schedule.parse(k.get("schedule", "once")), count))
        faults = []
        entries = doc.get("faults") or []
        if isinstance(entries, dict):
            entries = [entries]
        for i, f in enumerate(entries):
            if not isinstance(f, dict):
                raise ChaosError(f"{where}: faults[{i}] must be a mapping")
            rates = f.get("rates", {k: v for k, v in f.items() if k != "schedule"})
            faults.append(FaultRule(Schedule.parse(f.get("schedule", "once")),
                                    validate_rates(rates, f"{where}: faults[{i}]")))
        return Plan(tuple(kills), tuple(faults), bool(doc.get("reset_faults", True)))

    @staticmethod
    def load(path: str) -> "Plan":
        try:
            with open(path) as fh:
                text = fh.read()
        except OSError as e:
            raise ChaosError(f"cannot read the plan {path}: {e.strerror}") from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError:
            import yaml

            doc = yaml.safe_load(text)
        return Plan.from_dict(doc, where=path)

    def timeline(self, duration: Optional[float]) -> list:
        """(offset, rule) pairs in firing order; rules firing together keep the plan's order,
        fault changes before kills."""
        events = []
        for order, rule in enumerate(self.faults):
            events += [(t, 0, order, rule) for t in rule.schedule.times(duration)]
        for order, rule in enumerate(self.kills):
            events += [(t, 1, order, rule) for t in rule.schedule.times(duration)]
        return [(t, rule) for t, _, _, rule in sorted(events, key=lambda e: e[:3])]


# ---- talking to Kubernetes ----

def _api_error(e, action: str) -> ChaosError:
    reason = ""
    try:
        reason = json.loads(e.body or "{}").get("message", "")
    except (TypeError, ValueError):
        pass
    hint = ""
    if e.status == 403:
        hint = " (the chaos ServiceAccount needs get/list/delete on pods and get/patch on the faults ConfigMap)"
    return ChaosError(f"{action}: HTTP {e.status} {reason or e.reason}{hint}")


class ChaosClient:
    """Kubernetes-side actions of the chaos, over a kubernetes.client.CoreV1Api."""

    def __init__(self, core_api, namespace: str, faults_configmap: Optional[str] = None,
                 seed: Optional[int] = None):
        self.api = core_api
        self.namespace = namespace
        self.faults_configmap = faults_configmap
        self.rng = random.Random(seed)

    def candidates(self, selector: str) -> list:
        """Pods matching the selector that are alive: not terminating, not finished."""
        from kubernetes.client.exceptions import ApiException

        try:
            pods = self.api.list_namespaced_pod(self.namespace, label_selector=selector).items
        except ApiException as e:
            raise _api_error(e, f"listing pods [{selector}] in {self.namespace}") from None
        alive = [p for p in pods
                 if p.metadata.deletion_timestamp is None
                 and (p.status is None or p.status.phase not in ("Succeeded", "Failed"))]
        return sorted(alive, key=lambda p: p.metadata.name)

    def wait_ready(self, selector: str, timeout: float, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep) -> list[str]:
        """Waits until at least one pod matches the selector and every such pod is Ready; returns
        their names. ChaosError when `timeout` seconds pass first."""
        deadline = clock() + timeout
        while True:
            pods = self.candidates(selector)
            if pods and all(_ready(p) for p in pods):
                return [p.metadata.name for p in pods]
            if clock() >= deadline:
                waiting = ", ".join(p.metadata.name for p in pods if not _ready(p)) or "no pod matches"
                raise ChaosError(f"pods [{selector}] not Ready within {timeout:g} s ({waiting})")
            sleep(_READY_POLL)

    def choose(self, pods: list, count: int) -> list:
        if len(pods) <= count:
            return list(pods)
        return sorted(self.rng.sample(pods, count), key=lambda p: p.metadata.name)

    def delete_pod(self, name: str) -> str:
        """Deletes a pod with grace period 0; returns 'deleted' or 'gone'."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_pod(
                name, self.namespace, grace_period_seconds=0,
                body=client.V1DeleteOptions(grace_period_seconds=0, propagation_policy="Background"))
        except ApiException as e:
            if e.status == 404:
                return "gone"
            raise _api_error(e, f"deleting pod {name}") from None
        return "deleted"

    def kill(self, rule: KillRule) -> dict:
        pods = self.candidates(rule.selector)
        victims = self.choose(pods, rule.count)
        results = {p.metadata.name: self.delete_pod(p.metadata.name) for p in victims}
        return {"action": "kill", "selector": rule.selector, "candidates": len(pods),
                "victims": sorted(results), "results": results}

    def read_faults(self) -> dict:
        from kubernetes.client.exceptions import ApiException

        if not self.faults_configmap:
            raise ChaosError("the plan sets fault rates but no --faults-configmap was given")
        try:
            cm = self.api.read_namespaced_config_map(self.faults_configmap, self.namespace)
        except ApiException as e:
            raise _api_error(e, f"reading ConfigMap {self.faults_configmap}") from None
        text = (cm.data or {}).get(FAULTS_FILE_KEY) or "{}"
        try:
            current = json.loads(text)
        except json.JSONDecodeError:
            raise ChaosError(f"ConfigMap {self.faults_configmap}: {FAULTS_FILE_KEY} is not JSON") from None
        return current if isinstance(current, dict) else {}

    def set_faults(self, rates: dict, reset: bool = False) -> dict:
        """Merges the rates into the faults file and bumps its version; returns the new file.
        With reset, every rate in the file (and the plain ones) becomes 0 first."""
        from kubernetes.client.exceptions import ApiException

        current = self.read_faults()
        if reset:
            zero = {k: 0.0 for k in [*current, *faults.RATES] if faults.is_rate_name(k)}
            new = {**current, **zero}
        else:
            new = {**current, **validate_rates(rates)}
        new["version"] = int(current.get("version", 0)) + 1
        body = {"data": {FAULTS_FILE_KEY: json.dumps(new, sort_keys=True)}}
        try:
            self.api.patch_namespaced_config_map(self.faults_configmap, self.namespace, body)
        except ApiException as e:
            raise _api_error(e, f"updating ConfigMap {self.faults_configmap}") from None
        return new


def _ready(pod) -> bool:
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


_READY_POLL = 2.0   # seconds between looks at pods not yet Ready


# ---- running a plan ----

def run(plan: Plan, chaos: ChaosClient, duration: Optional[float], start_delay: float = 0.0,
        emit: Callable[[dict], None] = lambda event: None,
        clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> list:
    """Carries out the plan; returns (and emits) one event per action."""
    events = []

    def record(offset: float, event: dict) -> None:
        event = {"t": round(offset, 3), **event}
        events.append(event)
        emit(event)

    timeline = plan.timeline(duration)
    start = clock() + start_delay
    record(-start_delay, {"action": "start", "namespace": chaos.namespace, "duration": duration,
                          "rules": [r.describe() for r in plan.faults + plan.kills],
                          "scheduled": len(timeline)})
    for offset, rule in timeline:
        wait = start + offset - clock()
        if wait > 0:
            sleep(wait)
        if isinstance(rule, KillRule):
            record(offset, chaos.kill(rule))
        else:
            record(offset, {"action": "faults", "faults": chaos.set_faults(rule.rates)})
    if duration is not None:
        wait = start + duration - clock()
        if wait > 0:
            sleep(wait)
    if plan.faults and plan.reset_faults:
        record(duration if duration is not None else (timeline[-1][0] if timeline else 0.0),
               {"action": "faults", "reset": True, "faults": chaos.set_faults({}, reset=True)})
    record(duration if duration is not None else 0.0, {"action": "end", "actions": len(events) - 1})
    return events


# ---- command line ----

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fedlab chaos-k8s",
        description="Delete federation pods and set message-fault rates on a schedule (Kubernetes).")
    p.add_argument("--namespace", help="namespace of the federation (default: $POD_NAMESPACE, the "
                   "pod's own namespace, or the kube context's)")
    p.add_argument("--plan", help="plan file (JSON or YAML): kills, faults, reset_faults")
    p.add_argument("--selector", action="append", default=[],
                   help="label selector of pods to delete (one kill rule per --selector)")
    p.add_argument("--schedule", action="append", default=[],
                   help="schedule of the matching --selector: once, once@30s, every:20s, every:20s@5s")
    p.add_argument("--count", type=int, default=1, help="pods deleted each time a --selector rule fires")
    p.add_argument("--faults", help="fault rates to set, e.g. drop=0.05,duplicate=0.02,delay_mean=0.2,answer_drop=0.1 "
                        "(as fedlab run --chaos takes them: reorder or delay for delay_mean)")
    p.add_argument("--faults-schedule", default="once", help="when --faults applies (default once)")
    p.add_argument("--faults-configmap", help="name of the ConfigMap holding faults.json")
    p.add_argument("--no-reset-faults", action="store_true",
                   help="leave the fault rates as they are at the end (default: set them to 0)")
    p.add_argument("--duration", default=None, help="how long the chaos lasts, e.g. 2m")
    p.add_argument("--wait-ready", action="append", default=[], metavar="SELECTOR",
                   help="before the start delay, wait until the pods matching this label selector are all "
                        "Ready (repeatable): the schedule then counts from a federation that is up")
    p.add_argument("--wait-ready-timeout", default="30m", help="how long --wait-ready waits (default 30m)")
    p.add_argument("--start-delay", default="0s", help="wait this long before the first action")
    p.add_argument("--seed", type=int, default=None, help="seed of the victim choice")
    p.add_argument("--log", help="also append the JSON-lines events to this file")
    return p


def plan_from_args(args) -> Plan:
    plan = Plan.load(args.plan) if args.plan else Plan()
    if args.schedule and len(args.schedule) not in (1, len(args.selector)):
        raise ChaosError("give one --schedule, or one per --selector")
    if args.count < 1:
        raise ChaosError("--count must be at least 1")
    kills = list(plan.kills)
    for i, selector in enumerate(args.selector):
        schedule = args.schedule[i if len(args.schedule) > 1 else 0] if args.schedule else "once"
        kills.append(KillRule(selector, Schedule.parse(schedule), args.count))
    if args.schedule and not args.selector:
        raise ChaosError("--schedule needs a --selector naming the pods to delete")
    faults = list(plan.faults)
    if args.faults:
        faults.append(FaultRule(Schedule.parse(args.faults_schedule), parse_rates(args.faults)))
    reset = plan.reset_faults and not args.no_reset_faults
    result = Plan(tuple(kills), tuple(faults), reset)
    if not result.kills and not result.faults:
        raise ChaosError("nothing to do: give --plan, --selector or --faults")
    return result


def default_namespace() -> Optional[str]:
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(_SA_NAMESPACE) as fh:
            return fh.read().strip() or None
    except OSError:
        pass
    try:
        from kubernetes import config

        _, active = config.list_kube_config_contexts()
        return (active or {}).get("context", {}).get("namespace") or "default"
    except Exception:
        return None


def core_api_from_environment():
    """A CoreV1Api for the cluster this runs in (in-cluster config), or the current kube context."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except Exception as e:  # noqa: BLE001 - the client raises several kinds
            raise ChaosError(f"no Kubernetes configuration: not in a cluster and no kube context ({e})") from None
    return client.CoreV1Api()


def main(argv=None, core_api=None, clock=time.monotonic, sleep=time.sleep) -> int:
    args = build_parser().parse_args(argv)
    try:
        plan = plan_from_args(args)
        duration = parse_duration(args.duration) if args.duration else None
        start_delay = parse_duration(args.start_delay)
        namespace = args.namespace or default_namespace()
        if not namespace:
            raise ChaosError("no namespace: give --namespace")
        if plan.faults and not args.faults_configmap:
            raise ChaosError("the plan sets fault rates: give --faults-configmap")
        plan.timeline(duration)  # a repeating rule without a duration fails here, before any action
        api = core_api if core_api is not None else core_api_from_environment()
        chaos = ChaosClient(api, namespace, args.faults_configmap, args.seed)
        ready_timeout = parse_duration(args.wait_ready_timeout)
        ready = {selector: chaos.wait_ready(selector, ready_timeout, clock, sleep) for selector in args.wait_ready}
        log = open(args.log, "a") if args.log else None
        try:
            def emit(event):
                line = json.dumps(event, sort_keys=True)
                print(line, flush=True)
                if log:
                    log.write(line + "\n")
                    log.flush()
            for selector, names in ready.items():
                emit({"action": "ready", "selector": selector, "pods": names})
            run(plan, chaos, duration, start_delay, emit, clock, sleep)
        finally:
            if log:
                log.close()
    except ChaosError as e:
        print(f"fedlab chaos-k8s: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
