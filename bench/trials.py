"""How far repeated trials of the same run differ (`fedlab bench --repeat N`).

On a 2-core machine that runs every process of the federation, one trial's highest sustained
ramp step can differ from the next one's by a step or two (docs/results.md, "Benchmark", says why),
so a comparison of algorithms needs the spread, not one draw. Runs that differ only in their
trial are grouped; each figure is given as its median and its range over the trials.
"""

from __future__ import annotations

import statistics

from fedlab.bench.ramp import top_sustained

GROUPED_BY = ("label", "view", "scale", "chaos", "placement")


def spread(values) -> dict | None:
    """Median, least and greatest of the values that were measured (None: not measured).

    >>> spread([512, None, 1024, 256])
    {'median': 512, 'min': 256, 'max': 1024, 'values': [512, None, 1024, 256]}
    >>> spread([None]) is None
    True
    """
    values = list(values)
    measured = [v for v in values if v is not None]
    if not measured:
        return None
    return {"median": statistics.median(measured), "min": min(measured), "max": max(measured), "values": values}


def committed_at_max(run: dict) -> float | None:
    """What the sources committed per second in the run's highest sustained ramp step."""
    top = top_sustained(run.get("ramp") or [])
    return top["achieved"] if top else None


def trials(runs: list[dict]) -> list[dict]:
    """One entry per run repeated more than once: its trials' figures as spreads."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault(tuple(r.get(k) for k in GROUPED_BY), []).append(r)
    out = []
    for key, group in groups.items():
        if len(group) < 2:
            continue
        out.append({**dict(zip(GROUPED_BY, key)), "trials": len(group),
                    "max_sustained_rate": spread(r.get("max_sustained_rate") for r in group),
                    "committed_at_max": spread(committed_at_max(r) for r in group),
                    "staleness_p50_ms": spread((r.get("staleness_ms") or {}).get("p50") for r in group),
                    "staleness_p99_ms": spread((r.get("staleness_ms") or {}).get("p99") for r in group),
                    "to_delta_p99_ms": spread((r.get("staleness_delta_ms") or {}).get("p99") for r in group),
                    "bytes_per_txn": spread((r.get("per_txn") or {}).get("bytes") for r in group),
                    "consistency": [r.get("consistency") for r in group]})
    return out
