"""What combining costs and saves: lazy maintenance at each combine bound beside Sze-Ling.

Zhou & Larson 2007 report that combining 100 maintenance tasks, with condense, cut maintenance
time more than 13x (section 5, as NOTES.md records it). Here a maintenance job is a set of
sub-queries to the sources, their compensation and one view delta; its cost is read from the
bench's own figures at the same offered load: sub-queries and bytes per source transaction
(the message logs), CPU per transaction of every process in the load phase, and what it costs
in freshness (staleness, and how long a read waits for the view to catch up).
"""

from __future__ import annotations

from loadgen.bench.resources import cpu_ms_per_txn


def tradeoff(runs: list[dict]) -> dict:
    """{"rows": one per lazy or Sze-Ling run (first trial), "finding": a sentence on the paper's
    claim, comparing lazy@1 with lazy@100 on the same view, scale and chaos}."""
    rows = [_row(r) for r in runs if r.get("trial", 1) == 1 and r["algorithm"] in ("lazy", "sze-ling")]
    if not any(r["algorithm"] == "lazy" for r in rows):
        return {"rows": [], "finding": ""}
    return {"rows": rows, "finding": _finding(rows)}


def _row(r: dict) -> dict:
    counters, per_txn = r.get("counters") or {}, r.get("per_txn") or {}
    transactions = r.get("transactions") or 0
    staleness, read = r.get("staleness_ms") or {}, r.get("read_latency_ms") or {}
    load_cpu = (r.get("cpu") or [None])[0]
    return {"label": r["label"], "algorithm": r["algorithm"], "combine_max": r.get("combine_max"),
            "where": (r["view"], r["scale"], r["chaos"]), "max_sustained_rate": r.get("max_sustained_rate"),
            "jobs_per_txn": _per(counters.get("jobs"), transactions),
            "condensed_per_txn": _per(counters.get("condensed"), transactions),
            "subqueries_per_txn": per_txn.get("subqueries"), "bytes_per_txn": per_txn.get("bytes"),
            "cpu_ms_per_txn": cpu_ms_per_txn(load_cpu, r.get("committed_in_load")) if load_cpu else None,
            "staleness_p50_ms": staleness.get("p50"), "staleness_p99_ms": staleness.get("p99"),
            "read_p50_ms": read.get("p50"), "read_p99_ms": read.get("p99"),
            "consistency": r.get("consistency", "-")}


def _per(count, transactions: int):
    return round(count / transactions, 3) if count is not None and transactions else None


def _finding(rows: list[dict]) -> str:
    pairs = [(one, hundred) for one in rows if one["combine_max"] == 1
             for hundred in rows if hundred["combine_max"] == 100 and hundred["where"] == one["where"]]
    if not pairs:
        return ("The paper's claim (combining 100 tasks with condense cut maintenance more than 13x) needs "
                "lazy@1 and lazy@100 on the same view: run with --combine-max 1,100 at least.")
    one, hundred = pairs[0]
    figures = [(name, one[key], hundred[key]) for name, key in
               (("sub-queries", "subqueries_per_txn"), ("bytes", "bytes_per_txn"), ("CPU ms", "cpu_ms_per_txn"))]
    said = "; ".join(f"{name} per transaction {a:g} -> {b:g} ({_ratio(a, b)}x)" for name, a, b in figures
                     if a is not None and b is not None)
    cpu = _ratio(one["cpu_ms_per_txn"], hundred["cpu_ms_per_txn"])
    verdict = "not measured" if cpu is None else "reproduced" if cpu > 13 else "not reproduced"
    return (f"lazy@1 -> lazy@100 on {one['where'][0]}, SF {one['where'][1]:g}: {said}. The paper's 'combining "
            f"100 tasks with condense cut maintenance more than 13x' is {verdict} in CPU per transaction, which "
            "here counts every process of the federation (the sources' commits, the notifications and the Delta "
            "batches too, which combining does not change).")


def _ratio(a, b) -> float | None:
    """How many times a is b."""
    return round(a / b, 1) if a and b else None
