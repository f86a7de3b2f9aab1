"""What the role commands (`fedlab source`, `warehouse`, `load`) share as processes: the TLS flags
(`fedlab check` takes them too), the source engine flag (the live commands that start sources take
it too), the warehouse's settings (warehouse.settings: its Delta batch interval, the recompute
period, lazy maintenance's bounds and salem's propagation and apply, which the commands that start
a warehouse take), the default listening address, and running in the foreground until SIGTERM or
SIGINT.

The chart runs each role as a container's main process, so SIGTERM (pod deletion, `helm
uninstall`) is the normal way to stop, and each role then finishes cleanly (the warehouse commits
its last batch). Listening: inside a pod (POD_IP is set, as the chart sets it) on every
interface, so the pod's Service reaches it; elsewhere on the loopback address only.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time

from fedlab.fedio.channels import TlsFiles
from fedlab.fedmodel.errors import ModelError
from fedlab.source_node.engines import CAPTURES, DEFAULT_ENGINE, ENGINES
from fedlab.warehouse.core.registry import AlgorithmError, Settings, check_view
from fedlab.warehouse.core.salem.propagate import APPLY_MODES, SalemOptions
from fedlab.warehouse.core.sze_ling.deferral import Deferral
from fedlab.warehouse.core.timings import RECOMPUTE_PERIOD, REORDER_ALLOWANCE
from fedlab.warehouse.settings import SettingError, WarehouseSettings

TLS_FLAGS = ("--tls-cert", "--tls-key", "--tls-ca")


class RoleError(Exception):
    """Bad input to a role command: one line, exit status 2."""


def add_tls_arguments(parser) -> None:
    group = parser.add_argument_group("mutual TLS on every gRPC channel (all three flags, or none)")
    group.add_argument("--tls-cert", metavar="FILE", help="this party's certificate (PEM)")
    group.add_argument("--tls-key", metavar="FILE", help="its private key (PEM)")
    group.add_argument("--tls-ca", metavar="FILE", help="the CA that signs every peer's certificate (PEM)")


def port_number(text: str) -> int:
    """A port flag's value: 0 (a free port) to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"takes a port from 0 to 65535, got {text!r}")
    return port


def add_metrics_argument(parser) -> None:
    """--metrics-port: where the role's Prometheus endpoint serves, beside its gRPC port."""
    parser.add_argument("--metrics-port", type=port_number, default=None, metavar="PORT",
                        help="serve Prometheus metrics on this port at /metrics (0: a free one; default: none; "
                             "docs/operations.md)")


def add_source_engine_argument(parser) -> None:
    parser.add_argument("--source-engine", choices=ENGINES, default=DEFAULT_ENGINE,
                        help=f"the sources' database engine (default {DEFAULT_ENGINE}; source_node/engines.py)")
    parser.add_argument("--capture", choices=CAPTURES, default=None,
                        help="with --source-engine postgres: how a source sees its commits, by triggers in each "
                             "writer's transaction or from the WAL through a logical replication slot (default: "
                             "as the database was installed, triggers for a new one; docs/postgres.md)")


def capture_problem(args) -> str | None:
    """What is wrong with --capture beside --source-engine, None when nothing is."""
    if args.capture is not None and args.source_engine != "postgres":
        return f"--capture {args.capture} is for --source-engine postgres"
    return None


def add_reorder_allowance_argument(parser) -> None:
    """--reorder-allowance, which `fedlab bench` takes too (None: the core's default)."""
    parser.add_argument("--reorder-allowance", type=float, default=None, metavar="SECONDS",
                        help="seconds a gap in a source's notifications may last before the warehouse asks for "
                             "the missing ones again, for the algorithms that detect gaps (Sze-Ling and its "
                             "variants, salem); 0 asks at the first timer that sees a gap, as Sze-Ling 5.2 does "
                             f"(default {REORDER_ALLOWANCE:g})")


def retention_seconds(text: str) -> float | None:
    """A retention flag's value: seconds, or `forever` (None: nothing is removed).

    >>> retention_seconds("600"), retention_seconds("forever")
    (600.0, None)
    """
    if text.strip().lower() == "forever":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes seconds or 'forever', got {text!r}") from None


def add_retention_arguments(parser) -> None:
    """--journal-retention and --history-retention, which `fedlab bench` takes too."""
    retained = {
        "--journal-retention": (WarehouseSettings.journal_retention,
                                "seconds the warehouse's Delta journal keeps the batches the view's base has folded, and "
                                "both its tables their replaced files and log, or 'forever'; past it a reader loses the "
                                "change log of those batches and the tables' older versions (time travel), never the view"),
        "--history-retention": (WarehouseSettings.history_retention,
                                "seconds the warehouse's change history and message log keep of what they wrote, and "
                                "the sources their logs and message logs twice as long (their logs also what a warehouse "
                                "has not acknowledged), or 'forever': past it `fedlab check` judges the states from the oldest "
                                "view the history keeps, and the message totals of what was trimmed remain without its "
                                "lines (which notification arrived when)"),
    }
    for flag, (default, help) in retained.items():
        parser.add_argument(flag, type=retention_seconds, default=default, metavar="SECONDS",
                            help=f"{help} (default {'forever' if default is None else f'{default:g}'})")


def add_warehouse_arguments(parser) -> None:
    """The flags of a warehouse's settings (warehouse_settings), with their defaults."""
    parser.add_argument("--batch-interval", type=float, default=WarehouseSettings.batch_interval, metavar="SECONDS",
                        help="the most seconds between Delta batch commits; below it a batch follows the last by "
                             f"three times its commit's duration (default {WarehouseSettings.batch_interval:g})")
    add_reorder_allowance_argument(parser)
    add_retention_arguments(parser)
    parser.add_argument("--recompute-period", type=float, default=RECOMPUTE_PERIOD, metavar="SECONDS",
                        help="seconds between the recompute algorithm's rounds, each a Spark job "
                             f"(default {RECOMPUTE_PERIOD:g})")
    add_deferral_arguments(parser)
    add_salem_arguments(parser)


def warehouse_settings(args, algorithm: str, view) -> WarehouseSettings:
    """The settings the flags of add_warehouse_arguments give a warehouse running `algorithm` over
    `view` (the join of the user's view; `--access` too where the command has it); RoleError naming
    what is wrong, also an algorithm that cannot maintain the view (registry.check_view)."""
    core = Settings(access=getattr(args, "access", None), period=args.recompute_period,
                    reorder_allowance=args.reorder_allowance, deferral=deferral(args),
                    salem=salem_options(args, view.relations))
    try:
        check_view(algorithm, view, core.access)
        return WarehouseSettings(algorithm, core, batch_interval=args.batch_interval,
                                 journal_retention=args.journal_retention, history_retention=args.history_retention)
    except SettingError as err:
        raise RoleError(f"--{err.setting.replace('_', '-')} {err.why}") from None
    except AlgorithmError as err:
        raise RoleError(str(err)) from None


def add_deferral_arguments(parser) -> None:
    d = Deferral()
    group = parser.add_argument_group("the lazy algorithm's bounds (warehouse/core/sze_ling/deferral.py)")
    group.add_argument("--combine-max", type=int, default=d.combine_max, metavar="N",
                       help=f"the most transactions one maintenance job combines; this many waiting start one "
                            f"(default {d.combine_max})")
    group.add_argument("--max-delay", type=float, default=d.max_delay, metavar="SECONDS",
                       help=f"the longest a transaction waits before a job starts (default {d.max_delay:g})")
    group.add_argument("--idle-after", type=float, default=d.idle_after, metavar="SECONDS",
                       help=f"seconds without a notification that count as free cycles (default {d.idle_after:g})")
    group.add_argument("--max-jobs", type=int, default=d.max_jobs, metavar="N",
                       help=f"maintenance jobs in progress at once (default {d.max_jobs}, the paper's)")


def add_salem_arguments(parser) -> None:
    group = parser.add_argument_group("the salem algorithm's propagation and apply (warehouse/core/salem/propagate.py)")
    group.add_argument("--apply", choices=APPLY_MODES, default="continuous",
                       help="continuous: every commit applied once the view delta passes it; on-demand: the view "
                            "moves only when refreshed to a point (fedlab refresh) (default continuous)")
    group.add_argument("--step-commits", type=int, metavar="N",
                       help="Propagate: at most N commits per propagation step (default: all the stable ones)")
    group.add_argument("--intervals", metavar="RELATION=SECONDS,...",
                       help="rolling propagation: each relation's propagation interval, in seconds of commit time")


def salem_options(args, relations) -> SalemOptions:
    """The options the flags give, for a view over `relations`; RoleError naming the flag when one is wrong."""
    try:
        intervals = _intervals(args.intervals, relations) if args.intervals else ()
        return SalemOptions(apply=args.apply, step_commits=args.step_commits, intervals=intervals)
    except ValueError as err:
        raise RoleError(f"--intervals: {err}" if args.intervals else f"--step-commits: {err}") from None


def _intervals(text: str, relations) -> tuple[tuple[str, float], ...]:
    pairs = {}
    for item in text.split(","):
        name, sep, seconds = item.partition("=")
        if not sep:
            raise ValueError(f"{item!r} is not RELATION=SECONDS")
        match = [r for r in relations if r.lower() == name.strip().lower()]
        if not match:
            raise ValueError(f"{name!r} is not a relation of the view ({', '.join(relations)})")
        try:
            pairs[match[0]] = float(seconds)
        except ValueError:
            raise ValueError(f"{seconds!r} is not a number of seconds") from None
    missing = [r for r in relations if r not in pairs]
    if missing:
        raise ValueError(f"no interval for {', '.join(missing)}: rolling propagation needs one per relation")
    return tuple(pairs.items())


def deferral(args) -> Deferral:
    """The bounds the flags give; RoleError naming the flag when one is out of range."""
    try:
        return Deferral(args.combine_max, args.max_delay, args.idle_after, args.max_jobs)
    except ValueError as err:
        flag = str(err).split(" ", 1)[0].replace("_", "-")
        raise RoleError(f"--{flag}{str(err)[len(flag):]}") from None


def tls_files(args) -> TlsFiles | None:
    """The TLS files the flags name, read; None without the flags. RoleError when only some are
    given or a file cannot be read (the message names it)."""
    given = {flag: getattr(args, flag[2:].replace("-", "_"), None) for flag in TLS_FLAGS}
    missing = [flag for flag, value in given.items() if not value]
    if len(missing) == len(TLS_FLAGS):
        return None
    if missing:
        # Half a TLS setup would fall back to plaintext on some channels: refuse it.
        raise RoleError(f"mutual TLS needs all of {', '.join(TLS_FLAGS)}; missing {', '.join(missing)}")
    try:
        return TlsFiles.load(ca=given["--tls-ca"], cert=given["--tls-cert"], key=given["--tls-key"])
    except ModelError as err:
        raise RoleError(str(err)) from None


def configure_logging() -> None:
    """fedlab's own log lines (restores, retries, failed batches) on stderr, with a time stamp."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("fedlab").setLevel(logging.INFO)


def default_host() -> str:
    return "0.0.0.0" if os.environ.get("POD_IP") else "127.0.0.1"


class Foreground:
    """Installs SIGTERM and SIGINT handlers that set `stopping`; `wait` returns once it is set."""

    def __init__(self):
        self.stopping = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._signalled)

    def _signalled(self, signum, frame) -> None:
        self.stopping.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once a signal came; with a timeout, False if none came within it."""
        # Event.wait in short slices: the handler runs in the main thread between them.
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.stopping.is_set():
            left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
            if left <= 0:
                return False
            self.stopping.wait(left)
        return True


def fail(command: str, err: Exception) -> int:
    print(f"fedlab {command}: {err}", file=sys.stderr)
    return 2
