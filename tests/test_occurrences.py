"""Self-joins (warehouse.core.occurrences): each occurrence of a relation a view
reads twice is a relation of the view; every update of the relation reaches all its occurrences
with its version numbers, and the sources are asked, and answer, by relation."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.subquery import Answer, RelationAnswer, Subquery, SubqueryRelation
from fedlab.fedmodel.transactions import Notification, RelationChange
from fedlab.fedmodel.viewdef import parse_view
from fedlab.simulation.matrix import broken_assumptions
from fedlab.simulation.scenario import LEVELS, load_scenario
from fedlab.simulation.simulate import simulate
from fedlab.warehouse.core import registry
from fedlab.warehouse.core.occurrences import Occurrences
from fedlab.warehouse.core.planner import plan

CATALOG = Catalog.from_dict({
    "sources": {"hr": {"emp": {"columns": ["id", "name", "boss"], "types": ["BIGINT", "VARCHAR", "BIGINT"], "key": ["id"]},
                       "dept": {"columns": ["boss", "title"], "types": ["BIGINT", "VARCHAR"], "key": ["boss"]}}},
    "constraints": {"ri": [{"child": "emp", "columns": ["boss"], "parent": "dept", "parent_columns": ["boss"]}]}})
VIEW = parse_view("SELECT e.name, m.name AS manager, dept.title FROM emp AS e JOIN emp AS m ON e.boss = m.id "
                  "JOIN dept ON dept.boss = m.id", CATALOG)
SCENARIO = Path(__file__).parent / "scenarios" / "self_join_employees_and_managers.yaml"


def test_each_occurrence_is_a_relation_of_the_view_with_the_relations_constraints():
    assert VIEW.relations == ("e", "m", "dept") and VIEW.bases == {"e": "emp", "m": "emp"}
    assert VIEW.relation("m").source == "hr" and VIEW.relation("m").key == ("id",)
    assert {(ri.child, ri.parent) for ri in VIEW.catalog.ri} >= {("e", "dept"), ("m", "dept")}


def test_a_change_of_the_relation_is_a_change_of_every_occurrence_with_its_version():
    engine = Occurrences(None, VIEW)
    change = RelationChange("emp", 7, inserted=((4, "dee", 2),))
    n = engine.notification(Notification("hr", 7, "t7", (change, RelationChange("dept", 3))))
    assert [(c.relation, c.brv, c.inserted) for c in n.changes] == [
        ("e", 7, ((4, "dee", 2),)), ("m", 7, ((4, "dee", 2),)), ("dept", 3, ())]


def test_no_subquery_asks_a_relation_twice():
    for access in ("join-graph", "scan"):
        for updated in VIEW.relations:
            for node in plan(VIEW, updated, access).nodes:
                bases = [VIEW.base_of(pr.relation) for pr in node.relations]
                assert len(bases) == len(set(bases)), (access, updated, node)


def test_a_subquery_asks_its_source_by_relation_and_the_answer_reads_back_as_the_occurrences_asked():
    occurrences = Occurrences(None, VIEW)
    asked = Subquery("q3", "hr", (SubqueryRelation("m", None, ("id",), ("boss",)),
                                  SubqueryRelation("dept", "m", ("boss",), ("id",))), ((1,),), as_of=(("m", 4),))
    sent = occurrences.subquery(asked)
    assert sent.id == "q3@emp=m" and sent.relation_names == ("emp", "dept")
    assert sent.relations[1].parent == "emp" and sent.as_of == (("emp", 4),)
    answer = occurrences.answer(Answer(sent.id, "hr", 5, (RelationAnswer("emp", 4, ((1, "ann", 1),)),
                                                          RelationAnswer("dept", 2, ()))))
    assert answer.id == "q3" and [ra.relation for ra in answer.relations] == ["m", "dept"]


@pytest.mark.parametrize("algorithm", registry.names())
def test_every_algorithm_keeps_a_self_join_at_the_level_it_claims(algorithm):
    result = simulate(load_scenario(SCENARIO), algorithm)
    # Its claim, unless the scenario breaks an assumption (FIFO delivery, but several sources and
    # multi-update transactions): the matrix's fifo cell.
    if not broken_assumptions(algorithm, "fifo"):
        claim = registry.get(algorithm).level
        assert LEVELS.index(result["consistency"]) >= LEVELS.index(claim), result["checker"]["first_violation"]
    assert result["checker"]["transactions"] == 3
