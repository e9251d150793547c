"""What only a PostgreSQL store has: URLs, passwords, the driver extra, the
database's own guarantees under concurrent writers, and connection loss.

Everything else runs on both stores through the `store_kind` / `make_store`
fixtures in the other test modules.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import psycopg
import pytest
from conftest import CliRun

from tests.daemon import Daemon, utc_ago, wait_for, wfsched, wfsched_json, write_definition
from tests.ha import leader_pid
from tests.pgserver import PostgresServer, dbname
from wfsched.errors import ConflictError, StoreError
from wfsched.store.location import resolve_store
from wfsched.store.pg_migrations import LATEST_PG_VERSION
from wfsched.store.postgres import PostgresStore

SECRET = "s3cr3t-Pa55"


def with_password(url: str, password: str = SECRET) -> str:
    return url.replace("postgresql://wfsched_test@", f"postgresql://wfsched_test:{password}@", 1)


# -- URLs, passwords, the extra ------------------------------------------------------


def test_both_url_schemes_reach_the_store_and_status_names_it_without_password(
    pg_url: str, run_cli: CliRun, make_definition: object
) -> None:
    path = make_definition("job")  # type: ignore[operator]
    assert run_cli("--store", pg_url, "create", str(path))[0] == 0
    aliased = pg_url.replace("postgresql://", "postgres://", 1)
    code, out, err = run_cli("--store", with_password(aliased), "status", "--json")
    assert code == 0, err
    shown = json.loads(out)["store"]
    assert shown.startswith("postgresql://wfsched_test@/") and dbname(pg_url) in shown
    assert SECRET not in out + err


def test_a_password_never_appears_in_a_connection_error(tmp_path: Path) -> None:
    """A server that is not there: one line, exit 1, the store named, no password,
    no driver class name (the real console script, as an operator runs it)."""
    url = f"postgresql://ops:{SECRET}@/wfsched?host={tmp_path}&port=1"
    for args in (["list"], ["status"], ["supervise"], ["audit"]):
        result = wfsched(url, *args)
        assert result.returncode == 1, (args, result.stderr)
        assert result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("wfsched: error: cannot connect to store postgresql://ops@")
        assert SECRET not in result.stderr + result.stdout
        assert "OperationalError" not in result.stderr and "psycopg" not in result.stderr


def test_a_malformed_url_is_a_usage_error_without_the_password(run_cli: CliRun) -> None:
    code, out, err = run_cli("--store", f"postgresql://u:{SECRET}@h/db?bogus=1", "list")
    assert code == 2 and err.count("\n") == 1, err
    assert "not a valid PostgreSQL URL" in err and "bogus" in err
    assert SECRET not in out + err


def test_pgpassword_is_used(pg_server: PostgresServer, pg_url: str) -> None:
    """A password from PGPASSWORD reaches the server (a role that needs one)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE pwuser LOGIN PASSWORD '{SECRET}'")
        conn.execute(f'GRANT ALL ON DATABASE "{dbname(pg_url)}" TO pwuser')
        conn.execute("GRANT ALL ON SCHEMA public TO pwuser")
    hba = pg_server.data / "pg_hba.conf"
    original = hba.read_text()
    try:
        pg_server_reload(pg_server, "local all pwuser scram-sha-256\n" + original)
        url = pg_url.replace("wfsched_test@", "pwuser@", 1)
        refused = wfsched(url, "list")
        assert refused.returncode == 1 and "password" in refused.stderr
        accepted = wfsched(url, "list", env={"PGPASSWORD": SECRET})
        assert accepted.returncode == 0, accepted.stderr
    finally:
        pg_server_reload(pg_server, original)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP OWNED BY pwuser")
            conn.execute("DROP ROLE pwuser")


def pg_server_reload(server: PostgresServer, hba: str) -> None:
    (server.data / "pg_hba.conf").write_text(hba)
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")


def test_without_the_driver_one_clear_error_names_the_extra(tmp_path: Path) -> None:
    """psycopg made unimportable: exit 2 and the pip command, for any command."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "psycopg.py").write_text("raise ImportError('blocked for the test')\n")
    env = {**os.environ, "PYTHONPATH": str(blocker)}
    result = subprocess.run(
        [sys.executable, "-m", "wfsched", "--store", "postgresql:///x", "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "wfsched: error: a PostgreSQL store needs the PostgreSQL driver;"
        " install it with pip install 'wfsched[postgres]'\n"
    )
    # A SQLite store does not need it.
    sqlite = subprocess.run(
        [sys.executable, "-m", "wfsched", "--store", str(tmp_path / "s"), "list"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert sqlite.returncode == 0, sqlite.stderr


def test_reading_commands_create_no_schema(pg_url: str, run_cli: CliRun) -> None:
    assert run_cli("--store", pg_url, "list")[0] == 0
    code, _, err = run_cli("--store", pg_url, "get", "nope")
    assert code == 3, err
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('schedules')").fetchone() == (None,)


# -- the schema ----------------------------------------------------------------------


def test_a_newer_schema_is_refused(pg_url: str, tmp_path: Path) -> None:
    PostgresStore(resolve_store(pg_url)).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE schema_version SET version = 99")
    result = wfsched(pg_url, "list")
    assert result.returncode == 1
    assert "schema version 99 is newer than this wfsched understands" in result.stderr


def test_opening_a_store_reads_its_schema_version_once(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command opens the store: the version check is two round trips,
    made once (it was made twice, by the no-schema check and the migration)."""
    PostgresStore(resolve_store(pg_url)).close()
    reads: list[int] = []
    stored = PostgresStore.schema_version

    def counted(store: PostgresStore) -> int:
        reads.append(1)
        return stored.fget(store)  # type: ignore[attr-defined,no-any-return]

    monkeypatch.setattr(PostgresStore, "schema_version", property(counted))
    PostgresStore(resolve_store(pg_url), create=False).close()
    assert len(reads) == 1


def test_audit_reports_a_dropped_constraint_of_the_schema(pg_url: str) -> None:
    PostgresStore(resolve_store(pg_url)).close()
    assert wfsched(pg_url, "audit").returncode == 0
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER schedules_watermark_monotone ON schedules")
        conn.execute("DROP INDEX occurrences_instant")
    report = json.loads(wfsched(pg_url, "audit", "--json").stdout)
    problems = {v["detail"] for v in report["violations"] if v["check"] == "schema"}
    assert "trigger schedules_watermark_monotone is missing" in problems
    assert "index occurrences_instant is missing" in problems


def test_two_first_opens_at_once_migrate_once(pg_url: str) -> None:
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            PostgresStore(resolve_store(pg_url)).close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with psycopg.connect(pg_url) as conn:
        versions = conn.execute("SELECT version FROM schema_version").fetchall()
    assert versions == [(LATEST_PG_VERSION,)]


# -- concurrent writers -----------------------------------------------------------


def test_concurrent_edits_of_one_revision_admit_exactly_one(
    pg_url: str, tmp_path: Path, make_definition: object
) -> None:
    """Ten `wfsched update --expected-revision 1` at once: exactly one wins (exit 0),
    the rest are conflicts (exit 4); revision 2 exists once."""
    path = make_definition("job")  # type: ignore[operator]
    assert wfsched(pg_url, "create", str(path)).returncode == 0
    edited = make_definition("job", cron="5 * * * *", folder="edited")  # type: ignore[operator]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "wfsched",
                "--store",
                pg_url,
                "update",
                str(edited),
                "--expected-revision",
                "1",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(10)
    ]
    codes = sorted(proc.wait(60) for proc in procs)
    for proc in procs:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()
    assert codes == [0] + [4] * 9, codes
    assert wfsched_json(pg_url, "get", "job")["revision"] == 2


# -- ownership and connection loss ------------------------------------------------------


def test_only_one_supervisor_owns_a_database(pg_url: str) -> None:
    first = PostgresStore(resolve_store(pg_url))
    second = PostgresStore(resolve_store(pg_url))
    try:
        first.take_ownership()
        with pytest.raises(ConflictError, match="another supervisor"):
            second.take_ownership()
        first.close()
        # The server releases a closed session's locks as its backend exits.
        wait_for(lambda: second.supervisor_pid() is None, what="the first session to end")
        second.take_ownership()
    finally:
        second.close()


def test_a_command_on_a_lost_connection_is_one_line(pg_server: PostgresServer, pg_url: str) -> None:
    from wfsched.errors import StoreConnectionLost

    store = PostgresStore(resolve_store(pg_url))
    try:
        pg_server.terminate(dbname=dbname(pg_url))
        with pytest.raises(StoreConnectionLost) as caught:
            store.list_schedules()
        message = str(caught.value)
        assert message.startswith(f"store {resolve_store(pg_url).display}: connection lost: ")
        assert "\n" not in message and "psycopg" not in message
    finally:
        store.close()


def test_the_supervisor_rides_out_a_lost_connection_and_logs_the_outage(
    pg_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    """pg_terminate_backend of the supervisor's session while connections are
    refused for a while: a fault episode (kind unreachable) that reconnects,
    retakes ownership, logs its end with its duration, and afterwards admits
    and completes runs; audit is clean."""
    out = tmp_path / "out"
    daemon = Daemon(pg_url)
    try:
        daemon.wait_started()
        name = dbname(pg_url)
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            try:
                assert pg_server.terminate(dbname=name) >= 1
                wait_for(lambda: " fault kind=unreachable" in daemon.text(), what="the fault line")
                refused = wfsched(pg_url, "list")
                assert refused.returncode == 1 and refused.stderr.count("\n") == 1
                # A one-shot command failed for good: it promises no retry.
                assert "pg_isready" in refused.stderr, refused.stderr
                assert "reconnects" not in refused.stderr, refused.stderr
            finally:
                admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        wait_for(lambda: " fault-cleared " in daemon.text(), timeout=30, what="reconnection")
        assert daemon.proc.poll() is None
        line = next(x for x in daemon.text().splitlines() if " fault-cleared " in x)
        assert "kind=unreachable" in line and "duration=" in line
        # The supervisor does reconnect by itself, and says so where it does.
        opened = next(x for x in daemon.text().splitlines() if " fault kind=unreachable" in x)
        assert opened.endswith('the supervisor reconnects by itself"'), opened
        # Leading again (its lease, renewed on a connection of its own).
        wait_for(
            lambda: leader_pid(pg_url) == daemon.proc.pid,
            what="the supervisor to lead again",
        )
        path = write_definition(
            tmp_path / "defs",
            "once",
            f'id = "once"\n[trigger]\nat = "{utc_ago(1)}"\n'
            f'[run]\ncommand = ["sh", "-c", "echo ran >> {out}"]\n',
        )
        assert wfsched(pg_url, "create", str(path)).returncode == 0
        wait_for(
            lambda: [r for r in wfsched_json(pg_url, "runs")["items"] if r["state"] == "completed"],
            what="a run after the outage",
        )
    finally:
        assert daemon.stop() == 0
    assert out.read_text() == "ran\n"
    assert wfsched(pg_url, "audit").returncode == 0


def test_a_supervisor_that_finds_its_store_taken_after_an_outage_stops(
    pg_server: PostgresServer, pg_url: str
) -> None:
    """While its connection was down `store copy` (an exclusive hold) took the
    store: on reconnecting it refuses to share the store and exits 4."""
    from wfsched.store.postgres import LOCK_CLASS, OWNER_LOCK

    daemon = Daemon(pg_url)
    try:
        daemon.wait_started()
        name = dbname(pg_url)
        with (
            psycopg.connect(pg_url, autocommit=True, application_name="thief") as thief,
            psycopg.connect(pg_server.url(), autocommit=True) as admin,
        ):
            # Hold the supervisor off while the thief waits for the dying
            # backend to release the lock (termination is asynchronous).
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            try:
                assert pg_server.terminate("wfsched", dbname=name) >= 1
                wait_for(
                    lambda: (
                        thief.execute(
                            f"SELECT pg_try_advisory_lock({LOCK_CLASS}, {OWNER_LOCK})"
                        ).fetchone()
                        == (True,)
                    ),
                    what="the thief to own the store",
                )
            finally:
                admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
            assert daemon.wait_exit(timeout=30) == 4
        assert "the store is being copied" in daemon.text()
        assert " fault kind=unreachable" in daemon.text()
    finally:
        daemon.kill()


def test_both_schemas_have_the_same_versions_tables_columns_and_indexes(
    pg_url: str, tmp_path: Path
) -> None:
    """A SQLite migration without its PostgreSQL twin fails here, not in production."""
    import sqlite3

    from wfsched.store import SQLiteStore
    from wfsched.store.migrations import MIGRATIONS
    from wfsched.store.pg_migrations import PG_MIGRATIONS

    assert [m[0] for m in sorted(PG_MIGRATIONS)] == [m[0] for m in sorted(MIGRATIONS)]
    SQLiteStore(tmp_path / "s").close()
    PostgresStore(resolve_store(pg_url)).close()
    db = sqlite3.connect(tmp_path / "s" / "wfsched.db")
    try:
        tables = [
            name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        sqlite_columns = {
            table: [row[1] for row in db.execute(f"PRAGMA table_info({table})")]
            for table in tables
            if not table.startswith("sqlite_")
        }
        sqlite_indexes = {
            name
            for (name,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type='index' AND sql IS NOT NULL"
            )
        }
    finally:
        db.close()
    with psycopg.connect(pg_url) as conn:
        pg_columns: dict[str, list[str]] = {}
        for table, column in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
        ):
            pg_columns.setdefault(table, []).append(column)
        pg_indexes = {
            name
            for (name,) in conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
                " AND indexname NOT LIKE '%_pkey'"
            )
        }
    assert pg_columns.pop("schema_version") == ["version"]
    assert pg_columns == sqlite_columns
    assert pg_indexes == sqlite_indexes


def test_a_transaction_an_error_aborted_is_never_reported_committed(pg_url: str) -> None:
    """PostgreSQL answers the COMMIT of an aborted transaction with a
    `ROLLBACK` status, not an error: an error swallowed inside a transaction
    must still fail it, with nothing written."""
    store = PostgresStore(resolve_store(pg_url))
    try:
        with pytest.raises(StoreError, match="rolled this transaction back"), store.atomic():
            store.set_meta(lost="1")
            with contextlib.suppress(StoreError):
                store._execute("SELECT 1 / 0")
        assert store.get_meta("lost") is None
        with store.atomic():
            store.set_meta(kept="1")
        assert store.get_meta("kept") == "1"
    finally:
        store.close()
