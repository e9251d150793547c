"""Layer 1: a launch that fails after its attempt mark committed.

From the mark on, the run is `running` in the store: whatever raises then
(a store error, a log write, a bug) must settle that attempt the way a lost
launch is settled, one run at a time: adopt a shim its launch lock shows,
record its exit, or record it failed as never started. Never left `running`
with nothing watching it, never spawned twice, and never holding up the
other runs of its chunk.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.test_supervisor_loop import MINUTE, T0, Harness
from wfsched.daemon.supervisor import LOST_LAUNCH_TRIES, REQUEST_TRIES, Supervisor, SupervisorConfig
from wfsched.faults import InjectedFault
from wfsched.process.launcher import LauncherError, LauncherLost, LaunchSpec, ShimHandle


def _with_fault(h: Harness, point: str) -> list[str]:
    """Replace the harness's supervisor with one raising once at `point`."""
    fired: list[str] = []

    def fault(reached: str) -> None:
        if reached == point and not fired:
            fired.append(reached)
            raise InjectedFault(f"injected fault at {point}")

    h.supervisor = Supervisor(
        h.store,
        SupervisorConfig(),
        h.control,
        clock=h.clock,
        fault=fault,
        log=lambda event, **fields: h.events.append((event, fields)),
    )
    h.supervisor.tick()
    return fired


def _spawned(h: Harness) -> list[str]:
    return [spec.run_id for spec, _ in h.control.spawned]


def test_a_fault_after_the_attempt_mark_fails_the_run_not_started(tmp_path: Path) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", cron="0 * * * *")
    fired = _with_fault(h, "after-attempt-mark")
    h.tick_at(T0)
    assert fired
    h.tick_at(T0 + 1)
    run = h.runs.show("run-000001")
    assert run["state"] == "failed"
    assert "not started" in run["reason"] and "injected fault" in run["reason"]
    assert [a["state"] for a in run["attempts"]] == ["failed"]
    assert h.control.spawned == [] and h.supervisor.watches == {}
    # Its slot is free again: the next instant runs, no skipped-overlap.
    h.tick_at(T0 + 60 * MINUTE)
    assert h.history("a")[-1][1] == "running"
    assert _spawned(h) == ["run-000002"]


def test_a_fault_after_the_resume_mark_fails_the_run_not_started(tmp_path: Path) -> None:
    h = Harness(tmp_path / "store")
    h.define_interruptible("i")
    fired = _with_fault(h, "after-resume-mark")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 + 1)
    request = h.runs.request_resume("run-000001")
    h.tick_at(T0 + 2)
    assert fired
    assert h.store.get_request(request).state == "done"
    h.tick_at(T0 + 3)
    run = h.runs.show("run-000001")
    assert run["state"] == "failed"
    assert "not started" in run["reason"] and "injected fault" in run["reason"]
    assert [a["state"] for a in run["attempts"]] == ["interrupted", "failed"]
    assert _spawned(h) == ["run-000001"]  # attempt 2 never spawned
    assert h.supervisor.watches == {}


def test_a_non_launcher_error_from_spawn_settles_that_run_and_launches_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", cron="0 * * * *")
    h.define("b", cron="0 * * * *")
    real = h.control.spawn

    def spawn(spec: LaunchSpec) -> ShimHandle:
        if spec.run_id == "run-000001":
            raise ValueError("bad frame")  # before anything reached the server
        return real(spec)

    monkeypatch.setattr(h.control, "spawn", spawn)
    h.tick_at(T0)
    assert _spawned(h) == ["run-000002"]  # the same tick, not stranded
    assert ("launcher-lost", {"reason": "bad frame"}) in h.events
    h.tick_at(T0 + 1)
    first = h.runs.show("run-000001")
    assert first["state"] == "failed" and "bad frame" in first["reason"]
    assert "not started" in first["reason"]
    h.control.finish("run-000002")
    h.tick_at(T0 + 2)
    assert h.runs.show("run-000002")["state"] == "completed"
    assert h.supervisor.watches == {}


def test_a_spawn_that_raises_after_the_shim_started_adopts_it_never_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", cron="0 * * * *")
    real = h.control.spawn

    def spawn(spec: LaunchSpec) -> ShimHandle:
        handle = real(spec)  # the shim exists and holds its launch lock
        (Path(spec.record_dir) / "shim.json").write_text(
            f'{{"pid": {handle.pid}, "start_time": {handle.start_time}}}'
        )
        raise ValueError("garbled reply")

    monkeypatch.setattr(h.control, "spawn", spawn)
    h.tick_at(T0)
    for k in range(1, 4):
        h.tick_at(T0 + k)
    assert h.runs.show("run-000001")["state"] == "running"
    assert len(h.control.spawned) == 1
    h.control.finish("run-000001", report=False)  # an adopted shim is polled
    h.tick_at(T0 + 5)
    assert h.runs.show("run-000001")["state"] == "completed"
    assert len(h.control.spawned) == 1


def test_a_log_that_fails_after_a_spawn_leaves_every_run_of_the_chunk_watched(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", cron="0 * * * *")
    h.define("b", cron="0 * * * *")
    failed: list[str] = []

    def log(event: str, **fields: object) -> None:
        if event == "started" and not failed:
            failed.append(event)
            raise OSError(5, "Input/output error")  # stderr gone bad
        h.events.append((event, fields))

    h.supervisor = Supervisor(h.store, SupervisorConfig(), h.control, clock=h.clock, log=log)
    h.supervisor.tick()
    h.tick_at(T0)
    assert failed
    assert sorted(_spawned(h)) == ["run-000001", "run-000002"]
    # Both pids are known to the store (recovery would find them).
    for seq in (1, 2):
        assert h.store.get_attempt(seq, 1).shim_pid is not None
    h.control.finish("run-000001")
    h.control.finish("run-000002")
    h.tick_at(T0 + 1)
    assert [h.runs.show(r)["state"] for r in h.run_ids()] == ["completed", "completed"]
    assert len(h.control.spawned) == 2


def test_a_failed_spawn_whose_failure_cannot_be_recorded_is_recorded_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", cron="0 * * * *")

    def spawn(spec: LaunchSpec) -> ShimHandle:
        raise LauncherError("fork failed (Resource temporarily unavailable)")

    monkeypatch.setattr(h.control, "spawn", spawn)
    real_update = h.store.update_attempt
    broken = [True]

    def update_attempt(*args: object, **kwargs: object) -> None:
        if broken[0] and kwargs.get("state") == "failed":
            broken[0] = False
            raise sqlite3.OperationalError("database or disk is full")
        real_update(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(h.store, "update_attempt", update_attempt)
    h.tick_at(T0)
    assert not broken[0]
    assert h.runs.show("run-000001")["state"] == "running"
    h.tick_at(T0 + 1)
    run = h.runs.show("run-000001")
    assert run["state"] == "failed"
    assert "could not start the shim" in run["reason"] and "fork failed" in run["reason"]
    assert h.supervisor.watches == {}
    assert [e for e, f in h.events if e == "failed" and f["run"] == "run-000001"] == ["failed"]


def test_one_run_that_cannot_be_prepared_never_stalls_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", cron="0 * * * *")
    h.define("b", cron="0 * * * *")
    from wfsched.store import rundirs

    real = rundirs.RunDir.prepare

    def prepare(self: rundirs.RunDir, document: object) -> None:
        if self.path.name == "run-000001":
            raise ValueError("Out of range float values are not JSON compliant")
        real(self, document)

    monkeypatch.setattr(rundirs.RunDir, "prepare", prepare)
    for k in range(3):
        h.tick_at(T0 + k)
    assert _spawned(h) == ["run-000002"]
    first = h.runs.show("run-000001")
    assert first["state"] == "failed" and "cannot prepare" in first["reason"]


def test_a_launch_that_kills_every_launcher_fails_not_started_without_a_storm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", cron="0 * * * *")
    h.define("b", cron="0 * * * *")
    calls: list[str] = []
    real = h.control.spawn

    def spawn(spec: LaunchSpec) -> ShimHandle:
        calls.append(spec.run_id)
        if spec.run_id == "run-000001":
            raise LauncherLost("the fork server exited while launching")
        return real(spec)

    monkeypatch.setattr(h.control, "spawn", spawn)
    h.tick_at(T0)
    assert calls.count("run-000001") == LOST_LAUNCH_TRIES
    assert _spawned(h) == ["run-000002"]
    first = h.runs.show("run-000001")
    assert first["state"] == "failed"
    assert first["reason"] == (
        "not started: the launcher was lost 3 times while launching it; the command never ran"
    )
    assert [e for e, _ in h.events].count("launcher-lost") == LOST_LAUNCH_TRIES


def test_a_resume_answered_by_its_mark_is_never_refused_by_a_later_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark answers the resume `done`; an error after it, on the last
    try the request gets, must not overwrite that answer with `refused`."""
    h = Harness(tmp_path / "store")
    h.define_interruptible("i")
    fired = _with_fault(h, "after-resume-mark")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 + 1)
    real = h.store.mark_attempts
    failures = [REQUEST_TRIES - 1]

    def mark_attempts(*args: object, **kwargs: object) -> None:
        if failures[0]:
            failures[0] -= 1
            raise sqlite3.OperationalError("database is locked")
        real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(h.store, "mark_attempts", mark_attempts)
    request = h.runs.request_resume("run-000001")
    for k in range(2, 2 + REQUEST_TRIES):
        h.tick_at(T0 + k)
    assert fired
    assert h.store.get_request(request).state == "done"
    h.tick_at(T0 + 2 + REQUEST_TRIES)
    assert h.runs.show("run-000001")["state"] == "failed"
