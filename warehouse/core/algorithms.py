"""The maintenance algorithms by name, each a configuration of the one engine.

- `sze-ling`: Sze & Ling 2000, complete: version-number compensation, DSV ordering with resend
  of lost notifications, partial self-maintenance, key-based refresh, join-graph access.
- `conventional`: incremental maintenance with no compensation ([BLT86], the Strobe paper's
  Example 1): updates processed and applied in arrival order. The reference for what goes wrong.
Any of them can be paired with another access path (`join-graph` or `scan`).
"""

from __future__ import annotations

from dataclasses import replace

from warehouse.core.engine import MaintenanceEngine, Options
from warehouse.core.planner import ACCESS_PATHS

ALGORITHMS = {
    "sze-ling": Options(),
    "conventional": Options(compensate=False, ordered=False, self_maintenance=False, key_shortcuts=False),
}


def options_for(name: str, access: str | None = None) -> Options:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r} (one of {', '.join(ALGORITHMS)})")
    if access is not None and access not in ACCESS_PATHS:
        raise ValueError(f"unknown access path {access!r} (one of {', '.join(ACCESS_PATHS)})")
    return replace(ALGORITHMS[name], access=access) if access else ALGORITHMS[name]


def create(name: str, view, rows: dict, brv: dict, dsv: dict, access: str | None = None,
           force_queries=(), **timeouts):
    """The algorithm `name` over a view materialised at source states `dsv` / relation versions `brv`."""
    options = replace(options_for(name, access), **timeouts)
    return MaintenanceEngine(view, rows, brv, dsv, options, force_queries)
