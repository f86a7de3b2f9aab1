"""Algorithms on the very same stream against each alone (`fedlab bench --same-stream`, issue 35).

A shared run keeps one view under several algorithms at once, a warehouse each, subscribed to
one federation's sources by names of their own: one load, one fault schedule, one machine's noise
(bench.runner.run_stream). Beside it the bench runs each algorithm alone. From their
records this module says, per group of runs that differ only in their algorithm:
- each algorithm's figures on the shared stream and alone (medians and ranges over the trials),
  and how much the others on its stream disturbed it: the shared median minus the alone one;
- whether the comparison is steadier on one stream: for each other algorithm against the first,
  the difference of a figure within each trial, and how far those differences spread over the
  trials, shared and alone. A comparison that separate runs blur with their own load and noise
  spreads less when both algorithms saw the same stream.
What the stream costs is the whole federation's CPU per committed transaction, every warehouse
included (they share one process: a shared run's CPU is not split by algorithm), against the sum
of the algorithms' alone runs, each of which pays the sources and the load again.
"""

from __future__ import annotations

from fedlab.bench.resources import cpu_ms_per_txn
from fedlab.bench.trials import spread

GROUPED_BY = ("view", "scale", "chaos", "placement")
# figure -> how it is read from a run's record
FIGURES = {
    "staleness p50 ms": lambda r: (r.get("staleness_ms") or {}).get("p50"),
    "staleness p99 ms": lambda r: (r.get("staleness_ms") or {}).get("p99"),
    "to Delta p99 ms": lambda r: (r.get("staleness_delta_ms") or {}).get("p99"),
    "messages/txn": lambda r: (r.get("per_txn") or {}).get("messages"),
    "bytes/txn": lambda r: (r.get("per_txn") or {}).get("bytes"),
}
COMPARED = ("staleness p50 ms", "staleness p99 ms")   # the differences whose steadiness is shown


def comparison(runs: list[dict]) -> list[dict]:
    """One entry per group that ran on a shared stream (none without `stream` marks)."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        if r.get("stream") in ("shared", "alone"):
            groups.setdefault(tuple(r.get(k) for k in GROUPED_BY), []).append(r)
    out = []
    for key, group in groups.items():
        shared = [r for r in group if r["stream"] == "shared"]
        if not shared:
            continue
        alone = [r for r in group if r["stream"] == "alone"]
        labels = list(dict.fromkeys(r["label"] for r in shared))
        out.append({**dict(zip(GROUPED_BY, key)), "trials": len({r.get("trial", 1) for r in shared}),
                    "algorithms": [_algorithm(label, shared, alone) for label in labels],
                    "differences": [_difference(labels[0], other, figure, shared, alone)
                                    for other in labels[1:] for figure in COMPARED],
                    "cpu_ms_per_txn": {"shared stream": spread(_stream_cpu(shared)),
                                       "alone, summed": spread(_summed_cpu(alone, labels))}})
    return out


def _algorithm(label: str, shared: list[dict], alone: list[dict]) -> dict:
    mine = {"shared": [r for r in shared if r["label"] == label], "alone": [r for r in alone if r["label"] == label]}
    figures = {kind: {name: spread(read(r) for r in runs) for name, read in FIGURES.items()}
               for kind, runs in mine.items()}
    disturbance = {name: _minus(figures["shared"][name], figures["alone"][name]) for name in FIGURES}
    return {"label": label, **figures, "disturbance": disturbance,
            "consistency": {kind: [r.get("consistency") for r in runs] for kind, runs in mine.items()}}


def _difference(first: str, other: str, figure: str, shared: list[dict], alone: list[dict]) -> dict:
    """`other`'s figure minus `first`'s within each trial, shared and alone, and which spreads less."""
    read = FIGURES[figure]
    diffs = {kind: spread(_per_trial(runs, first, other, read)) for kind, runs in (("shared", shared), ("alone", alone))}
    ranges = {kind: None if d is None or len([v for v in d["values"] if v is not None]) < 2 else d["max"] - d["min"]
              for kind, d in diffs.items()}
    steadier = None
    if None not in ranges.values():
        steadier = "shared" if ranges["shared"] < ranges["alone"] else "alone" if ranges["alone"] < ranges["shared"] else "same"
    return {"figure": figure, "of": f"{other} - {first}", **diffs, "range": ranges, "steadier": steadier}


def _per_trial(runs: list[dict], first: str, other: str, read) -> list[float | None]:
    """Per trial, `other`'s figure minus `first`'s (None where either was not measured).

    >>> runs = [{"label": "a", "trial": 1, "x": 10}, {"label": "b", "trial": 1, "x": 25},
    ...         {"label": "a", "trial": 2, "x": 12}, {"label": "b", "trial": 2, "x": None}]
    >>> _per_trial(runs, "a", "b", lambda r: r["x"])
    [15, None]
    """
    by_trial: dict[int, dict[str, float | None]] = {}
    for r in runs:
        by_trial.setdefault(r.get("trial", 1), {})[r["label"]] = read(r)
    return [_minus(seen.get(other), seen.get(first)) for _, seen in sorted(by_trial.items())]


def _stream_cpu(shared: list[dict]) -> list[float | None]:
    """Per trial, the shared stream's CPU per committed transaction (every record of a trial's
    stream holds the same reading: the first's is taken)."""
    first = {}
    for r in shared:
        first.setdefault(r.get("trial", 1), r)
    return [_load_cpu(r) for _, r in sorted(first.items())]


def _summed_cpu(alone: list[dict], labels: list[str]) -> list[float | None]:
    """Per trial, the alone runs' CPU per committed transaction summed over the algorithms: what
    running them one after another costs the federation for the same comparison."""
    by_trial: dict[int, list[float | None]] = {}
    for r in alone:
        if r["label"] in labels:
            by_trial.setdefault(r.get("trial", 1), []).append(_load_cpu(r))
    return [None if None in ms else round(sum(ms), 2) for _, ms in sorted(by_trial.items())]


def _load_cpu(r: dict) -> float | None:
    cpu = r.get("cpu") or []
    return cpu_ms_per_txn(cpu[0], r.get("committed_in_load")) if cpu else None


def _minus(a, b):
    """a - b for figures or spreads (their medians); None when either is missing.

    >>> _minus({"median": 30.0}, {"median": 12.5}), _minus(3, None)
    (17.5, None)
    """
    a = a["median"] if isinstance(a, dict) else a
    b = b["median"] if isinstance(b, dict) else b
    return None if a is None or b is None else round(a - b, 2)


def finding(groups: list[dict]) -> list[str]:
    """One sentence per compared difference over two trials or more: which spread less."""
    lines = []
    for g in groups:
        for d in g["differences"]:
            if d["steadier"] is None:
                continue
            r = d["range"]
            lines.append(f"{g['view']} ({g['chaos']}), {d['of']} in {d['figure']}: over {g['trials']} trials the "
                         f"difference spread {r['shared']:g} on one stream and {r['alone']:g} in separate runs "
                         + {"shared": "(steadier on one stream)", "alone": "(steadier in separate runs)",
                            "same": "(as steady)"}[d["steadier"]])
    return lines
