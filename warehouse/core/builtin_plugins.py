"""The built-in maintenance algorithms, each a plug-in (warehouse.core.registry) that fedlab's
pyproject.toml registers in the `fedlab.algorithms` entry-point group, as any other package would.

- `sze-ling`: Sze & Ling 2000, complete: version-number compensation, DSV ordering with resend
  of lost notifications, partial self-maintenance, key-based refresh, join-graph access.
- `conventional`: incremental maintenance with no compensation ([BLT86], the Strobe paper's
  Example 1): updates processed and applied in arrival order; where the view holds the key, a
  deletion deletes view rows by key without a query (Example 1, step 3: "since the current view
  is empty, no action is taken for this deletion"). The reference for what goes wrong.
- `lazy`: Zhou & Larson 2007 over Sze-Ling's machinery: transactions wait, and several (across
  sources) are combined and condensed into one task when the warehouse is idle, when enough
  wait or the oldest has waited long enough, or when a query reads the view
  (warehouse.core.sze_ling.deferral). Strongly consistent: the skipped states are never shown.
- `versioned`: Sze-Ling's algorithm with sources that answer as of a version (Vinh 2020,
  formula 12; fedmodel.as_of): every sub-query asks for its relations at exactly its task's
  initial versions, so no answer needs compensating; a source whose recent changes no longer
  reach back that far (it restarted) answers at its current state and is compensated as usual.
  All four are configurations of the one maintenance core (warehouse.core.sze_ling.maintenance).
- `strobe`, `t-strobe`, `g-strobe` (warehouse.core.baselines.strobe) and `c-strobe`
  (warehouse.core.baselines.c_strobe): Zhuge, Garcia-Molina & Wiener 1996, on the view widened with every
  relation's key (warehouse.core.baselines.keyed_view), scan access by default.
- `recompute`: periodic recomputation from whole-relation answers
  (warehouse.core.baselines.periodic_recompute), every `period` of time.
- `salem`: Salem, Beyer, Lindsay & Cochrane 2000: Propagate's asynchronous steps
  (ComputeDelta's forward queries and recursive compensation) into a timestamped view delta,
  applied one commit at a time or, with `apply="on-demand"`, rolled to a point in time when asked
  (warehouse.core.salem).
Any incremental one can be paired with another access path (`join-graph` or `scan`), so that a
run can separate the effect of compensation from that of the access path. The levels they claim
are their papers' (test_strobe.py and the property tests pin them under the papers' assumptions).
"""

from __future__ import annotations

from dataclasses import replace

from fedlab.warehouse.core.baselines.c_strobe import CStrobe
from fedlab.warehouse.core.baselines.periodic_recompute import PeriodicRecompute
from fedlab.warehouse.core.baselines.strobe import GStrobe, Strobe, TStrobe
from fedlab.warehouse.core.registry import Assumptions, Plugin, Settings
from fedlab.warehouse.core.salem.propagate import Salem, SalemOptions
from fedlab.warehouse.core.sze_ling.deferral import Deferral
from fedlab.warehouse.core.sze_ling.maintenance import Options, SzeLingMaintenance

SZE_LING_PAPER = "Sze & Ling 2000, view maintenance with version numbers"
STROBE_PAPER = "Zhuge, Garcia-Molina & Wiener 1996, the Strobe algorithms"


def _sze_ling(options: Options):
    """A configuration of Sze-Ling maintenance (warehouse.core.sze_ling.maintenance)."""
    def factory(view, rows, brv, dsv, settings: Settings) -> SzeLingMaintenance:
        chosen = replace(options, access=settings.access, **settings.timings())
        if settings.deferral is not None and chosen.deferral is not None:
            chosen = replace(chosen, deferral=settings.deferral)
        return SzeLingMaintenance(view, rows, brv, dsv, chosen, settings.force_queries)
    return factory


def _strobe(family):
    def factory(view, rows, brv, dsv, settings: Settings):
        return family(view, rows, brv, dsv, settings.access, global_transactions=settings.global_transactions,
                      **settings.timings("query_timeout"))
    return factory


def _recompute(view, rows, brv, dsv, settings: Settings) -> PeriodicRecompute:
    return PeriodicRecompute(view, rows, brv, dsv, **({"period": settings.period} if settings.period else {}))


def _salem(view, rows, brv, dsv, settings: Settings) -> Salem:
    return Salem(view, rows, brv, dsv, replace(settings.salem or SalemOptions(), **settings.timings()))


# The Strobe papers assume each source's messages are processed in the order it sent them
# (section 3.3) and none is lost; an adapter whose messages may overtake each other restores the
# order for an algorithm that assumes it (warehouse.service).
_STROBE = Assumptions(fifo=True, no_loss=True, keys_in_view=True, restartable=False)

SZE_LING = Plugin("sze-ling", SZE_LING_PAPER, "complete",
                  "version-number compensation, DSV order, lost notifications asked again, join-graph sub-queries",
                  _sze_ling(Options()), outer_joins=True)
CONVENTIONAL = Plugin("conventional", "Blakeley, Larson & Tompa 1986 (Strobe paper, Example 1)", "none",
                      "incremental maintenance without compensation, in arrival order: the reference for what goes wrong",
                      _sze_ling(Options(compensate=False, ordered=False, self_maintenance=False, key_shortcuts=True)),
                      outer_joins=True)
LAZY = Plugin("lazy", "Zhou & Larson 2007, lazy maintenance", "strong",
              "Sze-Ling's machinery, transactions deferred and combined when the warehouse is idle or a query reads",
              _sze_ling(Options(deferral=Deferral())), outer_joins=True)
VERSIONED = Plugin("versioned", "Vinh 2020 (formula 12) over Sze-Ling 2000", "complete",
                   "Sze-Ling with sources that answer as of the task's initial versions",
                   _sze_ling(Options(as_of=True)), outer_joins=True)
STROBE = Plugin("strobe", STROBE_PAPER + ", 5.2", "strong",
                "an action list applied at quiescence; deletions by key, pending sets",
                _strobe(Strobe), replace(_STROBE, single_update=True), "scan")
T_STROBE = Plugin("t-strobe", STROBE_PAPER + ", 5.3", "strong",
                  "Strobe over whole source transactions", _strobe(TStrobe), _STROBE, "scan")
G_STROBE = Plugin("g-strobe", STROBE_PAPER + ", 5.4", "strong",
                  "T-Strobe that also waits for global transactions and sequence gaps", _strobe(GStrobe), _STROBE,
                  "scan")
C_STROBE = Plugin("c-strobe", STROBE_PAPER + ", 6", "complete",
                  "Strobe with compensating queries: a view state per transaction", _strobe(CStrobe), _STROBE, "scan")
RECOMPUTE = Plugin("recompute", "periodic recomputation", "strong",
                   "the view evaluated again from whole relations read at one state per source, every period",
                   _recompute, default_access=None, outer_joins=True)
SALEM = Plugin("salem", "Salem, Beyer, Lindsay & Cochrane 2000, roll a join", "complete",
               "asynchronous propagation into a timestamped view delta, applied in commit order or on demand",
               _salem, point_in_time=True)
