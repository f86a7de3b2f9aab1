"""Cost as the federation grows: what each source transaction costs against the
number of sources, per shape of the view (`fedlab bench --federation chain,star --sources 3,6,12,24`).

Every figure is the run's own, over its load phase (where the offered rate is the same for every
run): the CPU every process used (bench.resources: the sources, the warehouse's Python and
its Spark JVM, the load driver, Ray's own processes; the profilers of --profile left out) per source
transaction committed in it, also split by part; the bytes sent on the wire per transaction and the
sub-queries per transaction (bench.metrics, from the nodes' message logs); staleness p50
and p99 to the core's view and to the Delta table; memory per source, the sources' peak resident
sets (each process's own peak) summed over the sources and divided by their number. With --idle,
also the share of a core the federation used with nothing offered, and the CPU per transaction
above it: the load phase's CPU less what the idle federation used in as long (every source
actor, Ray's services and the warehouse's loops keep running), a part that grows with the
number of sources and weighs the more the lower the rate.
"""

from __future__ import annotations

from fedlab.bench.combining import times
from fedlab.bench.resources import DRIVER, JVM, PROFILER, WAREHOUSE, cpu_ms_per_txn

SOURCE = "source "   # the sampler's role of a source actor's process: "source s01"
PARTS = ("sources", "warehouse", "driver", "other")


def growth(runs: list[dict]) -> list[dict]:
    """One row per run over a synthetic federation, by algorithm, shape and number of sources;
    [] when the bench ran none."""
    rows = [_row(r) for r in runs if r.get("synthetic")]
    return sorted(rows, key=lambda row: (row["label"], row["shape"], row["sources"], row["trial"]))


def _row(run: dict) -> dict:
    synthetic, staleness, to_delta = run["synthetic"], run.get("staleness_ms") or {}, run.get("staleness_delta_ms") or {}
    load = next((c for c in run.get("cpu") or [] if c["phase"] == "load"), None)
    committed = run.get("committed_in_load")
    by_part = cpu_parts(load["by_role"]) if load else None
    idle = run.get("idle")
    above_idle = None
    if by_part and idle and committed:
        idle_rate = sum(cpu_parts(idle["by_role"]).values()) / idle["seconds"]
        above_idle = round(1000 * (sum(by_part.values()) - idle_rate * load["seconds"]) / committed, 2)
    return {"label": run["label"], "shape": synthetic["shape"], "sources": synthetic["sources"],
            "trial": run.get("trial", 1), "rate_target": run.get("rate_target"), "rate_achieved": run.get("rate_achieved"),
            "cpu_ms_per_txn": cpu_ms_per_txn({"by_role": by_part}, committed) if by_part else None,
            "cpu_ms_per_txn_by_part": {part: cpu_ms_per_txn({"by_role": {part: s}}, committed)
                                       for part, s in by_part.items()} if by_part and committed else None,
            "cpu_ms_per_txn_above_idle": above_idle,
            "bytes_per_txn": (run.get("per_txn") or {}).get("bytes"),
            "subqueries_per_txn": (run.get("per_txn") or {}).get("subqueries"),
            "staleness_p50_ms": staleness.get("p50"), "staleness_p99_ms": staleness.get("p99"),
            "to_delta_p50_ms": to_delta.get("p50"), "to_delta_p99_ms": to_delta.get("p99"),
            **memory_per_source(run.get("peak_memory_by_process_mb") or {}, synthetic["sources"]),
            "idle_share_of_a_core": idle["share_of_a_core"] if idle else None,
            "consistency": run.get("consistency")}


def cpu_parts(by_role: dict[str, float]) -> dict[str, float]:
    """CPU seconds of a cpu_use reading by part of the federation; what profiling cost is left out.

    >>> cpu_parts({"source s01": 1.0, "source s02": 0.5, "spark JVM": 2.0, "warehouse (python)": 1.0,
    ...            "load driver": 0.25, "ray and helpers": 0.125, "profilers (py-spy)": 3.0})
    {'sources': 1.5, 'warehouse': 3.0, 'driver': 0.25, 'other': 0.125}
    """
    parts = dict.fromkeys(PARTS, 0.0)
    for role, seconds in by_role.items():
        if role != PROFILER:
            part = ("sources" if role.startswith(SOURCE) else "warehouse" if role in (WAREHOUSE, JVM)
                    else "driver" if role == DRIVER else "other")
            parts[part] += seconds
    return parts


def memory_per_source(peaks: dict[str, float], sources: int) -> dict:
    """The sources' peak resident memory (each source process's own peak, MB) over their number,
    and how many of them the sampler measured (a source whose process it could not name is not).

    >>> memory_per_source({"source s01": 150.0, "source s02": 170.0, "spark JVM": 900.0}, 2)
    {'memory_per_source_mb': 160.0, 'sources_measured': 2}
    """
    measured = [mb for role, mb in peaks.items() if role.startswith(SOURCE)]
    return {"memory_per_source_mb": round(sum(measured) / sources, 1) if len(measured) == sources else None,
            "sources_measured": len(measured)}


FIGURES = (("cpu_ms_per_txn", "CPU/txn", "ms"), ("bytes_per_txn", "bytes/txn", ""),
           ("staleness_p99_ms", "staleness p99", "ms"), ("to_delta_p99_ms", "to Delta p99", "ms"),
           ("memory_per_source_mb", "memory per source", "MB"))


def finding(rows: list[dict]) -> str:
    """How each figure grew from the fewest sources to the most, per algorithm and shape (first
    trials only), from the measured figures; "" with fewer than two sizes."""
    lines = []
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        if row["trial"] == 1:
            groups.setdefault((row["label"], row["shape"]), []).append(row)
    for (label, shape), group in groups.items():
        small, large = group[0], group[-1]
        if small["sources"] == large["sources"]:
            continue
        grew = [f"{name} {small[key]:g} -> {large[key]:g}{f' {unit}' if unit else ''}" + times(large[key], small[key])
                for key, name, unit in FIGURES if small[key] is not None and large[key] is not None]
        lines.append(f"{shape} ({label}), {small['sources']} -> {large['sources']} sources: {', '.join(grew)}")
    return "; ".join(lines) + "." if lines else ""
