"""`wfsched audit`: a store built by the real code audits clean, and a copy
corrupted in one way is named exactly (check, schedule, run), exit 1.

The store is built once per module with the administration API and the
supervisor loop (injected clock, fake launcher); each test corrupts its own
copy with raw SQL or the file system, as a crash, a bug or an operator could.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import CliRun

from tests.fakes import Clock, FakeControl
from wfsched.api.admin import Admin
from wfsched.api.audit_checks import CHECKS, audit
from wfsched.api.run_ops import Runs
from wfsched.daemon.supervisor import Supervisor
from wfsched.domain.config import SupervisorConfig
from wfsched.domain.definition import parse_definition
from wfsched.process.launcher import SHIM_RECORD
from wfsched.store import SQLiteStore, Store
from wfsched.store.rundirs import STARTED_RECORD

T0 = int(datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp())
MINUTE = 60
HOUR = 3600

# What the built store holds (asserted by test_built_store_is_what_the_cases_assume).
RUNS = {
    "run-000001": ("a", "completed", ["interrupted", "completed"]),
    "run-000002": ("gone", "failed", ["failed"]),
    "run-000003": ("h", "completed", ["completed"]),
    "run-000004": ("q", "running", ["running"]),
    "run-000005": ("h", "running", ["running"]),  # manual
    "run-000006": ("a", "running", ["running"]),
}


def _definition(schedule_id: str, cron: str, body: str = "") -> str:
    return f'id = "{schedule_id}"\n[trigger]\ncron = "{cron}"\n[run]\ncommand = ["true"]\n' + body


def build_store(root: Path) -> None:
    """Every kind of ledger row the code writes: admissions, an interrupted
    and resumed run, skipped-overlap, a queued candidate (held at the end),
    superseded rows, a catch-up jump, a paused span, an edit, a delete, a
    manual run and a supervisor-down span after a restart."""
    clock = Clock(T0 - 30)
    store = SQLiteStore(root)
    admin = Admin(store, clock)
    runs = Runs(store, clock)
    control = FakeControl()

    def supervisor() -> Supervisor:
        return Supervisor(
            store, SupervisorConfig(), control, clock=clock, log=lambda *_, **__: None
        )

    def tick(at: float) -> None:
        clock.set(at)
        current.tick()

    def create(schedule_id: str, cron: str, body: str = "") -> None:
        text = _definition(schedule_id, cron, body)
        admin.create(parse_definition(text, f"{schedule_id}.toml", now=int(clock())))

    current = supervisor()
    current.tick()
    create("a", "* * * * *", "interrupt_exit_code = 75\n")
    create("q", "* * * * *", '[policy]\noverlap = "queue"\n')
    create("h", "0 * * * *")
    create("gone", "*/5 * * * *")
    tick(T0)  # run-000001 a, run-000002 gone, run-000003 h, run-000004 q
    control.finish("run-000001", exit_code=75)
    control.finish("run-000002", exit_code=3)
    control.finish("run-000003")
    tick(T0 + 1)
    runs.request_resume("run-000001")
    tick(T0 + 2)
    tick(T0 + MINUTE)
    tick(T0 + 2 * MINUTE)
    clock.set(T0 + 2 * MINUTE + 10)
    admin.pause("h")
    clock.set(T0 + 3 * HOUR + 10)
    admin.resume("h")
    clock.set(T0 + 3 * HOUR + 20)
    edited = parse_definition(_definition("h", "30 * * * *"), "h.toml", now=int(clock()))
    admin.update(edited, expected_revision=1)
    clock.set(T0 + 3 * HOUR + 30)
    admin.delete("gone")
    tick(T0 + 3 * HOUR + 40)
    control.finish("run-000001", attempt=2)
    tick(T0 + 3 * HOUR + 50)
    clock.set(T0 + 3 * HOUR + 55)
    runs.request_trigger("h")
    tick(T0 + 3 * HOUR + 56)  # run-000005, manual
    current = supervisor()  # a restart: the next tick is a startup tick
    tick(T0 + 5 * HOUR)  # run-000006 a
    tick(T0 + 5 * HOUR + MINUTE)  # q holds 14:01 behind run-000004
    store.close()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("audit") / "store"
    build_store(root)
    return root


@pytest.fixture
def copy(built: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(built, target)
    return target


def corrupt(root: Path, *statements: str) -> None:
    """Raw SQL on the copy, foreign keys off (sqlite3's default), as a bug could."""
    with closing(sqlite3.connect(root / "wfsched.db")) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.commit()


def audit_cli(run_cli: CliRun, root: Path) -> tuple[int, dict, str]:
    code, out, err = run_cli("--store", str(root), "audit", "--json")
    return code, json.loads(out), err


def found(report: dict) -> list[tuple[str, str | None, str | None]]:
    return sorted((v["check"], v["schedule_id"], v["run_id"]) for v in report["violations"])


# ------------------------------------------------------------------- clean


def test_built_store_is_what_the_cases_assume(built: Path) -> None:
    store = SQLiteStore(built)
    try:
        runs = {run.run_id: run for run in store.list_runs(limit=100)}
        assert {
            key: (run.schedule_id, run.state, [a.state for a in store.attempts(run.seq)])
            for key, run in runs.items()
        } == RUNS
        assert runs["run-000005"].kind == "manual"
        queued = store.get_schedule("q")
        assert queued is not None and queued.candidate_at == T0 + 5 * HOUR + MINUTE
        states = {o.state for o in store.page_occurrences("a", None, 100)}
        assert {"skipped-overlap", "skipped-misfire", "admitted"} <= states
    finally:
        store.close()


def test_clean_store_audits_clean(run_cli: CliRun, copy: Path) -> None:
    code, report, err = audit_cli(run_cli, copy)
    assert (code, err) == (0, "")
    assert report["ok"] is True and report["violations"] == []
    assert report["checked"] == {
        "schedules": 4,
        "revisions": 5,
        "occurrences": 18,
        "runs": 6,
        "attempts": 7,
        "run_dirs": 6,
    }
    code, out, _ = run_cli("--store", str(copy), "audit")
    assert code == 0
    assert out.splitlines() == [
        "audit: ok (checked 4 schedules, 5 revisions, 18 occurrences, 6 runs, 7 attempts,"
        " 6 run_dirs)"
    ]


def test_audit_writes_nothing(copy: Path) -> None:
    def dump() -> list[str]:
        with closing(sqlite3.connect(copy / "wfsched.db")) as conn:
            return list(conn.iterdump())

    before = dump()
    store = SQLiteStore(copy)
    try:
        assert audit(store)["ok"] is True
    finally:
        store.close()
    assert dump() == before


# ------------------------------------------------------------- corruptions


@dataclass(frozen=True)
class Case:
    statements: tuple[str, ...]
    expected: list[tuple[str, str | None, str | None]]
    detail: str
    """A fragment one of the violations' detail must contain."""
    files: Callable[[Path], None] | None = None


def _rmtree(*parts: str) -> Callable[[Path], None]:
    return lambda root: shutil.rmtree(root.joinpath("runs", *parts))


def _mkdir(*parts: str) -> Callable[[Path], None]:
    return lambda root: root.joinpath("runs", *parts).mkdir()


CASES = {
    "second admission of one instant": Case(
        (
            "DROP INDEX occurrences_instant",
            "INSERT INTO runs (schedule_id, kind, scheduled_at, state, revision, invocation,"
            " admitted_at) SELECT schedule_id, kind, scheduled_at, 'admitted', revision,"
            " invocation, admitted_at FROM runs WHERE seq = 3",
            "INSERT INTO occurrences (schedule_id, scheduled_at, summary, state, revision,"
            f" run_seq, recorded_at) VALUES ('h', {T0}, 0, 'admitted', 1, 7, {T0})",
        ),
        [("admitted-twice", "h", None), ("schema", None, None)],
        "2026-12-01T09:00:00Z: 2 admitted rows for one occurrence (runs: run-000003, run-000007)",
    ),
    "one run claimed by two occurrences": Case(
        (
            "DROP INDEX occurrences_run",
            f"UPDATE occurrences SET run_seq = 4 WHERE schedule_id = 'q'"
            f" AND scheduled_at = {T0 + MINUTE}",
        ),
        [
            ("admitted-twice", "q", "run-000004"),
            ("run-without-admission", "q", "run-000004"),
            ("schema", None, None),
        ],
        "is the run of q@2026-12-01T09:00:00Z, but its admission row is q@2026-12-01T09:01:00Z",
    ),
    "admission row turned into a skip": Case(
        ("UPDATE occurrences SET run_seq = NULL, state = 'skipped-misfire' WHERE run_seq = 3",),
        [("run-without-admission", "h", "run-000003")],
        "scheduled run for 2026-12-01T09:00:00Z has no admitted occurrence row",
    ),
    "admission row deleted": Case(
        ("DELETE FROM occurrences WHERE run_seq = 3",),
        [("ledger-gap", "h", None), ("run-without-admission", "h", "run-000003")],
        "has no admitted occurrence row",
    ),
    "run of an admission deleted": Case(
        ("DELETE FROM attempts WHERE run_seq = 2", "DELETE FROM runs WHERE seq = 2"),
        [("admission-without-run", "gone", "run-000002")],
        "admitted row points at run-000002, which does not exist",
        files=_rmtree("run-000002"),
    ),
    "paused span deleted": Case(
        ("DELETE FROM occurrences WHERE state = 'skipped-paused'",),
        [("ledger-gap", "h", None)],
        "3 instants, 2026-12-01T10:00:00Z through 2026-12-01T12:00:00Z, are not accounted for",
    ),
    "catch-up summary deleted": Case(
        ("DELETE FROM occurrences WHERE schedule_id = 'a' AND reason = 'catch-up-jump'",),
        [("ledger-gap", "a", None)],
        "more than 100 instants, 2026-12-01T09:03:00Z through 2026-12-01T11:59:00Z",
    ),
    "single skip deleted": Case(
        (f"DELETE FROM occurrences WHERE schedule_id = 'a' AND scheduled_at = {T0 + MINUTE}",),
        [("ledger-gap", "a", None)],
        "2026-12-01T09:01:00Z is not accounted for in the ledger",
    ),
    "held candidate dropped": Case(
        ("UPDATE schedules SET candidate_at = NULL, candidate_why = NULL WHERE id = 'q'",),
        [("ledger-gap", "q", None)],
        "2026-12-01T14:01:00Z is not accounted for",
    ),
    "ledger row without a position": Case(
        (
            "UPDATE occurrences SET ledger_pos = NULL"
            f" WHERE schedule_id = 'a' AND scheduled_at = {T0}",
        ),
        [("ledger-order", "a", None)],
        "(2026-12-01T09:00:00Z) has no ledger position; history pages could miss rows",
    ),
    "ledger row placed beyond the last row recorded": Case(
        (
            "UPDATE occurrences SET ledger_pos = 1000000 WHERE schedule_id = 'h'"
            " AND state = 'skipped-paused'",
        ),
        [("ledger-order", "h", None)],
        "has ledger position 1000000, beyond the last row recorded",
    ),
    "ledger position trigger dropped": Case(
        ("DROP TRIGGER occurrences_ledger_position",),
        [("schema", None, None)],
        "trigger occurrences_ledger_position is missing",
    ),
    "summary count wrong": Case(
        ("UPDATE occurrences SET count = 4 WHERE state = 'skipped-paused'",),
        [("summary-count-mismatch", "h", None)],
        "count says 4, the calendar has 3 instants",
    ),
    "watermark moved back": Case(
        (
            "DROP TRIGGER schedules_watermark_monotone",
            f"UPDATE schedules SET consumed_through = consumed_through - {2 * HOUR} WHERE id = 'h'",
        ),
        [("schema", None, None), ("watermark-behind", "h", None)],
        "consumed_through 2026-12-01T11:30:00Z is behind the ledger, which accounts through"
        " 2026-12-01T13:30:00Z",
    ),
    "candidate ahead of the watermark": Case(
        (
            "UPDATE schedules SET candidate_at = consumed_through + 60, candidate_why = 'queued'"
            " WHERE id = 'h'",
        ),
        [("candidate-ahead", "h", None)],
        "candidate 2026-12-01T13:31:00Z is after consumed_through 2026-12-01T13:30:00Z",
    ),
    "run directory removed": Case(
        (),
        [("rundir-mismatch", "h", "run-000003")],
        "completed run with 1 attempt(s) has no directory",
        files=_rmtree("run-000003"),
    ),
    "attempt directory removed": Case(
        (),
        [("rundir-mismatch", "a", "run-000001")],
        "attempt 2 has no directory",
        files=_rmtree("run-000001", "attempt-2"),
    ),
    "stray run directory": Case(
        (),
        [("rundir-orphan", None, "run-000999")],
        "run-000999 has no run row",
        files=_mkdir("run-000999"),
    ),
    "stray directory of another name": Case(
        (),
        [("rundir-orphan", None, None)],
        "leftovers is not a run directory",
        files=_mkdir("leftovers"),
    ),
    "attempt counter ahead of the attempt rows": Case(
        ("UPDATE runs SET attempt = 3 WHERE seq = 1",),
        [("attempt-count-mismatch", "a", "run-000001")],
        "runs.attempt is 3 but the attempt rows are [1, 2]",
    ),
    "completed while its attempt still runs": Case(
        ("UPDATE runs SET state = 'completed' WHERE seq = 6",),
        [("state-contradiction", "a", "run-000006")],
        "completed run, but its latest attempt 1 is running",
    ),
    "running without a running attempt": Case(
        ("UPDATE attempts SET state = 'failed' WHERE run_seq = 4",),
        [("state-contradiction", "q", "run-000004")],
        "running run without a running attempt (attempt 1 is failed)",
    ),
    "admitted run with attempts": Case(
        ("UPDATE runs SET state = 'admitted' WHERE seq = 6",),
        [("state-contradiction", "a", "run-000006")],
        "admitted run has attempt rows",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_corruption_is_named_exactly(run_cli: CliRun, copy: Path, name: str) -> None:
    case = CASES[name]
    corrupt(copy, *case.statements)
    if case.files is not None:
        case.files(copy)
    code, report, err = audit_cli(run_cli, copy)
    assert code == 1
    assert report["ok"] is False
    assert found(report) == sorted(case.expected)
    names = sorted({check for check, _, _ in case.expected})
    assert (
        err
        == f"wfsched: error: audit found {len(case.expected)} violation(s): {', '.join(names)}\n"
    )
    assert any(case.detail in v["detail"] for v in report["violations"]), report
    assert {v["check"] for v in report["violations"]} <= set(CHECKS)


@pytest.mark.parametrize("started", [False, True])
def test_a_run_directory_prepared_for_an_admission_not_committed_is_a_note(
    run_cli: CliRun, copy: Path, started: bool
) -> None:
    """A scheduled run's directories are made inside its admission's
    transaction: an audit can see them before the row commits, and a crash
    can roll the row back. Never launched (no started record under
    records/), such a directory is a note and the audit passes; one whose
    attempt started has lost its row, a violation."""
    (copy / "runs" / "run-000999" / "attempt-1").mkdir(parents=True)
    records = copy / "records" / "run-000999" / "attempt-1"
    records.mkdir(parents=True)
    if started:
        (records / STARTED_RECORD).write_text('{"pid": 1, "start_time": 1}')
    code, out, _ = run_cli("--store", str(copy), "audit", "--json")
    report = json.loads(out)
    if started:
        assert code == 1
        assert found(report) == [("rundir-orphan", None, "run-000999")]
        assert report["notes"] == []
    else:
        assert code == 0 and report["ok"], report
        (note,) = report["notes"]
        assert note["run_id"] == "run-000999" and note["schedule_id"] is None
        assert "never launched" in note["detail"]
        code, out, _ = run_cli("--store", str(copy), "audit")
        assert code == 0
        assert "note: run-000999: " in out and "audit: ok" in out


def test_the_started_record_is_named_alike_in_the_store_and_the_launcher() -> None:
    assert STARTED_RECORD == SHIM_RECORD


def test_human_output_names_each_violation_on_one_line(run_cli: CliRun, copy: Path) -> None:
    shutil.rmtree(copy / "runs" / "run-000003")
    (copy / "runs" / "run-000999").mkdir()
    code, out, err = run_cli("--store", str(copy), "audit")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("rundir-mismatch: h run-000003: completed run with 1 attempt(s)")
    assert lines[1].startswith("rundir-orphan: run-000999: ")
    assert lines[2].startswith("audit: 2 violation(s) (checked 4 schedules,")
    assert err == "wfsched: error: audit found 2 violation(s): rundir-mismatch, rundir-orphan\n"


def test_dropped_table_is_a_schema_violation_not_a_traceback(run_cli: CliRun, copy: Path) -> None:
    corrupt(copy, "DROP TABLE attempts")
    code, report, _ = audit_cli(run_cli, copy)
    assert code == 1
    assert report["violations"] == [
        {
            "check": "schema",
            "schedule_id": None,
            "run_id": None,
            "detail": "table attempts is missing",
        }
    ]


def test_unopenable_store_is_one_line_and_exit_1(tmp_path: Path) -> None:
    root = tmp_path / "broken"
    root.mkdir()
    (root / "wfsched.db").write_bytes(b"this is not a database, just bytes" * 200)
    result = subprocess.run(
        [sys.executable, "-m", "wfsched", "--store", str(root), "audit", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("wfsched: error: ")
    assert "Traceback" not in result.stderr


def test_missing_store_audits_clean_as_an_empty_store(run_cli: CliRun, tmp_path: Path) -> None:
    code, out, err = run_cli("--store", str(tmp_path / "nowhere"), "audit")
    assert code == 0 and out.startswith("audit: ok")
    assert err.startswith("wfsched: note: no store at ") and err.count("\n") == 1
    assert not (tmp_path / "nowhere").exists()


# ----------------------------------------------------------------- bounded


def test_three_year_catch_up_audits_clean_quickly(run_cli: CliRun, tmp_path: Path) -> None:
    root = tmp_path / "long"
    clock = Clock(T0 - 30)
    store = SQLiteStore(root)
    admin = Admin(store, clock)
    control = FakeControl()
    supervisor = Supervisor(
        store, SupervisorConfig(), control, clock=clock, log=lambda *_, **__: None
    )
    supervisor.tick()
    admin.create(parse_definition(_definition("m", "* * * * *"), "m.toml", now=int(clock())))
    for minute in range(5):
        clock.set(T0 + minute * MINUTE)
        supervisor.tick()
        control.finish(f"run-{minute + 1:06d}")
        clock.advance(1)
        supervisor.tick()
    clock.set(T0 + 3 * 365 * 24 * HOUR + 5)
    supervisor.tick()
    summaries = [o for o in store.page_occurrences("m", None, 100) if o.summary]
    assert [(o.reason, o.count) for o in summaries] == [("catch-up-jump", None)]
    assert summaries[0].last_at is not None
    assert summaries[0].last_at - summaries[0].scheduled_at > 3 * 364 * 24 * HOUR
    store.close()
    started = time.perf_counter()
    code, report, _ = audit_cli(run_cli, root)
    elapsed = time.perf_counter() - started
    assert (code, report["ok"]) == (0, True)
    assert elapsed < 2.0
    # Deleting that summary opens a gap of about 1.6 million minutes, found
    # with the same bounded number of calendar calls.
    corrupt(root, "DELETE FROM occurrences WHERE summary = 1")
    started = time.perf_counter()
    code, report, _ = audit_cli(run_cli, root)
    assert time.perf_counter() - started < 2.0
    assert code == 1 and found(report) == [("ledger-gap", "m", None)]
    assert report["violations"][0]["detail"].startswith(
        "more than 100 instants, 2026-12-01T09:05:00Z through 2029-11-30T08:59:00Z"
    )


def test_an_edit_after_a_clock_rollback_owes_nothing_before_the_watermark(
    run_cli: CliRun, tmp_path: Path
) -> None:
    """The watermark stays ahead of a rolled-back clock, so the new calendar's
    instants up to it are never decided: not a gap (found by a random walk)."""
    root = tmp_path / "rollback"
    clock = Clock(T0 - 30)
    store = SQLiteStore(root)
    admin = Admin(store, clock)
    supervisor = Supervisor(
        store, SupervisorConfig(), FakeControl(), clock=clock, log=lambda *_, **__: None
    )
    supervisor.tick()
    admin.create(parse_definition(_definition("r", "*/5 * * * *"), "r.toml", now=int(clock())))
    clock.set(T0 + 10 * MINUTE + 5)
    supervisor.tick()
    clock.set(T0 + 4 * MINUTE)
    edited = parse_definition(_definition("r", "*/7 * * * *"), "r.toml", now=int(clock()))
    admin.update(edited, expected_revision=1)
    row = store.get_schedule("r")
    assert row is not None and row.consumed_through == T0 + 10 * MINUTE
    clock.set(T0 + 20 * MINUTE)
    supervisor.tick()
    store.close()
    code, report, _ = audit_cli(run_cli, root)
    assert (code, report["violations"]) == (0, [])
    # After the watermark the new calendar is owed as usual.
    corrupt(root, f"DELETE FROM occurrences WHERE scheduled_at = {T0 + 14 * MINUTE}")
    code, report, _ = audit_cli(run_cli, root)
    assert found(report) == [("ledger-gap", "r", None)]
    assert "2026-12-01T09:14:00Z is not accounted for" in report["violations"][0]["detail"]


def rollback_store(
    root: Path, edit: str, open_store: Callable[[Path], Store] = SQLiteStore
) -> Store:
    """A pause and resume move the watermark ahead of every ledger row (no
    instant of */5 in between); the clock then rolls back and an edit
    replaces the calendar with an every-minute one."""
    clock = Clock(T0 - 30)
    store = open_store(root)
    admin = Admin(store, clock)
    supervisor = Supervisor(
        store, SupervisorConfig(), FakeControl(), clock=clock, log=lambda *_, **__: None
    )
    supervisor.tick()
    admin.create(parse_definition(_definition("r", "*/5 * * * *"), "r.toml", now=int(clock())))
    clock.set(T0 + 10 * MINUTE + 5)
    supervisor.tick()
    clock.set(T0 + 12 * MINUTE)
    admin.pause("r")
    clock.set(T0 + 13 * MINUTE)
    admin.resume("r")
    clock.set(T0 + 4 * MINUTE)
    text = _definition("r", "* * * * *")
    if edit == "update":
        admin.update(parse_definition(text, "r.toml", now=int(clock())), expected_revision=1)
    else:
        folder = root.parent / "defs"
        folder.mkdir()
        (folder / "r.toml").write_text(text)
        admin.apply([str(folder)])
    row = store.get_schedule("r")
    assert row is not None and (row.revision, row.consumed_through) == (2, T0 + 13 * MINUTE)
    clock.set(T0 + 20 * MINUTE)
    supervisor.tick()
    return store


@pytest.mark.parametrize("edit", ["update", "apply"])
def test_an_edit_after_a_resume_and_a_clock_rollback_owes_nothing_before_the_watermark(
    run_cli: CliRun, tmp_path: Path, edit: str
) -> None:
    """The new calendar's 09:11..09:13 were never owed (the watermark was at
    09:13 when the edit took over), though no row of the old revision
    reaches past 09:10 and the edit's own time is 09:04."""
    root = tmp_path / "rollback"
    store = rollback_store(root, edit)
    store.close()
    code, report, _ = audit_cli(run_cli, root)
    assert (code, report["violations"]) == (0, [])
    # A real gap after the watermark is still reported.
    corrupt(root, f"DELETE FROM occurrences WHERE scheduled_at = {T0 + 16 * MINUTE}")
    code, report, _ = audit_cli(run_cli, root)
    assert code == 1 and found(report) == [("ledger-gap", "r", None)]
    assert "2026-12-01T09:16:00Z is not accounted for" in report["violations"][0]["detail"]


@pytest.mark.parametrize("edit", ["update", "apply"])
def test_the_rollback_watermark_is_kept_on_both_backends(
    tmp_path: Path, make_store: Callable[[Path], Store], edit: str
) -> None:
    """The watermark stored with each revision (a migration on each backend)
    keeps audit free of the false `ledger-gap`, PostgreSQL included; a real
    gap after it is still found."""
    store = rollback_store(tmp_path / "rollback", edit, make_store)
    try:
        with store.snapshot():
            revisions = store.revision_history()["r"]
        assert [(rev.revision, rev.watermark) for rev in revisions][-1] == (2, T0 + 13 * MINUTE)
        report = audit(store)
        assert (report["ok"], report["violations"]) == (True, [])
        with store.atomic():
            store._execute(  # type: ignore[attr-defined]
                f"DELETE FROM occurrences WHERE scheduled_at = {T0 + 16 * MINUTE}"
            )
        report = audit(store)
        assert found(report) == [("ledger-gap", "r", None)]
    finally:
        store.close()


def test_a_revision_without_a_stored_watermark_falls_back_to_the_old_bound(
    run_cli: CliRun, tmp_path: Path
) -> None:
    """Revisions written before schema version 3 carry no watermark: the
    known blind spot stays for them (documented), and only for them."""
    root = tmp_path / "rollback"
    rollback_store(root, "update").close()
    corrupt(root, "UPDATE revisions SET watermark = NULL")
    code, report, _ = audit_cli(run_cli, root)
    assert code == 1 and found(report) == [("ledger-gap", "r", None)]
    assert report["violations"][0]["detail"].startswith(
        "3 instants, 2026-12-01T09:11:00Z through 2026-12-01T09:13:00Z"
    )


def test_pruned_history_still_audits_clean(run_cli: CliRun, copy: Path) -> None:
    """Retention replaces finished runs and old rows with `pruned` summary
    rows, removes their directories, and the ledger stays a complete account."""
    from wfsched.api.retention import prune

    store = SQLiteStore(copy)
    try:
        report = prune(store, 0, T0 + 6 * HOUR)
    finally:
        store.close()
    assert report.runs == 3 and report.run_dirs == 3
    code, audited, _ = audit_cli(run_cli, copy)
    assert (code, audited["violations"]) == (0, [])
    assert audited["checked"]["runs"] == 3
    # A pruned span is a summary like any other: removing it opens a gap.
    corrupt(copy, "DELETE FROM occurrences WHERE state = 'pruned' AND schedule_id = 'h'")
    code, audited, _ = audit_cli(run_cli, copy)
    assert code == 1 and found(audited) == [("ledger-gap", "h", None)]


# ------------------------------------------------------- the same on PostgreSQL

PORTABLE = [
    name
    for name, case in CASES.items()
    if case.files is None
    and not any(statement.lstrip().upper().startswith("DROP") for statement in case.statements)
]
"""The corruptions written as plain rows (no SQLite-only DDL, no files): the same
statements damage a PostgreSQL store the same way."""


@pytest.mark.parametrize("name", PORTABLE)
def test_each_corruption_is_named_exactly_on_postgresql(
    copy: Path, pg_url: str, tmp_path: Path, name: str
) -> None:
    """The audit's statements differ per backend (e.g. the highest sequence
    number each asks for in `ledger-order`): each planted defect is named the
    same on PostgreSQL, after a clean `store copy` of the built store."""
    from dataclasses import replace

    import psycopg

    from wfsched.api.audit_checks import audit_location
    from wfsched.api.store_copy import copy_store
    from wfsched.store.location import resolve_store

    target = replace(resolve_store(pg_url), local_dir=tmp_path / "local")
    assert copy_store(resolve_store(str(copy)), target)["audit"]["ok"] is True
    case = CASES[name]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # As sqlite3 with its foreign keys off: what a bug could write.
        conn.execute("SET session_replication_role = replica")
        for statement in case.statements:
            conn.execute(statement)  # type: ignore[arg-type]
    report = audit_location(target)
    assert report["ok"] is False
    assert found(report) == sorted(case.expected)
    assert any(case.detail in v["detail"] for v in report["violations"]), report
