"""The tutorial's algorithm (docs/new-algorithm.md), tested the way fedlab tests its own: a
scenario replayed through the simulator, then its row of the consistency matrix. Both judge every
state against an independent recomputation of the view (fedlab's checker and its DuckDB oracle)."""

from __future__ import annotations

from pathlib import Path

from fedlab.simulation.matrix import run_matrix
from fedlab.simulation.scenario import LEVELS, load_scenario
from fedlab.simulation.simulate import simulate
from fedlab.warehouse.core import registry

SCENARIO = Path(__file__).parent.parent / "recompute_on_change" / "scenarios" / "two_commits_one_round.yaml"


def test_fedlab_finds_the_plug_in_through_its_entry_point():
    plugin = registry.get("recompute-on-change")
    assert (plugin.level, plugin.default_access, plugin.assumptions.held()) == ("strong", None, [])


def test_commits_made_while_a_round_is_out_share_the_next_state():
    result = simulate(load_scenario(SCENARIO))
    assert result["expectations_met"], result["failures"]
    assert [s["view"] for s in result["states"]] == [[["c1", 2]]]   # one state for three transactions
    assert result["consistency"] == "strong"
    assert result["counters"]["algorithm_rounds"] == 1


def test_its_matrix_row_keeps_its_claim_under_every_condition(tmp_path):
    cells = run_matrix(schedules=8, seed=0, algorithms=["recompute-on-change"], out=tmp_path)
    assert {c["condition"] for c in cells} == {"fifo", "reordering", "loss", "duplication", "restart", "all"}
    for cell in cells:
        assert LEVELS.index(cell["level"]) >= LEVELS.index("strong"), cell
        assert not cell["claim_failed"]


def test_the_tutorial_quotes_this_package_verbatim():
    root = Path(__file__).parent.parent
    doc = (root.parent.parent / "docs" / "new-algorithm.md").read_text()
    code = (root / "recompute_on_change" / "algorithm.py").read_text()
    config = (root / "pyproject.toml").read_text()
    blocks = doc.split("```")[1::2]
    quoted = [b.split("\n", 1)[1] for b in blocks if b.startswith(("python\n", "toml\n"))]
    assert len(quoted) == 4
    for block in quoted:
        assert block.strip() in code or block.strip() in config, block
