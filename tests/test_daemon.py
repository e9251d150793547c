"""Layer 2: the real CLI and the real supervisor, real subprocesses, a temp store."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.daemon import (
    Daemon,
    StoreName,
    define,
    utc_in,
    wait_for,
    wfsched,
    wfsched_json,
)


@pytest.fixture
def store(tmp_path: Path, store_kind: str, request: pytest.FixtureRequest) -> StoreName:
    """Every daemon test runs on a SQLite store and on a PostgreSQL store."""
    if store_kind == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return tmp_path / "store"


def run_state(store: Path, run: str) -> str:
    return wfsched_json(store, "runs", "show", run)["state"]


def test_one_shot_runs_once_with_input_on_stdin_and_logs(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    daemon = Daemon(store)
    daemon.wait_started()
    try:
        define(
            store,
            tmp_path,
            "once",
            f'[trigger]\nat = "{utc_in(1.5)}"\n[run]\n'
            f'command = ["sh", "-c", "cat > {out}; echo to-stdout; echo to-stderr >&2"]\n'
            '[[input]]\ntarget = "who"\nliteral = "ops"\n',
        )
        wait_for(lambda: wfsched_json(store, "runs")["items"], what="a run")
        wait_for(lambda: run_state(store, "run-000001") == "completed", what="completion")
        assert json.loads(out.read_text()) == {"who": "ops"}
        logs = wfsched(store, "runs", "logs", "run-000001")
        assert logs.stdout == (
            "==> stdout (10 bytes) <==\nto-stdout\n==> stderr (10 bytes) <==\nto-stderr\n"
        )
        assert wfsched(store, "runs", "logs", "run-000001", "--stdout").stdout == "to-stdout\n"
        assert wfsched(store, "runs", "logs", "run-000001", "--stderr").stdout == "to-stderr\n"
        schedule = wfsched_json(store, "get", "once")
        assert schedule["state"] == "exhausted"
        table = wfsched(store, "runs", env={"COLUMNS": "200"}).stdout
        assert "SCHEDULED (LOCAL)" in table and "+00:00" in table
        shown = wfsched(store, "runs", "show", "run-000001", env={"COLUMNS": "200"}).stdout
        assert "(UTC)" in shown
    finally:
        assert daemon.stop() == 0


def test_second_supervisor_is_refused_even_through_a_symlink(
    store: StoreName, tmp_path: Path
) -> None:
    """SQLite: through a symlinked alias of the directory. PostgreSQL: a second
    supervisor through the `postgres://` spelling of the same URL is not refused
    but stands by (one leader per database: see test_ha.py), and status names
    the first as the leader."""
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        if not isinstance(store, Path):
            standby = Daemon(store.replace("postgresql://", "postgres://", 1), "--host", "other")
            try:
                standby.wait_started()
                shown = wait_for(
                    lambda: (lambda s: s if s["standbys"] else None)(wfsched_json(store, "status")),
                    what="the second supervisor to stand by",
                )
                assert shown["leader"]["pid"] == daemon.proc.pid
                assert shown["standbys"] == [{"host": "other", "pid": standby.proc.pid}]
                assert shown["supervisor"]["pid"] == daemon.proc.pid
            finally:
                assert standby.stop() == 0
            return
        alias: StoreName = tmp_path / "alias"
        alias.symlink_to(store)
        second = wfsched(alias, "supervise")
        assert second.returncode == 4
        assert f"pid {daemon.proc.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        status = wfsched_json(store, "status")
        assert status["supervisor"]["running"] is True
        assert status["supervisor"]["pid"] == daemon.proc.pid
    finally:
        daemon.stop()


def test_lock_dies_with_a_killed_supervisor(store: Path) -> None:
    first = Daemon(store)
    first.wait_started()
    first.kill()
    assert wfsched_json(store, "status")["supervisor"]["running"] is False
    second = Daemon(store)
    try:
        second.wait_started()
    finally:
        assert second.stop() == 0


def test_sigterm_drains_then_cancels_and_records(store: Path, tmp_path: Path) -> None:
    daemon = Daemon(store, "--drain-grace", "0.5")
    daemon.wait_started()
    define(
        store,
        tmp_path,
        "slow",
        '[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sleep", "30"]\nkill_grace = "1s"\n',
    )
    assert wfsched(store, "trigger", "slow").returncode == 0  # no instant to wait for
    wait_for(lambda: wfsched_json(store, "runs")["items"], what="a run")
    wait_for(lambda: run_state(store, "run-000001") == "running", what="running")
    started = time.monotonic()
    assert daemon.stop() == 0
    assert time.monotonic() - started < 10
    run = wfsched_json(store, "runs", "show", "run-000001")
    assert run["state"] == "failed"
    assert "drain_grace" in run["reason"]
    assert wfsched_json(store, "status")["supervisor"]["running"] is False


def test_timeout_kills_the_process_group_and_fails_the_run(store: Path, tmp_path: Path) -> None:
    daemon = Daemon(store)
    daemon.wait_started()
    try:
        define(
            store,
            tmp_path,
            "stuck",
            '[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sleep", "30"]\n'
            'timeout = 1\nkill_grace = "1s"\n',
        )
        assert wfsched(store, "trigger", "stuck").returncode == 0  # no instant to wait for
        wait_for(lambda: wfsched_json(store, "runs")["items"], what="a run")
        wait_for(lambda: run_state(store, "run-000001") == "failed", timeout=20, what="timeout")
        assert "timed out" in wfsched_json(store, "runs", "show", "run-000001")["reason"]
    finally:
        daemon.stop()


def test_trigger_cancel_and_resume_through_the_cli(store: Path, tmp_path: Path) -> None:
    marker = tmp_path / "attempts"
    define(
        store,
        tmp_path,
        "job",
        '[trigger]\ncron = "0 0 1 1 *"\n[run]\n'
        f'command = ["sh", "-c", "echo $WFSCHED_ATTEMPT >> {marker}; '
        '[ $WFSCHED_ATTEMPT = 1 ] && exit 75; cat $WFSCHED_RESUME_INPUT; exit 0"]\n'
        "interrupt_exit_code = 75\n",
    )
    define(
        store,
        tmp_path,
        "sleeper",
        '[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sleep", "30"]\n',
    )
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        triggered = wfsched(store, "trigger", "job")
        assert triggered.returncode == 0, triggered.stderr
        assert "run-000001" in triggered.stdout
        wait_for(lambda: run_state(store, "run-000001") == "interrupted", what="interruption")
        not_interrupted = wfsched(store, "runs", "resume", "run-000099")
        assert not_interrupted.returncode == 3
        resume_input = tmp_path / "resume.json"
        resume_input.write_text('{"approved": true}')
        resumed = wfsched(store, "runs", "resume", "run-000001", "--input", str(resume_input))
        assert resumed.returncode == 0, resumed.stderr
        wait_for(lambda: run_state(store, "run-000001") == "completed", what="resumed completion")
        assert marker.read_text().split() == ["1", "2"]
        logs = wfsched(store, "runs", "logs", "run-000001", "--attempt", "2")
        assert json.loads(logs.stdout) == {"approved": True}
        again = wfsched(store, "runs", "resume", "run-000001")
        assert again.returncode == 4
        assert "run-000002" in wfsched(store, "trigger", "sleeper").stdout
        wait_for(lambda: run_state(store, "run-000002") == "running", what="sleeper running")
        cancelled = wfsched(store, "runs", "cancel", "run-000002")
        assert cancelled.returncode == 0, cancelled.stderr
        wait_for(lambda: run_state(store, "run-000002") == "failed", what="cancel")
        run = wfsched_json(store, "runs", "show", "run-000002")
        assert run["reason"] == "cancelled" and run["kind"] == "manual"
        finished = wfsched(store, "runs", "cancel", "run-000002")
        assert finished.returncode == 0 and "already finished" in finished.stdout
    finally:
        daemon.stop()


def test_an_idle_supervisor_stays_alive_in_status_and_sees_an_edit(
    store: Path, tmp_path: Path
) -> None:
    """Idle on SQLite, the loop sleeps until its next liveness stamp (5 s):
    `status` judges it by the stamp interval it recorded, so it is never
    stale meanwhile, and a request still reaches the loop at once (the
    commit wakes it)."""
    define(store, tmp_path, "idle", '[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["true"]\n')
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        seen: set[str] = set()
        stale = []

        def stamped_three_times() -> bool:
            supervisor = wfsched_json(store, "status", "--json")["supervisor"]
            stale.append(supervisor["stale"])
            seen.add(supervisor["last_tick_at"])
            return len(seen) >= 3

        wait_for(stamped_three_times, timeout=30, what="three liveness stamps")
        assert not any(stale)
        # The command waits up to 5 s for the loop's answer.
        triggered = wfsched(store, "trigger", "idle")
        assert triggered.returncode == 0 and "run-000001" in triggered.stdout
    finally:
        daemon.stop()


def test_trigger_without_a_supervisor_waits_and_says_so(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "ran"
    define(
        store,
        tmp_path,
        "later",
        f'[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["touch", "{out}"]\n',
    )
    queued = wfsched(store, "trigger", "later")
    assert queued.returncode == 0
    assert "no supervisor is running" in queued.stdout
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        wait_for(out.exists, what="the queued trigger to run")
    finally:
        daemon.stop()


def test_trigger_of_a_deleted_schedule_is_a_conflict(store: Path, tmp_path: Path) -> None:
    define(store, tmp_path, "gone", '[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["true"]\n')
    assert wfsched(store, "delete", "gone").returncode == 0
    refused = wfsched(store, "trigger", "gone")
    assert refused.returncode == 4
    assert wfsched(store, "trigger", "nope").returncode == 3


def test_systemd_notify_protocol(store: Path, tmp_path: Path) -> None:
    address = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    listener.settimeout(15)
    daemon = Daemon(store, env={"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "400000"})
    try:
        messages = [listener.recv(4096).decode() for _ in range(2)]
        assert any("READY=1" in message for message in messages)
        assert any("STATUS=" in message for message in messages)
        assert any("WATCHDOG=1" in message for message in messages)
    finally:
        daemon.proc.send_signal(signal.SIGTERM)
        stopping = ""
        while "STOPPING=1" not in stopping:
            stopping = listener.recv(4096).decode()
        assert daemon.wait_exit() == 0
        listener.close()


def test_missing_executable_is_preflight_rejected_and_invents_no_run(
    store: Path, tmp_path: Path
) -> None:
    daemon = Daemon(store)
    daemon.wait_started()
    try:
        define(
            store,
            tmp_path,
            "broken",
            f'[trigger]\nat = "{utc_in(1)}"\n[run]\ncommand = ["no-such-binary-wfsched"]\n',
        )
        items = wait_for(
            lambda: [
                item
                for item in wfsched_json(store, "occurrences", "broken")["items"]
                if item["state"] == "preflight-rejected"
            ],
            what="the rejection",
        )
        assert "no-such-binary-wfsched" in items[0]["reason"]
        assert wfsched_json(store, "runs")["items"] == []
    finally:
        daemon.stop()


def test_env_of_the_job(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "env"
    daemon = Daemon(store, env={"NOTIFY_SOCKET": "/nonexistent"})
    daemon.wait_started()
    try:
        define(
            store,
            tmp_path,
            "envy",
            f'[trigger]\nat = "{utc_in(1)}"\n[run]\ncommand = ["sh", "-c", "env > {out}"]\n'
            'env = { COLOR = "blue" }\n',
        )
        wait_for(out.exists, what="the job")
        wait_for(lambda: "WFSCHED_INPUT=" in out.read_text(), what="env written")
    finally:
        daemon.stop()
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert env["COLOR"] == "blue"
    assert env["WFSCHED_SCHEDULE_ID"] == "envy"
    assert env["WFSCHED_OCCURRENCE_ID"].startswith("envy@")
    assert env["WFSCHED_RUN_ID"] == "run-000001"
    assert env["WFSCHED_ATTEMPT"] == "1"
    assert Path(env["WFSCHED_STATE_DIR"]).is_dir()
    assert "NOTIFY_SOCKET" not in env
    assert os.path.exists(env["WFSCHED_INPUT"])


def test_a_dead_keeper_is_replaced_its_runs_abandoned_and_new_runs_go_on(
    store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ran"
    define(
        store,
        tmp_path,
        "job",
        f'[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sh", "-c", "echo x >> {out}"]\n',
    )
    define(
        store,
        tmp_path,
        "sleeper",
        '[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sleep", "2"]\n',
    )
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        assert wfsched(store, "trigger", "sleeper").returncode == 0
        wait_for(lambda: run_state(store, "run-000001") == "running", what="sleeper")
        servers = [
            int(pid)
            for pid in os.listdir("/proc")
            if pid.isdigit() and _parent(int(pid)) == daemon.proc.pid
        ]
        assert servers, "the run keeper is the supervisor's child"
        for pid in servers:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: "launcher-lost" in daemon.text(), what="the loss to be noticed")
        assert wfsched(store, "trigger", "job").returncode == 0
        wait_for(lambda: out.exists(), what="a launch through the new keeper")
        # The sleeper lost its parent: failed as abandoned, never re-run.
        wait_for(lambda: run_state(store, "run-000001") == "failed", what="sleeper end")
        sleeper = wfsched_json(store, "runs", "show", "run-000001")
        assert "external effects may already have happened" in sleeper["reason"]
    finally:
        assert daemon.stop() == 0


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def test_runs_logs_follow_streams_until_the_attempt_ends(store: Path, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    define(
        store,
        tmp_path,
        "chatty",
        '[trigger]\ncron = "0 0 1 1 *"\n[run]\n'
        f'command = ["sh", "-c", "echo one; until [ -e {gate} ]; do sleep 0.05; done; echo two"]\n',
    )
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        assert wfsched(store, "trigger", "chatty").returncode == 0
        wait_for(lambda: run_state(store, "run-000001") == "running", what="running")
        follower = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "wfsched",
                "--store",
                str(store),
                "runs",
                "logs",
                "run-000001",
                "--follow",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert follower.stdout is not None
        assert follower.stdout.readline() == "one\n"
        assert follower.poll() is None, "--follow must wait while the attempt runs"
        gate.touch()
        rest, _ = follower.communicate(timeout=20)
        assert rest == "two\n"
        assert follower.returncode == 0
    finally:
        daemon.stop()
