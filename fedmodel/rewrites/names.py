"""Two output columns of one name: the later one is renamed.

SQL lets a SELECT show two columns of one name (`SELECT * FROM a JOIN b ON a.i = b.i` shows two
i), but a table cannot have them, nor a view fedlab keeps, whose columns are found by name. The
first keeps its name; a later one is called `<name>_1`, or `<name>_2`, ..., the first such name
no column before it has (names compare without case, as SQL's unquoted names do). That is how
DuckDB names the columns of such a query read as a table, so the view's columns are those of
`CREATE TABLE ... AS` the user's SQL there, even where a column the user named `i_1` follows a
renamed `i` (it becomes `i_1_1`). PostgreSQL refuses such a table. The name `count` stays the
multiplicity's: fedmodel.viewdef refuses a column so named.

>>> import sqlglot
>>> distinct(sqlglot.parse_one("SELECT a.i, b.i, c.i, a.j AS i_1 FROM a, b, c")).sql()
'SELECT a.i, b.i AS i_1, c.i AS i_2, a.j AS i_1_1 FROM a, b, c'
"""

from __future__ import annotations

from sqlglot import exp


def distinct(tree: exp.Select) -> exp.Select:
    """`tree` (changed in place) with no two select-list items of one name."""
    seen: set[str] = set()
    for e in list(tree.expressions):
        name = e.alias_or_name
        if name and name.lower() in seen:
            n = 1
            while f"{name}_{n}".lower() in seen:
                n += 1
            name = f"{name}_{n}"
            e.replace(exp.alias_(e.unalias().copy(), name))
        seen.add(name.lower())
    return tree
