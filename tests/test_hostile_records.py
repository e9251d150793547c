"""Layer 1: records that cannot be trusted, shims that die leaving their job
behind, and a launcher that dies mid-launch, with the fake launcher and an
injected clock.

What must hold: reading a record never stops the supervisor (a bad one fails
its run closed, naming the record and the error, and blocks its schedule;
the rest keeps running, and a restart does not trip over it again); files a
job left where a launch writes its own fail that launch closed, never the
tick; a run whose shim died is recorded only once its session is empty, and
keeps its overlap slot until then; a lost launch is settled from the
attempt's lock and records, never launched twice.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes import FakeControl, write_exit_record
from tests.test_supervisor_loop import MINUTE, T0, Harness, iso
from wfsched.api.status import status
from wfsched.daemon.supervisor import ABANDONED, NEVER_STARTED
from wfsched.process.launcher import LauncherError, LauncherLost, LaunchSpec, ShimHandle
from wfsched.store import Store


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path / "store")


def make_bad(path: Path, kind: str) -> str:
    """Put something that is not a record at `path`; returns what the
    reason must mention."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "directory":
        path.mkdir()
        return "not a regular file"
    if kind == "symlink":
        target = path.parent / "elsewhere.json"
        target.write_text('{"attempt": 1}')
        path.symlink_to(target)
        return "cannot read the record"
    if kind == "fifo":
        os.mkfifo(path)
        return "not a regular file"
    if kind == "huge":
        path.write_bytes(b" " * 100_000)
        return "larger than"
    path.write_bytes(b"\xff\xfe garbage")
    return "not a valid record"


BAD = ["directory", "symlink", "fifo", "huge", "garbage"]


def two_schedules(h: Harness) -> None:
    h.define("a", cron="0 * * * *")
    h.define("b")
    h.tick_at(T0)
    assert sorted(spec.run_id for spec, _ in h.control.spawned) == ["run-000001", "run-000002"]


def run_of(h: Harness, schedule_id: str) -> str:
    specs = [spec for spec, _ in h.control.spawned]
    return next(spec.run_id for spec in specs if spec.env["WFSCHED_SCHEDULE_ID"] == schedule_id)


@pytest.mark.parametrize("kind", BAD)
def test_an_unreadable_exit_record_fails_its_run_and_the_rest_keeps_running(
    h: Harness, kind: str
) -> None:
    two_schedules(h)
    spec, _ = h.control.spec(run_of(h, "a"))
    mention = make_bad(Path(spec.record_dir) / "exit.json", kind)
    h.control.die(spec.run_id)
    h.tick_at(T0 + 1)  # must not raise
    run = h.runs.show(spec.run_id)
    assert run["state"] == "failed"
    assert "exit.json" in run["reason"] and mention in run["reason"]
    assert h.admin.get("a")["state"] == "blocked"
    # b is unaffected: its run ends normally and its next instant runs.
    h.control.finish(run_of(h, "b"))
    h.tick_at(T0 + MINUTE)
    assert [state for _, state, _ in h.history("b")] == ["completed", "running"]


@pytest.mark.parametrize("kind", BAD)
def test_recovery_fails_an_unreadable_record_closed_once_and_starts(h: Harness, kind: str) -> None:
    two_schedules(h)
    spec, _ = h.control.spec(run_of(h, "a"))
    mention = make_bad(Path(spec.record_dir) / "exit.json", kind)
    h.control.die(spec.run_id)
    for _ in range(2):  # a restart after a restart: nothing left to trip over
        h.supervisor = h.new_supervisor()
        h.supervisor.recover()
        h.supervisor.tick()
    run = h.runs.show(spec.run_id)
    assert run["state"] == "failed" and mention in run["reason"]
    assert h.admin.get("a")["state"] == "blocked"
    assert h.runs.show(run_of(h, "b"))["state"] == "running"


def failing_reads(h: Harness, record_dir: str, times: int | None = None) -> None:
    """Reading `record_dir`'s exit record fails with EIO (`times` times, or
    for ever): a bad sector under one record."""
    original = h.control.read_exit
    left = [times]

    def read_exit(directory: str):  # type: ignore[no-untyped-def]
        if directory == record_dir and left[0] != 0:
            if left[0] is not None:
                left[0] -= 1
            raise OSError(errno.EIO, os.strerror(errno.EIO), os.path.join(directory, "exit.json"))
        return original(directory)

    h.control.read_exit = read_exit  # type: ignore[method-assign]


def retry_now(h: Harness) -> None:
    """The fault episode's backoff has elapsed: the next tick probes."""
    if h.supervisor.errors.episode is not None:
        h.supervisor.errors.episode.retry_at = 0.0


def test_a_record_that_keeps_failing_with_eio_fails_its_run_and_the_rest_keeps_running(
    h: Harness,
) -> None:
    """An I/O error is first taken for the disk's (a fault episode, read
    again); one that stays on the record while the disk answers fails that
    run closed and blocks its schedule. Meanwhile every other run's end is
    recorded and the other schedules run."""
    two_schedules(h)
    spec, _ = h.control.spec(run_of(h, "a"))
    failing_reads(h, spec.record_dir)
    h.control.die(spec.run_id)
    h.control.finish(run_of(h, "b"))
    h.tick_at(T0 + 1)  # must not raise
    assert ("fault", "io-error") in [(e, f.get("kind")) for e, f in h.events]
    assert h.history("b") == [(iso(T0), "completed", None)]
    for second in range(2, 8):
        retry_now(h)
        h.tick_at(T0 + second)
    run = h.runs.show(spec.run_id)
    assert run["state"] == "failed"
    assert "exit.json" in run["reason"] and "Input/output error" in run["reason"]
    assert h.admin.get("a")["state"] == "blocked"
    h.tick_at(T0 + MINUTE)
    assert [state for _, state, _ in h.history("b")] == ["completed", "running"]


def test_a_passing_io_error_on_a_record_is_read_again_not_a_verdict(h: Harness) -> None:
    two_schedules(h)
    spec, _ = h.control.spec(run_of(h, "a"))
    failing_reads(h, spec.record_dir, times=1)
    h.control.finish(spec.run_id, exit_code=0)
    h.tick_at(T0 + 1)
    assert h.runs.show(spec.run_id)["state"] == "running"
    for second in range(2, 4):
        retry_now(h)
        h.tick_at(T0 + second)
    assert h.runs.show(spec.run_id)["state"] == "completed"
    assert h.admin.get("a")["state"] == "active"


def test_recovery_meeting_an_io_error_on_a_record_starts_and_settles_it(h: Harness) -> None:
    two_schedules(h)
    spec, _ = h.control.spec(run_of(h, "a"))
    h.control.die(spec.run_id)
    h.supervisor = h.new_supervisor()
    failing_reads(h, spec.record_dir)
    h.supervisor.recover()  # must not raise: the run is read again by the ticks
    for second in range(1, 8):
        retry_now(h)
        h.tick_at(T0 + second)
    run = h.runs.show(spec.run_id)
    assert run["state"] == "failed" and "Input/output error" in run["reason"]
    assert h.admin.get("a")["state"] == "blocked"
    assert h.runs.show(run_of(h, "b"))["state"] == "running"


def test_an_unreadable_started_record_of_a_dead_shim_fails_closed(h: Harness) -> None:
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    spec, _ = h.control.spec("run-000001")
    make_bad(Path(spec.record_dir) / "shim.json", "directory")
    h.control.die("run-000001")
    # The database has the shim's pid: the record is not even needed.
    h.tick_at(T0 + 1)
    assert h.runs.show("run-000001")["state"] == "failed"


def test_files_a_job_left_in_the_way_fail_that_launch_not_the_tick(h: Harness) -> None:
    h.define("a", cron="0 * * * *")
    h.define("b", cron="0 * * * *")
    runs_dir = h.store.runs_dir
    runs_dir.mkdir(parents=True, exist_ok=True)
    (runs_dir / "run-000001").write_text("a job was here")  # where a's run goes
    h.tick_at(T0)
    first = h.runs.show("run-000001")
    assert first["state"] == "failed" and "cannot prepare its directories" in first["reason"]
    assert h.runs.show("run-000002")["state"] == "running"


def test_a_resume_into_files_a_job_left_is_refused_and_stays_resumable(h: Harness) -> None:
    h.define_interruptible("a")
    h.tick_at(T0)
    spec, _ = h.control.spec("run-000001")
    run_dir = Path(spec.env["WFSCHED_RUN_DIR"])
    # The interrupted job left a directory where the input goes and a file
    # where its next attempt's directory goes.
    os.unlink(spec.env["WFSCHED_INPUT"])
    os.mkdir(spec.env["WFSCHED_INPUT"])
    (run_dir / "attempt-2").write_text("x")
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 + 1)
    h.runs.request_resume("run-000001")
    h.tick_at(T0 + 2)  # must not raise
    assert h.runs.show("run-000001")["state"] == "interrupted"
    assert len(h.control.spawned) == 1


@pytest.mark.parametrize("kind", ["directory", "symlink"])
def test_a_resume_into_logs_a_job_left_is_refused_and_stays_resumable(
    h: Harness, kind: str
) -> None:
    """Where the keeper would open the next attempt's logs, the job left a
    directory (the attempt could not start) or a symlink (its output would
    go where the job chose): refused before anything is marked."""
    h.define_interruptible("a")
    h.tick_at(T0)
    spec, _ = h.control.spec("run-000001")
    log = Path(spec.env["WFSCHED_RUN_DIR"]) / "attempt-2" / "stdout.log"
    log.parent.mkdir()
    if kind == "directory":
        log.mkdir()
    else:
        log.symlink_to(log.parent.parent / "elsewhere.log")
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 + 1)
    seq = h.runs.request_resume("run-000001")
    h.tick_at(T0 + 2)
    answer = h.store.get_request(seq)
    assert answer is not None and answer.state == "refused"
    assert "cannot prepare its directories" in (answer.result or "")
    assert "stdout.log: not a regular file" in (answer.result or "")
    assert h.runs.show("run-000001")["state"] == "interrupted"
    assert len(h.control.spawned) == 1
    # Once the operator removes it, the resume runs attempt 2.
    log.rmdir() if kind == "directory" else log.unlink()
    h.runs.request_resume("run-000001")
    h.tick_at(T0 + 3)
    assert h.runs.show("run-000001")["state"] == "running"
    assert len(h.control.spawned) == 2


def test_a_dead_shim_is_recorded_only_once_its_session_is_gone(tmp_path: Path) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", '[policy]\noverlap = "skip"\n', cron="* * * * *")
    h.tick_at(T0)
    _, handle = h.control.spec("run-000001")
    h.control.sessions.add(handle.pid)  # its command is still running
    h.control.die("run-000001")
    h.tick_at(T0 + 1)
    assert h.runs.show("run-000001")["state"] == "running"
    assert (handle.pid, signal.SIGTERM) in h.control.session_signals
    # Meanwhile the schedule's next instant finds it still active.
    h.tick_at(T0 + MINUTE)
    assert len(h.control.spawned) == 1
    assert h.history("a")[1][1] == "skipped-overlap"
    # kill_grace (on the monotonic clock) elapses: SIGKILL.
    watch = h.supervisor.watches[1]
    assert watch.kill_at is not None
    watch.kill_at = 0.0
    h.tick_at(T0 + MINUTE + 1)
    assert (handle.pid, signal.SIGKILL) in h.control.session_signals
    assert h.runs.show("run-000001")["state"] == "running"
    h.control.sessions.discard(handle.pid)
    h.tick_at(T0 + MINUTE + 2)
    run = h.runs.show("run-000001")
    assert (run["state"], run["reason"]) == ("failed", ABANDONED)


def test_recovery_terminates_what_a_dead_shim_left_before_abandoning(h: Harness) -> None:
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    _, handle = h.control.spec("run-000001")
    h.control.alive_pids.discard(handle.pid)
    h.control.sessions.add(handle.pid)
    h.supervisor = h.new_supervisor()
    h.supervisor.recover()
    assert h.runs.show("run-000001")["state"] == "running"
    assert (handle.pid, signal.SIGTERM) in h.control.session_signals
    h.control.sessions.discard(handle.pid)
    h.supervisor.tick()
    assert h.runs.show("run-000001")["state"] == "failed"


# -- a launcher lost mid-launch ---------------------------------------------------------


class LosingControl(FakeControl):
    """Loses the next spawn in a chosen way, as a fork server killed at one of
    its boundaries would; counts start() calls, and can fail some."""

    lose: str | None = None
    starts: int = 0
    failing_starts: int = 0
    dead: bool = False

    def start(self) -> None:
        self.starts += 1
        if self.failing_starts:
            self.failing_starts -= 1
            raise LauncherError("the fork server did not start: it exited with status -9")
        self.dead = False

    def drain_exits(self) -> list[int]:
        if self.dead:
            raise LauncherError("the fork server exited unexpectedly")
        return super().drain_exits()

    def spawn(self, spec: LaunchSpec) -> ShimHandle:
        mode, self.lose = self.lose, None
        if mode is None:
            return super().spawn(spec)
        self.dead = True
        if mode == "before-fork":
            raise LauncherLost("the fork server exited while launching")
        handle = super().spawn(spec)  # forked: the shim runs and holds the lock
        (Path(spec.record_dir) / "shim.json").write_text(
            json.dumps({"pid": handle.pid, "start_time": handle.start_time})
        )
        if mode == "shim-died":
            self.alive_pids.discard(handle.pid)
        if mode == "shim-finished":
            self.finish(spec.run_id, report=False)
        raise LauncherLost("the fork server exited while launching")


@pytest.fixture
def lh(tmp_path: Path) -> Harness:
    harness = Harness(tmp_path / "store")
    harness.control = LosingControl(clock=harness.clock)
    harness.supervisor = harness.new_supervisor()
    harness.supervisor.tick()
    return harness


def starts(h: Harness) -> list[str]:
    return [spec.run_id for spec, _ in h.control.spawned]


def test_a_launch_lost_before_the_fork_is_launched_once_on_the_new_launcher(lh: Harness) -> None:
    lh.define("a", cron="0 * * * *")
    lh.control.lose = "before-fork"  # type: ignore[attr-defined]
    lh.tick_at(T0)
    assert starts(lh) == ["run-000001"]  # once, through the replacement
    assert lh.runs.show("run-000001")["state"] == "running"
    lh.control.finish("run-000001")
    lh.tick_at(T0 + 1)
    assert lh.runs.show("run-000001")["state"] == "completed"


def test_a_launch_lost_after_the_fork_adopts_the_shim_and_never_relaunches(lh: Harness) -> None:
    lh.define("a", cron="0 * * * *")
    lh.control.lose = "after-fork"  # type: ignore[attr-defined]
    lh.tick_at(T0)
    assert starts(lh) == ["run-000001"]
    assert any(event == "adopted" for event, _ in lh.events)
    lh.tick_at(T0 + 1)
    assert lh.runs.show("run-000001")["state"] == "running"
    lh.control.finish("run-000001", report=False)  # nobody reports an adopted shim
    lh.tick_at(T0 + 2)
    assert lh.runs.show("run-000001")["state"] == "completed"
    assert starts(lh) == ["run-000001"]


def test_a_lost_launch_whose_shim_finished_records_its_exit(lh: Harness) -> None:
    lh.define("a", cron="0 * * * *")
    lh.control.lose = "shim-finished"  # type: ignore[attr-defined]
    lh.tick_at(T0)
    lh.tick_at(T0 + 1)
    assert lh.runs.show("run-000001")["state"] == "completed"
    assert starts(lh) == ["run-000001"]


def test_a_lost_launch_whose_shim_died_is_abandoned_not_not_started(lh: Harness) -> None:
    lh.define("a", cron="0 * * * *")
    lh.control.lose = "shim-died"  # type: ignore[attr-defined]
    lh.tick_at(T0)
    lh.tick_at(T0 + 1)
    run = lh.runs.show("run-000001")
    assert (run["state"], run["reason"]) == ("failed", ABANDONED)
    assert starts(lh) == ["run-000001"]
    assert NEVER_STARTED not in run["reason"]


def test_a_launcher_that_cannot_be_replaced_is_retried_and_runs_wait(lh: Harness) -> None:
    control: LosingControl = lh.control  # type: ignore[assignment]
    lh.define("a", cron="0 * * * *")
    lh.define("m", cron="0 0 1 1 *")
    control.dead = True
    control.failing_starts = 3
    lh.tick_at(T0 - 5)  # the loss is noticed; the replacement dies while it starts
    assert [e for e, _ in lh.events].count("launcher-down") == 1
    report = status(lh.store, lh.clock)["launcher"]
    assert report is None  # no supervisor holds the lock in this harness
    assert lh.store.get_meta("launcher_state") == "down"
    assert "status -9" in (lh.store.get_meta("launcher_error") or "")
    lh.tick_at(T0)  # a's instant: admitted (durable), not launched
    assert lh.runs.show("run-000001")["state"] == "admitted"
    assert control.spawned == []
    # Backoff: the next start attempts come later, not in a tight loop.
    sup = lh.supervisor
    for _ in range(5):
        sup.launcher.retry_at = 0.0
        lh.tick_at(T0 + 1)
    assert control.starts >= 4
    assert sup.launcher.up
    assert lh.store.get_meta("launcher_state") == "up"
    assert starts(lh) == ["run-000001"]
    assert lh.runs.show("run-000001")["state"] == "running"


def test_exits_are_recorded_while_no_launcher_can_be_started(lh: Harness) -> None:
    """The keeper dies with two runs in flight and every replacement dies
    while it starts: the supervisor still records how both ended, one from
    the exit record that reached the disk, the other (no record, nothing of
    it left) as abandoned, without waiting for a launcher."""
    control: LosingControl = lh.control  # type: ignore[assignment]
    lh.define("a", cron="0 * * * *")
    lh.define("b", cron="0 * * * *")
    lh.tick_at(T0)
    assert sorted(starts(lh)) == ["run-000001", "run-000002"]
    control.dead = True
    control.failing_starts = 1000
    lh.tick_at(T0 + 1)  # the loss is noticed; no replacement comes up
    assert not lh.supervisor.launcher.up
    assert lh.store.get_meta("launcher_state") == "down"
    assert [lh.runs.show(f"run-00000{n}")["state"] for n in (1, 2)] == ["running", "running"]
    control.finish("run-000001", exit_code=0, report=False)  # its record made it to disk
    _, lost = control.spec("run-000002")
    control.alive_pids.discard(lost.pid)  # gone with its keeper, no record
    lh.tick_at(T0 + 2)
    assert not lh.supervisor.launcher.up
    assert lh.runs.show("run-000001")["state"] == "completed"
    run = lh.runs.show("run-000002")
    assert (run["state"], run["reason"]) == ("failed", ABANDONED)
    assert len(control.spawned) == 2


def test_hooks_in_flight_are_still_reported_after_a_launcher_replacement(tmp_path: Path) -> None:
    h = Harness(tmp_path / "store", on_failure=("notify-me",))
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=3)
    h.tick_at(T0 + 1)
    hook_spec, hook = h.control.spawned[-1]
    assert hook_spec.run_id == "run-000001-notify"
    # The launcher dies: the hook's exit will never be reported by it.
    h.control.drain_exits = _raise_once(h.control.drain_exits)  # type: ignore[method-assign]
    h.tick_at(T0 + 2)
    write_exit_record(Path(hook_spec.record_dir), 1)
    h.control.alive_pids.discard(hook.pid)
    h.tick_at(T0 + 3)
    assert ("notified", {"run": "run-000001"}) in h.events
    assert not h.supervisor.hooks._in_flight


def _raise_once(original):  # type: ignore[no-untyped-def]
    calls = [0]

    def drain() -> list[int]:
        calls[0] += 1
        if calls[0] == 1:
            raise LauncherError("the fork server exited unexpectedly")
        return original()

    return drain


def test_the_calendar_cache_keeps_only_current_revisions(h: Harness) -> None:
    from wfsched.domain.definition import parse_definition

    h.define("a")
    h.tick_at(T0)
    for minute in range(1, 6):
        text = f'id = "a"\ndescription = "v{minute}"\n[trigger]\ncron = "* * * * *"\n'
        text += '[run]\ncommand = ["true"]\n[policy]\noverlap = "parallel"\nmax_active_runs = 9\n'
        h.admin.update(parse_definition(text, "a.toml", now=int(h.clock())), minute)
        h.tick_at(T0 + minute * MINUTE)
    assert {key: revision for key, (revision, _) in h.supervisor._calendars.items()} == {"a": 6}


def test_the_caches_forget_deleted_and_exhausted_schedules(
    tmp_path: Path, make_store: Callable[[Path], Store]
) -> None:
    """Ids are never reused: without the sweep, every one-shot or deleted
    schedule a supervisor ever decided would stay parsed in its memory."""
    from wfsched.domain.definition import parse_definition

    h = Harness(make_store(tmp_path / "store"))
    h.define("live")
    h.define("gone")
    text = f'id = "once"\n[trigger]\nat = "{iso(T0)}"\n[run]\ncommand = ["true"]\n'
    h.admin.create(parse_definition(text, "once.toml", now=int(h.clock())))
    h.tick_at(T0)  # all three decided, so parsed and cached
    sup = h.supervisor
    assert set(sup._calendars) == set(sup.definitions.ids()) == {"live", "gone", "once"}
    assert h.admin.get("once")["state"] == "exhausted"
    h.admin.delete("gone")
    h.tick_at(T0 + MINUTE)
    assert "gone" in sup._calendars  # swept once per CACHE_SWEEP_INTERVAL, not every tick
    sup._next_cache_sweep = 0.0
    h.tick_at(T0 + 2 * MINUTE)
    assert set(sup._calendars) == set(sup.definitions.ids()) == {"live"}
    assert sup._next_cache_sweep > 0.0
    h.tick_at(T0 + 3 * MINUTE)  # the live one is still decided, from a fresh cache entry
    assert len(h.history("live")) == 4  # T0 to T0 + 3 minutes, each decided once


def test_a_run_launched_before_the_records_tree_existed_is_still_recovered(h: Harness) -> None:
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    spec, _ = h.control.spec("run-000001")
    h.control.finish("run-000001", report=False)
    # As an older version left it: records in the attempt directory only.
    shutil.rmtree(spec.record_dir)
    write_exit_record(Path(spec.attempt_dir), 1)
    h.supervisor = h.new_supervisor()
    h.supervisor.recover()
    assert h.runs.show("run-000001")["state"] == "completed"


def test_an_adopted_launch_never_waits_for_a_launcher_again(lh: Harness) -> None:
    """A run that waited for a launcher, then was adopted after its launch was
    lost after the fork, is watched to its end: never spawned again, never
    recorded "not started" at shutdown (seen in the launcher-kill stress test)."""
    control: LosingControl = lh.control  # type: ignore[assignment]
    lh.define("a", cron="0 * * * *")
    control.lose = "before-fork"
    control.failing_starts = 1  # the replacement dies while it starts: the run waits
    lh.tick_at(T0)
    assert starts(lh) == []
    control.lose = "after-fork"  # its spawn on the next launcher is lost after the fork
    lh.supervisor.launcher.retry_at = 0.0
    lh.tick_at(T0 + 1)
    assert starts(lh) == ["run-000001"]
    assert any(event == "adopted" for event, _ in lh.events)
    for second in range(2, 5):
        lh.supervisor.launcher.retry_at = 0.0
        lh.tick_at(T0 + second)
    assert starts(lh) == ["run-000001"]
    # Ended but not yet ingested: drain still finds it among its watches (a
    # waiting one would be recorded "not started" first), and then has no
    # drain grace to sit out.
    lh.control.finish("run-000001")  # type: ignore[attr-defined]
    lh.supervisor.drain()
    run = lh.runs.show("run-000001")
    assert "not started" not in (run["reason"] or "")
    assert run["state"] == "completed"


def test_a_waiting_attempt_whose_spawn_raises_is_settled_and_the_others_launch(
    lh: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempts that waited for a launcher are spawned as a chunk is: one
    whose spawn raises is settled (failed as never started, naming the
    error), the others start in the same tick with their pids stored, and the
    error is counted once."""
    control: LosingControl = lh.control  # type: ignore[assignment]
    lh.define("a", cron="0 * * * *")
    lh.define("b", cron="0 * * * *")
    control.lose = "before-fork"
    control.failing_starts = 1  # the replacement dies while it starts: both wait
    lh.tick_at(T0)
    assert starts(lh) == []
    waiting = sorted(w.run_seq for w in lh.supervisor.watches.values() if w.spec is not None)
    assert waiting == [1, 2]
    real = control.spawn

    def spawn(spec: LaunchSpec) -> ShimHandle:
        if spec.run_id == "run-000001":
            raise ValueError("bad frame")
        return real(spec)

    monkeypatch.setattr(control, "spawn", spawn)
    lh.supervisor.launcher.retry_at = 0.0
    lh.tick_at(T0 + 1)
    assert starts(lh) == ["run-000002"]  # the same tick, not stranded
    handle = control.spawned[0][1]
    stored = lh.store.get_attempt(2, 1)
    assert stored is not None and stored.shim_pid == handle.pid
    assert lh.supervisor.errors.counts == {"launch": 1}
    lh.tick_at(T0 + 2)
    first = lh.runs.show("run-000001")
    assert first["state"] == "failed" and "not started" in first["reason"]
    assert "bad frame" in first["reason"]
    assert lh.runs.show("run-000002")["state"] == "running"
    assert starts(lh) == ["run-000002"]
