"""A warehouse process that keeps several views: one subscriber to its sources, one gRPC service.

Each view is a Warehouse of its own (warehouse.service: its algorithm, core, version state, Delta
tables, history and message log); what they share is what the sources see:
- one subscriber name, so a source sends each notification once to this process, on one Notify
  stream, and the group hands every view its copy;
- one incarnation (warehouse.incarnation), so a restart of the process is one restart to the
  sources, and a pause holds every view: it is made first, and each view is built with it;
- one Notify reply per batch, whose marks hold for every view (warehouse.core.batches
  for_every_view): a source's outbox keeps a notification until every view has it durably, and
  a view that is slow holds back only this subscriber's acknowledgements, never another's;
- one connection per source: each view's channel to a source has the same target and options,
  and gRPC's global subchannel pool then carries them all on one TCP connection, with those of
  any other warehouse in the process (each view's Query stream is a stream of its own on it).
A reader names the view it reads (ReadView, Refresh, Status) in the `fedlab-view` gRPC metadata
(fedmodel.messages.VIEW_METADATA); a group of one view needs no name.

`pause()` holds the warehouse as a frozen process is held (SIGSTOP, which cannot stop one
warehouse of several in one process): its gRPC calls wait unanswered and its views' cores take
nothing, until `resume()`. The sources' calls time out and go again, as they do against a frozen
process, and what they sent meanwhile is handled once it resumes: a subscriber lagging behind
the others (nemesis.local, `pause warehouse`).
"""

from __future__ import annotations

import time

import grpc

from fedlab.fedio.channels import TlsFiles, add_port, new_server
from fedlab.fedio.metrics_endpoint import MetricsEndpoint, new_registry
from fedlab.fedmodel.codec import encode_rows
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import VIEW_METADATA, from_pb
from fedlab.fedmodel.viewdef import read_at
from fedlab.fedmodel.wire import pb, rpc
from fedlab.warehouse.core.batches import Marks, for_every_view
from fedlab.warehouse.core.events import RefreshRequested
from fedlab.warehouse.core.salem.timeline import PointError
from fedlab.warehouse.metrics import ViewGroupCollector
from fedlab.warehouse.service import Warehouse


class ViewGroup:
    def __init__(self, views: dict[str, Warehouse], tls: TlsFiles | None = None):
        """`views`: each view's warehouse by the view's name, all subscribed by one name to the
        same sources; `tls`: mutual TLS on the gRPC service."""
        if not views:
            raise ModelError("a warehouse keeps at least one view")
        subscribers = {v.settings.subscriber for v in views.values()}
        if len(subscribers) > 1:
            raise ModelError(f"the views of one warehouse subscribe by one name, not {sorted(subscribers)}")
        if len({id(v.incarnation) for v in views.values()}) > 1:
            raise ModelError("the views of one warehouse are built with one incarnation (warehouse.incarnation)")
        self.views = dict(views)
        self.tls = tls
        self.incarnation = self.first.incarnation
        self._server = None
        self._metrics: MetricsEndpoint | None = None

    @property
    def first(self) -> Warehouse:
        return next(iter(self.views.values()))

    @property
    def subscriber(self) -> str:
        """The name its views subscribe to the sources by."""
        return self.first.settings.subscriber

    def subscribe(self, address: str | None) -> None:
        """Subscribes this warehouse at every source (the Subscribe call), for the relations its
        views read there, its notifications sent to `address` (None: not serving yet). Before the
        first `open`, so that the snapshots it materialises from lack nothing its notifications
        will not bring; again, harmlessly, on every start."""
        joins = [v.view.join for v in self.views.values()]
        for source in self.first.sources:
            self.first.source_stub(source).Subscribe(
                pb.SubscribeRequest(name=self.subscriber, address=address or "", relations=read_at(joins, source)),
                timeout=30)

    def open(self) -> None:
        """Restores each view from its Delta tables, or materialises it the first time."""
        for view in self.views.values():
            view.open()

    def serve(self, port: int = 0, host: str = "127.0.0.1", metrics_port: int | None = None) -> int:
        """Starts every view's threads and the gRPC service, and with `metrics_port` (0: a free
        one) the Prometheus endpoint on `host` (warehouse.metrics); returns the gRPC port."""
        if metrics_port is not None:
            registry = new_registry()
            registry.register(ViewGroupCollector(self.views))
            self._metrics = MetricsEndpoint.serve(registry, host, metrics_port)
        sources = len(self.first.sources)
        # A thread per source for its Notify stream, and eight for the other calls.
        self._server = new_server(sources + 8)
        rpc.add_WarehouseServicer_to_server(_Servicer(self), self._server)
        bound = add_port(self._server, f"{host}:{port}", self.tls)
        for view in self.views.values():
            view.start()
        self._server.start()
        return bound

    def pause(self) -> None:
        """Holds every call and every view's core until resume()."""
        self.incarnation.running.clear()

    def resume(self) -> None:
        self.incarnation.running.set()

    def close(self, commit: bool = True) -> None:
        """Stops every view (committing its last batch, unless not `commit`: as a crash would),
        then the service."""
        self.resume()   # nothing stays held
        for view in self.views.values():
            view.close(commit)
        if self._server is not None:
            self._server.stop(grace=1 if commit else None).wait()   # a crash cuts calls in flight
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None

    @property
    def metrics_port(self) -> int | None:
        """Where its Prometheus endpoint serves, on the gRPC service's host (None: none)."""
        return self._metrics.port if self._metrics is not None else None

    def set_source_address(self, source: str, address: str) -> None:
        for view in self.views.values():
            view.set_source_address(source, address)

    def notify(self, notes: list, sizes: list[int]) -> dict[str, Marks]:
        """Hands `notes` to every view; per source, what holds for all of them."""
        marks = [view.notify(notes, sizes) for view in self.views.values()]
        return {source: for_every_view([m[source] for m in marks]) for source in marks[0]}

    def view(self, name: str | None) -> Warehouse:
        """The view `name` (None: the only one); ModelError naming the views for any other."""
        if name is None and len(self.views) == 1:
            return self.first
        if name in self.views:
            return self.views[name]
        asked = "no view named" if name is None else f"no view {name!r}: name"
        raise ModelError(f"{asked} one of {', '.join(self.views)} in the {VIEW_METADATA} metadata")


class _Servicer(rpc.WarehouseServicer):
    def __init__(self, group: ViewGroup):
        self.group = group

    def Notify(self, requests, context):
        """A source's stream of notification batches, each answered in turn (a garbled one ends the
        stream with INVALID_ARGUMENT: the source opens another and sends it again, losing nothing)."""
        for request in requests:
            self.group.incarnation.running.wait()
            yield self._notified(request, context)

    def _notified(self, request: pb.NotificationBatch, context) -> pb.NotifyReply:
        catalog = self.group.first.catalog
        try:
            notes = [from_pb(n, catalog) for n in request.notifications]
        except ModelError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
        marks = self.group.notify(notes, [msg.ByteSize() for msg in request.notifications])
        return pb.NotifyReply(acked_dsv={s: m.acked for s, m in marks.items()},
                              received_dsv={s: m.reached.dsv for s, m in marks.items()},
                              received_beyond={s: pb.Dsvs(dsv=m.reached.beyond) for s, m in marks.items()
                                               if m.reached.beyond},
                              incarnation=self.group.incarnation.id,
                              applied_dsv={s: m.view_dsv for s, m in marks.items()})

    def ReadView(self, request, context):
        view = self._view(context)
        self._refresh(view, context, durable=False)
        rows = [(*row, count) for row, count in sorted(view.view_rows().items(), key=repr)]
        columns = [*view.view.output_names, "count"]
        types = list(view.view.output_types) + ["BIGINT"]
        for i in range(0, max(len(rows), 1), 16384):
            yield pb.ViewChunk(columns=columns, rows=encode_rows(columns, types, rows[i:i + 16384]))

    def Refresh(self, request, context) -> pb.RefreshReply:
        view = self._view(context)
        point = None
        on_demand = view.plugin.point_in_time and view.salem.apply == "on-demand"
        if request.HasField("as_of_time") or request.as_of_vector or on_demand:
            point = RefreshRequested(request.as_of_time if request.HasField("as_of_time") else None,
                                     tuple(sorted(request.as_of_vector.items())) or None, time.monotonic())
        done = self._refresh(view, context, durable=True, point=point)
        return pb.RefreshReply(applied_dsv=done["applied_dsv"], batch=done["batch"], high_water=done["high_water"])

    def Status(self, request, context) -> pb.StatusReply:
        s = self._view(context).status()
        return pb.StatusReply(algorithm=s["algorithm"], applied=s["applied"], in_flight=s["in_flight"],
                              applied_dsv=s["applied_dsv"], view_rows=s["view_rows"],
                              commit_failures=s["commit_failures"], commits_failing=s["commits_failing"],
                              last_commit_error=s["last_commit_error"], durable_dsv=s["durable"])

    def _view(self, context) -> Warehouse:
        self.group.incarnation.running.wait()
        try:
            return self.group.view(dict(context.invocation_metadata()).get(VIEW_METADATA))
        except ModelError as err:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))

    @staticmethod
    def _refresh(view: Warehouse, context, durable: bool, point: RefreshRequested | None = None) -> dict:
        remaining = context.time_remaining()
        try:
            return view.refresh(durable, timeout=remaining if remaining is not None else 600.0, point=point)
        except TimeoutError as err:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, str(err))
        except PointError as err:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
