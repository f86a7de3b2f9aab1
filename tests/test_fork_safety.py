"""A fedlab process forks to exec while its gRPC threads are busy (the warehouse starts Spark's
JVM beside its calls to the sources), and no child dies before its exec (fedlab/__init__.py,
grpc/grpc#43055). Without the setting, about 2% of such children died here (26 of 1,300), so 400
forks all succeed by chance with a probability under 1 in 1,000.
"""

from __future__ import annotations

import os
import subprocess
import sys

FORKS = 400

BUSY_PROCESS = f"""
import subprocess, threading
from concurrent import futures
import fedlab   # first, as every fedlab process imports it
import grpc

server = grpc.server(futures.ThreadPoolExecutor(4))
port = server.add_insecure_port("127.0.0.1:0")
server.start()
call = grpc.insecure_channel(f"127.0.0.1:{{port}}").unary_unary("/fedlab.Nothing/Here")
stop = threading.Event()

def busy():
    while not stop.is_set():
        try:
            call(b"", timeout=0.05)
        except grpc.RpcError:
            pass

for _ in range(4):
    threading.Thread(target=busy, daemon=True).start()
died = sum(subprocess.Popen(["true"], close_fds=True, preexec_fn=lambda: None).wait() != 0 for _ in range({FORKS}))
stop.set()
print(died)
"""


def test_children_forked_beside_busy_grpc_threads_reach_their_exec():
    env = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    done = subprocess.run([sys.executable, "-c", BUSY_PROCESS], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "0", f"children that died before their exec, of {FORKS}: {done.stdout}"
