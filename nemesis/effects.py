"""What each fault of a nemesis schedule did to the view's freshness.

The load's time is cut at each fault's start: a fault's phase runs from its start to the next
fault's (the last one's to the end of the load), and the phase before the first fault is the
baseline. Each phase reports the staleness to the core's view (bench.metrics: from a
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

from fedlab.bench.metrics import percentiles


def phases(applied: list[dict], lags: list[tuple[float, float]], load_from: float, load_until: float) -> list[dict]:
    """One phase per fault as above, after the baseline: its fault's text and window (`began`,
    `ended`: wall-clock seconds), the transactions committed in it and their staleness in ms.
    `lags` are (commit time, seconds until reflected) pairs (bench.metrics.staleness)."""
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


def standstills(applied: list[dict], state_times: list[float], load_from: float, load_until: float) -> list[dict]:
    """The view's longest standstill in each phase (as `phases` cuts them): the longest time
    between two view states, by the warehouse's clock alone, and when it began in seconds after
    the phase's start (0 if just before). A standstill belongs to the first fault that began
    inside it (the view stands still from its last state before the fault), else to the phase it
    began in. Read from the warehouse's history only, it holds under clock faults, which move the
    sources' commit stamps. `state_times` are the view states' applied times.

    >>> applied = [{"fault": "kill warehouse at 2s", "began": 102.0, "ended": 102.0}]
    >>> standstills(applied, [100.2, 100.4, 101.9, 109.1, 109.3], 100.0, 110.0)
    [{'phase': 'before any fault', 'still_s': 1.5, 'from_s': 0.4}, {'phase': 'kill warehouse at 2s', 'still_s': 7.2, 'from_s': 0.0}]
    """
    starts = [load_from] + [a["began"] for a in applied]
    names = ["before any fault"] + [a["fault"] for a in applied]
    times = sorted(t for t in state_times if load_from <= t <= load_until)
    longest = [(0.0, start) for start in starts]
    for a, b in zip(times, times[1:]):
        began_inside = [i for i in range(1, len(starts)) if a < starts[i] <= b]
        owner = began_inside[0] if began_inside else max(i for i, start in enumerate(starts) if start <= a)
        longest[owner] = max(longest[owner], (b - a, a))
    return [{"phase": name, "still_s": round(still, 3), "from_s": round(max(0.0, began - start), 3)}
            for name, start, (still, began) in zip(names, starts, longest)]


def by_source(applied: list[dict], lags: dict[str, list[tuple[float, float]]], load_from: float,
              load_until: float) -> list[str]:
    """Each phase (as `phases` cuts them) in one line, source by source: the transactions each
    committed in it and their staleness, so that a fault which took one source shows what the
    others' updates met meanwhile. `lags` are each source's (commit time, seconds) pairs.

    >>> applied = [{"fault": "crash node:n3 at 2s", "began": 102.0, "ended": 102.0}]
    >>> by_source(applied, {"s1": [(101.0, 0.1)], "s2": [(101.5, 0.2), (103.0, 4.0)]}, 100.0, 110.0)
    ['s1 1 committed, p50 100 ms, max 100 ms; s2 1 committed, p50 200 ms, max 200 ms', 's1 0 committed; s2 1 committed, p50 4,000 ms, max 4,000 ms']
    """
    cut = {source: phases(applied, pairs, load_from, load_until) for source, pairs in sorted(lags.items())}
    lines = []
    for i in range(len(applied) + 1):
        parts = []
        for source, own in cut.items():
            lag = own[i]["staleness_ms"]
            parts.append(f"{source} {own[i]['committed']} committed"
                         + (f", p50 {lag['p50']:,.0f} ms, max {lag['max']:,.0f} ms" if lag["n"] else ""))
        lines.append("; ".join(parts))
    return lines


def recovery(still_from: float, still_until: float, starts: list[tuple[float, str]]) -> tuple[str, float] | None:
    """What ended a standstill from `still_from` to `still_until` (wall-clock seconds): the first
    pod (re)started inside it, from `starts` (time, pod), and the seconds from that start until
    the view moved again; None when no pod started in it (a thaw or a heal ended it).

    >>> recovery(100.0, 130.0, [(90.0, "s1-0"), (111.5, "warehouse-0"), (112.0, "s2-0")])
    ('warehouse-0', 18.5)
    """
    inside = sorted((t, pod) for t, pod in starts if still_from <= t <= still_until)
    return (inside[0][1], round(still_until - inside[0][0], 3)) if inside else None


def describe(phase: dict) -> str:
    """One line of a phase, as `fedlab run` prints it.

    >>> describe({"phase": "kill warehouse at 5s", "committed": 40, "still_s": 6.2, "from_s": 0.1,
    ...           "staleness_ms": {"p50": 300.0, "max": 6400.0, "n": 40}})
    'kill warehouse at 5s: 40 transactions, staleness p50 300 ms, max 6,400 ms; the view stood still 6.2 s'
    """
    lag = phase["staleness_ms"]
    figures = (f"staleness p50 {lag['p50']:,.0f} ms, max {lag['max']:,.0f} ms" if lag["n"]
               else "nothing committed")
    still = f"; the view stood still {phase['still_s']:.1f} s" if "still_s" in phase else ""
    return f"{phase['phase']}: {phase['committed']} transactions, {figures}{still}"


def figures(applied: list[dict], lags: list[tuple[float, float]], load_from: float, load_until: float,
            plot: Path, state_times: list[float] | None = None) -> dict:
    """What the faults did, as `fedlab run` and `fedlab bench` report it: `fault_phases` (`phases`,
    with `state_times`, the view states' applied times, each phase's longest standstill as well:
    `still_s` and `from_s`, `standstills`) and `fault_plot`, the figure written to `plot`
    (nemesis.plot)."""
    from fedlab.nemesis.plot import plot_faults

    cut = phases(applied, lags, load_from, load_until)
    if state_times is not None:
        for phase, still in zip(cut, standstills(applied, state_times, load_from, load_until)):
            phase.update(still_s=still["still_s"], from_s=still["from_s"])
    return {"fault_phases": cut, "fault_plot": str(plot_faults(plot, applied, lags, load_from, load_until))}
