"""`fedlab refresh RUN_DIR [--as-of TIME|VECTOR]`: point-in-time refresh of a running warehouse.

A warehouse running the `salem` algorithm keeps a timed view delta up to a high-water mark
(warehouse.core.salem); this asks it, through its gRPC Refresh, to roll the view forward to the
point a wall time names (each source's last transaction committed at or before it, by that
source's clock: seconds since the epoch, or an ISO 8601 time) or a vector of DSVs
(`ds1=40,ds2=12`; sources left out stay where the view has them), or with no `--as-of` to the
high-water mark. It prints the versions the view reflects once the refreshed state is durable in
Delta, and the high-water mark. A point the warehouse cannot reach (before the view's state,
beyond the mark, a vector no wall time names) is refused with the warehouse's one-line reason.

The run file (live.runfile) names the warehouse's address while it serves; `--warehouse`
names another. A finished run's view can still be read as of a time from Delta:
`fedlab view RUN_DIR --as-of TIME`.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import grpc

from fedlab.fedio.channels import client_channel
from fedlab.fedmodel.errors import ModelError
from fedlab.fedmodel.messages import VIEW_METADATA
from fedlab.fedmodel.wire import pb, rpc
from fedlab.live.delta_view import versions_text
from fedlab.live.runfile import RunFile
from fedlab.roles.process import RoleError, add_tls_arguments, tls_files


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a live run's directory (it holds run.json)")
    parser.add_argument("--as-of", metavar="TIME|VECTOR",
                        help="a wall time (seconds since the epoch or ISO 8601) or a vector SOURCE=DSV,...; "
                             "default: the view delta's high-water mark")
    parser.add_argument("--warehouse", metavar="HOST:PORT", help="the warehouse's address (default: the run file's)")
    parser.add_argument("--view", metavar="NAME", help="one of the run's views, by its name in the run file "
                        "(default: the first)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                        help="how long to wait for the refreshed state to be durable (default 120)")
    add_tls_arguments(parser)


def parse_point(text: str) -> pb.RefreshRequest:
    """`--as-of`'s value as a RefreshRequest; ModelError naming what is wrong."""
    if "=" in text:
        vector = {}
        for item in text.split(","):
            source, _, dsv = item.partition("=")
            if not source.strip() or not dsv.strip().isdigit():
                raise ModelError(f"--as-of: {item!r} is not SOURCE=DSV")
            vector[source.strip()] = int(dsv)
        return pb.RefreshRequest(as_of_vector=vector)
    try:
        return pb.RefreshRequest(as_of_time=float(text))
    except ValueError:
        pass
    try:
        return pb.RefreshRequest(as_of_time=datetime.fromisoformat(text).timestamp())
    except ValueError:
        raise ModelError(f"--as-of: {text!r} is neither a time (seconds since the epoch, ISO 8601) "
                         "nor a vector SOURCE=DSV,...") from None


def main(args) -> int:
    try:
        request = parse_point(args.as_of) if args.as_of else pb.RefreshRequest()
        run = RunFile.read(Path(args.run_dir), args.view)
        address = args.warehouse or run.warehouse_address
        if not address:
            raise ModelError(f"{args.run_dir}: the run file names no warehouse address (give --warehouse HOST:PORT)")
        stub = rpc.WarehouseStub(client_channel(address, tls_files(args)))
        reply = stub.Refresh(request, timeout=args.timeout, metadata=((VIEW_METADATA, args.view),) if args.view else ())
    except (ModelError, RoleError) as err:
        print(f"fedlab refresh: {err}", file=sys.stderr)
        return 2
    except grpc.RpcError as err:
        reason = err.details() if err.code() != grpc.StatusCode.UNAVAILABLE else f"no warehouse answers at {address}"
        print(f"fedlab refresh: {reason}", file=sys.stderr)
        return 2
    print(f"refreshed: the view reflects {versions_text(reply.applied_dsv)}, durable in Delta batch {reply.batch}"
          + (f"; the view delta reaches {versions_text(reply.high_water)}" if reply.high_water else ""))
    return 0
