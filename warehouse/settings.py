"""A warehouse's settings: one frozen object with one set of defaults, which every command that
starts a warehouse builds (`fedlab run`, `demo`, `bench`, the warehouse role behind the chart's
values) and the tests too. What its maintenance algorithm takes of them is `core`
(warehouse.core.registry.Settings, whose timings default to warehouse.core.timings, as in the
simulator, but for the reorder allowance a network needs); the rest is the adapter's: how often
Delta gets a batch and a compaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import DEFAULT_SUBSCRIBER
from fedlab.warehouse.core.registry import Settings
from fedlab.warehouse.core.timings import REORDER_ALLOWANCE

# Seconds the warehouse's Delta journal keeps what the view's base folded, and both its tables their
# old files and log: far longer than any read of them takes, short enough that a long run's tables
# stay the size of minutes of work (docs/guide.md, "Long runs").
JOURNAL_RETENTION = 600.0


@dataclass(frozen=True)
class WarehouseSettings:
    algorithm: str = "sze-ling"   # a registered name (warehouse.core.registry)
    core: Settings = field(default_factory=Settings)   # the algorithm's: access path, timings, period, options
    # Seconds between Delta batches at most: below it, batches are spaced by how long a commit takes.
    batch_interval: float = 1.0
    compact_interval: float = 60.0   # seconds between compactions of the Delta view's base
    # Seconds the Delta journal keeps what the view's base folded, and both tables their old files
    # and log (warehouse.store.delta_store.DeltaViewStore.retain); None keeps them for ever.
    journal_retention: float | None = JOURNAL_RETENTION
    # Seconds the change history and the message log keep of what they wrote (fedmodel.change_history,
    # fedio.message_log): what `fedlab check` judges and the bench figures from. None keeps it all.
    history_retention: float | None = None
    tick: float = 0.1                # seconds between timer events when the algorithm names no time
    # The stable name it subscribes to the sources by (source_node.subscriptions): its own
    # acknowledgements, resends and retention there; several warehouses need one each.
    subscriber: str = DEFAULT_SUBSCRIBER

    @property
    def reorder_allowance(self) -> float:
        """Seconds a gap in a source's notifications may last before the algorithm asks for it
        again: the one set, else the core's (warehouse.core.timings)."""
        allowance = self.core.reorder_allowance
        return REORDER_ALLOWANCE if allowance is None else allowance

    def algorithm_settings(self, access: str | None) -> Settings:
        """What the algorithm is given: `core` with the access path its plug-in settles on."""
        return replace(self.core, access=access)

    def __post_init__(self):
        seconds = {"batch_interval": self.batch_interval, "compact_interval": self.compact_interval,
                   "tick": self.tick, "recompute_period": self.core.period, "journal_retention": self.journal_retention,
                   "history_retention": self.history_retention}
        for name, value in seconds.items():
            if value is not None and not 0 < value < math.inf:   # NaN fails both
                raise SettingError(name, f"must be a positive number of seconds, got {value!r}")
        allowance = self.core.reorder_allowance
        if allowance is not None and not 0 <= allowance < math.inf:   # NaN fails both
            raise SettingError("reorder_allowance", f"must be a finite number of seconds >= 0, got {allowance!r}")
        if not self.subscriber:
            raise SettingError("subscriber", "name must not be empty")


class SettingError(ModelError):
    """A setting out of range: `setting` names it (a command names its flag), the message says why."""

    def __init__(self, setting: str, why: str):
        super().__init__(f"the warehouse's {setting.replace('_', ' ')} {why}")
        self.setting, self.why = setting, why
