"""Where a source sends each subscriber's notifications, kept across the source's restarts.

A subscription itself is durable in the store (source_node.subscriber_outbox: its name, its
relations, its acknowledgement), as a replication slot is; where the subscriber serves is not the
store's business, and a warehouse that subscribed itself (the Subscribe call) tells no operator,
who could tell a restarted source again. So the node keeps each subscriber's address in a small
JSON file beside its message log, `<db stem>.subscribers.json`, and a node opening the same
database sends to each subscriber its store still has at the address it last subscribed with
(after a crash, a Ray actor's restart, or a new actor when the Ray cluster restarted). The
default subscriber is not kept here: its operator names it at every start (`--warehouse`).

>>> import tempfile, pathlib
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> kept = SubscriberAddresses(folder / "ds1.subscribers.json")
>>> kept.remember("w2", "10.0.0.7:50052"); kept.remember("w3", None); kept.forget("w3")
>>> SubscriberAddresses(folder / "ds1.subscribers.json").addresses
{'w2': '10.0.0.7:50052'}
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from fedlab.fedmodel.message_log import SOURCE_LOG_SUFFIX


def beside_message_log(message_log: Path | None) -> Path | None:
    """The file beside a source's message log (fedmodel.message_log.source_log_path); None without one."""
    if message_log is None:
        return None
    name = message_log.name.removesuffix(SOURCE_LOG_SUFFIX)
    return message_log.with_name(f"{name}.subscribers.json")


class SubscriberAddresses:
    def __init__(self, path: Path | None):
        """`path`: the file (None: kept in memory only, as for an in-memory database)."""
        self.path = path
        self._lock = threading.Lock()   # subscriptions come from the server's threads and the node's owner
        self.addresses: dict[str, str | None] = (json.loads(path.read_text())
                                                 if path is not None and path.exists() else {})

    def remember(self, name: str, address: str | None) -> None:
        with self._lock:
            self.addresses[name] = address
            self._save()

    def forget(self, name: str) -> None:
        with self._lock:
            if name in self.addresses:
                del self.addresses[name]
                self._save()

    def _save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.addresses))
        os.replace(tmp, self.path)   # a reader never sees half a file
