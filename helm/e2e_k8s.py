#!/usr/bin/env python3
"""End-to-end run on the cluster of the current kube context (`make e2e-k8s`).

Installs helm/federation with helm/federation/ci/e2e-values.yaml (two sources, a 90 s load, chaos
deleting sources and the warehouse and injecting message faults), waits for the load to finish,
runs the Helm test (the checker) and asserts that it passed, then uninstalls and deletes the
release's volumes (unless --keep).

The image must be where the cluster can pull it: build it (`docker build -t fedlab:0.1.0 .`) and
load it (`kind load docker-image fedlab:0.1.0`, `minikube image load fedlab:0.1.0`) or push it and
pass --image REPO:TAG.

With no reachable cluster it prints "skipped: no cluster reachable" and exits 0.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHART = HERE / "federation"
VALUES = CHART / "ci" / "e2e-values.yaml"


def cluster_reachable() -> tuple[bool, str]:
    try:
        from kubernetes import client, config
    except ImportError as e:  # the project's dependencies are not installed
        return False, f"the kubernetes client is not installed ({e})"
    try:
        config.load_kube_config()
    except Exception as e:  # noqa: BLE001 - no kubeconfig, no current context, bad file
        return False, f"no usable kube context ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
    try:
        version = client.VersionApi().get_code(_request_timeout=5)
    except Exception as e:  # noqa: BLE001 - connection refused, DNS, TLS, 401...
        return False, f"the API server does not answer ({type(e).__name__})"
    return True, f"Kubernetes {version.git_version}"


def sh(cmd: list[str], env: dict, timeout: float, check: bool = True) -> subprocess.CompletedProcess:
    print("+", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, env=env, text=True, capture_output=True, timeout=timeout)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if check and proc.returncode != 0:
        raise SystemExit(f"e2e: {' '.join(cmd[:3])} failed with exit code {proc.returncode}")
    return proc


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="fedlab end-to-end run on Kubernetes")
    p.add_argument("--image", default=os.environ.get("FEDLAB_IMAGE", "fedlab:0.1.0"), help="REPO:TAG of the image")
    p.add_argument("--namespace", default="fedlab-e2e")
    p.add_argument("--release", default="e2e")
    p.add_argument("--values", action="append", default=[], help="extra values files")
    p.add_argument("--timeout", type=int, default=1800, help="seconds for the install and the run")
    p.add_argument("--keep", action="store_true", help="leave the release installed")
    args = p.parse_args(argv)

    ok, why = cluster_reachable()
    if not ok:
        print(f"skipped: no cluster reachable: {why}")
        return 0
    print(f"e2e: cluster reachable ({why})", flush=True)

    sys.path.insert(0, str(HERE))
    import fedlab_helm

    repo, _, tag = args.image.rpartition(":")
    if not repo or "/" in tag:
        repo, tag = args.image, "latest"
    with tempfile.TemporaryDirectory(prefix="fedlab-e2e-") as home:
        env = fedlab_helm.helm_env(home)
        helm = fedlab_helm.ensure_helm()
        ns, rel = ["--namespace", args.namespace], args.release
        started = time.monotonic()
        try:
            install = [helm, "upgrade", "--install", rel, str(CHART), *ns, "--create-namespace",
                       "-f", str(VALUES)]
            for f in args.values:
                install += ["-f", f]
            install += ["--set", f"image.repository={repo}", "--set", f"image.tag={tag}",
                        "--wait", "--wait-for-jobs", "--timeout", f"{args.timeout}s"]
            sh(install, env, args.timeout + 60)
            print(f"e2e: the load finished after {time.monotonic() - started:.0f} s; running the checker", flush=True)
            test = sh([helm, "test", rel, *ns, "--logs", "--timeout", "900s"], env, 960, check=False)
            if test.returncode != 0:
                print("e2e: FAILED: the Helm test (the checker) reported a violation or did not finish")
                return 1
            if "Phase:          Succeeded" not in test.stdout and "Succeeded" not in test.stdout:
                print("e2e: FAILED: the Helm test did not report success")
                return 1
            print("e2e: passed: the checker accepted the run")
            return 0
        finally:
            if not args.keep:
                sh([helm, "uninstall", rel, *ns, "--wait", "--timeout", "300s"], env, 360, check=False)
                sh([fedlab_helm.ensure_kubectl(), "delete", "pvc", *ns, "-l", f"app.kubernetes.io/instance={rel}",
                    "--ignore-not-found"], env, 120, check=False)


if __name__ == "__main__":
    sys.exit(main())
