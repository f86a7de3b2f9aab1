"""One run of a warehouse process, as its sources and its own threads see it.

Every view of one process (warehouse.view_group) shares it, so it is made before the views and
handed to each as it is built: nothing can hold an id that another part of the process no longer
answers by.
- `id` names the process's memory to the sources. A Notify reply carries it beside what reached
  the process (received_dsv), and so does a resend request. A source trusts those marks only from
  the incarnation that made them, since a restarted process has lost what it held and not
  committed.
- `running` is cleared while the process is held (ViewGroup.pause, as SIGSTOP holds a process):
  its gRPC calls and every view's core wait on it.
"""

from __future__ import annotations

import threading
import uuid


class Incarnation:
    def __init__(self):
        self.id = uuid.uuid4().hex
        self.running = threading.Event()
        self.running.set()
