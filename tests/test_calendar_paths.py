"""Every path that reads the calendar sees the completed one (docs/semantics.md, "DST").

croniter 7.0.0 alone drops the second 01:30 of `30 1 1 11 *` in New York on
2026-11-01 (06:30Z; tests/test_calendar.py pins its raw answer), and every
second-pass minute of `* 1 1 11 *`. The adapter completes them; these tests
follow those instants through what decides and what reports: the
supervisor's admissions, the catch-up jump, the audit's ledger check and
`wfsched next`. And croniter is imported nowhere but the adapter, so no
path can ask it directly.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import CliRun

from tests.fakes import Clock, FakeControl
from wfsched.api.admin import Admin
from wfsched.api.audit_checks import audit
from wfsched.daemon.supervisor import Supervisor
from wfsched.domain.calendar import CronCalendar
from wfsched.domain.config import SupervisorConfig
from wfsched.domain.decisions import SCAN_CAP, Span, span_between
from wfsched.domain.definition import parse_definition
from wfsched.store import SQLiteStore, Store

ROOT = Path(__file__).resolve().parent.parent
NY = "America/New_York"


def at(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


def definition(schedule_id: str, cron: str, misfire: str = "skip") -> str:
    return (
        f'id = "{schedule_id}"\n[trigger]\ncron = "{cron}"\ntimezone = "{NY}"\n'
        f'[run]\ncommand = ["true"]\n[policy]\nmisfire = "{misfire}"\n'
    )


def test_only_the_adapter_imports_croniter() -> None:
    importers = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "wfsched").rglob("*.py")
        if re.search(r"(?m)^\s*(from|import)\s+croniter\b", path.read_text(encoding="utf-8"))
    )
    assert importers == ["wfsched/domain/calendar.py"]


def test_catch_up_span_counts_both_passes_of_a_fold() -> None:
    # 120 instants (60 minutes, twice): past the 100-instant cap, so the span
    # ends where prev_before says, at the last minute of the second pass.
    cal = CronCalendar("* 1 1 11 *", NY)
    span = span_between(cal, at("2026-10-31T12:00"), at("2026-11-01T12:00"))
    assert span == Span(at("2026-11-01T05:00"), at("2026-11-01T06:59"), None)
    # Under the cap every instant is enumerated: both 01:59s are counted.
    short = span_between(cal, at("2026-11-01T05:30"), at("2026-11-01T12:00"))
    assert short == Span(at("2026-11-01T05:31"), at("2026-11-01T06:59"), 89)
    assert SCAN_CAP > 89  # enumerated one by one, not jumped


class Setup:
    def __init__(self, store: Store, start: str) -> None:
        self.clock = Clock(at(start))
        self.store = store
        self.admin = Admin(self.store, self.clock)
        self.control = FakeControl()
        self.supervisor = Supervisor(
            self.store,
            SupervisorConfig(),
            self.control,
            clock=self.clock,
            log=lambda *_, **__: None,
        )
        self.supervisor.tick()

    def create(self, schedule_id: str, cron: str, misfire: str = "skip") -> None:
        text = definition(schedule_id, cron, misfire)
        self.admin.create(parse_definition(text, f"{schedule_id}.toml", now=int(self.clock())))

    def tick(self, when: str) -> None:
        self.clock.set(at(when))
        self.supervisor.tick()

    def ledger(self, schedule_id: str) -> list[tuple[int, str, int | None, int | None]]:
        return [
            (row.scheduled_at, row.run_state or row.state, row.last_at, row.count)
            for row in self.store.page_occurrences(schedule_id, None, 1000)
        ]


def delete_occurrence(store_kind: str, root: Path, request: pytest.FixtureRequest, at: int) -> None:
    """Remove one ledger row behind the store's back, as a bug could."""
    statement = f"DELETE FROM occurrences WHERE scheduled_at = {at}"
    if store_kind == "sqlite":
        with closing(sqlite3.connect(root / "wfsched.db")) as conn:
            conn.execute(statement)
            conn.commit()
    else:
        import psycopg

        with psycopg.connect(request.getfixturevalue("pg_url"), autocommit=True) as conn:
            conn.execute(statement)


def test_supervisor_admits_both_instants_and_audit_owes_both(
    tmp_path: Path,
    make_store: Callable[[Path], Store],
    store_kind: str,
    request: pytest.FixtureRequest,
) -> None:
    root = tmp_path / "store"
    setup = Setup(make_store(root), "2026-10-31T12:00")
    setup.create("fold", "30 1 1 11 *")
    setup.tick("2026-11-01T05:30")
    setup.control.finish("run-000001")
    setup.tick("2026-11-01T05:30:01")
    setup.tick("2026-11-01T06:30")
    assert len(setup.control.spawned) == 2
    assert [(instant, state) for instant, state, _, _ in setup.ledger("fold")] == [
        (at("2026-11-01T05:30"), "completed"),
        (at("2026-11-01T06:30"), "running"),
    ]
    row = setup.store.get_schedule("fold")
    assert row is not None and row.next_due == at("2027-11-01T05:30")
    report = audit(setup.store)
    assert report["violations"] == []
    # The audit owes the completed instant too: without its row, a gap (and
    # its run loses its admission).
    delete_occurrence(store_kind, root, request, at("2026-11-01T06:30"))
    report = audit(setup.store)
    gaps = [v for v in report["violations"] if v["check"] == "ledger-gap"]
    assert [v["schedule_id"] for v in gaps] == ["fold"]
    assert "2026-11-01T06:30:00Z is not accounted for" in gaps[0]["detail"]
    assert {v["check"] for v in report["violations"]} == {"ledger-gap", "run-without-admission"}
    setup.store.close()


def test_audit_command_owes_the_completed_instant(run_cli: CliRun, tmp_path: Path) -> None:
    root = tmp_path / "store"
    setup = Setup(SQLiteStore(root), "2026-10-31T12:00")
    setup.create("fold", "30 1 1 11 *")
    setup.tick("2026-11-01T05:30")
    setup.tick("2026-11-01T06:30")
    setup.store.close()
    code, out, _ = run_cli("--store", str(root), "audit", "--json")
    assert (code, json.loads(out)["violations"]) == (0, [])
    with closing(sqlite3.connect(root / "wfsched.db")) as conn:
        conn.execute(f"DELETE FROM occurrences WHERE scheduled_at = {at('2026-11-01T06:30')}")
        conn.commit()
    code, out, _ = run_cli("--store", str(root), "audit", "--json")
    assert code == 1
    assert "2026-11-01T06:30:00Z is not accounted for" in out


def test_catch_up_after_downtime_over_a_fold_admits_the_latest_repeat(
    tmp_path: Path, make_store: Callable[[Path], Store]
) -> None:
    setup = Setup(make_store(tmp_path / "store"), "2026-10-31T12:00")
    setup.create("minutes", "* 1 1 11 *", misfire="latest")
    setup.tick("2026-11-01T07:00:30")  # 120 instants passed while down
    # Past the cap: one summary up to the instant before the latest, and
    # the latest (the second 01:59, 06:59Z) run. croniter alone would stop at
    # the first 01:59 (05:59Z) and never owe the second pass.
    assert setup.ledger("minutes") == [
        (at("2026-11-01T05:00"), "skipped-misfire", at("2026-11-01T06:58"), None),
        (at("2026-11-01T06:59"), "running", None, None),
    ]
    row = setup.store.get_schedule("minutes")
    assert row is not None
    assert row.consumed_through == at("2026-11-01T06:59")
    assert row.next_due == at("2027-11-01T05:00")
    setup.store.close()


def test_next_shows_the_completed_repeat(run_cli: CliRun, tmp_path: Path) -> None:
    code, _, err = run_cli("create", "-", input=definition("fold", "30 1 1 11 *"))
    assert code == 0, err
    code, out, err = run_cli(
        "next", "fold", "--after", "2026-10-31T00:00:00Z", "--count", "3", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["items"] == [
        {
            "scheduled_at": "2026-11-01T05:30:00Z",
            "local": "2026-11-01 01:30 -04:00 (EDT)",
            "note": None,
            "held": None,
        },
        {
            "scheduled_at": "2026-11-01T06:30:00Z",
            "local": "2026-11-01 01:30 -05:00 (EST)",
            "note": "dst-fold-repeat",
            "held": None,
        },
        {
            "scheduled_at": "2027-11-01T05:30:00Z",
            "local": "2027-11-01 01:30 -04:00 (EDT)",
            "note": None,
            "held": None,
        },
    ]
    code, out, _ = run_cli("next", "fold", "--after", "2026-11-01T01:00:00-04:00", "--count", "2")
    assert code == 0
    assert "DST fold: second of a repeated wall time" in out
