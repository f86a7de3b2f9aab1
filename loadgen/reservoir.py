"""A uniform sample of at most `size` of the values offered, however many are (reservoir sampling,
Vitter's algorithm R): the timings a long run's parts are offered a thousand times a second keep
their percentiles in bounded memory. Until it is full it holds every value, in the order offered.

>>> r = Reservoir(3)
>>> r.extend([5.0, 1.0])
>>> r.values, r.seen
([5.0, 1.0], 2)
>>> r.extend(range(100)); len(r.values), r.seen
(3, 102)
"""

from __future__ import annotations

import random
from typing import Iterable

SIZE = 100_000   # an hour of Delta batch commits, at four a second, is 14,400


class Reservoir:
    def __init__(self, size: int = SIZE, seed: int = 0):
        self.size = size
        self.values: list[float] = []
        self.seen = 0
        self._random = random.Random(seed)

    def extend(self, values: Iterable[float]) -> None:
        for value in values:
            self.seen += 1
            if len(self.values) < self.size:
                self.values.append(value)
            elif (at := self._random.randrange(self.seen)) < self.size:
                self.values[at] = value
