"""The warehouse's durable side: the view, its change log, version state and received
notifications as Delta Lake tables (delta_store), and full (re)materialization as a Spark job
(materialize). The maintenance core stays pure Python and hands this store whole batches."""

from fedlab.warehouse.store.delta_store import AppliedTxn, DeltaViewStore, StoreError
from fedlab.warehouse.store.materialize import materialize

__all__ = ["AppliedTxn", "DeltaViewStore", "StoreError", "materialize"]
