"""`apply` of many new files computes each distinct trigger's first due
instant once, and stores exactly the rows `create` stores file by file,
across DST gaps and folds and for one-shots before and after the clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import SettableClock

import wfsched.api.admin as admin_module
from wfsched.api.admin import Admin
from wfsched.domain.definition import load_definition_file
from wfsched.store import SQLiteStore

TRIGGERS = {
    # Berlin springs forward at 2026-03-29T01:00Z: 02:30 does not exist that day.
    "gap-a": ('cron = "30 2 * * *"', "Europe/Berlin"),
    "gap-b": ('cron = "30 2 * * *"', "Europe/Berlin"),
    # Berlin falls back at 2026-10-25T01:00Z: 02:00-02:59 happens twice.
    "fold-a": ('cron = "*/20 2 * * *"', "Europe/Berlin"),
    "fold-b": ('cron = "*/20 2 * * *"', "Europe/Berlin"),
    # New York falls back at 2026-11-01T06:00Z: 01:30 happens twice.
    "ny-fold": ('cron = "30 1 * * *"', "America/New_York"),
    "hourly": ('cron = "0 * * * *"', "UTC"),
    "alias": ('cron = "@hourly"', "UTC"),
    "past": ('at = "2026-01-01T00:00:00Z"', None),
    "future": ('at = "2027-01-01T00:00:00+01:00"', None),
}


def write_folder(folder: Path) -> None:
    folder.mkdir()
    for schedule_id, (line, zone) in TRIGGERS.items():
        timezone = f'timezone = "{zone}"\n' if zone else ""
        (folder / f"{schedule_id}.toml").write_text(
            f'id = "{schedule_id}"\n[trigger]\n{line}\n{timezone}[run]\ncommand = ["/bin/true"]\n'
        )


def stored(store: SQLiteStore) -> dict[str, tuple[object, ...]]:
    return {
        row.id: (row.definition, row.consumed_through, row.next_due, row.exhausted)
        for row in store.list_schedules()
    }


@pytest.mark.parametrize(
    "clock",
    [
        datetime(2026, 3, 29, 0, 45, tzinfo=UTC),  # 01:45 in Berlin, before the gap
        datetime(2026, 10, 25, 0, 10, tzinfo=UTC),  # 02:10 CEST, the fold's first pass
        datetime(2026, 10, 25, 1, 10, tzinfo=UTC),  # 02:10 CET, its second pass
        datetime(2026, 11, 1, 5, 40, tzinfo=UTC),  # 01:40 EDT in New York
    ],
)
def test_apply_stores_the_rows_create_stores(tmp_path: Path, clock: datetime) -> None:
    now = clock.timestamp()
    folder = tmp_path / "defs"
    write_folder(folder)
    applied = SQLiteStore(tmp_path / "applied")
    created = SQLiteStore(tmp_path / "created")
    try:
        Admin(applied, clock=SettableClock(now)).apply([str(folder)])
        one_by_one = Admin(created, clock=SettableClock(now))
        for path in sorted(folder.iterdir()):
            one_by_one.create(load_definition_file(path, now=int(now)))
        assert stored(applied) == stored(created)
        assert len(stored(applied)) == len(TRIGGERS)
    finally:
        applied.close()
        created.close()


def test_each_distinct_trigger_is_asked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[object] = []
    real: Callable[..., tuple[int | None, bool]] = admin_module.next_due_after

    def counting(cal: object, consumed_through: int) -> tuple[int | None, bool]:
        asked.append(cal)
        return real(cal, consumed_through)

    monkeypatch.setattr(admin_module, "next_due_after", counting)
    folder = tmp_path / "defs"
    write_folder(folder)
    store = SQLiteStore(tmp_path / "store")
    try:
        Admin(store, clock=SettableClock()).apply([str(folder)])
    finally:
        store.close()
    # gap-a/gap-b and fold-a/fold-b share a trigger; "@hourly" is written
    # differently from "0 * * * *", and each one-shot is its own.
    assert len(asked) == len(TRIGGERS) - 2
