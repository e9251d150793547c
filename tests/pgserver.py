"""A real PostgreSQL server for the tests: one per test session, one database per test.

The server runs from a temporary directory and listens only on a Unix socket
there (no TCP port to collide with anything). PostgreSQL refuses to run as
root and CI runs as root, so as root the server binaries run as the
unprivileged `postgres` user (which Debian's package creates) through
`runuser`, and the temporary directory is made traversable for it. fsync is
off: a test server's durability is not what the tests check, and each fresh
database then costs milliseconds.

Without server binaries the PostgreSQL tests skip with the reason, except
on CI (`CI=true`), where a missing server is a failure: CI must test both
stores.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

SUPERUSER = "wfsched_test"
SEARCH = ("/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin", "/usr/pgsql-*/bin")


def find_bindir() -> Path | None:
    """The newest directory holding both `initdb` and `pg_ctl`, or None."""
    on_path = shutil.which("pg_ctl")
    candidates = [Path(on_path).parent] if on_path else []
    for pattern in SEARCH:
        candidates.extend(
            Path(found)
            for found in sorted(
                glob.glob(pattern), key=lambda name: _version_key(name), reverse=True
            )
        )
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "pg_ctl").is_file():
            return directory
    return None


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split("/") if part.isdigit())


class PostgresServer:
    """initdb + pg_ctl in a temporary directory; `url()` names a fresh database."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.base = Path(tempfile.mkdtemp(prefix="wfsched-pg-"))
        self.data = self.base / "data"
        self.socket_dir = self.base
        self.log = self.base / "server.log"
        self._as_user: list[str] = []
        self._names = itertools.count(1)

    def start(self) -> None:
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
            os.chmod(self.base, 0o755)
            os.chown(self.base, owner.pw_uid, owner.pw_gid)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        self._start()

    def _start(self) -> None:
        options = (
            f"-k {self.socket_dir} -c listen_addresses='' -c fsync=off"
            " -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start")

    def restart(self, mode: str = "fast") -> None:
        """A fast shutdown (every session terminated), then a start."""
        self.shut_down()
        self._start()

    def shut_down(self) -> None:
        """A fast shutdown: sessions terminated, the server gone until `start_again`."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def start_again(self) -> None:
        self._start()

    @property
    def as_user(self) -> list[str]:
        """The prefix that runs a command as the server's user (empty unless root)."""
        return list(self._as_user)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        result = subprocess.run(
            [*self._as_user, str(self.bindir / program), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{program} failed: {result.stdout}{result.stderr}{log}")

    def url(self, dbname: str = "postgres") -> str:
        """A libpq URL reaching `dbname` over the server's socket."""
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.socket_dir}"

    def create_database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 STRATEGY FILE_COPY')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = dbname(url)
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def terminate(self, application_name: str | None = None, *, dbname: str) -> int:
        """Kill the backends connected to `dbname` (optionally one application's); how many."""
        import psycopg

        query = (
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()"
        )
        params: list[str] = [dbname]
        if application_name is not None:
            query += " AND application_name = %s"
            params.append(application_name)
        with psycopg.connect(self.url(), autocommit=True) as conn:
            row = conn.execute(query, params).fetchone()
        return int(row[0]) if row else 0


def integrity_errors() -> tuple[type[Exception], ...]:
    """What either backend raises when its database refuses a write."""
    import sqlite3

    try:
        import psycopg
    except ImportError:
        return (sqlite3.IntegrityError,)
    return (sqlite3.IntegrityError, psycopg.IntegrityError)


def dbname(url: str) -> str:
    """The database a URL names (libpq's parser, as the store uses)."""
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(url)["dbname"])
