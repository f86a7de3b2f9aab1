"""`fedlab calibrate BENCH_DIR`: the timed simulator's calibration, fitted to a `fedlab bench` run.

    fedlab bench --algorithms sze-ling --views q3 --rate 100 --duration 20 --chaos none --profile
    fedlab calibrate runs/bench-TIMESTAMP --out my-machine.json
    fedlab predict --calibration my-machine.json ...

A bench run reads every process's CPU around each stretch of its load (the idle federation, the
load phase, every ramp step: bench.runner), with the stretch's wall-clock window and the
driver's commit groups in it; the nodes' message logs say what each process did meanwhile (what
it sent, received and answered, and when). For each kind of process the CPU it used in each
stretch is fitted, by least squares with no cost below zero, to what it did in it: a floor per
second (what it uses idle) plus a cost per operation (simulation.calibration.OPERATIONS).
The stretches run at rates from idle to the machine's limit, so that what a call costs is told
apart from what each item in it costs, as batches grow with the rate. Each source of each run is
an equation of its own; the warehouse, the JVM and the driver have one per stretch, so their
costs per message are fitted as one figure (encoding or decoding a message), a core event's from
the bench's stopwatch on `handle()` (its calls and their time in the load phase, where the
machine is not yet crowded), and a Delta batch's split between the Python and the JVM by the
JVM's own CPU per batch (the profile's `Delta batch commit, JVM CPU`).

The loopback latency is what a message took from the node that sent it to the node that
received it (both stamp their message log from one clock), over the load phase: notifications,
sub-queries and answers alike, lognormal between their median and 99th percentile. The machine's
floor is the idle federation's CPU but its sources', each of which costs its own floor.

The file names the machine, the commit the code was at, the bench it came from, and how well
each process's fit explains what it used (`about.fit`: the share of its CPU the model accounts
for, and the worst stretch).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from fedlab.fedio.message_log import read
from fedlab.fedmodel import change_history
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.message_log import WAREHOUSE_NODE
from fedlab.bench.profile import JVM_BATCH_CPU
from fedlab.bench.resources import DRIVER, JVM, PROFILER, WAREHOUSE
from fedlab.live.runfile import RunFile
from fedlab.simulation.calibration import OPERATIONS, Calibration, Latency

SOURCE = "source "
NOTIFY_GAP = 0.0005   # seconds: notifications a sender logged closer together than this went in one batch

# What each process's CPU in a stretch is fitted to: its operations' counts (named as in
# OPERATIONS, without the process) and a floor per second.
SOURCE_TERMS = ("commit_call", "commit_txn", "commit_row", "send_call", "send_note", "query_call", "subquery",
                "answer_row", "resend")
WAREHOUSE_TERMS = ("call", "message", "event_row", "batch", "batch_state")   # with `event` from the stopwatch
DRIVER_TERMS = ("txn", "call")


def add_arguments(parser) -> None:
    parser.add_argument("bench_dir", help="a `fedlab bench` directory (summary.json and its runs)")
    parser.add_argument("--out", help="the calibration file to write (default BENCH_DIR/calibration.json)")


def main(args) -> int:
    try:
        calibration = calibrate(Path(args.bench_dir))
    except ModelError as err:
        print(f"fedlab calibrate: {err}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.bench_dir) / "calibration.json"
    calibration.write(out)
    fit = calibration.about["fit"]
    print(f"calibration of {calibration.about['machine']} -> {out}")
    print(f"  loopback one way: p50 {1000 * calibration.loopback.p50:.2f} ms, p99 {1000 * calibration.loopback.p99:.2f} ms; "
          f"floor {calibration.floor:.3f} cores + {calibration.source_floor:.4f} per source")
    for process, f in fit.items():
        print(f"  {process}: the model accounts for {f['explained']:.0%} of its CPU over {f['stretches']} stretches "
              f"(worst stretch {f['worst']:+.0%})")
    for name in sorted(calibration.cpu):
        print(f"  {name:<26} {1e6 * calibration.cpu[name]:9.1f} us")
    return 0


def calibrate(bench_dir: Path) -> Calibration:
    """The calibration fitted to every run of the bench in `bench_dir` (see the module docstring)."""
    summary_path = bench_dir / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
    except OSError as err:
        raise ModelError(f"{summary_path}: {err.strerror} (is {bench_dir} a `fedlab bench` directory?)") from None
    except ValueError as err:
        raise ModelError(f"{summary_path}: not a bench summary ({err})") from None
    runs = [r for r in summary.get("runs", []) if r.get("cpu") and r.get("consistency") not in ("failed", None)]
    if not runs:
        raise ModelError(f"{bench_dir}: no run measured its CPU (did the bench finish?)")
    if any("window" not in stretch for r in runs for stretch in r["cpu"]):
        raise ModelError(f"{bench_dir}: its runs do not record their stretches' windows: bench again with this version")
    stretches = [s for run in runs for s in _stretches(run)]
    if not any(s["idle"] for s in stretches):
        raise ModelError(f"{bench_dir}: no run measured the idle federation (bench with --idle SECONDS)")
    cpu, fit = {}, {}
    source_rows = [(s["cpu"].get(f"{SOURCE}{name}", 0.0), s["seconds"], [counts[t] for t in SOURCE_TERMS])
                   for s in stretches for name, counts in s["sources"].items()]
    source_floor, costs, fit["source"] = _fit(source_rows)
    cpu.update({f"source.{t}": c for t, c in zip(SOURCE_TERMS, costs)})
    event, batch = _event_seconds(runs), _thread_seconds(runs, "committer", "batch")
    # A turn of the core's thread (it wakes and takes what is queued): what its thread used per
    # event in the load phase beyond the events' own, one turn an event at that rate.
    turn = max(0.0, (_thread_seconds(runs, "core", "events") or event) - event)
    terms = [t for t in WAREHOUSE_TERMS if t != "batch" or batch is None]
    # the core's own (each exchange that brings it messages wakes it once at most) and the
    # committer's are known: the rest is fitted
    known = [event * s["warehouse"]["events"] + turn * min(s["warehouse"]["events"], s["warehouse"]["call"])
             + (batch or 0.0) * s["warehouse"]["batch"] for s in stretches]
    warehouse_rows = [(s["cpu"].get(WAREHOUSE, 0.0) - k, s["seconds"], [s["warehouse"][t] for t in terms])
                      for s, k in zip(stretches, known)]
    warehouse_floor, costs, fit["warehouse"] = _fit(warehouse_rows)
    w = {"batch": batch, **dict(zip(terms, costs))}
    cpu.update({"warehouse.event": event, "warehouse.core_turn": turn, "warehouse.event_row": w["event_row"],
                "warehouse.notify_call": w["call"], "warehouse.dispatch_call": w["call"],
                "warehouse.notify_note": w["message"], "warehouse.answer": w["message"], "warehouse.subquery": w["message"],
                "warehouse.batch": w["batch"], "warehouse.batch_state": w["batch_state"]})
    jvm_floor, cpu["jvm.batch"], cpu["jvm.compact"], fit["jvm"] = _jvm(runs, stretches)
    cpu["jvm.batch_state"] = 0.0   # a batch costs the JVM the same however many states it holds (the ramp's)
    _, costs, fit["driver"] = _fit([(s["cpu"].get(DRIVER, 0.0), s["seconds"], [s["driver"][t] for t in DRIVER_TERMS])
                                    for s in stretches])
    cpu.update({f"driver.{t}": c for t, c in zip(DRIVER_TERMS, costs)})
    others = [sum(v for role, v in s["cpu"].items() if role.startswith("ray and helpers") or role == "other") / s["seconds"]
              for s in stretches if s["idle"]]
    missing = sorted(set(OPERATIONS) - set(cpu))
    if missing:
        raise AssertionError(f"calibration leaves out {missing}")
    about = {"machine": _machine(summary), "commit": summary.get("machine", {}).get("commit") or commit(),
             "bench": str(bench_dir.resolve()), "bench_started": summary.get("started"),
             "runs": [r.get("label", r.get("algorithm")) + f" {r.get('view')}" for r in runs],
             "fit": fit}
    return Calibration(cpu, _loopback(runs), float(summary.get("machine", {}).get("cpus") or 2),
                       round(warehouse_floor + jvm_floor + sum(others) / len(others), 4), round(source_floor, 5),
                       _lock_share(runs, cpu), about)


# ---- what each stretch did ----

def _stretches(run: dict) -> list[dict]:
    """Each stretch of `run` (its idle federation, load phase and ramp steps) with its CPU by
    role and what each process did in its window, counted from the run's files."""
    run_dir = Path(run["run_dir"])
    files = RunFile.read(run_dir).message_logs()
    events = sorted(read([p for p in files.values() if p is not None and p.exists()]), key=lambda e: e["t"])
    states = list(change_history.applied_states(RunFile.read(run_dir).warehouse_history))   # read by every stretch
    out = []
    for stretch in ([run["idle"]] if run.get("idle") else []) + run["cpu"]:
        start, end = stretch["window"]
        seen = [e for e in events if start <= e["t"] <= end]
        durable = [s["durable_time"] for s in states if s.get("durable_time") and start <= s["durable_time"] <= end]
        out.append({"idle": stretch is run.get("idle"), "seconds": end - start,
                    "cpu": {r: v for r, v in stretch["by_role"].items() if r != PROFILER},
                    "sources": {name: _source_counts(name, seen, stretch.get("groups", {}).get(name, 0))
                                for name in run["sources"]},
                    "warehouse": _warehouse_counts(seen, len(set(durable)), len(durable)),
                    "driver": {"txn": stretch.get("offered", 0), "call": sum(stretch.get("groups", {}).values())}})
    return out


def _source_counts(source: str, events: list[dict], groups: int) -> Counter:
    mine = [e for e in events if e["node"] == source]
    c = Counter()
    sent = [e for e in mine if e["kind"] == "notification" and e["event"] == "sent"]
    c["send_note"] = len(sent)
    c["send_call"] = _batches([e["t"] for e in sent])
    first = {e["dsv"] for e in mine if e["kind"] == "notification" and "dsv" in e}
    c["commit_txn"] = len(first)
    rows = {}
    for e in sent:
        rows.setdefault(e["dsv"], e.get("rows", 0))
    c["commit_row"] = sum(rows.values())
    c["commit_call"] = groups
    received = [e for e in mine if e["kind"] == "subquery" and e["event"] == "received"]
    c["subquery"] = len(received)
    c["query_call"] = round(sum(1 / max(1, e.get("batch", 1)) for e in received))
    c["answer_row"] = sum(e.get("rows", 0) for e in mine if e["kind"] == "answer" and e["event"] == "sent")
    c["resend"] = sum(1 for e in mine if e["kind"] == "resend_request" and e["event"] == "received")
    return c


def _warehouse_counts(events: list[dict], batches: int, states: int) -> Counter:
    mine = [e for e in events if e["node"] == WAREHOUSE_NODE]
    c = Counter()
    notes = [e for e in mine if e["kind"] == "notification" and e["event"] == "received"]
    answers = [e for e in mine if e["kind"] == "answer" and e["event"] == "received"]
    subqueries = [e for e in mine if e["kind"] == "subquery" and e["event"] == "sent"]
    resends = sum(1 for e in mine if e["kind"] == "resend_request" and e["event"] == "sent")
    c["message"] = len(notes) + len(answers) + len(subqueries) + resends
    c["call"] = _batches([e["t"] for e in notes]) + round(sum(1 / max(1, e.get("batch", 1)) for e in subqueries)) + resends
    c["events"] = len(notes) + len(answers)
    c["event_row"] = sum(e.get("rows", 0) for e in notes + answers)
    c["batch"], c["batch_state"] = batches, states
    return c


def _batches(times: list[float]) -> int:
    """How many batches messages logged at `times` went in: those logged within NOTIFY_GAP of the
    one before went with it (a sender logs a batch's messages one after another)."""
    times = sorted(times)
    return sum(1 for i, t in enumerate(times) if i == 0 or t - times[i - 1] > NOTIFY_GAP)


def _thread_seconds(runs: list[dict], thread: str, per: str) -> float | None:
    """What the warehouse's `thread` spent per `per` (a count of _warehouse_counts) in the load
    phase: its CPU by the profile's thread census (with --profile) over that count; None
    without a census."""
    seconds = count = 0.0
    for run in runs:
        census = (run.get("profilers") or {}).get("threads", {}).get(WAREHOUSE)
        found = next((t for t in (census or {}).get("threads", []) if t["thread"] == thread), None)
        if found is None or not run.get("committed_in_load"):
            continue
        seconds += found["cpu_ms"] / 1000 * run["committed_in_load"]
        count += _stretches(run)[1 if run.get("idle") else 0]["warehouse"][per]
    return seconds / count if count else None


def _jvm(runs: list[dict], stretches: list[dict]) -> tuple[float, float, float, dict]:
    """The Spark JVM's floor per second (idle), a batch's CPU (the profile's own reading of the
    JVM's CPU around each batch) and a compaction's (what the JVM used in the load and the ramp
    beyond its floor and its batches, over the compactions that committed meanwhile)."""
    idle = [s for s in stretches if s["idle"]]
    floor = sum(s["cpu"].get(JVM, 0.0) for s in idle) / sum(s["seconds"] for s in idle)
    calls = seconds = 0.0
    for run in runs:
        part = (run.get("profile") or {}).get("parts", {}).get(JVM_BATCH_CPU)
        if part:
            calls, seconds = calls + part["calls"], seconds + part["seconds"]
    if not calls:
        raise ModelError("no run read the JVM's CPU around its Delta batches: bench again (the stopwatches are always on)")
    batch = seconds / calls
    busy = [s for s in stretches if not s["idle"]]
    used = sum(s["cpu"].get(JVM, 0.0) for s in busy)
    beyond = used - sum(floor * s["seconds"] + batch * s["warehouse"]["batch"] for s in busy)
    compactions = sum(_compactions(run) for run in runs)
    compact = max(0.0, beyond) / compactions if compactions else 0.0
    return floor, batch, compact, {"stretches": len(busy), "explained": round(1 - abs(beyond - compact * compactions) / used, 3)
                                   if used else 1.0, "worst": 0.0, "compactions": compactions}


def _compactions(run: dict) -> int:
    """How many times the warehouse folded its journal into the view during the run's load and
    ramp: the view table's commits (its Delta log) after the first two (its creation and its
    constraint), within their windows and the ten seconds after (its checkpoint's share)."""
    start, end = run["cpu"][0]["window"][0], run["cpu"][-1]["window"][1] + 10
    log = Path(run["run_dir"]) / "warehouse" / "delta" / "view" / "_delta_log"
    times = sorted(json.loads(line)["commitInfo"]["timestamp"] / 1000 for f in sorted(log.glob("*.json"))
                   for line in f.read_text().splitlines() if '"commitInfo"' in line)
    return sum(1 for t in times[2:] if start <= t <= end)


def _event_seconds(runs: list[dict]) -> float:
    """What one core event costs: the bench's stopwatch on handle() (its seconds over its calls,
    the runs pooled)."""
    calls = seconds = 0.0
    for run in runs:
        part = (run.get("profile") or {}).get("parts", {}).get("core handle()")
        if part:
            calls, seconds = calls + part["calls"], seconds + part["seconds"]
    if not calls:
        raise ModelError("no run timed the core's handle(): bench again (the stopwatches are always on)")
    return seconds / calls


# ---- fitting ----

def _fit(rows: list[tuple[float, float, list[float]]]) -> tuple[float, list[float], dict]:
    """(floor per second, cost per operation, how well it fits) of CPU seconds that are a floor
    times the stretch's seconds plus each operation's count times its cost: least squares, no
    figure below zero (Lawson and Hanson's active set)."""
    a = np.array([[seconds, *counts] for _, seconds, counts in rows], dtype=float)
    b = np.array([cpu for cpu, _, _ in rows], dtype=float)
    scale = np.maximum(a.max(axis=0), 1e-12)   # columns of counts and of seconds on one footing
    x = _nnls(a / scale, b) / scale
    model = a @ x
    busy = b > 0.05 * b.max() if b.max() > 0 else np.zeros_like(b, dtype=bool)
    worst = float(max((model[busy] - b[busy]) / b[busy], key=abs)) if busy.any() else 0.0
    explained = float(1 - np.abs(model - b).sum() / b.sum()) if b.sum() > 0 else 1.0
    return float(x[0]), [float(v) for v in x[1:]], {"stretches": len(rows), "explained": round(explained, 3),
                                                    "worst": round(worst, 3)}


def _nnls(a: np.ndarray, b: np.ndarray, tolerance: float = 1e-10) -> np.ndarray:
    """argmin ||a x - b|| subject to x >= 0 (Lawson and Hanson 1974, chapter 23)."""
    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    for _ in range(3 * n + 10):
        gradient = a.T @ (b - a @ x)
        if passive.all() or gradient[~passive].max(initial=-np.inf) <= tolerance:
            break
        passive[np.argmax(np.where(passive, -np.inf, gradient))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            blocked = passive & (z <= 0)
            step = np.min(x[blocked] / np.maximum(x[blocked] - z[blocked], 1e-300))
            x = x + step * (z - x)
            passive &= x > tolerance
            x[~passive] = 0.0
    return x


# ---- latency and where it was measured ----

def _loopback(runs: list[dict]) -> Latency:
    """One-way latency of the load phases' messages, sender's log to receiver's."""
    delays = []
    for run in runs:
        start, end = run["cpu"][0]["window"]
        files = RunFile.read(Path(run["run_dir"])).message_logs()
        sent, received = {}, {}
        for e in read([p for p in files.values() if p is not None and p.exists()]):
            if not start <= e["t"] <= end:
                continue
            key = (e["kind"], e.get("dsv") if e["kind"] == "notification" else e.get("id"),
                   e["node"] if e["event"] == "sent" else e["peer"])
            if e["event"] == "sent" and e["kind"] in ("notification", "answer"):
                sent.setdefault(key, e["t"])
            elif e["event"] == "received" and e["kind"] == "subquery":
                received.setdefault((e["kind"], e.get("id"), "to"), e["t"])
            elif e["event"] == "sent" and e["kind"] == "subquery":
                sent.setdefault((e["kind"], e.get("id"), "to"), e["t"])
            elif e["event"] == "received":
                received.setdefault(key if e["kind"] != "notification" else (e["kind"], e.get("dsv"), e["peer"]), e["t"])
        delays += [received[k] - t for k, t in sent.items() if k in received and received[k] >= t]
    if len(delays) < 20:
        raise ModelError("too few messages matched from sender to receiver to measure the loopback's latency")
    delays.sort()
    p50, p99 = delays[len(delays) // 2], delays[min(len(delays) - 1, int(0.99 * len(delays)))]
    return Latency(max(p50, 1e-6), max(p99, p50, 1e-6))


def _lock_share(runs: list[dict], cpu: dict) -> float:
    """Of a call's cost, the share its messages wait for under the interpreter lock: from how
    long a source took to answer a sub-query in the load phase (its log's `received` to its
    answer's `sent`, the median), beyond what the sub-query's own work costs, over what its
    exchange costs (source.query_call)."""
    handling = []
    for run in runs:
        start, end = run["cpu"][0]["window"]
        files = RunFile.read(Path(run["run_dir"])).message_logs()
        received, answered = {}, {}
        for e in read([p for node, p in files.items() if node != WAREHOUSE_NODE and p is not None and p.exists()]):
            if start <= e["t"] <= end and e["kind"] == "subquery" and e["event"] == "received":
                received.setdefault(e["id"], e["t"])
            elif start <= e["t"] <= end and e["kind"] == "answer" and e["event"] == "sent":
                answered.setdefault(e["id"], (e["t"], e.get("rows", 0)))
        handling += [(answered[i][0] - t, answered[i][1]) for i, t in received.items() if i in answered]
    if not handling or not cpu["source.query_call"]:
        return 0.5
    handling.sort()
    seconds, rows = handling[len(handling) // 2]
    own = cpu["source.subquery"] + rows * cpu["source.answer_row"]
    return round(min(1.0, max(0.0, (seconds - own) / cpu["source.query_call"])), 3)


def _machine(summary: dict) -> str:
    m = summary.get("machine", {})
    return (f"{platform.node()}: {m.get('cpus')} cores, {m.get('memory_gb')} GB, {m.get('platform', platform.platform())}, "
            f"Python {m.get('python', platform.python_version())}")


def commit() -> str:
    """The git commit this code is at (the bench records it: what a calibration measured)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                               cwd=Path(__file__).parent).stdout.strip()
        return head + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
