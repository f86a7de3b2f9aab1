#!/usr/bin/env python3
"""`make image`: the fedlab image built without a registry, for the local cluster tool.

The Dockerfile at the repository root builds the image for users with registries (it pulls
python:3.11-slim and installs from PyPI inside the build). Here nothing may be pulled, so the same
contents are put together from what this machine has (../shared/tools/local-k8s/README.md, "An
app image without a registry"):

1. the base: local-k8s's debootstrapped Debian bookworm with python3, a Java 17 runtime, tini and
   procps (`local-k8s image-base`), the same Debian release as the Dockerfile's base;
2. the virtual environment: made by the host's /usr/bin/python3 (the base's Python version: the
   script refuses another) at /opt/fedlab/venv, the path it has in the image, with the project's
   pinned dependencies from pyproject.toml and the project itself (whose install generates the gRPC stubs);
3. Delta Lake's jars, and hadoop-aws's for s3a://, from the host's jar cache
   (`warehouse.spark_session.ensure_delta_jars`), and the clock shim the node nemesis sets clocks
   with (helm/image/clock_offset.c), built by gcc;
4. helm/image/Containerfile.local (user 10001, the entrypoint, the Dockerfile's environment),
   built by podman with no network and no pull, then imported into the cluster's containerd
   (`local-k8s load-image`, kept for every later `up full`).

Prints each step's time, and the image's size at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = Path("/opt/fedlab/venv")
BASE_TAG = "fedlab-base"
BASE_REF = f"localhost/lk8s/{BASE_TAG}:bookworm"
IMAGE = "localhost/fedlab:0.1.0"


def local_k8s() -> Path:
    """The local cluster tool: $LOCAL_K8S, or ../shared/tools/local-k8s beside the repository."""
    candidates = [os.environ.get("LOCAL_K8S", ""), ROOT.parent / "shared/tools/local-k8s/local-k8s"]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    raise SystemExit("image: the local cluster tool was not found (set LOCAL_K8S to its local-k8s script)")


def tool_env(tool: Path) -> dict:
    """The environment `local-k8s env` sets up (PATH with helm/kubectl, KUBECONFIG, podman's conf)."""
    dump = subprocess.run(["bash", "-c", f'eval "$("{tool}" env)" && env -0'], check=True, capture_output=True,
                          text=True).stdout
    env = dict(item.split("=", 1) for item in dump.split("\0") if "=" in item)
    env["CONTAINERS_CONF"] = env["LOCAL_K8S_CONTAINERS_CONF"]   # podman's default nofile is above this machine's limit
    return env


def step(title: str, cmd: list[str], env: dict | None = None, cwd: Path | None = None) -> None:
    started = time.monotonic()
    print(f"[image] {title} ...", flush=True)
    proc = subprocess.run(cmd, env=env, cwd=cwd, text=True, capture_output=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"image: {title} failed (exit {proc.returncode}): {' '.join(cmd[:4])}")
    print(f"[image] {title}: {time.monotonic() - started:.0f} s", flush=True)


def dependencies_digest() -> str:
    return hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]


def build_venv() -> None:
    """The venv at the path it has in the image; dependencies reinstalled only when pyproject.toml
    changed, the project itself every time (it is installed as a copy, not editable)."""
    host_python = Path("/usr/bin/python3")
    stamp = VENV / ".fedlab-deps"
    if not (stamp.is_file() and stamp.read_text() == dependencies_digest()):
        shutil.rmtree(VENV, ignore_errors=True)
        step("venv", [str(host_python), "-m", "venv", str(VENV)])
        step("dependencies (pip, pinned in pyproject.toml)",
             [str(VENV / "bin/pip"), "install", "-q", "--disable-pip-version-check", str(ROOT)])
        stamp.write_text(dependencies_digest())
    step("the project", [str(VENV / "bin/pip"), "install", "-q", "--disable-pip-version-check",
                         "--no-deps", "--force-reinstall", str(ROOT)])
    step("import check", [str(VENV / "bin/python"), "-c",
                          "import fedlab.fedmodel.wire, fedlab.cli, fedlab.warehouse.service"], cwd="/")


def jar_folders() -> list[Path]:
    """The jar cache's folders of Delta's jars and the object-store packages', filled."""
    from fedlab.warehouse.spark_session import ensure_delta_jars, jar_sets

    ensure_delta_jars(object_store=True)
    return [jar_set.folder for jar_set in jar_sets(object_store=True)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="build the fedlab image for the local cluster, without a registry")
    p.add_argument("--no-load", action="store_true", help="build only; do not import into the cluster")
    args = p.parse_args(argv)
    started = time.monotonic()
    tool = local_k8s()
    env = tool_env(tool)
    host_version = subprocess.run(["/usr/bin/python3", "--version"], capture_output=True, text=True).stdout.strip()
    step(f"base image {BASE_REF}", [str(tool), "image-base", "--java", "--include", "tini,procps", "--tag", BASE_TAG],
         env=env)
    base_version = subprocess.run(["podman", "run", "--rm", "--network=none", BASE_REF, "python3", "--version"],
                                  env=env, capture_output=True, text=True).stdout.strip()
    if base_version != host_version:
        raise SystemExit(f"image: the base has {base_version or 'no python3'}, /usr/bin/python3 is {host_version}: "
                         "a venv made on the host would not run in the image")
    build_venv()
    jars = jar_folders()

    context = Path(os.environ.get("TMPDIR", "/tmp")) / "fedlab-image-context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    step("build context", ["cp", "-a", str(VENV), str(context / "venv")])
    for folder in jars:
        shutil.copytree(folder, context / "jars" / folder.name)
    shutil.copy(ROOT / "helm/image/fedlab-entrypoint.sh", context / "fedlab-entrypoint")
    shutil.copy(ROOT / "helm/image/Containerfile.local", context / "Containerfile")
    # The node nemesis's clock shim, built by the host's gcc for the base's glibc (both bookworm).
    step("clock shim", ["gcc", "-O2", "-Wall", "-shared", "-fPIC", "-o", str(context / "clock_offset.so"),
                        str(ROOT / "helm/image/clock_offset.c"), "-ldl"])
    step(f"podman build {IMAGE}", ["podman", "build", "--network=none", "--pull=never", "-q", "-t", IMAGE,
                                   "--build-arg", f"BASE={BASE_REF}", str(context)], env=env)
    shutil.rmtree(context, ignore_errors=True)
    subprocess.run(["podman", "image", "prune", "-f"], env=env, capture_output=True)   # the previous build's layers
    size = subprocess.run(["podman", "image", "inspect", IMAGE, "--format", "{{.Size}}"], env=env,
                          capture_output=True, text=True).stdout.strip()
    if not args.no_load:
        step("import into the cluster's containerd", [str(tool), "load-image", IMAGE], env=env)
    print(f"[image] {IMAGE}: {int(size) / 1e6:,.0f} MB, built in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
