"""The bench's summary: summary.json (every figure), summary.md and summary.html (the same
document: tables of the runs and the targets, the plots embedded, each run's notes and profile).

The document is built once as a list of blocks (heading, paragraph, table, image) and rendered
twice, so the Markdown and the HTML cannot tell different stories.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from fedlab.bench.answers_as_of import comparison
from fedlab.bench.combining import tradeoff
from fedlab.bench.growth import summary_line as growth_line
from fedlab.bench.resources import busy_text, cpu_ms_per_txn, shares

RUN_COLUMNS = ("run", "view", "SF", "chaos", "rate offered/achieved", "max sustained", "staleness p50/p95/p99/max ms",
               "to Delta p50/p99 ms", "read p50/p99 ms", "floor ms", "sub-queries/txn (sent again)", "messages/txn", "rows/txn", "bytes/txn", "peak MB", "warehouse CPU s", "consistency")


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:g}"
    return str(x)


def run_row(r: dict) -> list[str]:
    s, c, d = r.get("staleness_ms") or {}, r.get("per_txn") or {}, r.get("staleness_delta_ms") or {}
    read = r.get("read_latency_ms") or {}
    where = r["view"] + ("" if r.get("placement", "default") == "default" else f" ({r['placement']} placement)")
    label = r["label"] + (" (shared stream)" if r.get("stream") == "shared" else "") \
        + (f" #{r['trial']}" if r.get("trial", 1) > 1 else "")
    return [label, where, _fmt(r["scale"]), r["chaos"],
            f"{_fmt(r['rate_target'])} / {_fmt(r.get('rate_achieved'))}", _fmt(r.get("max_sustained_rate")),
            " / ".join(_fmt(s.get(k)) for k in ("p50", "p95", "p99", "max")),
            " / ".join(_fmt(d.get(k)) for k in ("p50", "p99")), " / ".join(_fmt(read.get(k)) for k in ("p50", "p99")),
            _fmt(r.get("floor_ms")),
            f"{_fmt(c.get('subqueries'))} ({_fmt(round(100 * c.get('subquery_retry_share', 0), 1))}%)",
            _fmt(c.get("messages")), _fmt(c.get("rows")), _fmt(c.get("bytes")),
            _fmt(r.get("peak_memory_mb")), _fmt(r.get("warehouse_cpu_seconds")), r.get("consistency", "-")]


def cpu_rows(r: dict) -> list[list[str]]:
    """The load phase and each ramp step: rates, how busy the machine was and who used it."""
    steps = [{"sustained": None, "committed": r.get("committed_in_load")}] + (r.get("ramp") or [])
    rows = []
    for step, cpu in zip(steps, r.get("cpu") or []):
        committed = step.get("committed")
        rows.append([cpu["phase"], _fmt(cpu["rate"]),
                     _fmt(round(committed / cpu["seconds"], 1)) if committed and cpu["seconds"] else "-",
                     {True: "yes", False: "no", None: "-"}[step["sustained"]],
                     busy_text(cpu) if cpu.get("busy") is not None else "-",
                     _fmt(cpu_ms_per_txn(cpu, committed)), shares(cpu["by_role"])])
    return rows


def _spread(x: dict | None) -> str:
    """`median (least-greatest)`, or `median (least to greatest)` when a sign would blur the dash.

    >>> _spread({"median": 5, "min": 1, "max": 9}), _spread({"median": -5, "min": -9, "max": 1})
    ('5 (1-9)', '-5 (-9 to 1)')
    """
    if x is None:
        return "-"
    dash = " to " if x["min"] < 0 else "-"
    return f"{_fmt(x['median'])} ({_fmt(x['min'])}{dash}{_fmt(x['max'])})"


def _trial_blocks(trials: list[dict]) -> list[tuple]:
    """The spread of repeated runs (bench.trials), when the bench repeated any."""
    if not trials:
        return []
    columns = ("run", "view", "SF", "trials", "max sustained", "committed in it", "staleness p50 ms",
               "staleness p99 ms", "to Delta p99 ms", "bytes/txn", "consistency")
    rows = [[t["label"], t["view"], _fmt(t["scale"]), str(t["trials"])]
            + [_spread(t[k]) for k in ("max_sustained_rate", "committed_at_max", "staleness_p50_ms",
                                        "staleness_p99_ms", "to_delta_p99_ms", "bytes_per_txn")]
            + [", ".join(t["consistency"])] for t in trials]
    return [("h2", "Trials"), ("table", columns, rows),
            ("p", "Median (least-greatest) over the trials of each run (--repeat); the targets below "
                  "are judged on each run's first trial.")]


def _same_stream_blocks(same: dict | None) -> list[tuple]:
    """The algorithms on one stream against each alone (bench.same_stream), when compared."""
    if not same:
        return []
    blocks = [("h2", "On the same stream"),
              ("p", "Each group ran its algorithms together, one warehouse each subscribed to one federation's "
                    "sources, under one load and one fault schedule, and then each alone. Figures are medians "
                    "(least-greatest) over the trials; disturbed is the shared median minus the alone one.")]
    figures = ("staleness p50 ms", "staleness p99 ms", "to Delta p99 ms", "bytes/txn")
    for g in same["groups"]:
        rows = []
        for a in g["algorithms"]:
            for kind in ("shared", "alone"):
                rows.append([a["label"], kind, *(_spread(a[kind][f]) for f in figures), ", ".join(a["consistency"][kind])])
            rows.append([a["label"], "disturbed", *(_fmt(a["disturbance"][f]) for f in figures), "-"])
        blocks += [("h3", f"{g['view']} (SF {_fmt(g['scale'])}, {g['chaos']}, {g['trials']} trials)"),
                   ("table", ("algorithm", "stream", *figures, "consistency"), rows)]
        if g["differences"]:
            blocks.append(("table", ("difference", "figure", "per trial, shared", "per trial, alone", "steadier"),
                           [[d["of"], d["figure"], _spread(d["shared"]), _spread(d["alone"]), d["steadier"] or "-"]
                            for d in g["differences"]]))
        cpu = g["cpu_ms_per_txn"]
        blocks.append(("p", f"CPU per committed transaction, every process: {_spread(cpu['shared stream'])} ms on the "
                            f"shared stream, {_spread(cpu['alone, summed'])} ms for the alone runs summed."))
    blocks += [("p", line) for line in same["finding"]]
    return blocks


def _federation_blocks(growth: dict | None) -> list[tuple]:
    """Cost against the number of sources (bench.federation_size), when the bench ran
    synthetic federations (--federation)."""
    if not growth:
        return []
    columns = ("run", "shape", "sources", "rate offered/achieved", "CPU ms/txn",
               "CPU ms/txn: sources / warehouse / driver / other", "CPU ms/txn above idle", "bytes/txn",
               "sub-queries/txn",
               "staleness p50/p99 ms", "to Delta p50/p99 ms", "memory per source MB", "idle, share of a core",
               "consistency")
    rows = []
    for r in growth["rows"]:
        parts = r["cpu_ms_per_txn_by_part"]
        rows.append([r["label"] + (f" #{r['trial']}" if r["trial"] > 1 else ""), r["shape"], str(r["sources"]),
                     f"{_fmt(r['rate_target'])} / {_fmt(r['rate_achieved'])}", _fmt(r["cpu_ms_per_txn"]),
                     " / ".join(_fmt(v) for v in parts.values()) if parts else "-",
                     _fmt(r["cpu_ms_per_txn_above_idle"]), _fmt(r["bytes_per_txn"]), _fmt(r["subqueries_per_txn"]),
                     f"{_fmt(r['staleness_p50_ms'])} / {_fmt(r['staleness_p99_ms'])}",
                     f"{_fmt(r['to_delta_p50_ms'])} / {_fmt(r['to_delta_p99_ms'])}",
                     _fmt(r["memory_per_source_mb"]) + ("" if r["sources_measured"] == r["sources"]
                                                        else f" ({r['sources_measured']} measured)"),
                     f"{r['idle_share_of_a_core']:.1%}" if r["idle_share_of_a_core"] is not None else "-",
                     r["consistency"] or "-"])
    return [("h2", "Cost as the federation grows"), ("table", columns, rows),
            ("p", "Synthetic federations (loadgen.federation_shapes): each relation at a source of its "
                  "own, the chain view joining them one after the other, the star view joining each to the "
                  "centre's foreign keys. Over the load phase: CPU of every process per committed source "
                  "transaction (the profilers left out), bytes sent and sub-queries per transaction, staleness to "
                  "the core's view and to the Delta table; memory per source is the sources' peak resident "
                  "memory over their number; idle is the whole federation with nothing offered (--idle), and the CPU "
                  "above idle what the load phase used beyond what the idle federation uses in as long."),
            *([("p", growth["finding"])] if growth["finding"] else [])]


def _combining_blocks(runs: list[dict]) -> list[tuple]:
    """Lazy maintenance against its combine bound (bench.combining), when lazy ran."""
    t = tradeoff(runs)
    if not t["rows"]:
        return []
    columns = ("run", "max sustained", "jobs/txn", "base rows condensed/txn", "sub-queries/txn", "bytes/txn",
               "warehouse CPU ms/txn", "staleness p50/p99 ms (load)", "read p50/p99 ms", "consistency")
    rows = [[r["label"], _fmt(r["max_sustained_rate"]), _fmt(r["jobs_per_txn"]), _fmt(r["condensed_per_txn"]),
             _fmt(r["subqueries_per_txn"]), _fmt(r["bytes_per_txn"]), _fmt(r["warehouse_cpu_ms_per_txn"]),
             f"{_fmt(r['staleness_p50_ms'])} / {_fmt(r['staleness_p99_ms'])}",
             f"{_fmt(r['read_p50_ms'])} / {_fmt(r['read_p99_ms'])}", r["consistency"]] for r in t["rows"]]
    return [("h2", "Lazy maintenance: the combine bound"), ("table", columns, rows),
            ("p", "Per transaction over the whole run (bench.combining); staleness over the load phase."),
            ("p", t["finding"])]


def _versioned_blocks(runs: list[dict]) -> list[tuple]:
    """Versioned beside Sze-Ling (bench.answers_as_of), when versioned ran."""
    c = comparison(runs)
    if not c["rows"]:
        return []
    columns = ("run", "compensations/txn", "sub-queries/txn", "maintenance bytes/txn", "source CPU ms/txn",
               "warehouse CPU ms/txn", "staleness p50/p99 ms", "max sustained", "consistency")
    rows = [[r["label"], _fmt(r["compensations_per_txn"]), _fmt(r["subqueries_per_txn"]),
             _fmt(r["maintenance_bytes_per_txn"]), _fmt(r["source_cpu_ms_per_txn"]), _fmt(r["warehouse_cpu_ms_per_txn"]),
             f"{_fmt(r['staleness_p50_ms'])} / {_fmt(r['staleness_p99_ms'])}", _fmt(r["max_sustained_rate"]),
             r["consistency"]] for r in c["rows"]]
    return [("h2", "Answers as of a version: versioned beside Sze-Ling"), ("table", columns, rows),
            ("p", "Per transaction over the load phase (bench.answers_as_of): the sources rebuild the "
                  "states the sub-queries name instead of the warehouse compensating the answers."),
            ("p", c["finding"])]


def _profile_blocks(r: dict) -> list[tuple]:
    """The sampled profile of the load phase (fedlab bench --profile): each process's hottest
    frames by self time and a link to its flame graph."""
    p = r.get("profilers")
    if not p:
        return []
    cost = p["overhead_cpu_seconds"]
    blocks = [("p", f"Profile of the load phase ({p['seconds']:g} s; py-spy at {p['pyspy_rate']} samples/s, "
                    f"Java Flight Recorder every {p['jfr_period_ms']} ms). Profiling used "
                    f"{cost['py-spy']:g} CPU-s (py-spy) and {cost['JFR']:g} CPU-s (JFR threads): "
                    f"{p['overhead_share_of_machine']:.1%} of the machine."),
              ("table", ("process", "samples", "GIL held / CPU", "hottest frames by self time (share of the process's samples)"),
               [[role, str(q["samples"]), f"{q['python_share']:.0%}" if "python_share" in q else "-", "; ".join(f"{h['frame']} {h['share']:.0%}" for h in q["hottest"])
                 + (f" (JVM started {q['processes_started']} processes)" if "processes_started" in q else "")]
                for role, q in p["processes"].items()])]
    if p.get("threads"):
        blocks.append(thread_table(p["threads"]))
    base = Path(r["run_dir"]).parent
    for role, q in p["processes"].items():
        blocks.append(("link", str(Path(q["flame_graph"]).relative_to(base)), f"flame graph: {role}"))
    return blocks + [("p", f"Note: {note}") for note in p.get("notes", [])]


def thread_table(census: dict) -> tuple:
    """A thread census (bench.threads) as a table: each process's CPU and context
    switches per transaction (the load) or per second (the idle federation), its threads ranked."""
    unit = next(iter(census.values()))["per"] if census else "txn"
    return ("table", ("process", f"CPU ms / {unit}", f"context switches / {unit}",
                      f"threads by CPU: ms / switches per {unit}"),
            [[role, _fmt(t["cpu_ms"]), _fmt(t["switches"]),
              "; ".join(f"{h['thread']} {h['cpu_ms']:g} / {h['switches']:g}" for h in t["threads"])]
             for role, t in census.items()])


def _fault_blocks(r: dict) -> list[tuple]:
    """What each fault of --nemesis did in the run (nemesis.effects), and their plot."""
    phases = r.get("fault_phases")
    if not phases:
        return []
    rows = [[p["phase"], _fmt(p.get("window_s")), str(p["committed"]),
             _fmt(p["staleness_ms"]["p50"]), _fmt(p["staleness_ms"]["max"]), _fmt(p.get("still_s"))] for p in phases]
    return [("table", ("phase of the load (from a fault's start to the next's)", "fault window s", "committed",
                       "staleness p50 ms", "staleness max ms", "view still s"), rows),
            ("p", "The nemesis: " + "; ".join(r["nemesis"]["events"])),
            ("img", str(Path(r["fault_plot"]).relative_to(Path(r["run_dir"]).parent)),
             f"{r['label']}: staleness and throughput, each fault's window shaded")]


def _growth_blocks(r: dict) -> list[tuple]:
    """Whether the run's costs grew as it went on (bench.growth): what grew past its bound,
    every figure's first and last tenth, and the plot of its intervals."""
    g = r.get("growth")
    if not g:
        return []
    rows = [[name, _fmt(f["first"]), _fmt(f["last"]), _fmt(f["ratio"]), _fmt(f["bound"]),
             "YES" if f["exceeded"] else "no"] for name, f in g["figures"].items()]
    return [("p", growth_line(g)),
            ("table", ("figure", "first tenth", "last tenth", "ratio", "bound", "past its bound"), rows),
            ("img", f"plots/growth-{r['folder']}.png", f"{r['label']}: growth over the load")]


def document(summary: dict) -> list[tuple]:
    m, st = summary["machine"], summary["settings"]
    blocks = [("h1", "fedlab bench"),
              ("p", f"{len(summary['runs'])} runs in {summary['seconds']:.0f} s on {m['cpus']} CPUs "
                    f"(load average {m['load_average']} at the start; other work may share the machine), "
                    f"{m['memory_gb']} GB RAM. Workload {st['workload']}, seed {st['seed']}, "
                    f"{st['duration']:g} s of load at the offered rate, then a ramp over "
                    f"{', '.join(_fmt(x) for x in st['ramp_rates']) or 'no'} txn/s, {st['ramp_step']:g} s each, judged on the second half (bench.ramp)."),
              ("h2", "Runs"),
              ("table", RUN_COLUMNS, [run_row(r) for r in summary["runs"]]),
              ("p", "Staleness is over the transactions committed during the load phase: from the source commit "
                    "to the first view state that reflects it, in the core (what ReadView serves) and in the Delta "
                    "table (when that state's batch was committed: what a Spark reader sees); the floor is one "
                    "sub-query round trip plus one Delta batch commit (medians of the run); costs are the messages sent during the "
                    "load phase per source transaction committed in it (every algorithm at the same offered "
                    "rate; per_txn_whole_run in summary.json covers the ramp too); peak MB is the highest sum over every process (Python with the warehouse "
                    "and the driver, the Spark JVM, Ray, the source actors)."),
              *_trial_blocks(summary.get("trials") or []),
              *_same_stream_blocks(summary.get("same_stream")),
              *_federation_blocks(summary.get("federation_size")),
              # these pair runs of one algorithm with another's alone: not the shared streams' records
              *_combining_blocks([r for r in summary["runs"] if r.get("stream") != "shared"]),
              *_versioned_blocks([r for r in summary["runs"] if r.get("stream") != "shared"])]
    if summary["targets"]:   # none for synthetic federations: the targets are about the TPC-H views
        blocks += [("h2", "Targets"),
                   ("table", ("target", "wanted", "measured", "met", "shortfall"),
                    [[t["name"], t.get("target", "-"), t.get("measured", t.get("note", "-")),
                      {True: "yes", False: "NO", None: "n/a"}[t["met"]], t.get("shortfall") or "-"]
                     for t in summary["targets"]])]
    said = set()
    for t in summary["targets"]:
        why = t.get("what_dominates")
        if why and why not in said:   # the time profile explains several targets at once: say it once
            said.add(why)
            names = [u["name"] for u in summary["targets"] if u.get("what_dominates") == why]
            blocks.append(("p", f"What dominates ({'; '.join(names)}): {why}."))
        if t.get("freshness"):
            blocks.append(("p", f"Freshness of the recomputation compared: {t['freshness']}."))
    blocks.append(("h2", "Plots"))
    for name, path in summary["plots"].items():
        if not name.startswith("growth "):   # each run's growth plot is shown with its run
            blocks.append(("img", path, name.replace("_", " ")))
    blocks.append(("h2", "Per run"))
    for r in summary["runs"]:
        blocks.append(("h3", f"{r['label']}: {r['run_dir']}"))
        parts = (r.get("profile") or {}).get("parts", {})
        if parts:
            blocks.append(("table", ("part", "calls", "seconds", "mean ms", "share of wall"),
                           [[n, str(p["calls"]), _fmt(p["seconds"]), _fmt(p["mean_ms"]), _fmt(p["share_of_wall"])]
                            for n, p in parts.items()]))
        cpu = r.get("cpu") or []
        if cpu:
            blocks.append(("table", ("step", "offered txn/s", "committed txn/s", "sustained", "machine busy",
                                     "CPU ms/txn", "CPU by process (share)"), cpu_rows(r)))
        lag = r.get("staleness_parts") or {}
        if lag.get("n"):
            slow = lag["slowest"]
            blocks.append(("table", ("staleness to Delta, by part", "p50 ms", "p99 ms",
                                     f"mean of the slowest 1% ({slow['n']}) ms"),
                           [[name, _fmt(part["p50"]), _fmt(part["p99"]), _fmt(slow["mean_ms"][name])]
                            for name, part in lag["parts_ms"].items()]))
        idle = r.get("idle")
        if idle:
            blocks.append(("p", f"Idle federation ({idle['seconds']:g} s up with no load): "
                                f"{idle['share_of_a_core']:.1%} of one core in all; by process (CPU-s): "
                                + ", ".join(f"{role} {s:g}" for role, s in idle["by_role"].items())))
            if idle.get("threads"):
                blocks.append(thread_table(idle["threads"]))
        blocks += _fault_blocks(r)
        blocks += _growth_blocks(r)
        blocks += _profile_blocks(r)
        memory = r.get("peak_memory_by_process_mb") or {}
        if memory:
            blocks.append(("p", "Peak memory by process (MB): " + ", ".join(f"{k} {v:g}" for k, v in memory.items())))
        for note in r.get("notes", []):
            blocks.append(("p", f"Note: {note}"))
    for note in summary.get("notes", []):
        blocks.append(("p", f"Note: {note}"))
    return blocks


def markdown(blocks: list[tuple]) -> str:
    out = []
    for kind, *rest in blocks:
        if kind in ("h1", "h2", "h3"):
            out.append("#" * int(kind[1]) + " " + rest[0])
        elif kind == "p":
            out.append(rest[0])
        elif kind == "img":
            out.append(f"![{rest[1]}]({rest[0]})")
        elif kind == "link":
            out.append(f"[{rest[1]}]({rest[0]})")
        elif kind == "table":
            header, rows = rest
            cell = lambda x: str(x).replace("|", "\\|")  # noqa: E731
            out.append("\n".join(["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
                                 + ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]))
    return "\n\n".join(out) + "\n"


def to_html(blocks: list[tuple]) -> str:
    e = html.escape
    body = []
    for kind, *rest in blocks:
        if kind in ("h1", "h2", "h3", "p"):
            body.append(f"<{kind}>{e(rest[0])}</{kind}>")
        elif kind == "link":
            body.append(f'<p><a href="{e(rest[0])}">{e(rest[1])}</a></p>')
        elif kind == "img":
            body.append(f'<figure><img src="{e(rest[0])}" alt="{e(rest[1])}"><figcaption>{e(rest[1])}</figcaption></figure>')
        elif kind == "table":
            header, rows = rest
            body.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>"
                        + "".join("<tr>" + "".join(f"<td>{e(str(x))}</td>" for x in row) + "</tr>" for row in rows)
                        + "</table>")
    style = ("body{font-family:sans-serif;max-width:1300px;margin:2em auto}table{border-collapse:collapse;"
             "font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}img{max-width:100%}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>fedlab bench</title><style>{style}</style>"
            f"</head><body>{''.join(body)}</body></html>\n")


def write(summary: dict, folder: Path) -> dict[str, Path]:
    """Writes summary.json, summary.md and summary.html into `folder`; returns their paths."""
    blocks = document(summary)
    paths = {"json": folder / "summary.json", "markdown": folder / "summary.md", "html": folder / "summary.html"}
    paths["json"].write_text(json.dumps(summary, indent=2, default=str) + "\n")
    paths["markdown"].write_text(markdown(blocks))
    paths["html"].write_text(to_html(blocks))
    return paths
