"""Network profiles of the timed simulator: how long a message takes between two processes.

- `loopback`: every process on one machine, as here: each message's one-way latency drawn from
  the calibration's (simulation.calibration: a lognormal between its median and 99th
  percentile, measured from the bench's message logs).
- `lan`: one data centre, round trips of 0.2-0.5 ms and 10 Gbit/s links.
- `wan`: the sources spread over a continent or several, round trips of 20-200 ms: each source
  draws its own round trip to the warehouse from the run's seed (log-uniformly between the two),
  so that some are near and some far; 100 Mbit/s links.

Over a LAN or a WAN each message also takes its size over the link's bandwidth, and a few percent
of jitter around its source's latency. A transaction's client is local to its source (the load
stands for a source's own applications): the load's messages take the loopback's latency in
every profile. Lost messages are not the network's doing here: the sources' fault injectors
drop notifications and answers, as live (source_node.faults), and the run drops sub-queries and
resend requests at the same rate (simulation.timed).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from fedlab.fedmodel.errors import ModelError
from fedlab.simulation.calibration import Latency


@dataclass(frozen=True)
class Profile:
    name: str
    round_trip: tuple[float, float] | None   # seconds, each source's drawn between them; None: the loopback's
    bandwidth: float                          # bytes per second on a link (inf: the loopback's copies)
    jitter: float = 0.05                      # the lognormal sigma around a source's latency
    description: str = ""


PROFILES = {p.name: p for p in (
    Profile("loopback", None, math.inf, 0.0, "every process on one machine, as calibrated"),
    Profile("lan", (0.0002, 0.0005), 10e9 / 8, 0.1, "one data centre: round trips of 0.2-0.5 ms, 10 Gbit/s"),
    Profile("wan", (0.020, 0.200), 100e6 / 8, 0.05, "sources far apart: round trips of 20-200 ms, 100 Mbit/s"),
)}


def profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ModelError(f"unknown network profile {name!r} (one of {', '.join(PROFILES)})") from None


class Network:
    def __init__(self, chosen: Profile, loopback: Latency, sources, seed: int):
        """`sources`: every source's name; each draws its round trip from `seed`."""
        self.profile = chosen
        self.loopback = loopback
        self.rng = random.Random(f"{seed}:network")
        draw = random.Random(f"{seed}:round trips")
        low, high = chosen.round_trip or (0.0, 0.0)
        self.round_trip = {s: math.exp(draw.uniform(math.log(low), math.log(high))) if chosen.round_trip else None
                           for s in sorted(sources)}

    def to_warehouse(self, source: str, size: int) -> float:
        """One way between `source` and the warehouse, for a message of `size` bytes (seconds)."""
        rtt = self.round_trip.get(source)
        if rtt is None:
            return self.loopback.draw(self.rng)
        jitter = math.exp(self.profile.jitter * self.rng.gauss(0.0, 1.0))
        return rtt / 2 * jitter + size / self.profile.bandwidth

    def local(self) -> float:
        """One way between a source and its local client."""
        return self.loopback.draw(self.rng)
