"""The efficiency targets: the instrument lighter than what it measures. Each is judged on the runs of
the reference algorithm (Sze-Ling on the join graph) that fit it, so one bench may judge a few
and say what the others need:

- the idle federation: every process's CPU with nothing offered (`--idle`), at most 5% of a core;
- a Delta batch: its JVM CPU (mean) and its commit's wall time (p50);
- CPU per committed transaction over every process, at 100 and at 500 txn/s offered;
- freshness: at 100 txn/s without faults, staleness to Delta; at 100 txn/s with the default
  faults, staleness to the core's view, beside the floor those faults alone force
  (bench.chaos_floor); at 500 with them, staleness to Delta (a performance target of bench.targets too);
- steadiness: with `--repeat`, how many trials' ramps ended at the same step.
A target missed says by how much and, from the run's own figures, what the CPU went to.
"""

from __future__ import annotations

from collections import Counter

from fedlab.bench.chaos_floor import staleness_floor
from fedlab.bench.profile import JVM_BATCH_CPU
from fedlab.bench.resources import busy_text, cpu_ms_per_txn, shares
from fedlab.source_node.faults import FaultInjector, parse_rates
from fedlab.warehouse.core.timings import REORDER_ALLOWANCE

DEFAULT_FAULTS = "notification_drop=0.05,notification_reorder=0.1"
IDLE_SHARE = 0.05            # of one core, every process of an idle federation
BATCH_JVM_MS = 100.0         # JVM CPU per Delta batch, mean
BATCH_COMMIT_P50_MS = 150.0  # a Delta batch commit's wall time, p50
CPU_MS_PER_TXN = {100.0: 2.0, 500.0: 1.0}   # offered txn/s -> CPU ms per committed transaction, at most
FRESH = [  # (offered txn/s, faults, staleness measured to, percentile, at most ms)
    (100.0, "none", "Delta", "p50", 300.0), (100.0, "none", "Delta", "p99", 1000.0),
    (100.0, DEFAULT_FAULTS, "the core's view", "p99", 500.0), (500.0, DEFAULT_FAULTS, "Delta", "p99", 2000.0)]
STEADY = (4, 5)              # at least 4 of 5 trials end their ramp at the same step


def evaluate(runs: list[dict]) -> list[dict]:
    """The targets judged on each run's first trial (`runs`: those)."""
    mine = _reference(runs)
    return [_idle(mine), *_delta(mine), *(_cpu(mine, rate, ms) for rate, ms in CPU_MS_PER_TXN.items()),
            *(_fresh(mine, *target) for target in FRESH)]


def steadiness(runs: list[dict]) -> list[dict]:
    """The steadiness target, over every trial of the reference algorithm's runs."""
    return [_steady(_reference(runs))]


def _reference(runs: list[dict]) -> list[dict]:
    return [r for r in runs if r["algorithm"] == "sze-ling" and r["access_path"] == "join-graph"
            and r.get("consistency") != "failed"]


def _first(runs: list[dict], rate: float | None = None, chaos: str | None = None) -> dict | None:
    return next((r for r in runs if (rate is None or r["rate_target"] == rate)
                 and (chaos is None or r["chaos"] == chaos)), None)


def _idle(runs: list[dict]) -> dict:
    entry = {"name": "idle federation, every process", "target": f"<= {IDLE_SHARE:.0%} of one core"}
    run = next((r for r in runs if r.get("idle")), None)
    if run is None:
        return {**entry, "met": None, "measured": "not measured (--idle 0)"}
    idle = run["idle"]
    met = idle["share_of_a_core"] <= IDLE_SHARE
    return {**entry, "met": met, "measured": f"{idle['share_of_a_core']:.1%} over {idle['seconds']:g} s",
            **({} if met else {"shortfall": f"{idle['share_of_a_core'] / IDLE_SHARE:.1f}x the target",
                               "what_dominates": f"by process: {shares(idle['by_role'])}"})}


def _delta(runs: list[dict]) -> list[dict]:
    cpu = {"name": "JVM CPU per Delta batch (mean)", "target": f"<= {BATCH_JVM_MS:g} ms"}
    wall = {"name": "Delta batch commit (p50)", "target": f"<= {BATCH_COMMIT_P50_MS:g} ms"}
    run = next((r for r in runs if JVM_BATCH_CPU in r.get("profile", {}).get("parts", {})), None)
    if run is None:
        return [{**cpu, "met": None, "measured": "not measured"}, {**wall, "met": None, "measured": "not measured"}]
    parts = run["profile"]["parts"]
    where = f" ({parts[JVM_BATCH_CPU]['calls']} batches, the {run['rate_target']:g} txn/s {run['label']} run)"
    ms, p50 = parts[JVM_BATCH_CPU]["mean_ms"], parts["Delta batch commit"]["p50_ms"]
    return [_judged(cpu, ms, BATCH_JVM_MS, f"{ms:g} ms{where}", _jvm(run)),
            _judged(wall, p50, BATCH_COMMIT_P50_MS, f"{p50:g} ms{where}", _jvm(run))]


def _cpu(runs: list[dict], rate: float, target: float) -> dict:
    entry = {"name": f"CPU per committed transaction at {rate:g} txn/s, every process",
             "target": f"<= {target:g} ms"}
    run = _first(runs, rate)
    if run is None or not run.get("cpu"):
        return {**entry, "met": None, "measured": f"needs a run offering {rate:g} txn/s (--rate {rate:g})"}
    load = run["cpu"][0]
    ms = cpu_ms_per_txn(load, run.get("committed_in_load"))
    faults = "no faults" if run["chaos"] == "none" else f"faults {run['chaos']}"
    return _judged(entry, ms, target, f"{ms:g} ms ({faults}; the machine {busy_text(load)})",
                   f"by process: {shares(load['by_role'])}{_hottest(run)}")


def _fresh(runs: list[dict], rate: float, chaos: str, to: str, percentile: str, target: float) -> dict:
    if chaos == "none":
        faults = "without faults"
    else:
        drop, delay = _notification_faults(parse_rates(chaos))
        faults = f"with {drop:.0%} of notifications lost and each delayed {delay:g} s on average"
    entry = {"name": f"staleness {percentile} to {to} at {rate:g} txn/s {faults}", "target": f"<= {target:g} ms"}
    run = _first(runs, rate, chaos)
    if run is None:
        flag = "--chaos none" if chaos == "none" else "the default --chaos"
        return {**entry, "met": None, "measured": f"needs a run offering {rate:g} txn/s with {flag}"}
    figures = run.get("staleness_delta_ms" if to == "Delta" else "staleness_ms") or {}
    ms = figures.get(percentile)
    parts = (run.get("staleness_parts") or {}).get("parts_ms", {})
    why = "; ".join(f"{name} {p.get(percentile):g} ms" for name, p in parts.items() if p.get(percentile) is not None)
    floor = _faults_floor(run, percentile) if to == "the core's view" else None
    measured = "not measured" if ms is None else f"{ms:g} ms" + (
        "" if floor is None else f" (the faults alone force {floor:g} ms under the resend rule: bench.chaos_floor)")
    judged = _judged(entry, ms, target, measured, f"its parts' {percentile}s: {why}" if why else None)
    if floor is not None and floor > target and "shortfall" in judged:
        judged["shortfall"] += f"; out of reach under these faults, which alone force {floor:g} ms"
    return judged


def _faults_floor(run: dict, percentile: str) -> float | None:
    """The staleness the run's notification faults alone force (bench.chaos_floor), at
    each source's share of the commits; None for a run without faults or without its commits."""
    drop, delay = _notification_faults(run.get("faults") or {})
    commits = {name[len("commit at "):]: p.get("transactions", p["calls"])
               for name, p in (run.get("profile") or {}).get("parts", {}).items() if name.startswith("commit at ")}
    total = sum(commits.values())
    if not (drop or delay) or not total or not run.get("rate_achieved"):
        return None
    commit_rates = {source: run["rate_achieved"] * n / total for source, n in commits.items()}
    return staleness_floor(commit_rates, drop, delay, run.get("reorder_allowance", REORDER_ALLOWANCE))[percentile]


def _notification_faults(rates: dict) -> tuple[float, float]:
    """(the share of notifications lost, their mean delay in s) under the fault `rates`, read as
    the sources read them (source_node.faults.FaultInjector)."""
    notification = FaultInjector(**rates).rates()["notification"]
    return notification["drop"], notification["delay_mean"]


def _steady(runs: list[dict]) -> dict:
    need, of = STEADY
    entry = {"name": "steadiness: trials whose ramp ends at the same step", "target": f">= {need} of {of}"}
    groups: dict[tuple, list] = {}
    for r in runs:
        if r.get("ramp"):
            groups.setdefault((r["label"], r["view"], r["scale"], r["chaos"]), []).append(r.get("max_sustained_rate"))
    group = max(groups.values(), key=len, default=[])
    if len(group) < of:
        return {**entry, "met": None, "measured": f"needs --repeat {of} with a ramp ({len(group)} trials here)"}
    step, same = Counter(group).most_common(1)[0]
    return {**entry, "met": same >= need, "measured": f"{same} of {len(group)} ended at {step} txn/s ({group})",
            **({} if same >= need else {"shortfall": f"{need - same} trials short"})}


def _judged(entry: dict, value: float | None, target: float, measured: str, why: str | None) -> dict:
    if value is None:
        return {**entry, "met": None, "measured": measured}
    met = value <= target
    return {**entry, "met": met, "measured": measured,
            **({} if met else {"shortfall": f"{value / target:.1f}x the target", **({"what_dominates": why} if why else {})})}


def _hottest(run: dict) -> str:
    """The busiest process's three hottest frames, when the run was profiled."""
    processes = (run.get("profilers") or {}).get("processes") or {}
    load = run["cpu"][0]["by_role"]
    profiled = [role for role in sorted(load, key=load.get, reverse=True) if processes.get(role, {}).get("hottest")]
    if not profiled:
        return ""
    hot = processes[profiled[0]]["hottest"][:3]
    return f"; {profiled[0]}'s hottest frames: " + ", ".join(f"{h['frame']} {h['share']:.0%}" for h in hot)


def _jvm(run: dict) -> str | None:
    hot = ((run.get("profilers") or {}).get("processes") or {}).get("spark JVM", {}).get("hottest")
    return "the JVM's hottest frames: " + ", ".join(f"{h['frame']} {h['share']:.0%}" for h in hot[:3]) if hot else None
