"""Listings as an operator reads them: `logs ID [--follow]` against the real
supervisor, a closed pipe (`| head -1`), tables on an 80-column terminal,
`--reverse` paging, run ids written short, a paused schedule's `next`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import CliRun, SettableClock

from tests.daemon import Daemon, StoreName, define, wait_for, wfsched, wfsched_json
from tests.test_supervisor_loop import MINUTE, T0, Harness

ECHO = (
    '[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sh", "-c", "echo out of $WFSCHED_RUN_ID"]\n'
)


@pytest.fixture
def store(tmp_path: Path, store_kind: str, request: pytest.FixtureRequest) -> StoreName:
    if store_kind == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return tmp_path / "store"


class Lines:
    """A child's stdout read line by line, each read bounded by a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buffer = b""

    def next(self, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, f"no line within {timeout}s (so far {self.buffer!r})"
            if select.select([self.fd], [], [], left)[0]:
                chunk = os.read(self.fd, 4096)
                assert chunk, f"stdout closed (so far {self.buffer!r})"
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode()


def _completed(store: StoreName, run: str) -> bool:
    return bool(wfsched_json(store, "runs", "show", run)["state"] == "completed")


def test_logs_prints_the_latest_run_and_follows_each_next_one(
    store: StoreName, tmp_path: Path
) -> None:
    define(store, tmp_path, "echo", ECHO)
    none_yet = wfsched(store, "logs", "echo")
    assert none_yet.returncode == 3 and none_yet.stdout == ""
    assert "echo has no run that started yet" in none_yet.stderr
    assert wfsched(store, "logs", "no-such").returncode == 3
    follow = subprocess.Popen(
        [sys.executable, "-m", "wfsched", "--store", str(store), "logs", "echo", "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        lines = Lines(follow)
        for run in ("run-000001", "run-000002"):
            assert wfsched(store, "trigger", "echo").returncode == 0
            assert lines.next().startswith(f"==> {run} attempt 1 (manual, started ")
            assert lines.next() == f"out of {run}"
        follow.send_signal(signal.SIGINT)
        _, err = follow.communicate(timeout=15)
        assert follow.returncode == 0, "Ctrl-C is how a follow ends"
        assert err.decode() == "wfsched: note: waiting for the first run of echo\n"
        wait_for(lambda: _completed(store, "run-000002"), what="the second run")
        latest = wfsched(store, "logs", "echo")
        assert (latest.returncode, latest.stdout) == (0, "out of run-000002\n"), latest.stderr
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
        daemon.stop()


@pytest.fixture
def many(tmp_path: Path) -> Path:
    """A SQLite store with 300 schedules: their listing is far more than a
    pipe's buffer, so a reader that leaves early closes it under the writer."""
    folder = tmp_path / "many"
    folder.mkdir()
    for n in range(300):
        (folder / f"job-{n:03d}.toml").write_text(
            f'id = "job-{n:03d}"\n[trigger]\ncron = "*/5 * * * *"\n[run]\ncommand = ["true"]\n'
        )
    store = tmp_path / "store"
    assert wfsched(store, "apply", str(folder)).returncode == 0
    return store


@pytest.mark.parametrize("args", [["list"], ["list", "--json"], ["get", "job-000"]])
@pytest.mark.parametrize("reader", ["head -1", "true"])
def test_a_reader_that_leaves_early_is_not_an_error(
    many: Path, args: list[str], reader: str
) -> None:
    """`true` has left before the first write; `head -1` leaves after a line."""
    command = " ".join([sys.executable, "-m", "wfsched", "--store", str(many), *args])
    piped = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{command} | {reader}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (piped.returncode, piped.stderr) == (0, ""), piped.stderr
    assert len(piped.stdout.splitlines()) == (1 if reader == "head -1" else 0)


def test_the_real_cli_at_80_columns_cuts_no_word(many: Path) -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "wfsched", "--store", str(many), "list"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert lines[0].split() == ["ID", "STATE", "NEXT", "(UTC)", "LEFT", "LAST", "OUTCOME", "ACTIVE"]
    assert [line.split()[0] for line in lines[2:]] == [f"job-{n:03d}" for n in range(300)]
    wide = subprocess.run(
        [sys.executable, "-m", "wfsched", "--store", str(many), "list", "--wide"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        timeout=60,
    )
    assert "TRIGGER" in wide.stdout.splitlines()[0] and len(wide.stdout.splitlines()) == 302


# -- in-process CLI over a store the supervisor loop filled ---------------------------


@pytest.fixture
def ran(store_path: Path, clock: SettableClock) -> Iterator[Harness]:
    """Five runs of `a` (one cancelled by hand), seven recorded instants."""
    h = Harness(store_path)
    h.define("a", cron="*/15 * * * *")
    for n in range(4):
        h.tick_at(T0 + 15 * MINUTE * n)
        h.control.finish(f"run-{n + 1:06d}", exit_code=0)
        h.tick_at(T0 + 15 * MINUTE * n + 5)
    h.runs.request_trigger("a")
    h.tick_at(T0 + 50 * MINUTE)
    h.runs.request_cancel("run-000005")
    h.tick_at(T0 + 50 * MINUTE + 1)
    h.control.finish("run-000005", exit_code=None, outcome="cancelled", reason="cancelled")
    h.tick_at(T0 + 50 * MINUTE + 2)
    clock.now = T0 + 55 * MINUTE
    yield h
    h.store.close()


def _pages(run_cli: CliRun, *args: str) -> list[str]:
    """Every page of a JSON listing through its cursors; the ids in order."""
    seen: list[str] = []
    cursor: list[str] = []
    while True:
        code, out, err = run_cli(*args, *cursor, "--json")
        assert code == 0, err
        page = json.loads(out)
        seen += [item.get("run_id") or item["scheduled_at"] for item in page["items"]]
        if page["next_cursor"] is None:
            return seen
        cursor = ["--page", page["next_cursor"]]


def test_reverse_pages_the_other_way_with_a_cursor_of_its_own(
    run_cli: CliRun, ran: Harness
) -> None:
    runs = _pages(run_cli, "runs", "--limit", "2")
    assert runs == [f"run-{n:06d}" for n in (5, 4, 3, 2, 1)]
    assert _pages(run_cli, "runs", "--limit", "2", "--reverse") == runs[::-1]
    history = _pages(run_cli, "occurrences", "a", "--limit", "2")
    assert len(history) == 4
    assert _pages(run_cli, "occurrences", "a", "--limit", "2", "--reverse") == history[::-1]
    code, out, _ = run_cli("occurrences", "a", "--limit", "3", "--reverse")
    assert code == 0 and out.splitlines()[2].startswith("2026-12-01T09:45:00Z")
    next_line = out.splitlines()[-1]
    assert next_line.startswith("next page: wfsched occurrences a --limit 3 --reverse --page ")
    cursor = next_line.split()[-1]
    code, _, err = run_cli("occurrences", "a", "--limit", "3", "--page", cursor)
    assert code == 2
    assert err == (
        f"wfsched: error: cursor {cursor!r} is from a listing with --reverse; add --reverse,"
        " with the previous page's other options\n"
    )
    runs_cursor = json.loads(run_cli("runs", "--limit", "1", "--json")[1])["next_cursor"]
    code, _, err = run_cli("runs", "--reverse", "--page", runs_cursor)
    assert code == 2 and "is from a listing without --reverse; drop --reverse" in err


def test_runs_show_started_and_duration(run_cli: CliRun, ran: Harness) -> None:
    code, out, _ = run_cli("runs", "--limit", "2")
    assert code == 0
    header, _, cancelled, done = out.splitlines()[:4]
    assert "STARTED (UTC)" in header and "DURATION" in header
    assert "2026-12-01T09:50:00Z" in cancelled and " 1s " in cancelled
    assert "2026-12-01T09:45:00Z" in done and " 0s " in done


def test_a_run_id_may_drop_its_leading_zeros(run_cli: CliRun, ran: Harness) -> None:
    shown = {form: run_cli("runs", "show", form, "--json") for form in ("run-1", "1", "run-000001")}
    assert {code for code, _, _ in shown.values()} == {0}
    assert {json.loads(out)["run_id"] for _, out, _ in shown.values()} == {"run-000001"}
    code, _, err = run_cli("runs", "logs", "run-2")
    assert code in (0, 3) and "no run" not in err
    code, out, _ = run_cli("runs", "cancel", "run-3")
    assert (code, out) == (0, "run-000003 had already finished (completed); nothing to cancel\n")
    assert run_cli("runs", "show", "run-01x")[0] == 3


def test_list_says_a_cancelled_manual_last_run_was_cancelled(run_cli: CliRun, ran: Harness) -> None:
    item = json.loads(run_cli("list", "--json")[1])["items"][0]
    assert item["last_outcome"] == "failed", "the newest run's state, as documented"
    assert item["last_run"] == {
        "run_id": "run-000005",
        "kind": "manual",
        "state": "failed",
        "outcome": "cancelled",
        "started_at": "2026-12-01T09:50:00.000Z",
        "finished_at": "2026-12-01T09:50:01.000Z",
    }
    row = run_cli("list")[1].splitlines()[2]
    assert "cancelled (manual)" in row and "failed" not in row
    assert " 5m " in row, "LEFT: 5 minutes until 10:00"


def test_next_of_a_paused_schedule_marks_every_instant(run_cli: CliRun, ran: Harness) -> None:
    assert run_cli("pause", "a")[0] == 0
    items = json.loads(run_cli("next", "a", "--count", "2", "--json")[1])["items"]
    assert [item["held"] for item in items] == ["paused", "paused"]
    out = run_cli("next", "a", "--count", "2")[1]
    assert out.splitlines()[-1] == (
        "paused: none of these runs unless `wfsched resume a` comes first"
    )
    assert run_cli("resume", "a")[0] == 0
    items = json.loads(run_cli("next", "a", "--count", "2", "--json")[1])["items"]
    assert [item["held"] for item in items] == [None, None]
    assert "paused" not in run_cli("next", "a")[1]


def test_logs_refuses_both_streams_and_an_unknown_schedule(run_cli: CliRun, ran: Harness) -> None:
    assert run_cli("logs", "a", "--stdout", "--stderr") == (
        2,
        "",
        "wfsched: error: --stdout and --stderr cannot be combined; give neither for both\n",
    )
    code, out, err = run_cli("logs", "nope", "--follow")
    assert (code, out) == (3, "") and "no schedule 'nope'" in err
