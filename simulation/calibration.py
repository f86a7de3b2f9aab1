"""What the timed simulator takes from a measured machine: CPU seconds per operation of each
process, the loopback's latency, and the cores and idle floor of the machine it was measured on.

A calibration file is JSON (`fedlab calibrate BENCH_DIR` writes one from a `fedlab bench
--profile` run: simulation.calibrate); the timed mode reads it (`--calibration FILE`), and
without one takes the default that ships with the project (calibration/default.json, whose
`about` names what it was measured on: this machine, fitted to a profiled bench, docs/results.md
"The timed simulator"). Every process of the model is a server whose
jobs cost these CPU seconds (simulation.machines): a fixed part per call and a part per
item it carries, so that batching at a high rate costs less per transaction, as it does live.

    {"cpu": {"source.commit_txn": 0.00031, ...}, "loopback": {"p50": 0.0004, "p99": 0.004},
     "machine": {"cores": 2, "floor": 0.05, "source_floor": 0.011, "lock_share": 0.5},
     "about": {"machine": ..., "commit": ..., "bench": ..., "fit": ...}}

A call's cost (`*.call`, one gRPC exchange) is spent partly by gRPC's own threads, outside the
interpreter lock, and partly by Python under it; `lock_share` is the second part's share.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from fedlab.fedmodel.errors import ModelError

# Every operation's CPU cost, by process: what one call or one item of it costs (seconds).
OPERATIONS = {
    "driver.txn": "the load driver draws and encodes one transaction",
    "driver.call": "the load driver sends one group of transactions to a source (a Commits exchange)",
    "source.commit_call": "a source commits one group (its round trip's share at the source)",
    "source.commit_txn": "a source commits one transaction of a group and logs its notification",
    "source.commit_row": "a source writes one row image of a transaction (its notification carries it)",
    "source.send_call": "a source's sender sends one batch of notifications (a Notify exchange)",
    "source.send_note": "a source's sender encodes one notification",
    "source.query_call": "a source reads one batch of sub-queries (a Query exchange)",
    "source.subquery": "a source answers one sub-query",
    "source.answer_row": "a source reads and encodes one row of an answer",
    "source.resend": "a source serves one resend request",
    "warehouse.notify_call": "the warehouse takes one batch of notifications (a Notify exchange)",
    "warehouse.notify_note": "the warehouse decodes one notification",
    "warehouse.core_turn": "the warehouse's core thread wakes and takes everything queued for it",
    "warehouse.event": "the warehouse's core handles one event (a notification, an answer, a timer)",
    "warehouse.event_row": "the core handles one row of an answer or notification",
    "warehouse.dispatch_call": "the warehouse sends one batch of sub-queries to a source",
    "warehouse.subquery": "the warehouse encodes one sub-query",
    "warehouse.answer": "the warehouse decodes one answer",
    "warehouse.batch": "the warehouse's Python prepares one Delta batch",
    "warehouse.batch_state": "the warehouse's Python adds one applied state to a Delta batch",
    "jvm.batch": "the Spark JVM commits one Delta batch",
    "jvm.batch_state": "the Spark JVM writes one applied state of a Delta batch",
    "jvm.compact": "the Spark JVM folds the journal into the Delta view and checkpoints (every compact interval)",
}
PROCESSES = ("driver", "source", "warehouse", "jvm")


@dataclass(frozen=True)
class Latency:
    """A one-way latency, lognormal between its median and its 99th percentile (seconds)."""

    p50: float
    p99: float

    def __post_init__(self):
        if not 0 < self.p50 <= self.p99:
            raise ModelError(f"a latency needs 0 < p50 <= p99, got p50 {self.p50} and p99 {self.p99}")

    @property
    def sigma(self) -> float:
        return math.log(self.p99 / self.p50) / 2.326   # the normal's 99th percentile

    def draw(self, rng) -> float:
        return self.p50 * math.exp(self.sigma * rng.gauss(0.0, 1.0)) if self.sigma else self.p50


@dataclass(frozen=True)
class Calibration:
    cpu: dict                   # operation (OPERATIONS) -> CPU seconds
    loopback: Latency           # a message between two processes of one machine
    cores: float                # the measured machine's cores
    floor: float                # cores its idle federation used, less its sources' (Ray, the warehouse's loops)
    source_floor: float         # cores each idle source used
    lock_share: float = 0.5     # of a call's cost, the share spent under the interpreter lock
    about: dict = field(default_factory=dict)   # where and when it was measured: machine, commit, bench, fit

    def __post_init__(self):
        missing = sorted(set(OPERATIONS) - set(self.cpu))
        unknown = sorted(set(self.cpu) - set(OPERATIONS))
        if missing or unknown:
            raise ModelError(f"calibration: {'missing ' + ', '.join(missing) if missing else ''}"
                             f"{'; ' if missing and unknown else ''}{'unknown ' + ', '.join(unknown) if unknown else ''}"
                             " operation(s)")
        bad = [name for name, seconds in self.cpu.items() if not (isinstance(seconds, (int, float)) and seconds >= 0)]
        if bad:
            raise ModelError(f"calibration: {bad[0]} must be a number of CPU seconds >= 0, got {self.cpu[bad[0]]!r}")
        if not self.cores > 0 or not 0 <= self.floor < self.cores or not 0 <= self.source_floor < 1:
            raise ModelError(f"calibration: cores {self.cores}, floor {self.floor} and source floor "
                             f"{self.source_floor} must be cores > floor >= 0 and 0 <= source floor < 1")
        if not 0 <= self.lock_share <= 1:
            raise ModelError(f"calibration: lock_share is a share between 0 and 1, got {self.lock_share}")

    def __getitem__(self, operation: str) -> float:
        return self.cpu[operation]

    def to_dict(self) -> dict:
        return {"about": self.about, "machine": {"cores": self.cores, "floor": self.floor, "source_floor": self.source_floor,
                                                 "lock_share": self.lock_share},
                "loopback": {"p50": self.loopback.p50, "p99": self.loopback.p99},
                "cpu": dict(sorted(self.cpu.items()))}

    def write(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")


def from_dict(doc: dict, where: str) -> Calibration:
    try:
        machine = doc["machine"]
        return Calibration({k: v for k, v in doc["cpu"].items()}, Latency(**doc["loopback"]),
                           machine["cores"], machine["floor"], machine["source_floor"], machine.get("lock_share", 0.5),
                           doc.get("about", {}))
    except (KeyError, TypeError, AttributeError) as err:
        raise ModelError(f"{where}: not a calibration file (cpu, loopback, machine): {err!r}") from None
    except ModelError as err:
        raise ModelError(f"{where}: {err}") from None


def load(path: str | Path | None = None) -> Calibration:
    """The calibration in `path`, or the default one (None)."""
    if path is None:
        text, where = resources.files("fedlab.simulation").joinpath("calibration/default.json").read_text(), "default calibration"
    else:
        where = str(path)
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise ModelError(f"calibration {path}: {err.strerror}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ModelError(f"{where}: not JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(doc, dict):
        raise ModelError(f"{where}: not a calibration file (a JSON object)")
    return from_dict(doc, where)
