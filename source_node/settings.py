"""How one source node runs, apart from what it is (its catalog, name, database and initial rows).

One frozen object, built in one place by each caller: roles.source_role from the command line
(and so the chart's values), live.federation for a local run, a test for itself. The node
(source_node.node) and its Ray actor (source_node.actor) take it whole, so that a setting added
here reaches both without another parameter on each. What changes while the node runs (the
warehouse's address, the fault rates) is not here: source_node.run_settings keeps that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from fedlab.fedio.channels import MAX_MESSAGE_BYTES, TlsFiles
from fedlab.source_node.engines import DEFAULT_ENGINE
from fedlab.source_node.resend_policy import RESEND_INTERVAL


@dataclass(frozen=True, kw_only=True)
class SourceSettings:
    engine: str = DEFAULT_ENGINE                       # "sqlite", "duckdb" or "postgres" (source_node.engines)
    host: str = "127.0.0.1"                            # where its gRPC server listens
    port: int = 0                                      # 0: a free one
    tls: TlsFiles | None = None                        # mutual TLS for its server and its channel to the warehouse
    probes: Sequence[tuple[str, Sequence[str]]] = ()   # (relation, columns) to index at once (source_node.probes)
    prune_applied: bool = False                        # PostgreSQL: empty its change tables as the warehouse applies
    capture: str | None = None                         # PostgreSQL: "triggers" or "logical" (None: as installed,
    #                                                    triggers for a new database: source_node.engines)
    max_retained_wal: int | None = None                # capture logical: bytes of WAL its slot may keep
    log_retention: int | None = None                   # the most notifications its outbox keeps (None: unbounded)
    log_keep_seconds: float | None = None              # seconds its log and message log keep (None: all; the log
    #                                                    always keeps what a subscriber has not acknowledged)
    resend_interval: float = RESEND_INTERVAL           # source_node.resend_policy
    max_message_bytes: int = MAX_MESSAGE_BYTES
    metrics_port: int | None = None                    # its Prometheus endpoint, on `host` (0: a free port;
    #                                                    None: none: source_node.metrics)
