"""Growth as a figure: whether any cost of a live run grows with how long it has run.

During the load phase a probe takes a reading every `interval` seconds (a minute, or a tenth of a
shorter load): every process's CPU seconds and resident memory (bench.resources), the
transactions committed so far, the Delta batch commits, compactions and checkpoints the
warehouse's stopwatches timed since the reading before (bench.profile), and the disk each
part of the run's directory takes. After the run each interval also gets the staleness of the
transactions committed in it, to the core's view and to Delta (bench.metrics). Those are
the run's `series`, interval by interval.

`judge` compares the load's last tenth with its first, figure by figure: the value in each, their
ratio, the ratio the figure may reach (its bound) and whether it went past it. The bounds are the
issue's targets for an hour at 200 txn/s ("An hour like a minute"): CPU per transaction and
resident memory within 10%, staleness and Delta's commit time within 20%; disk may grow only by
what the retention settings keep (`disk_bound`). A figure measured in neither tenth (no compaction
in a short load) has no ratio and is not judged. Intervals a nemesis fault touched (`mark_faults`)
are left out of the tenths' rates: a warehouse killed in the first tenth would otherwise make its
staleness the bound every later tenth is held to; what the faults did is `fault_phases`' to say.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

from fedlab.bench.metrics import percentiles
from fedlab.bench.profile import Stopwatches
from fedlab.bench.resources import grouped

INTERVAL = 60.0        # seconds between readings of a load ten minutes or longer
CPU_BOUND = 1.10       # the last tenth's figure over the first's, at most
MEMORY_BOUND = 1.10
STALENESS_BOUND = 1.20
DELTA_BOUND = 1.20
MARGIN = 1.10          # what disk_bound allows beyond what the retention keeps
SETTLE = 30.0          # seconds after a fault's end its effects are taken to last (a local restart takes <10)
CPU_SHARE = 0.05       # a process's CPU per transaction is judged from this share of the whole on
TIMED = {"delta_commit": "Delta batch commit", "compaction": "Delta compaction", "checkpoint": "Delta checkpoint"}


def interval_for(duration: float) -> float:
    """Seconds between readings: a minute, or a tenth of a load shorter than ten minutes (each
    tenth then holds a reading), never under a second."""
    return max(1.0, min(INTERVAL, duration / 10))


def disk_mb(parts: dict[str, list[Path]], leave_out: set[Path] = frozenset()) -> dict[str, float]:
    """MB each part takes: the folders it names and the files, each with the files beside it that
    carry its name and a suffix (a log's closed segments: fedio.message_log); in a folder the files
    `leave_out` names (with theirs) not counted: a message log inside the history folder is a part
    of its own. A missing one counts nothing."""
    def sized(path: Path) -> int:
        try:
            return path.stat().st_size
        except OSError:   # removed meanwhile (a vacuum, a rotated log)
            return 0

    left_out = {p.name for p in leave_out}
    sizes = {}
    for name, paths in parts.items():
        total = 0
        for path in paths:
            if path.is_dir():
                for folder, _, files in os.walk(path):
                    total += sum(sized(Path(folder) / f) for f in files
                                 if f not in left_out and f.split(".jsonl.")[0] + ".jsonl" not in left_out)
            else:
                total += sized(path) + sum(sized(p) for p in path.parent.glob(f"{path.name}.*"))
        sizes[name] = round(total / 2 ** 20, 2)
    return sizes


class GrowthProbe:
    """Readings every `interval` seconds from `start` to `stop` (see the module docstring):
    `sampler` (a bench.resources.ResourceSampler) gives the CPU and memory, `committed()`
    the transactions committed so far in the load, `watches` the Delta timings, `parts` the
    run's directories by name (`disk_mb`)."""

    def __init__(self, sampler, watches: Stopwatches, committed: Callable[[], int], parts: dict[str, list[Path]],
                 interval: float, leave_out: set[Path] = frozenset(), before_reading: Callable[[], None] = lambda: None):
        """`before_reading`: called before each reading (the runner instruments a warehouse the
        nemesis restarted meanwhile, so that its Delta timings go on)."""
        self.sampler, self.watches, self.committed = sampler, watches, committed
        self.before_reading = before_reading
        self.parts, self.leave_out, self.interval = parts, set(leave_out), interval
        self.readings: list[dict] = []
        self._since = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-growth", daemon=True)

    def start(self) -> "GrowthProbe":
        self._since = time.monotonic()
        self.readings.append(self._read(self._since))
        self._thread.start()
        return self

    def stop(self) -> list[dict]:
        """The readings, the last taken now. It replaces one the thread took less than half an
        interval before: the reading due as the load ends races this one, and the interval of a
        few milliseconds between them would commit nothing and stand for the load's last tenth."""
        self._stop.set()
        self._thread.join()
        last = self._read()
        if len(self.readings) > 1 and last["t"] - self.readings[-1]["t"] < self.interval / 2:
            self.readings.pop()
        self.readings.append(last)
        return self.readings

    def _run(self) -> None:
        while not self._stop.wait(self._since + self.interval * len(self.readings) - time.monotonic()):
            self.readings.append(self._read())

    def _read(self, now: float | None = None) -> dict:
        """A reading, timed when it began (`now`, time.monotonic(); the first one's is the start)."""
        now = time.monotonic() if now is None else now
        self.before_reading()
        with self.watches._lock:
            timed = {name: len(self.watches.samples.get(part, [])) for name, part in TIMED.items()}
        return {"t": round(now - self._since, 3), "cpu": self.sampler.cpu_seconds(),
                "rss_mb": self.sampler.resident_mb(), "committed": self.committed(), "timed": timed,
                "disk_mb": disk_mb(self.parts, self.leave_out)}

    def samples(self, name: str, first: int, last: int) -> list[float]:
        """The seconds of the `name` timings (TIMED) taken between two readings' counts."""
        with self.watches._lock:
            return list(self.watches.samples.get(TIMED[name], [])[first:last])


def series(probe: GrowthProbe, lags: list[tuple[float, float]], delta_lags: list[tuple[float, float]],
           load_from: float) -> list[dict]:
    """One entry per interval between two readings: `from_s`, `to_s` (seconds from the load's
    start), what was committed, CPU ms per transaction (in all and by process), staleness p50/p99
    of the transactions committed in it (to the core's view and to Delta, from `lags` and
    `delta_lags`: (commit time, seconds) pairs), Delta batch commits p50/p99 and the compactions'
    and checkpoints' seconds (their mean, when any), and at its end the resident MB by process and
    the MB each part of the run's directory takes."""
    out = []
    for before, after in zip(probe.readings, probe.readings[1:]):
        committed = after["committed"] - before["committed"]
        cpu = grouped({role: max(0.0, seconds - before["cpu"].get(role, 0.0)) for role, seconds in after["cpu"].items()})
        start, end = load_from + before["t"], load_from + after["t"]
        timings = {name: probe.samples(name, before["timed"][name], after["timed"][name]) for name in TIMED}
        commits = percentiles(timings["delta_commit"])
        out.append({"from_s": before["t"], "to_s": after["t"], "committed": committed,
                    "cpu_ms_per_txn": {"all": _per_txn(sum(cpu.values()), committed),
                                       **{role: _per_txn(s, committed) for role, s in sorted(cpu.items())}},
                    "staleness_ms": _p50_p99(lag for c, lag in lags if start <= c < end),
                    "staleness_delta_ms": _p50_p99(lag for c, lag in delta_lags if start <= c < end),
                    "delta_commit_ms": {"p50": commits["p50"], "p99": commits["p99"], "n": commits["n"]},
                    **{f"{name}_s": _mean(timings[name]) for name in ("compaction", "checkpoint")},
                    "rss_mb": {role: round(mb, 1) for role, mb in sorted(after["rss_mb"].items())},
                    "disk_mb": after["disk_mb"]})
    return out


def mark_faults(entries: list[dict], windows: list[tuple[float, float]], settle: float = SETTLE) -> list[dict]:
    """`fault: true` on each interval that overlaps a fault's window (`began`, `ended`: seconds
    from the load's start) or the `settle` seconds after it.

    >>> entries = [{"from_s": 60.0 * i, "to_s": 60.0 * (i + 1)} for i in range(4)]
    >>> [e.get("fault", False) for e in mark_faults(entries, [(100.0, 100.0), (170.0, 170.0)])]
    [False, True, True, True]
    """
    for e in entries:
        if any(e["from_s"] < ended + settle and began < e["to_s"] for began, ended in windows):
            e["fault"] = True
    return entries


def _per_txn(seconds: float, committed: int) -> float | None:
    return round(1000 * seconds / committed, 3) if committed else None


def _p50_p99(values) -> dict:
    p = percentiles(values)
    return {"p50": p["p50"], "p99": p["p99"], "n": p["n"]}


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def disk_bound(duration: float, kept: float | None) -> float:
    """The ratio a part of the run's directory may grow by from the end of the load's first tenth
    to its end, when it keeps what was written in the last `kept` seconds (None: all of it): what
    it holds grows with min(time, kept), so by min(T, kept) / min(T/10, kept), and MARGIN more.

    >>> disk_bound(3600, None), disk_bound(3600, 600), disk_bound(3600, 60)
    (11.0, 1.833, 1.1)
    """
    tenth = duration / 10
    span = (lambda t: t) if kept is None else (lambda t: min(t, kept))
    return round(MARGIN * span(duration) / span(tenth), 3)


def judge(entries: list[dict], duration: float, kept: dict[str, float | None], warm_s: float = 0.0) -> dict:
    """The growth object: the load's first and last tenth (`tenth_s` seconds each) compared,
    figure by figure, {name: {first, last, ratio, bound, exceeded}}, and `exceeded`, the names of
    those that grew past their bound. `kept`: per part of the run's directory, the seconds of
    writing its retention keeps (None: all), which sets its bound (`disk_bound`). `warm_s`: when
    every periodic task has run once (`warm_seconds`), which memory is judged from.

    CPU per transaction is the tenth's CPU over its commits; staleness, the p50 and p99 of the
    intervals' (the intervals' own percentiles, weighted alike: a tenth is one to six of them);
    Delta's commit and compaction times their intervals' mean, all of these from the intervals no
    fault touched (`mark_faults`; none left: not judged); memory its value at the end of the
    tenth's last interval no fault touched (a warehouse restarted in the bench's process holds the
    old one's garbage for a while: that is the fault's cost, not the run's), disk at the tenth's
    end. The CPU of a process under CPU_SHARE of the whole is left out: its ratio is noise.

    Memory is a level, not a rate: an allocator (G1's heap, Python's arenas) keeps what the
    largest task so far took, and the journal's retention first removes files only a retention
    into the run. So memory's first tenth is the first that begins at `warm_s` or later, where
    one ends before the last tenth begins (`memory_from_s`); else the load's first tenth.
    """
    tenth = duration / 10
    first_all = [e for e in entries if e["to_s"] <= tenth + 1e-6] or entries[:1]
    last_all = [e for e in entries if e["from_s"] >= duration - tenth - 1e-6] or entries[-1:]
    warm_from = min((e["from_s"] for e in entries if e["from_s"] >= warm_s - 1e-6), default=0.0)
    warm_all = [e for e in entries if warm_from <= e["from_s"] and e["to_s"] <= warm_from + tenth + 1e-6]
    if not warm_all or warm_all[-1]["to_s"] > duration - tenth + 1e-6:
        warm_from, warm_all = 0.0, first_all
    first, last, warm = ([e for e in tenth_entries if not e.get("fault")]
                         for tenth_entries in (first_all, last_all, warm_all))
    figures: dict[str, dict] = {}

    def judged(name: str, a, b, bound: float) -> None:
        ratio = round(b / a, 3) if a and b is not None else None
        figures[name] = {"first": a, "last": b, "ratio": ratio, "bound": bound,
                         "exceeded": ratio is not None and ratio > bound}

    def cpu(tenth_entries, role):
        committed = sum(e["committed"] for e in tenth_entries)
        seconds = sum((e["cpu_ms_per_txn"].get(role) or 0) * e["committed"] / 1000 for e in tenth_entries)
        return round(1000 * seconds / committed, 3) if committed else None

    total = cpu(first, "all")
    judged("cpu_ms_per_txn", total, cpu(last, "all"), CPU_BOUND)
    roles = sorted({role for e in entries for role in e["cpu_ms_per_txn"]} - {"all"})
    for role in roles:
        share = cpu(first, role)
        if total and share is not None and share >= CPU_SHARE * total:
            judged(f"cpu_ms_per_txn: {role}", share, cpu(last, role), CPU_BOUND)
    for figure, label in (("staleness_ms", "staleness"), ("staleness_delta_ms", "staleness to Delta"),
                          ("delta_commit_ms", "Delta commit")):
        for p in ("p50", "p99"):
            bound = DELTA_BOUND if figure == "delta_commit_ms" else STALENESS_BOUND
            judged(f"{label} {p} ms", _mean([e[figure][p] for e in first if e[figure][p] is not None]),
                   _mean([e[figure][p] for e in last if e[figure][p] is not None]), bound)
    for name in ("compaction_s", "checkpoint_s"):
        judged(name.replace("_s", " s"), _mean([e[name] for e in first if e[name] is not None]),
               _mean([e[name] for e in last if e[name] is not None]), DELTA_BOUND)
    for role in sorted({role for e in entries for role in e["rss_mb"]}):
        judged(f"resident MB: {role}", (warm or warm_all)[-1]["rss_mb"].get(role),
               (last or last_all)[-1]["rss_mb"].get(role), MEMORY_BOUND)
    for part in sorted(first_all[-1]["disk_mb"]):
        judged(f"disk MB: {part}", first_all[-1]["disk_mb"][part], last_all[-1]["disk_mb"][part],
               disk_bound(duration, kept.get(part)))
    return {"tenth_s": round(tenth, 1), "memory_from_s": warm_from, "figures": figures,
            "exceeded": [name for name, f in figures.items() if f["exceeded"]],
            "left_out_s": [[e["from_s"], e["to_s"]] for e in first_all + last_all if e.get("fault")]}


def warm_seconds(journal_retention: float | None, compact_interval: float) -> float:
    """Seconds into a run by which every periodic task of the warehouse has run once: the first
    compaction whose retention finds journal files older than the retention to remove.

    >>> warm_seconds(600, 60), warm_seconds(None, 60)
    (660, 60)
    """
    return (journal_retention or 0) + compact_interval


def kept_seconds(journal_retention: float | None, history_retention: float | None,
                 compact_interval: float) -> dict[str, float | None]:
    """The seconds of writing each part of a run's directory keeps under the retention settings:
    the journal what the view's base folded that long ago, then as long again before a vacuum
    deletes its files (and a compaction's interval and half a retention between vacuums); the
    view's base its old files as long; the history what the history retention keeps, and the
    sources their logs and message logs twice that (live.federation.source_log_keep; their
    data does not grow with time: a workload that only inserts is what would make it)."""
    journal = None if journal_retention is None else 2.5 * journal_retention + compact_interval
    view = None if journal_retention is None else 2.5 * journal_retention
    sources = None if history_retention is None else 2 * history_retention
    return {"journal": journal, "view": view, "history": history_retention, "message logs": sources,
            "sources": sources}


def summary_line(growth: dict) -> str:
    """One sentence naming what grew past its bound, or that nothing did, and where memory's
    first tenth began when not at the load's start."""
    warm = growth.get("memory_from_s")
    memory = f" (memory from the tenth {warm:g} s in, once every periodic task had run)" if warm else ""
    if not growth["exceeded"]:
        return f"Nothing grew past its bound from the load's first tenth ({growth['tenth_s']:g} s){memory} to its last."
    said = [f"{name} ({_ratio(growth['figures'][name])})" for name in growth["exceeded"]]
    return (f"Grew past its bound from the load's first tenth ({growth['tenth_s']:g} s){memory} to its last: "
            f"{'; '.join(said)}.")


def _ratio(figure: dict) -> str:
    return f"{figure['first']:g} -> {figure['last']:g}, x{figure['ratio']:g} against x{figure['bound']:g}"
