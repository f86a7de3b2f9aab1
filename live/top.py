"""`fedlab top RUN_DIR`: a live terminal view of a running federation, from its processes' metrics.

The run file (live.runfile) says where each process serves its Prometheus metrics (`fedlab run`
and `fedlab demo` write it there; docs/operations.md lists the series). Every `--interval`
seconds this scrapes each of them and shows, from the last two scrapes:
- per source: its DSV, commits a second, the outbox's backlog (its most behind subscriber's) and
  the faults in force;
- per view and source: the DSV the view reflects and how far behind it is, in versions and seconds;
- per view: transactions applied a second, the staleness of those applied in the interval (p50,
  p99), maintenance tasks and sub-queries in flight, Delta commits (p50 in the interval, failures);
- the load: offered and committed a second, and its rejections by reason;
- how long each process has been up: a short time is a restart (a kill, a crash).
A process that does not answer is shown down. `--once` prints one screen and exits (two scrapes
an interval apart, for the rates).
"""

from __future__ import annotations

import math
import time
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from fedlab.fedmodel.errors import ModelError
from fedlab.live.runfile import RunFile

# (series name with its suffix, sorted label pairs) -> value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a running federation's directory (it holds run.json)")
    parser.add_argument("--interval", type=float, default=2.0, metavar="SECONDS",
                        help="seconds between scrapes (default 2)")
    parser.add_argument("--once", action="store_true", help="print one screen and exit")


def main(args) -> int:
    try:
        if not args.interval > 0:
            raise ModelError(f"--interval must be positive, got {args.interval:g}")
        processes = endpoints(RunFile.read(args.run_dir).metrics)
        if not processes:
            raise ModelError(f"{args.run_dir}: the run file names no metrics endpoints (a run from before "
                             f"`fedlab top`, or one that has not started yet)")
    except ModelError as err:
        print(f"fedlab top: {err}")
        return 2
    console = Console()
    before = Scrape.of(processes)
    if args.once:
        time.sleep(args.interval)
        console.print(screen(before, Scrape.of(processes)))
        return 0
    try:
        with Live(console=console, auto_refresh=False) as live:
            while True:
                time.sleep(args.interval)
                now = Scrape.of(processes)
                live.update(screen(before, now), refresh=True)
                before = now
    except KeyboardInterrupt:
        return 0


def endpoints(metrics: dict) -> dict[str, str]:
    """The run file's `metrics` as process -> address: "source ds1", "warehouse w2", "load"."""
    out = {f"source {s}": a for s, a in metrics.get("sources", {}).items() if a}
    out.update({f"warehouse {w}": a for w, a in metrics.get("warehouses", {}).items() if a})
    if metrics.get("load"):
        out["load"] = metrics["load"]
    return out


def scrape(address: str, timeout: float = 2.0) -> Samples | None:
    """Every sample `address`'s /metrics serves; None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout) as reply:
            text = reply.read().decode()
    except OSError:
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def select(samples: Samples | None, name: str, **match: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of series `name` whose labels include `match`, by their labels."""
    return {labels: v for (n, labels), v in (samples or {}).items()
            if n == name and all((k, val) in labels for k, val in match.items())}


@dataclass
class Scrape:
    at: float
    processes: dict[str, Samples | None]

    @classmethod
    def of(cls, processes: dict[str, str]) -> "Scrape":
        return cls(time.monotonic(), {p: scrape(a) for p, a in processes.items()})

    def merged(self) -> Samples:
        return {k: v for samples in self.processes.values() if samples for k, v in samples.items()}


def screen(before: Scrape, now: Scrape) -> Group:
    """The tables of one screen, rates and quantiles over the interval between the two scrapes."""
    seconds = max(now.at - before.at, 1e-9)
    old, new = before.merged(), now.merged()

    def rate(name: str, **match: str) -> float:
        return max(0.0, sum(select(new, name, **match).values()) - sum(select(old, name, **match).values())) / seconds

    down = [p for p, samples in now.processes.items() if samples is None]
    parts = [_sources(new, rate), _lag(new), _views(old, new, rate), _load(new, rate), _uptimes(now)]
    if down:
        parts.append(f"[red]down (no answer from its metrics): {', '.join(down)}[/]")
    return Group(*[p for p in parts if p is not None])


def _sources(new: Samples, rate) -> Table:
    table = Table("source", "DSV", "commits/s", "outbox backlog", "faults", title="sources", title_justify="left")
    for labels, dsv in sorted(select(new, "fedlab_source_dsv").items()):
        source = dict(labels)["source"]
        backlog = max(select(new, "fedlab_source_outbox_backlog", source=source).values(), default=0)
        faults = [f"{dict(k)['message']} {dict(k)['fault']} {p:g}"
                  for k, p in sorted(select(new, "fedlab_source_fault_probability", source=source).items()) if p]
        faults += [f"{dict(k)['message']} delay {d:g} s"
                   for k, d in sorted(select(new, "fedlab_source_fault_delay_mean_seconds", source=source).items()) if d]
        table.add_row(source, f"{dsv:.0f}", f"{rate('fedlab_source_commits_total', source=source):.1f}",
                      f"{backlog:.0f}", ", ".join(faults) or "none")
    return table


def _lag(new: Samples) -> Table:
    table = Table("view", "source", "applied DSV", "behind (versions)", "behind (s)", title="lag",
                  title_justify="left")
    for labels, applied in sorted(select(new, "fedlab_warehouse_applied_dsv").items()):
        view, source = dict(labels)["view"], dict(labels)["source"]
        versions = sum(select(new, "fedlab_warehouse_lag_versions", view=view, source=source).values())
        behind = sum(select(new, "fedlab_warehouse_lag_seconds", view=view, source=source).values())
        table.add_row(view, source, f"{applied:.0f}", f"{versions:.0f}", f"{behind:.2f}")
    return table


def _views(old: Samples, new: Samples, rate) -> Table:
    table = Table("view", "applied/s", "staleness p50 / p99 (s)", "tasks in flight", "sub-queries in flight",
                  "Delta commit p50 (s)", "commit failures", title="views", title_justify="left")
    for labels, _ in sorted(select(new, "fedlab_warehouse_applied_transactions_total").items()):
        view = dict(labels)["view"]
        staleness = interval_buckets(old, new, "fedlab_warehouse_staleness_seconds", view=view)
        commits = interval_buckets(old, new, "fedlab_warehouse_delta_commit_seconds", view=view)
        failing = sum(select(new, "fedlab_warehouse_delta_commits_failing", view=view).values())
        failures = sum(select(new, "fedlab_warehouse_delta_commit_failures_total", view=view).values())
        table.add_row(view, f"{rate('fedlab_warehouse_applied_transactions_total', view=view):.1f}",
                      f"{_shown(quantile(0.5, staleness))} / {_shown(quantile(0.99, staleness))}",
                      f"{sum(select(new, 'fedlab_warehouse_tasks_in_flight', view=view).values()):.0f}",
                      f"{sum(select(new, 'fedlab_warehouse_subqueries_in_flight', view=view).values()):.0f}",
                      _shown(quantile(0.5, commits)),
                      f"{failures:.0f}" + (f" ([red]{failing:.0f} in a row now[/])" if failing else ""))
    return table


def _load(new: Samples, rate) -> str | None:
    if not select(new, "fedlab_load_offered_total"):
        return None
    rejected = ", ".join(f"{v:.0f} {dict(k)['reason']}" for k, v in sorted(select(new, "fedlab_load_rejected_total").items()))
    return (f"load: offered {rate('fedlab_load_offered_total'):.1f}/s, committed "
            f"{rate('fedlab_load_committed_total'):.1f}/s; rejected: {rejected or 'none'}")


def _uptimes(now: Scrape) -> str:
    started = {p: sum(select(samples, "process_start_time_seconds").values())
               for p, samples in now.processes.items() if samples}
    return "up: " + ", ".join(f"{p} {time.time() - t:.0f} s" for p, t in started.items())


def interval_buckets(old: Samples, new: Samples, histogram: str, **match: str) -> list[tuple[float, float]]:
    """A histogram's cumulative buckets counted between two scrapes, summed over the series that
    match: (upper bound, observations up to it), least bound first."""
    counts: dict[float, float] = {}
    for samples, sign in ((new, 1), (old, -1)):
        for labels, value in select(samples, f"{histogram}_bucket", **match).items():
            bound = float(dict(labels)["le"])
            counts[bound] = counts.get(bound, 0.0) + sign * value
    return sorted(counts.items())


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative `buckets`, interpolated within its bucket as Prometheus's
    histogram_quantile does; None without observations. One past the last finite bound is that bound."""
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower
            return lower + (bound - lower) * ((rank - below) / (count - below) if count > below else 1.0)
        lower, below = bound, count
    return lower


def _shown(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
