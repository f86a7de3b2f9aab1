"""Each source's messages processed in the order the source sent them, for the algorithms that
assume FIFO channels (the Strobe family: Zhuge et al. 1996, section 3.3).

The paper assumes that two messages from one source reach the warehouse in the order they were
sent, and adds that "the crucial aspect is not that the messages arrive in order, but that they
are processed in order": with a sequence number on every message, the warehouse can wait for a
missing one before processing later ones. The live warehouse's messages from a source travel two
ways (notifications pushed by the source's sender, answers in the reply to a Query RPC), so an
answer can overtake the notification of an update it already reflects, and a notification can
overtake an answer read before its update. Our DSVs are the sequence numbers: the source sent
notification d, then every answer it read at state d, then notification d + 1. `FifoOrder`
restores that order per source:
- an answer read at DSV d waits until notification d has been handed on;
- notification d + 1 waits for notification d, and while a Query RPC to its source is in flight
  (the answer inside may have been read before d + 1 committed);
- a notification already handed on (the source's outbox resends what the warehouse has not yet
  acknowledged) is dropped: a FIFO channel without loss delivers each message once.
Nothing here is I/O: the service calls it under its lock and hands the released events to the core.

>>> from fedlab.fedmodel.subquery import Answer
>>> from fedlab.fedmodel.transactions import Notification
>>> from fedlab.warehouse.core.events import AnswerArrived, NotificationArrived
>>> order = FifoOrder({"x": 1})
>>> order.query_sent("x")
>>> order.arrived("x", [NotificationArrived(Notification("x", 2, "t2", ()))])   # the query may precede it
[]
>>> released = order.arrived("x", [AnswerArrived(Answer("q1", "x", 1, ()))], query_done=True)
>>> [type(e).__name__ for e in released]
['AnswerArrived', 'NotificationArrived']
>>> order.arrived("x", [AnswerArrived(Answer("q2", "x", 3, ()))])   # reflects DSV 3, not yet here
[]
"""

from __future__ import annotations

from collections import Counter

from fedlab.warehouse.core.events import AnswerArrived, NotificationArrived


class FifoOrder:
    def __init__(self, processed: dict[str, int]):
        """`processed`: per source, the DSV through which the algorithm has its notifications."""
        self.processed = dict(processed)
        self.querying: Counter = Counter()       # per source: Query RPCs in flight
        self.held: dict[str, list] = {}          # per source: arrived, waiting for an earlier message
        self.repeats = 0                         # notifications dropped as already handed on

    def query_sent(self, source: str) -> None:
        """A Query RPC to `source` is about to leave: its answers may precede later notifications."""
        self.querying[source] += 1

    def arrived(self, source: str, events: list, query_done: bool = False) -> list:
        """Takes notifications and answers of `source` as they arrive (`query_done`: the Query RPC
        they came in, possibly with no answers because it failed, is over); returns the events
        that may now be processed, in the order the source sent them."""
        if query_done:
            self.querying[source] -= 1
        held = self.held.setdefault(source, [])
        for event in events:
            if isinstance(event, NotificationArrived) and self._known(source, event.notification.dsv):
                self.repeats += 1
                continue
            held.append(event)
        held.sort(key=_sent_position)   # stable: answers read at one DSV keep their arrival order
        released = []
        while held and self._next(source, held[0]):
            event = held.pop(0)
            if isinstance(event, NotificationArrived):
                self.processed[source] = event.notification.dsv
            released.append(event)
        return released

    def _known(self, source: str, dsv: int) -> bool:
        return dsv <= self.processed.get(source, 0) or any(
            isinstance(e, NotificationArrived) and e.notification.dsv == dsv for e in self.held.get(source, ()))

    def _next(self, source: str, event) -> bool:
        done = self.processed.get(source, 0)
        if isinstance(event, AnswerArrived):
            return event.answer.dsv <= done
        return event.notification.dsv == done + 1 and not self.querying[source]


def _sent_position(event) -> tuple[int, int]:
    """Where the source sent it: notification d, then the answers it read at state d."""
    if isinstance(event, NotificationArrived):
        return (event.notification.dsv, 0)
    return (event.answer.dsv, 1)
