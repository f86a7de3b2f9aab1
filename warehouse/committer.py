"""The warehouse's committer: what the core applied, written to Delta in batches.

One journal append per batch holds the batch's net view delta and each transaction's own delta
(its change log), the version state, and the notifications received but not yet applied
(warehouse.core.batches: what a batch holds and what the sources are told is durable). The core
never waits for Delta: it applies, and the committer takes what accumulated since the last batch.

Batches are spaced by how long a commit takes: the next starts BATCH_SPACING times the previous
commit's duration after it, between MIN_BATCH_SPACING and the settings' `batch_interval`. A
commit costs the JVM about the same whatever it holds, so Delta keeps to a bounded share of the
time: on a quiet warehouse batches follow closely (a fresh Delta view), under load they take
longer and hold more. An idle warehouse's committer sleeps.

A batch made durable goes to the change history (fedmodel.change_history), and reads waiting for
a durable view (`wait_durable`) go on.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter
from contextlib import AbstractContextManager
from typing import Callable

from fedlab.fedio.metrics_endpoint import BucketCounts
from fedlab.fedmodel.change_history import ChangeHistory
from fedlab.fedmodel.errors import first_line
from fedlab.warehouse.core.batches import Batch, BatchLedger
from fedlab.warehouse.store.delta_store import DeltaViewStore

log = logging.getLogger("fedlab.warehouse")
# A commit costs the JVM 20-30 ms of CPU however little it holds, so at 100 txn/s batches 0.1 s
# apart took 1.5 ms of JVM CPU per transaction and 0.25 s apart 1.2 (the whole federation's CPU
# per transaction 12.6-12.7 -> 11.5-11.9 ms), for 20-40 ms more staleness to Delta at the p50
# (167-169 -> 182-213 ms; fedlab bench at 100 txn/s, two trials each, docs/results.md).
BATCH_SPACING = 3.0
MIN_BATCH_SPACING = 0.25


class Committer:
    def __init__(self, store: DeltaViewStore, history: ChangeHistory, batch_interval: float,
                 ledger: Callable[[], AbstractContextManager[BatchLedger]], version_state: Callable[[], dict]):
        """`ledger`: the warehouse's batch ledger, held with the locks that guard it (the core's,
        so that a batch's version state and its ledger are of one moment); `version_state`: the
        core's, which each batch carries."""
        self.store, self.history, self.batch_interval = store, history, batch_interval
        self._ledger, self._version_state = ledger, version_state
        self._lock = threading.Lock()
        self._durable = threading.Condition(self._lock)   # a batch made applied states durable
        self.durable_seq = 0          # every applied state up to this seq is in Delta
        self.failures = 0             # batch commits that failed, and how many of them in a row up to
        self.failing = 0              # now, so that Status shows a commit that keeps failing (each is
        self.last_error = ""          # retried)
        self.commit_seconds = BucketCounts()   # each batch commit that held
        self._due = threading.Event()   # something applied or received since the last batch
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="committer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Waits for a batch being written however long it takes (a loaded machine: tens of
        seconds): one still being written when the last one (or a successor warehouse on the same
        tables) starts would commit the same batch id twice."""
        self._stop.set()
        self._due.set()
        if self._thread.is_alive():
            self._thread.join()

    def note_due(self) -> None:
        """Something for the next batch (once per batch is enough: setting an Event takes its
        lock, and this runs for every applied transaction)."""
        if not self._due.is_set():
            self._due.set()

    def durable_through(self, seq: int) -> None:
        """Every applied state up to `seq` is in Delta already (restored or materialised)."""
        with self._lock:
            self.durable_seq = seq

    def wait_durable(self, seq: int, deadline: float) -> bool:
        """Waits until the applied state `seq` is in Delta; False once `deadline` (time.monotonic()) passed."""
        with self._durable:
            while self.durable_seq < seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._durable.wait(left)
            return True

    def health(self) -> dict:
        """The failures so far, in a row now, and the last one's error, read together."""
        with self._lock:
            return {"commit_failures": self.failures, "commits_failing": self.failing,
                    "last_commit_error": self.last_error}

    def _run(self) -> None:
        """First readies the store's commits (DeltaViewStore.prepare_commits), which a restore
        leaves to it: the core runs meanwhile, and only the batches wait. Then commits a batch once
        something is there, spaced as the module says."""
        began = time.monotonic()
        try:
            self.store.prepare_commits()
            # Until then nothing is durable: the e2e's recovery figures (docs/kubernetes.md) read this.
            log.info("Delta journal ready for batches in %.1f s", time.monotonic() - began)
        except Exception:  # Spark's errors are many kinds; the first batch tries again
            log.exception("readying the Delta journal's commits failed; the first batch tries again")
        started, took = float("-inf"), 0.0
        while not self._stop.is_set():   # checked here too: `stop` may come while a batch commits
            self._due.wait()
            spacing = min(self.batch_interval, max(MIN_BATCH_SPACING, BATCH_SPACING * took))
            if self._stop.wait(max(0.0, spacing - (time.monotonic() - started))):
                return
            self._due.clear()
            started = time.monotonic()
            try:
                self.commit_now()
                with self._lock:
                    self.failing = 0
            except Exception as err:  # a failed batch is retried at the next interval
                log.exception("batch commit failed; it will be retried")
                with self._lock:
                    self.failures += 1
                    self.failing += 1
                    self.last_error = f"{type(err).__name__}: {first_line(err)}"
                self._due.set()
            took = time.monotonic() - started

    def commit_now(self) -> None:
        """Writes the ledger's next batch as one Delta commit. A commit that failed may still have
        made its batch durable (Delta committed, the reply was lost): the store, recovered, says
        so, and then the batch counts as committed."""
        with self._ledger() as ledger:
            batch = ledger.take(self._version_state())
        if batch is None:
            return
        net = Counter()
        for a in batch.applied:
            net.update(dict(a.delta))
        began = time.monotonic()
        try:
            self.store.commit_batch(batch.id, batch.applied, list(net.items()), batch.state, batch.notifications,
                                    timed=batch.timed)
        except Exception:
            if self._durable_after_all(batch):
                self._made_durable(batch, durable_time=None)   # when it became durable is not known
            raise
        self.commit_seconds.observe(time.monotonic() - began)
        with self._ledger() as ledger:
            ledger.committed(batch)
        self._made_durable(batch, durable_time=time.time())

    def _durable_after_all(self, batch: Batch) -> bool:
        try:
            last_batch = self.store.load().last_batch
        except Exception:
            log.exception("the store could not recover; the next batch will try again")
            return False
        with self._ledger() as ledger:
            return ledger.failed(batch, last_batch)

    def _made_durable(self, batch: Batch, durable_time: float | None) -> None:
        """The history gets the batch's states (with a history retention, every half of it a base
        too: the durable view, which is the history's after them), and reads waiting for them to be
        durable go on."""
        self.history.append(batch.applied, durable_time=durable_time)
        now = time.time()
        if self.history.rotation_due(now):
            self.history.rotate(self.store.view(), now)
        with self._durable:
            if batch.applied:
                self.durable_seq = max(self.durable_seq, batch.applied[-1].seq)
            self._durable.notify_all()


class Compactor:
    """Compacts the Delta view every `interval` seconds, beside the committer, when batches were
    committed since the last time: reads of the view (base plus the journal's deltas above it) stay
    short, and a reader of the view table alone is at most that far behind. Then writes the
    tables' checkpoints that are due (DeltaViewStore.checkpoint): here, so that no batch commit
    waits for one; and applies the journal's retention (DeltaViewStore.retain)."""

    # How often a crash's stop cancels the compactor's Spark jobs until its thread ends: a step
    # may start a job after the previous cancel (a compaction reads, then writes).
    CANCEL_EVERY = 0.2

    def __init__(self, store: DeltaViewStore, interval: float, last_batch: Callable[[], int]):
        """`last_batch`: the id of the last batch committed."""
        self.store, self.interval, self._last_batch = store, interval, last_batch
        self._stop = threading.Event()
        self._cancelled = False   # by a crash's stop: a step that then fails was cancelled, not broken
        self.jobs = f"compactor-{uuid.uuid4().hex}"   # its Spark jobs' group, which a crash cancels
        self._thread = threading.Thread(target=self._run, name="compactor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, crash: bool = False) -> None:
        """Waits for a compaction under way: its Spark job would outlive the warehouse on a session
        others go on using. A `crash` cancels its jobs instead (a killed process's would die with
        it): a compaction half done commits nothing, and the next warehouse's compactor folds the
        same deltas; the step under way is the last (a commit in progress ends first)."""
        self._cancelled = crash
        self._stop.set()
        while self._thread.is_alive():
            if crash:
                self.store.cancel_jobs(self.jobs)
            self._thread.join(self.CANCEL_EVERY if crash else None)

    def _run(self) -> None:
        compacted = None
        while not self._stop.wait(self.interval):
            batch = self._last_batch()
            if batch == compacted:
                continue
            try:
                self.store.tag_jobs(self.jobs)
                self.store.compact()
                compacted = batch
                for step in (self.store.checkpoint, self.store.retain):
                    if self._stop.is_set():
                        return
                    step()
            except Exception:  # the deltas stay in the journal; the next interval folds them
                if self._cancelled:
                    log.info("compaction stopped by a crash before its commit")
                    return
                log.exception("compacting the Delta view failed; the next interval tries again")
