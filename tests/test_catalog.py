"""fedmodel.catalog: what it accepts as relations, constraints and rows, and the one line it
gives for what it does not."""

from __future__ import annotations

import pytest

from fedmodel.catalog import Catalog, check_row
from fedmodel.errors import ModelError

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
        check_row(R2, [2 ** 64, "x", None], "initial")
    assert check_row(R2, [-2 ** 63, "x", None], "initial") == (-2 ** 63, "x", None)


def test_a_yaml_boolean_in_a_text_column_is_refused_with_a_hint():
    with pytest.raises(ModelError, match=r"R2.B is VARCHAR, got the boolean True \(quote on/off/yes/no in YAML"):
        check_row(R2, [1, True, None], "initial")
