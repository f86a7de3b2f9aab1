"""Random federations for stress and property tests: schemas, join graphs, placements, data.

`random_scenario(seed, ...)` returns a scenario document (the scenario file's structure) with
2-6 relations over 2-4 sources joined as a chain, a star or a random tree. Each join edge is
either a reference (the child's column equals the parent's key: the parent is functionally
determined, so partial self-maintenance and key refresh have work to do) or many-to-many (two
non-key columns). Views keep every key (no count) or only some columns (a count); some relations
carry a selection; same-source references are sometimes declared as referential integrity.
Same seed, same scenario.

`adversarial=True` also draws the shapes adversarial testing found defects in, each
from a generator of its own so that the classic shapes of a seed stay as they were: a column
shown twice, keys and functional-dependency left sides of intermediate relations in the view,
declared FDs, referential integrity on non-key parent columns, typed value columns (relations of
equal arity with different types), and NULLs in join columns.

`self_join=True` reads one relation a second time under an alias (warehouse.core.occurrences),
joined to itself on its value column: `R2 AS R2b ON R2.V2 = R2b.V2`, its key in the select list.
`aggregate=True` makes the view an aggregate one (fedmodel.aggregate_view), from a generator of its own
as well: SELECT DISTINCT over the drawn columns, GROUP BY some of them with COUNT(*), COUNT, SUM,
AVG, MIN and MAX over the others, or those aggregates without GROUP BY. SUM and AVG read only
BIGINT columns, whose sums both sides compute exactly (a DOUBLE sum's last bits depend on the
order it is added in).
`semijoin=True` (without the two above) moves the join tree's last relation, a leaf, into an
EXISTS subquery of its own join condition and selections (fedmodel.rewrites.exists), its columns
out of the select list; with `antijoin=True` too, into NOT EXISTS (fedmodel.rewrites.not_exists).
`outer_join=True` (without an aggregate or EXISTS) makes some of the tree's joins LEFT, RIGHT or
FULL (fedmodel.outer_joins), at least one, from a generator of its own; the selections then keep
only the terms holding their relations, so some views come out inner joins again.
"""

from __future__ import annotations

import random

SHAPES = ("chain", "star", "tree")


def random_scenario(seed: int, relations: tuple[int, int] = (2, 6), sources: tuple[int, int] = (2, 4),
                    steps: int = 60, drop: float = 0.2, reorder: float = 0.3, duplicate: float = 0.05,
                    commit_rate: float = 0.4, algorithm: str = "sze-ling", adversarial: bool = False,
                    aggregate: bool = False, self_join: bool = False, semijoin: bool = False,
                    outer_join: bool = False, antijoin: bool = False) -> dict:
    """The scenario document of random federation `seed`: between `relations` relations over
    between `sources` sources, run by `algorithm` for one `random` step of `steps` decisions with
    those fault and commit rates (the module's docstring says what the flags add).

    The phases draw from one generator in a fixed order, and recorded seeds depend on it: a new
    draw goes after the others or into a generator of its own, as the adversary's do."""
    rng = random.Random(seed)
    odd = _Adversary(seed) if adversarial else None
    shape, names, parent, placement = _join_tree(rng, relations, sources)
    columns, conditions, references, chain = _join_columns(rng, odd, names, parent)
    data = _initial_rows(rng, names, columns)
    types = {i: ["BIGINT"] * len(columns[i]) for i in range(len(names))}
    fds, non_key_ri = [], []
    if odd:   # in this order: each step keeps the data valid for the constraints drawn before it
        odd.null_join_values(columns, data)
        non_key_ri = odd.non_key_references(names, columns, placement, data)
        fds = odd.functional_dependencies(names, columns, data, chain)
        odd.type_values(columns, types, data)
    ri = _declared_references(rng, names, columns, placement, data, references) + non_key_ri
    select = _select_list(rng, names, columns)
    if odd:
        select = odd.select_list(names, fds, select, chain)
    sql = _view_sql(rng, seed, names, columns, types, conditions, select, self_join, aggregate,
                    semijoin and not aggregate and not self_join, outer_join and not aggregate and not semijoin, antijoin)
    doc_sources: dict = {}
    for i, name in enumerate(names):
        doc_sources.setdefault(placement[i], {})[name] = {"columns": columns[i], "types": types[i],
                                                          "key": [f"K{i + 1}"]}
    extras = {"lazy": LAZY_BOUNDS[seed % len(LAZY_BOUNDS)]} if algorithm == "lazy" else {}
    return {
        "name": f"random federation {seed} ({shape}, {len(names)} relations, {len(set(placement))} sources)",
        "algorithm": algorithm,
        **extras,
        "sources": doc_sources,
        "constraints": {"ri": ri, "fds": fds},
        "view": sql,
        "initial": data,
        "steps": [{"random": {"seed": seed, "steps": steps, "drop": drop, "reorder": reorder,
                              "duplicate": duplicate, "commit_rate": commit_rate}},
                  {"run": "all"}],
        "expect": {"consistency": "strong" if algorithm == "lazy" else "complete"},
    }


def _join_tree(rng: random.Random, relations: tuple[int, int],
               sources: tuple[int, int]) -> tuple[str, list[str], dict[int, int], list[str]]:
    """The shape, the relations' names (R1, R2, ...), each relation's parent in the join tree
    (relation i > 0 joins parent[i]) and each relation's source (every source holds one at least)."""
    n = rng.randint(*relations)
    k = rng.randint(sources[0], min(sources[1], n))
    shape = rng.choice(SHAPES)
    names = [f"R{i + 1}" for i in range(n)]
    parent = {i: (i - 1 if shape == "chain" else 0 if shape == "star" else rng.randrange(i)) for i in range(1, n)}
    placement = [f"ds{i + 1}" for i in range(k)] + [f"ds{rng.randrange(k) + 1}" for _ in range(n - k)]
    rng.shuffle(placement)
    return shape, names, parent, placement


def _join_columns(rng: random.Random, odd: _Adversary | None, names: list[str],
                  parent: dict[int, int]) -> tuple[dict[int, list[str]], list[str], list[tuple], tuple | None]:
    """Each relation's columns (its key K, its value V, then its join columns), the join condition
    of each edge (relation i's at i - 1), the edges that are references (child, column, parent),
    and the adversary's FD chain, if it drew one."""
    columns = {i: [f"K{i + 1}", f"V{i + 1}"] for i in range(len(names))}
    conditions, references = [], []
    referencing = {c: rng.random() < 0.6 for c in parent}
    chain = odd.fd_chain(parent, referencing) if odd else None
    for c, p in parent.items():
        if referencing[c]:   # a reference: child.F = parent.key
            col = f"F{c + 1}_{p + 1}"
            columns[c].append(col)
            conditions.append(f"{names[c]}.{col} = {names[p]}.K{p + 1}")
            references.append((c, col, p))
        else:                     # many-to-many on two non-key columns
            pc, cc = f"M{p + 1}_{c + 1}", f"M{c + 1}_{p + 1}"
            columns[p].append(pc)
            columns[c].append(cc)
            conditions.append(f"{names[p]}.{pc} = {names[c]}.{cc}")
    return columns, conditions, references, chain


def _initial_rows(rng: random.Random, names: list[str], columns: dict[int, list[str]]) -> dict[str, list[list]]:
    """Up to four rows per relation, keys and join values from a domain of five so that rows
    meet, values from 1-3."""
    domain = 5
    data = {}
    for i in range(len(names)):
        rows = []
        for key in rng.sample(range(1, domain + 1), rng.randint(0, 4)):
            row = [key] + [rng.randint(1, 3) if col.startswith("V") else rng.randint(1, domain)
                           for col in columns[i][1:]]
            rows.append(row)
        data[names[i]] = rows
    return data


def _declared_references(rng: random.Random, names: list[str], columns: dict[int, list[str]], placement: list[str],
                         data: dict[str, list[list]], references: list[tuple[int, str, int]]) -> list[dict]:
    """Referential integrity declared on some references within one source whose initial rows
    keep it (a source enforces constraints over its own relations alone)."""
    ri = []
    for c, col, p in references:
        parent_keys = {r[0] for r in data[names[p]]}
        refs = [r[columns[c].index(col)] for r in data[names[c]]]
        if placement[c] == placement[p] and rng.random() < 0.5 and all(v in parent_keys for v in refs):
            ri.append({"child": names[c], "columns": [col], "parent": names[p], "parent_columns": [f"K{p + 1}"]})
    return ri


def _select_list(rng: random.Random, names: list[str], columns: dict[int, list[str]]) -> list[str]:
    """The view's columns: every relation's key or none, and each other column now and then
    (R1.V1 when none was drawn)."""
    all_keys = rng.random() < 0.5
    select = []
    for i in range(len(names)):
        if all_keys:
            select.append(f"{names[i]}.K{i + 1}")
        for col in columns[i][1:]:
            if rng.random() < 0.4:
                select.append(f"{names[i]}.{col}")
    if not select:
        select.append(f"{names[0]}.V1")
    return select


def _view_sql(rng: random.Random, seed: int, names: list[str], columns: dict[int, list[str]],
              types: dict[int, list[str]], conditions: list[str], select: list[str], self_join: bool,
              aggregate: bool, semijoin: bool = False, outer_join: bool = False, antijoin: bool = False) -> str:
    """The view over `select`: the join tree, selections on some values, and the self-join, the
    aggregates, the EXISTS or the outer joins when asked for (each from a generator of its own, or none)."""
    three = {"BIGINT": "3", "VARCHAR": "'v3'", "DOUBLE": "3.5"}
    where = [f"{names[i]}.V{i + 1} <> {three[types[i][1]]}" for i in range(len(names)) if rng.random() < 0.2]
    if semijoin:
        return _semijoin_sql(names, conditions, select, where, "NOT EXISTS" if antijoin else "EXISTS")
    sides = _outer_sides(random.Random(f"outer joins {seed}"), len(names) - 1) if outer_join else [""] * (len(names) - 1)
    joins = [f" {sides[i - 1]}JOIN {names[i]} ON {conditions[i - 1]}" for i in range(1, len(names))]
    typed = {f"{names[i]}.{c}": typ for i in range(len(names)) for c, typ in zip(columns[i], types[i])}
    if self_join:
        twice = random.Random(f"self-join {seed}").randrange(len(names))
        again = f"{names[twice]}b"
        joins.append(f" JOIN {names[twice]} AS {again} ON {names[twice]}.V{twice + 1} = {again}.V{twice + 1}")
        select = select + [f"{again}.K{twice + 1} AS K{twice + 1}b"]
        typed.update({f"{again}.{c}": typ for c, typ in zip(columns[twice], types[twice])})
    select = list(dict.fromkeys(select))
    if aggregate:
        head, group_by = _summary(random.Random(f"summary {seed}"), select, typed)
    else:
        head, group_by = ", ".join(select), ""
    sql = f"SELECT {head} FROM {names[0]}" + "".join(joins)
    if where:
        sql += " WHERE " + " AND ".join(where)
    return sql + group_by


def _outer_sides(rng: random.Random, joins: int) -> list[str]:
    """Each join's side (LEFT, RIGHT, FULL or inner), at least one outer."""
    sides = [rng.choice(("LEFT ", "RIGHT ", "FULL ", "")) for _ in range(joins)]
    if not any(sides):
        sides[rng.randrange(joins)] = rng.choice(("LEFT ", "RIGHT ", "FULL "))
    return sides


def _semijoin_sql(names: list[str], conditions: list[str], select: list[str], where: list[str],
                  exists: str = "EXISTS") -> str:
    """The view with its last relation (a leaf of the join tree) asked for in `exists` (EXISTS or
    NOT EXISTS)."""
    last = names[-1]
    inside = [c for c in where if c.startswith(f"{last}.")]
    outside = [c for c in where if not c.startswith(f"{last}.")]
    shown = [item for item in dict.fromkeys(select) if not item.startswith(f"{last}.")] or [f"{names[0]}.K1"]
    joins = "".join(f" JOIN {names[i]} ON {conditions[i - 1]}" for i in range(1, len(names) - 1))
    test = f"{exists} (SELECT 1 FROM {last} WHERE {' AND '.join([conditions[-1], *inside])})"
    return f"SELECT {', '.join(shown)} FROM {names[0]}{joins} WHERE {' AND '.join([*outside, test])}"


def _summary(rng: random.Random, select: list[str], typed: dict[str, str]) -> tuple[str, str]:
    """An aggregate select list over the drawn columns, and its GROUP BY clause (or "")."""
    kind = rng.choice(("distinct", "grouped", "grand total"))
    if kind == "distinct":
        return "DISTINCT " + ", ".join(select), ""
    columns: dict[str, str] = {}   # a column shown twice: once, as first named
    for item in select:
        columns.setdefault(item.split(" AS ")[0], item)
    groups = rng.sample(list(columns), rng.randint(1, min(2, len(columns)))) if kind == "grouped" else []
    others = [c for c in columns if c not in groups] or list(columns)
    aggregates = ["COUNT(*)"]
    for column in rng.sample(others, min(len(others), 3)):
        functions = ["COUNT", "MIN", "MAX"] + (["SUM", "AVG"] if typed[column] == "BIGINT" else [])
        aggregates.append(f"{rng.choice(functions)}({column})")
    items = [columns[g] for g in groups] + [f"{a} AS a{i}" for i, a in enumerate(aggregates)]
    return ", ".join(items), (" GROUP BY " + ", ".join(groups) if groups else "")


# Lazy's bounds in simulated time (a step is 1, a timer round 2), by seed: from one transaction
# per job to every pending one, so that schedules combine few, many, or across sources.
LAZY_BOUNDS = ({"combine_max": 1, "max_delay": 0, "idle_after": 0},
               {"combine_max": 4, "max_delay": 6, "idle_after": 3},
               {"combine_max": 100, "max_delay": 20, "idle_after": 5},
               {"combine_max": 100, "max_delay": 1, "idle_after": 0.2},
               {"combine_max": 3, "max_delay": 2, "idle_after": 1, "max_jobs": 3})


class _Adversary:
    """The shapes adversarial testing found defects in, drawn from a generator of their own (one per seed)."""

    def __init__(self, seed: int):
        self.rng = random.Random(f"adversarial {seed}")

    def fd_chain(self, parent: dict, referencing: dict) -> tuple[int, int, int] | None:
        """Now and then the shape that found a defect: a leaf L joined many-to-many to P, which references
        its parent Q. With the FD `P.M -> P.F` and L's key in the view, L determines Q through
        a P whose key the view does not show: Q's deletions and modifications are applied by
        Q's key path, whose last relation is read from the view (partial self-maintenance)."""
        leaves = [c for c in parent if c not in parent.values() and parent[c] in parent]
        if not leaves or self.rng.random() < 0.2:
            return None
        leaf = self.rng.choice(leaves)
        middle = parent[leaf]
        referencing[leaf], referencing[middle] = False, True
        return parent[middle], middle, leaf

    def functional_dependencies(self, names, columns, data, chain) -> list[dict]:
        """`join column -> every other non-key column` on some relations (`x -> d, y`: an FD that
        reaches on along the join graph), with the data made to satisfy it."""
        fds = []
        for i, name in enumerate(names):
            joins = columns[i][2:]
            in_chain = chain is not None and i == chain[1]
            if not joins or (self.rng.random() < 0.4 and not in_chain):
                continue
            lhs = f"M{i + 1}_{chain[2] + 1}" if in_chain else self.rng.choice(joins)
            at = columns[i].index(lhs)
            rhs = [c for c in columns[i][1:] if c != lhs]
            image: dict = {}
            for row in data[name]:
                fixed = image.setdefault(row[at], {c: row[columns[i].index(c)] for c in rhs})
                for c, v in fixed.items():
                    row[columns[i].index(c)] = v
            fds.append({"relation": name, "from": [lhs], "to": rhs})
        return fds

    def type_values(self, columns, types, data) -> None:
        """Some value columns become VARCHAR or DOUBLE: equal arities, different types."""
        for i, cols in columns.items():
            kind = self.rng.choice(("BIGINT", "BIGINT", "VARCHAR", "DOUBLE"))
            if kind == "BIGINT":
                continue
            at = cols.index(f"V{i + 1}")
            types[i][at] = kind
            for row in data[f"R{i + 1}"]:
                row[at] = f"v{row[at]}" if kind == "VARCHAR" else row[at] + 0.5

    def null_join_values(self, columns, data) -> None:
        """A few NULLs in join columns: such a row joins nothing."""
        for i, cols in columns.items():
            for row in data[f"R{i + 1}"]:
                for at in range(2, len(cols)):
                    if self.rng.random() < 0.1:
                        row[at] = None

    def non_key_references(self, names, columns, placement, data) -> list[dict]:
        """RI whose parent columns are not the parent's key (a many-to-many edge's columns) on
        same-source edges; the data is made to satisfy it, with parents sharing their values so
        that a new or deleted parent meets children referring to another one."""
        ri = []
        for c, child in enumerate(names):
            for col in columns[c]:
                if not col.startswith("M"):
                    continue
                p = int(col.split("_")[1]) - 1
                pcol = f"M{p + 1}_{c + 1}"
                parents = data[names[p]]
                if placement[c] != placement[p] or not parents:
                    continue
                at, child_at = columns[p].index(pcol), columns[c].index(col)
                shared = parents[0][at] if parents[0][at] is not None else 1
                for row in parents:
                    row[at] = shared
                for row in data[child]:
                    row[child_at] = shared
                ri.append({"child": child, "columns": [col], "parent": names[p], "parent_columns": [pcol]})
        return ri

    def select_list(self, names, fds, select, chain) -> list[str]:
        """Adds keys of some relations and FD left sides (the ends of FD chains through relations
        whose own key stays hidden), shows the FD chain's ends without its middle's key, and
        shows a column twice."""
        extra = []
        for i in range(len(names)):
            if self.rng.random() < 0.4:
                extra.append(f"{names[i]}.K{i + 1}")
        for fd in fds:
            if self.rng.random() < 0.7:
                extra.append(f"{fd['relation']}.{fd['from'][0]}")
        hidden = set()
        if chain is not None:
            q, middle, leaf = chain
            extra += [f"{names[leaf]}.K{leaf + 1}", f"{names[leaf]}.M{leaf + 1}_{middle + 1}", f"{names[q]}.V{q + 1}"]
            hidden = {f"{names[middle]}.K{middle + 1}"}
        out = [c for c in dict.fromkeys(select + extra) if c not in hidden]
        if self.rng.random() < 0.4:
            again = self.rng.choice(out)
            out.append(f"{again} AS {again.split('.')[1]}_again")
        return out
