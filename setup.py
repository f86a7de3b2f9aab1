"""The build step that pyproject.toml cannot declare: the gRPC stubs (fedmodel/wire) generated from
proto/federation.proto whenever the package is built or installed, editable installs included, so
that importing fedmodel never runs protoc or writes into the installed package."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PROTO = ROOT / "proto" / "federation.proto"
WIRE = ROOT / "fedmodel" / "wire"


def generate_stubs() -> None:
    """grpcio-tools' protoc on proto/federation.proto into fedmodel/wire."""
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).resolve().parent / "_proto"
    args = ["protoc", f"-I{PROTO.parent}", f"-I{include}", f"--python_out={WIRE}", f"--grpc_python_out={WIRE}",
            str(PROTO)]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")
    stubs = WIRE / "federation_pb2_grpc.py"
    # protoc writes a top-level import; the stubs live in a package.
    stubs.write_text(stubs.read_text().replace("import federation_pb2 as", "from fedmodel.wire import federation_pb2 as"))


class BuildWithStubs(build_py):
    def run(self):
        generate_stubs()
        super().run()


setup(cmdclass={"build_py": BuildWithStubs})
