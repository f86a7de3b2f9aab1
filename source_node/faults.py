"""Seeded fault injection for a source's outgoing messages: drop, duplicate, delay (docs/architecture.md 5).

`FaultInjector.decide(kind)` says what happens to one outgoing message of a kind ("notification"
or "answer") as the list of delays, in seconds, after which copies of it leave: `[]` drops it,
two entries duplicate it, and a positive delay holds a copy back, so that a later message may
overtake it (reordering). Each copy's delay is drawn from an exponential distribution with the
configured mean (0: no delay).

Pure logic: each kind draws from its own random stream seeded from (seed, kind), so the same seed
and rates give the same decisions for one kind however the other kind's messages interleave; it
never sleeps and never reads the clock. The sender and the servicer do the waiting. Rates can
change while a node runs (`configure`), which is how the chaos side steers it.

>>> f = FaultInjector(seed=7, answer_drop=1.0)
>>> f.decide("answer"), f.decide("notification")
([], [0.0])
"""

from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass, replace

from fedlab.fedmodel.errors import ModelError

KINDS = ("notification", "answer")


@dataclass(frozen=True)
class FaultRates:
    drop: float = 0.0        # probability that a message is lost
    duplicate: float = 0.0   # probability that a message that is not lost leaves twice
    delay_mean: float = 0.0  # mean of each copy's exponentially distributed delay, seconds


RATES = tuple(FaultRates.__dataclass_fields__)


class FaultInjector:
    def __init__(self, seed: int | str = 0, **rates: float):
        """`rates` as for `configure`; all zero by default (no faults)."""
        self.seed = seed
        self._rng = {kind: random.Random(f"{seed}:{kind}") for kind in KINDS}
        self._rates = {kind: FaultRates() for kind in KINDS}
        self._lock = threading.Lock()
        self.configure(**rates)

    def configure(self, **rates: float) -> None:
        """Sets rates: `drop=0.1` for every kind, `answer_drop=0.1` for one kind; the rest stay.

        Names are drop, duplicate and delay_mean, optionally prefixed by notification_ or answer_.
        Raises ModelError on an unknown name or an out-of-range value, changing nothing.
        """
        updated = dict(self._rates)
        for name, value in validate_rates(rates).items():
            kinds, rate = _parse_rate_name(name)
            for kind in kinds:
                updated[kind] = replace(updated[kind], **{rate: value})
        with self._lock:
            self._rates = updated

    def rates(self) -> dict[str, dict[str, float]]:
        """The rates in force, per kind."""
        with self._lock:
            return {kind: asdict(r) for kind, r in self._rates.items()}

    def decide(self, kind: str) -> list[float]:
        """The delays of the copies of one outgoing message of `kind`: [] dropped, two: duplicated."""
        if kind not in KINDS:
            raise ModelError(f"faults: unknown message kind {kind!r} (one of {', '.join(KINDS)})")
        with self._lock:
            rates, rng = self._rates[kind], self._rng[kind]
            if rng.random() < rates.drop:
                return []
            copies = 2 if rng.random() < rates.duplicate else 1
            return [rng.expovariate(1.0 / rates.delay_mean) if rates.delay_mean > 0 else 0.0
                    for _ in range(copies)]


def validate_rates(rates: dict) -> dict[str, float]:
    """`rates` checked as `configure` takes them (every place that reads fault rates does it with
    this, or with parse_rates for text, which checks each rate alike): ModelError (one line) on an
    unknown name or an out-of-range value."""
    return {name: _validate_rate(name, _parse_rate_name(name)[1], value) for name, value in rates.items()}


def parse_rates(text: str) -> dict[str, float]:
    """Rates written as text: 'drop=0.05,answer_reorder=0.2' -> {'drop': 0.05, 'answer_delay_mean': 0.2}.

    The one reader of rate text, so that the commands that take it (`fedlab run --chaos`,
    `fedlab chaos-k8s --faults`) take the same names and refuse the same mistakes with the same
    message. Names are `configure`'s, or reorder or delay for delay_mean (what a delay does to
    messages), with or without a kind prefix; values are checked as `validate_rates` checks them.
    ModelError (one line, naming the item as written) on an item that is not name=value, an
    unknown name, or a value that is not a number or is out of range.
    """
    rates = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        written, sep, value = (x.strip() for x in item.partition("="))
        if not sep:
            raise ModelError(f"faults: bad fault rate {item!r}: use name=value, e.g. drop=0.05")
        try:
            value = float(value)
        except ValueError:
            pass   # _validate_rate refuses it, naming the rate
        name = _unalias(written)
        rates[name] = _validate_rate(written, _parse_rate_name(name)[1], value)
    return rates


def is_rate_name(name: str) -> bool:
    """Whether `name` is a rate `configure` takes (drop, answer_delay_mean, ...)."""
    try:
        _parse_rate_name(name)
    except ModelError:
        return False
    return True


def _parse_rate_name(name: str) -> tuple[tuple[str, ...], str]:
    if name in RATES:
        return KINDS, name
    for kind in KINDS:
        if name.startswith(kind + "_") and name[len(kind) + 1:] in RATES:
            return (kind,), name[len(kind) + 1:]
    raise ModelError(f"faults: unknown fault rate {name!r}; use {', '.join(RATES)}, "
                     f"optionally prefixed by {' or '.join(k + '_' for k in KINDS)}")


# Other names for a rate in rate text only (fedlab run --chaos has always said reorder); configure,
# plans and faults.json take RATES' names alone, so that a file says one thing one way.
_ALIASES = {"reorder": "delay_mean", "delay": "delay_mean"}


def _unalias(name: str) -> str:
    """`name` with an alias of the rate text replaced: answer_reorder -> answer_delay_mean."""
    for prefix in ("", *(kind + "_" for kind in KINDS)):
        if name.startswith(prefix) and name[len(prefix):] in _ALIASES:
            return prefix + _ALIASES[name[len(prefix):]]
    return name


def _validate_rate(name: str, rate: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"faults: {name} must be a number, got {value!r}")
    if rate == "delay_mean":
        if not 0 <= value < float("inf"):
            raise ModelError(f"faults: {name} is a mean delay in seconds, finite and not negative, got {value}")
    elif not 0.0 <= value <= 1.0:
        raise ModelError(f"faults: {name} is a probability between 0 and 1, got {value}")
    return float(value)
