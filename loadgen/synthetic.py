"""Random federations for stress and property tests: schemas, join graphs, placements, data.

`random_scenario(seed, ...)` returns a scenario document (the scenario file's structure) with
2-6 relations over 2-4 sources joined as a chain, a star or a random tree. Each join edge is
either a reference (the child's column equals the parent's key: the parent is functionally
determined, so partial self-maintenance and key refresh have work to do) or many-to-many (two
non-key columns). Views keep every key (no count) or only some columns (a count); some relations
carry a selection; same-source references are sometimes declared as referential integrity.
Same seed, same scenario.
"""

from __future__ import annotations

import random

SHAPES = ("chain", "star", "tree")


def random_scenario(seed: int, relations: tuple[int, int] = (2, 6), sources: tuple[int, int] = (2, 4),
                    steps: int = 60, drop: float = 0.2, reorder: float = 0.3, duplicate: float = 0.05,
                    commit_rate: float = 0.4, algorithm: str = "sze-ling") -> dict:
    rng = random.Random(seed)
    n = rng.randint(*relations)
    k = rng.randint(sources[0], min(sources[1], n))
    shape = rng.choice(SHAPES)
    names = [f"R{i + 1}" for i in range(n)]
    parent = {i: (i - 1 if shape == "chain" else 0 if shape == "star" else rng.randrange(i)) for i in range(1, n)}
    placement = [f"ds{i + 1}" for i in range(k)] + [f"ds{rng.randrange(k) + 1}" for _ in range(n - k)]
    rng.shuffle(placement)

    columns = {i: [f"K{i + 1}", f"V{i + 1}"] for i in range(n)}
    conditions, references = [], []
    for c, p in parent.items():
        if rng.random() < 0.6:   # a reference: child.F = parent.key
            col = f"F{c + 1}_{p + 1}"
            columns[c].append(col)
            conditions.append(f"{names[c]}.{col} = {names[p]}.K{p + 1}")
            references.append((c, col, p))
        else:                     # many-to-many on two non-key columns
            pc, cc = f"M{p + 1}_{c + 1}", f"M{c + 1}_{p + 1}"
            columns[p].append(pc)
            columns[c].append(cc)
            conditions.append(f"{names[p]}.{pc} = {names[c]}.{cc}")

    domain = 5
    data = {}
    for i in range(n):
        rows = []
        for key in rng.sample(range(1, domain + 1), rng.randint(0, 4)):
            row = [key] + [rng.randint(1, 3) if col.startswith("V") else rng.randint(1, domain)
                           for col in columns[i][1:]]
            rows.append(row)
        data[names[i]] = rows

    doc_sources: dict = {}
    for i, name in enumerate(names):
        doc_sources.setdefault(placement[i], {})[name] = {"columns": columns[i], "types": ["BIGINT"] * len(columns[i]),
                                                          "key": [f"K{i + 1}"]}
    ri = []
    for c, col, p in references:
        parent_keys = {r[0] for r in data[names[p]]}
        refs = [r[columns[c].index(col)] for r in data[names[c]]]
        if placement[c] == placement[p] and rng.random() < 0.5 and all(v in parent_keys for v in refs):
            ri.append({"child": names[c], "columns": [col], "parent": names[p], "parent_columns": [f"K{p + 1}"]})

    all_keys = rng.random() < 0.5
    select = []
    for i in range(n):
        if all_keys:
            select.append(f"{names[i]}.K{i + 1}")
        for col in columns[i][1:]:
            if rng.random() < 0.4:
                select.append(f"{names[i]}.{col}")
    if not select:
        select.append(f"{names[0]}.V1")
    where = [f"{names[i]}.V{i + 1} <> 3" for i in range(n) if rng.random() < 0.2]
    sql = f"SELECT {', '.join(dict.fromkeys(select))} FROM {names[0]}"
    for i in range(1, n):
        sql += f" JOIN {names[i]} ON {conditions[i - 1]}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    return {
        "name": f"random federation {seed} ({shape}, {n} relations, {k} sources)",
        "algorithm": algorithm,
        "sources": doc_sources,
        "constraints": {"ri": ri},
        "view": sql,
        "initial": data,
        "steps": [{"random": {"seed": seed, "steps": steps, "drop": drop, "reorder": reorder,
                              "duplicate": duplicate, "commit_rate": commit_rate}},
                  {"run": "all"}],
        "expect": {"consistency": "complete"},
    }
