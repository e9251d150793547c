"""The store itself: creation, permissions, schema versions, transactions,
and what operators see when the database is not what wfsched wrote."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tests.daemon import wfsched
from tests.fakes import in_the_database_file
from wfsched.errors import StoreError
from wfsched.store import SQLiteStore
from wfsched.store.migrations import LATEST_VERSION
from wfsched.store.sqlite import CHECKPOINT_CHANGES

DEFINITION = 'id = "a"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["true"]\n'


def test_a_blank_store_is_created_owner_only_at_the_latest_schema(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s")
    assert store.schema_version == LATEST_VERSION
    assert stat.S_IMODE((tmp_path / "s").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "s" / "wfsched.db").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "s" / "runs").stat().st_mode) == 0o700
    journal = store._conn.execute("PRAGMA journal_mode").fetchone()[0]
    synchronous = store._conn.execute("PRAGMA synchronous").fetchone()[0]
    assert (journal, synchronous) == ("wal", 2)
    store.close()


def test_reopening_is_idempotent(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "s").close()
    store = SQLiteStore(tmp_path / "s")
    assert store.schema_version == LATEST_VERSION
    store.close()


def test_a_newer_schema_is_refused_with_a_clear_line(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "s").close()
    db = sqlite3.connect(tmp_path / "s" / "wfsched.db")
    db.execute(f"PRAGMA user_version = {LATEST_VERSION + 1}")
    db.close()
    with pytest.raises(StoreError, match="newer than this wfsched"):
        SQLiteStore(tmp_path / "s")
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
    store = SQLiteStore(tmp_path / "s")
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
    store = SQLiteStore(tmp_path / "s")
    with store.atomic():
        store.insert_schedule("a", "{}", 1.0, 100, None)
    with pytest.raises(sqlite3.IntegrityError, match="may not move back"), store.atomic():
        store.update_schedule("a", consumed_through=99)
    row = store.get_schedule("a")
    assert row is not None and row.consumed_through == 100
    store.close()


def test_the_same_instant_cannot_be_decided_twice(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s")
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
    store = SQLiteStore(tmp_path / "s")
    with pytest.raises(sqlite3.IntegrityError), store.atomic():
        store._conn.execute("PRAGMA defer_foreign_keys = ON")
        store.insert_run("no-such-schedule", "manual", 0, 1, "{}", 0.0)
    assert not store._conn.in_transaction
    with store.atomic():
        store.set_meta(probe="kept")
    store.close()
    other = SQLiteStore(tmp_path / "s")
    assert other.get_meta("probe") == "kept"
    assert other.list_runs() == []
    other.close()


def v1_store(root: Path) -> None:
    """A store as wfsched with schema version 1 wrote it: one schedule,
    created at 09:00 with its revision (no watermark column yet)."""
    from wfsched.domain.definition import canonical_json, parse_definition
    from wfsched.store.migrations import MIGRATIONS

    root.mkdir()
    (root / "runs").mkdir()
    (_number, _why, statements) = next(m for m in MIGRATIONS if m[0] == 1)
    definition = canonical_json(parse_definition(DEFINITION, "a.toml", now=0))
    conn = sqlite3.connect(root / "wfsched.db")
    try:
        for statement in statements:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO schedules (id, revision, definition, created_at, updated_at,"
            " consumed_through, next_due) VALUES ('a', 1, ?, ?, ?, ?, ?)",
            (definition, T9, T9, int(T9), int(T9) + 3600),
        )
        conn.execute(
            "INSERT INTO revisions (schedule_id, revision, definition, created_at)"
            " VALUES ('a', 1, ?, ?)",
            (definition, T9),
        )
        conn.execute("PRAGMA user_version = 1")
        conn.commit()
    finally:
        conn.close()


T9 = 1796115600.0  # 2026-12-01T09:00:00Z


def test_a_version_1_store_is_upgraded_and_audits_clean(tmp_path: Path) -> None:
    from tests.fakes import Clock
    from wfsched.api.admin import Admin
    from wfsched.api.audit_checks import audit
    from wfsched.domain.definition import parse_definition

    root = tmp_path / "s"
    v1_store(root)
    store = SQLiteStore(root)
    assert store.schema_version == LATEST_VERSION == 7
    assert store._conn.execute("SELECT watermark FROM revisions").fetchall() == [(None,)]
    # Version 4: hook outcomes and apply's memory start empty.
    assert store._conn.execute("SELECT COUNT(*) FROM notifications").fetchone() == (0,)
    assert store._conn.execute("SELECT COUNT(*) FROM applied").fetchone() == (0,)
    assert audit(store)["violations"] == []
    clock = Clock(T9 + 2 * 3600 + 30)
    edited = DEFINITION.replace('["true"]', '["false"]')
    Admin(store, clock).update(parse_definition(edited, "a.toml", now=int(clock())), 1)
    assert store._conn.execute("SELECT revision, watermark FROM revisions").fetchall() == [
        (1, None),
        (2, int(T9) + 2 * 3600 + 30),
    ]
    assert audit(store)["violations"] == []
    store.close()
    assert SQLiteStore(root).schema_version == 7  # reopening applies nothing twice


def test_migrations_apply_every_newer_version_in_order_gaps_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wfsched.store import migrations

    first = next(m for m in migrations.MIGRATIONS if m[0] == 1)
    monkeypatch.setattr(migrations, "MIGRATIONS", [first])
    SQLiteStore(tmp_path / "s").close()
    # Listed out of order, with gaps: 7 needs 4's table, so order matters.
    monkeypatch.setattr(
        migrations,
        "MIGRATIONS",
        [
            first,
            (7, "index", ["CREATE INDEX t4_x ON t4(x)"]),
            (4, "table", ["CREATE TABLE t4 (x)"]),
        ],
    )
    store = SQLiteStore(tmp_path / "s")
    assert store.schema_version == 7
    names = {row[0] for row in store._conn.execute("SELECT name FROM sqlite_master")}
    assert {"t4", "t4_x"} <= names
    store.close()
    # A store at 4 gets only what is above 4.
    monkeypatch.setattr(
        migrations,
        "MIGRATIONS",
        [first, (4, "table", ["CREATE TABLE t4b (x)"]), (9, "more", ["CREATE TABLE t9 (x)"])],
    )
    db = sqlite3.connect(tmp_path / "s" / "wfsched.db")
    db.execute("PRAGMA user_version = 4")
    db.close()
    store = SQLiteStore(tmp_path / "s")
    names = {row[0] for row in store._conn.execute("SELECT name FROM sqlite_master")}
    assert store.schema_version == 9 and "t9" in names and "t4b" not in names
    store.close()
    # Newer than the newest known is still refused.
    db = sqlite3.connect(tmp_path / "s" / "wfsched.db")
    db.execute("PRAGMA user_version = 10")
    db.close()
    with pytest.raises(StoreError, match="schema version 10 is newer than this wfsched"):
        SQLiteStore(tmp_path / "s")


def version_1_store(root: Path) -> None:
    """A store as wfsched wrote it before ledger positions (schema version 1)."""
    from wfsched.store.migrations import MIGRATIONS

    root.mkdir()
    db = sqlite3.connect(root / "wfsched.db")
    for number, _why, statements in MIGRATIONS:
        if number == 1:
            for statement in statements:
                db.execute(statement)
    db.execute("PRAGMA user_version = 1")
    db.execute(
        "INSERT INTO schedules (id, revision, definition, created_at, updated_at,"
        " consumed_through) VALUES ('a', 1, '{}', 0, 0, 0), ('b', 1, '{}', 0, 0, 0)"
    )
    # Recorded out of instant order, as a late write did: seq 3 is older than 1 and 2.
    for schedule_id, at, state in (
        ("a", 120, "skipped-misfire"),
        ("a", 180, "skipped-misfire"),
        ("a", 60, "superseded"),
        ("b", 60, "skipped-misfire"),
    ):
        db.execute(
            "INSERT INTO occurrences (schedule_id, scheduled_at, state, revision, recorded_at)"
            " VALUES (?, ?, ?, 1, 0)",
            (schedule_id, at, state),
        )
    db.commit()
    db.close()


def test_version_1_history_keeps_its_order_and_new_rows_follow_it(tmp_path: Path) -> None:
    from wfsched.api.audit_checks import audit

    version_1_store(tmp_path / "s")
    store = SQLiteStore(tmp_path / "s")
    try:
        assert store.schema_version == LATEST_VERSION
        # Migrated rows keep the (instant, seq) order version 1 showed them in.
        page = store.page_occurrences("a", None, 10)
        assert [row.scheduled_at for row in page] == [60, 120, 180]
        with store.atomic():
            store.insert_occurrence("a", 30, "superseded", 1, 1.0)
        page = store.page_occurrences("a", None, 10)
        assert [row.scheduled_at for row in page] == [60, 120, 180, 30]
        assert store.page_occurrences("a", page[2].ledger_pos, 10) == page[3:]
        # The migrated schema is the one a new store gets, and every row is placed.
        # (The bare rows above have no parseable definitions: those checks are moot.)
        violations = audit(store)["violations"]
        assert [v for v in violations if v["check"] == "schema" and v["schedule_id"] is None] == []
        assert [v for v in violations if v["check"] == "ledger-order"] == []
    finally:
        store.close()


def test_a_run_rows_invocation_is_parsed_once_into_typed_fields() -> None:
    from wfsched.store.rows import Invocation, RunRow

    text = (
        '{"command": ["sh", "-c", "true"], "cwd": null, "env": {"A": "1"}, "input": {"x": 1},'
        ' "timeout": 60, "kill_grace": 5}'
    )
    row = RunRow(1, "s", "scheduled", 0, "admitted", None, None, 1, text, 0.0, None, None, 0)
    frozen = row.frozen
    assert frozen == Invocation(["sh", "-c", "true"], None, {"A": "1"}, {"x": 1}, 60, 5, None)
    assert row.frozen is frozen, "parsed once per row"
    with pytest.raises(KeyError):
        Invocation.from_json('{"cwd": null}')


def test_attempt_log_paths_are_the_run_directory_s_log_paths(tmp_path: Path) -> None:
    """Exit ingestion reads the logs through the string-joined paths: they
    must be exactly where the run directory puts each attempt's logs."""
    from wfsched.store.rundirs import RunDir, attempt_log_paths

    directory = RunDir(tmp_path, "run-000042")
    assert attempt_log_paths(tmp_path, "run-000042", 3) == (
        str(directory.log_path(3, "stdout")),
        str(directory.log_path(3, "stderr")),
    )


def test_a_record_directory_is_made_without_making_records_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each launch makes its two record directories and only looks at
    `records/` (made once, for a new store); whatever is not a plain
    directory on the way is refused, a symlink included."""
    from wfsched.store import rundirs

    made: list[str] = []
    real_mkdir = os.mkdir

    def mkdir(path: str, mode: int = 0o777) -> None:
        made.append(os.path.relpath(path, tmp_path))
        real_mkdir(path, mode)

    monkeypatch.setattr(os, "mkdir", mkdir)
    records = tmp_path / "records"
    first = rundirs.prepare_record_dir(records / "run-000001" / "attempt-1")
    assert made == ["records", "records/run-000001", "records/run-000001/attempt-1"]
    assert records.stat().st_mode & 0o777 == 0o700
    made.clear()
    rundirs.prepare_record_dir(records / "run-000002" / "attempt-1")
    assert made == ["records/run-000002", "records/run-000002/attempt-1"]
    assert first == str(records / "run-000001" / "attempt-1")
    rundirs.prepare_record_dir(records / "run-000002" / "attempt-1")  # idempotent

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (records / "run-000003").symlink_to(elsewhere)
    with pytest.raises(NotADirectoryError):
        rundirs.prepare_record_dir(records / "run-000003" / "attempt-1")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "records").symlink_to(elsewhere)
    with pytest.raises(NotADirectoryError):
        rundirs.prepare_record_dir(linked / "records" / "run-000004" / "attempt-1")
    assert list(elsewhere.iterdir()) == [], "nothing is made through a link"


def test_an_empty_or_absent_log_is_answered_without_opening_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit ingestion reads two log tails per run; a job that writes its
    results elsewhere leaves both empty. Anything but a regular file is
    still None, never followed or blocked on."""
    from wfsched.store.rundirs import log_tail

    opened: list[str] = []
    real_open = os.open

    def counting_open(path: str, flags: int, mode: int = 0o777) -> int:
        opened.append(os.path.basename(path))
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", counting_open)
    (tmp_path / "empty.log").write_bytes(b"")
    (tmp_path / "full.log").write_bytes(b"x" * 10 + b"tail")
    (tmp_path / "link.log").symlink_to(tmp_path / "full.log")
    os.mkfifo(tmp_path / "fifo.log")
    assert log_tail(tmp_path / "empty.log") == b""
    assert log_tail(tmp_path / "absent.log") is None
    assert opened == []
    assert log_tail(tmp_path / "full.log", limit=4) == b"tail"
    assert log_tail(tmp_path / "link.log") is None
    assert log_tail(tmp_path / "fifo.log") is None
    assert log_tail(tmp_path) is None


def test_a_frozen_invocation_is_written_as_the_text_it_is_read_back_from() -> None:
    """An admitted run keeps the invocation it was frozen from (`parsed_as`)
    instead of parsing the text it just wrote: the two must be the same."""
    from wfsched.store.rows import Invocation, RunRow

    frozen = Invocation(
        ["sh", "-c", "true"], "/srv", {"A": "1"}, {"x": [1, 2.5]}, None, 5, 75, "/r"
    )
    text = frozen.to_json()
    assert Invocation.from_json(text) == frozen
    row = RunRow(1, "s", "scheduled", 0, "admitted", None, None, 1, text, 0.0, None, None, 0)
    assert row.parsed_as(frozen).frozen is frozen


def _in_the_database_file(root: Path, key: str) -> str | None:
    """`meta[key]` as the database file alone holds it (`in_the_database_file`)."""
    rows = in_the_database_file(root, "SELECT value FROM meta WHERE key = ?", (key,))
    return rows[0][0] if rows else None


def test_a_connection_that_defers_checkpoints_folds_the_log_only_when_asked(
    tmp_path: Path,
) -> None:
    """The supervisor's commits must never checkpoint (SQLite does it inside
    the commit that takes the log past 1,000 pages: the admission's, on the
    way to a job's start); it asks at quiet moments instead."""
    store = SQLiteStore(tmp_path / "s")
    store.defer_checkpoints()
    for number in range(CHECKPOINT_CHANGES - 1):
        store.touch_meta(probe=str(number))
    assert not store.checkpoint()  # not enough written yet
    for number in range(CHECKPOINT_CHANGES, 5 * CHECKPOINT_CHANGES):
        store.touch_meta(probe=str(number))
    assert not store.checkpoint(quiet=False)  # busy: only at ten times as much
    assert store.checkpoint()
    assert _in_the_database_file(tmp_path / "s", "probe") == str(5 * CHECKPOINT_CHANGES - 1)
    assert not store.checkpoint()
    for number in range(1100):  # past SQLite's 1,000 pages: one commit each
        store.touch_meta(probe=str(number))
    assert _in_the_database_file(tmp_path / "s", "probe") == str(5 * CHECKPOINT_CHANGES - 1)
    assert store.checkpoint(quiet=False)  # past ten times as much
    assert _in_the_database_file(tmp_path / "s", "probe") == "1099"
    store.reconnect()  # a new connection defers as well
    assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    store.close()
    other = SQLiteStore(tmp_path / "s")  # any other connection keeps SQLite's own
    assert other._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
    assert not other.checkpoint()
    other.close()


def _log_bytes(store: SQLiteStore) -> int:
    return os.stat(f"{store.db_path}-wal").st_size


def test_the_log_shrinks_back_to_its_limit_after_a_checkpoint(tmp_path: Path) -> None:
    """SQLite reuses its log from the start after a checkpoint and never
    shrinks the file by itself: without a `journal_size_limit` a burst's
    log kept its high-water mark of disk for good (on a small filesystem,
    the space an operator freed went to it). Every connection bounds it."""
    store = SQLiteStore(tmp_path / "s")
    other = SQLiteStore(tmp_path / "s")
    for connection in (store, other):
        limit = connection._conn.execute("PRAGMA journal_size_limit").fetchone()[0]
        assert 0 < limit <= 1 << 20
    store.defer_checkpoints()
    for number in range(800):  # a burst: one page of log or more per commit
        store.touch_meta(probe=str(number) * 500)
    assert _log_bytes(store) > 3 << 20
    assert store.checkpoint()
    store.touch_meta(probe="after")  # the first commit after it restarts the log
    assert _log_bytes(store) <= 1 << 20
    other.close()
    store.close()


def test_a_disk_full_probe_folds_the_log_and_truncates_it(tmp_path: Path) -> None:
    """The log's pages are space the store holds: a disk-full episode's
    probe gives them back (a truncating checkpoint) before it counts what
    is free, so the episode ends once the operator frees space, however
    large the log had grown."""
    store = SQLiteStore(tmp_path / "s")
    store.defer_checkpoints()
    for number in range(300):
        store.touch_meta(probe=str(number) * 500)
    assert _log_bytes(store) > 1 << 20
    store.probe_space(0)
    assert _log_bytes(store) == 0
    assert _in_the_database_file(tmp_path / "s", "probe") == "299" * 500
    assert not store.checkpoint()  # folded: nothing owed
    store.close()
