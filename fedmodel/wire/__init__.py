"""Generated gRPC stubs for proto/federation.proto.

The stubs are build output (never committed): setup.py generates them whenever the package is built
or installed (`make venv`, `pip install .`, the image), so importing this package only imports.
"""

from __future__ import annotations

try:
    from fedlab.fedmodel.wire import federation_pb2 as pb
    from fedlab.fedmodel.wire import federation_pb2_grpc as rpc
except ImportError as missing:
    raise ImportError("fedmodel.wire: the gRPC stubs are missing; reinstall fedlab "
                      "(`pip install -e .`), which generates them from proto/federation.proto") from missing

__all__ = ["pb", "rpc"]
