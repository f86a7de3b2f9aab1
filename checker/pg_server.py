"""A private PostgreSQL server: initdb, serve on a unix socket in a private temporary directory
at a free port, fsync off, WAL for logical decoding; stopped afterwards.

For the checker's PostgreSQL oracle when no server is given (`fedlab check --oracle postgres`
without --pg-dsn), for the tests, and for the sources of a run with `--source-engine postgres`
(live.federation): their server keeps its data directory in the run directory, so that
`fedlab check RUN_DIR` can start it again later to read the sources' histories. Without one the
data directory is temporary too, and removed with the rest. PostgreSQL refuses to run as root,
so as root every server command runs as the `postgres` user (`runuser -u postgres --`), which
then owns the directories. TCP is off: authentication is `trust`, and the socket's directory
(mode 0700) is the only gate.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fedlab.fedmodel.errors import ModelError
from fedlab.preflight import POSTGRES, postgres_problem, postgres_programs

USER = "fedlab"                          # the server's superuser


class PostgresServerError(ModelError):
    """PostgreSQL is not installed, or the server would not start."""


@dataclass
class PostgresServer:
    root: Path          # the temporary directory: socket/, server.log (and data/ for a throwaway server)
    port: int
    bin_dir: Path
    run_as: str | None  # the OS user the server runs as, when not this process's
    data: Path          # the data directory: root/data, or one that outlives the server
    options: str = ""   # the server's settings (pg_ctl -o), to start it again with

    @property
    def dsn(self) -> str:
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        return f"host={self.root / 'socket'} port={self.port} user={USER} dbname={database}"

    @property
    def pid(self) -> int | None:
        """The server's main process (the postmaster, parent of every backend) while it runs."""
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    @classmethod
    def start(cls, data: Path | None = None, wal_level: str = "logical") -> "PostgresServer":
        """A new server, ready for connections; PostgresServerError when it cannot start. `data`:
        a data directory to keep (created and initialised the first time, reused as it is after;
        its parent directories must be searchable by the server's user); None: a throwaway one.
        `wal_level`: "logical" lets sources capture from the WAL (source_node.logical_capture)."""
        bin_dir = find_binaries()
        run_as, account = None, None
        if os.geteuid() == 0:
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresServerError("PostgreSQL refuses to run as root, and there is no user "
                                          "postgres to run it as") from None
            run_as = "postgres"
        root = Path(tempfile.mkdtemp(prefix="fedlab-pg-"))
        server = cls(root, _free_port(), bin_dir, run_as, Path(data).resolve() if data else root / "data")
        try:
            (server.root / "socket").mkdir(mode=0o700)
            owned = [server.root, server.root / "socket"]
            if data is not None:
                server._prepare_kept(owned)
            if run_as:
                for path in owned:
                    os.chown(path, account.pw_uid, account.pw_gid)
            if not (server.data / "PG_VERSION").exists():
                server._run("initdb", "-D", str(server.data), f"--username={USER}", "--auth=trust", "--no-locale",
                            "--encoding=UTF8", "--no-sync")
            server.options = (f"-c listen_addresses='' -c unix_socket_directories='{server.root / 'socket'}' "
                       f"-p {server.port} -c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                       # Logical decoding, for sources with `capture: logical` (source_node.logical_capture);
                       # a commit reaches the decoder once the WAL writer flushes it, every wal_writer_delay.
                       f"-c wal_level={wal_level} -c max_replication_slots=64 -c max_wal_senders=64 "
                       f"-c wal_writer_delay=10ms")
            server._run("pg_ctl", "-D", str(server.data), "-l", "server.log", "-w", "-t", "60", "-o", server.options,
                        "start")
        except BaseException:
            server.stop()
            raise
        return server

    def _prepare_kept(self, owned: list[Path]) -> None:
        """Creates a kept data directory (mode 0700, for the server's user) if it is not there."""
        if self.run_as:
            blocked = [p for p in self.data.parents if not p.stat().st_mode & 0o001]
            if blocked:
                raise PostgresServerError(f"{blocked[0]} is not searchable by the user {self.run_as} the server runs "
                                          f"as, so it cannot reach {self.data} (chmod o+x {blocked[0]})")
        if not self.data.exists():
            self.data.parent.mkdir(parents=True, exist_ok=True)
            self.data.mkdir(mode=0o700)
            owned.append(self.data)

    def database(self, name: str) -> str:
        """Creates database `name` unless it exists; its DSN."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as con:
            if not con.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchall():
                con.execute(f'CREATE DATABASE "{name}"')
        return self.dsn_for(name)

    def stop(self) -> None:
        """Stops the server and removes its temporary directory. A throwaway server holds nothing
        worth a clean shutdown; a kept data directory is shut down cleanly and stays."""
        if (self.data / "postmaster.pid").exists():
            try:
                kept = self.data != self.root / "data"
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast" if kept else "immediate", "-w", "stop")
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
    """The directory holding initdb, pg_ctl and postgres (fedlab/preflight.py's finder)."""
    found = postgres_programs()
    if found is None:
        raise PostgresServerError(f"{POSTGRES.line(postgres_problem())}; or give a server's DSN")
    return found


def _free_port() -> int:
    # The socket and its lock file live in a private directory, so any port would do there; one
    # that nothing listens on keeps the server's address unambiguous should TCP be switched on.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
