"""fedmodel.catalog: what it accepts as relations, constraints and rows, and the one line it
gives for what it does not; an initial state held to the declared constraints
(source_node.commit.validate_initial_state)."""

from __future__ import annotations

import time

import pytest

from fedlab.fedmodel.catalog import Catalog, validate_row
from fedlab.fedmodel.errors import ModelError
from fedlab.source_node.commit import validate_initial_state

SOURCES = {"ds1": {"R1": {"columns": ["j", "v"], "key": ["j"]}},
           "ds2": {"R2": {"columns": ["A", "B", "D"], "types": ["BIGINT", "VARCHAR", "DATE"], "key": ["A"]}}}
R2 = Catalog.from_dict({"sources": SOURCES}).relation("R2")


@pytest.mark.parametrize("constraints, message", [
    ({"fds": [{"relation": "R1", "from": ["j"]}]}, "catalog: constraints.fds[0] needs exactly relation, from, to"),
    ([{"relation": "R1", "from": ["j"], "to": ["v"]}], "catalog: 'constraints' is a mapping with 'fds' and 'ri'"),
    ({"fd": []}, "catalog: 'constraints' is a mapping with 'fds' and 'ri'"),
    ({"fds": {"relation": "R1"}}, "catalog: constraints.fds must be a list"),
    ({"fds": [{"relation": "R1", "from": "jv", "to": ["v"]}]},
     "catalog: constraints.fds[0].from must be a list of column names, got 'jv'"),
    ({"ri": [{"child": "R1", "columns": ["v"], "parent": "R1", "parent_columns": "j"}]},
     "catalog: constraints.ri[0].parent_columns must be a list of column names, got 'j'"),
])
def test_malformed_constraints_get_one_line_naming_where(constraints, message):
    with pytest.raises(ModelError) as err:
        Catalog.from_dict({"sources": SOURCES, "constraints": constraints})
    assert str(err.value).startswith(message) and "\n" not in str(err.value), str(err.value)


def test_a_key_given_as_a_string_is_not_read_as_its_letters():
    with pytest.raises(ModelError, match=r"^catalog: relation 'R1': 'key' must be a list of column names, got 'jv'$"):
        Catalog.from_dict({"sources": {"ds1": {"R1": {"columns": ["j", "v"], "key": "jv"}}}})


def test_an_integer_beyond_64_bits_is_refused_by_the_row_check():
    with pytest.raises(ModelError, match=r"^initial: R2.A is BIGINT, got 18446744073709551616, "
                                         r"which does not fit in 64 bits$"):
        validate_row(R2, [2 ** 64, "x", None], "initial")
    assert validate_row(R2, [-2 ** 63, "x", None], "initial") == (-2 ** 63, "x", None)


def test_a_yaml_boolean_in_a_text_column_is_refused_with_a_hint():
    with pytest.raises(ModelError, match=r"R2.B is VARCHAR, got the boolean True \(quote on/off/yes/no in YAML"):
        validate_row(R2, [1, True, None], "initial")


FEDERATION = Catalog.from_dict({
    "sources": {"ds1": {"P": {"columns": ["K", "N"], "key": ["K"]},
                        "C": {"columns": ["I", "K", "X", "Y"], "key": ["I"]}}},
    "constraints": {"fds": [{"relation": "C", "from": ["X"], "to": ["Y"]}],
                    "ri": [{"child": "C", "columns": ["K"], "parent": "P", "parent_columns": ["K"]}]},
}, {"P": [[1, "n"]], "C": [[1, 1, "x", "y"]]})


@pytest.mark.parametrize("children, message", [
    ([(1, 1, "x", "y"), (2, None, "x", "y"), (3, 2, "z", "w")], None),
    ([(1, 1, "x", "y"), (2, 1, "x", "other")], "initial: C[1, 1, 'x', 'y'] violates the functional dependency "
                                               "['X'] -> ['Y']"),
    ([(1, 1, "x", "y"), (2, 3, "z", "w")], "initial: C[2, 3, 'z', 'w'] refers to no P row with ['K'] = [3]"),
])
def test_an_initial_state_is_held_to_the_declared_fds_and_ri(children, message):
    rows = {"P": [(1, "n"), (2, "m")], "C": children}
    if message is None:
        validate_initial_state(FEDERATION, rows, "initial")   # a NULL reference refers to nothing: allowed
    else:
        with pytest.raises(ModelError) as err:
            validate_initial_state(FEDERATION, rows, "initial")
        assert str(err.value) == message


def test_checking_an_initial_state_takes_time_linear_in_its_rows():
    # One FD group of every row: checking each row against its whole group took 84 s here.
    rows = {"P": [(k, "n") for k in range(1000)], "C": [(i, i % 1000, "x", "y") for i in range(5000)]}
    started = time.perf_counter()
    validate_initial_state(FEDERATION, rows, "initial")
    assert time.perf_counter() - started < 3


def test_a_relation_empty_at_first_takes_its_types_from_the_rows_its_transactions_bring():
    from fedlab.simulation.scenario import ScenarioError, parse_scenario

    doc = {"sources": {"ds1": {"r1": {"columns": ["A", "B"], "key": ["A"]}},
                       "ds2": {"r2": {"columns": ["B", "C"], "key": ["B"]}}},
           "view": "SELECT r1.A, r2.C FROM r1 JOIN r2 ON r1.B = r2.B",
           "initial": {"r1": [[1, 2]], "r2": []},
           "steps": [{"commit": {"source": "ds2", "id": "t1", "insert": {"r2": [[2, "c"]]}}}]}
    assert parse_scenario(doc).catalog.relation("r2").types == ("BIGINT", "VARCHAR")
    doc["steps"].append({"commit": {"source": "ds2", "id": "t2", "modify": {"r2": [{"old": [2, "c"], "new": [2, 5]}]}}})
    with pytest.raises(ScenarioError, match="relation 'r2': column 'C' is given numbers and text"):
        parse_scenario(doc)
