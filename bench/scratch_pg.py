"""A durable scratch PostgreSQL server for the `--store URL` benchmarks.

    python bench/scratch_pg.py start /tmp/wfsched-pg   # initdb if needed, start, print URLs
    python bench/scratch_pg.py stop /tmp/wfsched-pg    # fast shutdown (the directory stays)

Unlike the tests' server (tests/pgserver.py: fsync off, one database per
test), this one keeps PostgreSQL's default durability (fsync on,
synchronous_commit on, full_page_writes on): a benchmark's commit costs
what it costs an operator. It listens only on a Unix socket in DIR (no TCP
port). As root the server runs as the unprivileged `postgres` user, as
PostgreSQL refuses to run as root. `start` creates the database `bench`
and prints its URL, the value to pass as `--store`.
"""

from __future__ import annotations

import argparse
import os
import pwd
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from pgserver import find_bindir  # the tests' search for the server binaries

SUPERUSER = "wfsched_bench"


def as_user() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def run(bindir: Path, program: str, *args: str) -> None:
    subprocess.run([*as_user(), str(bindir / program), *args], check=True)


def start(base: Path) -> None:
    bindir = find_bindir()
    if bindir is None:
        sys.exit("no PostgreSQL server binaries (initdb, pg_ctl) found")
    data = base / "data"
    base.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chmod(base, 0o755)
        os.chown(base, owner.pw_uid, owner.pw_gid)
    if not data.exists():
        run(
            bindir,
            "initdb",
            "-D",
            str(data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
        )
    options = f"-k {base} -c listen_addresses='' -c max_connections=100"
    run(
        bindir,
        "pg_ctl",
        "-D",
        str(data),
        "-l",
        str(base / "server.log"),
        "-o",
        options,
        "-w",
        "start",
    )
    import psycopg

    admin = f"postgresql://{SUPERUSER}@/postgres?host={base}"
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = 'bench'").fetchone() is None:
            conn.execute("CREATE DATABASE bench")
    print(f"postgresql://{SUPERUSER}@/bench?host={base}")


def stop(base: Path) -> None:
    bindir = find_bindir()
    assert bindir is not None
    run(bindir, "pg_ctl", "-D", str(base / "data"), "-m", "fast", "-w", "stop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("dir", type=Path, help="the server's directory (data and socket)")
    args = parser.parse_args()
    (start if args.action == "start" else stop)(args.dir.resolve())


if __name__ == "__main__":
    main()
