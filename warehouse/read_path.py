"""How a user reads the view up to date: ask the warehouse first, then read.

With the `lazy` algorithm the view lags what the warehouse received until someone reads it
(Zhou & Larson 2007, section 3.5: maintenance on demand). A read over gRPC (ReadView) already
brings it up to date. A Spark user reads the Delta tables, which the warehouse does not see, so
`current_view_df` first calls the warehouse's Refresh, which returns once the view reflects
every notification received and that state is in a committed Delta batch, and then reads the
view as of the last committed batch. Eager algorithms answer Refresh as soon as their tasks in
flight are applied and durable.
"""

from __future__ import annotations

from fedlab.fedio.channels import TlsFiles, client_channel
from fedlab.fedmodel.wire import pb, rpc
from fedlab.warehouse.store.delta_store import DeltaViewStore


def refresh(warehouse_address: str, tls: TlsFiles | None = None, timeout: float = 60.0) -> pb.RefreshReply:
    """Asks the warehouse to bring the view up to date and make it durable; its applied DSVs and batch."""
    stub = rpc.WarehouseStub(client_channel(warehouse_address, tls))
    return stub.Refresh(pb.RefreshRequest(), timeout=timeout)


def current_view_df(spark, delta_root: str, warehouse_address: str, tls: TlsFiles | None = None,
                    timeout: float = 60.0):
    """The view as a Spark DataFrame (its columns plus `count`), up to date with every
    notification the warehouse at `warehouse_address` had received when this was called."""
    refresh(warehouse_address, tls, timeout)
    return DeltaViewStore.at(spark, delta_root).view_df()   # the last committed batch: at or past Refresh's
