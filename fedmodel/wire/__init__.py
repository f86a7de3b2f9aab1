"""Generated gRPC stubs for proto/federation.proto.

The stubs are build output (never committed): `make venv` generates them, and importing this
package regenerates them when they are missing or older than the .proto, so they are never stale.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_PROTO = _HERE.parent.parent / "proto" / "federation.proto"


def generate() -> None:
    """Runs grpcio-tools' protoc on proto/federation.proto into this folder."""
    from grpc_tools import protoc
    import grpc_tools

    include = Path(grpc_tools.__file__).resolve().parent / "_proto"
    args = ["protoc", f"-I{_PROTO.parent}", f"-I{include}", f"--python_out={_HERE}",
            f"--grpc_python_out={_HERE}", str(_PROTO)]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {_PROTO}")
    grpc_file = _HERE / "federation_pb2_grpc.py"
    # protoc writes an absolute-style import; make it relative to this package.
    text = grpc_file.read_text()
    grpc_file.write_text(text.replace("import federation_pb2 as", "from fedmodel.wire import federation_pb2 as"))


def _stale() -> bool:
    outputs = [_HERE / "federation_pb2.py", _HERE / "federation_pb2_grpc.py"]
    if not all(p.exists() for p in outputs):
        return True
    return _PROTO.exists() and min(p.stat().st_mtime for p in outputs) < _PROTO.stat().st_mtime


if _stale():
    generate()

from fedmodel.wire import federation_pb2 as pb  # noqa: E402
from fedmodel.wire import federation_pb2_grpc as rpc  # noqa: E402

__all__ = ["pb", "rpc", "generate"]

