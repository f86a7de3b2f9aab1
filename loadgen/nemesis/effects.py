"""What each fault of a nemesis schedule did to the view's freshness.

The load's time is cut at each fault's start: a fault's phase runs from its start to the next
fault's (the last one's to the end of the load), and the phase before the first fault is the
baseline. Each phase reports the staleness to the core's view (loadgen.bench.metrics: from a
transaction's commit at its source to the first view state that reflects it) of the transactions
committed in it: what the fault cost while it lasted and until the federation recovered. The
longest is how long the view stood still behind the fault, for a transaction committed as it
began.

    >>> applied = [{"fault": "pause a at 1s for 2s", "began": 101.0, "ended": 103.0}]
    >>> lags = [(100.5, 0.01), (101.5, 1.6), (102.5, 0.7), (104.0, 0.02)]
    >>> [(p["phase"], p["committed"], p["staleness_ms"]["max"]) for p in phases(applied, lags, 100.0, 105.0)]
    [('before any fault', 1, 10.0), ('pause a at 1s for 2s', 3, 1600.0)]
"""

from __future__ import annotations

from pathlib import Path

from loadgen.bench.metrics import percentiles


def phases(applied: list[dict], lags: list[tuple[float, float]], load_from: float, load_until: float) -> list[dict]:
    """One phase per fault as above, after the baseline: its fault's text and window (`began`,
    `ended`: wall-clock seconds), the transactions committed in it and their staleness in ms.
    `lags` are (commit time, seconds until reflected) pairs (loadgen.bench.metrics.staleness)."""
    starts = [load_from] + [a["began"] for a in applied]
    ends = starts[1:] + [load_until]
    names = ["before any fault"] + [a["fault"] for a in applied]
    out = []
    for name, start, end, fault in zip(names, starts, ends, [None, *applied]):
        lagging = [lag for committed, lag in lags if start <= committed < end]
        phase = {"phase": name, "committed": len(lagging), "staleness_ms": percentiles(lagging)}
        if fault is not None:
            phase["window_s"] = round(fault["ended"] - fault["began"], 3)
        out.append(phase)
    return out


def describe(phase: dict) -> str:
    """One line of a phase, as `fedlab run` prints it."""
    lag = phase["staleness_ms"]
    figures = (f"staleness p50 {lag['p50']:,.0f} ms, max {lag['max']:,.0f} ms" if lag["n"]
               else "nothing committed")
    return f"{phase['phase']}: {phase['committed']} transactions, {figures}"


def figures(applied: list[dict], lags: list[tuple[float, float]], load_from: float, load_until: float,
            plot: Path) -> dict:
    """What the faults did, as `fedlab run` and `fedlab bench` report it: `fault_phases` (`phases`)
    and `fault_plot`, the figure written to `plot` (loadgen.nemesis.plot)."""
    from loadgen.nemesis.plot import plot_faults

    return {"fault_phases": phases(applied, lags, load_from, load_until),
            "fault_plot": str(plot_faults(plot, applied, lags, load_from, load_until))}
