"""The highest sustained rate: offered load raised step by step until the backlog grows.

Each step offers one rate, open-loop (loadgen.driver.drive), for a fixed time, and is judged on
its second half only. The first half is a warm-up: a warehouse that keeps up still holds more
transactions in flight at a higher rate (Little's law: the backlog is the rate times the
staleness), so doubling the rate raises the backlog once, by the old rate times the staleness,
and at 2-3 s of staleness that step alone exceeded the allowance below although the backlog then
stayed level. In the judged half a step is sustained when the sources committed what was offered
(achieved >= 90% of the rate: the clients' queues did not grow; the half's seconds include
draining them, less an allowance of a few transactions for a group still in flight when the step
ended, which at low rates would otherwise decide alone) and the warehouse kept up with what they
committed: the backlog (source transactions committed but not yet reflected in the view) grew by
less than a quarter of what the half committed, plus the same allowance, or the whole step left
it no higher than it found it. A rate the warehouse cannot carry grows the backlog all the time,
in both halves. The second way is for a step after a faster one: the warm-up can drain the
backlog the faster rate left below the level this rate holds in flight, and the judged half then
refills it (measured: a 256 step after the 500 txn/s load phase, its backlog 969 -> 134 -> 608). The first step that is not
sustained ends the ramp; the highest sustained rate lies between the last sustained step and it,
and the last sustained step's rate is what is reported (a lower bound).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable

ACHIEVED_SHARE = 0.9
BACKLOG_SHARE = 0.25
BACKLOG_SLACK = 5
WARMUP_SHARE = 0.5      # of each step, before the judged half


@dataclass
class RampStep:
    rate: float
    offered: int
    committed: int
    seconds: float
    applied: int          # source transactions newly reflected in the view during the step
    backlog_start: int
    backlog_end: int
    judged_seconds: float     # the judged half, from the end of the warm-up to the end of the step
    judged_committed: int
    judged_backlog_start: int

    @property
    def achieved(self) -> float:
        return self.committed / self.seconds if self.seconds else 0.0

    @property
    def applied_rate(self) -> float:
        return self.applied / self.seconds if self.seconds else 0.0

    @property
    def sustained(self) -> bool:
        grew = self.backlog_end - self.judged_backlog_start
        return (self.judged_committed >= ACHIEVED_SHARE * self.rate * self.judged_seconds - BACKLOG_SLACK
                and (grew <= BACKLOG_SHARE * self.judged_committed + BACKLOG_SLACK
                     or self.backlog_end <= self.backlog_start))

    def to_dict(self) -> dict:
        return {**asdict(self), "achieved": round(self.achieved, 2), "applied_rate": round(self.applied_rate, 2),
                "sustained": self.sustained}


def rates(start: float, factor: float, maximum: float) -> list[float]:
    """start, start*factor, ... up to maximum.

    >>> rates(10, 2, 100)
    [10.0, 20.0, 40.0, 80.0]
    """
    out, r = [], float(start)
    while r <= maximum + 1e-9:
        out.append(round(r, 3))
        r *= factor
    return out


def backlog(fed) -> tuple[int, int]:
    """(committed, reflected) source transactions summed over sources: DSVs at the sources and in
    the view. Transactions before the run (DSV 1, the initial load) count on both sides alike."""
    committed = fed.source_versions()
    reflected = fed.warehouse.status()["applied_dsv"]
    return sum(committed.values()), sum(min(reflected.get(s, 0), d) for s, d in committed.items())


def ramp(fed, drive: Callable, step_rates: list[float], step_seconds: float,
         on_step: Callable[[int, float, float], None] = lambda i, rate, elapsed: None) -> list[RampStep]:
    """Runs the steps in order until one is not sustained; returns every step run.

    `drive(rate, seconds, progress)` offers the load (loadgen.driver.drive's contract, the
    stream and the clients bound) and returns its DriveResult; the end of the warm-up is taken
    at the first progress report past it."""
    steps = []
    for i, rate in enumerate(step_rates):
        committed0, reflected0 = backlog(fed)
        warmed: list = []   # (elapsed, committed by the driver, backlog) at the end of the warm-up

        def report(elapsed, result):
            if not warmed and WARMUP_SHARE * step_seconds <= elapsed < step_seconds:
                committed, reflected = backlog(fed)
                warmed.append((elapsed, result.committed, committed - reflected))
            on_step(i, rate, elapsed)

        result = drive(rate, step_seconds, report)
        committed1, reflected1 = backlog(fed)
        elapsed, committed, backlog_warm = warmed[0] if warmed else (0.0, 0, committed0 - reflected0)
        step = RampStep(rate, result.offered, result.committed, result.seconds, reflected1 - reflected0,
                        committed0 - reflected0, committed1 - reflected1,
                        result.seconds - elapsed, result.committed - committed, backlog_warm)
        steps.append(step)
        if not step.sustained:
            break
    return steps


def max_sustained(steps: list[RampStep]) -> float | None:
    """The highest rate of a sustained step (None if even the first was not sustained)."""
    held = [s.rate for s in steps if s.sustained]
    return max(held) if held else None


def top_sustained(steps: list[dict]) -> dict | None:
    """The highest sustained step of a recorded ramp (RampStep.to_dict()s; None if none was)."""
    return max((s for s in steps if s.get("sustained")), key=lambda s: s["rate"], default=None)
