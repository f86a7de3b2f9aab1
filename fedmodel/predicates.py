"""Compiles a selection predicate over one relation into a Python test on that relation's rows.

Sources evaluate the same predicate as SQL in DuckDB; the warehouse core and the in-memory
sources use the compiled form, so that compensation can tell whether a row it re-adds passes
the view's selection. SQL three-valued logic: a comparison with NULL is not true.

Division by zero is NULL, so a predicate that divides by zero on a row is not true for that row.
SQL engines disagree here: PostgreSQL raises "division by zero", DuckDB 2.0 returns infinity for
`/` (so `10 / 0 > 1` holds), SQLite and Spark without ANSI mode return NULL. Raising would stop
maintenance at whatever row a client inserted, and infinity is one engine's choice, so the
project takes NULL; `predicate_sql` writes a predicate for the SQL engines with every divisor
wrapped in NULLIF(divisor, 0), so that they compute what `compile_predicate` does. The checker's
oracle makes the same rewrite on its own (checker.oracle.temporal_sql). The remainder
`%` follows the same rule (DuckDB and PostgreSQL raise on `% 0`, SQLite returns NULL), and is
SQL's: it truncates toward zero, so -7 % 3 is -1 (Python's `%` says 2). It takes whole numbers
only, where the engines agree: PostgreSQL has no `%` for DOUBLE, and SQLite truncates its
operands to integers first.

Types are checked before anything runs (`validate_types`): comparing a BOOLEAN column with text, or
a number with text, is refused with one line, since the SQL engines refuse it at run time
(DuckDB: "Could not convert string 'x' to BOOL") while Python would silently answer false. Text
compares with DATE: a date is written as a string literal, DuckDB casts it, and the compiled form
compares ISO strings.
"""

from __future__ import annotations

import operator
import re
from typing import Callable, Sequence

from sqlglot import exp

from fedlab.fedmodel.errors import ModelError

_COMPARE = {
    exp.EQ: operator.eq, exp.NEQ: operator.ne, exp.GT: operator.gt,
    exp.GTE: operator.ge, exp.LT: operator.lt, exp.LTE: operator.le,
}


def _divide(a, b):
    return None if b == 0 else a / b   # NULL: see the module docstring


def _remainder(a, b):
    """SQL's a % b: NULL for b = 0, else the sign of a (see the module docstring)."""
    if b == 0:
        return None
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


_ARITH = {exp.Add: operator.add, exp.Sub: operator.sub, exp.Mul: operator.mul, exp.Div: _divide,
          exp.Mod: _remainder}


def compile_predicate(expr: exp.Expression, relation) -> Callable[[Sequence], bool]:
    """Returns row -> bool for `expr`, whose columns all belong to `relation` (types checked by
    the caller: `validate_types`)."""
    value = _compile(expr, relation)
    return lambda row: value(row) is True


def compile_value(expr: exp.Expression, relation) -> Callable[[Sequence], object]:
    """Returns row -> the value of the scalar expression `expr` (arithmetic over `relation`'s
    columns, NULL-propagating as SQL is; what an aggregate view aggregates: fedmodel.aggregate_view)."""
    return _compile(expr, relation)


# The kind of each catalog type's values: a value compares with values of its kind, text also with dates.
_KIND = {"BIGINT": "a number", "DOUBLE": "a number", "VARCHAR": "text", "DATE": "a date", "BOOLEAN": "a boolean"}
_COMPARABLE = {frozenset({"text", "a date"})}


def validate_types(expr: exp.Expression, column_type: Callable[[exp.Column], str]) -> None:
    """Raises ModelError naming the first sub-expression of the condition `expr` that compares or
    combines values of different types; `column_type(column)` is a column's catalog type.

    >>> import sqlglot
    >>> validate_types(sqlglot.parse_one("F = 'on' AND N > 1"), lambda c: {"F": "BOOLEAN", "N": "BIGINT"}[c.name])
    Traceback (most recent call last):
    ...
    fedlab.fedmodel.errors.ModelError: view: F = 'on' compares a boolean with text
    """
    kind = _kind(expr, column_type)
    if kind not in (None, "a boolean"):
        raise ModelError(f"view: {expr.sql()} is {kind}, not a condition")


def _kind(e: exp.Expression, column_type) -> str | None:
    """The kind of value `e` yields (one of _KIND's; None for NULL), its operands checked."""
    if isinstance(e, (exp.Paren, exp.Cast)):
        return _kind(e.this, column_type)
    if isinstance(e, exp.Column):
        return _KIND[column_type(e)]
    if isinstance(e, exp.Literal):
        return "text" if e.is_string else "a number"
    if isinstance(e, exp.Boolean):
        return "a boolean"
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Neg):
        return _shared_kind(e, [e.this], column_type, need="a number")
    if isinstance(e, exp.Mod):
        for operand in (e.this, e.expression):
            if not _whole(operand, column_type):
                raise ModelError(f"view: {e.sql()} needs whole numbers (BIGINT), got {operand.sql()}")
    if type(e) in _ARITH:
        return _shared_kind(e, [e.this, e.expression], column_type, need="a number")
    if isinstance(e, exp.Nullif):
        return _shared_kind(e, [e.this, e.expression], column_type)
    if type(e) in _COMPARE:
        _shared_kind(e, [e.this, e.expression], column_type)
    elif isinstance(e, exp.In):
        _shared_kind(e, [e.this, *e.expressions], column_type)
    elif isinstance(e, exp.Between):
        _shared_kind(e, [e.this, e.args["low"], e.args["high"]], column_type)
    elif isinstance(e, exp.Like):
        _shared_kind(e, [e.this, e.expression], column_type, need="text")
    elif isinstance(e, (exp.And, exp.Or)):
        _shared_kind(e, [e.this, e.expression], column_type, need="a boolean")
    elif isinstance(e, exp.Not):
        _shared_kind(e, [e.this], column_type, need="a boolean")
    elif isinstance(e, exp.Is):
        _shared_kind(e, [e.this, e.expression], column_type)
    else:
        raise _unsupported(e)
    return "a boolean"


def _whole(e: exp.Expression, column_type) -> bool:
    """Whether `e` yields whole numbers in every engine (`/` does not: it divides exactly)."""
    if isinstance(e, (exp.Paren, exp.Neg, exp.Nullif)):   # NULLIF: how predicate_sql writes a divisor
        return _whole(e.this, column_type)
    if isinstance(e, exp.Column):
        return column_type(e) == "BIGINT"
    if isinstance(e, exp.Literal):
        return not e.is_string and re.fullmatch(r"\d+", e.this) is not None
    if isinstance(e, (exp.Add, exp.Sub, exp.Mul, exp.Mod)):
        return _whole(e.this, column_type) and _whole(e.expression, column_type)
    return isinstance(e, exp.Null)


def _shared_kind(e: exp.Expression, operands: list, column_type, need: str | None = None) -> str | None:
    """The kind `e`'s operands share (None when all are NULL; text and a date: either), which must
    be `need` if given."""
    kinds = {k for k in (_kind(x, column_type) for x in operands) if k is not None}
    if need is not None and kinds - {need}:
        raise ModelError(f"view: {e.sql()} needs {need}, got {' and '.join(sorted(kinds - {need}))}")
    if len(kinds) > 1 and frozenset(kinds) not in _COMPARABLE:
        raise ModelError(f"view: {e.sql()} compares {' with '.join(sorted(kinds))}")
    return min(kinds, default=None)


def predicate_sql(expr: exp.Expression) -> str:
    """`expr` as DuckDB SQL that an SQL engine evaluates as `compile_predicate` does: each divisor
    (of `/` and `%`) is wrapped in NULLIF(divisor, 0), so that division by zero is NULL there too.

    >>> import sqlglot
    >>> predicate_sql(sqlglot.parse_one("10 / (A - B) > 1 AND A % B = 1"))
    '10 / NULLIF((A - B), 0) > 1 AND A % NULLIF(B, 0) = 1'
    """
    return null_divisors(expr).sql(dialect="duckdb")


def null_divisors(expr: exp.Expression) -> exp.Expression:
    """A copy of `expr` with each divisor of `/` and `%` wrapped in NULLIF(divisor, 0): division by
    zero is NULL (this project's rule; Spark and PostgreSQL raise, DuckDB 2.0 gives infinity for `/`
    and raises for `%`)."""
    def null_divisor(node):
        if isinstance(node, (exp.Div, exp.Mod)):
            node.set("expression", exp.Nullif(this=node.expression, expression=exp.Literal.number(0)))
        return node
    return expr.transform(null_divisor)


def _compile(e: exp.Expression, rel) -> Callable:
    if isinstance(e, exp.Paren):
        return _compile(e.this, rel)
    if e.args.get("negate"):   # sqlglot parses `x NOT LIKE p` as Like(negate=True), not Not(Like)
        positive = e.copy()
        positive.set("negate", None)
        return _not(_compile(positive, rel))
    if isinstance(e, exp.Column):
        i = rel.index(e.name)
        return lambda row: row[i]
    if isinstance(e, exp.Literal):
        v = e.this if e.is_string else (int(e.this) if re.fullmatch(r"-?\d+", e.this) else float(e.this))
        return lambda row: v
    if isinstance(e, exp.Boolean):
        v = bool(e.this)
        return lambda row: v
    if isinstance(e, exp.Null):
        return lambda row: None
    if isinstance(e, exp.Neg):
        inner = _compile(e.this, rel)
        return lambda row: None if inner(row) is None else -inner(row)
    if isinstance(e, exp.Cast):
        return _compile(e.this, rel)
    if isinstance(e, exp.Nullif):
        a, b = _compile(e.this, rel), _compile(e.expression, rel)
        return lambda row: None if _null_safe(operator.eq, a(row), b(row)) is True else a(row)
    if type(e) in _COMPARE:
        op, a, b = _COMPARE[type(e)], _compile(e.this, rel), _compile(e.expression, rel)
        return lambda row: _null_safe(op, a(row), b(row))
    if type(e) in _ARITH:
        op, a, b = _ARITH[type(e)], _compile(e.this, rel), _compile(e.expression, rel)
        return lambda row: _null_safe(op, a(row), b(row))
    if isinstance(e, exp.And):
        a, b = _compile(e.this, rel), _compile(e.expression, rel)
        return lambda row: _and(a(row), b(row))
    if isinstance(e, exp.Or):
        a, b = _compile(e.this, rel), _compile(e.expression, rel)
        return lambda row: _or(a(row), b(row))
    if isinstance(e, exp.Not):
        return _not(_compile(e.this, rel))
    if isinstance(e, exp.Is) and isinstance(e.expression, (exp.Null, exp.Boolean)):
        a, b = _compile(e.this, rel), _compile(e.expression, rel)
        return lambda row: a(row) is b(row)   # IS NULL, IS TRUE, IS FALSE: None, True, False
    if isinstance(e, exp.In):
        a = _compile(e.this, rel)
        options = [_compile(x, rel) for x in e.expressions]
        return lambda row: _in(a(row), [o(row) for o in options])
    if isinstance(e, exp.Between):
        a, lo, hi = _compile(e.this, rel), _compile(e.args["low"], rel), _compile(e.args["high"], rel)
        return lambda row: _and(_null_safe(operator.ge, a(row), lo(row)), _null_safe(operator.le, a(row), hi(row)))
    if isinstance(e, exp.Like):
        a, pat = _compile(e.this, rel), _compile(e.expression, rel)
        return lambda row: _like(a(row), pat(row))
    raise _unsupported(e)


def _not(a: Callable) -> Callable:
    """SQL's NOT: unknown stays unknown."""
    return lambda row: None if a(row) is None else not a(row)


def _unsupported(e: exp.Expression) -> ModelError:
    return ModelError(f"view: unsupported predicate {e.sql()!r} (comparisons, AND/OR/NOT, IN, BETWEEN, LIKE, IS NULL)")


def _null_safe(op, a, b):
    if a is None or b is None:
        return None
    try:
        return op(a, b)
    except TypeError:
        raise ModelError(f"view: cannot compare {a!r} with {b!r} (type mismatch)") from None


def _and(a, b):
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _or(a, b):
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def _in(a, options):
    if a is None:
        return None
    return True if a in options else (None if None in options else False)


def _like(a, pattern):
    if a is None or pattern is None:
        return None
    regex = "".join(".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in pattern)
    return re.fullmatch(regex, a, flags=re.S) is not None


_compiled_sql: dict = {}


def compile_sql(sql: str, relation) -> Callable[[Sequence], bool]:
    """`compile_predicate` for a predicate given as SQL text over one relation's columns (cached)."""
    if not sql:
        return _always_true
    key = (sql, relation.name, relation.columns)
    if key not in _compiled_sql:
        import sqlglot

        try:
            expr = sqlglot.parse_one(sql, dialect="duckdb")
        except sqlglot.errors.ParseError as err:
            raise ModelError(f"selection on {relation.name}: malformed SQL: {str(err).splitlines()[0]}") from None
        _compiled_sql[key] = compile_predicate(expr, relation)
        validate_types(expr, lambda column: relation.type_of(column.name))
    return _compiled_sql[key]


def _always_true(_row) -> bool:
    return True
