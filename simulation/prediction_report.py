"""What `fedlab predict` writes: summary.json, summary.md and the plots (matplotlib, Agg).

For a sweep: a table per part of it (each axis from the base point, the largest point, where the
algorithms part), and plots/axes.png (staleness p50 and p99 against each axis), plots/algorithms.png
(staleness and bytes per transaction per algorithm at the base point) and plots/parting.png
(staleness p99 and sub-queries per transaction against a chain's length, per algorithm, over a
LAN and a WAN). Against live runs: a table of every figure measured and predicted, and
plots/validation.png (predicted against measured, per figure, with the targets' bands).
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen first)

from fedlab.simulation.validation import met, ratio  # noqa: E402


def write(summary: dict, folder: Path) -> dict[str, Path]:
    plots = folder / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    drawn = _sweep_plots(summary, plots) if summary["kind"] == "sweep" else _validation_plots(summary, plots)
    summary["plots"] = {name: str(path.relative_to(folder)) for name, path in drawn.items()}
    paths = {"json": folder / "summary.json", "markdown": folder / "summary.md"}
    paths["json"].write_text(json.dumps(summary, indent=2, default=str) + "\n")
    paths["markdown"].write_text(markdown(summary))
    return paths


def markdown(summary: dict) -> str:
    lines = [f"# fedlab predict ({summary['started']}, {summary['seconds']:g} s)", "",
             f"Calibration: {summary['calibration'].get('machine')}, at {summary['calibration'].get('commit', '?')}.", ""]
    if summary["kind"] == "against":
        lines += _validation_table(summary)
    else:
        lines += _sweep_tables(summary)
    lines += ["", *[f"![{name}]({path})" for name, path in summary.get("plots", {}).items()], ""]
    return "\n".join(lines)


# ---- a sweep ----

SWEEP_COLUMNS = ("point", "staleness p50 / p99 ms", "to Delta p99 ms", "msgs/txn", "bytes/txn", "sub-queries/txn",
                 "busiest warehouse / JVM / source", "saturates at txn/s", "warehouses / JVM cores", "run s",
                 "memory MB")


def _sweep_tables(summary: dict) -> list[str]:
    s = summary["settings"]
    lines = [f"Each point: {s['warmup']:g} s of warm-up, {s['duration']:g} s measured, {s['rows_per_relation']} rows "
             f"per relation, seed {s['seed']}; warehouses: how many of one interpreter keep the views at "
             f"{s['target_busy']:.0%} busy; JVM cores: what their Spark JVMs use in all.", ""]
    parts: dict[str, list[dict]] = {}
    for p in summary["points"]:
        parts.setdefault(p["point"]["sweep"], []).append(p)
    for part, points in parts.items():
        lines += [f"## {part}", "", "| " + " | ".join(SWEEP_COLUMNS) + " |", "|" + " --- |" * len(SWEEP_COLUMNS)]
        lines += ["| " + " | ".join(_sweep_row(p)) + " |" for p in points]
        lines.append("")
    return lines


def _sweep_row(p: dict) -> list[str]:
    if "error" in p:
        return [p["label"], f"failed: {p['error']}", *[""] * (len(SWEEP_COLUMNS) - 2)]
    st, delta, per, u = p["staleness_ms"], p["staleness_delta_ms"], p["per_txn"], p["utilisation"]
    behind = f" (stopped {p['stopped']})" if "stopped" in p else "" if p["sustained"] else " (falling behind)"
    return [p["label"], f"{_num(st['p50'])} / {_num(st['p99'])}{behind}", _num(delta["p99"]), _num(per["messages"]),
            _num(per["bytes"]), _num(per["subqueries"]),
            f"{_pct(u['warehouse python']['max'])} / {_pct(u['warehouse JVM']['max'])} / {_pct(u['source']['max'])}",
            _num(p["saturates_at"]), f"{_num(p['warehouses_needed'])} / {_num(p['jvm_cores_needed'])}", _num(p["seconds"]),
            _num(p["peak_memory_mb"])]


def _sweep_plots(summary: dict, folder: Path) -> dict[str, Path]:
    ok = [p for p in summary["points"] if "error" not in p]
    out = {}
    axes = [p["point"]["sweep"].split(": ")[1] for p in ok if p["point"]["sweep"].startswith("axis: ")]
    axes = [a for a in dict.fromkeys(axes) if a != "algorithm"]
    if axes:
        fig, panels = plt.subplots(1, len(axes), figsize=(3.2 * len(axes), 3.4), squeeze=False)
        for ax, axis in zip(panels[0], axes):
            points = _along(ok, axis)
            xs = [f"{p['point'][axis]:g}" if isinstance(p["point"][axis], float) else str(p["point"][axis])
                  for p in points]
            for key, style in (("p50", "o-"), ("p99", "s--")):
                ax.plot(xs, [p["staleness_ms"][key] for p in points], style, label=f"staleness {key}")
            ax.set_yscale("log")
            ax.set_title(axis)
            ax.set_xlabel(axis)
        panels[0][0].set_ylabel("ms (to the core's view)")
        panels[0][0].legend(fontsize=8)
        fig.suptitle("One axis at a time from the base point (sze-ling)", y=1.04)
        out["axes"] = _save(fig, folder / "axes.png")
    algorithms = [p for p in ok if p["point"]["sweep"] == "axis: algorithm"]
    if algorithms:
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
        names = [p["point"]["algorithm"] for p in algorithms]
        left.bar(names, [p["staleness_ms"]["p99"] or 0 for p in algorithms])
        left.set_yscale("log")
        left.set_ylabel("staleness p99, ms")
        right.bar(names, [p["per_txn"]["bytes"] for p in algorithms])
        right.set_ylabel("bytes per source transaction")
        for ax in (left, right):
            ax.tick_params(axis="x", rotation=60)
        fig.suptitle("Every algorithm at the base point")
        out["algorithms"] = _save(fig, folder / "algorithms.png")
    parting = [p for p in ok if p["point"]["sweep"] == "algorithms part"]
    if parting:
        fig, panels = plt.subplots(2, 2, figsize=(12, 8), sharex=True)
        for col, network in enumerate(("lan", "wan")):
            for name in dict.fromkeys(p["point"]["algorithm"] for p in parting):
                mine = sorted((p for p in parting if p["point"]["algorithm"] == name and p["point"]["network"] == network),
                              key=lambda p: p["point"]["sources"])
                xs = [p["point"]["sources"] for p in mine]
                panels[0][col].plot(xs, [p["staleness_ms"]["p99"] for p in mine], "o-", label=name)
                panels[1][col].plot(xs, [p["per_txn"]["subqueries"] for p in mine], "o-", label=name)
            panels[0][col].set_title(f"one chain at {parting[0]['point']['rate']:g} txn/s, {network.upper()}")
            panels[0][col].set_yscale("log")
            panels[0][col].set_ylabel("staleness p99, ms")
            panels[1][col].set_ylabel("sub-queries per transaction")
            panels[1][col].set_xlabel("sources the view joins")
        panels[0][1].legend(fontsize=7, ncol=2)
        out["parting"] = _save(fig, folder / "parting.png")
    return out


def _along(points: list[dict], axis: str) -> list[dict]:
    """The sweep's points along `axis` with the base point (which the sweep runs once, in the
    first axis), by the axis's value where it is a number, else as the axis gave them."""
    mine = [p for p in points if p["point"]["sweep"] == f"axis: {axis}"]
    if not mine:
        return []
    fixed = lambda p: {k: v for k, v in p["point"].items() if k not in (axis, "sweep")}   # noqa: E731
    along = mine + [p for p in points if p not in mine and p["point"]["sweep"].startswith("axis: ")
                    and fixed(p) == fixed(mine[0])]
    numeric = all(isinstance(p["point"][axis], (int, float)) for p in along)
    return sorted(along, key=lambda p: p["point"][axis]) if numeric else along


# ---- against live runs ----

def _validation_table(summary: dict) -> list[str]:
    topped = any(f.get("at_least") for run in summary["runs"] for f in run["figures"].values())
    lines = [f"Live runs of {summary['bench']}, each simulated as it ran (every process on one machine)."
             + (" A rate marked >= is a ramp's top: it held at every step it ran." if topped else ""), "",
             "| run | figure | measured | predicted | predicted/measured | target | met |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for run in summary["runs"]:
        for name, f in run["figures"].items():
            if f["measured"] is None and f["predicted"] is None:
                continue
            r, ok, target = ratio(f), met(f), f["target"]
            bound = {side: ">= " * (side in f.get("at_least", ())) for side in ("measured", "predicted")}
            lines.append(f"| {run['run']} ({run['folder']}) | {name} | {bound['measured']}{_num(f['measured'])} | "
                         f"{bound['predicted']}{_num(f['predicted'])} | "
                         f"{'' if r is None else f'{r:.2f}'} | {'' if target is None else f'±{target:.0%}'} | "
                         f"{'' if ok is None else 'yes' if ok else 'no'} |")
    return lines


def _validation_plots(summary: dict, folder: Path) -> dict[str, Path]:
    fig, ax = plt.subplots(figsize=(7, 6))
    values = []
    for name in next(iter(summary["runs"]), {}).get("figures", {}):
        pairs = [(f["measured"], f["predicted"]) for run in summary["runs"] for n, f in run["figures"].items()
                 if n == name and f["measured"] and f["predicted"]]
        if pairs:
            ax.scatter([m for m, _ in pairs], [p for _, p in pairs], label=name, s=28)
            values += [v for pair in pairs for v in pair]
    if values:
        xs = [min(values) / 1.5, max(values) * 1.5]   # the diagonal over the figures, not the axes' padding
        ax.plot(xs, xs, "k-", lw=0.8)
        ax.fill_between(xs, [x * 0.75 for x in xs], [x * 1.25 for x in xs], color="0.85", zorder=0, label="±25%")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    ax.set_xlabel("measured (live)")
    ax.set_ylabel("predicted (timed simulator)")
    ax.set_title("The timed simulator against live runs")
    return {"validation": _save(fig, folder / "validation.png")}


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def _num(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.0f}"


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"
