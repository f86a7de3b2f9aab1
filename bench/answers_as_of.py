"""What answering as of a version costs and saves: `versioned` beside Sze-Ling.

Versioned maintenance asks every sub-query at its task's initial versions, and the sources rebuild
those states from their recent changes (fedmodel.as_of, Vinh 2020 formula 12), so the warehouse
compensates nothing. The work moves from the warehouse to the sources: compared here per source
transaction over the load phase, both on the same view, scale and chaos, are the compensations
the warehouse did, the sub-queries and maintenance bytes on the wire, the sources' CPU and the
warehouse's (its Python process and Spark's JVM), and the staleness.
"""

from __future__ import annotations

from fedlab.bench.combining import per, times

WAREHOUSE_ROLES = ("warehouse (python)", "spark JVM")


def comparison(runs: list[dict]) -> dict:
    """{"rows": one per versioned or Sze-Ling run (first trial), "finding": a sentence comparing
    each versioned run with the Sze-Ling run on the same view, scale and chaos}."""
    rows = [_row(r) for r in runs if r.get("trial", 1) == 1 and r["algorithm"] in ("versioned", "sze-ling")
            and r.get("access_path", "join-graph") == "join-graph"]
    if not any(r["algorithm"] == "versioned" for r in rows):
        return {"rows": [], "finding": ""}
    return {"rows": rows, "finding": _finding(rows)}


def _row(r: dict) -> dict:
    per_txn, staleness = r.get("per_txn") or {}, r.get("staleness_ms") or {}
    load = (r.get("cpu") or [{}])[0].get("by_role", {})
    committed = r.get("committed_in_load") or 0
    return {"label": r["label"], "algorithm": r["algorithm"], "where": (r["view"], r["scale"], r["chaos"]),
            "compensations_per_txn": per_txn.get("compensations"), "subqueries_per_txn": per_txn.get("subqueries"),
            "maintenance_bytes_per_txn": per_txn.get("maintenance_bytes"),
            "source_cpu_ms_per_txn": per(1000 * sum(s for role, s in load.items() if role.startswith("source ")), committed),
            "warehouse_cpu_ms_per_txn": per(1000 * sum(load.get(role, 0.0) for role in WAREHOUSE_ROLES), committed),
            "staleness_p50_ms": staleness.get("p50"), "staleness_p99_ms": staleness.get("p99"),
            "max_sustained_rate": r.get("max_sustained_rate"), "consistency": r.get("consistency", "-")}


def _finding(rows: list[dict]) -> str:
    said = []
    for v in (r for r in rows if r["algorithm"] == "versioned"):
        base = next((r for r in rows if r["algorithm"] == "sze-ling" and r["where"] == v["where"]), None)
        if base is None:
            continue
        parts = [f"{name} {base[key]:g} -> {v[key]:g}" + times(base[key], v[key])
                 for name, key in (("compensations/txn", "compensations_per_txn"),
                                   ("source CPU ms/txn", "source_cpu_ms_per_txn"),
                                   ("warehouse CPU ms/txn", "warehouse_cpu_ms_per_txn"),
                                   ("maintenance bytes/txn", "maintenance_bytes_per_txn"),
                                   ("staleness p50 ms", "staleness_p50_ms"))
                 if base[key] is not None and v[key] is not None]
        said.append(f"{base['label']} -> {v['label']} on {v['where'][0]}: {', '.join(parts)}")
    if not said:
        return "Versioned needs a sze-ling run on the same view, scale and chaos to compare with."
    return "; ".join(said) + "."
