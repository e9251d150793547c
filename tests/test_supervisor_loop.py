"""Layer 1: the supervisor loop with an injected clock and a fake launcher.

A real store in tmp_path, real decisions, real exit-record ingestion; only
processes are faked. No sleeps: time moves when a test moves it.
"""

from __future__ import annotations

import errno
import json
import select
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.fakes import Clock, FakeControl, in_the_database_file, write_exit_record
from wfsched.api.admin import Admin
from wfsched.api.run_ops import Runs
from wfsched.daemon.supervisor import (
    ABANDONED,
    AFTER_HELD_LAUNCH,
    CHECKPOINT_QUIET,
    STAMP_INTERVAL,
    LauncherHealth,
    Supervisor,
)
from wfsched.daemon.wakeup import Waiter
from wfsched.domain.config import SupervisorConfig
from wfsched.domain.definition import parse_definition
from wfsched.process.launcher import LaunchSpec, ShimHandle
from wfsched.store import SQLiteStore, Store
from wfsched.store.sqlite import CHECKPOINT_CHANGES

T0 = int(datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp())
MINUTE = 60


class Harness:
    def __init__(self, store: Store | Path, **config: object) -> None:
        """`store`: an open store of either kind, or a directory for a SQLite one."""
        self.clock = Clock(T0 - 30)
        self.store = SQLiteStore(store) if isinstance(store, Path) else store
        self.admin = Admin(self.store, self.clock)
        self.runs = Runs(self.store, self.clock)
        self.control = FakeControl(clock=self.clock)
        self.events: list[tuple[str, dict[str, object]]] = []
        self.supervisor = self.new_supervisor(**config)
        # The startup tick happens when the supervisor takes ownership.
        self.supervisor.tick()

    def new_supervisor(self, **config: object) -> Supervisor:
        return Supervisor(
            self.store,
            SupervisorConfig(**config),  # type: ignore[arg-type]
            self.control,
            clock=self.clock,
            log=lambda event, **fields: self.events.append((event, fields)),
        )

    def define(self, schedule_id: str, body: str = "", cron: str = "* * * * *") -> None:
        text = f'id = "{schedule_id}"\n[trigger]\ncron = "{cron}"\n[run]\ncommand = ["true"]\n'
        defn = parse_definition(text + body, f"{schedule_id}.toml", now=int(self.clock()))
        self.admin.create(defn)

    def define_interruptible(self, schedule_id: str, cron: str = "0 * * * *") -> None:
        text = (
            f'id = "{schedule_id}"\n[trigger]\ncron = "{cron}"\n'
            '[run]\ncommand = ["true"]\ninterrupt_exit_code = 75\n'
        )
        self.admin.create(parse_definition(text, "x.toml", now=int(self.clock())))

    def tick_at(self, instant: float) -> None:
        self.clock.set(instant)
        self.supervisor.tick()

    def history(self, schedule_id: str) -> list[tuple[str, str, str | None]]:
        items, _ = self.admin.occurrences(schedule_id, limit=100)
        return [(item["scheduled_at"], item["state"], item["reason"]) for item in items]

    def run_ids(self) -> list[str]:
        items, _ = self.runs.list(limit=100)
        return sorted(item["run_id"] for item in items)


@pytest.fixture
def h(tmp_path: Path, make_store: Callable[[Path], Store]) -> Harness:
    return Harness(make_store(tmp_path / "store"))


def iso(instant: int) -> str:
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_due_instant_is_admitted_once_and_launched_with_its_environment(h: Harness) -> None:
    h.define("a", '[[input]]\ntarget = "when"\noccurrence = "scheduled_at"\n')
    h.tick_at(T0 - 1)
    assert h.control.spawned == []
    h.tick_at(T0)
    h.tick_at(T0 + 0.5)
    assert len(h.control.spawned) == 1
    spec, _ = h.control.spawned[0]
    assert spec.env["WFSCHED_SCHEDULE_ID"] == "a"
    assert spec.env["WFSCHED_OCCURRENCE_ID"] == "a@20261201T090000Z"
    assert spec.env["WFSCHED_SCHEDULED_AT"] == iso(T0)
    assert spec.env["WFSCHED_RUN_ID"] == "run-000001"
    assert spec.env["WFSCHED_ATTEMPT"] == "1"
    assert spec.stdin_path == spec.env["WFSCHED_INPUT"]
    assert json.loads(Path(spec.stdin_path).read_text()) == {"when": iso(T0)}
    assert Path(spec.env["WFSCHED_STATE_DIR"]).is_dir()
    assert h.history("a") == [(iso(T0), "running", None)]
    h.control.finish("run-000001")
    h.tick_at(T0 + 1)
    assert h.history("a") == [(iso(T0), "completed", None)]
    assert h.runs.show("run-000001")["attempts"][0]["state"] == "completed"


def test_overlap_skip_records_skipped_overlap_and_releases_on_completion(h: Harness) -> None:
    h.define("a")
    h.tick_at(T0)
    h.tick_at(T0 + MINUTE)
    assert h.history("a")[1] == (
        iso(T0 + MINUTE),
        "skipped-overlap",
        "a run of this schedule is unfinished",
    )
    h.control.finish("run-000001", exit_code=3)
    h.tick_at(T0 + MINUTE + 1)
    h.tick_at(T0 + 2 * MINUTE)
    states = [state for _, state, _ in h.history("a")]
    assert states == ["failed", "skipped-overlap", "running"]


def test_interrupted_run_keeps_overlap_slot_but_frees_execution_slot(
    tmp_path: Path, make_store: Callable[[Path], Store]
) -> None:
    h = Harness(make_store(tmp_path / "s"), max_concurrent_runs=1)
    h.define_interruptible("a", cron="* * * * *")
    h.define("b")
    h.tick_at(T0)
    assert [spec.run_id for spec, _ in h.control.spawned] == ["run-000001"]
    first = h.control.spawned[0][0]
    h.control.finish(first.run_id, exit_code=75)
    h.tick_at(T0 + 1)
    assert h.runs.show(first.run_id)["state"] == "interrupted"
    h.tick_at(T0 + MINUTE)
    schedule_of = {spec.run_id: spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in h.control.spawned}
    # a is held by its interrupted run (overlap skip); b takes the free execution slot.
    assert list(schedule_of.values()).count("b") == 1
    assert h.history("a")[-1][1] == "skipped-overlap"


def test_capacity_is_shared_round_robin(
    tmp_path: Path, make_store: Callable[[Path], Store]
) -> None:
    h = Harness(make_store(tmp_path / "s"), max_concurrent_runs=1)
    for name in ("a", "b", "c"):
        h.define(name, '[policy]\nmisfire = "latest"\n')
    started: list[str] = []
    for minute in range(3):
        h.tick_at(T0 + minute * MINUTE)
        spec = h.control.spawned[-1][0]
        started.append(spec.env["WFSCHED_SCHEDULE_ID"])
        h.control.finish(spec.run_id)
        h.tick_at(T0 + minute * MINUTE + 1)
    assert sorted(started) == ["a", "b", "c"]


def test_preflight_rejection_records_reason_and_invents_no_run(h: Harness) -> None:
    text = 'id = "x"\n[trigger]\ncron = "* * * * *"\n[run]\ncommand = ["no-such-program-xyz"]\n'
    h.admin.create(parse_definition(text, "x.toml", now=int(h.clock())))
    h.tick_at(T0)
    assert h.history("x") == [
        (iso(T0), "preflight-rejected", "executable 'no-such-program-xyz' not found on PATH")
    ]
    assert h.run_ids() == []
    assert h.control.spawned == []


def test_missing_cwd_is_preflight_rejected(h: Harness, tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    text = f'id = "x"\n[trigger]\ncron = "* * * * *"\n[run]\ncommand = ["true"]\ncwd = "{gone}"\n'
    h.admin.create(parse_definition(text, "x.toml", now=int(h.clock())))
    h.tick_at(T0)
    assert h.history("x")[0][1] == "preflight-rejected"
    assert "does not exist" in (h.history("x")[0][2] or "")


def test_a_trigger_goes_through_the_same_freeze_and_is_refused_by_preflight(h: Harness) -> None:
    """Scheduled and manual runs are made by one function (resolve, preflight,
    insert): a trigger of a missing program is refused with the very reason
    an instant gets, and no run is written."""
    text = 'id = "x"\n[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["no-such-program-xyz"]\n'
    h.admin.create(parse_definition(text, "x.toml", now=int(h.clock())))
    h.clock.set(T0)
    request = h.runs.request_trigger("x")
    h.supervisor.tick()
    answered = h.store.get_request(request)
    assert answered is not None and answered.state == "refused"
    assert answered.result == "executable 'no-such-program-xyz' not found on PATH"
    assert h.run_ids() == [] and h.control.spawned == []


def test_queue_holds_one_candidate_and_admits_when_the_run_ends(h: Harness) -> None:
    h.define("q", '[policy]\noverlap = "queue"\n')
    h.tick_at(T0)
    h.tick_at(T0 + MINUTE)
    h.tick_at(T0 + 2 * MINUTE)
    items, _ = h.admin.occurrences("q", limit=10)
    assert items[0]["state"] == "pending" and items[0]["scheduled_at"] == iso(T0 + 2 * MINUTE)
    assert (iso(T0 + MINUTE), "superseded") in [(s, st) for s, st, _ in h.history("q")]
    h.control.finish("run-000001")
    h.tick_at(T0 + 2 * MINUTE + 5)
    assert [spec.run_id for spec, _ in h.control.spawned] == ["run-000001", "run-000002"]
    assert h.runs.show("run-000002")["scheduled_at"] == iso(T0 + 2 * MINUTE)


def test_manual_trigger_bypasses_capacity_and_overlap_and_works_while_paused(
    tmp_path: Path, make_store: Callable[[Path], Store]
) -> None:
    h = Harness(make_store(tmp_path / "s"), max_concurrent_runs=1)
    h.define("a")
    h.tick_at(T0)
    h.admin.pause("a")
    h.clock.set(T0 + 10)
    h.runs.request_trigger("a")
    h.supervisor.tick()
    manual = h.runs.show("run-000002")
    assert manual["kind"] == "manual" and manual["occurrence_id"] is None
    spec, _ = h.control.spec("run-000002")
    assert spec.env["WFSCHED_OCCURRENCE_ID"] == ""
    assert spec.env["WFSCHED_SCHEDULED_AT"] == iso(T0 + 10)
    # A manual run never counts toward the schedule's overlap.
    h.control.finish("run-000001")
    h.admin.resume("a")
    h.tick_at(T0 + MINUTE)
    assert h.history("a")[-1][1] == "running"


def test_cancel_of_a_running_run_asks_the_shim_and_records_cancelled(h: Harness) -> None:
    h.define("a")
    h.tick_at(T0)
    request = h.runs.request_cancel("run-000001")
    assert isinstance(request, int)
    h.supervisor.tick()
    _, handle = h.control.spec("run-000001")
    assert h.control.cancelled == [handle.pid]
    h.control.finish("run-000001", exit_code=None, outcome="cancelled", reason="cancelled")
    h.supervisor.tick()
    run = h.runs.show("run-000001")
    assert (run["state"], run["reason"]) == ("failed", "cancelled")
    assert isinstance(h.runs.request_cancel("run-000001"), str)


def test_a_cancel_is_answered_with_the_end_of_the_attempt_it_cancelled(h: Harness) -> None:
    """The request stays pending (with a note of what was done) until the
    process has ended: a run is never recorded cancelled while it runs on.
    A run that ends by itself first keeps its own outcome, and says so."""
    h.define("a")
    h.define("b")
    h.tick_at(T0)
    first = h.runs.request_cancel("run-000001")
    second = h.runs.request_cancel("run-000002")
    assert isinstance(first, int) and isinstance(second, int)
    h.supervisor.tick()
    h.supervisor.tick()  # seen again: carried out once
    handles = [h.control.spec(run)[1].pid for run in ("run-000001", "run-000002")]
    assert h.control.cancelled == handles
    for seq, run in ((first, "run-000001"), (second, "run-000002")):
        pending = h.store.get_request(seq)
        assert pending is not None and pending.state == "pending"
        assert (pending.result or "").startswith(f"{run} cancelling on host ")
        assert h.runs.show(run)["state"] == "running"
    h.control.finish("run-000001", exit_code=None, outcome="cancelled", reason="cancelled")
    h.control.finish("run-000002", exit_code=0)
    h.supervisor.tick()
    answers = [h.store.get_request(seq) for seq in (first, second)]
    assert [(a.state, a.result) for a in answers if a] == [
        ("done", "run-000001 cancelled"),
        ("done", "run-000002 ended before the cancel took effect (completed)"),
    ]
    assert [h.runs.show(run)["state"] for run in ("run-000001", "run-000002")] == [
        "failed",
        "completed",
    ]


@pytest.mark.parametrize("meanwhile", ["answered", "cancelled"])
def test_a_resume_that_another_got_to_first_marks_and_starts_nothing(
    h: Harness, meanwhile: str
) -> None:
    """Between the resume's checks and its mark, the request was answered
    (the leader refused it: the host looked lost) or the run was cancelled:
    the mark is a compare-and-set on both, so nothing is marked or started
    and the request keeps the one answer it got."""
    h.define_interruptible("a")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 + 1)
    seq = h.runs.request_resume("run-000001")

    def other_host(point: str) -> None:
        if point != "before-resume-mark":
            return
        with h.store.atomic():
            if meanwhile == "answered":
                h.store.finish_request(seq, "refused", "host a is lost", T0 + 2)
            else:
                h.store.update_run(1, state="failed", reason="cancelled", finished_at=T0 + 2)

    h.supervisor.fault = other_host
    h.tick_at(T0 + 2)
    h.tick_at(T0 + 3)
    assert len(h.control.spawned) == 1
    run = h.runs.show("run-000001")
    assert [a["attempt"] for a in run["attempts"]] == [1]
    request = h.store.get_request(seq)
    assert request is not None
    if meanwhile == "answered":
        assert run["state"] == "interrupted"
        assert (request.state, request.result) == ("refused", "host a is lost")
    else:
        assert run["state"] == "failed"
        assert (request.state, request.result) == ("refused", "run is failed, not interrupted")


def test_resume_marks_the_next_attempt_and_passes_the_resume_input(h: Harness) -> None:
    h.define_interruptible("a")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 + 1)
    h.runs.request_resume("run-000001", {"approved": True})
    h.tick_at(T0 + 2)
    spec, _ = h.control.spec("run-000001", attempt=2)
    assert spec.env["WFSCHED_ATTEMPT"] == "2"
    assert json.loads(Path(spec.env["WFSCHED_RESUME_INPUT"]).read_text()) == {"approved": True}
    assert spec.stdin_path == spec.env["WFSCHED_RESUME_INPUT"]
    first, _ = h.control.spec("run-000001", attempt=1)
    assert spec.env["WFSCHED_STATE_DIR"] == first.env["WFSCHED_STATE_DIR"]
    assert spec.env["WFSCHED_INPUT"] == first.env["WFSCHED_INPUT"]
    h.control.finish("run-000001", exit_code=0, attempt=2)
    h.tick_at(T0 + 3)
    run = h.runs.show("run-000001")
    assert run["state"] == "completed"
    assert [a["state"] for a in run["attempts"]] == ["interrupted", "completed"]


def test_resume_is_refused_while_saturated_and_leaves_nothing_behind(
    tmp_path: Path, make_store: Callable[[Path], Store]
) -> None:
    h = Harness(make_store(tmp_path / "s"), max_concurrent_runs=1)
    h.define_interruptible("a")
    h.define("b", cron="1 * * * *")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 + MINUTE)
    assert h.runs.show("run-000002")["state"] == "running"
    seq = h.runs.request_resume("run-000001")
    h.supervisor.tick()
    answer = h.store.get_request(seq)
    assert answer is not None and answer.state == "refused" and "slot" in (answer.result or "")
    run = h.runs.show("run-000001")
    assert run["state"] == "interrupted" and len(run["attempts"]) == 1


def test_stale_exit_record_under_a_newer_attempt_fails_closed(h: Harness) -> None:
    h.define_interruptible("a")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 + 1)
    h.runs.request_resume("run-000001")
    h.tick_at(T0 + 2)
    h.control.finish("run-000001", exit_code=0, attempt=2, record_attempt=1)
    h.tick_at(T0 + 3)
    run = h.runs.show("run-000001")
    assert run["state"] == "failed" and run["reason"].startswith("ambiguous")


def test_shim_that_dies_without_a_record_is_abandoned_not_retried(h: Harness) -> None:
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    h.control.die("run-000001")
    h.tick_at(T0 + 1)
    run = h.runs.show("run-000001")
    assert (run["state"], run["reason"]) == ("failed", ABANDONED)
    assert len(h.control.spawned) == 1


class TestRecovery:
    def test_readopts_live_shims_and_ingests_records_written_while_down(self, h: Harness) -> None:
        for name in ("live", "done", "lost"):
            h.define(name, cron="0 * * * *")
        h.tick_at(T0)
        by_schedule = {
            spec.env["WFSCHED_SCHEDULE_ID"]: spec.run_id for spec, _ in h.control.spawned
        }
        # The supervisor "crashes": a fresh one starts on the same store.
        h.control.finish(by_schedule["done"], report=False)
        h.control.alive_pids.discard(h.control.spec(by_schedule["lost"])[1].pid)
        h.supervisor = h.new_supervisor()
        h.supervisor.recover()
        assert h.runs.show(by_schedule["done"])["state"] == "completed"
        lost = h.runs.show(by_schedule["lost"])
        assert lost["state"] == "failed" and "external effects" in lost["reason"]
        assert h.runs.show(by_schedule["live"])["state"] == "running"
        assert set(h.supervisor.watches) == {1, 2, 3} - {
            int(by_schedule["done"][4:]),
            int(by_schedule["lost"][4:]),
        }
        # The re-adopted shim's end is noticed by polling (nobody reports it).
        h.control.finish(by_schedule["live"], report=False)
        h.tick_at(T0 + 1)
        assert h.runs.show(by_schedule["live"])["state"] == "completed"
        assert len(h.control.spawned) == 3

    def test_admitted_but_unlaunched_runs_launch_on_the_next_tick(self, h: Harness) -> None:
        h.define("a", cron="0 * * * *")
        h.clock.set(T0)
        # Admission committed, then the crash: no run directory, no attempt.
        admit_then_crash(h)
        assert h.runs.show("run-000001")["state"] == "admitted"
        h.supervisor = h.new_supervisor()
        h.supervisor.recover()
        assert h.control.spawned == []
        h.supervisor.tick()
        assert [spec.run_id for spec, _ in h.control.spawned] == ["run-000001"]
        assert [s for _, s, _ in h.history("a")] == ["running"]

    def test_interruption_waiting_across_restart_stays_resumable(self, h: Harness) -> None:
        h.define_interruptible("a")
        h.tick_at(T0)
        h.control.finish("run-000001", exit_code=75)
        h.tick_at(T0 + 1)
        h.supervisor = h.new_supervisor()
        h.supervisor.recover()
        assert h.runs.show("run-000001")["state"] == "interrupted"

    def test_crash_after_resume_mark_fails_the_attempt_as_ambiguous(self, h: Harness) -> None:
        h.define_interruptible("a")
        h.tick_at(T0)
        h.control.finish("run-000001", exit_code=75)
        h.tick_at(T0 + 1)
        h.runs.request_resume("run-000001")
        h.supervisor.fault = _crash_at("after-resume-mark")
        with pytest.raises(_Crash):
            h.tick_at(T0 + 2)
        h.supervisor = h.new_supervisor()
        h.supervisor.recover()
        run = h.runs.show("run-000001")
        assert run["state"] == "failed" and "external effects" in run["reason"]
        assert [a["state"] for a in run["attempts"]] == ["interrupted", "failed"]
        assert len(h.control.spawned) == 1

    def test_scheduled_run_without_admission_record_blocks_its_schedule(self, h: Harness) -> None:
        h.define("a", cron="0 * * * *")
        with h.store.atomic():
            h.store.insert_run("a", "scheduled", T0, 1, '{"command": ["true"]}', T0)
        h.supervisor.recover()
        schedule = h.admin.get("a")
        assert schedule["state"] == "blocked"
        assert "no admission record" in schedule["blocked_reason"]
        h.tick_at(T0)
        assert h.control.spawned == []

    def test_corrupt_exit_record_fails_the_run_and_blocks_the_schedule(self, h: Harness) -> None:
        h.define("a", cron="0 * * * *")
        h.tick_at(T0)
        spec, _ = h.control.spec("run-000001")
        (Path(spec.record_dir) / "exit.json").write_text("{not json")
        h.supervisor = h.new_supervisor()
        h.supervisor.recover()
        assert h.runs.show("run-000001")["state"] == "failed"
        assert h.admin.get("a")["state"] == "blocked"


def test_startup_tick_under_skip_drops_missed_and_waits_for_the_next(h: Harness) -> None:
    h.define("a")
    h.supervisor = h.new_supervisor()
    h.tick_at(T0 + 10 * MINUTE + 5)
    assert h.control.spawned == []
    assert h.history("a") == [(iso(T0), "skipped-misfire", "supervisor-down")]
    items, _ = h.admin.occurrences("a")
    assert items[0]["count"] == 11 and items[0]["last"] == iso(T0 + 10 * MINUTE)
    h.tick_at(T0 + 11 * MINUTE)
    assert len(h.control.spawned) == 1


def test_startup_tick_under_latest_admits_the_latest_missed_instant(h: Harness) -> None:
    h.define("a", '[policy]\nmisfire = "latest"\n')
    h.supervisor = h.new_supervisor()
    h.tick_at(T0 + 10 * MINUTE + 5)
    assert h.runs.show("run-000001")["scheduled_at"] == iso(T0 + 10 * MINUTE)
    states = [s for _, s, _ in h.history("a")]
    assert states == ["skipped-misfire", "running"]


def test_a_past_one_shot_created_while_supervising_is_judged_by_lateness(h: Harness) -> None:
    """The startup rule covers instants missed while no supervisor ran. A
    one-shot whose `at` (before this supervisor took ownership) is already
    past when it is created was not missed by anyone: within lateness it
    runs, even under `skip`; past lateness it is a plain misfire."""
    h.tick_at(T0 + 5)
    for schedule_id, at in (("recent", T0 - 40), ("stale", T0 - 10 * MINUTE)):
        text = (
            f'id = "{schedule_id}"\n[trigger]\nat = "{iso(at)}"\n'
            '[run]\ncommand = ["true"]\n[policy]\nmisfire = "skip"\n'
        )
        h.admin.create(parse_definition(text, "x.toml", now=int(h.clock())))
    h.tick_at(T0 + 6)
    assert [spec.run_id for spec, _ in h.control.spawned] == ["run-000001"]
    assert h.runs.show("run-000001")["schedule_id"] == "recent"
    assert h.history("stale") == [(iso(T0 - 10 * MINUTE), "skipped-misfire", "late")]


def test_clock_rollback_never_readmits(h: Harness) -> None:
    h.define("a")
    h.tick_at(T0)
    h.control.finish("run-000001")
    h.tick_at(T0 + 1)
    h.tick_at(T0 - 5 * MINUTE)
    h.tick_at(T0)
    h.tick_at(T0 + 2)
    assert len(h.control.spawned) == 1


def test_drain_cancels_runs_left_after_drain_grace(
    tmp_path: Path, make_store: Callable[[Path], Store]
) -> None:
    h = Harness(make_store(tmp_path / "s"), drain_grace=0)
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    _, handle = h.control.spec("run-000001")

    def cancel(target: object, reason: str | None = None) -> bool:
        h.control.cancelled.append(handle.pid)
        h.control.finish("run-000001", exit_code=None, outcome="cancelled", reason="cancelled")
        return True

    h.control.cancel = cancel  # type: ignore[method-assign]
    h.supervisor.drain()
    run = h.runs.show("run-000001")
    assert run["state"] == "failed" and "drain_grace" in run["reason"]
    assert h.supervisor.draining


def test_requests_are_refused_while_draining(h: Harness) -> None:
    h.define("a", cron="0 * * * *")
    h.supervisor.draining = True
    seq = h.runs.request_trigger("a")
    h.supervisor.tick()
    answer = h.store.get_request(seq)
    assert answer is not None and answer.state == "refused"
    assert h.control.spawned == []


def test_exit_record_of_interrupt_code_without_config_is_failure(h: Harness) -> None:
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 + 1)
    run = h.runs.show("run-000001")
    assert (run["state"], run["exit_code"]) == ("failed", 75)


def test_written_exit_record_helper_matches_the_launcher_reader(tmp_path: Path) -> None:
    write_exit_record(tmp_path, 3, "exited", 7, "boom")
    from wfsched.process.launcher import read_exit_record

    record = read_exit_record(str(tmp_path))
    assert record is not None and (record.attempt, record.exit_code) == (3, 7)


class _Crash(BaseException):
    """Stands in for SIGKILL inside one process."""


def _crash_at(point: str):  # type: ignore[no-untyped-def]
    def hook(reached: str) -> None:
        if reached == point:
            raise _Crash(point)

    return hook


def admit_then_crash(h: Harness, crash: type[BaseException] = _Crash) -> None:
    """One tick at the clock's instant that admits its due runs and dies right
    after the admission commit, leaving them admitted and unmarked. With a
    launcher up the first attempt is marked in that same commit, so the
    launcher is down here (nothing marked, nothing started): the way a
    scheduled run stays admitted across a crash."""
    h.supervisor.launcher = LauncherHealth(up=False, since=h.clock(), retry_at=float("inf"))

    def hook(reached: str) -> None:
        if reached == "after-admission-commit":
            raise crash(reached)

    h.supervisor.fault = hook
    with pytest.raises(crash):
        h.supervisor.tick()


def _burst(
    tmp_path: Path, make_store: Callable[[Path], Store], n: int, **config: object
) -> Harness:
    h = Harness(make_store(tmp_path / "s"), **{"max_concurrent_runs": 200, **config})
    for number in range(n):
        h.define(f"s{number:03d}", cron="0 * * * *")
    return h


def _boundaries(h: Harness) -> list[tuple[str, int, int]]:
    """Each admission commit and spawn of a tick: (point, runs in the store, spawned)."""
    seen: list[tuple[str, int, int]] = []

    def hook(point: str) -> None:
        if point in ("after-admission-commit", "after-spawn"):
            runs = len(h.store.list_runs(limit=1000))
            seen.append((point, runs, len(h.control.spawned)))

    h.supervisor.fault = hook
    return seen


def test_a_burst_launches_its_first_chunk_before_deciding_the_rest(
    tmp_path: Path, make_store: Callable[[Path], Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wfsched.daemon import supervisor

    monkeypatch.setattr(supervisor, "BURST_SLICE", 3600.0)
    h = _burst(tmp_path, make_store, 150)
    seen = _boundaries(h)
    h.tick_at(T0)
    first = supervisor.FIRST_CHUNK
    # The first chunk is committed and launched before a fifth schedule is decided.
    assert seen[:2] == [("after-admission-commit", first, 0), ("after-spawn", first, first)]
    sizes = [runs for point, runs, _ in seen if point == "after-spawn"]
    steps = [b - a for a, b in zip([0, *sizes], sizes, strict=False)]
    assert steps == [4, 8, 16, 32, 64, 26]
    assert all(spawned == runs for point, runs, spawned in seen if point == "after-spawn")
    assert len({spec.run_id for spec, _ in h.control.spawned}) == 150
    for spec, _ in h.control.spawned:
        h.control.finish(spec.run_id)
    h.tick_at(T0 + 1)
    assert h.store.run_state_counts() == {}
    assert len(h.store.list_runs(state="completed", limit=1000)) == 150


def test_a_burst_sliced_over_ticks_misses_nothing_and_doubles_nothing(
    tmp_path: Path, make_store: Callable[[Path], Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wfsched.daemon import supervisor

    monkeypatch.setattr(supervisor, "BURST_SLICE", 0.0)  # one chunk per tick
    h = _burst(tmp_path, make_store, 150)
    h.tick_at(T0)
    assert len(h.control.spawned) == supervisor.FIRST_CHUNK
    assert h.supervisor.wake_now
    ticks = 1
    while h.supervisor.wake_now:
        h.supervisor.wake_now = False
        h.tick_at(T0 + ticks * 0.01)
        ticks += 1
    assert ticks == 6  # chunks of 4, 8, 16, 32, 64 and the last 26
    assert sorted(spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in h.control.spawned) == [
        f"s{number:03d}" for number in range(150)
    ]
    for number in range(150):
        assert h.history(f"s{number:03d}") == [(iso(T0), "running", None)]


def test_capacity_holds_across_the_chunks_of_a_burst(
    tmp_path: Path, make_store: Callable[[Path], Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wfsched.daemon import supervisor

    monkeypatch.setattr(supervisor, "BURST_SLICE", 3600.0)
    h = _burst(tmp_path, make_store, 20, max_concurrent_runs=6)
    h.tick_at(T0)
    h.tick_at(T0 + 0.01)
    assert len(h.control.spawned) == 6
    assert h.store.executing_count() == 6


def test_a_pause_committed_between_two_chunks_is_seen_by_the_next(
    tmp_path: Path, make_store: Callable[[Path], Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    from wfsched.daemon import supervisor

    monkeypatch.setattr(supervisor, "BURST_SLICE", 3600.0)
    h = _burst(tmp_path, make_store, 12)

    def pause_later(point: str) -> None:
        if point == "after-admission-commit" and not h.control.spawned:
            h.admin.pause("s010")  # another writer, between the first two chunks

    h.supervisor.fault = pause_later
    h.tick_at(T0)
    launched = {spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in h.control.spawned}
    assert launched == {f"s{number:03d}" for number in range(12)} - {"s010"}
    assert [reason for _, _, reason in h.history("s010")] == ["pause"]  # the pause decided it


def test_a_crash_between_chunks_runs_nothing_twice_and_loses_nothing_silently(
    tmp_path: Path, make_store: Callable[[Path], Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The supervisor dies right after the second chunk's commit, which
    admitted its runs and marked their first attempts: the first chunk runs
    on, the second is failed as abandoned (marked, so it may have started:
    never run again), and the instants no chunk decided fall under the
    startup rule."""
    from wfsched.daemon import supervisor

    monkeypatch.setattr(supervisor, "BURST_SLICE", 3600.0)
    h = _burst(tmp_path, make_store, 30)
    commits = [0]

    def crash_at_second_commit(point: str) -> None:
        if point == "after-admission-commit":
            commits[0] += 1
            if commits[0] == 2:
                raise _Crash(point)

    h.supervisor.fault = crash_at_second_commit
    with pytest.raises(_Crash):
        h.tick_at(T0)
    first = supervisor.FIRST_CHUNK
    assert len(h.control.spawned) == first
    states = [run.state for run in h.store.list_runs(limit=100)]
    assert states == ["running"] * 3 * first
    h.supervisor = h.new_supervisor(max_concurrent_runs=200)
    h.supervisor.recover()
    h.tick_at(T0 + 0.5)
    h.tick_at(T0 + 0.6)
    launched = [f"s{number:03d}" for number in range(first)]
    assert sorted(spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in h.control.spawned) == launched
    for number in range(30):
        history = h.history(f"s{number:03d}")
        if number < first:
            assert [state for _, state, _ in history] == ["running"]
        elif number < 3 * first:
            assert [(state, reason) for _, state, reason in history] == [("failed", ABANDONED)]
        else:
            assert [state for _, state, _ in history] == ["skipped-misfire"]


def test_a_rolled_back_admission_leaves_directories_the_next_one_rewrites(h: Harness) -> None:
    """The run's directories are made inside the admission's transaction
    (its first attempt is marked in it): a crash before the commit leaves
    them behind for a run the store never knew, whose command never started.
    The restart admits the instant again (misfire = "latest"); on SQLite
    the run takes the same seq and its directories are prepared again over
    what was left (here a damaged input), never trusted as they were."""
    h.define("a", '[policy]\nmisfire = "latest"\nlateness = "1h"\n', cron="0 * * * *")
    h.clock.set(T0)
    h.supervisor.fault = _crash_at("before-admission-commit")
    with pytest.raises(_Crash):
        h.supervisor.tick()
    assert h.store.list_runs(limit=10) == []
    left = h.store.runs_dir / "run-000001"
    assert (h.store.root / "records" / "run-000001" / "attempt-1").is_dir()
    left.joinpath("input.json").write_text("{damaged")
    h.supervisor = h.new_supervisor()
    h.supervisor.recover()
    h.tick_at(T0 + 1)
    ((spec, _),) = h.control.spawned
    reused = type(h.store) is SQLiteStore  # a PostgreSQL sequence never goes back
    assert spec.run_id == ("run-000001" if reused else "run-000002")
    assert json.loads(Path(spec.stdin_path).read_text()) == {}
    h.control.finish(spec.run_id)
    h.tick_at(T0 + 2)
    assert [state for _, state, _ in h.history("a")] == ["completed"]


def test_a_crash_after_the_admission_commit_fails_the_marked_run_never_runs_it(
    h: Harness,
) -> None:
    """With a launcher up, the commit that admits a run also marks its first
    attempt: a crash right after it leaves an attempt that may have started,
    as far as the store can tell. Recovery fails it as abandoned (with the
    disclosure) and never launches it."""
    h.define("a", '[policy]\nmisfire = "latest"\nlateness = "1h"\n', cron="0 * * * *")
    h.clock.set(T0)
    h.supervisor.fault = _crash_at("after-admission-commit")
    with pytest.raises(_Crash):
        h.supervisor.tick()
    run = h.runs.show("run-000001")
    assert (run["state"], [a["state"] for a in run["attempts"]]) == ("running", ["running"])
    assert h.control.spawned == []
    h.supervisor = h.new_supervisor()
    h.supervisor.recover()
    h.tick_at(T0 + 1)
    h.tick_at(T0 + 2)
    assert h.control.spawned == []
    assert h.history("a") == [(iso(T0), "failed", ABANDONED)]


def test_a_corrupt_stored_definition_blocks_only_its_schedule(h: Harness) -> None:
    h.define("bad", cron="0 * * * *")
    h.define("good", cron="0 * * * *")
    h.store._conn.execute("UPDATE schedules SET definition = '{oops' WHERE id = 'bad'")
    h.tick_at(T0)
    assert h.store.get_schedule("bad").blocked_reason.startswith("cannot decide: store:")
    assert [spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in h.control.spawned] == ["good"]


class TestAdministrationAroundAdmission:
    def test_an_update_never_changes_an_admitted_runs_frozen_invocation(self, h: Harness) -> None:
        h.define("a", cron="0 * * * *")
        h.tick_at(T0)
        text = 'id = "a"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["echo", "v2"]\n'
        h.admin.update(parse_definition(text, "a.toml", now=int(h.clock())), expected_revision=1)
        first = h.runs.show("run-000001")
        assert first["invocation"]["command"] == ["true"] and first["revision"] == 1
        h.control.finish("run-000001")
        h.tick_at(T0 + 3600)
        second = h.runs.show("run-000002")
        assert second["invocation"]["command"] == ["echo", "v2"] and second["revision"] == 2
        spec, _ = h.control.spec("run-000002")
        assert spec.argv == ("echo", "v2")
        # Only the current revision stays parsed: edits never grow the cache.
        assert len(h.supervisor.definitions) == 1

    def test_a_pause_that_lands_before_the_tick_wins(self, h: Harness) -> None:
        h.define("a", cron="0 * * * *")
        h.clock.set(T0)
        h.admin.pause("a")  # committed at the due instant, before the supervisor looked
        h.supervisor.tick()
        assert h.control.spawned == []
        h.clock.set(T0 + 3 * 3600 + 5)
        h.admin.resume("a")
        h.tick_at(T0 + 3 * 3600 + 6)
        assert h.control.spawned == []
        assert [state for _, state, _ in h.history("a")] == ["skipped-misfire", "skipped-paused"]
        h.tick_at(T0 + 4 * 3600)
        assert len(h.control.spawned) == 1

    def test_delete_while_running_lets_the_run_finish_and_keeps_history(self, h: Harness) -> None:
        h.define("a", cron="0 * * * *")
        h.tick_at(T0)
        h.admin.delete("a")
        h.control.finish("run-000001")
        h.tick_at(T0 + 1)
        h.tick_at(T0 + 3600)
        assert len(h.control.spawned) == 1
        assert h.runs.show("run-000001")["state"] == "completed"
        assert h.history("a") == [(iso(T0), "completed", None)]
        assert h.admin.get("a")["state"] == "deleted"


def test_an_admitted_run_shows_no_invented_output(h: Harness) -> None:
    from wfsched.errors import NotFoundError

    h.define("a", cron="0 * * * *")
    h.clock.set(T0)
    admit_then_crash(h)
    run = h.runs.show("run-000001")
    assert run["state"] == "admitted"
    assert (run["exit_code"], run["started_at"], run["finished_at"]) == (None, None, None)
    assert run["attempts"] == []
    with pytest.raises(NotFoundError, match="has not started yet"):
        h.runs.log_file("run-000001")


def test_cancel_of_an_interrupted_run_fails_it_and_frees_its_overlap_slot(h: Harness) -> None:
    h.define_interruptible("a")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 + 1)
    h.runs.request_cancel("run-000001")
    h.supervisor.tick()
    run = h.runs.show("run-000001")
    assert (run["state"], run["reason"]) == ("failed", "cancelled")
    assert run["attempts"][-1]["state"] == "failed"
    assert h.control.cancelled == []  # nothing was executing
    h.tick_at(T0 + 3600)
    assert h.runs.show("run-000002")["state"] == "running"


def test_cancel_of_an_admitted_run_never_launches_it(h: Harness) -> None:
    h.define("a", cron="0 * * * *")
    h.clock.set(T0)
    admit_then_crash(h)
    h.supervisor = h.new_supervisor()
    h.supervisor.recover()
    h.runs.request_cancel("run-000001")
    h.supervisor.tick()
    assert h.runs.show("run-000001")["state"] == "failed"
    assert h.control.spawned == []


class TestQuietTicks:
    """An idle tick that nothing can have changed only stamps liveness; any
    commit by another connection, a due instant, or a wake-up ends that."""

    @staticmethod
    def idle(h: Harness, at: float) -> None:
        h.clock.set(at)
        h.supervisor.tick()
        h.supervisor._sleep_seconds()  # the loop asks this after every tick

    @staticmethod
    def reads(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[str]:
        seen: list[str] = []
        for name in ("pending_requests", "due_schedules", "earliest_due_schedule"):
            real = getattr(h.store, name)

            def counted(*args: object, _real=real, _name=name, **kwargs: object) -> object:  # type: ignore[no-untyped-def]
                seen.append(_name)
                return _real(*args, **kwargs)

            monkeypatch.setattr(h.store, name, counted)
        return seen

    @pytest.fixture
    def q(self, tmp_path: Path) -> Harness:
        h = Harness(tmp_path / "store")  # SQLite: its change counter makes ticks quiet
        h.define("a", cron="0 * * * *")
        self.idle(h, T0 - 20)
        return h

    def test_an_idle_tick_reads_nothing_but_stamps_liveness(
        self, q: Harness, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        seen = self.reads(q, monkeypatch)
        self.idle(q, T0 - 10)
        assert seen == []
        assert q.store.get_meta("last_tick_at") == repr(T0 - 10)
        assert q.supervisor._sleep_seconds() == (1.0, False)

    def test_the_due_instant_ends_the_quiet(self, q: Harness) -> None:
        self.idle(q, T0 - 10)
        self.idle(q, T0)
        assert [spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in q.control.spawned] == ["a"]

    def test_a_commit_by_another_connection_ends_the_quiet(
        self, q: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        other = SQLiteStore(tmp_path / "store")
        text = 'id = "b"\n[trigger]\nat = "2026-12-01T08:59:50Z"\n[run]\ncommand = ["true"]\n'
        Admin(other, q.clock).create(parse_definition(text, "b.toml", now=int(q.clock())))
        seq = Runs(other, q.clock).request_trigger("a")
        other.close()
        seen = self.reads(q, monkeypatch)
        self.idle(q, T0 - 10)
        assert "pending_requests" in seen and "due_schedules" in seen
        assert q.store.get_request(seq).state == "done"  # type: ignore[union-attr]
        assert sorted(spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in q.control.spawned) == [
            "a",
            "b",
        ]

    def test_a_wake_up_or_a_watched_run_ends_the_quiet(
        self, q: Harness, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        seen = self.reads(q, monkeypatch)
        q.supervisor.wake_now = True  # an exit or a signal woke the loop
        self.idle(q, T0 - 10)
        assert "pending_requests" in seen


class TestIdleSleep:
    """An idle loop stamps liveness every STAMP_INTERVAL seconds and, with
    the store's commit watch, sleeps until then (or the due instant) rather
    than every poll interval; another connection's commit makes the watch
    readable, which wakes the loop to a full tick at once."""

    @pytest.fixture
    def q(self, tmp_path: Path) -> Iterator[Harness]:
        h = Harness(tmp_path / "store")
        h.define("a", cron="0 * * * *")
        self.watch = h.supervisor.watch_commits()
        assert self.watch is not None
        TestQuietTicks.idle(h, T0 - 40)  # a full tick, stamped
        yield h
        self.watch.close()

    def readable(self) -> bool:
        assert self.watch is not None
        return bool(select.select([self.watch.fileno()], [], [], 0)[0])

    def another_connection_triggers(self, q: Harness, root: Path) -> int:
        other = SQLiteStore(root)
        seq = Runs(other, q.clock).request_trigger("a")
        other.close()
        return seq

    def test_quiet_ticks_stamp_once_per_stamp_interval(self, q: Harness) -> None:
        stamps = []
        for second in range(1, 11):
            q.clock.set(T0 - 40 + second)
            q.supervisor.tick()
            stamps.append(float(q.store.get_meta("last_tick_at") or 0) - (T0 - 40))
        assert stamps == [0, 0, 0, 0, 5, 5, 5, 5, 5, 10]
        q.supervisor.announce()
        assert q.store.get_meta("stamp_interval") == repr(STAMP_INTERVAL)

    def test_an_idle_loop_sleeps_until_its_next_stamp_or_the_due_instant(self, q: Harness) -> None:
        assert q.supervisor._sleep_seconds() == (STAMP_INTERVAL, False)
        TestQuietTicks.idle(q, T0 - 37)  # woken early (a spare event): no stamp
        assert q.supervisor._sleep_seconds() == (2.0, False)
        TestQuietTicks.idle(q, T0 - 5)
        assert q.supervisor._sleep_seconds() == (5.0, True)  # the pre-wake stays
        TestQuietTicks.idle(q, T0 - 3)
        assert q.supervisor._sleep_seconds() == (3.0, True)

    def test_its_own_writes_leave_the_watch_quiet(self, q: Harness) -> None:
        TestQuietTicks.idle(q, T0 - 30)  # a quiet tick that stamps
        assert not self.readable()
        q.clock.set(T0 - 0.02)
        q.supervisor._sleep_seconds()  # sleeping to T0, where "a" is due
        q.supervisor._sleep = q.clock.advance
        q.supervisor._prewake()  # the instant's tick, its admission held to T0
        assert q.run_ids() == ["run-000001"]
        assert not self.readable()

    def test_a_request_wakes_the_sleep_and_is_answered_by_the_next_tick(
        self, q: Harness, tmp_path: Path
    ) -> None:
        seq = self.another_connection_triggers(q, tmp_path / "store")
        assert self.readable()
        waiter = Waiter()
        try:
            waiter.watch(self.watch.fileno())  # type: ignore[union-attr]
            q.supervisor._wait_until_due(waiter, 30.0, False)  # returns at once
        finally:
            waiter.close()
        assert q.supervisor.wake_now
        TestQuietTicks.idle(q, T0 - 39)
        assert q.store.get_request(seq).state == "done"  # type: ignore[union-attr]
        assert [spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in q.control.spawned] == ["a"]

    def test_a_commit_during_the_tick_is_not_slept_through(
        self, q: Harness, tmp_path: Path
    ) -> None:
        q.clock.set(T0 - 30)
        q.supervisor.tick()
        seq = self.another_connection_triggers(q, tmp_path / "store")
        # Its event is drained with the tick's own; the counter still tells.
        assert q.supervisor._sleep_seconds() == (1.0, False)
        q.clock.set(T0 - 29)
        q.supervisor.tick()
        assert q.store.get_request(seq).state == "done"  # type: ignore[union-attr]

    def test_the_sleep_ends_when_systemd_is_owed_a_watchdog_message(self, q: Harness) -> None:
        q.supervisor._watchdog_due = time.monotonic() + 2.5
        timeout, due = q.supervisor._sleep_seconds()
        assert 1.0 < timeout <= 2.5 and not due

    def test_without_a_commit_watch_the_loop_wakes_every_poll_interval(
        self, tmp_path: Path
    ) -> None:
        h = Harness(tmp_path / "store")
        h.define("a", cron="0 * * * *")
        TestQuietTicks.idle(h, T0 - 40)
        assert h.supervisor._sleep_seconds() == (1.0, False)
        h.supervisor.observer.paces_ticks = True  # /healthz counts ticks
        assert h.supervisor.watch_commits() is None


def test_a_store_without_a_change_counter_stamps_every_tick(tmp_path: Path) -> None:
    h = Harness(tmp_path / "store")
    h.supervisor.store.changes = lambda: None  # type: ignore[method-assign]
    h.supervisor.announce()
    assert h.store.get_meta("stamp_interval") == "1.0"


def test_the_schedules_of_the_next_instant_are_parsed_while_waiting_for_it(h: Harness) -> None:
    for name in ("a", "b", "c"):
        h.define(name, cron="0 * * * *")
    h.define("later", cron="30 * * * *")
    h.tick_at(T0 - 90)
    h.supervisor._sleep_seconds()
    assert len(h.supervisor.definitions) <= 1  # more than a minute ahead: only the first
    h.tick_at(T0 - 20)
    h.supervisor._sleep_seconds()
    assert {row_id for row_id in h.supervisor._calendars} >= {"a", "b", "c"}
    assert "later" not in h.supervisor._calendars


class TestHeldAdmission:
    """The pre-wake runs the instant's tick: its first admission chunk is
    decided and its run directories written before the instant, and the
    transaction sleeps to the instant before the mark and the commit."""

    @staticmethod
    def prewake_at(h: Harness, at: float, sleep: Callable[[float], None]) -> None:
        h.clock.set(at)
        timeout, due = h.supervisor._sleep_seconds()
        assert due and timeout == pytest.approx(T0 - at)
        h.supervisor._sleep = sleep
        h.supervisor._prewake()

    def test_the_chunk_is_prepared_before_the_instant_and_committed_at_it(
        self, tmp_path: Path
    ) -> None:
        h = Harness(tmp_path / "store")
        h.define("a", cron="0 * * * *")
        h.tick_at(T0 - 5)
        seen: list[tuple[float, bool, list[str], int]] = []

        def sleep(seconds: float) -> None:
            other = SQLiteStore(tmp_path / "store")
            try:
                committed = [run.run_id for run in other.list_runs(limit=10)]
            finally:
                other.close()
            run_dir = tmp_path / "store" / "runs" / "run-000001"
            seen.append(
                (seconds, (run_dir / "input.json").exists(), committed, len(h.control.spawned))
            )
            h.clock.advance(seconds)

        self.prewake_at(h, T0 - 0.02, sleep)
        # While it slept: the directory written, nothing committed or spawned;
        # then, committed and spawned, it let the job start (AFTER_HELD_LAUNCH).
        assert seen == [
            (pytest.approx(0.02), True, [], 0),
            (AFTER_HELD_LAUNCH, True, ["run-000001"], 1),
        ]
        assert [spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in h.control.spawned] == ["a"]
        run = h.runs.show("run-000001")
        assert run["state"] == "running"
        attempt = h.store.get_attempt(1, 1)
        assert attempt is not None and attempt.started_at >= T0  # marked at the instant
        assert [state for _, state, _ in h.history("a")] == ["running"]

    def test_only_the_mark_the_commit_and_the_send_are_left_after_the_instant(
        self, tmp_path: Path
    ) -> None:
        """Before the hold's sleep the launch spec is built and handed to
        the launcher to encode, the attempt not yet marked; the mark takes
        the clock's time after the sleep. The admission's log line waits for
        the spawn's answer, and still comes before `started`."""
        h = Harness(tmp_path / "store")
        h.define("a", cron="0 * * * *")
        h.tick_at(T0 - 5)
        h.events.clear()
        seen: list[tuple[object, list[str], list[list[str]]]] = []

        def sleep(seconds: float) -> None:
            seen.append(
                (
                    h.store.get_attempt(1, 1),  # the supervisor's own, open transaction
                    [event for event, _ in h.events],
                    [[spec.run_id for spec in specs] for specs in h.control.encoded],
                )
            )
            h.clock.advance(seconds)

        self.prewake_at(h, T0 - 0.02, sleep)
        assert seen[0] == (None, [], [["run-000001"]])
        ((spec, _),) = h.control.spawned
        assert spec is h.control.encoded[0][0]  # the very spec encoded ahead
        attempt = h.store.get_attempt(1, 1)
        assert attempt is not None and attempt.started_at == T0
        events = [event for event, _ in h.events]
        assert events.index("admitted") < events.index("started")

    def test_a_hold_that_wakes_late_marks_the_time_it_woke(self, tmp_path: Path) -> None:
        """A stall inside the instant's second still commits the held chunk,
        and its lateness is in `started_at` (what the launch-latency metric
        reads), never hidden behind the instant."""
        h = Harness(tmp_path / "store")
        h.define("a", cron="0 * * * *")
        h.tick_at(T0 - 5)
        self.prewake_at(h, T0 - 0.02, lambda seconds: h.clock.advance(seconds + 0.4))
        assert len(h.control.spawned) == 1
        attempt, run = h.store.get_attempt(1, 1), h.store.get_run(1)
        assert attempt is not None and attempt.started_at == pytest.approx(T0 + 0.4, abs=0.01)
        assert run is not None and run.started_at == pytest.approx(T0 + 0.4, abs=0.01)

    def test_a_held_chunks_lines_are_written_when_its_spawn_fails(self, tmp_path: Path) -> None:
        h = Harness(tmp_path / "store")
        h.define("a", cron="0 * * * *")
        h.tick_at(T0 - 5)
        h.events.clear()

        def spawn(spec: LaunchSpec) -> ShimHandle:
            raise OSError(errno.EMFILE, "Too many open files")

        h.control.spawn = spawn  # type: ignore[method-assign]
        self.prewake_at(h, T0 - 0.02, h.clock.advance)
        events = [event for event, _ in h.events]
        assert "admitted" in events and "started" not in events
        assert events.index("admitted") < min(events.index("fault"), events.index("failed"))

    def test_a_sleep_past_the_instants_second_rolls_back_and_the_next_tick_decides(
        self, tmp_path: Path
    ) -> None:
        h = Harness(tmp_path / "store")
        h.define("a", cron="0 * * * *")
        h.tick_at(T0 - 5)
        self.prewake_at(h, T0 - 0.02, lambda seconds: h.clock.advance(seconds + 1.5))
        assert h.control.spawned == []
        assert h.run_ids() == []  # rolled back
        assert not [event for event, _ in h.events if event == "tick-error"]
        h.supervisor.tick()  # the instant's own tick, 1.5 s late
        assert [spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in h.control.spawned] == ["a"]
        assert h.run_ids() == ["run-000001"]
        assert [state for _, state, _ in h.history("a")] == ["running"]

    def test_a_clock_that_went_back_is_not_waited_for(self, tmp_path: Path) -> None:
        h = Harness(tmp_path / "store")
        h.define("a", cron="0 * * * *")
        h.tick_at(T0 - 5)
        slept: list[float] = []

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            h.clock.advance(-30)  # stepped back while it slept

        self.prewake_at(h, T0 - 0.02, sleep)
        assert len(slept) == 1 and h.run_ids() == [] and h.control.spawned == []
        h.tick_at(T0)
        assert h.run_ids() == ["run-000001"]

    def test_a_burst_continues_after_the_held_chunk(self, tmp_path: Path) -> None:
        h = Harness(tmp_path / "store", max_concurrent_runs=20)
        for index in range(10):
            h.define(f"s{index}", cron="0 * * * *")
        h.tick_at(T0 - 5)
        spawned_while_asleep: list[int] = []

        def sleep(seconds: float) -> None:
            spawned_while_asleep.append(len(h.control.spawned))
            h.clock.advance(seconds)

        self.prewake_at(h, T0 - 0.02, sleep)
        # One hold, the first chunk's; no sleep after it: the burst goes on.
        assert spawned_while_asleep == [0]
        assert len(h.control.spawned) == 10
        assert len(h.run_ids()) == 10


def test_the_supervisor_checkpoints_only_when_its_sleep_leaves_time(tmp_path: Path) -> None:
    """Its commits never fold the log into the database (one inside the
    admission's commit delayed that launch); it does so while it waits for
    an instant far enough away, or regardless once the log is ten times
    as long (never idle)."""
    h = Harness(tmp_path / "store", max_concurrent_runs=CHECKPOINT_CHANGES)
    assert h.store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    for number in range(CHECKPOINT_CHANGES // 4):
        h.define(f"s{number:03d}")
    h.tick_at(T0)
    for _ in range(CHECKPOINT_CHANGES // 4):  # a burst is admitted over ticks
        if len(h.run_ids()) == CHECKPOINT_CHANGES // 4:
            break
        h.supervisor.tick()

    def runs_in_the_database_file() -> int:
        rows = in_the_database_file(tmp_path / "store", "SELECT count(*) FROM runs")
        return int(rows[0][0]) if rows else 0

    assert len(h.run_ids()) == CHECKPOINT_CHANGES // 4
    h.supervisor._checkpoint(CHECKPOINT_QUIET / 2)  # an instant is near
    assert runs_in_the_database_file() == 0
    h.supervisor._checkpoint(CHECKPOINT_QUIET)
    assert runs_in_the_database_file() == CHECKPOINT_CHANGES // 4
