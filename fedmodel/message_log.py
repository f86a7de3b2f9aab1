"""The message-level history of a live run: one JSON line per thing that happened to a
message at the node that saw it.

Each node writes its own file (a source: `<source>.messages.jsonl` beside its database file; the
warehouse: `messages.jsonl` in its history folder), so nothing is shared between processes. A line:

    {"t": 1732600000.123, "node": "sales", "kind": "notification", "event": "sent",
     "peer": "warehouse", "bytes": 812, "rows": 7, "dsv": 42}

- kind: notification, subquery, answer, resend_request (what the message is);
- event: sent (left the node), dropped / duplicated / delayed (the fault injector's decision,
  recorded where it was taken), received (arrived and was decoded);
- bytes: the serialized protobuf size on the wire; rows: the rows it carries;
- anything else names the message: dsv for a notification, id and versions for an answer.

The checker totals these files and `fedlab bench` turns them into cost per transaction
(messages, rows and bytes on the wire). This module is the format: what a line says, where a node
keeps its file, and the totals over lines; fedio.message_log writes and reads the files.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterable

KINDS = ("notification", "subquery", "answer", "resend_request")
EVENTS = ("sent", "dropped", "duplicated", "delayed", "received")
WAREHOUSE_LOG = "messages.jsonl"   # in the warehouse's history folder
SOURCE_LOG_SUFFIX = ".messages.jsonl"   # beside a source's database file, after its stem
WAREHOUSE_NODE = "warehouse"       # the node a warehouse's lines name, whatever its subscriber name


def source_log_path(db_path: str | Path) -> Path | None:
    """Where a source keeps its message log: beside its database file, `<db stem>.messages.jsonl`
    (an in-memory database keeps none)."""
    if str(db_path) == ":memory:":
        return None
    return Path(db_path).with_suffix(SOURCE_LOG_SUFFIX)


def totals(events: Iterable[dict]) -> dict[str, dict[str, int]]:
    """Per kind: how many messages were sent, dropped, duplicated, delayed and received, and the
    rows and bytes of what was sent (the cost on the wire)."""
    out: dict[str, Counter] = {}
    for e in events:
        c = out.setdefault(e["kind"], Counter())
        c[e["event"]] += 1
        if e["event"] == "sent":
            c["rows"] += e.get("rows", 0)
            c["bytes"] += e.get("bytes", 0)
    return {kind: dict(c) for kind, c in sorted(out.items())}


def added(a: dict[str, dict[str, int]], b: dict[str, dict]) -> dict[str, dict[str, int]]:
    """Two sets of `totals` added up, kind by kind (what a log kept and what its retention trimmed).

    >>> added({"answer": {"sent": 2, "bytes": 10}}, {"answer": {"sent": 1}, "subquery": {"sent": 3}})
    {'answer': {'sent': 3, 'bytes': 10}, 'subquery': {'sent': 3}}
    """
    out = {kind: Counter(counts) for kind, counts in a.items()}
    for kind, counts in b.items():
        out.setdefault(kind, Counter()).update(counts)
    return {kind: dict(c) for kind, c in sorted(out.items())}


def concerns(event: dict, subscriber: str) -> bool:
    """Whether a line is about the warehouse subscribed to the sources as `subscriber`: each
    warehouse keeps a log of its own, while a source logs what it exchanges with every subscriber
    in one file, naming the subscriber as the peer.

    >>> concerns({"node": "warehouse", "peer": "ds1"}, "w2"), concerns({"node": "ds1", "peer": "w2"}, "w2")
    (True, True)
    >>> concerns({"node": "ds1", "peer": "warehouse"}, "w2")
    False
    """
    return event["node"] == WAREHOUSE_NODE or event["peer"] == subscriber


# ---- what names a message, in the fields its lines carry ----

def notification_fields(note) -> dict:
    """rows and dsv of a notification (fedmodel.transactions.Notification): every row image it carries."""
    rows = sum(len(c.inserted) + len(c.deleted) + 2 * len(c.modified) for c in note.changes)
    return {"rows": rows, "dsv": note.dsv, "txn_id": note.txn_id}


def subquery_fields(sq) -> dict:
    """rows (the probe's) and the names of a sub-query (fedmodel.subquery.Subquery)."""
    return {"rows": len(sq.probe), "id": sq.id, "relations": list(sq.relation_names)}


def answer_fields(answer) -> dict:
    """rows and the versions an answer (fedmodel.subquery.Answer) was read at: the source's DSV and
    each relation's BRV, the queried version numbers of Sze-Ling section 3."""
    return {"rows": sum(len(r.rows) for r in answer.relations), "id": answer.id, "dsv": answer.dsv,
            "versions": {r.relation: r.brv for r in answer.relations}}
