"""An aggregate view: GROUP BY with aggregates, or SELECT DISTINCT, over a select-project-join view.

`parse_query(sql, catalog)` reads the SQL a user writes for a view. A select-project-join view is
a ViewDef (fedmodel.viewdef); an aggregate one is an `AggregateView` over its *join*: the
select-project-join view of the same FROM and WHERE whose columns are the grouping columns and
every column an aggregate reads. The maintenance algorithms keep the join as they keep any view,
with its multiplicities and version numbers, so an aggregate view has the consistency its
algorithm gives the join; its rows are a function of the join's rows (each group gives one row of
the user's view; two groups may give the same row when a column grouped by is not shown), kept up
to date from the join's deltas (warehouse.core.aggregate_state).

Accepted: `SELECT g1, ..., f(...), ... FROM ... [WHERE ...] GROUP BY g1, ...` where every plain
column of the select list is grouped by and each f is COUNT(*), COUNT(e), SUM(e), AVG(e), MIN(e)
or MAX(e) over an arithmetic expression e of the relations' columns; a GROUP BY without
aggregates; an aggregate without GROUP BY (one row, also over an empty join: COUNT 0, the others
NULL); `SELECT DISTINCT cols FROM ...` (GROUP BY every column). Refused, naming the construct:
HAVING, DISTINCT inside an aggregate, other aggregate functions, grouping by an expression, an
aggregate nested in an expression, an aggregate over an outer join. A view with EXISTS in WHERE
(a semi-join) is read as the aggregate view it amounts to (fedmodel.rewrites.exists); one with
outer joins, or NOT EXISTS (an anti-join, fedmodel.rewrites.not_exists), is an
fedmodel.outer_join_view.OuterJoinView.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import sqlglot
from sqlglot import exp

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.outer_join_view import OuterJoinView, parse_outer_join
from fedlab.fedmodel.predicates import compile_value
from fedlab.fedmodel.rewrites.exists import semijoins
from fedlab.fedmodel.rewrites.not_exists import antijoins
from fedlab.fedmodel.viewdef import ViewDef, aggregated_by, parse_view

FUNCTIONS = {exp.Count: "COUNT", exp.Sum: "SUM", exp.Avg: "AVG", exp.Min: "MIN", exp.Max: "MAX"}


@dataclass(frozen=True)
class Aggregate:
    function: str                            # COUNT, SUM, AVG, MIN or MAX
    argument: Callable[[Sequence], object] | None   # a join row -> the value aggregated; None: COUNT(*)


@dataclass(frozen=True)
class AggregateView:
    sql: str                      # the user's SQL
    join: ViewDef                 # the select-project-join view the algorithms maintain
    groups: tuple[int, ...]       # the join columns grouped by, in GROUP BY order
    aggregates: tuple[Aggregate, ...]
    output_names: tuple[str, ...]  # the user's view's columns, in select-list order
    output_types: tuple[str, ...]  # their catalog types
    layout: tuple[tuple[str, int], ...]   # each column: ("group", i) of groups or ("aggregate", j)

    @property
    def column_names(self) -> tuple[str, ...]:
        return self.output_names + (("count",) if self.has_count else ())

    @property
    def has_count(self) -> bool:
        """Whether two groups can give one row: when a column grouped by is not shown
        (`SELECT count(*) FROM a GROUP BY a.j` has a row (1) for every j held once)."""
        return not {i for kind, i in self.layout if kind == "group"} >= set(range(len(self.groups)))

    @property
    def grand_total(self) -> bool:
        """An aggregate with no GROUP BY: one row even over an empty join."""
        return not self.groups

    def row(self, group: tuple, values: tuple) -> tuple:
        """The user's row of a group (its grouping values) with its aggregates' `values`."""
        return tuple(group[i] if kind == "group" else values[i] for kind, i in self.layout)


def parse_query(sql: str, catalog: Catalog) -> ViewDef | AggregateView | OuterJoinView:
    """The view a user's SQL defines; ModelError (one line) for what no kind accepts."""
    tree = _parse(sql)
    anti = False
    if tree is not None:
        written = tree.sql()
        tree = antijoins(tree, catalog)   # NOT EXISTS: a LEFT JOIN's padded rows (fedmodel.rewrites.not_exists)
        anti = tree.sql() != written
        tree = semijoins(tree, catalog)   # EXISTS: an aggregate view over the join (fedmodel.rewrites.exists)
    if tree is None or aggregated_by(tree) is None:
        return parse_outer_join(tree.sql() if anti else sql, catalog, written=sql)
    if tree.args.get("having"):
        raise ModelError("view: HAVING is not supported; filter the groups when reading the view")
    distinct = tree.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        raise ModelError("view: DISTINCT ON is not supported; use GROUP BY")
    group_by = tree.args.get("group")
    grouped = list(group_by.expressions) if group_by else []
    for g in grouped:
        if not isinstance(g, exp.Column):
            raise ModelError(f"view: GROUP BY {g.sql()} is not supported: group by columns")
    if distinct is not None and grouped:
        raise ModelError("view: SELECT DISTINCT with GROUP BY is not supported; GROUP BY alone gives each group once")

    join_columns = _JoinColumns()
    join_name = join_columns.name

    groups = list(dict.fromkeys(join_name(g) for g in grouped))
    names, layout, arguments = [], [], []
    for item in tree.expressions:
        target = item.this if isinstance(item, exp.Alias) else item
        if isinstance(target, exp.Column) and not isinstance(target.this, exp.Star):
            if distinct is not None and join_name(target) not in groups:
                groups.append(join_name(target))
            elif distinct is None and not any(_same(target, g) for g in grouped):
                raise ModelError(f"view: {target.sql()} in the select list must be in GROUP BY or aggregated")
            layout.append(("group", groups.index(join_name(target))))
        elif type(target) in FUNCTIONS:
            function = target.copy()
            for column in list(function.find_all(exp.Column)):
                column.replace(exp.column(join_name(column)))
            arguments.append((function, target.sql()))
            layout.append(("aggregate", len(arguments) - 1))
        else:
            raise ModelError(f"view: {_spelled(target)} in the select list of an aggregate view is not "
                             f"supported (columns and COUNT, SUM, AVG, MIN, MAX), got {target.sql()}")
        name = item.alias if isinstance(item, exp.Alias) else target.name if isinstance(target, exp.Column) else target.sql()
        if name.lower() in {n.lower() for n in names}:
            raise ModelError(f"view: the select list names {name!r} twice; give one an alias")
        names.append(name)
    join_tree = tree.copy()
    for part in ("group", "distinct", "order"):
        join_tree.set(part, None)
    join_tree.set("expressions", join_columns.select_list() or [_any_column(tree, catalog)])
    join = parse_view(join_tree.sql(), catalog)
    if join.outer is not None:
        raise ModelError(f"view: {aggregated_by(tree)} over an outer join is not supported; outer joins are "
                         "maintained in select-project-join views")
    positions = {o.name: i for i, o in enumerate(join.outputs)}
    aggregates = [_aggregate(f, written, positions, join.output_types) for f, written in arguments]
    types = tuple(join.output_types[positions[groups[i]]] if kind == "group" else aggregates[i][1]
                  for kind, i in layout)
    return AggregateView(sql, join, tuple(positions[g] for g in groups), tuple(a for a, _ in aggregates),
                   tuple(names), types, tuple(layout))


class _JoinColumns:
    """The join's select list: each column an aggregate view groups by or aggregates, once, named
    by its own name or, when that is taken, qualified by its relation."""

    def __init__(self):
        self._columns: dict[str, exp.Column] = {}

    def name(self, column: exp.Column) -> str:
        for name, c in self._columns.items():
            if _same(c, column):
                return name
        taken = {n.lower() for n in self._columns} | {"count"}   # count: the join's multiplicity
        name = column.name if column.name.lower() not in taken else f"{column.table or 'c'}_{column.name}"
        while name.lower() in taken:
            name += "_"
        self._columns[name] = column
        return name

    def select_list(self) -> list[exp.Expression]:
        return [c.copy().as_(name) for name, c in self._columns.items()]


def _parse(sql: str) -> exp.Select | None:
    try:
        tree = sqlglot.parse_one(sql) if isinstance(sql, str) and sql.strip() else None
    except sqlglot.errors.ParseError:
        return None   # parse_view says what is wrong
    return tree if isinstance(tree, exp.Select) else None


def _same(a: exp.Column, b: exp.Column) -> bool:
    """The same column as written (qualified alike, or one side unqualified with the same name)."""
    return a.name.lower() == b.name.lower() and (not a.table or not b.table or a.table.lower() == b.table.lower())


def _aggregate(function: exp.AggFunc, written: str, positions: dict[str, int],
               types: tuple[str, ...]) -> tuple[Aggregate, str]:
    """`function` (`written` by the user), its columns renamed to the join's, compiled over a
    join row; with the catalog type of its result."""
    name = FUNCTIONS[type(function)]
    argument = function.this
    if isinstance(argument, exp.Distinct):
        raise ModelError(f"view: {name}(DISTINCT ...) is not supported in {written}")
    if isinstance(argument, exp.Star):
        if name != "COUNT":
            raise ModelError(f"view: {name}(*) is not an aggregate; name a column in {written}")
        return Aggregate(name, None), "BIGINT"
    if any(isinstance(e, exp.AggFunc) for e in argument.find_all(exp.AggFunc)):
        raise ModelError(f"view: an aggregate inside an aggregate is not supported in {written}")
    # An expression computes with numbers (a DOUBLE result); a column keeps its type.
    typ = types[positions[argument.name]] if isinstance(argument, exp.Column) else "DOUBLE"
    if name in ("SUM", "AVG") and typ not in ("BIGINT", "DOUBLE"):
        raise ModelError(f"view: {name} needs numbers, but {written} reads {typ} values")
    result = "BIGINT" if name == "COUNT" else "DOUBLE" if name == "AVG" else typ
    return Aggregate(name, compile_value(argument, _JoinRow(positions))), result


def _any_column(tree: exp.Select, catalog: Catalog) -> exp.Column:
    """A column for the join of COUNT(*) alone, which reads none: the first key column of the first
    relation (the join still has one row per combination of base rows, by its multiplicities)."""
    first = (tree.args.get("from_") or tree.args.get("from")).this
    rel = catalog.relation(first.name) if catalog.has_relation(first.name) else None
    if rel is None:
        raise ModelError(f"view: unknown relation {first.name!r} in FROM")
    return exp.column(rel.key[0], table=first.alias_or_name)


class _JoinRow:
    """The join's row seen as a relation for compile_value: a column by its name in the join."""

    def __init__(self, positions: dict[str, int]):
        self.name, self._positions = "the join", positions

    def index(self, column: str) -> int:
        return self._positions[column]


def _spelled(node: exp.Expression) -> str:
    if isinstance(node, exp.AggFunc):
        return f"an aggregate ({type(node).__name__.upper()})"
    if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star)):
        return "SELECT *"
    return "an expression"
