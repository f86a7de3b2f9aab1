"""The warehouse's evaluator: periodic recomputation's view evaluations as Spark jobs.

Periodic recomputation (and a resynchronisation) asks for its view to be evaluated over the
relations the core gathered (EvaluateView; docs/architecture.md 5: full recomputation is a Spark
job over source snapshots). The job takes seconds, so it runs on this thread and not under the
core's lock, and its rows go back to the core as ViewEvaluated. A failed job is logged and reported
as such (rows None): the core's next round tries again.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from fedlab.fedmodel.catalog import Catalog
from fedlab.fedmodel.terms_sql import maintained_sql
from fedlab.warehouse.core.events import EvaluateView, ViewEvaluated
from fedlab.warehouse.store.materialize import materialize
from fedlab.warehouse.worker import Worker

log = logging.getLogger("fedlab.warehouse")


class Evaluator(Worker):
    def __init__(self, catalog: Catalog, spark: Callable[[], object], done: Callable[[ViewEvaluated], None]):
        """`spark`: the Spark session, once started; `done`: hands a job's outcome to the core."""
        super().__init__("evaluator")
        self.catalog, self._spark, self._done = catalog, spark, done
        self._jobs: list[EvaluateView] = []

    def submit(self, job: EvaluateView) -> None:
        with self._wake:
            self._jobs.append(job)
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._jobs and not self._stopped:
                    self._wake.wait()
                if self._stopped:
                    return
                jobs, self._jobs = self._jobs, []
            for job in jobs:
                snapshots = {name: (list(rel.columns), list(rel.types), rows) for name, rows in job.relations.items()
                             for rel in [self.catalog.relation(name)]}
                try:
                    rows = materialize(self._spark(), maintained_sql(job.view), snapshots)
                except Exception:  # Spark's errors are many kinds; whichever it is, the round is lost
                    log.exception("recomputation of round %d failed; the next round tries again", job.round)
                    rows = None
                self._done(ViewEvaluated(job.round, rows, time.monotonic()))
