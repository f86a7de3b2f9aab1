"""Algorithms as plug-ins (warehouse.core.registry): found through the `fedlab.algorithms` entry
points, listed with their claims, and refused in one line when unknown or broken. Extra plug-ins
are added here as entry points of their own, the way an installed package adds them."""

from __future__ import annotations

import json
from importlib.metadata import EntryPoint

import pytest

from fedlab.cli import main
from fedlab.warehouse.core import registry
from fedlab.warehouse.core.builtin_plugins import CONVENTIONAL
from fedlab.warehouse.core.registry import AlgorithmError, Assumptions, Plugin, Settings

# A plug-in that claims more than it does: the conventional algorithm, claiming completeness with
# no assumption to excuse it. The matrix must catch it.
OVERCLAIMING = Plugin("overclaiming", "none", "complete", "conventional maintenance claiming completeness",
                      CONVENTIONAL.factory)
NOT_A_PLUGIN = object()


@pytest.fixture
def extra(monkeypatch):
    """Adds entry points to the `fedlab.algorithms` group, as an installed package would."""
    real = registry.entry_points

    def add(**targets: str) -> None:
        added = [EntryPoint(name, value, registry.GROUP) for name, value in targets.items()]
        monkeypatch.setattr(registry, "entry_points", lambda group: [*real(group=group), *added])
        registry.get.cache_clear()

    yield add
    registry.get.cache_clear()


def test_the_built_in_algorithms_are_registered_as_entry_points_like_any_plug_in():
    names = registry.names()
    assert {"sze-ling", "conventional", "lazy", "versioned", "strobe", "t-strobe", "g-strobe", "c-strobe",
            "recompute", "salem"} <= set(names)
    assert all(registry.get(n).name == n for n in names)
    levels = [registry.LEVELS.index(p.level) for p in registry.plugins()]
    assert levels == sorted(levels)   # weakest claim first


def test_an_unknown_name_is_one_line_naming_it_and_the_registered_ones():
    with pytest.raises(AlgorithmError) as err:
        registry.get("sze-lin")
    assert str(err.value).startswith("unknown algorithm 'sze-lin' (registered: ") and "sze-ling" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_plug_in_that_fails_to_import_is_named_with_its_target_and_error(extra):
    extra(broken="no_such_package.algorithm:PLUGIN")
    with pytest.raises(AlgorithmError, match=r"^algorithm plug-in 'broken' \(no_such_package.algorithm:PLUGIN\) "
                                             r"failed to load: ModuleNotFoundError: No module named 'no_such_package'$"):
        registry.get("broken")
    assert registry.get("sze-ling").level == "complete"   # the others still load


def test_a_plug_in_must_be_a_plugin_under_its_own_name(extra):
    extra(thing="tests.test_registry:NOT_A_PLUGIN", other="tests.test_registry:OVERCLAIMING")
    with pytest.raises(AlgorithmError, match="is a object, not a warehouse.core.registry.Plugin"):
        registry.get("thing")
    with pytest.raises(AlgorithmError, match="calls itself 'overclaiming'"):
        registry.get("other")


def test_a_claim_must_be_a_level_and_an_access_path_must_exist():
    with pytest.raises(AlgorithmError, match="claims level 'perfect'"):
        Plugin("x", "p", "perfect", "s", CONVENTIONAL.factory)
    with pytest.raises(AlgorithmError, match="unknown default access path 'index'"):
        Plugin("x", "p", "strong", "s", CONVENTIONAL.factory, default_access="index")
    with pytest.raises(AlgorithmError, match="recompute reads whole relations; it takes no access path"):
        registry.get("recompute").access("scan")


def test_settings_hand_each_factory_only_the_timings_that_were_set():
    s = Settings(query_timeout=1.5, reorder_allowance=0.1)
    assert s.timings() == {"query_timeout": 1.5, "reorder_allowance": 0.1}
    assert s.timings("query_timeout", "resend_timeout") == {"query_timeout": 1.5}


def test_a_plug_in_that_cannot_restart_is_refused_a_restart():
    with pytest.raises(AlgorithmError, match="strobe cannot restart from the durable store"):
        registry.restore("strobe", None, {}, {})
    assert Assumptions(fifo=True, restartable=False).held() == ["fifo"]


def test_fedlab_algorithms_lists_every_claim_and_names_a_broken_plug_in_in_one_line(extra, capsys):
    extra(overclaiming="tests.test_registry:OVERCLAIMING", broken="no_such_package:PLUGIN")
    assert main(["algorithms", "--json"]) == 1
    out, err = capsys.readouterr()
    listed = {a["name"]: a for a in json.loads(out)}
    assert listed["strobe"]["claims"] == "strong" and listed["strobe"]["assumes"] == [
        "fifo", "no_loss", "keys_in_view", "single_update"]
    assert listed["overclaiming"] == {"name": "overclaiming", "claims": "complete", "paper": "none",
                                      "description": "conventional maintenance claiming completeness", "assumes": [],
                                      "restartable": True, "access": "join-graph"}
    assert err.count("\n") == 1 and err.startswith("fedlab algorithms: algorithm plug-in 'broken'")


@pytest.mark.parametrize("argv", [
    ["simulate", "tests/scenarios/sze_ling_example1.yaml", "--algorithm", "nope"],
    ["matrix", "--algorithms", "nope", "--schedules", "1"],
    ["soak", "--algorithm", "nope", "--schedules", "1"],
    ["bench", "--algorithms", "sze-ling,nope:scan", "--out", "/nonexistent/never-written"],
])
def test_every_command_refuses_an_unknown_algorithm_in_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown algorithm 'nope'" in err, err


def test_a_plug_in_runs_in_the_simulator_and_the_matrix_catches_its_failed_claim(extra, tmp_path, capsys):
    extra(overclaiming="tests.test_registry:OVERCLAIMING")
    argv = ["matrix", "--algorithms", "overclaiming", "--conditions", "fifo", "--schedules", "6", "--seed", "40",
            "--out", str(tmp_path)]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert "| overclaiming | complete | **" in out and "its claim fails**" in out
    assert err.strip() == "fedlab matrix: below the claimed level with its assumptions kept: overclaiming under fifo"
    assert (tmp_path / "overclaiming-fifo.yaml").exists()


def test_an_error_a_command_finds_late_is_one_line_and_exit_2(monkeypatch, capsys):
    # e.g. `fedlab demo --source-engine postgres` with a run directory the server's user cannot reach
    from fedlab.fedmodel.errors import ModelError
    from fedlab.live import demo

    def refused(args):
        raise ModelError("/root is not searchable by the user postgres the server runs as (chmod o+x /root)")

    monkeypatch.setattr(demo, "main", refused)
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert err == "fedlab demo: /root is not searchable by the user postgres the server runs as (chmod o+x /root)\n"
