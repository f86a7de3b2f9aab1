"""What a warehouse's dispatcher to one source sends of what its core queued: the two rules that
keep what was asked already from going again (warehouse.dispatcher), in one object without
threads or I/O. The live dispatcher keeps it under its lock; the timed simulator
(simulation.timed) drives it on its clock, so that no protocol rule lives in one world only.

1. A sub-query goes unless a copy of it is in a batch still owed replies, or a recent reply
   answered it (warehouse.answered_recently): a slow answer is not a lost one. One that its
   batch's replies came back without was lost: it goes again at once, once (as TCP's fast
   retransmit does for a segment the acknowledgements show missing), unless another copy's
   reply answered it meanwhile; if that copy's answer is lost too, the core's timer sends the
   next.
2. A resend request goes narrowed to the DSVs that have still not arrived, one request per span,
   and not at all when every one has: it waits behind the Query in flight, and what it asks for
   often arrives meanwhile (under pgbench, 657 of 802 asked only for those).

>>> rules = DispatchRules()
>>> rules.subqueries_to_send(["q1", "q2", "q1"])
['q1', 'q2']
>>> rules.subqueries_to_send(["q1"])                     # its first copy is still on its way
[]
>>> rules.replied({"q1"})
>>> rules.round_trip_over(["q1", "q2"], answered={"q1"})  # q2's answer was lost: again, once
['q2']
>>> rules.subqueries_to_send(["q2", "q1"])               # q1 was answered
['q2']
>>> rules.round_trip_over(["q2"], answered=set())        # lost again: left to the core's timer
[]
>>> rules.subqueries_to_send(["q3"])
['q3']
>>> rules.replied({"q3"})                                # a message outside its batch's replies
>>> rules.round_trip_over(["q3"], answered=set())        # answered meanwhile: nothing to send
[]
>>> missing = {(3, 5): (4, 5), (4, 5): (4, 5), (6, 6): None}
>>> rules.resends_to_send([(3, 5), (4, 5), (6, 6)], lambda first, last: missing[(first, last)])
[(4, 5), None, None]
>>> rules.withheld, rules.withheld_resends, rules.resent_lost
(2, 2, 1)
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from fedlab.warehouse.answered_recently import AnsweredRecently

Span = tuple[int, "int | None"]   # (from DSV, through DSV; None: the newest)


class DispatchRules:
    def __init__(self):
        self._answered = AnsweredRecently()
        self._streaming: set[str] = set()   # sub-query ids of batches owed replies
        self._resent: set[str] = set()      # lost answers asked again, unanswered
        self.withheld = 0                   # copies of sub-queries answered or on their way, not sent
        self.withheld_resends = 0           # resend requests for what arrived meanwhile
        self.resent_lost = 0                # sub-queries whose reply lacked their answer, sent again

    def subqueries_to_send(self, queued: Iterable[str]) -> list[str]:
        """Of the queued sub-query ids (a copy queued twice counts once), those that go now, in
        their order; they are on their way until `round_trip_over`."""
        unique = list(dict.fromkeys(queued))
        going = [sid for sid in unique if not self._answered.answered(sid) and sid not in self._streaming]
        self._streaming.update(going)
        self.withheld += len(unique) - len(going)
        return going

    def resends_to_send(self, requests: Sequence[Span], missing: Callable[[int, int | None], Span | None]) -> list[Span | None]:
        """For each resend request's span, in order, what it asks for: narrowed to what
        `missing(from, through)` says has still not arrived, or None, to stay home (it all has,
        or an earlier request asks for that span)."""
        asked: list[Span | None] = []
        for first, last in requests:
            span = missing(first, last)
            asked.append(span if span not in asked else None)
        self.withheld_resends += asked.count(None)
        return asked

    def replied(self, answered: set[str]) -> None:
        """A reply brought the answers of these sub-query ids."""
        self._answered.replied(answered)

    def round_trip_over(self, subqueries: Sequence[str], answered: set[str] | None) -> list[str]:
        """A batch's round trip has ended, its replies having answered `answered` of its
        `subqueries` (None: it failed before any reply, and the core's timer retries them).
        Returns those to send again now: lost, not lost once already, and not answered by
        another copy's reply meanwhile."""
        self._streaming.difference_update(subqueries)
        if answered is None:
            return []
        self._resent -= answered
        lost = [sid for sid in subqueries
                if sid not in answered and sid not in self._resent and not self._answered.answered(sid)]
        self._resent.update(lost)
        self.resent_lost += len(lost)
        return lost
