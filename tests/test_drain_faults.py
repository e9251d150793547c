"""Layer 3: a drain (SIGTERM) rides out a store fault as the loop does.

One supervisor, a long job, SIGTERM with a short drain_grace, then the
store fails during the drain: the PostgreSQL backend terminated, the server
restarted, a SQLite database held locked past the busy timeout. The drain
cancels the job, keeps its exit and the cancel reason, retries until the
store answers, records the run failed as cancelled by the drain and exits 0;
`audit` is clean and the log has words, never a driver's raw line.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.daemon import Daemon, StoreName, utc_in, wait_for
from tests.pgserver import PostgresServer, dbname
from tests.test_resource_faults import apply, assert_audit_clean, events, one_shot, runs
from wfsched.store.location import resolve_store

JOB = "sleep 30"
DRAIN_REASON = "cancelled: the supervisor shut down and drain_grace (1.5s) expired"


def start_long_job(store: StoreName, tmp_path: Path, *args: str) -> Daemon:
    daemon = Daemon(store, "--drain-grace", "1.5", *args)
    daemon.wait_started()
    apply(store, tmp_path / "defs", {"long": one_shot(utc_in(1), JOB, 'kill_grace = "1s"\n')})
    wait_for(lambda: "started run=run-000001" in daemon.text(), what="long to start")
    return daemon


def assert_cancelled_by_the_drain(store: StoreName) -> None:
    (run,) = runs(store)  # type: ignore[arg-type]
    assert run["state"] == "failed", run
    assert run["reason"] == DRAIN_REASON, run
    assert_audit_clean(store)  # type: ignore[arg-type]


def assert_words_only(daemon: Daemon) -> None:
    text = daemon.text()
    assert "psycopg" not in text and "Pipeline" not in text and "0x" not in text, text
    assert "Traceback" not in text, text


def test_a_backend_terminated_during_the_drain_is_ridden_out(
    pg_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    daemon = start_long_job(pg_url, tmp_path)
    daemon.proc.terminate()
    wait_for(lambda: events(daemon, "draining"), what="the drain to begin")
    assert pg_server.terminate(dbname=dbname(pg_url)) >= 1
    assert daemon.wait_exit(30) == 0, daemon.text()
    assert events(daemon, "fault") and events(daemon, "fault-cleared"), daemon.text()
    assert "left=0" in events(daemon, "drained")[0], daemon.text()
    assert_words_only(daemon)
    assert_cancelled_by_the_drain(pg_url)


def test_a_server_restart_during_the_drain_is_ridden_out(
    pg_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    daemon = start_long_job(pg_url, tmp_path)
    daemon.proc.terminate()
    wait_for(lambda: events(daemon, "draining"), what="the drain to begin")
    time.sleep(1.0)  # the restart lands as the grace expires and the job is cancelled
    pg_server.restart()
    assert daemon.wait_exit(40) == 0, daemon.text()
    assert "left=0" in events(daemon, "drained")[0], daemon.text()
    assert_words_only(daemon)
    assert_cancelled_by_the_drain(pg_url)


def test_a_sqlite_store_locked_during_the_drain_is_ridden_out(tmp_path: Path) -> None:
    """Locked for 10 s, past the cancelled run's kill_grace + 5 s: the drain
    keeps retrying (drain_record_window) instead of leaving the run `running`."""
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    (store / "config.toml").write_text("busy_timeout = 0.3\n")
    daemon = start_long_job(store, tmp_path)
    locker = subprocess.Popen(
        [
            "python3",
            "-c",
            "import sqlite3, sys, time\n"
            "db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n"
            "db.execute('BEGIN EXCLUSIVE')\n"
            "print('locked', flush=True)\n"
            "time.sleep(float(sys.argv[2]))\n"
            "db.execute('ROLLBACK')\n",
            str(store / "wfsched.db"),
            "10",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert locker.stdout is not None and locker.stdout.readline() == "locked\n"
        daemon.proc.terminate()
        assert daemon.wait_exit(30) == 0, daemon.text()
        assert locker.wait(10) == 0
    finally:
        if locker.poll() is None:
            locker.kill()
            locker.wait()
    assert events(daemon, "fault") and events(daemon, "fault-cleared"), daemon.text()
    assert "kind=locked" in events(daemon, "fault")[0], daemon.text()
    assert "left=0" in events(daemon, "drained")[0], daemon.text()
    assert_cancelled_by_the_drain(store)


def test_a_store_that_never_answers_leaves_the_ends_to_the_next_start(
    pg_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    """Past the drain's deadline: exit 1 naming the run, its exit kept on
    disk; the next start records it cancelled by the drain, not abandoned."""
    local = resolve_store(pg_url).local_dir
    local.mkdir(parents=True, exist_ok=True)
    (local / "config.toml").write_text("drain_record_window = 1\n")
    daemon = start_long_job(pg_url, tmp_path)
    pg_server.shut_down()
    try:
        daemon.proc.terminate()
        assert daemon.wait_exit(30) == 1, daemon.text()
    finally:
        pg_server.start_again()
    (left,) = events(daemon, "drain-left")
    assert "run=run-000001" in left and "state=ended" in left, daemon.text()
    assert "left=1" in events(daemon, "drained")[0], daemon.text()
    last = daemon.text().strip().splitlines()[-1]
    assert last.startswith("wfsched: error: the drain could not record the end of 1 run"), last
    assert "(run-000001)" in last and "next `wfsched supervise` on this host" in last, last
    assert_words_only(daemon)
    assert [run["state"] for run in runs(pg_url)] == ["running"]  # type: ignore[arg-type]
    again = Daemon(pg_url)
    again.wait_started()
    try:
        wait_for(lambda: runs(pg_url)[0]["state"] == "failed", what="the run recorded")  # type: ignore[arg-type]
        (run,) = runs(pg_url)  # type: ignore[arg-type]
        assert str(run["reason"]).startswith(DRAIN_REASON + "; process group"), run
        assert "recovered run=run-000001 outcome=cancelled" in again.text(), again.text()
        assert_audit_clean(pg_url)  # type: ignore[arg-type]
    finally:
        assert again.stop() == 0


def test_a_broken_pipeline_leaves_no_raw_driver_line(
    pg_server: PostgresServer, pg_url: str
) -> None:
    """psycopg logs `error ignored terminating <psycopg.Pipeline [BAD] ...>`
    when a connection breaks inside a pipeline (the store's held writes);
    with the store loaded, that line never reaches stderr."""
    script = (
        "import sys, threading, psycopg\n"
        "import wfsched.store.postgres\n"
        "url, admin, name = sys.argv[1:]\n"
        "conn = psycopg.connect(url, autocommit=True)\n"
        "def kill():\n"
        "    with psycopg.connect(admin, autocommit=True) as other:\n"
        "        other.execute('SELECT pg_terminate_backend(pid) FROM pg_stat_activity'\n"
        "                      ' WHERE datname = %s AND pid <> pg_backend_pid()', [name])\n"
        "threading.Timer(0.3, kill).start()\n"
        "try:\n"
        "    with conn.pipeline():\n"
        "        conn.execute('SELECT 1')\n"
        "        conn.execute('SELECT pg_sleep(2)')\n"
        "        conn.execute('SELECT 2').fetchall()\n"
        "except psycopg.OperationalError as exc:\n"
        "    print('raised', type(exc).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, pg_url, pg_server.url(), dbname(pg_url)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.stdout.startswith("raised"), done.stdout + done.stderr
    assert "error ignored" not in done.stderr and "Pipeline" not in done.stderr, done.stderr
