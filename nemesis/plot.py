"""What each fault of a nemesis schedule did, drawn as Jepsen draws its nemesis over latency and
rate: `faults.png`, two panels over the seconds since the load began. Top, the staleness to the
core's view of every committed source transaction (bench.metrics), by its commit time;
bottom, the transactions committed per second and reflected in the view per second. Each applied
fault (nemesis.local, `applied`) is a numbered line where it began, its window shaded
until it ended (a source kill has none: Ray restarts the actor on its own; a warehouse kill
lasts its restart), and its text in the legend. Same conventions as the bench's plots
(bench.plots: matplotlib, Agg backend).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)


def per_second(times: Iterable[float], start: float, seconds: int) -> list[int]:
    """How many of `times` fall in each second [start + i, start + i + 1) of the `seconds` from
    `start`; the others are left out.

    >>> per_second([100.2, 100.9, 101.0, 103.5, 99.0, 104.0], 100.0, 4)
    [2, 1, 0, 1]
    """
    counts = [0] * seconds
    for t in times:
        i = math.floor(t - start)
        if 0 <= i < seconds:
            counts[i] += 1
    return counts


def fault_windows(applied: list[dict], load_from: float) -> list[tuple[str, float, float]]:
    """Each applied fault's text and window in seconds since the load began. A window is clipped
    at 0: the nemesis' clock starts a moment before the load's, so a fault at 0 s can begin
    before it.

    >>> fault_windows([{"fault": "kill a at 0s", "began": 99.998, "ended": 99.999},
    ...                {"fault": "pause a at 1s for 2s", "began": 101.0, "ended": 103.5}], 100.0)
    [('kill a at 0s', 0.0, 0.0), ('pause a at 1s for 2s', 1.0, 3.5)]
    """
    return [(a["fault"], max(0.0, a["began"] - load_from), max(0.0, a["ended"] - load_from)) for a in applied]


def plot_faults(path: Path, applied: list[dict], lags: list[tuple[float, float]], load_from: float,
                load_until: float) -> Path:
    """Writes the figure above to `path` and returns it. `applied`: the faults' wall-clock windows
    (`fault`, `began`, `ended`); `lags`: (commit time, seconds until reflected) pairs
    (bench.metrics.Reflections.lags); the load ran from `load_from` to `load_until`. The
    time axis runs on to the last reflection or fault's end, whichever is later: how the view
    caught up after the load is part of what a fault did."""
    windows = fault_windows(applied, load_from)
    reflected = [committed + lag for committed, lag in lags]
    end = max([load_until - load_from, *(t - load_from for t in reflected), *(w[2] for w in windows)])
    seconds = math.ceil(end) or 1
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True, height_ratios=(3, 2))
    if lags:
        top.plot([c - load_from for c, _ in lags], [1000 * lag for _, lag in lags], ".", color="0.2",
                 markersize=3, alpha=0.7, label="a committed transaction")
    top.set_yscale("symlog", linthresh=1)   # ms: a fault's seconds beside the milliseconds of no fault
    top.set_ylabel("staleness, ms (commit -> core's view)")
    top.set_title("Staleness and throughput, each fault's window shaded")
    bottom.bar(range(seconds), per_second((c for c, _ in lags), load_from, seconds), width=1.0, align="edge",
               color="0.75", label="committed")
    bottom.step(range(seconds + 1), [*per_second(reflected, load_from, seconds), 0], where="post", color="0.1",
                label="reflected in the view")
    bottom.set_ylabel("transactions per second")
    bottom.set_xlabel("seconds since the load began")
    for number, (text, began, ended) in enumerate(windows, 1):
        color = f"C{(number - 1) % 10}"
        for ax in (top, bottom):
            ax.axvline(began, color=color, linewidth=1.2)
            if ended > began:
                ax.axvspan(began, ended, color=color, alpha=0.15, linewidth=0)
        # staggered: faults a moment apart (a kill right after a pause) keep their numbers apart
        top.annotate(str(number), (began, 1), xycoords=("data", "axes fraction"),
                     xytext=(2, -10 - 9 * ((number - 1) % 3)), textcoords="offset points", color=color, fontsize=8)
        top.plot([], [], color=color, linewidth=6, alpha=0.4, label=f"{number}: {text}")   # its legend entry, once
    bottom.axvline(load_until - load_from, color="0.4", linestyle=":", label="the load ended")
    bottom.set_xlim(0, seconds)
    top.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    bottom.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
