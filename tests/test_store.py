"""The store itself: creation, permissions, schema versions, transactions,
and what operators see when the database is not what wfsched wrote."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest

from tests.daemon import wfsched
from wfsched.errors import StoreError
from wfsched.store import Store
from wfsched.store.migrations import LATEST_VERSION

DEFINITION = 'id = "a"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["true"]\n'


def test_a_blank_store_is_created_owner_only_at_the_latest_schema(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    assert store.schema_version == LATEST_VERSION
    assert stat.S_IMODE((tmp_path / "s").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "s" / "wfsched.db").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "s" / "runs").stat().st_mode) == 0o700
    journal = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
    synchronous = store._conn.execute("PRAGMA synchronous").fetchone()[0]
    assert (journal, synchronous) == ("wal", 2)
    store.close()


def test_reopening_is_idempotent(tmp_path: Path) -> None:
    Store(tmp_path / "s").close()
    store = Store(tmp_path / "s")
    assert store.schema_version == LATEST_VERSION
    store.close()


def test_a_newer_schema_is_refused_with_a_clear_line(tmp_path: Path) -> None:
    Store(tmp_path / "s").close()
    db = sqlite3.connect(tmp_path / "s" / "wfsched.db")
    db.execute(f"PRAGMA user_version = {LATEST_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer than this wfsched"):
        Store(tmp_path / "s")
    result = wfsched(tmp_path / "s", "list")
    assert result.returncode == 1
    assert "upgrade wfsched" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "wfsched.db").write_bytes(b"this is not sqlite" * 100)
    result = wfsched(tmp_path / "s", "list")
    assert result.returncode == 1
    assert "not a usable wfsched database" in result.stderr
    assert "Traceback" not in result.stderr


def test_atomic_rolls_back_and_keeps_the_original_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    with pytest.raises(KeyError, match="original"), store.atomic():
        store.insert_schedule("a", "{}", 1.0, 0, None)
        raise KeyError("original")
    assert store.get_schedule("a") is None
    with store.atomic():
        store.insert_schedule("a", "{}", 1.0, 0, None)
        with pytest.raises(KeyError), store.atomic():
            store.update_schedule("a", paused=1)
            raise KeyError("inner")
    row = store.get_schedule("a")
    assert row is not None and not row.paused
    store.close()


def test_the_watermark_cannot_move_back_whoever_tries(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    with store.atomic():
        store.insert_schedule("a", "{}", 1.0, 100, None)
    with pytest.raises(sqlite3.IntegrityError, match="may not move back"), store.atomic():
        store.update_schedule("a", consumed_through=99)
    row = store.get_schedule("a")
    assert row is not None and row.consumed_through == 100
    store.close()


def test_the_same_instant_cannot_be_decided_twice(tmp_path: Path) -> None:
    store = Store(tmp_path / "s")
    with store.atomic():
        store.insert_schedule("a", "{}", 1.0, 100, None)
        store.insert_occurrence("a", 160, "admitted", 1, 1.0)
    with pytest.raises(sqlite3.IntegrityError), store.atomic():
        store.insert_occurrence("a", 160, "skipped-overlap", 1, 1.0)
    store.close()


@pytest.mark.parametrize(
    ("corruption", "commands"),
    [
        (
            "UPDATE schedules SET definition = '{not json'",
            [("get", "a"), ("list",), ("pause", "a")],
        ),
        ("UPDATE schedules SET definition = '[]'", [("get", "a"), ("list",), ("pause", "a")]),
        # Well-formed but invalid: reads show what is stored; anything that
        # needs the calendar refuses it (and the supervisor blocks it).
        (
            "UPDATE schedules SET definition = json_set(definition, '$.trigger.cron', 'nonsense')",
            [("pause", "a"), ("next", "a")],
        ),
    ],
)
def test_a_corrupt_definition_row_is_one_clear_line_and_nothing_written(
    tmp_path: Path, corruption: str, commands: list[tuple[str, ...]]
) -> None:
    store_dir = tmp_path / "s"
    definition = tmp_path / "a.toml"
    definition.write_text(DEFINITION)
    assert wfsched(store_dir, "create", str(definition)).returncode == 0
    db = sqlite3.connect(store_dir / "wfsched.db")
    db.execute(corruption)
    db.commit()
    before = db.execute("SELECT * FROM schedules").fetchall()
    db.close()
    for command in commands:
        result = wfsched(store_dir, *command)
        assert result.returncode == 1, (command, result.stderr)
        assert "corrupt definition row" in result.stderr, command
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    db = sqlite3.connect(store_dir / "wfsched.db")
    assert db.execute("SELECT * FROM schedules").fetchall() == before
    db.close()


def test_a_failed_commit_rolls_back_so_the_next_transaction_commits(tmp_path: Path) -> None:
    """A COMMIT can fail and leave SQLite's transaction open (here a deferred
    foreign key; a full disk does the same). Without a rollback, every later
    atomic() would nest in it as a savepoint and never be committed."""
    store = Store(tmp_path / "s")
    with pytest.raises(sqlite3.IntegrityError), store.atomic():
        store._conn.execute("PRAGMA defer_foreign_keys = ON")
        store.insert_run("no-such-schedule", "manual", 0, 1, "{}", 0.0)
    assert not store._conn.in_transaction
    with store.atomic():
        store.set_meta(probe="kept")
    store.close()
    other = Store(tmp_path / "s")
    assert other.get_meta("probe") == "kept"
    assert other.list_runs() == []
    other.close()
