"""The maintenance core's timings: one set of defaults for every algorithm, in the simulator's
virtual seconds and the live warehouse's real ones alike (a command or a scenario may set others).

The sub-query timeout and the resend timeout are floors: the core stretches them to what it
measures of round trips (fedmodel.round_trip: four smoothed round trips, Karn's rule for what was
sent again). The reorder allowance is how long a gap in a source's DSVs may last before the
warehouse asks for the missing notifications: a reordered one arrives within it, a lost one not.
It is the one timing whose default differs between the worlds, below.
"""

QUERY_TIMEOUT = 1.5       # seconds: a sub-query unanswered this long (at least) is sent again
RESEND_TIMEOUT = 0.25     # seconds: a gap already asked for is asked for again after this long (at least)
# Seconds a gap may last before it is asked for: none in the core, which asks at the first timer
# that sees a gap, as Sze-Ling's section 5.2 does (the simulator's steps take no time, and the
# papers' examples replay step for step); a live warehouse waits NETWORK_REORDER_ALLOWANCE first,
# since real channels reorder and asking for a reordered notification costs a resend and a copy.
REORDER_ALLOWANCE = 0.0
NETWORK_REORDER_ALLOWANCE = 0.1
RECOMPUTE_PERIOD = 5.0    # seconds between the rounds of periodic recomputation (warehouse.core.baselines)
