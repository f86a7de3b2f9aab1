"""The warehouse's version numbers (Sze-Ling section 3, items 3, 4 and 6).

- highest processing version number, per relation: the BRV of the latest update sent for
  incremental computation; it only grows, because a source's transactions start in DSV order.
- initial version numbers of an update: a copy of the highest processing version numbers taken
  when the update is sent for incremental computation.
- refreshed version number, per relation: the BRV the view reflects, set to the initial version
  numbers of each update as its result is applied.
Per source, the DSV of the latest transaction started and of the latest applied complete the
picture: together they are the version vectors of the view states.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class VersionState:
    highest_processing: dict[str, int]
    refreshed: dict[str, int]
    started_dsv: dict[str, int]
    applied_dsv: dict[str, int]

    @staticmethod
    def initial(brv: dict[str, int], dsv: dict[str, int]) -> "VersionState":
        return VersionState(dict(brv), dict(brv), dict(dsv), dict(dsv))

    def start(self, relation: str, brv: int) -> dict[str, int]:
        """Sends an update of `relation` (now at `brv`) for computation: returns its initial versions."""
        self.highest_processing[relation] = brv
        return dict(self.highest_processing)

    def to_dict(self) -> dict:
        return {"highest_processing": self.highest_processing, "refreshed": self.refreshed,
                "started_dsv": self.started_dsv, "applied_dsv": self.applied_dsv}

    @staticmethod
    def from_dict(d: dict) -> "VersionState":
        return VersionState(dict(d["highest_processing"]), dict(d["refreshed"]),
                            dict(d["started_dsv"]), dict(d["applied_dsv"]))
