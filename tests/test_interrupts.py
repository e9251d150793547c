"""Ctrl-C of the real CLI process, a real SIGINT (issue 26, item 6): after a
commit it says what was committed; in the first milliseconds it is one
line, never a traceback from wfsched's own code."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import definition_text, wfsched_executable

from tests.daemon import wait_for, wfsched
from wfsched.store import SQLiteStore
from wfsched.store.ownership import Ownership


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "wfsched", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _schedules(store: Path) -> int:
    if not (store / "wfsched.db").exists():
        return 0
    opened = SQLiteStore(store, create=False)
    try:
        return len(opened.list_schedules())
    finally:
        opened.close()


def test_apply_interrupted_after_its_commit_says_what_it_created(tmp_path: Path) -> None:
    folder = tmp_path / "defs"
    folder.mkdir()
    count = 1000
    for index in range(count):
        name = f"a-schedule-with-a-rather-long-name-to-fill-the-pipe-{index:04d}"
        (folder / f"{name}.toml").write_text(definition_text(name))
    store = tmp_path / "store"
    # Nobody reads stdout: once committed, apply blocks writing its ~100 KB of lines.
    proc = _spawn("--store", str(store), "apply", str(folder))
    wait_for(lambda: _schedules(store) == count, timeout=60, what="the apply's commit")
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.decode().strip() == (
        f"wfsched: error: interrupted after the apply committed: created {count} schedules"
    )


def test_trigger_interrupted_while_waiting_says_its_request_stands(tmp_path: Path) -> None:
    store = tmp_path / "store"
    path = tmp_path / "job.toml"
    path.write_text(definition_text("job"))
    assert wfsched(store, "create", str(path)).returncode == 0
    # A "supervisor" that never answers: trigger waits for it.
    owner = Ownership(store / "supervisor.lock")
    owner.acquire()
    try:
        proc = _spawn("--store", str(store), "trigger", "job")

        def recorded() -> bool:
            opened = SQLiteStore(store, create=False)
            try:
                return bool(opened.pending_requests())
            finally:
                opened.close()

        wait_for(recorded, what="the trigger request")
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        owner.release()
    assert proc.returncode == 130
    line = err.decode().strip()
    assert line.startswith("wfsched: error: interrupted after recording trigger request 1:")
    assert "`wfsched requests cancel 1`" in line and "\n" not in line


def test_a_ctrl_c_in_the_first_milliseconds_is_never_a_traceback_of_wfsched(
    tmp_path: Path,
) -> None:
    """Spread over the start of the process: before Python has its handler
    the signal kills it quietly (-2); while the interpreter itself starts
    (before any line of wfsched runs) Python prints its own traceback, which
    no program can catch; from wfsched's first line on it is one line."""
    executable = wfsched_executable()
    ours = 0
    for step in range(25):
        proc = subprocess.Popen(
            [executable, "--store", str(tmp_path / "store"), "list"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(step * 0.012)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
        text = err.decode()
        frames = text.split("KeyboardInterrupt")[0]
        assert "/wfsched/" not in frames, text
        if proc.returncode == 130:
            ours += 1
            assert text in ("wfsched: error: interrupted\n", "\nwfsched: error: aborted\n"), text
    assert ours, "no SIGINT landed in wfsched's own code; the test proved nothing"
