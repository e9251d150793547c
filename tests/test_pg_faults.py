"""Layer 3: PostgreSQL server-side faults are fault episodes, as SQLite's are.

The session's real server (tests/pgserver.py) restarted with a fast shutdown,
stopped for a while, and out of disk (the store's database in a tablespace
on a small tmpfs, filled until the server reports `could not extend file`,
SQLSTATE 53100), each while a run executes and instants fall due. What the
operator must be able to count on, as for a full SQLite disk: the supervisor
never exits, one log line opens the episode (the error in words, what to do)
and one closes it, the failure hook fires once, nothing is admitted or
launched that is not recorded, every exit code is recorded, every instant
has its ledger row (those decided late: `store-unavailable`), no run starts
twice, and `audit` is clean.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.daemon import Daemon, utc_in, wait_for, wfsched, wfsched_json, write_definition
from tests.pgserver import PostgresServer, dbname
from tests.test_metrics_daemon import metrics_url, value
from tests.test_resource_faults import (
    _command_running,
    _run,
    _wait_past_latest,
    apply,
    assert_audit_clean,
    assert_committed_logs,
    assert_episode,
    assert_hook_fired_once,
    events,
    fill,
    one_shot,
    runs,
)
from wfsched.errors import StoreError
from wfsched.store.location import resolve_store
from wfsched.store.postgres import PostgresStore


def hook_config(url: str, out: Path) -> None:
    """The config's failure hook appends `EVENT KIND` to `out`."""
    local = resolve_store(url).local_dir
    local.mkdir(parents=True, exist_ok=True)
    (local / "config.toml").write_text(
        f"on_failure = ['sh', '-c', 'echo \"$WFSCHED_EVENT $WFSCHED_FAULT_KIND\" >> {out}']\n"
    )


def assert_ledger_complete(url: str, schedules: list[str]) -> dict[str, tuple[str, str | None]]:
    """Each one-shot has exactly one ledger row; returns (state, reason) by schedule."""
    found = {}
    for schedule in schedules:
        rows = wfsched_json(url, "occurrences", schedule)["items"]
        assert len(rows) == 1, (schedule, rows)
        found[schedule] = (rows[0]["state"], rows[0]["reason"])
    return found


def test_a_server_restart_is_an_episode_that_ends_by_itself(
    pg_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    hook_out = tmp_path / "hook.txt"
    hook_config(pg_url, hook_out)
    daemon = Daemon(pg_url)
    daemon.wait_started()
    try:
        apply(
            pg_url,
            tmp_path / "defs",
            {
                "long": one_shot(utc_in(1), "sleep 3.201; exit 7"),
                "t1": one_shot(utc_in(4), "echo one"),
            },
        )
        wait_for(lambda: "started run=run-000001" in daemon.text(), what="long to start")
        pg_server.restart()
        wait_for(lambda: events(daemon, "fault"), timeout=20, what="the fault line")
        wait_for(lambda: events(daemon, "fault-cleared"), timeout=30, what="the episode's end")
        wait_for(
            lambda: sorted(r["state"] for r in runs(pg_url)) == ["completed", "failed"],
            timeout=30,
            what="both runs to end",
        )
        assert daemon.proc.poll() is None
        by_schedule = {run["schedule_id"]: run for run in runs(pg_url)}
        assert by_schedule["long"]["exit_code"] == 7
        assert len(by_schedule["t1"]["attempts"]) == 1
        ledger = assert_ledger_complete(pg_url, ["long", "t1"])
        assert ledger["long"][0] == "failed" and ledger["t1"][0] == "completed", ledger
        cleared = assert_episode(daemon, "unreachable", "connection lost")
        assert "pg_isready" in events(daemon, "fault")[0]
        assert "password" not in daemon.text()
        print(f"\nMEASURE pg-restart: {cleared}")
        assert_committed_logs(daemon, pg_url)  # type: ignore[arg-type]
        assert_hook_fired_once(hook_out, "unreachable")
        assert wfsched_json(pg_url, "status")["supervisor"]["fault"] is None
        assert wfsched_json(pg_url, "status")["errors"]["last_fault"]["kind"] == "unreachable"
        # Leading again after the outage (a second supervisor would be a standby).
        leader = wfsched_json(pg_url, "status")["leader"]
        assert leader is not None and leader["pid"] == daemon.proc.pid, leader
        assert_audit_clean(pg_url)  # type: ignore[arg-type]
    finally:
        assert daemon.stop() == 0


def test_a_server_down_for_a_while_is_an_episode_and_late_instants_are_store_unavailable(
    pg_server: PostgresServer, pg_url: str, tmp_path: Path
) -> None:
    hook_out = tmp_path / "hook.txt"
    hook_config(pg_url, hook_out)
    daemon = Daemon(pg_url, "--metrics", "127.0.0.1:0")
    daemon.wait_started()
    scrape = metrics_url(daemon)
    stopped = False
    try:
        apply(pg_url, tmp_path / "defs", {"long": one_shot(utc_in(1), "sleep 2.202; exit 5")})
        wait_for(lambda: "started run=run-000001" in daemon.text(), what="long to start")
        # Made due a few seconds after the server goes down, counted from now:
        # however late `long` started on a busy host, both fall in the outage.
        apply(
            pg_url,
            tmp_path / "defs",
            {
                "t1": one_shot(utc_in(4), "echo one"),
                "late": one_shot(utc_in(4), "echo late", '[policy]\nlateness = "1s"\n'),
            },
        )
        pg_server.shut_down()
        stopped = True
        wait_for(lambda: events(daemon, "fault"), timeout=20, what="the fault line")
        refused = wfsched(pg_url, "list")
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
        assert "pg_isready" in refused.stderr and "Error" not in refused.stderr
        # The metrics are served without the store: the alert can fire.
        wait_for(
            lambda: value(scrape, "wfsched_resource_fault", kind="unreachable") == 1.0,
            what="the fault gauge",
        )
        wait_for(lambda: not _command_running("sleep 2.202; exit 5"), what="long's command")
        _wait_past_latest(tmp_path / "defs", 3)
        assert daemon.proc.poll() is None
        pg_server.start_again()
        stopped = False
        wait_for(lambda: events(daemon, "fault-cleared"), timeout=30, what="the episode's end")
        wait_for(
            lambda: (
                {r["schedule_id"]: r["state"] for r in runs(pg_url)}
                == {"long": "failed", "t1": "completed"}
            ),
            timeout=30,
            what="both runs to end",
        )
        assert daemon.proc.poll() is None
        by_schedule = {run["schedule_id"]: run for run in runs(pg_url)}
        assert by_schedule["long"]["exit_code"] == 5
        ledger = assert_ledger_complete(pg_url, ["long", "t1", "late"])
        assert ledger["late"] == ("skipped-misfire", "store-unavailable")
        cleared = assert_episode(daemon, "unreachable", "pg_isready")
        assert value(scrape, "wfsched_resource_fault", kind="unreachable") == 0.0
        assert value(scrape, "wfsched_resource_fault_episodes_total", kind="unreachable") == 1.0
        print(f"\nMEASURE pg-unreachable: {cleared}")
        assert_committed_logs(daemon, pg_url)  # type: ignore[arg-type]
        assert_hook_fired_once(hook_out, "unreachable")
        assert_audit_clean(pg_url)  # type: ignore[arg-type]
    finally:
        if stopped:
            pg_server.start_again()
        assert daemon.stop() == 0


@pytest.fixture
def small_tablespace_url(pg_server: PostgresServer) -> Iterator[tuple[str, Path]]:
    """A database whose tablespace is on a 24 MB tmpfs; its URL and the tmpfs."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the test mounts a tmpfs for the server's tablespace")
    disk = pg_server.base / f"small-{secrets.token_hex(4)}"
    disk.mkdir()
    owner = "uid=0,gid=0"
    if pg_server.as_user:
        ids = subprocess.run(["id", "-u", "postgres"], capture_output=True, text=True).stdout
        groups = subprocess.run(["id", "-g", "postgres"], capture_output=True, text=True).stdout
        owner = f"uid={ids.strip()},gid={groups.strip()}"
    mounted = _run("mount", "-t", "tmpfs", "-o", f"size=24m,mode=0700,{owner}", "tmpfs", str(disk))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    name = f"small_{secrets.token_hex(4)}"
    space = f"ts_{name}"
    try:
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            admin.execute(f"CREATE TABLESPACE {space} LOCATION '{disk}'")  # type: ignore[arg-type]
            admin.execute(
                f'CREATE DATABASE "{name}" TEMPLATE template0 TABLESPACE {space}'  # type: ignore[arg-type]
            )
        yield pg_server.url(name), disk
    finally:
        (disk / "filler").unlink(missing_ok=True)
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
            admin.execute(f"DROP TABLESPACE IF EXISTS {space}")  # type: ignore[arg-type]
        _run("umount", "-l", str(disk))


def test_the_server_out_of_disk_is_an_episode_that_ends_when_space_is_freed(
    small_tablespace_url: tuple[str, Path], tmp_path: Path
) -> None:
    """Each run's invocation carries 8 KB the server cannot compress, so an
    admission extends the runs' TOAST table: with the tablespace full it
    fails with disk_full, whatever room the tables' last pages still have."""
    url, disk = small_tablespace_url
    hook_out = tmp_path / "hook.txt"
    hook_config(url, hook_out)
    bulky = f'[run.env]\nBULK = "{secrets.token_hex(4096)}"\n'
    daemon = Daemon(url)
    daemon.wait_started()
    try:
        apply(
            url,
            tmp_path / "defs",
            {
                "long": one_shot(utc_in(1), "sleep 4.303; exit 6", bulky),
                "t1": one_shot(utc_in(5), "echo one", bulky),
                "t2": one_shot(utc_in(6), "echo two", bulky),
                "late": one_shot(utc_in(6), "echo late", bulky + '[policy]\nlateness = "1s"\n'),
            },
        )
        wait_for(lambda: "started run=run-000001" in daemon.text(), what="long to start")
        fill(disk / "filler")
        wait_for(lambda: events(daemon, "fault"), timeout=20, what="the fault line")
        (line,) = events(daemon, "fault")
        assert "kind=disk-full" in line and "is out of disk space: free space in" in line, line
        assert "could not extend file" in line, line
        fault = wfsched_json(url, "status")["supervisor"]["fault"]
        assert fault["kind"] == "disk-full" and fault["since"], fault
        extra = write_definition(
            tmp_path / "more", "extra", f'id = "extra"\n{one_shot(utc_in(3600), "true", bulky)}'
        )
        refused = wfsched(url, "create", str(extra))
        assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
        assert "is out of disk space: free space in" in refused.stderr
        assert "Error" not in refused.stderr and "Traceback" not in refused.stderr
        assert wfsched(url, "get", "extra").returncode == 3  # nothing written
        wait_for(lambda: not _command_running("sleep 4.303; exit 6"), what="long's command")
        _wait_past_latest(tmp_path / "defs", 3)
        assert daemon.proc.poll() is None
        (disk / "filler").unlink()
        wait_for(lambda: events(daemon, "fault-cleared"), timeout=30, what="the episode's end")
        wait_for(
            lambda: (
                len(runs(url)) == 3
                and all(r["state"] in ("completed", "failed") for r in runs(url))
            ),
            timeout=30,
            what="every run to end",
        )
        assert daemon.proc.poll() is None
        by_schedule = {run["schedule_id"]: run for run in runs(url)}
        assert by_schedule["long"]["exit_code"] == 6
        for name in ("t1", "t2"):
            assert by_schedule[name]["state"] == "completed"
            assert len(by_schedule[name]["attempts"]) == 1
        ledger = assert_ledger_complete(url, ["long", "t1", "t2", "late"])
        assert ledger["late"] == ("skipped-misfire", "store-unavailable")
        cleared = assert_episode(daemon, "disk-full", "is out of disk space")
        print(f"\nMEASURE pg-disk-full: {cleared}")
        assert_committed_logs(daemon, url)  # type: ignore[arg-type]
        assert_hook_fired_once(hook_out, "disk-full")
        assert_audit_clean(url)  # type: ignore[arg-type]
        assert wfsched_json(url, "status")["supervisor"]["fault"] is None
    finally:
        (disk / "filler").unlink(missing_ok=True)
        assert daemon.stop() == 0


def test_the_space_probe_needs_no_temporary_tables(pg_server: PostgresServer, pg_url: str) -> None:
    """A role that may not create temporary tables: the server-side space
    check is skipped (the probe's durable write decides), never a probe
    that fails forever and an episode that never ends."""
    name = dbname(pg_url)
    role = f"notemp_{secrets.token_hex(3)}"
    with psycopg.connect(pg_server.url(), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")  # type: ignore[arg-type]
        admin.execute(f'REVOKE TEMPORARY ON DATABASE "{name}" FROM PUBLIC')  # type: ignore[arg-type]
        admin.execute(f'GRANT CONNECT, CREATE ON DATABASE "{name}" TO {role}')  # type: ignore[arg-type]
    with psycopg.connect(pg_url, autocommit=True) as owner:
        owner.execute(f"GRANT CREATE, USAGE ON SCHEMA public TO {role}")  # type: ignore[arg-type]
    url = pg_url.replace("wfsched_test@", f"{role}@", 1)
    store = PostgresStore(resolve_store(url))
    try:
        with pytest.raises(StoreError, match="permission denied"), store.atomic():
            store._raw("CREATE TEMP TABLE t (x int)")
        store.probe_space(256 * 1024)
        with store.atomic():
            store.set_meta(probe="1")
    finally:
        store.close()
        with psycopg.connect(pg_server.url(), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore[arg-type]
            admin.execute(f"DROP ROLE {role}")  # type: ignore[arg-type]
