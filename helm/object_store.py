#!/usr/bin/env python3
"""An S3-compatible object store for Delta under s3a://: SeaweedFS's S3 gateway, built here.

SeaweedFS (Apache-2.0; MinIO is AGPL) is built once from its Go module at the pinned version
(`SEAWEEDFS_VERSION`) into the fedlab cache, `~/.cache/fedlab/objectstore/seaweedfs-<version>/weed`
($FEDLAB_OBJECTSTORE_DIR instead of ~/.cache/fedlab/objectstore). Its go.mod has replace directives,
which `go install module@version` refuses, so the module is downloaded through the Go module proxy,
copied somewhere writable and built with `go build ./weed` inside it. That needs Go (the version its
go.mod names, 1.26.6 for the pinned one; Debian bookworm's golang-go is 1.19, too old).

A store is one `weed server` process: master, volume server, filer and S3 gateway, with its data in
one folder; started again on that folder (after a stop or a kill) it keeps its objects and its
master's ports. Only the S3 gateway listens on the address asked for (127.0.0.1 for a test, the host's
end of a cluster's bridge such as 10.250.0.1 for pods on every node); the others listen on
loopback. Its identities config (SeaweedFS's `-s3.config`) holds one admin identity with the given
access key and secret. Telemetry to seaweedfs.com is off.

    store = start(data_dir, host="10.250.0.1", port=8333, access_key=KEY, secret_key=SECRET,
                  bucket="fedlab")
    store.endpoint        # http://10.250.0.1:8333
    store.hadoop_conf()   # the fs.s3a.* settings a Spark session needs to reach it
    stop(data_dir)        # or store.stop()

Or as a script (its state, pid and log are in the data folder, so `stop` finds it):

    python3 helm/object_store.py build
    AWS_ACCESS_KEY_ID=KEY AWS_SECRET_ACCESS_KEY=SECRET \\
        python3 helm/object_store.py start --data DIR --host 10.250.0.1 --port 8333 --bucket fedlab
    python3 helm/object_store.py stop --data DIR

Measured on this machine (2 cores): see docs/kubernetes.md, "Delta in an object store".
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import hashlib
import hmac
import json
import os
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

SEAWEEDFS_MODULE = "github.com/seaweedfs/seaweedfs"
SEAWEEDFS_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
REGION = "us-east-1"        # SeaweedFS takes any; the AWS SDK needs one to sign with
STATE_FILE = "object-store.json"
GO_MISSING = ("Go is needed to build SeaweedFS's weed for the object store (go not found on PATH; "
              "its go.mod asks for Go 1.26.6+, Debian bookworm's golang-go is 1.19: install Go from go.dev)")


class ObjectStoreError(Exception):
    """The object store could not be built, started or stopped: one line saying why."""


def log(message: str) -> None:
    print(f"[object-store] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- building weed
def cache_dir() -> Path:
    return Path(os.environ.get("FEDLAB_OBJECTSTORE_DIR") or Path.home() / ".cache" / "fedlab" / "objectstore")


def weed_path() -> Path:
    """Where the pinned version's weed binary is (or will be) cached."""
    return cache_dir() / f"seaweedfs-{SEAWEEDFS_VERSION}" / "weed"


def build_problem() -> str | None:
    """Why weed can be neither found nor built, or None (fedlab/preflight.py asks before `make test`)."""
    if weed_path().is_file() or shutil.which("go"):
        return None
    return "is not on PATH, and SeaweedFS's weed is not built yet"


def build() -> Path:
    """Builds weed at the pinned version into the cache, once (another process building it
    meanwhile is waited for); returns its path. Prints progress and the time it took."""
    exe = weed_path()
    if exe.is_file():
        return exe
    go = shutil.which("go")
    if go is None:
        raise ObjectStoreError(GO_MISSING)
    exe.parent.mkdir(parents=True, exist_ok=True)
    with open(exe.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # one build at a time; the waiter finds it done
        if exe.is_file():
            return exe
        started = time.monotonic()
        log(f"downloading SeaweedFS {SEAWEEDFS_VERSION} through the Go module proxy ...")
        module = json.loads(_go([go, "mod", "download", "-json", f"{SEAWEEDFS_MODULE}@{SEAWEEDFS_VERSION}"],
                                cwd=exe.parent, started=started))
        with tempfile.TemporaryDirectory(dir=exe.parent) as tmp:
            source = Path(tmp) / "src"
            shutil.copytree(module["Dir"], source)   # the module cache is read-only; go build writes
            for path in [source, *source.rglob("*")]:
                path.chmod(path.stat().st_mode | stat.S_IWUSR)
            log("building weed (7 minutes on 2 cores the first time) ...")
            _go([go, "build", "-trimpath", "-o", str(Path(tmp) / "weed"), "./weed"], cwd=source, started=started)
            os.replace(Path(tmp) / "weed", exe)
        log(f"weed built in {time.monotonic() - started:.0f} s: {exe}")
    return exe


def _go(cmd: list[str], cwd: Path, started: float) -> str:
    """Runs a go command, saying every 30 s that it still runs; its output, or one error line
    with the end of what it printed."""
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True)
        while True:
            try:
                proc.wait(timeout=30)
                break
            except subprocess.TimeoutExpired:
                log(f"go {cmd[1]}: {time.monotonic() - started:.0f} s so far")
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        tail = " | ".join(text.strip().splitlines()[-5:])
        raise ObjectStoreError(f"go {' '.join(cmd[1:3])} failed (exit {proc.returncode}): {tail}")
    return text


# ---------------------------------------------------------------------- running it
@dataclass
class ObjectStore:
    """A running store, as its state file in the data folder records it."""

    data: str
    host: str
    port: int
    access_key: str
    secret_key: str
    bucket: str | None
    pid: int
    weed: str

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def hadoop_conf(self, bucket: str | None = None) -> dict[str, str]:
        """The Hadoop settings through which S3A reaches this store with its credentials, for
        every bucket, or only for `bucket` (fs.s3a.bucket.<bucket>.*, which a running Spark
        session can take without touching its other file systems). Prefix each key with
        `spark.hadoop.` to pass it as a Spark setting."""
        prefix = f"fs.s3a.bucket.{bucket}." if bucket else "fs.s3a."
        return {prefix + key: value for key, value in [
            ("endpoint", self.endpoint), ("endpoint.region", REGION), ("path.style.access", "true"),
            ("access.key", self.access_key), ("secret.key", self.secret_key),
            ("aws.credentials.provider", "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")]}

    def rss_mb(self) -> float:
        """The weed process's resident memory, in MB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self, timeout: float = 5.0) -> None:
        stop(self.data, timeout)


def start(data: str | Path, access_key: str, secret_key: str, host: str = "127.0.0.1", port: int = 0,
          bucket: str | None = None, timeout: float = 60.0) -> ObjectStore:
    """Starts a store with its data in `data` (created if missing; a store stopped earlier keeps
    its objects), its S3 gateway on host:port (0: a free port), and waits until the gateway
    answers with these credentials; creates `bucket` if given. On failure the process is stopped
    and the error names the end of its log (data/weed.log)."""
    data = Path(data).resolve()
    if not access_key or not secret_key:
        raise ObjectStoreError("an access key and a secret key are needed (--access-key/--secret-key, "
                               "or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")
    running = _read_state(data)
    if running is not None and _is_weed(running):
        raise ObjectStoreError(f"{data}: a store already runs there (pid {running.pid}, {running.endpoint})")
    exe = build()
    data.mkdir(parents=True, exist_ok=True)
    identities = data / "identities.json"
    _write_private(identities, {"identities": [{
        "name": "fedlab", "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
        "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]})
    master, master_grpc = _master_ports(data)
    ports = _free_ports([host] * (not port) + ["127.0.0.1"] * 5, avoid=(master, master_grpc))
    s3_port = port or ports.pop(0)
    volume, volume_grpc, filer, filer_grpc, s3_grpc = ports
    # Volumes of 256 MB, as many as the disk holds (-volume.max=0), rather than weed's 30 GB and 8:
    # every bucket takes volumes of its own. No 10 s wait at stop for masters to stop routing
    # writes to the volume server: here they stop with it. One master: a resumed one need not wait
    # weed's 10 s election timeout to lead.
    cmd = [str(exe), "server", f"-dir={data / 'objects'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
           "-master.telemetry=false", "-master.electionTimeout=1s", f"-master.port={master}", f"-master.port.grpc={master_grpc}",
           "-master.volumeSizeLimitMB=256", "-volume.max=0", "-volume.preStopSeconds=0", f"-volume.port={volume}",
           f"-volume.port.grpc={volume_grpc}", "-filer", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
           "-s3", f"-s3.port={s3_port}", f"-s3.port.grpc={s3_grpc}", f"-s3.ip.bind={host}",
           f"-s3.config={identities}", "-s3.port.iceberg=0", "-s3.port.lance=0"]
    (data / "objects").mkdir(exist_ok=True)
    with open(data / "weed.log", "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)   # outlives the `start` command that made it
    store = ObjectStore(str(data), host, s3_port, access_key, secret_key, bucket, proc.pid, str(exe))
    _write_private(data / STATE_FILE, asdict(store))
    started = time.monotonic()
    try:
        _wait_ready(store, proc, started + timeout)
        if bucket:
            _s3(store, "PUT", f"/{bucket}", ok=(200, 409))   # 409: it is there already
    except ObjectStoreError:
        stop(data)
        raise
    log(f"SeaweedFS S3 at {store.endpoint} ready in {time.monotonic() - started:.1f} s "
        f"(pid {proc.pid}, {store.rss_mb():.0f} MB resident, data {data}{f', bucket {bucket}' if bucket else ''})")
    return store


def stop(data: str | Path, timeout: float = 5.0) -> bool:
    """Stops the store whose state is in `data`: SIGTERM, and SIGKILL if it has not exited after
    `timeout` seconds. False if none ran there.

    Once it has served, `weed server` takes 15 s to exit: its filer waits for a flush of its change
    feed (/topics/.system/log) that cannot finish, its own volume server having stopped first.
    What it acknowledged (objects in the volumes, their metadata in the filer's leveldb) is
    written by then: tests/test_object_store.py restarts a store stopped so and reads it all."""
    data = Path(data).resolve()
    store = _read_state(data)
    if store is None:
        return False
    running = _is_weed(store)
    if running:
        os.killpg(store.pid, signal.SIGTERM)
        if not _exited(store.pid, timeout):
            os.killpg(store.pid, signal.SIGKILL)
            _exited(store.pid, timeout)
    (data / STATE_FILE).unlink(missing_ok=True)
    return running


def _wait_ready(store: ObjectStore, proc: subprocess.Popen, deadline: float) -> None:
    """Until the gateway lists the buckets with the store's credentials (the filer and the volume
    server it needs come up first)."""
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ObjectStoreError(f"weed exited with status {proc.returncode}: {_log_tail(store)}")
        try:
            _s3(store, "GET", "/", ok=(200,))
            return
        except (ObjectStoreError, OSError) as err:
            last = str(err)
        time.sleep(0.2)
    raise ObjectStoreError(f"the S3 gateway at {store.endpoint} did not answer within the time ({last}); "
                           f"weed.log: {_log_tail(store)}")


def _s3(store: ObjectStore, method: str, path: str, ok: tuple[int, ...], body: bytes = b"",
        timeout: float = 10.0) -> int:
    """One S3 request, signed with AWS Signature Version 4; its status."""
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    digest = hashlib.sha256(body).hexdigest()
    headers = {"host": f"{store.host}:{store.port}", "x-amz-content-sha256": digest, "x-amz-date": stamp}
    names = ";".join(sorted(headers))
    canonical = "\n".join([method, path, "", *(f"{k}:{headers[k]}" for k in sorted(headers)), "", names, digest])
    scope = f"{day}/{REGION}/s3/aws4_request"
    key = ("AWS4" + store.secret_key).encode()
    for part in (day, REGION, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    text = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    signature = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
    headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={store.access_key}/{scope}, "
                                f"SignedHeaders={names}, Signature={signature}")
    request = urllib.request.Request(store.endpoint + path, data=body or None, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            status, body = reply.status, b""
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read()
    if status not in ok:
        code = re.search(rb"<Code>([^<]*)</Code>", body)
        raise ObjectStoreError(f"{method} {path} at {store.endpoint} answered HTTP {status}"
                               + (f" {code[1].decode()}" if code else ""))
    return status


def discard(data: str | Path) -> None:
    """Stops the store whose data is in `data`, if one runs, and deletes the folder."""
    stop(data)
    shutil.rmtree(data, ignore_errors=True)


def _master_ports(data: Path) -> tuple[int, int]:
    """The master's HTTP and gRPC ports: those of the store's first start, kept in the data folder.

    weed keeps the master's state (its Raft log, the cluster's topology id) in <dir>/m<port>, with
    the master's address in it. A master restarted on other ports starts a new cluster whose
    topology id the volumes on disk do not carry, and weed then freezes volume growth: every write
    that needs a new volume fails with HTTP 500."""
    kept = data / "master-ports.json"
    try:
        ports = tuple(json.loads(kept.read_text()))
    except FileNotFoundError:
        ports = tuple(_free_ports(["127.0.0.1"] * 2))
        kept.write_text(json.dumps(ports))
        return ports
    for number in ports:
        if not _bindable("127.0.0.1", number, reuse_address=True):   # as Go's listeners: TIME_WAIT is free
            raise ObjectStoreError(f"{data}: port {number} is taken, and this store's master keeps its "
                                   f"state under it (see {kept})")
    return ports


def _free_ports(hosts: list[str], avoid: tuple[int, ...] = ()) -> list[int]:
    """A port free now on each host, all distinct and none in `avoid`, below the kernel's
    ephemeral range: there the outgoing connections of weed's own services, which start one after
    the other, could take a port before the service meant to listen on it."""
    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    pick, ports = random.SystemRandom(), []
    while len(ports) < len(hosts):
        port = pick.randrange(10000, ephemeral)
        if _bindable(hosts[len(ports)], port) and port not in ports and port not in avoid:
            ports.append(port)
    return ports


def _bindable(host: str, port: int, reuse_address: bool = False) -> bool:
    """Whether a socket can be bound to host:port now."""
    with socket.socket() as probe:
        if reuse_address:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _write_private(path: Path, doc: dict) -> None:
    """JSON that holds the secret key, readable by this user only from its first byte."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(doc, out, indent=2)


def _read_state(data: Path) -> ObjectStore | None:
    try:
        return ObjectStore(**json.loads((data / STATE_FILE).read_text()))
    except FileNotFoundError:
        return None


def _is_weed(store: ObjectStore) -> bool:
    """Whether the recorded pid is still this store's weed (not a pid reused since, nor a zombie)."""
    try:
        argv = Path(f"/proc/{store.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return argv[0].decode(errors="replace") == store.weed


def _exited(pid: int, timeout: float) -> bool:
    """Waits up to `timeout` seconds for `pid` to be gone; reaps it when this process started it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:   # another process's child (a `start` command's): init reaps it
            if not Path(f"/proc/{pid}").exists():
                return True
        time.sleep(0.05)
    return False


def _log_tail(store: ObjectStore) -> str:
    lines = (Path(store.data) / "weed.log").read_text(errors="replace").strip().splitlines()
    return " | ".join(lines[-3:]) or "(empty)"


# ---------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="object_store.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build", help="build weed into the cache (once)")
    make.add_argument("--optional", action="store_true",
                      help="without Go, say so and exit 0 (make test: the tests that need weed say why they skip)")
    run = sub.add_parser("start", help="start a store and wait until its S3 gateway answers")
    run.add_argument("--data", required=True, metavar="DIR", help="its data, state and log")
    run.add_argument("--host", default="127.0.0.1", help="address of the S3 gateway (default 127.0.0.1)")
    run.add_argument("--port", type=int, default=8333, help="port of the S3 gateway (default 8333; 0: a free one)")
    run.add_argument("--bucket", help="a bucket to create")
    run.add_argument("--access-key", default=os.environ.get("AWS_ACCESS_KEY_ID"),
                     help="default $AWS_ACCESS_KEY_ID")
    run.add_argument("--secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY"),
                     help="default $AWS_SECRET_ACCESS_KEY")
    halt = sub.add_parser("stop", help="stop the store whose data is in DIR")
    halt.add_argument("--data", required=True, metavar="DIR")
    args = p.parse_args(argv)
    try:
        if args.command == "build" and args.optional and build_problem():
            log(f"not built: {GO_MISSING}")
        elif args.command == "build":
            print(build())
        elif args.command == "start":
            store = start(args.data, args.access_key, args.secret_key, args.host, args.port, args.bucket)
            print(store.endpoint)
        elif not stop(args.data):
            log(f"no store runs with its data in {args.data}")
    except ObjectStoreError as err:
        print(f"object store: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
