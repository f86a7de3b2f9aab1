"""PostgreSQL's logical replication messages (the `pgoutput` plugin, protocol version 1), decoded.

What a source with `capture: logical` (source_node.logical_capture) reads from its replication
slot. The format is PostgreSQL's documented one ("Logical Replication Message Formats", chapter
55.9 of the PostgreSQL 15 manual): one message per payload, its first byte its kind. Decoded here
without I/O, so that it is tested on bytes alone:

    B  Begin        final LSN, commit time, xid
    R  Relation     the relation's id, schema, name and columns (sent before its first change)
    I  Insert       the new row
    U  Update       the old row ('O': REPLICA IDENTITY FULL, which every captured relation has),
                    then the new one
    D  Delete       the old row
    T  Truncate     the relations truncated (the rows are not in the WAL)
    M  Message      a logical decoding message (pg_logical_emit_message): transactional within
                    a transaction, or alone
    C  Commit       the commit's LSN and the end of its record
Kinds the capture has no use for (Origin, Type) decode to None.

A row's values are PostgreSQL's text output (what `col::text` gives), None for NULL, and
UNCHANGED for a TOASTed value an UPDATE did not change.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

UNCHANGED = object()   # 'u': a TOASTed value the update left as it was (its old image holds it)
EPOCH_2000 = 946_684_800   # PostgreSQL's timestamps count microseconds from 2000-01-01 UTC


@dataclass(frozen=True)
class Begin:
    final_lsn: int
    commit_time: float     # seconds since the Unix epoch
    xid: int


@dataclass(frozen=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_time: float


@dataclass(frozen=True)
class RelationInfo:
    relid: int
    schema: str
    name: str
    columns: tuple[str, ...]
    types: tuple[int, ...]   # each column's type oid


@dataclass(frozen=True)
class RowChange:
    """An insert ('I', `new` only), update ('U') or delete ('D', `old` only) of one row."""
    kind: str
    relid: int
    old: tuple | None
    new: tuple | None


@dataclass(frozen=True)
class Truncate:
    relids: tuple[int, ...]


@dataclass(frozen=True)
class Message:
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def string(self) -> str:
        end = self.data.index(b"\0", self.at)
        text = self.data[self.at:end].decode()
        self.at = end + 1
        return text

    def raw(self, n: int) -> bytes:
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def tuple(self) -> tuple:
        values = []
        for _ in range(self.take("!h")):
            kind = self.raw(1)
            if kind == b"n":
                values.append(None)
            elif kind == b"u":
                values.append(UNCHANGED)
            elif kind in (b"t", b"b"):
                data = self.raw(self.take("!i"))
                values.append(data.decode() if kind == b"t" else data)
            else:
                raise ValueError(f"pgoutput: unknown column kind {kind!r}")
        return tuple(values)


def _time(micros: int) -> float:
    return EPOCH_2000 + micros / 1e6


def decode(payload: bytes):
    """One pgoutput message as one of the classes above; None for a kind the capture ignores.
    ValueError for a payload that is not a message of protocol version 1."""
    r = _Reader(payload)
    kind = r.raw(1)
    if kind == b"B":
        final_lsn, micros, xid = r.take("!qqI")
        return Begin(final_lsn, _time(micros), xid)
    if kind == b"C":
        _flags, commit_lsn, end_lsn, micros = r.take("!bqqq")
        return Commit(commit_lsn, end_lsn, _time(micros))
    if kind == b"R":
        relid = r.take("!I")
        schema, name = r.string(), r.string()
        _identity, count = r.take("!bh")
        columns, types = [], []
        for _ in range(count):
            r.take("!b")
            columns.append(r.string())
            types.append(r.take("!Ii")[0])
        return RelationInfo(relid, schema, name, tuple(columns), tuple(types))
    if kind == b"I":
        relid = r.take("!I")
        r.raw(1)   # 'N'
        return RowChange("I", relid, None, r.tuple())
    if kind == b"U":
        relid = r.take("!I")
        old = None
        if (mark := r.raw(1)) in (b"K", b"O"):
            old = r.tuple()
            mark = r.raw(1)
        if mark != b"N":
            raise ValueError(f"pgoutput: an update without its new row ({mark!r})")
        return RowChange("U", relid, old, r.tuple())
    if kind == b"D":
        relid = r.take("!I")
        r.raw(1)   # 'K' or 'O'
        return RowChange("D", relid, r.tuple(), None)
    if kind == b"T":
        count, _options = r.take("!ib")
        return Truncate(tuple(r.take("!I") for _ in range(count)))
    if kind == b"M":
        flags, lsn = r.take("!bq")
        prefix = r.string()
        return Message(bool(flags & 1), lsn, prefix, r.raw(r.take("!i")))
    if kind in (b"O", b"Y"):
        return None
    raise ValueError(f"pgoutput: unknown message kind {kind!r}")
