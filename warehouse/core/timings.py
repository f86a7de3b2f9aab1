"""The maintenance core's timings: one set of defaults for every algorithm, in the simulator's
virtual seconds and the live warehouse's real ones alike (a command or a scenario may set others).

The sub-query timeout and the resend timeout are floors: the core stretches them to what it
measures of round trips (fedmodel.round_trip: four smoothed round trips for sub-queries,
RESEND_ROUND_TRIPS for resends, Karn's rule for what was sent again). The reorder allowance is
how long a gap in a source's DSVs may last before the warehouse asks for the missing
notifications: a reordered one arrives within it, a lost one not.
"""

QUERY_TIMEOUT = 1.5       # seconds: a sub-query unanswered this long (at least) is sent again
RESEND_TIMEOUT = 0.1      # seconds: a gap already asked for is asked for again after this long (at least)
# ... or after this many smoothed round trips of the asks, if that is longer. Not TCP's four: those
# keep retransmissions off a congested path, and a re-ask is one small request and a copy of a
# notification per gap still open, as many as there are losses, with Karn's doubling per round
# still keeping a slow resend path from feeding on itself. Under the bench's chaos (every copy,
# resent ones too, delayed 0.1 s on average and 5% lost) four round trips (0.44 s) were the largest
# part of the p99: 1.5 and a 0.1 s floor took staleness to the core's view at 100 txn/s from a p99
# of 750-895 to 629-692 ms, for 15% more resends (fedlab bench, docs/results-history.md, 2026-12-03).
RESEND_ROUND_TRIPS = 1.5
# Seconds a gap may last before it is asked for: none, in the simulator and on a network alike.
# The core asks at the first timer that sees a gap, as Sze-Ling's section 5.2 does. A source's
# notifications travel on one ordered stream, so without faults a gap is a loss; and under the
# bench's chaos, whose delays have no memory (exponential), a late copy is as far from arriving
# after any wait as before it, so waiting only adds staleness. A live warehouse waited 0.1 s, then
# 0.05; none took the p99 to the core's view at 100 txn/s from 565-580 to 453-492 ms and at 500
# from 751-811 to 620-666, for 15-18% more bytes per transaction, 65% more duplicate copies and no
# more CPU, the ramp's top step the same (fedlab bench, docs/results-history.md, 2026-12-04, evening). A
# network that reorders within a bounded delay is served by an allowance just above it
# (--reorder-allowance).
REORDER_ALLOWANCE = 0.0
RECOMPUTE_PERIOD = 5.0    # seconds between the rounds of periodic recomputation (warehouse.core.baselines)
