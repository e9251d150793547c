"""The run keeper and its client, with real processes (Linux only).

Jobs that must stay alive while the test looks at them wait for a `go` file
the test creates, rather than sleeping for a guessed time; every wait polls
a deadline. A process counts as gone when it is absent or a zombie: some
inits (a container's pid 1) never reap the orphans these tests create.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import selectors
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from wfsched.process.keeper import _start_tick
from wfsched.process.launcher import (
    AlreadyLaunched,
    CommandNotStarted,
    ExitRecord,
    Launcher,
    LauncherError,
    LaunchSpec,
    RecordError,
    ShimHandle,
    _write_exit_records,
    exit_outcome,
    launch_locked,
    process_start_time,
    read_exit_record,
    read_shim_record,
)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the launcher is Linux only")

T = TypeVar("T")
PATH = os.environ.get("PATH", os.defpath)
WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.02; done"


def wait_for(check: Callable[[], T | None], timeout: float = 10.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


def stat_fields(pid: int) -> list[bytes] | None:
    """Fields after comm: [state, ppid, pgrp, ...]; None if no such process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return raw[raw.rindex(b")") + 2 :].split()


def gone(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is None or fields[0] in (b"Z", b"X")


def live_group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                members.append(int(entry))
    return members


def open_paths(pid: int) -> list[str]:
    paths = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            paths.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return paths


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    with Launcher() as started:
        try:
            yield started
        finally:
            # A test that failed midway leaves nothing running (a command
            # waiting for its `go` file would loop for ever).
            with contextlib.suppress(LauncherError):
                for live in started.list_live():
                    started.cancel(ShimHandle(live["pid"], live["start_time"]))


def make_spec(
    tmp_path: Path,
    argv: tuple[str, ...],
    *,
    attempt: int = 1,
    timeout: int | None = None,
    kill_grace: int = 1,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    stdin: bytes = b'{"answer": 42}\n',
) -> LaunchSpec:
    attempt_dir = tmp_path / "runs" / "run-000001" / f"attempt-{attempt}"
    attempt_dir.mkdir(parents=True)
    record_dir = tmp_path / "records" / "run-000001" / f"attempt-{attempt}"
    record_dir.mkdir(parents=True)
    stdin_path = tmp_path / f"input-{attempt}.json"
    stdin_path.write_bytes(stdin)
    return LaunchSpec(
        run_id="run-000001",
        attempt=attempt,
        argv=argv,
        cwd=str(tmp_path) if cwd is None else cwd,
        env={"PATH": PATH} if env is None else env,
        stdin_path=str(stdin_path),
        attempt_dir=str(attempt_dir),
        record_dir=str(record_dir),
        timeout=timeout,
        kill_grace=kill_grace,
    )


def wait_exit(spec: LaunchSpec, timeout: float = 10.0) -> ExitRecord:
    return wait_for(lambda: read_exit_record(spec.record_dir), timeout, "the exit record")


def log(spec: LaunchSpec, name: str) -> str:
    return Path(spec.attempt_dir, name).read_text()


# -- outcomes ----------------------------------------------------------------------


def test_exit_zero_writes_records_and_logs(launcher: Launcher, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, ("sh", "-c", "echo out; echo err >&2"))
    before = time.time()
    handle = launcher.spawn(spec)
    record = wait_exit(spec)

    assert record.attempt == 1
    assert (record.outcome, record.exit_code, record.signal, record.reason) == (
        "exited",
        0,
        None,
        None,
    )
    assert before <= record.started_at <= record.finished_at <= time.time()
    assert read_shim_record(spec.record_dir) == handle
    assert log(spec, "stdout.log") == "out\n"
    assert log(spec, "stderr.log") == "err\n"
    # Records apart from the job's files; renamed into place: no temporary file.
    assert sorted(os.listdir(spec.attempt_dir)) == ["stderr.log", "stdout.log"]
    assert sorted(os.listdir(spec.record_dir)) == ["exit.json", "shim.json"]


def test_a_spec_encoded_ahead_is_sent_as_encoded(
    launcher: Launcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A held admission encodes its spawn requests before its commit: the
    spawn then sends that encoding (nothing of the spec is encoded again).
    Only the very spec object is: another one is encoded as it is spawned."""
    spec = make_spec(tmp_path, ("sh", "-c", "echo ahead"))
    other = make_spec(tmp_path, ("sh", "-c", "echo other"), attempt=2)
    launcher.encode_ahead([spec])

    def no_encoding(spec: LaunchSpec) -> dict[str, object]:
        raise AssertionError("encoded again")

    monkeypatch.setattr("wfsched.process.launcher._spawn_wire", no_encoding)
    launcher.spawn(spec)
    assert wait_exit(spec).outcome == "exited" and log(spec, "stdout.log") == "ahead\n"
    with pytest.raises(AssertionError, match="encoded again"):
        launcher.spawn(spec)  # taken once: a second spawn encodes anew
    monkeypatch.undo()
    launcher.spawn(other)
    assert wait_exit(other).outcome == "exited"


def test_nonzero_exit(launcher: Launcher, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, ("sh", "-c", "exit 3"), attempt=2)
    launcher.spawn(spec)
    record = wait_exit(spec)
    assert (record.attempt, record.outcome, record.exit_code) == (2, "exited", 3)
    assert record.reason == "exited with code 3"


def test_killed_by_signal(launcher: Launcher, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, ("sh", "-c", "kill -9 $$"))
    launcher.spawn(spec)
    record = wait_exit(spec)
    assert (record.outcome, record.exit_code, record.signal) == ("signaled", None, 9)
    assert record.reason == "killed by signal 9 (SIGKILL)"


def test_timeout_terminates_the_whole_group(launcher: Launcher, tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        ("sh", "-c", "echo $$ > pgid; sleep 30 & echo $! > child; wait"),
        timeout=1,
        kill_grace=1,
    )
    start = time.monotonic()
    launcher.spawn(spec)
    record = wait_exit(spec, timeout=8)
    elapsed = time.monotonic() - start

    assert record.outcome == "timeout"
    assert record.reason == "timed out after 1s; process group terminated"
    assert record.signal == signal.SIGTERM
    assert 1 <= elapsed < 5
    pgid = int((tmp_path / "pgid").read_text())
    child = int((tmp_path / "child").read_text())
    assert gone(child)
    assert live_group_members(pgid) == []


def test_timeout_escalates_to_sigkill_after_grace(launcher: Launcher, tmp_path: Path) -> None:
    # The shell and its background sleep both ignore SIGTERM.
    spec = make_spec(
        tmp_path,
        ("sh", "-c", "trap '' TERM; echo $$ > pgid; sleep 30 & wait"),
        timeout=1,
        kill_grace=1,
    )
    start = time.monotonic()
    launcher.spawn(spec)
    record = wait_exit(spec, timeout=8)

    assert time.monotonic() - start >= 2  # timeout + full grace
    assert record.outcome == "timeout"
    assert record.reason == ("timed out after 1s; process group killed (SIGKILL after 1s grace)")
    assert record.signal == signal.SIGKILL
    assert live_group_members(int((tmp_path / "pgid").read_text())) == []


def test_a_command_whose_keeper_died_before_naming_it_is_found_by_its_fingerprint(
    tmp_path: Path,
) -> None:
    """The started record written before the spawn names the keeper; the
    command (a session leader) is found by the run directory and attempt it
    was started with, and only that command."""
    from wfsched.process.launcher import launch_fingerprint

    env = {"PATH": PATH, "WFSCHED_RUN_DIR": str(tmp_path / "run-000001"), "WFSCHED_ATTEMPT": "2"}
    others = [
        {**env, "WFSCHED_ATTEMPT": "1"},  # another attempt of the run
        {**env, "WFSCHED_RUN_DIR": str(tmp_path / "run-000002")},  # another run
    ]
    procs = [
        subprocess.Popen(["sleep", "30"], env=e, start_new_session=True) for e in [*others, env]
    ]
    record_dir = tmp_path / "records"
    record_dir.mkdir()
    fingerprint = launch_fingerprint(env)
    try:
        dead_keeper = {"pid": 2**22 + 1, "start_time": 1, "run_id": "run-000001", "attempt": 2}
        (record_dir / "shim.json").write_text(json.dumps({**dead_keeper, "find": fingerprint}))
        handle = read_shim_record(str(record_dir))
        assert handle is not None and handle.pid == procs[-1].pid
        procs[-1].kill()
        procs[-1].wait()
        # Nothing of it left: the record's own identity, as before.
        assert read_shim_record(str(record_dir)) == ShimHandle(2**22 + 1, 1)
        assert launch_fingerprint({"PATH": PATH}) is None  # a failure hook: nothing to find by
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_timeout_beyond_poll_range_never_stops_the_keeper(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A timeout and kill_grace of ages (a shim once died of OverflowError in
    its poll, leaving its job running): the keeper waits them out in pieces,
    keeps serving other runs, and still ends the job when asked."""
    ages = 10**12  # seconds: far beyond poll()'s milliseconds in a C int
    long = make_spec(tmp_path / "long", ("sleep", "30"), timeout=ages, kill_grace=ages)
    handle = launcher.spawn(long)
    short = make_spec(tmp_path / "short", ("true",))
    launcher.spawn(short)
    assert wait_exit(short).outcome == "exited"
    assert launcher.alive(handle)
    assert launcher.cancel(handle)
    assert wait_exit(long).outcome == "cancelled"


def test_cancel_terminates_the_group(launcher: Launcher, tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path, ("sh", "-c", f"echo $$ > pgid; sleep 30 & echo $! > child; {WAIT_FOR_GO}")
    )
    handle = launcher.spawn(spec)
    child = tmp_path / "child"
    # Whole, not just created: `>` makes the file before echo writes it.
    wait_for(lambda: child.exists() and child.read_text().endswith("\n"), what="the job to start")

    assert launcher.cancel(handle)
    record = wait_exit(spec)
    assert record.outcome == "cancelled"
    assert record.reason == "cancelled; process group terminated"
    assert gone(int(child.read_text()))
    assert live_group_members(int((tmp_path / "pgid").read_text())) == []
    wait_for(lambda: not launcher.alive(handle), what="the run to end")
    assert not launcher.cancel(handle)


def test_the_longest_timeout_and_grace_are_watched_not_a_keeper_crash(
    launcher: Launcher, tmp_path: Path
) -> None:
    """poll() takes a C int of milliseconds (about 24.8 days); definitions allow
    3650d. A keeper that died of the overflow would leave its jobs unwatched."""
    longest = 3650 * 86400
    job = f"trap 'exit 7' TERM; echo started > started; {WAIT_FOR_GO}"
    finishing = make_spec(tmp_path, ("sh", "-c", job), timeout=longest, kill_grace=longest)
    handle = launcher.spawn(finishing)
    wait_for(lambda: (tmp_path / "started").exists(), what="the job to start")
    (tmp_path / "go").touch()
    # Only a live keeper writes "exited" with the job's status.
    assert wait_exit(finishing).outcome == "exited"
    wait_for(lambda: not launcher.alive(handle), what="the run to end")

    (tmp_path / "go").unlink()
    (tmp_path / "started").unlink()
    cancelled = make_spec(
        tmp_path, ("sh", "-c", job), attempt=2, timeout=longest, kill_grace=longest
    )
    handle = launcher.spawn(cancelled)
    wait_for(lambda: (tmp_path / "started").exists(), what="the job to start")
    assert launcher.cancel(handle)
    record = wait_exit(cancelled)
    assert (record.outcome, record.reason) == ("cancelled", "cancelled; process group terminated")


def test_normal_exit_leaves_background_children_alone(launcher: Launcher, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, ("sh", "-c", f"({WAIT_FOR_GO}) & echo $! > child"))
    launcher.spawn(spec)
    assert wait_exit(spec).outcome == "exited"
    child = int((tmp_path / "child").read_text())
    try:
        assert not gone(child)
    finally:
        (tmp_path / "go").touch()
    wait_for(lambda: gone(child), what="the background child to finish")


# -- spawn failures never crash the keeper -------------------------------------------


def not_started(launcher: Launcher, spec: LaunchSpec) -> ExitRecord:
    """The reply names the failure, and the exit record (on disk before the
    reply) says it too; the lock is free again and the keeper still serves."""
    with pytest.raises(CommandNotStarted) as raised:
        launcher.spawn(spec)
    record = read_exit_record(spec.record_dir)
    assert record is not None and str(raised.value) == record.reason
    assert not launch_locked(spec.record_dir)
    assert launcher.list_live() == []
    return record


def test_missing_executable(launcher: Launcher, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, ("wfsched-no-such-command", "--flag"))
    record = not_started(launcher, spec)
    assert (record.outcome, record.exit_code, record.signal) == ("spawn-failed", None, None)
    assert record.reason == "cannot execute 'wfsched-no-such-command': No such file or directory"


def test_bad_cwd(launcher: Launcher, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-dir")
    spec = make_spec(tmp_path, ("true",), cwd=missing)
    record = not_started(launcher, spec)
    assert record.outcome == "spawn-failed"
    assert record.reason == f"cannot change to directory {missing!r}: No such file or directory"


def test_not_executable(launcher: Launcher, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    spec = make_spec(tmp_path, (str(script),))
    record = not_started(launcher, spec)
    assert record.outcome == "spawn-failed"
    assert record.reason == f"cannot execute {str(script)!r}: Permission denied"


def test_missing_input_file(launcher: Launcher, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, ("cat",))
    os.unlink(spec.stdin_path)
    record = not_started(launcher, spec)
    assert record.outcome == "spawn-failed"
    assert record.reason is not None
    assert spec.stdin_path in record.reason


# -- what the command sees ----------------------------------------------------------


def test_environment_is_exactly_the_given_one(
    launcher: Launcher, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WFSCHED_TEST_LEAK", "must not reach the job")
    spec = make_spec(
        tmp_path,
        ("env",),
        env={"PATH": PATH, "WFSCHED_RUN_ID": "run-000001", "ODD": "a b=c"},
    )
    launcher.spawn(spec)
    assert wait_exit(spec).outcome == "exited"
    assert sorted(log(spec, "stdout.log").splitlines()) == sorted(
        [f"PATH={PATH}", "WFSCHED_RUN_ID=run-000001", "ODD=a b=c"]
    )


def test_stdin_is_the_input_file_and_cwd_is_applied(launcher: Launcher, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    spec = make_spec(tmp_path, ("sh", "-c", "cat; pwd"), cwd=str(workdir), stdin=b'{"x": 1}\n')
    launcher.spawn(spec)
    assert wait_exit(spec).outcome == "exited"
    assert log(spec, "stdout.log") == f'{{"x": 1}}\n{workdir}\n'


def test_command_gets_default_signals_and_only_three_fds(
    launcher: Launcher, tmp_path: Path
) -> None:
    # The keeper catches SIGINT/SIGHUP/SIGTERM (and its launcher starts it
    # with them blocked), Python ignores SIGPIPE/SIGXFSZ; none of that may
    # leak into a job (the command reads its own status: a shell's would be
    # racy while it forks), nor any fd of the keeper (locks, sockets).
    signals = make_spec(tmp_path, ("grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"))
    launcher.spawn(signals)
    fds = make_spec(tmp_path, ("sh", "-c", "ls /proc/$$/fd"), attempt=2)
    launcher.spawn(fds)
    assert wait_exit(signals).outcome == "exited"
    assert log(signals, "stdout.log").split() == [
        "SigBlk:",
        "0000000000000000",
        "SigIgn:",
        "0000000000000000",
    ]
    assert wait_exit(fds).outcome == "exited"
    assert log(fds, "stdout.log").split() == ["0", "1", "2"]


def test_the_start_time_from_the_clock_is_the_kernel_s_or_none() -> None:
    # The keeper takes a command's start time from CLOCK_BOOTTIME read
    # around its spawn, not from /proc: the two must agree, and readings
    # that straddle a clock tick must give None (the keeper reads /proc).
    tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    agreed = 0
    for _ in range(100):
        before = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        proc = subprocess.Popen(["true"])
        tick = _start_tick(before, time.clock_gettime_ns(time.CLOCK_BOOTTIME))
        if tick is not None:
            assert tick == process_start_time(proc.pid)  # a zombie until waited for
            agreed += 1
        proc.wait()
    assert agreed > 50
    assert _start_tick(5 * tick_ns - 1, 5 * tick_ns) is None
    assert _start_tick(5 * tick_ns, 6 * tick_ns - 1) == 5


# -- records -------------------------------------------------------------------------


def test_started_record_and_liveness(launcher: Launcher, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, ("sh", "-c", WAIT_FOR_GO))
    handle = launcher.spawn(spec)
    assert handle.start_time == process_start_time(handle.pid)
    assert read_shim_record(spec.record_dir) == handle  # written before the reply
    assert launcher.alive(handle)
    assert launch_locked(spec.record_dir)
    [live] = launcher.list_live()
    assert (live["pid"], live["start_time"], live["attempt"]) == (handle.pid, handle.start_time, 1)
    # Same pid, another start time: a reused pid is not our run.
    impostor = ShimHandle(handle.pid, handle.start_time + 1)
    assert not launcher.alive(impostor)
    assert not launcher.cancel(impostor)

    (tmp_path / "go").touch()
    assert wait_exit(spec).outcome == "exited"
    # The command is reaped before its record's batch is on disk; the lock
    # goes only after that, so a free lock means an ended, recorded run.
    wait_for(lambda: not launch_locked(spec.record_dir), what="the lock to be released")
    assert not launcher.alive(handle)
    assert launcher.list_live() == []
    assert process_start_time(2**22 + 1) is None
    assert not launcher.alive(ShimHandle(2**22 + 1, 1))


@pytest.mark.parametrize("tamper", ["directory", "symlink", "deleted"])
def test_a_job_that_replaces_its_lock_file_is_still_held_until_its_record(
    launcher: Launcher, tmp_path: Path, tamper: str
) -> None:
    """The keeper's lock is on the file it opened: a job that replaces or
    removes `shim.json` leaves the file lock unreadable, and the keeper's
    own word (it still holds the attempt) answers instead, until the exit
    record is on disk. Without it, the moment between the keeper's reap and
    its batch read as an abandoned run."""
    spec = make_spec(tmp_path, ("sh", "-c", WAIT_FOR_GO))
    launcher.spawn(spec)
    lock = Path(spec.record_dir) / "shim.json"
    lock.unlink()
    if tamper == "directory":
        lock.mkdir()
    elif tamper == "symlink":
        lock.symlink_to(tmp_path / "elsewhere")
    if tamper == "symlink":
        with pytest.raises(RecordError):
            launch_locked(spec.record_dir)
    else:
        assert not launch_locked(spec.record_dir)
    assert launcher.launch_locked(spec.record_dir)
    (tmp_path / "go").touch()
    assert wait_exit(spec).outcome == "exited"
    wait_for(lambda: launcher.list_live() == [], what="the run to be let go")
    # Let go, and recorded: free, even where the lock file cannot be read.
    assert not launcher.launch_locked(spec.record_dir)
    Path(spec.record_dir, "exit.json").unlink()
    if tamper == "symlink":
        with pytest.raises(RecordError):  # neither held nor recorded: unknowable
            launcher.launch_locked(spec.record_dir)
    else:
        assert not launcher.launch_locked(spec.record_dir)


def test_exit_record_reader(tmp_path: Path) -> None:
    assert read_exit_record(str(tmp_path)) is None
    assert read_shim_record(str(tmp_path)) is None
    good = {
        "attempt": 2,
        "outcome": "timeout",
        "exit_code": None,
        "signal": 15,
        "reason": "timed out after 2h; process group terminated",
        "started_at": 10,
        "finished_at": 7210.5,
        "run_id": "run-000001",  # extra fields are ignored
    }
    (tmp_path / "exit.json").write_text(json.dumps(good))
    assert read_exit_record(str(tmp_path)) == ExitRecord(
        2, "timeout", None, 15, "timed out after 2h; process group terminated", 10.0, 7210.5
    )
    broken: list[str] = [
        json.dumps(good)[:30],  # torn write
        "",
        "[]",
        json.dumps({**good, "outcome": "vanished"}),
        json.dumps({**good, "attempt": "2"}),
        json.dumps({**good, "exit_code": True}),
        json.dumps({k: v for k, v in good.items() if k != "finished_at"}),
    ]
    for text in broken:
        (tmp_path / "exit.json").write_text(text)
        with pytest.raises(ValueError, match=r"exit\.json"):
            read_exit_record(str(tmp_path))
    (tmp_path / "shim.json").write_text('{"pid": 12}')
    with pytest.raises(ValueError, match="start_time"):
        read_shim_record(str(tmp_path))


# -- the server ----------------------------------------------------------------------


def wait_reported(launcher: Launcher, pids: set[int]) -> set[int]:
    """The exits the keeper reports (its events connection), until `pids`
    are among them."""
    reported: set[int] = set()
    with selectors.DefaultSelector() as selector:
        selector.register(launcher.fileno(), selectors.EVENT_READ)

        def all_reported() -> bool:
            if selector.select(timeout=0.5):
                reported.update(launcher.drain_exits())
            return pids <= reported

        wait_for(all_reported, what="the reported exits")
    return reported


def test_server_reports_reaped_shims(launcher: Launcher, tmp_path: Path) -> None:
    specs = [make_spec(tmp_path, ("true",), attempt=n) for n in (1, 2, 3)]
    pids = {launcher.spawn(spec).pid for spec in specs}
    assert wait_reported(launcher, pids) == pids
    assert launcher.drain_exits() == []  # non-blocking when nothing is new


def test_exits_seen_in_one_turn_are_recorded_as_one_batch_each_lock_held_until_its_record(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Three commands end while their keeper is stopped, so it reaps them in
    one turn and writes their records as one batch (their timers due in
    that turn too: a record queued twice killed the keeper). Whenever a launch lock
    is seen free, that attempt's exit record is already there (the lock is
    what says "alive" once the pid is reaped); every exit is reported."""
    specs = [
        dataclasses.replace(
            make_spec(tmp_path, ("sh", "-c", f"{WAIT_FOR_GO}; exit {n}"), attempt=n),
            timeout=3600,
            max_log_bytes=65536,
        )
        for n in (1, 2, 3)
    ]
    pids = {launcher.spawn(spec).pid for spec in specs}
    keeper = launcher.server_pid
    assert keeper is not None
    os.kill(keeper, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        (tmp_path / "go").touch()
        wait_for(lambda: all(gone(pid) for pid in pids), what="the commands to end")
        # Each run's log-size timer (every 0.1-0.4 s here) is then due in the
        # very turn that queues its exit record: it must not queue it twice.
        wait_for(lambda: time.monotonic() > stopped + 1.0, what="the log timers to be due")
        assert all(launch_locked(spec.record_dir) for spec in specs)
        assert all(read_exit_record(spec.record_dir) is None for spec in specs)
    finally:
        os.kill(keeper, signal.SIGCONT)

    def all_released() -> bool:
        free = [not launch_locked(spec.record_dir) for spec in specs]
        records = [read_exit_record(spec.record_dir) for spec in specs]
        for released, record in zip(free, records, strict=True):
            assert record is not None or not released, "a lock freed before its record"
        return all(free)

    wait_for(all_released, what="the locks released")
    for n, spec in enumerate(specs, 1):
        record = read_exit_record(spec.record_dir)
        assert record is not None and (record.outcome, record.exit_code) == ("exited", n)
        assert not Path(spec.record_dir, "exit.json.tmp").exists()
    wait_reported(launcher, pids)


def test_a_record_that_fails_in_a_batch_leaves_the_others_on_disk(tmp_path: Path) -> None:
    """Each record of a batch succeeds or fails alone (the keeper retries or
    gives up on that one): a missing directory fails its record with the
    OSError, the others are written whole; the fault hook is reached once
    per record renamed into place."""
    dirs = [tmp_path / f"attempt-{n}" for n in (1, 2, 3)]
    for directory in (dirs[0], dirs[2]):
        directory.mkdir()
    record = {
        "attempt": 1,
        "outcome": "exited",
        "exit_code": 0,
        "signal": None,
        "reason": None,
        "started_at": 1.0,
        "finished_at": 2.0,
        "run_id": "run-000001",
    }
    reached: list[str] = []
    failures = _write_exit_records([(str(d), record) for d in dirs], reached.append)
    assert failures[0] is None and failures[2] is None
    assert isinstance(failures[1], FileNotFoundError)
    assert reached == ["keeper-exit-record-renamed"] * 2
    for directory in (dirs[0], dirs[2]):
        assert read_exit_record(str(directory)) == ExitRecord(1, "exited", 0, None, None, 1.0, 2.0)
        assert sorted(os.listdir(directory)) == ["exit.json"]


def test_warm_and_the_fork_probe_leave_nothing_behind_and_are_never_reported(
    launcher: Launcher, tmp_path: Path
) -> None:
    server = launcher.server_pid
    assert server is not None
    for _ in range(3):
        launcher.warm()
        launcher.probe_fork()
    children = Path(f"/proc/{server}/task/{server}/children").read_text().split()
    assert children == [], "the probe's child was reaped by the keeper itself"
    handle = launcher.spawn(make_spec(tmp_path, ("true",)))
    # Events are ordered: a reported probe child would come first.
    reported: list[int] = []

    def shim_reported() -> bool:
        reported.extend(launcher.drain_exits())
        return handle.pid in reported

    wait_for(shim_reported, what="the real shim's exit")
    assert reported == [handle.pid]


def test_spawn_errors_and_stop(tmp_path: Path) -> None:
    launcher = Launcher()
    spec = make_spec(tmp_path, ("sh", "-c", f"{WAIT_FOR_GO}; echo done"))
    with pytest.raises(LauncherError, match="not started"):
        launcher.spawn(spec)
    launcher.start()
    with pytest.raises(RuntimeError):
        launcher.start()
    missing = dataclasses.replace(spec, attempt_dir=str(tmp_path / "nowhere"))
    with pytest.raises(LauncherError, match="directory does not exist"):
        launcher.spawn(missing)
    handle = launcher.spawn(spec)
    server = launcher.server_pid
    assert server is not None

    launcher.stop()
    launcher.stop()  # idempotent
    assert not gone(server)  # stop() only disconnects: the keeper keeps its run
    assert not gone(handle.pid)
    with pytest.raises(LauncherError):
        launcher.spawn(spec)
    (tmp_path / "go").touch()
    assert wait_exit(spec).outcome == "exited"
    assert log(spec, "stdout.log") == "done\n"
    # With neither a run nor a client, the keeper exits by itself.
    wait_for(lambda: gone(server), what="the idle keeper to exit")


def test_server_death_is_reported(tmp_path: Path) -> None:
    with Launcher() as launcher:
        assert launcher.server_pid is not None
        os.kill(launcher.server_pid, signal.SIGKILL)
        with selectors.DefaultSelector() as selector:
            selector.register(launcher.fileno(), selectors.EVENT_READ)
            assert selector.select(timeout=10)
        with pytest.raises(LauncherError, match="exited"):
            launcher.drain_exits()
        with pytest.raises(LauncherError):
            launcher.spawn(make_spec(tmp_path, ("true",)))


def test_keeper_is_a_fresh_interpreter_holding_only_its_own(tmp_path: Path) -> None:
    # An inheritable descriptor of ours (a lock or database file, say) must
    # not reach the keeper, which is this interpreter started afresh, isolated
    # and without site, in a session of its own.
    leak = os.open(tmp_path / "held.db", os.O_RDWR | os.O_CREAT)
    os.set_inheritable(leak, True)
    try:
        with Launcher(tmp_path / "store") as launcher:
            server = launcher.server_pid
            assert server is not None
            argv = Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")
            assert argv[0] == os.fsencode(sys.executable)
            assert b"-I" in argv and b"-S" in argv
            fields = stat_fields(server)
            assert fields is not None and int(fields[1]) == os.getpid()
            assert int(fields[3]) == server  # its own session
            assert Path(f"/proc/{server}/comm").read_text() == "wfsched-keeper\n"
            fds = {
                int(fd): os.readlink(f"/proc/{server}/fd/{fd}")
                for fd in os.listdir(f"/proc/{server}/fd")
            }
            # stdin and stdout (/dev/null), our stderr, its signal wakeup
            # pipe, keeper.lock, its directory, the listening socket and our
            # two connections: nothing else.
            assert len(fds) == 10, fds
            assert fds[0] == fds[1] == "/dev/null"
            assert str(tmp_path / "held.db") not in fds.values()
            kinds = sorted(path.split(":")[0] for fd, path in fds.items() if fd > 2)
            assert kinds.count("pipe") == 2 and kinds.count("socket") == 3, fds
            spec = make_spec(tmp_path, ("true",))
            launcher.spawn(spec)
            assert wait_exit(spec).outcome == "exited"
    finally:
        os.close(leak)


def test_the_keeper_imports_nothing_heavy() -> None:
    # The keeper runs its module and the launcher's alone (see _keeper_argv),
    # for as long as runs last. No store, CLI or third-party module belongs there.
    package_parent = str(Path(__file__).resolve().parents[1])
    module = Launcher.__module__
    keeper = "wfsched.process.keeper"
    probe = (
        f"import sys; sys.path.append(sys.argv[1]); import {keeper};"
        " print(' '.join(sorted(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, package_parent],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # The launcher, the packages above it (whose __init__ must stay empty)
    # and the errors module: nothing else of wfsched.
    packages = {module.rsplit(".", depth)[0] for depth in range(1, module.count(".") + 1)}
    expected = {module, keeper, "wfsched.errors", *packages}
    assert {m for m in out if m.startswith("wfsched")} == expected
    heavy = {"sqlite3", "click", "rich", "croniter", "filelock", "tomllib", "zoneinfo", "site"}
    assert heavy.isdisjoint(out)


def test_the_keeper_loads_its_hash_before_the_first_launch_and_never_openssl(
    launcher: Launcher, tmp_path: Path
) -> None:
    """A launch's started record carries a BLAKE2 fingerprint. Loaded
    through hashlib on the first launch, OpenSSL's libcrypto cost that
    launch 4-5 ms and the keeper 3.4 MB for as long as it lived."""
    server = launcher.server_pid
    assert server is not None

    def mapped() -> str:
        return Path(f"/proc/{server}/maps").read_text()

    assert "_blake2" in mapped()
    env = {"PATH": PATH, "WFSCHED_RUN_DIR": str(tmp_path / "runs" / "run-000001")}
    spec = make_spec(tmp_path, ("true",), env={**env, "WFSCHED_ATTEMPT": "1"})
    launcher.spawn(spec)
    assert wait_exit(spec).outcome == "exited"
    assert "libcrypto" not in mapped()


def test_keeper_outlives_terminal_and_stop_signals(launcher: Launcher, tmp_path: Path) -> None:
    # Ctrl-C or systemd's SIGTERM may reach it; the keeper keeps serving
    # (and recording exits).
    server = launcher.server_pid
    assert server is not None
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        os.kill(server, signum)
    spec = make_spec(tmp_path, ("true",))
    launcher.spawn(spec)
    assert wait_exit(spec).outcome == "exited"
    assert not gone(server)


def test_restart_after_stop_re_attaches_and_shutdown_lets_the_keeper_go(
    tmp_path: Path,
) -> None:
    # The supervisor replaces a lost connection with stop() then start(), and
    # a restarted supervisor starts with start(): the same keeper while it
    # lives. shutdown() lets it go: it takes no new client or launch,
    # finishes its run and exits, and a start() meanwhile gets a new keeper.
    launcher = Launcher(tmp_path / "store")
    launcher.start()
    first = launcher.server_pid
    held = make_spec(tmp_path, ("sh", "-c", WAIT_FOR_GO))
    handle = launcher.spawn(held)
    launcher.stop()
    launcher.start()
    assert launcher.server_pid == first and launcher.alive(handle)
    launcher.shutdown()
    launcher.start()
    try:
        assert first is not None and launcher.server_pid not in (None, first)
        assert not gone(first) and launch_locked(held.record_dir)
        assert not launcher.alive(handle)  # not the new keeper's: its lock says it lives
        spec = make_spec(tmp_path, ("true",), attempt=2)
        launcher.spawn(spec)
        assert wait_exit(spec).outcome == "exited"
        (tmp_path / "go").touch()
        assert wait_exit(held).outcome == "exited"
        wait_for(lambda: gone(first), what="the old keeper to exit")
    finally:
        launcher.stop()


def test_signal_reaches_the_run_s_group_through_the_keeper(
    launcher: Launcher, tmp_path: Path
) -> None:
    spec = make_spec(tmp_path, ("sh", "-c", f"trap 'exit 9' USR1; echo $$ > pgid; {WAIT_FOR_GO}"))
    handle = launcher.spawn(spec)
    wait_for(lambda: (tmp_path / "pgid").exists(), what="the job to start")
    assert launcher.signal(handle, signal.SIGUSR1)
    record = wait_exit(spec)
    assert (record.outcome, record.exit_code) == ("exited", 9)
    assert not launcher.signal(handle, signal.SIGUSR1)  # ended: nothing to signal


def test_a_server_that_cannot_start_is_a_launcher_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launcher = Launcher(tmp_path / "store")
    fds_before = sorted(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(
        "wfsched.process.launcher._keeper_argv",
        lambda *args: [sys.executable, "-c", "import sys; sys.exit(3)"],
    )
    with pytest.raises(LauncherError, match="did not start: it exited with status 3"):
        launcher.start()
    monkeypatch.undo()  # the real _keeper_argv, but no interpreter to run it
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-such-python"))
    with pytest.raises(LauncherError, match="cannot start the run keeper"):
        launcher.start()
    assert launcher.server_pid is None
    assert sorted(os.listdir("/proc/self/fd")) == fds_before
    monkeypatch.undo()
    launcher.start()  # and it can still start for real
    launcher.stop()


def test_server_finds_the_package_without_site(tmp_path: Path) -> None:
    # A supervisor that found wfsched through PYTHONPATH and no site-packages
    # at all (not the editable install's finder): the server finds it too.
    package_parent = str(Path(__file__).resolve().parents[1])
    driver = textwrap.dedent(
        """
        import os, sys, time
        from wfsched.process.launcher import Launcher, LaunchSpec, read_exit_record
        os.mkdir("attempt-1")
        with Launcher() as launcher:
            launcher.spawn(LaunchSpec(
                run_id="run-000001", attempt=1, argv=("sh", "-c", "echo ran"), cwd=None,
                env={"PATH": os.environ["PATH"]}, stdin_path=os.devnull,
                attempt_dir="attempt-1", record_dir="attempt-1", timeout=None, kill_grace=1,
            ))
            deadline = time.monotonic() + 10
            while (record := read_exit_record("attempt-1")) is None:
                assert time.monotonic() < deadline, "no exit record"
                time.sleep(0.01)
        print(record.outcome, open("attempt-1/stdout.log").read().strip())
        """
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", driver],
        cwd=tmp_path,
        env={"PATH": PATH, "PYTHONPATH": package_parent},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["exited", "ran"]


DRIVER = textwrap.dedent(
    """
    import json, os, pathlib, signal, sys
    from wfsched.process.launcher import Launcher, LaunchSpec
    from wfsched.store.ownership import Ownership

    work, order = sys.argv[1], sys.argv[2]
    lock = Ownership(pathlib.Path(work, "supervisor.lock"))
    if order == "lock-first":
        lock.acquire()
    launcher = Launcher(os.path.join(work, "store"))
    launcher.start()
    if order == "launcher-first":
        lock.acquire()
    attempt_dir = os.path.join(work, "attempt-1")
    os.mkdir(attempt_dir)
    handle = launcher.spawn(LaunchSpec(
        run_id="run-000001", attempt=1,
        argv=("sh", "-c", "while [ ! -e go ]; do sleep 0.02; done; echo done > done.txt"),
        cwd=work, env={"PATH": os.environ["PATH"]}, stdin_path=os.devnull,
        attempt_dir=attempt_dir, record_dir=attempt_dir, timeout=None, kill_grace=1,
    ))
    with open(os.path.join(work, "ready.tmp"), "w") as ready:
        json.dump({"pid": handle.pid, "start_time": handle.start_time,
                   "server": launcher.server_pid}, ready)
    os.rename(os.path.join(work, "ready.tmp"), os.path.join(work, "ready.json"))
    signal.pause()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("order", ["launcher-first", "lock-first"])
def test_keeper_and_run_outlive_a_killed_owner_and_the_lock_dies_with_it(
    tmp_path: Path, order: str
) -> None:
    driver_py = tmp_path / "driver.py"
    driver_py.write_text(DRIVER)
    lock_path = tmp_path / "supervisor.lock"
    with open(tmp_path / "driver.err", "wb") as err:
        driver = subprocess.Popen(
            [sys.executable, str(driver_py), str(tmp_path), order],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_for(
            lambda: (tmp_path / "ready.json").exists() or driver.poll() is not None,
            what="the driver to spawn its job",
        )
        assert driver.poll() is None, (tmp_path / "driver.err").read_text()
        ready = json.loads((tmp_path / "ready.json").read_text())
        handle = ShimHandle(ready["pid"], ready["start_time"])
        server = ready["server"]
        # Neither the keeper nor the command holds the lock file, even when
        # the lock was taken before the keeper was started.
        for pid in (server, handle.pid):
            assert str(lock_path) not in open_paths(pid)
    finally:
        driver.kill()
        driver.wait(timeout=10)

    assert not gone(handle.pid)
    fd = os.open(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if anyone still holds it
    finally:
        os.close(fd)
    assert not gone(handle.pid)  # the lock was free while the run lived
    # The keeper outlives its owner: a new one re-attaches to it and adopts the run.
    with Launcher(tmp_path / "store") as successor:
        assert successor.server_pid == server
        assert successor.alive(handle)
        (tmp_path / "go").touch()
        record = wait_for(
            lambda: read_exit_record(str(tmp_path / "attempt-1")), what="the job's exit record"
        )
        assert handle.pid in wait_for(successor.drain_exits, what="the exit event")
    assert (record.outcome, record.exit_code) == ("exited", 0)
    assert (tmp_path / "done.txt").read_text() == "done\n"
    wait_for(lambda: gone(server), what="the idle keeper to exit")


# -- the launch lock ------------------------------------------------------------------


def test_the_launch_lock_is_held_by_the_keeper_alone_and_the_record_precedes_the_command(
    launcher: Launcher, tmp_path: Path
) -> None:
    seen = tmp_path / "seen"
    spec = make_spec(
        tmp_path, ("sh", "-c", f'cat "$REC/shim.json" > {seen}; echo $$ > pid; {WAIT_FOR_GO}')
    )
    spec = dataclasses.replace(spec, env={**spec.env, "REC": spec.record_dir})
    handle = launcher.spawn(spec)
    # The command found the started record already written when it began:
    # naming the keeper, or the command once the keeper rewrote it (the
    # command may run before that rewrite; under load it often does).
    record = wait_for(lambda: seen.exists() and seen.read_text(), what="the job's copy")
    assert json.loads(record)["pid"] in (handle.pid, launcher.server_pid)
    assert read_shim_record(spec.record_dir) == handle
    command = int(wait_for(lambda: (tmp_path / "pid").exists() and (tmp_path / "pid").read_text()))
    lock = os.path.join(spec.record_dir, "shim.json")
    assert launch_locked(spec.record_dir)
    assert lock in open_paths(launcher.server_pid or 0)
    assert lock not in open_paths(command)  # close-on-exec: the job never holds it
    # Never twice: not while it runs, not after it ended.
    with pytest.raises(AlreadyLaunched, match="is running"):
        launcher.spawn(spec)
    (tmp_path / "go").touch()
    assert wait_exit(spec).outcome == "exited"
    wait_for(lambda: not launch_locked(spec.record_dir), what="the lock to be released")
    with pytest.raises(AlreadyLaunched, match="was started"):
        launcher.spawn(spec)


def test_a_timeout_of_centuries_does_not_kill_the_keeper(
    launcher: Launcher, tmp_path: Path
) -> None:
    # A keeper that died of it in its first poll() would never write an exit record.
    spec = make_spec(tmp_path, ("sh", "-c", f"touch up; {WAIT_FOR_GO}"), timeout=10**12)
    launcher.spawn(spec)
    wait_for(lambda: (tmp_path / "up").exists(), what="the job to start")
    (tmp_path / "go").touch()
    assert wait_exit(spec).outcome == "exited"


def test_unreadable_records_are_record_errors_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "exit.json").mkdir()
    with pytest.raises(RecordError, match=r"exit\.json: not a regular file"):
        read_exit_record(str(tmp_path))
    (tmp_path / "shim.json").symlink_to(tmp_path / "nowhere")
    with pytest.raises(RecordError, match=r"shim\.json: cannot read the record"):
        read_shim_record(str(tmp_path))
    with pytest.raises(RecordError, match=r"shim\.json: cannot examine the launch lock"):
        launch_locked(str(tmp_path))
    (tmp_path / "shim.json").unlink()
    (tmp_path / "shim.json").write_bytes(b"")  # a lock no shim has written into
    assert read_shim_record(str(tmp_path)) is None
    assert not launch_locked(str(tmp_path))


# -- the words of exit.json: a pure function of the wait status ---------------------------


def _exited(code: int) -> int:
    return code << 8  # the wait status of a normal exit (Linux encoding)


@pytest.mark.parametrize(
    ("status", "terminated", "killed", "expected"),
    [
        (_exited(0), None, False, ("exited", 0, None, None)),
        (_exited(3), None, False, ("exited", 3, None, "exited with code 3")),
        (9, None, False, ("signaled", None, 9, "killed by signal 9 (SIGKILL)")),
        (77, None, False, ("signaled", None, 77, "killed by signal 77 (SIG77)")),
        (
            15,
            "timeout",
            False,
            ("timeout", None, 15, "timed out after 1m30s; process group terminated"),
        ),
        (
            None,
            "timeout",
            True,
            (
                "timeout",
                None,
                None,
                "timed out after 1m30s; process group killed (SIGKILL after 5s grace)",
            ),
        ),
        (
            _exited(0),
            "cancelled",
            False,
            ("cancelled", 0, None, "cancelled; process group terminated"),
        ),
    ],
)
def test_exit_outcome_says_how_the_attempt_ended(
    status: int | None, terminated: str | None, killed: bool, expected: tuple[object, ...]
) -> None:
    assert exit_outcome(status, terminated, timeout=90, kill_grace=5, killed=killed) == expected


def test_malformed_requests_get_an_error_reply_and_never_kill_the_keeper(
    tmp_path: Path,
) -> None:
    """The keeper parents every run of its host: a bad request must cost the
    client an error, never the keeper its life (and the runs their parent)."""
    import socket
    import struct

    with Launcher(tmp_path / "store") as launcher:
        keeper = launcher.server_pid
        assert keeper is not None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
            raw.connect(str(tmp_path / "store" / "keeper.sock"))
            for body in (b"not json", b"[1, 2]", b'"text"', b"{}", b'{"op": "nope"}'):
                raw.sendall(struct.pack("!I", len(body)) + body)
                size = struct.unpack("!I", raw.recv(4))[0]
                reply = json.loads(raw.recv(size))
                assert "error" in reply, (body, reply)
        spec = make_spec(tmp_path, ("true",))
        launcher.spawn(spec)
        assert wait_exit(spec).outcome == "exited"
        assert launcher.server_pid == keeper and not gone(keeper)


def test_cancel_reaches_a_shim_of_an_earlier_release_and_nothing_else(
    launcher: Launcher, tmp_path: Path
) -> None:
    """After an upgrade, runs an earlier release started under per-run shims
    still run; a cancel SIGTERMs such a shim (its way to cancel), and never a
    process the keeper does not hold that is no shim."""
    import shutil

    sleep = shutil.which("sleep")
    assert sleep is not None
    old_shim = tmp_path / "wfsched-shim"  # its comm, as an old shim's
    shutil.copy(sleep, old_shim)
    shim = subprocess.Popen([str(old_shim), "30"])
    other = subprocess.Popen([sleep, "30"])
    try:
        for proc in (shim, other):
            wait_for(lambda p=proc: process_start_time(p.pid), what="it to start")
        other_handle = ShimHandle(other.pid, process_start_time(other.pid) or 0)
        assert not launcher.cancel(other_handle)
        assert other.poll() is None
        shim_handle = ShimHandle(shim.pid, process_start_time(shim.pid) or 0)
        assert not launcher.cancel(ShimHandle(shim.pid, shim_handle.start_time + 1))
        assert shim.poll() is None  # not that very process: untouched
        assert launcher.cancel(shim_handle)
        assert shim.wait(timeout=10) == -signal.SIGTERM
    finally:
        for proc in (shim, other):
            proc.kill()
            proc.wait()


def test_launchers_starting_at_once_share_one_keeper(tmp_path: Path) -> None:
    """keeper.lock keeps one keeper per directory: launchers that find none
    at the same moment each start one, one wins, and all attach to it (the
    others exit in one line, never a traceback)."""
    import threading

    launchers = [Launcher(tmp_path / "store") for _ in range(3)]
    errors: list[BaseException] = []

    def start(launcher: Launcher) -> None:
        try:
            launcher.start()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(launcher,)) for launcher in launchers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    try:
        assert errors == []
        keepers = {launcher.server_pid for launcher in launchers}
        assert len(keepers) == 1 and None not in keepers
    finally:
        for launcher in launchers:
            launcher.stop()


def _specs(tmp_path: Path, count: int, argv: tuple[str, ...]) -> list[LaunchSpec]:
    """`count` attempts, each in its own folder (one run each)."""
    specs = []
    for index in range(count):
        spec = make_spec(tmp_path / f"r{index}", argv)
        specs.append(dataclasses.replace(spec, run_id=f"run-{index:06d}"))
    return specs


def test_pipelined_spawns_answer_each_in_order_as_spawn_would(
    launcher: Launcher, tmp_path: Path
) -> None:
    """More requests than the window, an attempt already started and one whose
    command cannot start among them: every spec gets spawn()'s own answer, in
    its place."""
    specs = _specs(tmp_path, 40, ("sh", "-c", "echo $$ >> ran"))
    missing = dataclasses.replace(specs[7], argv=("/nonexistent/command",))
    specs[7] = missing
    first = launcher.spawn(specs[3])
    answers = launcher.spawn_many(specs)
    assert isinstance(answers[3], AlreadyLaunched)
    assert isinstance(answers[7], CommandNotStarted)
    handles = [a for i, a in enumerate(answers) if i not in (3, 7)]
    assert all(isinstance(handle, ShimHandle) for handle in handles)
    for index, spec in enumerate(specs):
        assert wait_exit(spec).outcome == ("spawn-failed" if index == 7 else "exited")
    started = [int(line) for r in range(40) for line in _ran(tmp_path / f"r{r}")]
    assert sorted(started) == sorted([first.pid, *(h.pid for h in handles)])  # type: ignore[union-attr]


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _ran(folder: Path) -> list[str]:
    path = folder / "ran"
    return path.read_text().split() if path.exists() else []


def test_a_keeper_lost_inside_a_pipeline_starts_nothing_twice(tmp_path: Path) -> None:
    """The keeper dies handling the 3rd of 6 requests on the wire: the 3rd is
    LauncherLost, the rest unknown (None). Asked again, an attempt the dead
    keeper started is refused by its launch lock; the others start once."""
    specs = _specs(tmp_path, 6, ("sh", "-c", "echo $$ >> ran"))
    with Launcher(tmp_path / "keeper", fault="keeper-after-spawn:3") as launcher:
        answers = launcher.spawn_many(specs)
        assert [type(a).__name__ for a in answers[:3]] == [
            "ShimHandle",
            "ShimHandle",
            "LauncherLost",
        ]
        assert answers[3:] == [None, None, None]
        old = launcher.server_pid
        launcher.stop()
        wait_for(lambda: _dead(old or 0), what="the old keeper to die")
        launcher.start()  # a new keeper
        with pytest.raises(AlreadyLaunched):
            launcher.spawn(specs[2])  # it did start (keeper-after-spawn)
        for spec in specs[3:]:
            launcher.spawn(spec)
            assert wait_exit(spec).outcome == "exited"
    ran = [len(_ran(tmp_path / f"r{index}")) for index in range(6)]
    assert ran[:2] + ran[3:] == [1] * 5
    assert ran[2] in (0, 1)  # spawned, then the keeper died: at most once


def test_the_keeper_starts_nothing_a_client_that_hung_up_left_unread(
    launcher: Launcher, tmp_path: Path
) -> None:
    """Spawn requests the keeper reads after their sender closed its socket
    (a supervisor SIGKILLed with a pipelined chunk on the wire) are dropped:
    a restarted supervisor may already have found those attempts with
    nothing started and failed them, so starting one now would run a
    failed run."""
    import socket as socket_module

    from wfsched.process.launcher import _frame, _spawn_frame

    keeper = launcher.server_pid
    assert keeper is not None
    specs = _specs(tmp_path, 3, ("sh", "-c", "echo $$ >> ran"))
    assert launcher._directory is not None
    client = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
    client.connect(os.path.join(launcher._directory, "keeper.sock"))
    client.sendall(_frame({"op": "hello", "events": False}))
    client.recv(4096)
    descriptors = len(os.listdir(f"/proc/{keeper}/fd"))
    os.kill(keeper, signal.SIGSTOP)
    try:
        for spec in specs:
            client.sendall(_spawn_frame(spec))
        client.close()
    finally:
        os.kill(keeper, signal.SIGCONT)
    wait_for(
        lambda: len(os.listdir(f"/proc/{keeper}/fd")) < descriptors,
        what="the keeper to drop the client",
    )
    assert [read_shim_record(spec.record_dir) for spec in specs] == [None] * 3
    assert not any(_ran(tmp_path / f"r{index}") for index in range(3))
