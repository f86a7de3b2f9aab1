"""A source's state held in memory: what the deterministic simulator runs its sources on.

The reference for the durable stores (source_node.durable_store: SQLite, DuckDB), with the same
contract: commit (one transaction, or a group with commit_many) with version numbers and a
notification log, subscribers each with their own outbox and acknowledgement
(source_node.subscriptions), atomic sub-query answers, resend from the log, snapshots. Answers follow the reference semantics in fedmodel.subquery.evaluate_semijoins.

A relation's rows are found by their join columns through hash indexes, each built the first time
its columns are asked for and kept with every commit after (`_Indexes`), so that a long simulated
run answers a probe in time of its answer rather than of its relation; the rows come in the order
a scan gives them, so an answer is the same with or without them.
"""

from __future__ import annotations

from typing import Collection, Sequence

from fedlab.fedmodel.as_of import RecentChanges, answered_versions, rebuild
from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.predicates import compile_sql
from fedlab.fedmodel.subquery import Answer, RelationAnswer, Subquery, evaluate_semijoins
from fedlab.fedmodel.transactions import Notification, RelationChange, TransactionRequest
from fedlab.source_node.commit import GroupCommit, plan_commit
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER, Subscriptions


class MemoryStore(GroupCommit):
    def __init__(self, catalog: Catalog, source: str, initial: dict[str, list[tuple]] | None = None,
                 log_retention: int | None = None):
        self.catalog = catalog
        self.source = source
        self.relations = {r.name: {} for r in catalog.relations_at(source)}
        for name, rows in (initial or {}).items():
            rel = catalog.relation(name)
            for row in rows:
                self.relations[rel.name][rel.key_of(row)] = tuple(row)
        self.indexes = {name: _Indexes(table) for name, table in self.relations.items()}
        self.dsv = 1
        self.brv = {name: 1 for name in self.relations}
        self.log: list[Notification] = []
        self.subscriptions = Subscriptions(self.relations)
        self.subscriptions.add(DEFAULT_SUBSCRIBER, None, acknowledged=1)
        self.log_retention = log_retention
        self.recent = RecentChanges(catalog.relations_at(source), self.dsv, self.brv)

    def commit_many(self, requests: Sequence[TransactionRequest],
                    commit_time: float = 0.0) -> list[Notification | ModelError]:
        """One outcome per request, in order: its notification, or the ModelError that rejected it
        (the others go on)."""
        outcomes: list[Notification | ModelError] = []
        for request in requests:
            try:
                outcomes.append(self._commit_one(request, commit_time))
            except ModelError as err:
                outcomes.append(err)
        return outcomes

    def _commit_one(self, request: TransactionRequest, commit_time: float) -> Notification:
        planned = plan_commit(self.catalog, self.source, request,
                              lambda rel, key: self.relations[rel].get(key), self._find)
        self.dsv += 1
        changes = []
        for p in planned:
            rel = self.catalog.relation(p.relation)
            table, indexes = self.relations[rel.name], self.indexes[rel.name]
            for row in p.deleted:
                del table[rel.key_of(row)]
                indexes.removed(rel.key_of(row), row)
            for m in p.modified:  # net changes: a modification keeps its key
                table[rel.key_of(m.new)] = m.new
                indexes.removed(rel.key_of(m.old), m.old)
                indexes.added(rel.key_of(m.new), m.new)
            for row in p.inserted:
                table[rel.key_of(row)] = row
                indexes.added(rel.key_of(row), row)
            self.brv[rel.name] += 1
            changes.append(RelationChange(rel.name, self.brv[rel.name], p.inserted, p.deleted, p.modified))
        note = Notification(self.source, self.dsv, request.txn_id, tuple(changes), commit_time)
        self.log.append(note)
        self.subscriptions.committed([note])
        self.recent.record(note)
        if self.log_retention is not None and len(self.log) > self.log_retention:
            self.log = self.log[len(self.log) - self.log_retention:]
            self.subscriptions.truncate_below(self.oldest_available())
        return note

    def _find(self, relation: str, columns: tuple, values: tuple) -> list[tuple]:
        rel = self.catalog.relation(relation)
        pos = tuple(rel.index(c) for c in columns)
        values = tuple(values)
        if None in values:   # the index leaves such values out; a scan finds them
            return [r for r in self.relations[rel.name].values() if tuple(r[i] for i in pos) == values]
        return self.indexes[rel.name].matching(pos, {values})

    def answer(self, sq: Subquery) -> Answer:
        """The semijoin chain at the current state, or as of the versions `sq.as_of` names
        (fedmodel.as_of) while the recent changes reach back to them."""
        nets = self.recent.nets(sq, self.dsv, self.brv)

        def rows_of(name: str) -> list[tuple]:
            rows = list(self.relations[name].values())
            if nets and name in nets:
                return rebuild(rows, nets[name], self.catalog.relation(name).key_of, lambda r: True)
            return rows

        def matching(name: str, positions: tuple[int, ...], wanted: set[tuple]) -> list[tuple] | None:
            return None if nets and name in nets else self.indexes[name].matching(positions, wanted)

        rows = evaluate_semijoins(sq, self.catalog, rows_of, lambda rel, sql: compile_sql(sql, self.catalog.relation(rel)),
                                  matching)
        brv = answered_versions(sq, self.brv, nets)
        return Answer(sq.id, self.source, self.dsv,
                      tuple(RelationAnswer(r, brv[r], tuple(rows[r])) for r in sq.relation_names))

    def notifications_from(self, dsv: int, through: int | None = None,
                           subscriber: str | None = None) -> list[Notification]:
        """The log from `dsv` (through `through`), as `subscriber` sees it (None: whole)."""
        notes = [n for n in self.log if n.dsv >= dsv and (through is None or n.dsv <= through)]
        if subscriber is None:
            return notes
        sub = self.subscriptions.get(subscriber)
        return [sub.sees(n) for n in notes]

    def oldest_available(self) -> int:
        return self.log[0].dsv if self.log else self.dsv + 1

    def subscribe(self, name: str, relations: Sequence[str] | None = None) -> None:
        """Registers the subscriber `name` reading `relations` (None: all): a new one starts
        after the current DSV (its view starts from a snapshot at or after it); one already
        registered keeps its acknowledgement and takes the new relations."""
        acknowledged = self.subscriptions.get(name).acknowledged if name in self.subscriptions else self.dsv
        self.subscriptions.add(name, relations, acknowledged, self.log)

    def unsubscribe(self, name: str) -> None:
        """Removes `name`: what was kept for it alone is released."""
        self.subscriptions.remove(name)
        self._forget_applied()

    def has_subscriber(self, name: str) -> bool:
        return name in self.subscriptions

    def as_seen_by(self, subscriber: str, note: Notification) -> Notification:
        """`note` as `subscriber` receives it (its relations' changes only)."""
        return self.subscriptions.get(subscriber).sees(note)

    def acknowledge(self, dsv: int, subscriber: str = DEFAULT_SUBSCRIBER) -> None:
        self.subscriptions.acknowledge(subscriber, dsv)

    def unacknowledged(self, subscriber: str = DEFAULT_SUBSCRIBER) -> list[Notification]:
        return self.subscriptions.unacknowledged(subscriber)

    def retained_from(self) -> int:
        """The oldest DSV some subscriber still needs (what a durable store keeps in memory)."""
        return self.subscriptions.retained_from(self.dsv)

    def reopen(self) -> None:
        """Forgets what only a process held, as a durable store's process restarting does: the
        recent changes start again from the notifications some subscriber has not acknowledged."""
        self.recent = RecentChanges(self.catalog.relations_at(self.source), self.dsv, self.brv,
                                    [n for n in self.log if n.dsv >= self.retained_from()])

    def applied_through(self, dsv: int, subscriber: str = DEFAULT_SUBSCRIBER) -> None:
        """`subscriber`'s durable view reflects every transaction up to `dsv`: the changes kept
        for answers as of earlier versions go once every subscriber's view reflects them."""
        self.subscriptions.applied(subscriber, dsv)
        self._forget_applied()

    def _forget_applied(self) -> None:
        floor = self.subscriptions.applied_floor()
        self.recent.forget_through(self.dsv if floor is None else floor)

    def snapshot(self, relations: Collection[str] = ()) -> tuple[int, dict[str, tuple[int, list[tuple]]]]:
        return self.dsv, {name: (self.brv[name], list(rows.values())) for name, rows in self.relations.items()
                          if not relations or name in relations}


class _Indexes:
    """Hash indexes over one relation's rows (`table`: key -> row), by the positions of the columns
    they are asked for, each built on first use; and each key's place in the table's order, so
    that what they find comes in the order a scan of the table gives (a dict keeps its keys in
    the order they were first inserted: a modified row keeps its place, a re-inserted one goes last)."""

    def __init__(self, table: dict):
        self.table = table
        self.by_columns: dict[tuple[int, ...], dict[tuple, set]] = {}
        self.place = {key: i for i, key in enumerate(table)}
        self.next_place = len(self.place)

    def matching(self, positions: tuple[int, ...], wanted: set[tuple]) -> list[tuple]:
        """The rows whose values at `positions` are one of `wanted` (none with a NULL there), in table order."""
        index = self.by_columns.get(positions)
        if index is None:
            index = self.by_columns[positions] = {}
            for key, row in self.table.items():
                self._add(index, positions, key, row)
        keys = [k for v in wanted if None not in v for k in index.get(v, ())]
        keys.sort(key=self.place.__getitem__)
        return [self.table[k] for k in keys]

    def added(self, key: tuple, row: tuple) -> None:
        """`row` is stored under `key`: a key new to the table takes the last place."""
        if key not in self.place:
            self.place[key] = self.next_place
            self.next_place += 1
        for positions, index in self.by_columns.items():
            self._add(index, positions, key, row)

    def removed(self, key: tuple, row: tuple) -> None:
        """`row` is no longer stored under `key` (deleted, or the old image of a modification)."""
        if key not in self.table:
            del self.place[key]
        for positions, index in self.by_columns.items():
            value = tuple(row[p] for p in positions)
            keys = index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[value]

    @staticmethod
    def _add(index: dict, positions: tuple[int, ...], key: tuple, row: tuple) -> None:
        value = tuple(row[p] for p in positions)
        if None not in value:
            index.setdefault(value, set()).add(key)
