"""What pyproject.toml cannot declare:

- the packages: one import name, fedlab, over the folders at the top of the repository
  (fedlab.warehouse is warehouse/, fedlab.loadgen is loadgen/, ...), every sub-package found in them;
- the gRPC stubs (fedmodel/wire) generated from proto/federation.proto whenever the package is built
  or installed, editable installs included, so that importing fedlab.fedmodel never runs protoc or
  writes into the installed package.
"""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
FOLDERS = ("fedmodel", "fedio", "source_node", "warehouse", "loadgen", "checker", "simulation", "bench", "live", "roles",
           "nemesis")   # each fedlab.<folder>
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
    stubs.write_text(stubs.read_text().replace("import federation_pb2 as",
                                               "from fedlab.fedmodel.wire import federation_pb2 as"))


class BuildWithStubs(build_py):
    def run(self):
        generate_stubs()
        super().run()


setup(packages=["fedlab", *("fedlab." + name for name in find_packages(include=[f"{folder}*" for folder in FOLDERS]))],
      package_dir={f"fedlab.{folder}": folder for folder in FOLDERS},
      cmdclass={"build_py": BuildWithStubs})
