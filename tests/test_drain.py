"""Layer 2: the drain through the real CLI and real subprocesses, on both stores.

What an operator sees while `supervise` drains: `status` says `draining`
(human and JSON), the log says how many runs it waits for and for how long,
and a second stop signal (Ctrl-C twice) cancels what runs at once, with a
line saying so, and still records every cancellation.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.daemon import Daemon, StoreName, define, wait_for, wfsched, wfsched_json
from tests.test_resource_faults import events


@pytest.fixture
def store(tmp_path: Path, store_kind: str, request: pytest.FixtureRequest) -> StoreName:
    if store_kind == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return tmp_path / "store"


def start_jobs(store: StoreName, tmp_path: Path, commands: list[str], grace: str) -> Daemon:
    """A supervisor running one manual run per command (run-000001, ...)."""
    daemon = Daemon(store, "--drain-grace", grace)
    daemon.wait_started()
    for index, command in enumerate(commands, 1):
        define(
            store,
            tmp_path,
            f"job{index}",
            f'[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sh", "-c", "{command}"]\n'
            'kill_grace = "1s"\n',
        )
        assert wfsched(store, "trigger", f"job{index}").returncode == 0
        wait_for(lambda i=index: f"started run=run-00000{i}" in daemon.text(), what="a run start")
    return daemon


def test_status_shows_the_drain_and_the_log_its_progress(
    store: StoreName, tmp_path: Path, store_kind: str
) -> None:
    releases = [tmp_path / "release1", tmp_path / "release2"]
    daemon = start_jobs(
        store, tmp_path, [f"until [ -e {path} ]; do sleep 0.1; done" for path in releases], "30"
    )
    daemon.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: events(daemon, "drain-progress"), what="the first progress line")
    assert "executing=2 grace=30s" in events(daemon, "draining")[0], daemon.text()
    assert "executing=2 unrecorded=0 wait=30s" in events(daemon, "drain-progress")[0]
    info = wfsched_json(store, "status")["supervisor"]
    assert info["state"] == "draining", info
    assert info["draining"]["pid"] == daemon.proc.pid, info
    assert info["draining"]["cancel_at"] and info["draining"]["until"], info
    human = wfsched(store, "status")
    assert human.returncode == 0, human.stderr
    assert "DRAINING" in human.stdout and "is cancelled at" in human.stdout, human.stdout
    if store_kind == "postgresql":
        (host,) = wfsched_json(store, "status")["hosts"]
        assert host["role"] == "draining", host
        assert ": draining, pid" in human.stdout, human.stdout
    releases[0].touch()
    wait_for(
        lambda: any("executing=1 " in line for line in events(daemon, "drain-progress")),
        what="a progress line as the first run ends",
    )
    releases[1].touch()
    assert daemon.wait_exit(30) == 0, daemon.text()
    assert not events(daemon, "drain-cancel"), daemon.text()
    for run in ("run-000001", "run-000002"):
        assert wfsched_json(store, "runs", "show", run)["state"] == "completed"
    after = wfsched_json(store, "status")["supervisor"]
    assert after["state"] is None and after["draining"] is None, after


def test_a_second_stop_signal_cancels_at_once_and_records(store: StoreName, tmp_path: Path) -> None:
    daemon = start_jobs(store, tmp_path, ["sleep 30"], "60")
    daemon.proc.send_signal(signal.SIGINT)
    wait_for(lambda: events(daemon, "drain-progress"), what="the drain to begin")
    hurried = time.monotonic()
    daemon.proc.send_signal(signal.SIGINT)
    assert daemon.wait_exit(20) == 0, daemon.text()
    assert time.monotonic() - hurried < 10, daemon.text()
    (cancel,) = events(daemon, "drain-cancel")
    assert 'runs=1 why="a second stop signal"' in cancel, cancel
    assert "left=0" in events(daemon, "drained")[0], daemon.text()
    run = wfsched_json(store, "runs", "show", "run-000001")
    assert run["state"] == "failed", run
    assert run["reason"] == (
        "cancelled: the supervisor shut down and a second stop signal ended the drain"
    ), run
