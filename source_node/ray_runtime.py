"""Starting and stopping the local Ray instance that hosts the source actors (docs/architecture.md 6).

Token authentication is turned off (RAY_AUTH_MODE=disabled) before Ray starts, so nothing is
written to ~/.ray (the environment notes outside this repository). The dashboard is off. Ray's own services listen on
all interfaces: a local Ray 2.60 instance has no switch to bind them to the loopback address only
(`_node_ip_address="127.0.0.1"` is rewritten to the machine's address); the source nodes' gRPC
servers do bind 127.0.0.1.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import ray

import fedlab

NAMESPACE = "fedlab"
# Ray's work that a federation of a few actors does not need, each of it CPU in every measurement:
# idle workers started ahead for tasks (the sources are actors; 1% of a core each, idle) and the
# statistics of every internal event handler.
SYSTEM_CONFIG = {"enable_worker_prestart": False, "prestart_worker_first_driver": False, "event_stats": False}
_PROJECT_ROOT = str(Path(fedlab.__file__).resolve().parent.parent)   # the folder fedlab is in


def start_ray(temp_dir: str | None = None, num_cpus: int = 2) -> None:
    """Starts (once) a local Ray instance in namespace "fedlab"; a second call does nothing."""
    if ray.is_initialized():
        return
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Ray's log monitor lists its log folder ten times a second while it holds fewer than this
    # many files; with 0 it lists it every LOG_NAME_UPDATE_INTERVAL_S only (a worker's first
    # lines reach the driver up to a second later). Idle: 0.67-0.77% -> 0.30% of a core.
    os.environ.setdefault("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD", "0")
    os.environ.setdefault("LOG_NAME_UPDATE_INTERVAL_S", "1")
    if temp_dir and len(str(Path(temp_dir).resolve())) > 40:
        # Ray puts Unix sockets ~65 characters deep under its temp dir, and a socket path may
        # not exceed 107 bytes: a deep run directory gets a short folder in /tmp instead.
        temp_dir = tempfile.mkdtemp(prefix="fedlab-ray-")
    ray.init(num_cpus=num_cpus, include_dashboard=False, namespace=NAMESPACE, _system_config=SYSTEM_CONFIG,
             _temp_dir=str(Path(temp_dir).resolve()) if temp_dir else None,
             # Workers import fedlab from where this process does.
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(
                 p for p in (_PROJECT_ROOT, os.environ.get("PYTHONPATH")) if p)}})


def stop_ray() -> None:
    """Stops the local Ray instance if this process started or joined one."""
    if ray.is_initialized():
        ray.shutdown()
