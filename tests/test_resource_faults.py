"""Layer 3: real resource faults under the real supervisor (no mocks of the OS).

A store on a small tmpfs filled up, an ext4 image that fails into emergency
read-only, the database held by another process past the busy timeout, the
fork server in a pids cgroup that allows no fork, the supervisor's file
descriptor limit lowered under it. Each test asserts what the operator must
be able to count on: the supervisor never exits, nothing is admitted or
launched that is not recorded, every exit code is recorded once the fault
clears, one log line opens and one closes the episode, `status` shows it,
and `audit` is clean afterwards.

Tests that need to mount or to use cgroups skip, saying why, when they
cannot (not root, mount or cgroup refused).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import resource
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest

from tests.daemon import Daemon, utc_in, wait_for, wfsched, wfsched_json, write_definition
from tests.test_launcher import make_spec
from wfsched.domain.tickerrors import FAULT_BACKOFF_MAX
from wfsched.process.launcher import (
    AlreadyLaunched,
    Launcher,
    SpawnRefused,
    read_exit_record,
    read_shim_record,
)


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the test mounts a filesystem for the store")


@contextmanager
def _tmpfs(store: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted as the store directory, unmounted after."""
    _need_root()
    store.mkdir()
    mounted = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(store))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield store
    finally:
        (store / "filler").unlink(missing_ok=True)
        _run("umount", "-l", str(store))


@pytest.fixture
def tmpfs_store(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB tmpfs mounted as the store directory."""
    with _tmpfs(tmp_path / "store", "16m") as store:
        yield store


@pytest.fixture
def small_tmpfs_store(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs as the store: a few dozen runs and the database's log
    are enough to fill it."""
    with _tmpfs(tmp_path / "store", "3m") as store:
        yield store


def fill(path: Path) -> None:
    """Write zeros to `path` until the filesystem has no byte left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            chunk = b"\0" * size
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    assert os.statvfs(path.parent).f_bavail == 0


def apply(store: Path, folder: Path, definitions: dict[str, str]) -> None:
    for name, body in definitions.items():
        write_definition(folder, name, f'id = "{name}"\n{body}')
    result = wfsched(store, "apply", str(folder))
    assert result.returncode == 0, result.stderr


def one_shot(at: str, command: str, extra: str = "") -> str:
    return f'[trigger]\nat = "{at}"\n[run]\ncommand = ["sh", "-c", {json.dumps(command)}]\n{extra}'


def events(daemon: Daemon, name: str) -> list[str]:
    return [line for line in daemon.text().splitlines() if line.split(" ")[1:2] == [name]]


def runs(store: Path) -> list[dict[str, object]]:
    return list(wfsched_json(store, "runs", "--limit", "100")["items"])


def assert_episode(daemon: Daemon, kind: str, words: str) -> str:
    """Exactly one opening and one closing line; returns the closing line."""
    opened = events(daemon, "fault")
    assert len(opened) == 1, daemon.text()
    assert f"kind={kind}" in opened[0] and words in opened[0], opened[0]
    assert "Error" not in opened[0], opened[0]  # no driver class name
    cleared = events(daemon, "fault-cleared")
    assert len(cleared) == 1, daemon.text()
    assert f"kind={kind}" in cleared[0] and re.search(r"duration=\d+\.\ds", cleared[0])
    return cleared[0]


def assert_committed_logs(daemon: Daemon, store: Path) -> None:
    """Every run the log says was admitted or started exists, and started once."""
    known = {run["run_id"] for run in runs(store)}
    admitted = [re.search(r"run=(run-\d+)", line) for line in events(daemon, "admitted")]
    assert {match.group(1) for match in admitted if match} <= known
    started = [re.search(r"run=(run-\d+)", line) for line in events(daemon, "started")]
    names = [match.group(1) for match in started if match]
    assert len(names) == len(set(names)), daemon.text()


def assert_audit_clean(store: Path) -> None:
    audit = wfsched(store, "audit")
    assert audit.returncode == 0, audit.stdout + audit.stderr


def assert_hook_fired_once(out: Path, kind: str) -> None:
    wait_for(lambda: out.exists() and f"fault {kind}" in out.read_text(), what="the fault hook")
    assert out.read_text().count("fault ") == 1, out.read_text()


def assert_rode_out(store: Path, exit_code: int, timeout: float) -> None:
    """After an episode: `long`, which exited during it, failed with its
    own exit code; `t1`, due after it, completed; `late`, due during it and
    past its lateness when it ended, was skipped as store-unavailable."""
    wait_for(
        lambda: (
            {r["schedule_id"]: r["state"] for r in runs(store)}
            == {"long": "failed", "t1": "completed"}
        ),
        timeout=timeout,
        what="both runs to end",
    )
    long = next(r for r in runs(store) if r["schedule_id"] == "long")
    assert long["exit_code"] == exit_code
    late = wfsched_json(store, "occurrences", "late")["items"]
    assert [(row["state"], row["reason"]) for row in late] == [
        ("skipped-misfire", "store-unavailable")
    ]


def test_full_disk_is_ridden_out_and_every_exit_code_recorded(
    tmpfs_store: Path, tmp_path: Path
) -> None:
    store = tmpfs_store
    hook_out = tmp_path / "hook.txt"
    (store / "config.toml").write_text(
        f"on_failure = ['sh', '-c', 'echo \"$WFSCHED_EVENT $WFSCHED_FAULT_KIND\" >> {hook_out}']\n"
    )
    daemon = Daemon(store)
    daemon.wait_started()
    try:
        apply(
            store,
            tmp_path / "defs",
            {
                "long": one_shot(utc_in(1), "echo started; sleep 3.101; exit 7"),
                "t1": one_shot(utc_in(5), "echo one"),
                "t2": one_shot(utc_in(6), "echo two"),
                "late": one_shot(utc_in(6), "echo late", '[policy]\nlateness = "1s"\n'),
                "t3": one_shot(utc_in(7), "echo three"),
            },
        )
        wait_for(lambda: "started run=run-000001" in daemon.text(), what="long to start")
        fill(store / "filler")
        wait_for(lambda: events(daemon, "fault"), timeout=20, what="the fault line")
        status = wfsched_json(store, "status")
        assert status["supervisor"]["fault"]["kind"] == "disk-full"
        assert f"free space under {store}" in status["supervisor"]["fault"]["error"]
        # `long` exits (code 7) while the disk is full, and the last instants
        # fall due: nothing may be launched, nothing lost.
        wait_for(lambda: not _command_running("sleep 3.101"), what="long's command to exit")
        _wait_past_latest(tmp_path / "defs", 3)
        assert daemon.proc.poll() is None
        # Seconds without a liveness stamp: the fault, not staleness, says why.
        assert wfsched_json(store, "status")["supervisor"]["stale"] is False
        (store / "filler").unlink()
        wait_for(lambda: events(daemon, "fault-cleared"), timeout=20, what="the episode's end")
        wait_for(
            lambda: (
                all(r["state"] in ("completed", "failed") for r in runs(store))
                and len(runs(store)) == 4
            ),
            timeout=20,
            what="every run to end",
        )
        assert daemon.proc.poll() is None
        by_schedule = {run["schedule_id"]: run for run in runs(store)}
        assert by_schedule["long"]["state"] == "failed"
        assert by_schedule["long"]["exit_code"] == 7
        for name in ("t1", "t2", "t3"):
            assert by_schedule[name]["state"] == "completed"
            assert len(by_schedule[name]["attempts"]) == 1
        late = wfsched_json(store, "occurrences", "late")["items"]
        assert [(row["state"], row["reason"]) for row in late] == [
            ("skipped-misfire", "store-unavailable")
        ]
        assert_episode(daemon, "disk-full", "the store's filesystem is full: free space under")
        assert_committed_logs(daemon, store)
        assert wfsched_json(store, "status")["supervisor"]["fault"] is None
        assert wfsched_json(store, "status")["errors"]["last_fault"]["kind"] == "disk-full"
        assert_hook_fired_once(hook_out, "disk-full")
        assert_audit_clean(store)
    finally:
        (store / "filler").unlink(missing_ok=True)
        assert daemon.stop() == 0


def _command_running(text: str) -> bool:
    found = _run("pgrep", "-f", text)
    return found.returncode == 0


def _wait_past_latest(folder: Path, margin: float) -> None:
    """Until every one-shot in `folder` is due, and `margin` seconds late
    (lateness is judged in whole seconds: a 1s lateness needs 2s and more)."""
    text = "".join(path.read_text() for path in folder.iterdir())
    latest = max(
        datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        for value in re.findall(r'at = "([^"]+)"', text)
    )
    wait_for(lambda: time.time() > latest + margin, what="every instant due and late")


ONE_SHOTS = 24
"""One-shots in the small-disk test, one falling due each second (each
writes 20 KB): with the database, its log and the records, about 2 MB of 3."""


def _ended(daemon: Daemon) -> int:
    return len(events(daemon, "completed")) + len(events(daemon, "failed"))


def _fill_for(daemon: Daemon, store: Path, seconds: float) -> float:
    """Keep the store's filesystem full for `seconds` (topped up as the
    supervisor gives back its log's pages), then free it; returns how long
    the episode outlived the space coming back (it must end by itself, at
    the next probe)."""
    opened = len(events(daemon, "fault"))
    fill(store / "filler")
    filled = time.monotonic()
    wait_for(lambda: len(events(daemon, "fault")) > opened, timeout=20, what="the fault line")

    def topped_up() -> bool:
        space = os.statvfs(store)
        with contextlib.suppress(OSError), open(store / "filler", "ab") as filler:
            filler.write(b"\0" * space.f_bavail * space.f_frsize)
        return time.monotonic() >= filled + seconds

    wait_for(topped_up, timeout=seconds + 5, what="the fill")
    assert daemon.proc.poll() is None, daemon.text()
    (store / "filler").unlink()
    freed = time.monotonic()
    wait_for(
        lambda: len(events(daemon, "fault-cleared")) == len(events(daemon, "fault")),
        timeout=FAULT_BACKOFF_MAX + 10,
        what="the episode to end by itself",
        explain=daemon.text,
    )
    return time.monotonic() - freed


def test_a_small_disk_filled_twice_while_one_shots_fall_due_every_second(
    small_tmpfs_store: Path, tmp_path: Path
) -> None:
    """A 3 MB store, a one-shot due every second, the disk filled for 10 s
    and freed, the catch-up burst, then filled again. Each episode ends by
    itself at the first probe after the space comes back: the probe gives
    back the database log's pages (a truncating checkpoint) and a spawn
    the keeper refused for want of space waits for the episode, instead of
    leaving its run `running` with no exit. It used to open a second
    episode that never ended: the log, never checkpointed during an
    episode and never shrunk, ate the space that was freed."""
    store = small_tmpfs_store
    daemon = Daemon(store)
    daemon.wait_started()
    try:
        base = math.ceil(time.time()) + 2
        ats = [base + second for second in range(ONE_SHOTS)]
        write = 'head -c 20000 /dev/zero > "$WFSCHED_STATE_DIR/out"'
        lateness = '[policy]\nlateness = "10m"\n'
        definitions = {
            f"s{index:02d}": one_shot(_utc(at), write, lateness) for index, at in enumerate(ats)
        }
        # Exits while the disk is full: the keeper keeps its code until it can be recorded.
        definitions["long"] = one_shot(_utc(base), "sleep 4.107; exit 7", lateness)
        apply(store, tmp_path / "defs", definitions)
        wait_for(lambda: events(daemon, "started"), timeout=10, what="long to start")
        wait_for(lambda: time.time() >= base + 2, what="a few one-shots to run")
        late = _fill_for(daemon, store, 10)
        assert late <= FAULT_BACKOFF_MAX + 2, daemon.text()
        assert not _command_running("sleep 4.107; exit 7")
        due = sum(1 for at in ats if at <= time.time()) + 1
        wait_for(lambda: _ended(daemon) >= due, timeout=20, what="the catch-up burst")
        again = _fill_for(daemon, store, 4)
        assert again <= FAULT_BACKOFF_MAX + 2, daemon.text()
        print(f"\nMEASURE small disk: episodes ended {late:.1f}s, {again:.1f}s after freeing")
        wait_for(
            lambda: _ended(daemon) == ONE_SHOTS + 1,
            timeout=max(0, ats[-1] - time.time()) + 20,
            what="every one-shot to end",
            explain=daemon.text,
        )
        assert daemon.proc.poll() is None
        listed = runs(store)
        by_schedule = {run["schedule_id"]: run for run in listed}
        assert len(listed) == len(by_schedule) == ONE_SHOTS + 1  # one run each, none twice
        assert by_schedule.pop("long")["exit_code"] == 7  # kept through the episode
        for run in by_schedule.values():
            # A job writing while the disk is filled under it fails by itself (exit 1).
            ended = (run["state"], run["exit_code"], len(run["attempts"]))
            assert ended in (("completed", 0, 1), ("failed", 1, 1)), run
        assert _ledger_rows(store) == dict.fromkeys(definitions, 1)
        assert_committed_logs(daemon, store)
        assert wfsched_json(store, "status")["supervisor"]["fault"] is None
        assert_audit_clean(store)
        # At rest the log is back within its limit, not at its high-water mark.
        assert (store / "wfsched.db-wal").stat().st_size <= 1 << 20
    finally:
        (store / "filler").unlink(missing_ok=True)
        assert daemon.stop() == 0


def _ledger_rows(store: Path) -> dict[str, int]:
    """Ledger rows per schedule, read from the database (one query, not a
    command per schedule)."""
    uri = f"file:{store / 'wfsched.db'}?mode=ro"
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        rows = db.execute("SELECT schedule_id, COUNT(*) FROM occurrences GROUP BY schedule_id")
        return dict(rows.fetchall())


def _utc(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def test_a_crash_during_a_full_disk_episode_recovers_as_after_any_crash(
    tmpfs_store: Path, tmp_path: Path
) -> None:
    """SIGKILL while the disk is full; restarted once it is freed, the
    supervisor re-adopts the shim that kept its exit code and records it."""
    store = tmpfs_store
    daemon = Daemon(store)
    daemon.wait_started()
    apply(store, tmp_path / "defs", {"long": one_shot(utc_in(1), "sleep 2.102; exit 9")})
    wait_for(lambda: "started run=run-000001" in daemon.text(), what="long to start")
    fill(store / "filler")
    wait_for(lambda: events(daemon, "fault"), timeout=20, what="the fault line")
    daemon.kill()
    wait_for(lambda: not _command_running("sleep 2.102; exit 9"), what="the command to exit")
    (store / "filler").unlink()
    second = Daemon(store)
    try:
        second.wait_started()
        wait_for(lambda: runs(store)[0]["state"] == "failed", timeout=20, what="the exit")
        run = runs(store)[0]
        assert run["exit_code"] == 9, run
        assert "abandoned" not in str(run["reason"])
        # Its shim kept the code: re-adopted, or its record found at recovery.
        assert events(second, "re-adopted") or events(second, "recovered")
        assert_audit_clean(store)
    finally:
        assert second.stop() == 0


def test_database_locked_past_the_busy_timeout(tmpfs_store: Path, tmp_path: Path) -> None:
    store = tmpfs_store
    (store / "config.toml").write_text("busy_timeout = 0.5\n")
    daemon = Daemon(store)
    daemon.wait_started()
    locker: subprocess.Popen[str] | None = None
    try:
        apply(
            store,
            tmp_path / "defs",
            {
                "long": one_shot(utc_in(1), "sleep 3.103; exit 5"),
                "t1": one_shot(utc_in(5), "echo one"),
                "late": one_shot(utc_in(5), "echo late", '[policy]\nlateness = "1s"\n'),
            },
        )
        wait_for(lambda: "started run=run-000001" in daemon.text(), what="long to start")
        locker = subprocess.Popen(
            [
                "python3",
                "-c",
                "import sqlite3, sys\n"
                "db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n"
                "db.execute('BEGIN EXCLUSIVE')\n"
                "print('locked', flush=True)\n"
                "sys.stdin.read()\n"
                "db.execute('ROLLBACK')\n",
                str(store / "wfsched.db"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert locker.stdout is not None and locker.stdout.readline() == "locked\n"
        wait_for(lambda: events(daemon, "fault"), timeout=20, what="the fault line")
        fault = wfsched_json(store, "status")["supervisor"]["fault"]
        assert fault["kind"] == "locked"
        assert "busy timeout (0.5s)" in fault["error"]
        wait_for(lambda: not _command_running("sleep 3.103; exit 5"), what="long's command to exit")
        _wait_past_latest(tmp_path / "defs", 3)
        assert [r["state"] for r in runs(store)] == ["running"]  # nothing admitted meanwhile
        locker.communicate("", timeout=10)
        wait_for(lambda: events(daemon, "fault-cleared"), timeout=20, what="the episode's end")
        assert_rode_out(store, 5, timeout=20)
        assert_episode(daemon, "locked", "is held locked by another process")
        assert_committed_logs(daemon, store)
        assert_audit_clean(store)
        assert daemon.proc.poll() is None
    finally:
        if locker is not None and locker.poll() is None:
            locker.kill()
            locker.wait()
        assert daemon.stop() == 0


def _launcher_pid(daemon: Daemon) -> int:
    found = _run("pgrep", "-P", str(daemon.proc.pid), "-x", "wfsched-keeper")
    assert found.returncode == 0, "no run keeper under the supervisor"
    return int(found.stdout.split()[0])


@pytest.fixture
def pids_cgroup() -> Iterator[Path]:
    """A pids cgroup (v1 or v2) the test can move the fork server into."""
    _need_root()
    for root in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/unified")):
        group = root / f"wfsched-test-{os.getpid()}"
        try:
            group.mkdir()
        except OSError:
            continue
        if (group / "pids.max").exists():
            break
        group.rmdir()
    else:
        pytest.skip("no writable pids cgroup to limit the fork server with")
    try:
        yield group
    finally:
        (group / "pids.max").write_text("max")
        for pid in (group / "cgroup.procs").read_text().split():
            with open(group.parent / "cgroup.procs", "w") as procs:
                procs.write(pid)
        group.rmdir()


def test_fork_failing_fails_the_run_and_launching_resumes(
    tmp_path: Path, pids_cgroup: Path
) -> None:
    store = tmp_path / "store"
    daemon = Daemon(store)
    daemon.wait_started()
    try:
        (pids_cgroup / "cgroup.procs").write_text(str(_launcher_pid(daemon)))
        (pids_cgroup / "pids.max").write_text("1")  # the server itself: no fork
        apply(
            store,
            tmp_path / "defs",
            {"f1": one_shot(utc_in(1), "exit 0"), "f2": one_shot(utc_in(3), "exit 0")},
        )
        wait_for(lambda: events(daemon, "fault"), timeout=20, what="the fault line")
        wait_for(lambda: len(runs(store)) == 2, what="f2's admission")
        states = {r["schedule_id"]: r for r in runs(store)}
        assert states["f1"]["state"] == "failed"
        assert "fork failed" in str(states["f1"]["reason"])
        assert states["f2"]["state"] == "admitted"  # held, not failed
        assert wfsched_json(store, "status")["supervisor"]["fault"]["kind"] == "process-limit"
        (pids_cgroup / "pids.max").write_text("max")
        wait_for(lambda: events(daemon, "fault-cleared"), timeout=20, what="the episode's end")
        wait_for(
            lambda: {r["schedule_id"]: r["state"] for r in runs(store)}["f2"] == "completed",
            what="f2 to run",
        )
        assert_episode(daemon, "process-limit", "cannot create a process")
        assert_committed_logs(daemon, store)
        assert_audit_clean(store)
        assert daemon.proc.poll() is None
    finally:
        assert daemon.stop() == 0


def test_file_descriptors_exhausted_hold_launches_until_the_limit_allows(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    daemon = Daemon(store)
    daemon.wait_started()
    pid = daemon.proc.pid
    original = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    try:
        apply(
            store,
            tmp_path / "defs",
            {
                "long": one_shot(utc_in(1), "sleep 2.104; exit 3"),
                "t1": one_shot(utc_in(3), "exit 0"),
            },
        )
        wait_for(lambda: "started run=run-000001" in daemon.text(), what="long to start")
        fds = sorted(int(name) for name in os.listdir(f"/proc/{pid}/fd"))
        lowest_free = next(n for n in range(len(fds) + 1) if n not in fds)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (lowest_free, original[1]))
        wait_for(lambda: events(daemon, "fault"), timeout=20, what="the fault line")
        assert wfsched_json(store, "status")["supervisor"]["fault"]["kind"] == "fd-limit"
        wait_for(lambda: not _command_running("sleep 2.104; exit 3"), what="long's command to exit")
        resource.prlimit(pid, resource.RLIMIT_NOFILE, original)
        wait_for(lambda: events(daemon, "fault-cleared"), timeout=20, what="the episode's end")
        wait_for(
            lambda: (
                {r["schedule_id"]: r["state"] for r in runs(store)}
                == {"long": "failed", "t1": "completed"}
            ),
            what="both runs to end",
        )
        long = next(r for r in runs(store) if r["schedule_id"] == "long")
        assert long["exit_code"] == 3
        assert_episode(daemon, "fd-limit", "out of file descriptors")
        assert_committed_logs(daemon, store)
        assert_audit_clean(store)
        assert daemon.proc.poll() is None
    finally:
        if daemon.proc.poll() is None:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, original)
        assert daemon.stop() == 0


@pytest.fixture
def ext4_store(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """An ext4 image mounted (loop, errors=remount-ro) as the store, and the
    sysfs knob that makes the kernel hit a filesystem error on it."""
    _need_root()
    image, store = tmp_path / "store.img", tmp_path / "store"
    store.mkdir()
    with open(image, "wb") as handle:
        handle.truncate(32 << 20)
    made = _run("mkfs.ext4", "-q", "-F", str(image))
    if made.returncode != 0:
        pytest.skip(f"cannot make an ext4 image: {made.stderr.strip()}")
    mounted = _run("mount", "-o", "loop,errors=remount-ro", str(image), str(store))
    if mounted.returncode != 0:
        pytest.skip(f"cannot loop-mount an ext4 image: {mounted.stderr.strip()}")
    device = _run("findmnt", "-no", "SOURCE", str(store)).stdout.strip()
    knob = Path("/sys/fs/ext4") / Path(device).name / "trigger_fs_error"
    try:
        if not knob.exists():
            pytest.skip(f"this kernel has no {knob} to fail the filesystem with")
        os.chmod(store, 0o700)
        yield store, knob
    finally:
        _run("umount", "-l", str(store))


def test_read_only_after_a_filesystem_error(ext4_store: tuple[Path, Path], tmp_path: Path) -> None:
    """The kernel turns the store's filesystem read-only after an error (as
    errors=remount-ro does on a failing disk): the supervisor stays up,
    starts nothing, says so, and a CLI write fails in one line. (This kernel
    keeps such a filesystem read-only until it is unmounted and checked, so
    the way back is a restart: covered by the crash test above.)"""
    store, knob = ext4_store
    daemon = Daemon(store)
    daemon.wait_started()
    try:
        apply(
            store,
            tmp_path / "defs",
            {
                "long": one_shot(utc_in(1), "sleep 2.105; exit 4"),
                "t1": one_shot(utc_in(3), "echo one"),
            },
        )
        wait_for(lambda: "started run=run-000001" in daemon.text(), what="long to start")
        knob.write_text("wfsched test: fail the store's filesystem\n")
        wait_for(lambda: events(daemon, "fault"), timeout=20, what="the fault line")
        (line,) = events(daemon, "fault")
        assert "kind=read-only" in line, line
        assert "the store's filesystem is read-only: repair it and remount" in line
        fault = wfsched_json(store, "status")["supervisor"]["fault"]
        assert fault["kind"] == "read-only"
        pause = wfsched(store, "pause", "t1")
        assert pause.returncode == 1, pause.stderr
        assert pause.stderr.count("\n") == 1, pause.stderr
        assert "read-only" in pause.stderr
        assert "Error" not in pause.stderr and "Traceback" not in pause.stderr
        wait_for(lambda: not _command_running("sleep 2.105"), what="long's command to exit")
        _wait_past_latest(tmp_path / "defs", 1)
        assert daemon.proc.poll() is None
        assert [r["state"] for r in runs(store)] == ["running"]  # t1 never launched
        assert not events(daemon, "admitted")[1:]
    finally:
        daemon.kill()
        _run("pkill", "-f", "sleep 2.105")


def set_disk_failing(image: Path, failing: bool) -> None:
    """Make the store's disk fail every write, or work again. The disk is a
    loop device over `image`; an immutable image makes each of the loop
    driver's writes to it fail (EPERM), which the block layer reports to the
    filesystem above as a write I/O error, as a disk does on sectors it can
    no longer write; reads still work, and clearing the flag is the disk
    working again."""
    changed = _run("chattr", "+i" if failing else "-i", str(image))
    assert changed.returncode == 0, changed.stderr


@pytest.fixture
def failing_disk_store(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The store on an ext4 image (no journal, errors=continue) inside an
    outer ext4 image (where the immutable flag is known to work), both
    loop-mounted; the store and its image. Without a journal a failed write
    is an I/O error the filesystem reports and survives; with one, ext4
    would abort the journal and turn read-only (the read-only test's case)."""
    _need_root()
    if shutil.which("chattr") is None:
        pytest.skip("chattr (e2fsprogs) is not installed")
    outer_image, outer, store = tmp_path / "outer.img", tmp_path / "outer", tmp_path / "store"
    outer.mkdir()
    store.mkdir()
    with open(outer_image, "wb") as handle:
        handle.truncate(128 << 20)
    made = _run("mkfs.ext4", "-q", "-F", str(outer_image))
    if made.returncode != 0:
        pytest.skip(f"cannot make an ext4 image: {made.stderr.strip()}")
    mounted = _run("mount", "-o", "loop", str(outer_image), str(outer))
    if mounted.returncode != 0:
        pytest.skip(f"cannot loop-mount an ext4 image: {mounted.stderr.strip()}")
    image = outer / "store.img"
    try:
        with open(image, "wb") as handle:
            handle.truncate(64 << 20)
        made = _run("mkfs.ext4", "-q", "-F", "-O", "^has_journal", str(image))
        assert made.returncode == 0, made.stderr
        mounted = _run("mount", "-o", "loop,errors=continue", str(image), str(store))
        assert mounted.returncode == 0, mounted.stderr
        try:
            os.chmod(store, 0o700)
            yield store, image
        finally:
            _run("chattr", "-i", str(image))
            _run("umount", "-l", str(store))
    finally:
        _run("umount", "-l", str(outer))


def test_io_errors_of_the_store_disk_are_ridden_out_and_every_exit_code_recorded(
    failing_disk_store: tuple[Path, Path], tmp_path: Path
) -> None:
    """A real EIO: the store's disk fails every write (SQLite's fsync and the
    kernel's writeback report EIO), then works again. (A device-mapper
    `error` or `flakey` target would do the same; the loop device needs no
    device-mapper in the kernel.)"""
    store, image = failing_disk_store
    hook_out = tmp_path / "hook.txt"
    (store / "config.toml").write_text(
        f"on_failure = ['sh', '-c', 'echo \"$WFSCHED_EVENT $WFSCHED_FAULT_KIND\" >> {hook_out}']\n"
    )
    daemon = Daemon(store)
    daemon.wait_started()
    failing = False
    try:
        apply(
            store,
            tmp_path / "defs",
            {
                "long": one_shot(utc_in(1), "sleep 2.106; exit 8"),
                "t1": one_shot(utc_in(4), "echo one"),
                "late": one_shot(utc_in(4), "echo late", '[policy]\nlateness = "1s"\n'),
            },
        )
        wait_for(lambda: "started run=run-000001" in daemon.text(), what="long to start")
        set_disk_failing(image, True)
        failing = True
        wait_for(lambda: events(daemon, "fault"), timeout=20, what="the fault line")
        (line,) = events(daemon, "fault")
        assert "kind=io-error" in line and "I/O error on the store's disk under" in line, line
        assert "dmesg" in line, line
        assert wfsched_json(store, "status")["supervisor"]["fault"]["kind"] == "io-error"
        wait_for(lambda: not _command_running("sleep 2.106; exit 8"), what="long's command")
        _wait_past_latest(tmp_path / "defs", 3)
        assert daemon.proc.poll() is None
        set_disk_failing(image, False)
        failing = False
        wait_for(lambda: events(daemon, "fault-cleared"), timeout=30, what="the episode's end")
        assert_rode_out(store, 8, timeout=30)
        cleared = assert_episode(daemon, "io-error", "I/O error on the store's disk")
        print(f"\nMEASURE io-error: {cleared}")
        assert_committed_logs(daemon, store)
        assert_hook_fired_once(hook_out, "io-error")
        assert_audit_clean(store)
        assert daemon.proc.poll() is None
    finally:
        if failing:
            set_disk_failing(image, False)
        assert daemon.stop() == 0


@pytest.fixture
def runs_tmpfs_store(tmp_path: Path) -> Iterator[Path]:
    """A store whose run directories are a filesystem of their own (a tmpfs
    mounted at <store>/runs, as operations.md recommends)."""
    _need_root()
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True, mode=0o700)
    runs_fs = store / "runs"
    mounted = _run("mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(runs_fs))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield store
    finally:
        _run("umount", "-l", str(runs_fs))


def test_run_directories_remounted_read_only_then_read_write(
    runs_tmpfs_store: Path, tmp_path: Path
) -> None:
    """The run directories' filesystem remounted read-only, then read-write
    again, with instants falling due meanwhile: one read-only episode (not
    one per probe: the probe checks the filesystem that failed, not only the
    database), ended by itself once it is writable; nothing admitted that
    was not recorded, every instant in the ledger, audit clean.

    Linux refuses to remount a filesystem read-only while a process holds a
    file open for writing on it (EBUSY), so the remount happens while no run
    executes: the supervisor's database, or a running job's logs, cannot be
    remounted under them (the kernel's emergency read-only after an error is
    the other test's case)."""
    store = runs_tmpfs_store
    runs_fs = store / "runs"
    hook_out = tmp_path / "hook.txt"
    (store / "config.toml").write_text(
        f"on_failure = ['sh', '-c', 'echo \"$WFSCHED_EVENT $WFSCHED_FAULT_KIND\" >> {hook_out}']\n"
    )
    daemon = Daemon(store)
    daemon.wait_started()
    read_only = False
    try:
        apply(store, tmp_path / "defs", {"first": one_shot(utc_in(1), "exit 3")})
        wait_for(lambda: "failed run=run-000001" in daemon.text(), what="first to end")
        # Refused (busy) while anything still holds a file there open for writing.
        wait_for(
            lambda: _run("mount", "-o", "remount,ro", str(runs_fs)).returncode == 0,
            what="the run directories' filesystem to remount read-only",
        )
        read_only = True
        apply(
            store,
            tmp_path / "defs",
            {
                "t1": one_shot(utc_in(2), "echo one"),
                "t2": one_shot(utc_in(5), "echo two"),
                "late": one_shot(utc_in(5), "echo late", '[policy]\nlateness = "1s"\n'),
            },
        )
        # t1 is admitted (the database is fine) and cannot launch: its run
        # directory cannot be made. t2 and late fall due during the episode.
        wait_for(lambda: events(daemon, "fault"), timeout=20, what="the fault line")
        (line,) = events(daemon, "fault")
        assert "kind=read-only" in line and f"remount {runs_fs} read-write" in line, line
        assert wfsched_json(store, "status")["supervisor"]["fault"]["kind"] == "read-only"
        _wait_past_latest(tmp_path / "defs", 3)
        assert daemon.proc.poll() is None
        assert len(events(daemon, "fault")) == 1, daemon.text()  # one episode, not flapping
        assert {r["schedule_id"]: r["state"] for r in runs(store)} == {
            "first": "failed",
            "t1": "admitted",  # held, not failed and not started
        }
        remounted = _run("mount", "-o", "remount,rw", str(runs_fs))
        assert remounted.returncode == 0, remounted.stderr
        read_only = False
        wait_for(lambda: events(daemon, "fault-cleared"), timeout=30, what="the episode's end")
        wait_for(
            lambda: (
                {r["schedule_id"]: r["state"] for r in runs(store)}
                == {"first": "failed", "t1": "completed", "t2": "completed"}
            ),
            timeout=30,
            what="t1 and t2 to run",
        )
        first = next(r for r in runs(store) if r["schedule_id"] == "first")
        assert first["exit_code"] == 3
        late = wfsched_json(store, "occurrences", "late")["items"]
        assert [(row["state"], row["reason"]) for row in late] == [
            ("skipped-misfire", "store-unavailable")
        ]
        for name in ("t1", "t2"):
            assert len(wfsched_json(store, "occurrences", name)["items"]) == 1
            assert len(next(r for r in runs(store) if r["schedule_id"] == name)["attempts"]) == 1
        cleared = assert_episode(daemon, "read-only", "is read-only: repair it and remount")
        print(f"\nMEASURE read-only: {cleared}")
        assert_committed_logs(daemon, store)
        assert_hook_fired_once(hook_out, "read-only")
        assert_audit_clean(store)
        assert daemon.proc.poll() is None
    finally:
        if read_only:
            _run("mount", "-o", "remount,rw", str(runs_fs))
        assert daemon.stop() == 0


def test_run_output_is_capped_at_max_log_bytes_keeping_the_tail(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    (store / "config.toml").write_text("max_log_bytes = 65536\n")
    daemon = Daemon(store)
    daemon.wait_started()
    try:
        chatter = (
            "import sys\n"
            "for i in range(2000): sys.stdout.write('x' * 1023 + '\\n')\n"
            "print('LAST-LINE')\n"
        )
        apply(
            store,
            tmp_path / "defs",
            {
                "chatty": f'[trigger]\nat = "{utc_in(1)}"\n[run]\n'
                f"command = ['python3', '-c', {json.dumps(chatter)}]\n"
            },
        )
        wait_for(lambda: "completed run=run-000001" in daemon.text(), what="the run")
        log = store / "runs" / "run-000001" / "attempt-1" / "stdout.log"
        data = log.read_bytes()
        assert len(data) <= 65536
        assert data.startswith(b"[wfsched: ") and b"bytes of earlier output dropped" in data
        assert data.endswith(b"LAST-LINE\n")
        shown = wfsched_json(store, "runs", "show", "run-000001")
        dropped = shown["attempts"][0]["output_truncated"]["stdout"]
        assert 2000 * 1024 + 10 - 65536 <= dropped < 2000 * 1024 + 10
        human = wfsched(store, "runs", "show", "run-000001", env={"COLUMNS": "200"}).stdout
        assert f"attempt 1 stdout: output truncated, the first {dropped} bytes dropped" in human
    finally:
        assert daemon.stop() == 0


def test_cli_writes_and_supervise_on_a_read_only_store_fail_in_one_line(
    tmpfs_store: Path, tmp_path: Path
) -> None:
    store = tmpfs_store
    apply(store, tmp_path / "defs", {"job": one_shot(utc_in(3600), "true")})
    remounted = _run("mount", "-o", "remount,ro", str(store))
    if remounted.returncode != 0:
        pytest.skip(f"cannot remount the tmpfs read-only: {remounted.stderr.strip()}")
    try:
        for argv in (("pause", "job"), ("supervise",)):
            result = wfsched(store, *argv)
            assert result.returncode == 1, (argv, result.stderr)
            assert result.stderr == (
                f"wfsched: error: the store's filesystem is read-only: repair it and remount"
                f" {store} read-write ({result.stderr.rsplit('(', 1)[1]}"
            ), result.stderr
            assert "Error" not in result.stderr and "Traceback" not in result.stderr
    finally:
        _run("mount", "-o", "remount,rw", str(store))
    assert wfsched_json(store, "get", "job")["state"] == "active"  # nothing written


def test_a_launch_the_full_disk_refused_leaves_its_attempt_launchable(tmp_path: Path) -> None:
    """The keeper cannot write an attempt's started record on a full disk:
    it says so with the errno (a disk-full fault to the supervisor, which
    holds the attempt), and leaves the record empty, so the same attempt
    starts, once, when there is space again."""
    with _tmpfs(tmp_path / "disk", "1m") as disk, Launcher() as launcher:
        spec = make_spec(disk, ("sh", "-c", "exit 0"))
        fill(disk / "filler")
        with pytest.raises(SpawnRefused) as refused:
            launcher.spawn(spec)
        assert refused.value.errno == errno.ENOSPC
        assert "cannot write the started record" in str(refused.value)
        assert read_shim_record(spec.record_dir) is None
        (disk / "filler").unlink()
        launcher.spawn(spec)
        record = wait_for(lambda: read_exit_record(spec.record_dir), what="the exit record")
        assert (record.outcome, record.exit_code) == ("exited", 0)
        with pytest.raises(AlreadyLaunched):
            launcher.spawn(spec)
