"""The bench's PNGs (matplotlib, Agg backend: no display needed), one figure per question:

- staleness.png: staleness of each source transaction over the run, per algorithm;
- throughput_ramp.png: offered rate against the rates committed and reflected, per ramp step;
- cost_per_txn.png: sub-queries, messages, rows and bytes per source transaction, per algorithm;
- consistency.png: the checker's verdict for every run;
- staleness_vs_throughput.png: each run's staleness against its highest sustained rate, so lazy
  maintenance at each combine bound shows its trade-off beside Sze-Ling;
- federation_size.png, when the bench ran synthetic federations (--federation): CPU and bytes per
  transaction, staleness p99 and memory per source against the number of sources, a line per
  shape (bench.federation_size);
- same_stream.png, when algorithms shared a stream (--same-stream): each algorithm's staleness
  p50 and p99 on the shared stream and alone, medians with the trials' range
  (bench.same_stream);
- growth-<run folder>.png, one per run: its load interval by interval (bench.growth), CPU
  per transaction by process, staleness, Delta's commits, compactions and checkpoints, resident
  memory by process and disk by part of the run's directory, each figure that grew past its bound
  named in its panel's title.
`plot_all(runs, folder)` writes them and returns {name: path}.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)

from fedlab.bench.federation_size import growth  # noqa: E402
from fedlab.bench.same_stream import comparison  # noqa: E402
from fedlab.simulation.scenario import LEVELS  # noqa: E402

COLORS = {"none": "#b22222", "convergence": "#e07b39", "weak": "#e0c339", "strong": "#7fb24a",
          "complete": "#2e8b57", "unreadable": "#888888"}


def _name(run: dict, several: bool) -> str:
    return run["label"] + (f" ({run['folder']})" if several else "")


def plot_all(runs: list[dict], folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    several = len({r["label"] for r in runs}) < len(runs)   # the same algorithm twice: tell them apart
    out = {}
    plots = [("staleness", _staleness), ("throughput_ramp", _ramp), ("cost_per_txn", _cost),
             ("consistency", _consistency), ("staleness_vs_throughput", _tradeoff)]
    if any(r.get("synthetic") for r in runs):
        plots.append(("federation_size", _federation_size))
    if any(r.get("stream") == "shared" for r in runs):
        plots.append(("same_stream", _same_stream))
    for name, draw in plots:
        fig = draw(runs, several)
        out[name] = folder / f"{name}.png"
        fig.savefig(out[name], dpi=100, bbox_inches="tight")
        plt.close(fig)
    for run in runs:
        if run.get("growth"):
            fig = _growth(run)
            out[f"growth {run['folder']}"] = folder / f"growth-{run['folder']}.png"
            fig.savefig(out[f"growth {run['folder']}"], dpi=100, bbox_inches="tight")
            plt.close(fig)
    return out


def _growth(run):
    """A run's load interval by interval (bench.growth.series), five panels."""
    g = run["growth"]
    entries = g["series"]
    minutes = [e["to_s"] / 60 for e in entries]
    fig, axes = plt.subplots(1, 5, figsize=(22, 4.2))
    panels = [   # title, the interval's lines, the growth figures it draws (their names' starts)
        ("CPU ms per transaction", lambda e: e["cpu_ms_per_txn"], ("cpu_ms_per_txn",)),
        ("staleness ms", lambda e: {"p50": e["staleness_ms"]["p50"], "p99": e["staleness_ms"]["p99"],
                                    "to Delta p50": e["staleness_delta_ms"]["p50"],
                                    "to Delta p99": e["staleness_delta_ms"]["p99"]}, ("staleness",)),
        ("Delta: commit ms, compaction and checkpoint s",
         lambda e: {"commit p50 ms": e["delta_commit_ms"]["p50"], "commit p99 ms": e["delta_commit_ms"]["p99"],
                    "compaction s": e["compaction_s"], "checkpoint s": e["checkpoint_s"]},
         ("Delta", "compaction", "checkpoint")),
        ("resident MB by process", lambda e: e["rss_mb"], ("resident MB",)),
        ("disk MB by part of the run", lambda e: e["disk_mb"], ("disk MB",)),
    ]
    for ax, (title, values, names) in zip(axes, panels):
        lines = sorted({k for e in entries for k, v in values(e).items()})
        for line in lines:
            ys = [values(e).get(line) for e in entries]
            if any(y is not None for y in ys):
                ax.plot(minutes, [float("nan") if y is None else y for y in ys], ".-", label=line, markersize=3)
        grew = [n for n in g["exceeded"] if n.startswith(names)]
        ax.set_title(title + (f"\npast its bound: {', '.join(grew)}" if grew else ""), fontsize=9,
                     color="#b22222" if grew else "black")
        ax.set_xlabel("minutes into the load")
        ax.legend(fontsize=6)
    fig.suptitle(f"{run['label']} ({run['folder']}): growth over the load; tenths of {g['tenth_s']:g} s compared")
    fig.tight_layout()
    return fig


def _staleness(runs, several):
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for run in runs:
        points = run.get("series", {}).get("staleness", [])
        if points:
            xs, ys = zip(*sorted(points))
            ax.plot(xs, ys, ".", markersize=3, label=_name(run, several), alpha=0.7)
    load = max((r.get("series", {}).get("load_seconds", 0) for r in runs), default=0)
    if load:
        ax.axvspan(0, load, color="0.92", zorder=0, label="load phase (then the ramp)")
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_xlabel("source commit time, seconds from the start of the load")
    ax.set_ylabel("staleness, s (commit -> view state)")
    ax.set_title("Staleness of each source transaction")
    ax.legend(fontsize=8)
    return fig


def _ramp(runs, several):
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for run in runs:
        steps = run.get("ramp") or []
        if not steps:
            continue
        line, = ax.plot([s["rate"] for s in steps], [s["achieved"] for s in steps], "o-", label=f"{_name(run, several)} committed")
        ax.plot([s["rate"] for s in steps], [s["applied_rate"] for s in steps], "x--", color=line.get_color(),
                label=f"{_name(run, several)} reflected")
    top = max((s["rate"] for r in runs for s in r.get("ramp") or []), default=1)
    ax.plot([0, top], [0, top], ":", color="0.5", label="offered")
    ax.set_xlabel("offered rate, txn/s")
    ax.set_ylabel("achieved rate, txn/s")
    ax.set_title("Throughput ramp: committed at the sources and reflected in the view")
    ax.legend(fontsize=7)
    return fig


def _cost(runs, several):
    fig, axes = plt.subplots(1, 4, figsize=(13, 4))
    names = [_name(r, several) for r in runs]
    for ax, figure in zip(axes, ("subqueries", "messages", "rows", "bytes")):
        values = [r.get("per_txn", {}).get(figure, 0) or 0 for r in runs]
        ax.bar(range(len(runs)), values, color="#4a7fb2")
        ax.set_xticks(range(len(runs)), names, rotation=45, ha="right", fontsize=8)
        ax.set_title(f"{figure} per txn")
        positive = [v for v in values if v > 0]
        if positive and max(positive) > 100 * min(positive):   # recomputation dwarfs the rest
            ax.set_yscale("log")
    fig.suptitle("Cost per source transaction (from the nodes' message logs)")
    fig.tight_layout()
    return fig


def _same_stream(runs, several):
    groups = comparison(runs)
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 3.8 * len(groups)), squeeze=False)
    for row, g in zip(axes, groups):
        labels = [a["label"] for a in g["algorithms"]]
        for ax, figure in zip(row, ("staleness p50 ms", "staleness p99 ms")):
            for offset, kind, color in ((-0.2, "shared", "#4a7fb2"), (0.2, "alone", "#bbbbbb")):
                spreads = [a[kind][figure] for a in g["algorithms"]]
                medians = [s["median"] if s else 0 for s in spreads]
                below = [s["median"] - s["min"] if s else 0 for s in spreads]
                above = [s["max"] - s["median"] if s else 0 for s in spreads]
                ax.bar([i + offset for i in range(len(labels))], medians, 0.4, yerr=[below, above], capsize=3,
                       color=color, label=f"{kind} stream" if kind == "shared" else "alone")
            ax.set_xticks(range(len(labels)), labels, fontsize=8)
            ax.set_title(f"{g['view']} ({g['chaos']}): {figure}, {g['trials']} trials", fontsize=9)
            ax.legend(fontsize=8)
    fig.suptitle("The algorithms on one stream and each alone (median, range over the trials)")
    fig.tight_layout()
    return fig


def _tradeoff(runs, several):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for algorithm in dict.fromkeys(r["algorithm"] for r in runs):
        points = sorted((r["max_sustained_rate"], (r.get("staleness_ms") or {}).get("p50"),
                         (r.get("staleness_ms") or {}).get("p99"), _name(r, several))
                        for r in runs if r["algorithm"] == algorithm and r.get("max_sustained_rate")
                        and (r.get("staleness_ms") or {}).get("p50") is not None)
        if not points:
            continue
        xs, p50, p99, names = zip(*points)
        line, = ax.plot(xs, [v / 1000 for v in p50], "o-", label=f"{algorithm} p50")
        ax.plot(xs, [v / 1000 for v in p99], "v:", color=line.get_color(), label=f"{algorithm} p99")
        for x, y, name in zip(xs, p50, names):
            if name != algorithm:
                ax.annotate(name, (x, y / 1000), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("highest sustained rate, txn/s (ramp)")
    ax.set_ylabel("staleness in the load phase, s")
    ax.set_title("Staleness against throughput (lazy at each combine bound, and the others)")
    ax.legend(fontsize=8)
    return fig


def _federation_size(runs, several):
    rows = [r for r in growth(runs) if r["trial"] == 1]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    panels = ((axes[0][0], (("cpu_ms_per_txn", "-"),), "CPU of every process per txn, ms"),
              (axes[0][1], (("bytes_per_txn", "-"),), "bytes on the wire per txn"),
              (axes[1][0], (("staleness_p99_ms", "-"), ("to_delta_p99_ms", "--")),
               "staleness p99, ms (solid: the core's view; dashed: Delta)"),
              (axes[1][1], (("memory_per_source_mb", "-"),), "peak memory per source, MB"))
    labels = {r["label"] for r in rows}
    sizes = sorted({r["sources"] for r in rows})
    for ax, figures, title in panels:
        # one color per line in every panel, whichever figures a run could not measure
        for color, line_of in enumerate(dict.fromkeys((r["label"], r["shape"]) for r in rows)):
            points = [r for r in rows if (r["label"], r["shape"]) == line_of]
            name = line_of[1] + (f" ({line_of[0]})" if len(labels) > 1 else "")
            for i, (key, style) in enumerate(figures):
                measured = [(r["sources"], r[key]) for r in points if r[key] is not None]
                if measured:
                    ax.plot(*zip(*measured), style, marker="o", color=f"C{color}", label=None if i else name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes])
        ax.minorticks_off()
        ax.set_ylim(0, ax.get_ylim()[1] * 1.1)   # from 0, room above a flat line
        ax.set_xlabel("sources (one relation each)")
        ax.set_title(title, fontsize=10)
        if ax.get_legend_handles_labels()[0]:   # none when every run failed
            ax.legend(fontsize=8)
    fig.suptitle("Cost as the federation grows (load phase, per committed source transaction)")
    fig.tight_layout()
    return fig


def _consistency(runs, several):
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(runs) + 1.5))
    levels = [*LEVELS]
    for i, run in enumerate(runs):
        level = run.get("consistency", "unreadable")
        height = levels.index(level) + 1 if level in levels else 0.2
        ax.barh(i, height, color=COLORS.get(level, "#888888"))
        ax.text(height + 0.05, i, level, va="center", fontsize=9)
    ax.set_yticks(range(len(runs)), [_name(r, several) for r in runs], fontsize=8)
    ax.set_xticks(range(1, len(levels) + 1), levels, fontsize=8)
    ax.set_xlim(0, len(levels) + 1)
    ax.invert_yaxis()
    ax.set_title("Consistency verdict (fedlab check) per run")
    return fig
