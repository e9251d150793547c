"""Layer 1: supervisor semantics that span several parts of the loop
(capacity under a block, queue with misfire = skip, manual-run inputs,
resumed attempts), with the injected clock and the fake launcher.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import CliRun

from tests.test_supervisor_loop import MINUTE, T0, Harness, admit_then_crash, iso
from wfsched.api.status import status
from wfsched.domain.definition import parse_definition


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path / "store")


class Crash(BaseException):
    """Stands for the supervisor dying at a fault point (like SIGKILL, it is
    not an error a tick phase contains)."""


def admitted_then_blocked(h: Harness) -> None:
    """Schedule `a` gets its T0 run admitted, the supervisor dies before the
    launch, and the restarted supervisor's recovery blocks `a`."""
    h.clock.set(T0)
    admit_then_crash(h, Crash)
    assert h.runs.show("run-000001")["state"] == "admitted"
    h.supervisor = h.new_supervisor(max_concurrent_runs=1)
    h.supervisor.recover()
    h.supervisor.block("a", "run-000000: unreadable exit record: garbage")
    h.tick_at(T0 + 1)


def test_an_admitted_run_of_a_blocked_schedule_holds_no_execution_slot(
    tmp_path: Path, run_cli: CliRun
) -> None:
    h = Harness(tmp_path / "s", max_concurrent_runs=1)
    h.define("a", cron="0 * * * *")
    h.define("b", cron="1 * * * *")
    admitted_then_blocked(h)
    assert h.control.spawned == []
    info = status(h.store, h.clock)
    assert (info["executing"], info["executing_manual"], info["waiting_for_unblock"]) == (0, 0, 1)
    code, out, _ = run_cli("--store", str(tmp_path / "s"), "status", "--json")
    assert code == 0 and json.loads(out)["executing"] == 0
    code, out, _ = run_cli("--store", str(tmp_path / "s"), "status")
    assert re.search(r"executing\s+0 of", out)
    assert re.search(r"waiting\s+1 admitted, no slot until `wfsched resume`", out)
    # b's instant finds the one slot free: the blocked run does not hold it.
    h.tick_at(T0 + MINUTE)
    assert [spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in h.control.spawned] == ["b"]
    assert h.history("b") == [(iso(T0 + MINUTE), "running", None)]
    assert status(h.store, h.clock)["executing"] == 1


def test_the_waiting_run_launches_through_capacity_once_resume_clears_the_block(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path / "s", max_concurrent_runs=1)
    h.define("a", cron="0 * * * *")
    h.define("b", cron="1 * * * *")
    admitted_then_blocked(h)
    h.tick_at(T0 + MINUTE)
    b_run = h.control.spawned[0][0].run_id
    h.admin.resume("a")
    h.tick_at(T0 + MINUTE + 1)
    # The slot is b's: a's run waits for it, counted as executing again.
    assert len(h.control.spawned) == 1
    assert status(h.store, h.clock)["executing"] == 2
    h.control.finish(b_run)
    h.tick_at(T0 + MINUTE + 2)
    h.tick_at(T0 + MINUTE + 3)
    assert h.control.spawned[-1][0].run_id == "run-000001"
    assert h.runs.show("run-000001")["state"] == "running"


def test_a_manual_run_of_a_blocked_schedule_runs_as_it_does_while_paused(tmp_path: Path) -> None:
    """`trigger` is the operator's own request: like pause, overlap and
    capacity, a block does not hold it (its schedule's instants stay held)."""
    h = Harness(tmp_path / "s", max_concurrent_runs=1)
    h.define("a", cron="0 * * * *")
    admitted_then_blocked(h)
    h.runs.request_trigger("a")
    h.tick_at(T0 + 2)
    assert [spec.run_id for spec, _ in h.control.spawned] == ["run-000002"]
    info = status(h.store, h.clock)
    assert (info["executing"], info["waiting_for_unblock"]) == (0, 1)
    assert h.runs.show("run-000001")["state"] == "admitted"
    assert h.admin.get("a")["state"] == "blocked"


def test_an_admitted_run_with_attempt_rows_is_never_launched_after_resume(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path / "s", max_concurrent_runs=1)
    h.define("a", cron="0 * * * *")
    h.clock.set(T0)
    admit_then_crash(h, Crash)
    with h.store.atomic():  # contradicting records: admitted, yet attempt 1 exists
        h.store.insert_attempt(1, 1, T0)
        h.store.update_run(1, attempt=1)
    h.supervisor = h.new_supervisor(max_concurrent_runs=1)
    h.supervisor.recover()
    h.tick_at(T0 + 1)
    assert h.admin.get("a")["blocked_reason"] == "run-000001 is admitted but has attempts"
    h.admin.resume("a")
    h.tick_at(T0 + 2)
    assert h.control.spawned == []
    assert h.admin.get("a")["blocked_reason"] == "run-000001 is admitted but has attempts"
    h.runs.request_cancel("run-000001")
    h.tick_at(T0 + 3)
    assert h.runs.show("run-000001")["state"] == "failed"


def test_queue_skip_a_late_newer_instant_leaves_no_stale_queued_one(tmp_path: Path) -> None:
    """The issue's timeline: `* * * * *`, a run longer than two minutes,
    queue + skip, lateness 0, and the supervisor stopped (SIGSTOP) across the
    third instant, here a gap between two ticks."""
    h = Harness(tmp_path / "s")
    h.define("q", '[policy]\noverlap = "queue"\nmisfire = "skip"\nlateness = 0\n')
    h.tick_at(T0)
    h.tick_at(T0 + MINUTE)
    h.tick_at(T0 + 2 * MINUTE)
    assert h.history("q")[0] == (iso(T0 + 2 * MINUTE), "pending", "queued behind a run")
    # The run ends at +2:05 while the supervisor is stopped; it ticks again at +3:05.
    h.clock.set(T0 + 2 * MINUTE + 5)
    h.control.finish("run-000001")
    h.tick_at(T0 + 3 * MINUTE + 5)
    assert [spec.run_id for spec, _ in h.control.spawned] == ["run-000001"]
    superseded = f"superseded by a newer instant ({iso(T0 + 3 * MINUTE)})"
    assert h.history("q") == [
        (iso(T0), "completed", None),
        (iso(T0 + MINUTE), "superseded", f"superseded by a newer instant ({iso(T0 + 2 * MINUTE)})"),
        (iso(T0 + 2 * MINUTE), "superseded", superseded),
        (iso(T0 + 3 * MINUTE), "skipped-misfire", "late"),
    ]
    # The next timely instant runs on time.
    h.tick_at(T0 + 4 * MINUTE)
    assert h.control.spawned[-1][0].run_id == "run-000002"
    assert h.runs.show("run-000002")["scheduled_at"] == iso(T0 + 4 * MINUTE)


def test_a_manual_run_binds_occurrence_id_to_json_null(h: Harness) -> None:
    text = (
        'id = "m"\n[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["true"]\n'
        '[[input]]\ntarget = "occurrence"\noccurrence = "occurrence_id"\n'
        '[[input]]\ntarget = "schedule"\noccurrence = "schedule_id"\n'
    )
    h.admin.create(parse_definition(text, "m.toml", now=int(h.clock())))
    h.runs.request_trigger("m")
    h.supervisor.tick()
    spec, _ = h.control.spec("run-000001")
    assert spec.env["WFSCHED_OCCURRENCE_ID"] == ""
    assert json.loads(Path(spec.stdin_path).read_text()) == {"occurrence": None, "schedule": "m"}
    assert h.runs.show("run-000001")["invocation"]["input"] == {
        "occurrence": None,
        "schedule": "m",
    }


def interrupted(h: Harness) -> None:
    h.define_interruptible("a")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=75)
    h.tick_at(T0 + 1)
    assert h.runs.show("run-000001")["state"] == "interrupted"


def test_resume_input_that_is_json_null_is_passed_through(h: Harness) -> None:
    interrupted(h)
    h.runs.request_resume("run-000001", None)
    h.tick_at(T0 + 2)
    spec, _ = h.control.spec("run-000001", attempt=2)
    assert "WFSCHED_RESUME_INPUT" in spec.env
    assert spec.stdin_path == spec.env["WFSCHED_RESUME_INPUT"]
    assert Path(spec.stdin_path).read_text() == "null"


def test_cli_resume_input_file_holding_null_reaches_the_attempt(
    h: Harness, run_cli: CliRun, tmp_path: Path
) -> None:
    interrupted(h)
    document = tmp_path / "null.json"
    document.write_text("null\n")
    code, out, _ = run_cli(
        "--store", str(h.store.root), "runs", "resume", "run-000001", "--input", str(document)
    )
    assert code == 0 and "recorded" in out
    h.tick_at(T0 + 2)
    spec, _ = h.control.spec("run-000001", attempt=2)
    assert spec.stdin_path == spec.env["WFSCHED_RESUME_INPUT"]
    assert json.loads(Path(spec.stdin_path).read_text()) is None


def test_resume_without_input_keeps_the_original_input_on_stdin(h: Harness) -> None:
    interrupted(h)
    h.runs.request_resume("run-000001")
    h.tick_at(T0 + 2)
    spec, _ = h.control.spec("run-000001", attempt=2)
    assert "WFSCHED_RESUME_INPUT" not in spec.env
    assert spec.stdin_path == spec.env["WFSCHED_INPUT"]


def test_a_resumed_run_does_not_show_the_interruption_as_its_own_while_running(
    h: Harness,
) -> None:
    interrupted(h)
    before = h.runs.show("run-000001")
    assert (before["reason"], before["exit_code"]) == ("exited with interrupt_exit_code 75", 75)
    h.runs.request_resume("run-000001")
    h.tick_at(T0 + 2)
    run = h.runs.show("run-000001")
    assert (run["state"], run["reason"], run["exit_code"]) == ("running", None, None)
    # The interrupted attempt keeps its own record.
    first = run["attempts"][0]
    assert (first["state"], first["exit_code"]) == ("interrupted", 75)
    h.control.finish("run-000001", exit_code=0, attempt=2)
    h.tick_at(T0 + 3)
    done = h.runs.show("run-000001")
    assert (done["state"], done["reason"], done["exit_code"]) == ("completed", None, 0)
