"""The nemesis from a Kubernetes node (nemesis.node) and what every applier of a
schedule shares (nemesis.applier): what can be checked off the cluster. The clock shim the source
pods preload is built and run for real; `make e2e-k8s` applies every fault kind to a release.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fedlab.fedmodel.errors import ModelError
from fedlab.nemesis import node
from fedlab.nemesis.schedule import Fault, read
from fedlab.nemesis.applier import Nemesis

REPO = Path(__file__).resolve().parents[1]
SOURCES = ["s1", "s2"]


class Recorder(Nemesis):
    """A nemesis whose faults only say when they begin and end."""

    def __init__(self, faults, events):
        super().__init__(faults, events)
        self.closed = threading.Event()

    def _begin(self, fault, elapsed):
        self.events.append(f"begin {fault}")
        if fault.kind == "fail":
            raise RuntimeError("no pod")
        return (lambda at: self.events.append(f"end {fault}")) if fault.length else None

    def close(self):
        self.closed.set()


def test_the_time_line_ends_each_fault_after_its_length_in_time_order_and_closes():
    faults = [Fault("pause", ("s1",), 0.0, 0.2), Fault("kill", ("s2",), 0.1), Fault("pause", ("s2",), 0.15, 0.01)]
    nemesis = Recorder(faults, [])
    assert nemesis.start().wait(10)
    assert nemesis.events == ["begin pause s1 at 0s for 0.2s", "begin kill s2 at 0.1s", "begin pause s2 at 0.15s for 0.01s",
                              "end pause s2 at 0.15s for 0.01s", "end pause s1 at 0s for 0.2s"]
    assert nemesis.closed.is_set() and nemesis.error is None
    assert all(w["began"] <= w["ended"] for w in nemesis.applied) and len(nemesis.applied) == 3


def test_a_fault_that_fails_ends_the_schedule_reverts_and_is_kept():
    nemesis = Recorder([Fault("fail", ("s1",), 0.0), Fault("kill", ("s2",), 0.05)], [])
    assert nemesis.start().wait(10)
    assert nemesis.events == ["begin fail s1 at 0s", "the nemesis stopped: no pod"]
    assert isinstance(nemesis.error, RuntimeError) and nemesis.closed.is_set()
    # its window ends too: what each fault did is still reported (nemesis.effects reads `ended`)
    assert [w["fault"] for w in nemesis.applied] == ["fail s1 at 0s"]
    assert nemesis.applied[0]["ended"] >= nemesis.applied[0]["began"]


def test_stopping_mid_fault_reverts_and_applies_nothing_more():
    nemesis = Recorder([Fault("pause", ("s1",), 0.0, 60.0), Fault("kill", ("s2",), 30.0)], []).start()
    while not nemesis.events:
        threading.Event().wait(0.01)
    nemesis.stop()
    assert nemesis.events == ["begin pause s1 at 0s for 60s"] and nemesis.closed.is_set()
    assert nemesis.applied[0]["ended"] >= nemesis.applied[0]["began"]


def test_the_node_takes_every_cluster_target_and_sets_clocks_only_at_sources():
    faults = read("kill executors at 1s; kill ray-head at 1s; kill raylet:s2 at 2s; "
                                "partition load->s1 at 3s for 1s; pause warehouse at 5s for 1s; clock s1 +300s at 6s; "
                                "partition s2|everything at 7s for 1s",
                  SOURCES, 90.0, node.refusal)
    assert [f.targets for f in faults] == [("executors",), ("ray-head",), ("raylet:s2",), ("load", "s1"),
                                           ("warehouse",), ("s1",), ("s2", "everything")]
    with pytest.raises(ModelError) as err:
        read("clock warehouse -60s at 5s", SOURCES, 90.0, node.refusal)
    assert str(err.value) == ("--nemesis: 'clock warehouse -60s at 5s': only source pods carry the clock shim "
                              "(a source's name, not a role)")


class Cluster:
    """The release, its nodes' machines and the operator's kubectl, as one recording stand-in: a
    crashed node turns NotReady at once, so the nemesis's operator acts without waiting."""

    def __init__(self, placement: dict[str, str]):
        self.placement, self.actions, self.down = placement, [], set()
        self.release, self.kubectl, self.env = "r", "kubectl", None

    # Release
    def sources(self):
        return ["s1", "s2"]

    def pods(self, target):
        return [node.Pod(f"{target}-0", "uid", "10.0.0.1", self.placement[target])]

    def on_node(self, name):
        return sorted(f"{t}-0" for t, n in self.placement.items() if n == name)

    # Machines
    def crash(self, name):
        self.down.add(name)
        self.actions.append(("crash", name))

    def start(self, name):
        self.down.discard(name)
        self.actions.append(("start", name))

    def cut(self, name):
        self.actions.append(("cut", name))

    def mend(self, name):
        self.actions.append(("mend", name))
        return 7

    # Operator
    def names(self):
        return sorted(set(self.placement.values()))

    def wait_not_ready(self, name, timeout, stopping):
        while name not in self.down and not stopping.wait(0.01):
            pass
        return 0.0 if name in self.down else None

    def taint_out_of_service(self, name):
        self.actions.append(("taint", name))

    def untaint(self, name):
        self.actions.append(("untaint", name))

    def cordon(self, name):
        self.actions.append(("cordon", name))

    def drain(self, name):
        self.actions.append(("drain", name))
        return "drained"

    def uncordon(self, name):
        self.actions.append(("uncordon", name))


def test_a_crashed_node_is_declared_out_of_service_and_untainted_when_it_restarts():
    cluster = Cluster({"warehouse": "n5", "s1": "n3"})
    faults = read("crash node:warehouse at 0s; restart node:warehouse at 0.3s; partition node:s1 at 0.4s for 0.1s",
                  SOURCES, 90.0, node.refusal)
    nemesis = node.NodeNemesis(cluster, faults, [], machines=cluster, operator=cluster)
    assert nemesis.start().wait(10) and nemesis.error is None
    assert cluster.actions == [("crash", "n5"), ("taint", "n5"), ("start", "n5"), ("untaint", "n5"),
                               ("cut", "n3"), ("mend", "n3")]
    assert nemesis.events[0] == "crashed node n5 at 0.0s: every process killed (warehouse-0)"
    assert nemesis.events[-1] == "mended node n3's link at 0.5s: 7 packets had been dropped"


def test_stopping_restarts_crashed_nodes_mends_cut_ones_and_uncordons_drained_ones():
    cluster = Cluster({"warehouse": "n5", "s1": "n3", "s2": "n4"})
    faults = read("crash node:s2 at 0s; drain node:warehouse at 0s for 60s; partition node:s1 at 0s for 60s",
                  SOURCES, 90.0, node.refusal)
    nemesis = node.NodeNemesis(cluster, faults, [], machines=cluster, operator=cluster).start()
    while ("drain", "n5") not in cluster.actions or ("cut", "n3") not in cluster.actions:
        threading.Event().wait(0.01)
    nemesis.stop()
    undone = cluster.actions[cluster.actions.index(("cut", "n3")) + 1:]
    assert {("mend", "n3"), ("uncordon", "n5"), ("start", "n4"), ("untaint", "n4")} <= set(undone)


def test_a_node_named_by_neither_a_node_nor_what_runs_on_one_stops_the_schedule():
    cluster = Cluster({"warehouse": "n5"})
    nemesis = node.NodeNemesis(cluster, [Fault("crash", ("node:n9",), 0.0)], [], machines=cluster, operator=cluster)
    assert nemesis.start().wait(10)
    assert str(nemesis.error) == "no node 'n9' and no source or role of that name (nodes: n5)"
    assert cluster.actions == []


def test_a_pods_processes_are_found_by_its_cgroups_under_either_driver(tmp_path, monkeypatch):
    uid = "0a1b-2c3d"
    cgroups = {
        11: f"6:freezer:/kubepods/besteffort/pod{uid}/sandbox\n0::/\n",
        12: f"6:freezer:/kubepods/besteffort/pod{uid}/c1\n0::/\n",
        13: f"6:freezer:/kubepods/besteffort/pod{uid}/c1\n0::/\n",
        14: "6:freezer:/kubepods/besteffort/podother/c9\n0::/\n",
        15: "0::/kubepods.slice/kubepods-pod0a1b_2c3d.slice/cri-containerd-c2.scope\n",   # systemd, cgroup v2
    }
    for pid, text in cgroups.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cgroup").write_text(text)
    (tmp_path / "self").mkdir()
    monkeypatch.setattr(node, "PROC", tmp_path)
    assert node.pod_processes(node.Pod("p", uid, "10.0.0.1")) == {
        f"/kubepods/besteffort/pod{uid}/sandbox": [11], f"/kubepods/besteffort/pod{uid}/c1": [12, 13],
        "/kubepods.slice/kubepods-pod0a1b_2c3d.slice/cri-containerd-c2.scope": [15]}
    systemd = "/kubepods.slice/kubepods-pod0a1b_2c3d.slice/cri-containerd-c2.scope"
    (tmp_path / "11" / "cgroup").write_text(f"0::{systemd}\n")
    (tmp_path / "12" / "cgroup").write_text("0::/kubepods.slice/kubepods-pod0a1b_2c3d.slice\n")   # the pod's own
    assert node.pod_processes(node.Pod("p", uid, "10.0.0.1"))[systemd] == [11, 15]


@pytest.fixture(scope="module")
def clock_shim(tmp_path_factory) -> Path:
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the clock shim (helm/image/clock_offset.c)")
    shim = tmp_path_factory.mktemp("shim") / "clock_offset.so"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(shim),
                    str(REPO / "helm/image/clock_offset.c"), "-ldl"], check=True)
    return shim


def test_the_clock_shim_moves_the_wall_clock_by_the_file_and_jumps_with_it_but_not_the_monotonic_clock(
        clock_shim, tmp_path):
    offset = tmp_path / "offset"
    offset.write_text("300\n")
    program = f"""
import threading, time
mono = time.monotonic()
print(time.time())
open({str(offset)!r}, 'w').write('-60')
time.sleep(0.3)                     # sleeps and waits on the monotonic clock are not moved
threading.Event().wait(0.05)
print(time.time(), time.monotonic() - mono)
"""
    env = {"LD_PRELOAD": str(clock_shim), "FEDLAB_CLOCK_OFFSET_FILE": str(offset)}
    before = time.time()
    shifted = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=30, env=env)
    after = time.time()
    assert shifted.returncode == 0, shifted.stderr
    ahead, (behind, elapsed) = float(shifted.stdout.split()[0]), map(float, shifted.stdout.split()[1:])
    assert before + 300 <= ahead <= after + 300
    assert before - 60 <= behind <= after - 60   # the clock jumped back 360 s within the run
    assert 0.35 <= elapsed <= after - before
    date = subprocess.run(["date", "+%s"], capture_output=True, text=True, check=True, env=env)
    assert abs(int(date.stdout) - time.time() + 60) <= 1.5   # any program's clock, not Python's only


def test_without_its_file_the_clock_shim_leaves_the_clock_alone(clock_shim, tmp_path):
    shifted = subprocess.run(["date", "+%s"], capture_output=True, text=True, check=True,
                             env={"LD_PRELOAD": str(clock_shim), "FEDLAB_CLOCK_OFFSET_FILE": str(tmp_path / "none")})
    assert abs(int(shifted.stdout) - time.time()) <= 1.5


def test_the_source_role_sees_whether_its_containers_raylet_still_runs(tmp_path):
    """After `kill raylet:S` the source role restarts its container at once, instead of waiting
    --lost-after for an actor that cannot come back on a node that is gone."""
    from fedlab.roles.source_role import raylet_running

    for pid, comm in ((1, "tini"), (7, "fedlab"), (9, "raylet")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
    (tmp_path / "self").mkdir()
    assert raylet_running(tmp_path)
    (tmp_path / "9" / "comm").unlink()   # the raylet's process is gone
    assert not raylet_running(tmp_path)
