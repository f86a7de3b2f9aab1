"""`fedlab bench-scrape RUN_DIR`: what a Prometheus scrape costs each process of a running federation.

    fedlab run --duration 600s --rate 20 --run-dir runs/r &     # or fedlab demo, or a bench's run
    fedlab bench-scrape runs/r --trials 3

For each process the run file names (live.runfile `metrics`), in turn, each trial measures the
process's own CPU time (its `process_cpu_seconds_total`, which each endpoint serves) over a quiet
window, then over `--scrapes` scrapes back to back, and takes the quiet window's rate out of the
second: what is left is the scrapes' CPU, divided by their number. At a scrape every `--interval`
seconds (Prometheus's default is 15 s here, 1 minute in Prometheus itself) a process then spends
that much of a core on being watched: issue 71 wants under 1%. The figures go to
RUN_DIR/scrape_cost.json and a table.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

from fedlab.fedmodel.errors import ModelError
from fedlab.live.runfile import RunFile
from fedlab.live.top import endpoints, scrape, select


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a running federation's directory (it holds run.json)")
    parser.add_argument("--trials", type=int, default=3, help="trials per process (default 3)")
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes back to back per trial (default 200)")
    parser.add_argument("--quiet", type=float, default=5.0, metavar="SECONDS",
                        help="the window without scrapes each trial's background CPU is read over (default 5)")
    parser.add_argument("--interval", type=float, default=15.0, metavar="SECONDS",
                        help="the scrape interval the share of a core is given for (default 15)")


def main(args) -> int:
    try:
        if args.trials < 1 or args.scrapes < 1 or not args.quiet > 0 or not args.interval > 0:
            raise ModelError("--trials and --scrapes must be at least 1, --quiet and --interval positive")
        processes = endpoints(RunFile.read(args.run_dir).metrics)
        if not processes:
            raise ModelError(f"{args.run_dir}: the run file names no metrics endpoints")
    except ModelError as err:
        print(f"fedlab bench-scrape: {err}")
        return 2
    figures = {}
    for process, address in processes.items():
        trials = []
        for trial in range(args.trials):
            print(f"{process}: trial {trial + 1} of {args.trials}", file=sys.stderr, flush=True)
            measured = measure(address, args.scrapes, args.quiet)
            if measured is None:
                print(f"fedlab bench-scrape: {process} at {address} stopped answering", file=sys.stderr)
                return 1
            trials.append(measured)
        per_scrape = [t["cpu_per_scrape_s"] for t in trials]
        figures[process] = {
            "address": address, "page_bytes": trials[-1]["page_bytes"], "trials": trials,
            "cpu_per_scrape_ms": round(1000 * statistics.median(per_scrape), 3),
            "cpu_per_scrape_ms_range": [round(1000 * min(per_scrape), 3), round(1000 * max(per_scrape), 3)],
            "share_of_a_core_at_interval": round(statistics.median(per_scrape) / args.interval, 6)}
    out = {"interval_s": args.interval, "scrapes_per_trial": args.scrapes, "quiet_s": args.quiet,
           "processes": figures}
    (Path(args.run_dir) / "scrape_cost.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"{'process':<24} {'page (bytes)':>12} {'CPU per scrape (ms)':>22} {'share of a core at ' + format(args.interval, 'g') + ' s':>26}")
    for process, f in figures.items():
        low, high = f["cpu_per_scrape_ms_range"]
        print(f"{process:<24} {f['page_bytes']:>12} {f['cpu_per_scrape_ms']:>9.2f} ({low:.2f}-{high:.2f}) "
              f"{100 * f['share_of_a_core_at_interval']:>25.3f}%")
    return 0


def measure(address: str, scrapes: int, quiet: float) -> dict | None:
    """One trial at `address`: CPU seconds per scrape, the background's taken out; None if it
    stopped answering."""
    before = _cpu(address)
    time.sleep(quiet)
    began, start_cpu = time.monotonic(), _cpu(address)
    if before is None or start_cpu is None:
        return None
    background = (start_cpu - before) / quiet
    size = 0
    for _ in range(scrapes):
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
            size = len(reply.read())
    end_cpu = _cpu(address)
    if end_cpu is None:
        return None
    took = time.monotonic() - began
    return {"cpu_per_scrape_s": (end_cpu - start_cpu - background * took) / (scrapes + 1),
            "background_cpu_share": round(background, 4), "burst_s": round(took, 3), "page_bytes": size}


def _cpu(address: str) -> float | None:
    samples = scrape(address)
    return None if samples is None else sum(select(samples, "process_cpu_seconds_total").values())
