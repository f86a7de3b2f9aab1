"""A nemesis schedule: faults applied from outside the processes under test, at chosen times.

Jepsen's nemesis (and Chaos Mesh's experiments) fault a system from outside: a process frozen, a
process killed, a network cut, a clock moved. A schedule names them one per clause, each timed
from the start of the load:

    pause crm at 5s for 3s; kill warehouse at 12s; partition warehouse|sales at 20s for 10s;
    partition load->sales at 40s for 5s; clock ordering +300s at 50s

- `pause T at A for D`: T's processes frozen (SIGSTOP) at A, thawed (SIGCONT) D later;
- `kill T at A`: T killed as a crash would (its supervisor starts it again);
- `partition X|Y at A for D`: X and Y cannot reach each other for D; `X->Y`: X cannot reach Y,
  Y's packets still reach X;
- `clock T +S at A` (or `-S`): T's wall clock offset by S from A on;
- on a cluster's nodes, whole-node faults (`NODE_KINDS`, nemesis.node): `crash node:N at
  A` (every process of the node killed at once, a power loss), `restart node:N at A` (the node a
  crash took brought back), `partition node:N at A for D` (the node cut from the other nodes and
  the control plane, both ways), `drain node:N at A for D` (cordoned and its pods evicted, as an
  operator would; uncordoned after D).

A target is a source's name, `sources` (every source), `warehouse` or `load` (the load
generator); on a cluster also `executors` (Spark's), `ray-head`, for a kill `raylet:S`, the
raylet of source S's Ray node, and for a partition's second side `everything` else
(`partition crm|everything`: a source cut from the rest). A node is named `node:NAME`, by the
Kubernetes node's name or by what runs on it when the clause begins (`node:warehouse`, `node:crm`:
the node of that pod). Durations are written as `fedlab run --duration` takes them (500ms, 20s, 2m).
`random:SEED` draws a schedule of process faults instead (`draw`). Which faults an environment can apply is the
applier's (nemesis.local for a local run); this module only reads and draws schedules.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from fedlab.fedmodel.errors import ModelError
from fedlab.roles.chaos_k8s import ChaosError, parse_duration

KINDS = ("pause", "kill", "partition", "clock")
NODE_KINDS = ("crash", "restart", "drain")   # and `partition node:N`: faults of a whole node
ROLES = ("sources", "warehouse", "load")
CLUSTER_ROLES = ("executors", "ray-head")   # what only a cluster has: Spark's executor pods, Ray's head
EVERYTHING = "everything"                   # a partition's other side: every other process of the run
RAYLET = "raylet:"                          # `kill raylet:S`: the raylet of source S's Ray node, alone
NODE = "node:"                              # `crash node:N`: node N, by name or by what runs on it


@dataclass(frozen=True)
class Fault:
    """One clause: `kind` applied to `targets` at `at` seconds for `length` seconds (pause and
    partition; None for kill and clock); `offset` is a clock's shift in seconds; `one_way` is a
    partition in one direction only (targets[0] cannot reach targets[1]). A whole-node fault has
    one target, `node:N`; so does a partition of a node."""

    kind: str
    targets: tuple[str, ...]
    at: float
    length: float | None = None
    offset: float | None = None
    one_way: bool = False

    @property
    def end(self) -> float:
        return self.at + (self.length or 0.0)

    @property
    def of_node(self) -> bool:
        """Whether it is a fault of a whole node (`node:N`)."""
        return self.targets[0].startswith(NODE)

    def __str__(self) -> str:
        when = f"at {_seconds(self.at)}" + (f" for {_seconds(self.length)}" if self.length is not None else "")
        if self.kind == "partition" and not self.of_node:
            return f"partition {('->' if self.one_way else '|').join(self.targets)} {when}"
        if self.kind == "clock":
            return f"clock {self.targets[0]} {'+' if self.offset >= 0 else '-'}{_seconds(abs(self.offset))} {when}"
        return f"{self.kind} {self.targets[0]} {when}"


_CLAUSE = re.compile(r"(?P<kind>\w+)\s+(?P<target>\S+)(?:\s+(?P<offset>[+-]\S+))?\s+at\s+(?P<at>\S+)"
                     r"(?:\s+for\s+(?P<length>\S+))?")


def parse(text: str, sources: list[str]) -> list[Fault]:
    """The schedule `text` over a federation of `sources`, in time order; a ModelError names the
    first clause that is wrong and why."""
    faults = [_clause(c.strip(), sources) for c in text.split(";") if c.strip()]
    if not faults:
        raise ModelError("--nemesis: the schedule is empty")
    faults.sort(key=lambda f: f.at)
    _refuse_overlaps(faults, sources)
    return faults


def draw(seed: int, duration: float, sources: list[str], refusal=lambda fault: None) -> list[Fault]:
    """A random schedule over `duration` seconds: one fault in each of a few windows (a window per
    10 s, 2 at least), a pause or partition lasting a fifth to a half of its window, so that the
    federation has time to recover between two. A fault for which `refusal` (the applier's) gives
    a reason is drawn again. The same seed draws the same schedule."""
    rng = random.Random(seed)
    windows = max(2, int(duration // 10))
    width = duration / windows
    faults = []
    for i in range(windows):
        for _ in range(100):
            fault = _random_fault(rng, i * width, width, sources)
            if refusal(fault) is None:
                faults.append(fault)
                break
    return faults


def _random_fault(rng: random.Random, start: float, width: float, sources: list[str]) -> Fault:
    kind, source = rng.choice(KINDS), rng.choice(sources)
    at, length = round(start + rng.uniform(0.1, 0.4) * width, 1), round(rng.uniform(0.2, 0.5) * width, 1)
    if kind in ("pause", "kill"):
        return Fault(kind, (rng.choice([source, "warehouse"]),), at, length if kind == "pause" else None)
    if kind == "partition":
        return Fault("partition", ("warehouse", source), at, length, one_way=rng.random() < 0.3)
    return Fault("clock", (source,), at, offset=rng.choice([-1, 1]) * rng.choice([5.0, 60.0, 300.0]))


def _clause(clause: str, sources: list[str]) -> Fault:
    m = _CLAUSE.fullmatch(clause)
    if not m or m["kind"] not in KINDS + NODE_KINDS:
        raise ModelError(f"--nemesis: {clause!r}: write e.g. 'pause crm at 5s for 3s', 'kill warehouse at 10s', "
                         "'partition warehouse|crm at 20s for 5s', 'clock crm +300s at 30s' or "
                         "'crash node:warehouse at 40s'")
    kind = m["kind"]
    at = _duration(clause, m["at"])
    length = _duration(clause, m["length"]) if m["length"] else None
    if (length is None) != (kind in ("kill", "clock", "crash", "restart")):
        raise ModelError(f"--nemesis: {clause!r}: {kind} " + ("takes 'for <duration>'" if length is None
                                                             else "takes no 'for'"))
    if (m["offset"] is not None) != (kind == "clock"):
        raise ModelError(f"--nemesis: {clause!r}: " + ("clock takes an offset, e.g. +300s"
                                                       if kind == "clock" else f"{kind} takes no offset"))
    if kind in NODE_KINDS or m["target"].startswith(NODE):
        return _node_clause(clause, kind, m["target"], at, length, sources)
    offset = None
    if kind == "clock":
        offset = _duration(clause, m["offset"][1:]) * (-1 if m["offset"][0] == "-" else 1)
    one_way = kind == "partition" and "->" in m["target"]
    targets = tuple(re.split(r"->|\|", m["target"])) if kind == "partition" else (m["target"],)
    if kind == "partition" and (len(targets) != 2 or targets[0] == targets[1]):
        raise ModelError(f"--nemesis: {clause!r}: a partition names two sides, X|Y or X->Y, or one node, node:N")
    if kind != "partition" and ("|" in m["target"] or "->" in m["target"]):
        raise ModelError(f"--nemesis: {clause!r}: only a partition names two sides")
    for target in targets:
        if target.startswith(RAYLET) and target[len(RAYLET):] in sources:
            if kind != "kill":
                raise ModelError(f"--nemesis: {clause!r}: a raylet can only be killed")
        elif target == EVERYTHING:
            if kind != "partition" or target != targets[-1]:
                raise ModelError(f"--nemesis: {clause!r}: everything is a partition's second side, e.g. crm|everything")
        elif target not in sources and target not in ROLES + CLUSTER_ROLES:
            raise ModelError(f"--nemesis: {clause!r}: no target {target!r} (sources: {', '.join(sorted(sources))}; "
                             f"or {', '.join(ROLES + CLUSTER_ROLES)}, raylet:SOURCE, everything, node:NODE)")
    return Fault(kind, targets, at, length, offset, one_way)


_NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")   # a Kubernetes node's name (a DNS subdomain)


def _node_clause(clause: str, kind: str, target: str, at: float, length: float | None, sources: list[str]) -> Fault:
    """A whole-node fault: one target, `node:` and a node's name or what runs on one pod (a source,
    the warehouse, the load, the Ray head); the applier finds the node when the clause begins."""
    if kind not in NODE_KINDS + ("partition",):
        raise ModelError(f"--nemesis: {clause!r}: a node is crashed, restarted, partitioned or drained "
                         f"(e.g. crash node:warehouse at 40s)")
    name = target.removeprefix(NODE)
    if not target.startswith(NODE) or not _NODE_NAME.fullmatch(name) or name in ("sources", "executors", EVERYTHING):
        raise ModelError(f"--nemesis: {clause!r}: {kind} takes one node: node:NAME, or node:warehouse, node:load, "
                         f"node:ray-head or node:SOURCE for the node that one runs on (sources: {', '.join(sorted(sources))})")
    return Fault(kind, (target,), at, length)


def _refuse_overlaps(faults: list[Fault], sources: list[str]) -> None:
    """Two faults on one target at once would leave which ends first unclear (a pause inside a
    pause thaws the process early): refused. A crashed node is down until its restart, which must
    follow its crash."""
    def reached(fault):
        return {s for t in fault.targets for s in (sources if t == "sources" else [t])}

    ends = _node_downtimes(faults)
    for i, first in enumerate(faults):
        for second in faults[i + 1:]:
            if second.at < ends.get(i, first.end) and reached(first) & reached(second) \
                    and not (first.kind, second.kind) == ("crash", "restart"):
                raise ModelError(f"--nemesis: '{second}' starts before '{first}' ends, on the same target")


def _node_downtimes(faults: list[Fault]) -> dict[int, float]:
    """Each crash's end (by index in the time-ordered `faults`): its node's restart, or never."""
    down: dict[str, int] = {}
    ends: dict[int, float] = {}
    for i, fault in enumerate(faults):
        if fault.kind == "crash":
            down[fault.targets[0]] = i
            ends[i] = float("inf")
        elif fault.kind == "restart":
            crashed = down.pop(fault.targets[0], None)
            if crashed is None:
                raise ModelError(f"--nemesis: '{fault}' restarts no node: no 'crash {fault.targets[0]}' before it")
            ends[crashed] = fault.at
    return ends


def _duration(clause: str, text: str) -> float:
    try:
        return parse_duration(text)
    except ChaosError as err:
        raise ModelError(f"--nemesis: {clause!r}: {err}") from None


def _seconds(value: float) -> str:
    return f"{value:g}s"


def read(text: str, sources: list[str], duration: float, refuse) -> list[Fault]:
    """A --nemesis argument (`fedlab run`, `fedlab bench`, the node's nemesis) read and checked
    against what its applier can apply (`refuse(fault)`: the reason it cannot, or None);
    `random:SEED` draws only such faults over `duration` seconds. ModelError, one line naming the
    clause, for one that cannot be applied."""
    if not text:
        return []
    m = re.fullmatch(r"random:(\d+)", text.strip())
    faults = draw(int(m.group(1)), duration, sources, refuse) if m else parse(text, sources)
    for fault in faults:
        reason = refuse(fault)
        if reason:
            raise ModelError(f"--nemesis: '{fault}': {reason}")
    return faults
