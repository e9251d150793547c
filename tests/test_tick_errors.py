"""Layer 1: an error in one tick phase is contained, counted and retried.

Each test makes one phase fail once (a store method raising the error
SQLite raises on a failing disk, or the fault seam in `raise` mode) and
checks three things: the tick returns, the error is counted under its
phase with a log line naming what it was working on, and the next tick
finishes the work exactly once (no double launch, no lost exit, no second
hook).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_supervisor_loop import MINUTE, T0, Harness, iso
from wfsched.api.status import status
from wfsched.daemon.supervisor import NOTIFY_TRIES, REQUEST_TRIES, Supervisor
from wfsched.domain.config import SupervisorConfig
from wfsched.domain.definition import parse_definition
from wfsched.domain.tickerrors import REPEAT_LOG_INTERVAL, TickErrors
from wfsched.faults import InjectedFault


def fail(
    h: Harness,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    times: int = 1,
    when: Callable[..., bool] = lambda *a, **k: True,
) -> list[int]:
    """Make `store.<method>` raise a disk error the next `times` matching calls."""
    real = getattr(h.store, method)
    left = [times]

    def failing(*args: Any, **kwargs: Any) -> Any:
        if left[0] > 0 and when(*args, **kwargs):
            left[0] -= 1
            raise sqlite3.OperationalError("disk I/O error")
        return real(*args, **kwargs)

    monkeypatch.setattr(h.store, method, failing)
    return left


def tick_errors(h: Harness) -> list[dict[str, object]]:
    return [fields for event, fields in h.events if event == "tick-error"]


def events(h: Harness, name: str) -> list[dict[str, object]]:
    return [fields for event, fields in h.events if event == name]


def with_hook(h: Harness, fault: Callable[[str], None] | None = None) -> None:
    h.supervisor = Supervisor(
        h.store,
        SupervisorConfig(on_failure=("alert",)),
        h.control,
        clock=h.clock,
        log=lambda event, **fields: h.events.append((event, fields)),
        **({"fault": fault} if fault else {}),
    )
    h.supervisor.tick()


def hooks_fired(h: Harness) -> int:
    return sum(spec.run_id.endswith("-notify") for spec, _ in h.control.spawned)


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    harness = Harness(tmp_path / "store")
    harness.define("a", cron="0 * * * *")
    return harness


def test_ingestion_that_fails_after_reading_the_exit_record_rereads_it(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher reports a reaped shim once; the failed ingestion must not
    forget it, or the run would stay `running` forever (a lost exit)."""
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=0)
    fail(h, monkeypatch, "end_attempts")
    h.tick_at(T0 + 1)
    assert h.runs.show("run-000001")["state"] == "running"
    assert h.supervisor.errors.counts == {"ingestion": 1}
    assert tick_errors(h) == [
        {"phase": "ingestion", "runs": "run-000001", "reason": "disk I/O error"}
    ]
    h.tick_at(T0 + 2)
    run = h.runs.show("run-000001")
    assert run["state"] == "completed"
    assert [a["state"] for a in run["attempts"]] == ["completed"]
    assert len(events(h, "completed")) == 1
    assert len(h.control.spawned) == 1


def test_ingestion_fault_point_in_raise_mode_is_contained(h: Harness) -> None:
    raised: list[str] = []

    def fault(point: str) -> None:
        if point == "before-ingest" and not raised:
            raised.append(point)
            raise InjectedFault("injected fault at before-ingest")

    h.supervisor = Supervisor(
        h.store,
        SupervisorConfig(),
        h.control,
        clock=h.clock,
        fault=fault,
        log=lambda event, **fields: h.events.append((event, fields)),
    )
    h.supervisor.tick()
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=0)
    h.tick_at(T0 + 1)
    assert raised and h.runs.show("run-000001")["state"] == "running"
    h.tick_at(T0 + 2)
    assert h.runs.show("run-000001")["state"] == "completed"


def test_notification_failure_after_the_exit_committed_is_retried_not_recommitted(
    h: Harness,
) -> None:
    """The reported crash: a store error while notifying stopped the daemon.
    Now the exit stays committed once and the hook fires on the next tick."""
    failures = [1]

    def fault(point: str) -> None:
        if point == "before-notify" and failures[0]:
            failures[0] -= 1
            raise sqlite3.OperationalError("database is locked")

    with_hook(h, fault)
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=3)
    h.tick_at(T0 + 1)
    assert h.runs.show("run-000001")["state"] == "failed"
    assert hooks_fired(h) == 0
    assert tick_errors(h) == [
        {
            "phase": "notification",
            "run": "run-000001",
            "schedule": "a",
            "reason": "database is locked",
        }
    ]
    h.tick_at(T0 + 2)
    h.tick_at(T0 + 3)
    assert hooks_fired(h) == 1
    assert len(events(h, "failed")) == 1
    assert [a["state"] for a in h.runs.show("run-000001")["attempts"]] == ["failed"]


def test_a_store_error_reading_the_schedule_for_a_hook_is_contained(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_hook(h)
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=3)
    fail(h, monkeypatch, "get_schedule")
    h.tick_at(T0 + 1)
    assert (hooks_fired(h), h.supervisor.errors.counts) == (0, {"notification": 1})
    h.tick_at(T0 + 2)
    assert hooks_fired(h) == 1


def test_a_notice_that_keeps_failing_is_given_up_and_the_others_still_fire(
    h: Harness,
) -> None:
    def fault(point: str) -> None:
        if point == "before-notify" and current[0] == "run-000001":
            raise sqlite3.OperationalError("disk I/O error")

    current = [""]
    real = Supervisor._notify_failure

    def tracking(self: Supervisor, run: Any, *args: Any) -> None:
        current[0] = run.run_id
        real(self, run, *args)

    with_hook(h, fault)
    h.supervisor._notify_failure = tracking.__get__(h.supervisor)  # type: ignore[method-assign]
    h.define("b", cron="0 * * * *")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=1)
    h.control.finish("run-000002", exit_code=1)
    for second in range(1, NOTIFY_TRIES + 3):
        h.tick_at(T0 + second)
    assert [spec.run_id for spec, _ in h.control.spawned if "notify" in spec.run_id] == [
        "run-000002-notify"
    ]
    assert h.supervisor.errors.counts == {"notification": NOTIFY_TRIES}
    gave_up = [f for f in events(h, "notify-failed") if f["run"] == "run-000001"]
    assert gave_up == [
        {"run": "run-000001", "reason": f"gave up after {NOTIFY_TRIES} tries: disk I/O error"}
    ]


def test_admission_failure_rolls_back_and_admits_once_next_tick(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail(h, monkeypatch, "insert_occurrence")
    h.tick_at(T0)
    assert h.run_ids() == [] and h.history("a") == []
    assert h.supervisor.errors.counts == {"admission": 1}
    assert tick_errors(h)[0]["schedule"] == "a"
    h.tick_at(T0 + 1)
    assert h.run_ids() == ["run-000001"]
    assert [state for _, state, _ in h.history("a")] == ["running"]
    assert len(h.control.spawned) == 1


def test_a_failed_mark_rolls_its_admission_back_and_the_next_tick_admits_once(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduled run's first attempt is marked in its admission's
    transaction: a store error there rolls the admission back with it (the
    instant is still due), and the next tick admits, marks and launches it
    once."""
    fail(h, monkeypatch, "mark_attempts")
    h.tick_at(T0)
    assert h.store.list_runs(limit=10) == []
    assert h.control.spawned == []
    assert h.supervisor.errors.counts == {"admission": 1}
    h.tick_at(T0 + 1)
    h.tick_at(T0 + 2)
    assert h.runs.show("run-000001")["state"] == "running"
    assert [spec.run_id for spec, _ in h.control.spawned] == ["run-000001"]
    assert [state for _, state, _ in h.history("a")] == ["running"]


def test_a_failed_launch_after_the_admission_committed_launches_once_later(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manual run is admitted by its request's transaction and marked by a
    second one: a store error in the mark leaves it admitted (the request
    answered), and the launch phase launches it once."""
    h.tick_at(T0 + 1)
    seq = h.runs.request_trigger("a")
    fail(h, monkeypatch, "mark_attempts")
    # This tick's launch phase held back, to see the state between the two.
    h.supervisor.launch_admitted = lambda: None  # type: ignore[method-assign]
    h.tick_at(T0 + 2)
    assert h.runs.show("run-000002")["state"] == "admitted"
    assert h.store.get_request(seq).state == "done"  # type: ignore[union-attr]
    assert [spec.run_id for spec, _ in h.control.spawned] == ["run-000001"]
    assert h.supervisor.errors.counts == {"launch": 1}
    assert tick_errors(h)[0]["runs"] == "run-000002"
    del h.supervisor.launch_admitted
    h.tick_at(T0 + 3)
    h.tick_at(T0 + 4)
    assert h.runs.show("run-000002")["state"] == "running"
    assert [spec.run_id for spec, _ in h.control.spawned] == ["run-000001", "run-000002"]


def test_a_failed_request_stays_pending_and_is_answered_once(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.tick_at(T0 + 1)
    seq = h.runs.request_trigger("a")
    fail(h, monkeypatch, "finish_request")
    h.tick_at(T0 + 2)
    assert h.store.get_request(seq).state == "pending"  # type: ignore[union-attr]
    assert h.supervisor.errors.counts == {"requests": 1}
    assert tick_errors(h)[0] == {
        "phase": "requests",
        "request": seq,
        "kind": "trigger",
        "schedule": "a",
        "reason": "disk I/O error",
    }
    h.tick_at(T0 + 3)
    request = h.store.get_request(seq)
    assert request is not None and (request.state, request.result) == ("done", "run-000002")
    assert h.run_ids() == ["run-000001", "run-000002"]
    assert len(h.control.spawned) == 2


def test_a_resume_that_keeps_failing_neither_blocks_other_requests_nor_waits_forever(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the interrupted run fails every time (a damaged page): the
    trigger of another schedule and a cancel behind the resume are answered
    at once; the resume is refused with the reason after REQUEST_TRIES."""
    h.define_interruptible("i", cron="0 0 1 1 *")
    h.runs.request_trigger("i")
    h.tick_at(T0 - 20)
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 - 19)
    assert h.runs.show("run-000001")["state"] == "interrupted"
    resume = h.runs.request_resume("run-000001")
    trigger = h.runs.request_trigger("a")
    fail(h, monkeypatch, "get_run", times=1_000, when=lambda seq: seq == 1)
    h.tick_at(T0 - 18)
    answered = h.store.get_request(trigger)
    assert answered is not None and (answered.state, answered.result) == ("done", "run-000002")
    cancel = h.runs.request_cancel("run-000002")
    for second in range(REQUEST_TRIES - 1):
        assert h.store.get_request(resume).state == "pending"  # type: ignore[union-attr]
        h.tick_at(T0 - 17 + second)
        if second == 0:
            # Carried out at once (the run's end answers it, `cancelled`).
            note = h.store.get_request(cancel)
            assert note is not None and (note.result or "").startswith("run-000002 cancelling")
            assert h.control.cancelled == [h.control.spec("run-000002")[1].pid]
    refused = h.store.get_request(resume)
    assert refused is not None and (refused.state, refused.result) == (
        "refused",
        f"could not be carried out ({REQUEST_TRIES} tries): disk I/O error",
    )
    assert h.supervisor.errors.counts == {"requests": REQUEST_TRIES}
    assert [f["request"] for f in events(h, "request-refused")] == [resume]
    monkeypatch.undo()
    assert h.runs.show("run-000001")["state"] == "interrupted"  # resumable once repaired


def test_a_trigger_of_an_unreadable_schedule_is_refused_and_others_proceed(
    h: Harness,
) -> None:
    h.define("garbage", cron="0 0 1 1 *")
    with h.store.atomic():
        h.store.update_schedule("garbage", definition="{not json")
    poisoned = h.runs.request_trigger("garbage")
    for second in range(REQUEST_TRIES):
        trigger = h.runs.request_trigger("a")
        h.tick_at(T0 - 20 + second)
        assert h.store.get_request(trigger).state == "done"  # type: ignore[union-attr]
    refused = h.store.get_request(poisoned)
    assert refused is not None and refused.state == "refused"
    assert "corrupt definition row" in (refused.result or "")
    assert len(h.control.spawned) == REQUEST_TRIES


def test_retention_failure_is_retried_a_minute_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness(tmp_path / "store", retention=3600.0)
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    h.control.finish("run-000001")
    h.tick_at(T0 + 1)
    fail(h, monkeypatch, "retention_schedule_ids")
    h.tick_at(T0 + 3 * 3600 + 1)
    assert h.supervisor.errors.counts == {"retention": 1}
    assert "run-000001" in h.run_ids()
    h.tick_at(T0 + 3 * 3600 + 2)
    assert "run-000001" in h.run_ids()
    h.tick_at(T0 + 3 * 3600 + 62)
    assert "run-000001" not in h.run_ids()
    assert events(h, "pruned")


def test_liveness_stamp_failure_is_published_with_the_next_stamp(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail(h, monkeypatch, "touch_meta")
    h.tick_at(T0)
    assert h.runs.show("run-000001")["state"] == "running"
    assert h.supervisor.errors.counts == {"liveness": 1}
    h.tick_at(T0 + 1)
    assert h.store.get_meta("last_tick_at") == repr(T0 + 1)
    published = status(h.store, clock=h.clock)["errors"]
    assert published["total"] == 1 and published["by_phase"] == {"liveness": 1}
    assert published["last"]["phase"] == "liveness"
    assert published["last"]["error"] == "disk I/O error"
    assert published["last"]["at"] == "2026-12-01T09:00:00.000Z"


def test_errors_are_counted_from_the_start_of_each_supervisor(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    fail(h, monkeypatch, "touch_meta")
    h.tick_at(T0)
    h.tick_at(T0 + 1)
    assert status(h.store, clock=h.clock)["errors"]["total"] == 1
    h.supervisor = h.new_supervisor()
    h.supervisor.announce()
    assert status(h.store, clock=h.clock)["errors"] == {
        "total": 0,
        "by_phase": {},
        "last": None,
        "fault_episodes": 0,
        "last_fault": None,
    }


def test_a_startup_tick_whose_admission_failed_is_decided_again_as_startup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What was missed while no supervisor ran keeps its `supervisor-down`
    reading when the first decision has to be retried."""
    h = Harness(tmp_path / "store")
    text = 'id = "m"\n[trigger]\ncron = "* * * * *"\n[run]\ncommand = ["true"]\n'
    h.admin.create(parse_definition(text, "m.toml", now=int(h.clock())))
    h.supervisor = h.new_supervisor()
    fail(h, monkeypatch, "insert_occurrence")
    h.tick_at(T0 + 10 * MINUTE + 5)
    assert h.history("m") == []
    h.tick_at(T0 + 10 * MINUTE + 6)
    reasons = [reason for _, state, reason in h.history("m") if state == "skipped-misfire"]
    assert reasons and all(reason and "supervisor-down" in reason for reason in reasons)


def test_an_instant_due_during_a_store_episode_from_startup_is_judged_by_lateness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store fails from the supervisor's first tick (08:59:40) until
    09:00:10: 09:00 fell due under this supervisor, 10 s late with 60 s of
    lateness, so it runs. Later, 10:00 decided 5 minutes late because the
    store failed is `skipped-misfire` with reason `store-unavailable`."""
    h = Harness(tmp_path / "store")
    text = 'id = "m"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["true"]\n'
    h.admin.create(parse_definition(text, "m.toml", now=int(h.clock())))
    h.supervisor = h.new_supervisor()  # a restart; nothing was missed while down
    fail(h, monkeypatch, "due_schedules", times=2)
    h.tick_at(T0 - 20)
    h.tick_at(T0 - 10)
    assert h.history("m") == []
    h.tick_at(T0 + 10)
    assert h.run_ids() == ["run-000001"]
    assert h.history("m") == [(iso(T0), "running", None)]
    h.control.finish("run-000001")
    h.tick_at(T0 + 11)
    fail(h, monkeypatch, "due_schedules", times=2)
    h.tick_at(T0 + 60 * MINUTE)
    h.tick_at(T0 + 62 * MINUTE)
    h.tick_at(T0 + 65 * MINUTE)
    assert h.history("m")[1:] == [(iso(T0 + 60 * MINUTE), "skipped-misfire", "store-unavailable")]
    assert h.supervisor.errors.counts == {"admission": 4}
    h.tick_at(T0 + 122 * MINUTE)  # late without a store failure: the plain reason
    assert h.history("m")[2:] == [(iso(T0 + 120 * MINUTE), "skipped-misfire", "late")]


def test_the_same_error_is_logged_once_a_minute_and_counted_every_time() -> None:
    errors = TickErrors()
    boom = sqlite3.OperationalError("disk I/O error")
    assert errors.record("retention", boom, {}, 100.0) == 1
    assert errors.record("retention", boom, {}, 101.0) == 0
    assert errors.record("retention", boom, {}, 130.0) == 0
    assert errors.record("retention", boom, {}, 100.0 + REPEAT_LOG_INTERVAL) == 3
    assert errors.record("retention", OSError("other"), {}, 161.0) == 1
    assert errors.record("liveness", boom, {"run": None}, 161.0) == 1
    assert errors.counts == {"retention": 5, "liveness": 1}
    assert json.loads(errors.to_meta())["last"] == {
        "phase": "liveness",
        "at": 161.0,
        "error": "disk I/O error",
    }


def serve_until_a_tick_error(h: Harness, monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    """Run serve() with `store.<method>` failing once; it stops at the
    tick-error that failure logs (the loop itself must survive it)."""
    import signal

    def log(event: str, **fields: object) -> None:
        h.events.append((event, fields))
        if event == "tick-error":
            h.supervisor.stop_requested = True

    h.supervisor = Supervisor(h.store, SupervisorConfig(), h.control, clock=h.clock, log=log)
    fail(h, monkeypatch, method)
    try:
        h.supervisor.serve()
    finally:
        signal.set_wakeup_fd(-1)


def test_a_failed_checkpoint_in_the_loop_is_counted_and_the_loop_goes_on(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve() checkpoints before it sleeps; a failure there (the log keeps
    every commit) must not end it."""
    serve_until_a_tick_error(h, monkeypatch, "checkpoint")
    assert h.supervisor.errors.counts == {"checkpoint": 1}
    assert [event for event, _ in h.events] == ["started", "tick-error", "draining", "drained"]


def test_a_failed_next_due_lookup_in_the_loop_sleeps_a_poll_interval(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve() asks the store when to wake; a failure there must not end it."""
    serve_until_a_tick_error(h, monkeypatch, "earliest_due_schedule")
    assert h.supervisor.errors.counts == {"next-due": 1}
    assert [event for event, _ in h.events] == ["started", "tick-error", "draining", "drained"]


def test_a_store_error_in_the_quiet_check_is_contained(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle tick asks the store only whether anything changed; that read
    failing must not end the supervisor (it escaped every phase)."""
    h.tick_at(T0 - 20)
    h.supervisor._sleep_seconds()  # remembers the next due instant: quiet from now
    h.tick_at(T0 - 19)
    fail(h, monkeypatch, "changes", times=2)
    h.tick_at(T0 - 18)
    assert h.supervisor.errors.counts == {"liveness": 1}
    assert tick_errors(h) == [{"phase": "liveness", "reason": "disk I/O error"}]
    h.tick_at(T0)
    assert h.run_ids() == ["run-000001"]


class PgLeader:
    """A PostgreSQL store and a supervisor holding the real lease (no lease
    thread: the test ticks), for the phases only a leader with a lease runs."""

    def __init__(self, tmp_path: Path, pg_url: str) -> None:
        import os
        import time
        from dataclasses import replace

        from wfsched.daemon.leadership import Leadership
        from wfsched.store.location import resolve_store
        from wfsched.store.postgres import PostgresStore

        (tmp_path / "local").mkdir()
        self.store = PostgresStore(replace(resolve_store(pg_url), local_dir=tmp_path / "local"))
        self.h = Harness(self.store)
        self.h.define("a", cron="0 * * * *")
        self.channel = self.store.lease_channel("here", os.getpid())
        self.leadership = Leadership(self.channel, 30.0, 1.0)
        epoch = self.channel.take(30.0)
        assert epoch is not None
        self.leadership._set(epoch, time.monotonic())
        self.h.supervisor = Supervisor(
            self.store,
            SupervisorConfig(host="here"),
            self.h.control,
            clock=self.h.clock,
            log=lambda event, **fields: self.h.events.append((event, fields)),
            leadership=self.leadership,
        )

    def close(self) -> None:
        self.channel.close()
        self.leadership.close()
        self.store.close()


@pytest.fixture
def pg_leader(tmp_path: Path, pg_url: str) -> Iterator[PgLeader]:
    leader = PgLeader(tmp_path, pg_url)
    try:
        yield leader
    finally:
        leader.close()


def test_a_store_error_taking_up_leadership_is_contained_and_retried(
    pg_leader: PgLeader, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease is won at 08:59:55, then the first writes as leader fail
    until 09:00:10: the supervisor stays standby meanwhile (it admits
    nothing), counts the errors, and leads once they pass, not as a handover
    (it took over from nobody). 09:00 fell due while it held the lease, so it
    is judged by lateness (10 s late, 60 s allowed: it runs), not missed."""
    import psycopg

    h, store = pg_leader.h, pg_leader.store
    real = store.set_idle_limit
    left = [2]

    def failing(seconds: float) -> None:
        if left[0]:
            left[0] -= 1
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        real(seconds)

    monkeypatch.setattr(store, "set_idle_limit", failing)
    h.tick_at(T0 - 5)
    assert not h.supervisor.leading and h.run_ids() == []
    assert h.supervisor.errors.counts == {"leadership": 1}
    assert [f["phase"] for f in tick_errors(h)] == ["leadership"]
    assert events(h, "standby")[-1]["reason"].startswith("could not take up leadership")
    h.tick_at(T0 + 5)
    assert not h.supervisor.leading and h.run_ids() == []
    h.tick_at(T0 + 10)
    assert h.supervisor.leading and h.supervisor.errors.counts == {"leadership": 2}
    assert [f["handover"] for f in events(h, "leading")] == [False, False, False]
    assert h.history("a") == [(iso(T0), "running", None)]
    assert h.run_ids() == ["run-000001"]
    h.control.finish("run-000001")
    h.tick_at(T0 + 3600 + 300)  # 5 minutes late, the store fine: the plain reason
    assert h.history("a")[1:] == [(iso(T0 + 3600), "skipped-misfire", "late")]


def test_a_store_error_checking_for_lost_hosts_is_contained_and_retried(
    pg_leader: PgLeader, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    h, store = pg_leader.h, pg_leader.store
    real = store.runs_on_lost_hosts
    calls: list[float] = []

    def failing(host_timeout: float) -> Any:
        calls.append(h.clock())
        if len(calls) == 1:
            raise psycopg.OperationalError("could not receive data from server")
        return real(host_timeout)

    monkeypatch.setattr(store, "runs_on_lost_hosts", failing)
    h.tick_at(T0 - 5)
    assert h.supervisor.leading
    assert h.supervisor.errors.counts == {"hosts": 1}
    assert tick_errors(h) == [{"phase": "hosts", "reason": "could not receive data from server"}]
    h.tick_at(T0)  # the other phases went on; the check is tried again
    assert h.run_ids() == ["run-000001"]
    assert calls == [T0 - 5, T0] and h.supervisor.errors.counts == {"hosts": 1}


def test_a_failing_metrics_publication_does_not_end_the_loop(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve() publishes the metrics snapshot after each tick; an error
    there (a bug in an observer) is the metrics phase's, not the loop's:
    the loop ticks again after it."""
    import signal

    h.supervisor = h.new_supervisor()
    published: list[float | None] = []

    def broken(seconds: float | None) -> None:
        published.append(seconds)
        if len(published) >= 3:
            h.supervisor.stop_requested = True
        raise ValueError("histogram bucket out of order")

    monkeypatch.setattr(h.supervisor.observer, "ticked", broken)
    monkeypatch.setattr(h.supervisor, "_sleep_seconds", lambda: (0.0, False))
    try:
        h.supervisor.serve()
    finally:
        signal.set_wakeup_fd(-1)
    assert len(published) >= 3 and h.supervisor.errors.counts["metrics"] == len(published)
    assert [f["phase"] for f in tick_errors(h)] == ["metrics"]  # logged once a minute
    assert [event for event, _ in h.events][-2:] == ["draining", "drained"]
