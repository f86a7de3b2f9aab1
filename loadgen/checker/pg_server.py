"""A throwaway PostgreSQL server: initdb into a temporary directory, serve on a unix socket in a
private directory at a free port, fsync off; stopped and removed afterwards.

For the checker's PostgreSQL oracle when no server is given (`fedlab check --oracle postgres`
without --pg-dsn) and for the tests. PostgreSQL refuses to run as root, so as root every server
command runs as the `postgres` user (`runuser -u postgres --`), which then owns the directory.
TCP is off: authentication is `trust`, and the socket's directory (mode 0700) is the only gate.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fedmodel.errors import ModelError

SEARCHED = "/usr/lib/postgresql/*/bin"   # Debian's layout, one directory per major version
USER = "fedlab"                          # the server's superuser


class PostgresServerError(ModelError):
    """PostgreSQL is not installed, or the server would not start."""


@dataclass
class PostgresServer:
    root: Path          # the temporary directory: data/, socket/, server.log
    port: int
    bin_dir: Path
    run_as: str | None  # the OS user the server runs as, when not this process's

    @property
    def dsn(self) -> str:
        return f"host={self.root / 'socket'} port={self.port} user={USER} dbname=postgres"

    @classmethod
    def start(cls) -> "PostgresServer":
        """A new server, ready for connections; PostgresServerError when it cannot start."""
        bin_dir = find_binaries()
        run_as = None
        if os.geteuid() == 0:
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresServerError("PostgreSQL refuses to run as root, and there is no user "
                                          "postgres to run it as") from None
            run_as = "postgres"
        server = cls(Path(tempfile.mkdtemp(prefix="fedlab-pg-")), _free_port(), bin_dir, run_as)
        try:
            (server.root / "socket").mkdir(mode=0o700)
            if run_as:
                for path in (server.root, server.root / "socket"):
                    os.chown(path, account.pw_uid, account.pw_gid)
            server._run("initdb", "-D", "data", f"--username={USER}", "--auth=trust", "--no-locale",
                        "--encoding=UTF8", "--no-sync")
            options = (f"-c listen_addresses='' -c unix_socket_directories='{server.root / 'socket'}' "
                       f"-p {server.port} -c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            server._run("pg_ctl", "-D", "data", "-l", "server.log", "-w", "-t", "60", "-o", options, "start")
        except BaseException:
            server.stop()
            raise
        return server

    def stop(self) -> None:
        """Stops the server (it holds nothing worth a clean shutdown) and removes its directory."""
        if (self.root / "data" / "postmaster.pid").exists():
            try:
                self._run("pg_ctl", "-D", "data", "-m", "immediate", "-w", "stop")
            except PostgresServerError:
                pass   # already gone: the directory goes all the same
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "PostgresServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self, program: str, *args: str) -> None:
        command = [str(self.bin_dir / program), *args]
        if self.run_as:
            command = ["runuser", "-u", self.run_as, "--", *command]
        try:
            # cwd: the server's user may not be allowed into ours.
            done = subprocess.run(command, cwd=self.root, capture_output=True, text=True, timeout=180)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise PostgresServerError(f"{program}: {err}") from None
        if done.returncode != 0:
            log = self.root / "server.log"
            detail = (done.stderr.strip() or (log.read_text().strip() if log.exists() else "")).splitlines()
            raise PostgresServerError(f"{program} failed (exit {done.returncode}): "
                                      f"{detail[-1] if detail else 'no message'}")


def find_binaries() -> Path:
    """The directory holding initdb and pg_ctl: on PATH, else the newest under SEARCHED."""
    on_path = shutil.which("pg_ctl")
    candidates = [Path(on_path).parent] if on_path else []
    candidates += sorted((Path(d) for d in glob.glob(SEARCHED)), key=_major_version, reverse=True)
    for directory in candidates:
        if all(os.access(directory / p, os.X_OK) for p in ("initdb", "pg_ctl", "postgres")):
            return directory
    raise PostgresServerError(f"PostgreSQL's server programs (initdb, pg_ctl, postgres) are not installed: "
                              f"none on PATH or in {SEARCHED} (install PostgreSQL, or give a server's DSN)")


def _major_version(bin_dir: Path) -> int:
    name = bin_dir.parent.name
    return int(name) if name.isdigit() else 0


def _free_port() -> int:
    # The socket and its lock file live in a private directory, so any port would do there; one
    # that nothing listens on keeps the server's address unambiguous should TCP be switched on.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
