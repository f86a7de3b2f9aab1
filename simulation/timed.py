"""The timed mode of the simulator: a discrete-event clock over the deterministic simulator.

The untimed simulator (simulation.simulator) says what each algorithm does, one step per
event; this says when, and how long it takes. Each warehouse is a Simulator, the same algorithm
object driven through the same `drive()`, and every change it makes is one of its explicit steps
(`commit`, `receive`, `deliver`, `drop`, `duplicate`, `restart`, `tick: batch|resends|core`),
taken at the time the clock says and written with it (`at`): a timed run is decided by its seed,
and its steps, as a scenario file's, replay it in the untimed simulator to the same view states.

What decides the times is a model of the live federation (live, warehouse.service,
source_node): its processes and their threads on machines (simulation.machines), each
operation costing the CPU seconds a calibration gives it (simulation.calibration), each
message taking a network profile's latency (simulation.network):
- the load driver offers transactions open-loop, one every 1/rate seconds, and one client per
  source commits what is queued for its source as one group, one group at a time;
- a source commits a group; its sender (one per subscribing warehouse) takes what the outbox
  holds, puts each copy through the source's fault injector (source_node.faults: lost, delayed,
  duplicated), and sends those due as one batch, one batch at a time (a lockstep stream); the
  warehouse's Notify thread decodes the batch (the source hears which reached the process:
  `receive`) and the core takes each notification in its turn;
- the core's sub-queries and resend requests go to a dispatcher per source, which sends what is
  queued as one batch, one at a time, resend requests first, by the live dispatcher's own rules
  (warehouse.dispatch_rules: a request narrowed to what has not arrived, or withheld; a copy of a
  sub-query on its way or answered withheld; one whose answer the reply lacked sent again at
  once); the source reads every answer of a batch at one state, its fault injector decides each
  answer's fate, and the warehouse decodes the reply before the core takes each answer;
- the core's thread takes everything queued for it in turns (warehouse.service._core);
- the core's timer fires when the algorithm says (`next_timer`), or every `tick` for one that
  does not; each source's sender sends again what its resend policy says is overdue;
- a committer per warehouse takes a Delta batch when something is due, spaced as live
  (warehouse.committer: three times the last commit's duration, between 0.25 s and the batch
  interval), and the warehouse's Python and the Spark JVM each spend their part of it; every
  compact interval, if a batch was committed since, the JVM folds the journal into the view and
  writes the checkpoints due (a Spark job of seconds of CPU, which a 2-core machine feels).
Each side of a gRPC exchange costs its process a call's CPU, partly in gRPC's own threads and
partly under the interpreter lock (`lock_share`), and its items' under the lock, on the thread
that carries them (a source's sender, its query handler, the warehouse's Notify handler, its
dispatchers, its core, its committer). Validation puts every process on one 2-core machine, as
the live federation runs here; a prediction gives each source and each warehouse machines of
their own, and the load, the sources' own applications, costs the federation nothing. The
nemesis acts as live: a pause freezes a process, a kill restarts it (the `restart` step) after it
stayed down as long as a restart takes, a partition loses what crosses it.

Simplifications (docs/results.md names the misses they explain): a duplicated copy arrives with
the first (`duplicate`); of several copies of one message in flight a step takes the oldest,
whichever the clock brought; a batch is taken at its start, so sources hear it durable as the
commit begins; the dispatcher's fast resend of a lost answer is left to the core's timer; a
periodic recomputation's Spark job (EvaluateView) takes no time.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Sequence

from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import to_pb
from fedlab.fedmodel.wire import pb
from fedlab.bench.metrics import percentiles, reflected_at, staleness
from fedlab.bench.ramp import RampStep
from fedlab.live.environment import faults_by_source
from fedlab.nemesis import schedule
from fedlab.simulation.calibration import Calibration
from fedlab.simulation.machines import Clock, Machine, Process
from fedlab.simulation.network import Network, profile
from fedlab.simulation.scenario import Scenario, commit_step
from fedlab.simulation.simulator import Message, Simulator, _Untraced
from fedlab.source_node.faults import FaultInjector
from fedlab.source_node.memory_store import MemoryStore
from fedlab.source_node.subscriptions import DEFAULT_SUBSCRIBER
from fedlab.warehouse.dispatch_rules import DispatchRules
from fedlab.warehouse.committer import BATCH_SPACING, MIN_BATCH_SPACING
from fedlab.warehouse.settings import WarehouseSettings

GROUP_MOST = 256            # transactions a client commits as one group (loadgen.driver)
INCARNATION = "0" * 32      # a resend request's warehouse incarnation, for its size on the wire


@dataclass(frozen=True)
class Deployment:
    """Where the processes run: every one on one machine of `cores` (this machine, as the
    calibration measured it: `shared`), or each source on a machine of `source_cores` and each
    warehouse (its Python and its Spark JVM) on one of `warehouse_cores`; the load's clients are
    then outside the federation. `restart_seconds`: how long a killed process stays down."""

    shared: bool = True
    source_cores: float = 1.0
    warehouse_cores: float = 2.0
    restart_seconds: float = 3.0


@dataclass(frozen=True)
class TimedSettings:
    calibration: Calibration
    network: str = "loopback"
    deployment: Deployment = field(default_factory=Deployment)
    seed: int = 1
    faults: dict = field(default_factory=dict)   # chaos rates as `fedlab run --chaos` reads them (source:rate too)
    loss: float = 0.0                            # share of every kind of message lost
    nemesis: tuple = ()                          # nemesis.schedule.Fault, timed from the load's start
    batch_interval: float = WarehouseSettings.batch_interval
    tick: float = WarehouseSettings.tick
    compact_interval: float = WarehouseSettings.compact_interval
    compact_first: float | None = None   # when the first compaction is due (None: one interval in)


@dataclass
class View:
    """One warehouse keeping one view: its scenario (the view's relations and their initial
    rows) and its algorithm; its subscriber name at the sources."""

    name: str
    scenario: Scenario
    algorithm: str | None = None


class TimedSimulator(Simulator):
    """A Simulator whose messages, as they leave, go to the timed model of their way, and
    whose applied states are timed."""

    def __init__(self, scenario: Scenario, model: "_Warehouse", **kwargs):
        self.model = model
        super().__init__(scenario, **kwargs)

    def _in_flight(self, msg: Message) -> None:
        super()._in_flight(msg)
        self.model.left(msg)

    def apply_state(self, action) -> None:
        super().apply_state(action)
        self.model.applied.append((self.now, action.versions))


class TimedRun:
    def __init__(self, catalog, initial: dict[str, list[tuple]], views: Sequence[View], stream,
                 settings: TimedSettings, keep_steps: bool = False, recording: bool = False):
        """`initial`: every relation's rows; `stream`: the update stream (`next()` -> (source,
        request), loadgen); `keep_steps`: each warehouse keeps its steps (Run.steps),
        commits included, for a replay (`replay`); `recording`: each keeps its trace and every
        state's view (Simulator's), for the checker."""
        self.settings = settings
        self.recording = recording
        self.cal = settings.calibration
        self.clock = Clock()
        self.catalog = catalog
        self.stream = stream
        self.keep_steps = keep_steps
        deployment = settings.deployment
        sources = sorted(catalog.sources)
        if deployment.shared:
            shared = Machine(self.clock, "this machine", self.cal.cores,
                             self.cal.floor + self.cal.source_floor * len(sources))
            machine = lambda name, cores: shared   # noqa: E731
        else:
            machine = lambda name, cores: Machine(self.clock, name, cores)   # noqa: E731
        self.network = Network(profile(settings.network), self.cal.loopback, sources, settings.seed)
        self.driver = Process(machine("load", 64.0), "load driver")
        # The load driver is one of this machine's processes; in a prediction, the sources' own
        # applications commit, at no cost to the federation.
        self.load_cost = 1.0 if deployment.shared else 0.0
        rates = faults_by_source(settings.faults, sources)
        if settings.loss:
            for source_rates in rates.values():
                source_rates["drop"] = settings.loss
        self.loss_rng = random.Random(f"{settings.seed}:loss")
        self.sources = {s: _Source(self, s, Process(machine(s, deployment.source_cores), f"source {s}"),
                                   MemoryStore(catalog, s, {r.name: initial.get(r.name, []) for r in catalog.relations_at(s)},
                                               log_retention=None),
                                   FaultInjector(f"{settings.seed}:{s}", **rates[s]))
                        for s in sources}
        self.warehouses: dict[str, _Warehouse] = {}
        for view in views:
            cores = machine(f"warehouse {view.name}", deployment.warehouse_cores)
            self.warehouses[view.name] = _Warehouse(self, view, Process(cores, f"warehouse {view.name}"),
                                                    Process(cores, f"spark JVM {view.name}", locked=False))
        self.readers = {s: [w for w in self.warehouses.values() if s in w.sim.sources] for s in sources}
        for s, readers in self.readers.items():
            if DEFAULT_SUBSCRIBER not in (w.name for w in readers):   # no warehouse drains its outbox
                self.sources[s].store.unsubscribe(DEFAULT_SUBSCRIBER)
        self.offered = self.committed = self.rejected = 0
        self.windows: dict[str, tuple[float, float]] = {}
        self._cpu_marks: dict[str, dict[str, float]] = {}

    # ---- driving ----

    def offer(self, rate: float, seconds: float, label: str = "load") -> None:
        """Offers `rate` txn/s for `seconds` from now, open-loop; the window is measured as `label`."""
        start, count = self.clock.now, int(round(rate * seconds))
        for i in range(count):
            self.clock.at(start + i / rate, self._offer_one)
        self.windows[label] = (start, start + seconds)
        self._cpu_marks[f"{label} from"] = {}
        self.clock.at(start, lambda: self._mark(f"{label} from"))
        self.clock.at(start + seconds, lambda: self._mark(f"{label} until"))

    def run(self, until: float, progress: Callable[[float], None] = lambda t: None,
            stop: Callable[[], bool] = lambda: False) -> bool:
        """Runs the clock to `until`, reporting progress every simulated tenth of it; or stops
        where it is when `stop()` says so. Whether it got there."""
        step = max(until - self.clock.now, 1e-9) / 10
        while self.clock.now < until:
            if not self.clock.run_until(min(until, self.clock.now + step), stop):
                return False
            progress(self.clock.now)
        return True

    def settle(self, seconds: float, stop: Callable[[], bool] = lambda: False) -> bool:
        """Runs until every offered transaction is committed and reflected in every view, or
        `seconds` pass (or `stop()` says so); whether it caught up."""
        deadline = self.clock.now + seconds
        while not self.caught_up() and self.clock.now < deadline:
            if not self.clock.run_until(min(deadline, self.clock.now + 0.25), stop):
                break
        return self.caught_up()

    def caught_up(self) -> bool:
        """Every offered transaction committed (or rejected), reflected in every view, and durable."""
        return (self.offered == self.committed + self.rejected and self.backlog() == 0
                and not any(w.committing or w.sim.batches.pending() for w in self.warehouses.values()))

    def backlog(self) -> int:
        """Source transactions committed but not yet reflected, summed over every view's sources."""
        out = 0
        for w in self.warehouses.values():
            applied = w.sim.algorithm.applied_dsv()
            out += sum(max(0, store.dsv - applied.get(s, 0)) for s, store in w.sim.sources.items())
        return out

    def ramp(self, rates: Sequence[float], seconds: float, progress: Callable[[int, float], None] = lambda i, r: None
             ) -> list[RampStep]:
        """The bench's rate search (bench.ramp) on the model: each step offers one rate,
        judged on its second half; the first step not sustained ends it."""
        steps = []
        for i, rate in enumerate(rates):
            progress(i, rate)
            start = self.clock.now
            offered0, committed0, backlog0 = self.offered, self.committed, self.backlog()
            self.offer(rate, seconds, f"ramp {rate:g}")
            self.clock.run_until(start + seconds / 2)
            committed_half, backlog_half = self.committed, self.backlog()
            self.clock.run_until(start + seconds)
            backlog1 = self.backlog()
            step = RampStep(rate, self.offered - offered0, self.committed - committed0, seconds,
                            (self.committed - committed0) - (backlog1 - backlog0), backlog0, backlog1,
                            seconds / 2, self.committed - committed_half, backlog_half)
            steps.append(step)
            if not step.sustained:
                break
        return steps

    def _offer_one(self) -> None:
        source, request = self.stream.next()
        self.offered += 1
        self.driver.submit(self.load_cost * self.cal["driver.txn"], lambda: self.sources[source].queue(request), "stream")

    def _mark(self, label: str) -> None:
        self._cpu_marks[label] = {p.name: p.cpu_seconds for p in self.processes()}

    def processes(self) -> list[Process]:
        return [self.driver, *(s.process for s in self.sources.values()),
                *(p for w in self.warehouses.values() for p in (w.python, w.jvm))]

    # ---- the nemesis ----

    @staticmethod
    def refusal(fault) -> str | None:
        """Why the model cannot apply a nemesis fault (nemesis.schedule), or None."""
        if fault.of_node:
            return ("the timed simulator models processes on machines, not a cluster's nodes: "
                    "whole-node faults (crash, restart, drain, partition node:N) need a cluster (nemesis.node)")
        if fault.kind == "clock":
            return "the timed simulator's processes keep one clock"
        if any(t in schedule.CLUSTER_ROLES or t.startswith(schedule.RAYLET) for t in fault.targets):
            return "the timed simulator models sources, warehouses and the load, not a cluster's other processes"
        if fault.kind == "partition" and ("warehouse" not in fault.targets and schedule.EVERYTHING not in fault.targets
                                          or "load" in fault.targets):
            return "the timed simulator partitions sources from the warehouse (e.g. warehouse|crm, crm|everything)"
        if fault.kind == "kill" and "load" in fault.targets:
            return "the load is the run's clock: pause it instead"
        if fault.kind not in ("pause", "kill", "partition"):
            return f"the timed simulator pauses, kills and partitions; it has no {fault.kind}"
        return None

    def schedule_nemesis(self, start: float) -> None:
        """The settings' nemesis, timed from `start`: pauses freeze processes, kills restart them
        after they stayed down, partitions lose what crosses them. ModelError for a fault the
        model has no part for (`refusal`), should a schedule reach here unchecked."""
        for fault in self.settings.nemesis:
            reason = self.refusal(fault)
            if reason:
                raise ModelError(f"--nemesis: '{fault}': {reason}")
            at = start + fault.at
            if fault.kind == "pause":
                for process in self._targets(fault.targets):
                    self.clock.at(at, process.freeze)
                    self.clock.at(at + fault.length, process.thaw)
            elif fault.kind == "kill":
                self.clock.at(at, lambda f=fault: self._kill(f.targets))
            elif fault.kind == "partition":
                self.clock.at(at, lambda f=fault: self._cut(f, True))
                self.clock.at(at + fault.length, lambda f=fault: self._cut(f, False))

    def _targets(self, targets) -> list[Process]:
        out = []
        for t in targets:
            if t == "warehouse":
                out += [p for w in self.warehouses.values() for p in (w.python, w.jvm)]
            elif t == "load":
                out.append(self.driver)
            else:
                out += [self.sources[s].process for s in (self.sources if t == "sources" else [t])]
        return out

    def _kill(self, targets) -> None:
        down = self.settings.deployment.restart_seconds
        for t in targets:
            if t == "warehouse":
                for w in self.warehouses.values():
                    w.restart()
            else:
                for s in (self.sources if t == "sources" else [t]):
                    for w in self.readers[s]:
                        w.step({"restart": {"source": s}})
            for process in self._targets([t]):
                process.freeze()
                self.clock.after(down, process.thaw)

    def _cut(self, fault, cut: bool) -> None:
        for t in fault.targets:
            for s in (self.sources if t in ("sources", schedule.EVERYTHING) else [t] if t in self.sources else []):
                self.sources[s].cut = cut

    def replay(self, view: str) -> dict:
        """The scenario document (docs/scenarios.md) of the warehouse `view`'s run: its federation,
        view and initial rows, and every step it took at its time, commits included (a run that
        kept its steps): `fedlab simulate` replays it untimed to the same view states."""
        w = self.warehouses[view]
        scenario = w.sim.scenario
        return {"name": f"timed run of {view} (seed {self.settings.seed}, {self.settings.network})",
                "algorithm": w.sim.algorithm_name, **({"access": scenario.access} if scenario.access else {}),
                **scenario.catalog.to_dict(), "view": scenario.view.sql,
                "initial": {name: [list(r) for r in rows] for name, rows in scenario.initial.items()},
                "steps": list(w.sim.run.steps)}

    # ---- what a run measured ----

    def figures(self, window: str = "load") -> dict:
        """Every warehouse's figures over the window (`offer`'s label), and each process's
        utilisation in it."""
        start, end = self.windows[window]
        length = max(end - start, 1e-9)
        before, after = self._cpu_marks.get(f"{window} from", {}), self._cpu_marks.get(f"{window} until", {})
        busy = {p.name: round((after.get(p.name, p.cpu_seconds) - before.get(p.name, 0.0)) / length, 4)
                for p in self.processes()}
        views = {name: w.figures(start, end) for name, w in self.warehouses.items()}
        out = {"window": [round(start, 3), round(end, 3)], "utilisation": busy, "views": views}
        if len(views) > 1:   # every view's transactions together, and the wire's cost per source transaction
            lags, to_delta, sent = [], [], Counter()
            for w in self.warehouses.values():
                mine, delta = w.lags(start, end)
                lags += mine
                to_delta += delta
                sent += w.sent_in(start, end)
            committed = sum(1 for src in self.sources.values() for n in src.store.log if start <= n.commit_time <= end)
            out["all views"] = {"transactions": committed, "reflected": len(lags), "staleness_ms": percentiles(lags),
                                "staleness_delta_ms": percentiles(to_delta), "per_txn": per_transaction(sent, committed)}
        return out


class _Source:
    """A source process: its clients' queue (the load's), its store, its fault injector, and
    a sender per subscribing warehouse."""

    def __init__(self, run: TimedRun, name: str, process: Process, store: MemoryStore, faults: FaultInjector):
        self.run, self.name, self.process, self.store, self.faults = run, name, process, store, faults
        self.waiting: list = []       # transactions the client holds for the next group
        self.committing = False       # a group is on its way (one at a time)
        self.senders: dict[str, _Sender] = {}
        self.cut = False              # a partition cuts it off the warehouses

    def queue(self, request) -> None:
        self.waiting.append(request)
        self._next_group()

    def _next_group(self) -> None:
        if self.committing or not self.waiting:
            return
        group, self.waiting = self.waiting[:GROUP_MOST], self.waiting[GROUP_MOST:]
        self.committing = True
        run, cal = self.run, self.run.cal
        client, commits = f"client {self.name}", "commits"
        rows = sum(len(r) for request in group for r in (*request.inserts.values(), *request.deletes.values())) + \
            2 * sum(len(m) for request in group for m in request.modifies.values())
        work = len(group) * cal["source.commit_txn"] + rows * cal["source.commit_row"]

        def at_source():
            exchange(self.process, commits, cal["source.commit_call"], work, lambda: self._committed(group), cal.lock_share)

        exchange(run.driver, client, run.load_cost * cal["driver.call"], 0.0,
                 lambda: run.clock.after(run.network.local(), at_source), cal.lock_share)

    def _committed(self, group) -> None:
        run = self.run
        for request in group:
            try:
                note = self.store.commit(request, commit_time=run.clock.now)
            except ModelError:   # the stream's picture of the source was wrong: rejected, as live
                run.rejected += 1
                continue
            run.committed += 1
            for w in run.readers[self.name]:
                w.notified(self.name, note, request)
        run.clock.after(run.network.local(), self._group_done)

    def _group_done(self) -> None:
        self.committing = False
        self._next_group()


class _Sender:
    """A source's sender to one warehouse: each copy through the fault injector, those due sent
    as one batch, one batch at a time (source_node.sender)."""

    def __init__(self, source: _Source, warehouse: "_Warehouse"):
        self.source, self.warehouse = source, warehouse
        self.fresh: list[tuple[str, int, int]] = []   # (transaction, bytes, rows) left the outbox, not yet through faults
        self.held: list = []                          # heap of (due, seq, transaction, bytes, rows, copies)
        self.seq = 0
        self.exchanging = False
        self.woken_at: float | None = None

    def left(self, txn: str, size: int, rows: int) -> None:
        self.fresh.append((txn, size, rows))
        self.wake()

    def wake(self, at: float | None = None) -> None:
        clock = self.source.run.clock
        at = clock.now if at is None else at
        if self.woken_at is not None and self.woken_at <= at:
            return
        self.woken_at = at
        clock.at(at, lambda: self._round(at))

    def _round(self, woken: float) -> None:
        if woken != self.woken_at:
            return
        self.woken_at = None
        if self.exchanging:
            return
        run, w = self.source.run, self.warehouse
        now = run.clock.now
        for txn, size, rows in self.fresh:
            delays = self.source.faults.decide("notification")
            if not delays or self.source.cut:
                w.step({"drop": {"notification": txn}})
                continue
            self.seq += 1
            heapq.heappush(self.held, (now + min(delays), self.seq, txn, size, rows, len(delays)))
        self.fresh = []
        due = []
        while self.held and self.held[0][0] <= now:
            due.append(heapq.heappop(self.held))
        if self.held:
            self.wake(self.held[0][0])
        if not due:
            return
        self.exchanging = True
        cal = run.cal
        for _, _, txn, size, _, copies in due:
            w.sent("notification", size * copies, copies)
        size = sum(d[3] for d in due)
        exchange(self.source.process, f"sender {w.name}", cal["source.send_call"], len(due) * cal["source.send_note"],
                 lambda: run.clock.after(run.network.to_warehouse(self.source.name, size), lambda: self._at_warehouse(due)),
                 cal.lock_share)

    def _at_warehouse(self, due) -> None:
        w, cal = self.warehouse, self.warehouse.run.cal
        exchange(w.python, f"notify {self.source.name}", cal["warehouse.notify_call"],
                 sum(d[5] for d in due) * cal["warehouse.notify_note"], lambda: self._arrived(due), cal.lock_share)

    def _arrived(self, due) -> None:
        run, w = self.source.run, self.warehouse
        for _, _, txn, _, rows, copies in due:
            if w.sim.flight.count("notification", txn):   # the Notify reply says it reached the process
                w.step({"receive": {"notification": txn}}, at_source=True)
            w.take("notification", txn, copies, rows)
        run.clock.after(run.network.to_warehouse(self.source.name, 0), self._replied)

    def _replied(self) -> None:
        self.exchanging = False
        self.wake()


class _Dispatcher:
    """A warehouse's dispatcher to one source: what the core queued, sent as one batch, one
    batch at a time, resend requests first, by the live dispatcher's rules (warehouse.dispatcher,
    warehouse.dispatch_rules: what stays home leaves the network by a drop step, a narrowed
    resend request by a narrow step, a lost answer's sub-query goes again by an again step); the
    source answers every sub-query of a batch at one state."""

    def __init__(self, warehouse: "_Warehouse", source: _Source):
        self.warehouse, self.source = warehouse, source
        self.queued: list[tuple[str, str, int]] = []   # (kind, name, bytes): resend requests and sub-queries
        self.exchanging = False
        self.answers: list[tuple[str, int, int]] = []  # the batch being read: (sub-query id, rows, bytes)
        self.trip: list[str] = []                      # the sub-queries of the batch last sent
        self.rules = DispatchRules()

    def left(self, kind: str, name: str, size: int) -> None:
        self.queued.append((kind, name, size))
        self._next()

    def _next(self) -> None:
        if self.exchanging or not self.queued:
            return
        queued, self.queued = self.queued, []
        batch = (self._resends([item for item in queued if item[0] == "resend"])
                 + self._subqueries([item for item in queued if item[0] == "subquery"]))
        if not batch:
            return
        self.exchanging = True
        w, cal = self.warehouse, self.warehouse.run.cal
        subqueries = sum(kind == "subquery" for kind, _, _ in batch)
        exchange(w.python, f"dispatch {self.source.name}", cal["warehouse.dispatch_call"],
                 subqueries * cal["warehouse.subquery"], lambda: self._send(batch), cal.lock_share)

    def _subqueries(self, items: list) -> list:
        """The queued sub-queries that go; a copy that stays home leaves the network."""
        going = set(self.rules.subqueries_to_send([name for _, name, _ in items]))
        batch = []
        for item in items:
            if item[1] in going:
                going.discard(item[1])
                batch.append(item)
            else:
                self.warehouse.step({"drop": {"subquery": item[1]}})
        return batch

    def _resends(self, items: list) -> list:
        """The queued resend requests, each narrowed to the DSVs still missing, or left home."""
        if not items:
            return []
        w, source = self.warehouse, self.source.name
        # The queued ones are the last to have left for this source: flight keeps their order.
        asked = [m.payload for m in w.sim.flight if m.kind == "resend" and m.source == source][-len(items):]
        spans = self.rules.resends_to_send(asked, lambda first, last: w.sim.batches.missing(source, first, last))
        batch = []
        for item, was, span in zip(items, asked, spans):
            if span is None:
                w.step({"drop": {"resend": source}})
                continue
            if tuple(span) != tuple(was):
                w.step({"narrow": {"resend": source, "from": list(was), "to": list(span)}})
            batch.append(item)
        return batch

    def _send(self, batch) -> None:
        w, run = self.warehouse, self.warehouse.run
        self.trip = [name for kind, name, _ in batch if kind == "subquery"]
        arriving = []
        for kind, name, size in batch:
            w.sent(kind, size, 1)
            if self.source.cut or (run.settings.loss and run.loss_rng.random() < run.settings.loss):
                w.step({"drop": {kind: name}})
            else:
                arriving.append((kind, name))
        if not arriving:
            self.rules.round_trip_over(self.trip, None)   # no reply: the core's timer retries them
            self._done()
            return
        size = sum(size for _, _, size in batch)
        run.clock.after(run.network.to_warehouse(self.source.name, size), lambda: self._at_source(arriving))

    def _at_source(self, batch) -> None:
        cal = self.warehouse.run.cal
        subqueries = sum(kind == "subquery" for kind, _ in batch)
        resends = len(batch) - subqueries
        exchange(self.source.process, f"query {self.warehouse.name}", cal["source.query_call"] if subqueries else 0.0,
                 resends * cal["source.resend"] + subqueries * cal["source.subquery"], lambda: self._read(batch),
                 cal.lock_share)

    @property
    def stale(self) -> bool:
        """Its warehouse process restarted since: what it had on its way is lost with it."""
        return self.warehouse.dispatchers[self.source.name] is not self

    def _read(self, batch) -> None:
        """The source reads the batch at its current state (the answers leave through `answered`)."""
        w = self.warehouse
        if self.stale:
            return
        self.answers = []
        for kind, name in batch:
            if w.sim.flight.count(kind, name):
                w.step({"deliver": {kind: name}}, at_source=kind == "subquery")
        answers, self.answers = self.answers, []
        rows = sum(r for _, r, _ in answers)
        self.source.process.submit(rows * w.run.cal["source.answer_row"], lambda: self._reply(answers),
                                   f"query {w.name}")

    def answered(self, sq_id: str, rows: int, size: int) -> None:
        self.answers.append((sq_id, rows, size))

    def _reply(self, answers) -> None:
        w, run = self.warehouse, self.warehouse.run
        now = run.clock.now
        copies: dict[float, list] = {}
        for sq_id, rows, size in answers:
            delays = self.source.faults.decide("answer")
            if not delays or self.source.cut:
                w.step({"drop": {"answer": sq_id}})
                continue
            w.sent("answer", size * len(delays), len(delays))
            copies.setdefault(min(delays), []).append((sq_id, rows, size, len(delays)))
        trip = self.trip
        answered = {sq_id for group in copies.values() for sq_id, _, _, _ in group}
        if not copies.get(0.0):
            self._done_after(now, None if copies else (trip, answered))
        last = max(copies, default=None)
        for delay, group in sorted(copies.items()):
            size = sum(g[2] for g in group)
            over = (trip, answered) if delay == last else None
            run.clock.at(now + delay, lambda group=group, size=size, first=delay == 0.0, over=over: run.clock.after(
                run.network.to_warehouse(self.source.name, size), lambda: self._arrived(group, first, over)))

    def _done_after(self, sent: float, over: tuple | None) -> None:
        """A reply without answers (every one lost or delayed) still ends the exchange (and,
        `over`, the round trip)."""
        run = self.warehouse.run

        def done():
            if over is not None:
                self._round_trip_over(*over)
            self._done()
        run.clock.at(sent + run.network.to_warehouse(self.source.name, 0), done)

    def _arrived(self, group, first: bool, over: tuple | None) -> None:
        w, cal = self.warehouse, self.warehouse.run.cal
        if self.stale:
            return
        self.rules.replied({sq_id for sq_id, _, _, _ in group})
        if over is not None:
            self._round_trip_over(*over)
        if first:
            self._done()
        w.python.submit(len(group) * cal["warehouse.answer"],
                        lambda: [w.take("answer", sq_id, copies, rows) for sq_id, rows, _, copies in group],
                        f"query stream {self.source.name}")

    def _round_trip_over(self, trip: list[str], answered: set[str]) -> None:
        """The batch's last reply is in: what it came back without goes again, once."""
        if self.stale:
            return
        w = self.warehouse
        for sq_id in self.rules.round_trip_over(trip, answered):
            w.step({"again": {"subquery": sq_id}})

    def _done(self) -> None:
        self.exchanging = False
        self._next()


class _Warehouse:
    """One warehouse: its Simulator (the algorithm, its ports), its Python process (the core,
    the Notify and Query streams, the committer's Python part: one interpreter lock), its Spark
    JVM, its dispatchers, its timers and its committer."""

    def __init__(self, run: TimedRun, view: View, python: Process, jvm: Process):
        self.run, self.name, self.python, self.jvm = run, view.name, python, jvm
        self.applied: list[tuple[float, dict]] = []
        self.durable: list[tuple[float, dict]] = []
        self.messages: Counter = Counter()          # (kind, "sent"|"bytes", window) counts
        self.sent_log: list[tuple[float, str, int, int]] = []   # (time, kind, copies, bytes)
        self.core_timer: float | None = None
        self.resend_timer: float | None = None
        self.committing = False
        self.inbox: list = []            # the core's: (CPU seconds, what it does), for its next turn
        self.in_turn = False
        self.batch_at: float | None = None
        self.last_start, self.took = float("-inf"), 0.0
        stores = {s: run.sources[s].store for s in view.scenario.catalog.sources}
        self.sim = TimedSimulator(view.scenario, self, algorithm=view.algorithm, sources=stores, subscriber=view.name,
                                  recording=run.recording)
        if not run.keep_steps:
            self.sim.run.steps = _Untraced()
        self.dispatchers = {s: _Dispatcher(self, run.sources[s]) for s in stores}
        for s in stores:
            run.sources[s].senders[view.name] = _Sender(run.sources[s], self)
        self.step({"queries": "in-flight"})
        self._arm_core_timer()
        self.compacted_through = 0   # batches committed when the last compaction started
        settings = run.settings
        run.clock.at(settings.compact_interval if settings.compact_first is None else settings.compact_first,
                     self._compact)

    # ---- the simulator's steps, at the clock's time ----

    def step(self, doc: dict, at_source: bool = False) -> None:
        """Takes the step now; `at_source`: one the warehouse's core has no part in (a source
        reading a sub-query), after which its timers stay as they were."""
        self.sim.take_step({**doc, "at": self.run.clock.now})
        if not at_source:
            self._after_step()

    def notified(self, source: str, note, request) -> None:
        """A transaction committed at `source` (the federation's store), as the commit step does."""
        self.sim.now = self.run.clock.now
        if self.run.keep_steps:
            self.sim.run.steps.append({**commit_step(source, request), "at": self.sim.now})
        self.sim.notified(source, note)
        due = self.sim.policies[source].next_due()
        if due is not None and (self.resend_timer is None or due < self.resend_timer):
            self._arm_resends(due)

    def left(self, msg: Message) -> None:
        """A message the simulator put in flight: on its way."""
        if msg.kind == "notification":
            rows = sum(len(c.inserted) + len(c.deleted) + 2 * len(c.modified) for c in msg.payload.changes)
            self.run.sources[msg.source].senders[self.name].left(msg.name, _size(msg, self.run.catalog), rows)
        elif msg.kind == "answer":
            self.dispatchers[msg.source].answered(msg.name, sum(len(r.rows) for r in msg.payload.relations),
                                                  _size(msg, self.run.catalog))
        else:
            self.dispatchers[msg.source].left(msg.kind, msg.name, _size(msg, self.run.catalog))

    def take(self, kind: str, name: str, copies: int, rows: int) -> None:
        """A message reached the warehouse: the core takes it (each copy) in its turn."""
        cal = self.run.cal
        self._to_core(copies * (cal["warehouse.event"] + rows * cal["warehouse.event_row"]),
                      lambda: self._deliver(kind, name, copies))

    def _to_core(self, cost: float, action: Callable[[], None]) -> None:
        """An event for the core's thread, which takes everything queued for it when it looks
        (warehouse.service._core): a turn costs `warehouse.core_turn` beside its events, so that
        a busy core, taking many at a time, spends less on each."""
        self.inbox.append((cost, action))
        if not self.in_turn:
            self._core_turn()

    def _core_turn(self) -> None:
        items, self.inbox = self.inbox, []
        self.in_turn = True
        self.python.submit(self.run.cal["warehouse.core_turn"] + sum(cost for cost, _ in items),
                           lambda: self._turn_done(items), "core")

    def _turn_done(self, items) -> None:
        for _, action in items:
            action()
        self.in_turn = False
        if self.inbox:
            self._core_turn()

    def _deliver(self, kind: str, name: str, copies: int) -> None:
        if self.sim.flight.count(kind, name):   # else it was lost meanwhile (a restart)
            self.step({"duplicate" if copies > 1 else "deliver": {kind: name}})

    def sent(self, kind: str, size: int, copies: int) -> None:
        self.sent_log.append((self.run.clock.now, kind, copies, size))

    def restart(self) -> None:
        """The warehouse's process crashes and starts again from its durable store; its
        dispatchers' exchanges are lost with it, and its sources' senders send again."""
        self.step({"restart": {"warehouse": True}})
        self.dispatchers = {s: _Dispatcher(self, self.run.sources[s]) for s in self.dispatchers}
        self._arm_resends(self.run.clock.now)

    def _after_step(self) -> None:
        self._arm_core_timer()
        self._batch_due()

    # ---- timers ----

    def _arm_core_timer(self) -> None:
        clock = self.run.clock
        next_timer = getattr(self.sim.algorithm, "next_timer", None)
        at = next_timer() if next_timer is not None else clock.now + self.run.settings.tick
        if at is None or (self.core_timer is not None and self.core_timer <= at):
            return
        at = max(at, clock.now + 0.001)
        self.core_timer = at
        clock.at(at, lambda: self._core_timer(at))

    def _core_timer(self, at: float) -> None:
        if self.core_timer != at:
            return
        self._to_core(self.run.cal["warehouse.event"], self._fire_core)

    def _fire_core(self) -> None:
        self.core_timer = None
        self.step({"tick": "core"})

    def _arm_resends(self, at: float) -> None:
        self.resend_timer = at
        self.run.clock.at(at, lambda: self._resends(at))

    def _resends(self, at: float) -> None:
        if self.resend_timer != at:
            return
        self.resend_timer = None
        self.step({"tick": "resends"})
        due = [d for d in (p.next_due() for p in self.sim.policies.values()) if d is not None]
        if due:
            self._arm_resends(max(min(due), self.run.clock.now + 0.001))

    # ---- Delta batches ----

    def _batch_due(self) -> None:
        if self.committing or self.batch_at is not None or not self.sim.batches.pending():
            return
        spacing = min(self.run.settings.batch_interval, max(MIN_BATCH_SPACING, BATCH_SPACING * self.took))
        self.batch_at = at = max(self.run.clock.now, self.last_start + spacing)
        self.run.clock.at(at, self._start_batch)

    def _start_batch(self) -> None:
        self.batch_at = None
        if not self.sim.batches.pending():
            return
        self.committing = True
        self.last_start = started = self.run.clock.now
        before = len(self.sim.run.states)
        self.sim.take_step({"tick": "batch", "at": started})
        states = [s["versions"] for s in self.sim.run.states[before:]]
        cal = self.run.cal
        self.python.submit(cal["warehouse.batch"] + len(states) * cal["warehouse.batch_state"],
                           lambda: self.jvm.submit(cal["jvm.batch"] + len(states) * cal["jvm.batch_state"],
                                                   lambda: self._committed(started, states), "committer"),
                           "committer")

    def _compact(self) -> None:
        """The compactor's turn (warehouse.committer.Compactor): a Spark job when batches were
        committed since the last."""
        batches = self.sim.durable.last_batch
        if batches > self.compacted_through:
            self.compacted_through = batches
            self.jvm.submit(self.run.cal["jvm.compact"], lambda: None, "compactor")
        self.run.clock.after(self.run.settings.compact_interval, self._compact)

    def _committed(self, started: float, states: list) -> None:
        now = self.run.clock.now
        self.durable += [(now, versions) for versions in states]
        self.took = now - started
        self.committing = False
        self._batch_due()

    # ---- figures ----

    def lags(self, start: float, end: float) -> tuple[list[float], list[float]]:
        """Staleness of each transaction committed in [start, end] at a source of the view: to
        the core's view, and to the Delta table (bench.metrics, as a live run's)."""
        commits = {(s, n.dsv): n.commit_time for s, notes in self.sim.committed.items() for n in notes}
        first = {s: 1 for s in self.sim.sources}
        applied = reflected_at([{"applied_time": t, "versions": v} for t, v in self.applied], first)
        durable = reflected_at([{"durable_time": t, "versions": v} for t, v in self.durable], first, "durable_time")
        return ([lag for committed, lag in staleness(commits, applied) if start <= committed <= end],
                [lag for committed, lag in staleness(commits, durable) if start <= committed <= end])

    def sent_in(self, start: float, end: float) -> Counter:
        """Messages (by kind) and their bytes (`KIND bytes`) sent in [start, end]."""
        sent = Counter()
        for t, kind, copies, size in self.sent_log:
            if start <= t <= end:
                sent[kind] += copies
                sent[f"{kind} bytes"] += size
        return sent

    def figures(self, start: float, end: float) -> dict:
        """Staleness of the transactions committed in [start, end] and the cost on the wire per
        one of them, measured as the bench measures a live run's (bench.metrics)."""
        lags, to_delta = self.lags(start, end)
        committed = sum(1 for notes in self.sim.committed.values() for n in notes if start <= n.commit_time <= end)
        return {"transactions": committed, "reflected": len(lags), "staleness_ms": percentiles(lags),
                "staleness_delta_ms": percentiles(to_delta), "per_txn": per_transaction(self.sent_in(start, end), committed),
                "counters": dict(self.sim.run.counters)}


def exchange(process: Process, thread: str, call: float, items: float, then: Callable[[], None],
             lock_share: float) -> None:
    """One side of a gRPC exchange on `process`'s `thread`: what the call costs gRPC's own threads
    (outside the interpreter lock), then the call's Python (`lock_share` of it) and its items'
    (under the lock), then `then`."""
    process.submit((1 - lock_share) * call, lambda: process.submit(lock_share * call + items, then, thread),
                   f"grpc {thread}", free=True)


def per_transaction(sent: Counter, transactions: int) -> dict:
    """Sub-queries, messages, bytes and resend requests sent per source transaction."""
    n = max(transactions, 1)
    kinds = ("notification", "subquery", "answer", "resend")
    return {"subqueries": round(sent["subquery"] / n, 3), "messages": round(sum(sent[k] for k in kinds) / n, 3),
            "bytes": round(sum(sent[f"{k} bytes"] for k in kinds) / n, 1), "resends": round(sent["resend"] / n, 4)}


def _size(msg: Message, catalog) -> int:
    """The message's size on the wire, as the live nodes log it (fedmodel.message_log)."""
    if msg.kind == "resend":
        from_dsv, through = msg.payload
        return pb.ResendRequest(from_dsv=from_dsv, through_dsv=through or 0, incarnation=INCARNATION,
                                subscriber=DEFAULT_SUBSCRIBER).ByteSize()
    return to_pb(msg.payload, catalog).ByteSize()
