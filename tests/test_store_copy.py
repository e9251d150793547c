"""`wfsched store copy`: a whole store into an empty one of either kind, audited."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import psycopg
from conftest import CliRun

from tests.test_retention import T0, build
from wfsched.store import SQLiteStore, Store, open_location, resolve_store
from wfsched.store.copying import COPY_TABLES, RUNTIME_TABLES
from wfsched.store.ownership import Ownership
from wfsched.store.postgres import PostgresStore


def everything(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    with store.snapshot():
        return {table: list(store.export_rows(table, columns)) for table, columns in COPY_TABLES}


def files(root: Path) -> list[tuple[str, bytes]]:
    return sorted(
        (str(path.relative_to(root)), path.read_bytes())
        for path in root.rglob("*")
        if path.is_file()
    )


def test_sqlite_to_postgresql_and_back_keeps_every_row_and_file(
    tmp_path: Path, pg_url: str, run_cli: CliRun
) -> None:
    source = build(tmp_path / "source")
    first_attempt = everything(source.store)["attempts"][0]
    with source.store.atomic():
        # Output tails are bytes (any byte value) and travel both ways unchanged.
        source.store.update_attempt(
            first_attempt[0], first_attempt[1], stdout_tail=bytes(range(256)), stderr_tail=b""
        )
    original = everything(source.store)
    source.store.close()
    assert original["occurrences"] and original["runs"] and original["revisions"]
    assert original["attempts"][0][-2:] == (bytes(range(256)), b"")
    # Each run's host travels with it (the last column of runs).
    assert {row[-1] for row in original["runs"]} == {socket.gethostname()}
    code, out, err = run_cli(
        "--store", str(tmp_path / "source"), "store", "copy", "--to", pg_url, "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["audit"]["ok"] is True
    assert report["copied"] == {table: len(rows) for table, rows in original.items()}
    code, out, err = run_cli("--store", pg_url, "store", "copy", "--to", str(tmp_path / "back"))
    assert code == 0, err
    assert out.splitlines()[-1] == "audit of the copy: ok"
    back = SQLiteStore(tmp_path / "back")
    try:
        assert everything(back) == original
        assert files(back.runs_dir) == files(tmp_path / "source" / "runs")
    finally:
        back.close()
    # Keys continue after the copied ones on PostgreSQL too.
    copied = PostgresStore(resolve_store(pg_url))
    try:
        highest = max(row[0] for row in original["runs"])
        with copied.atomic():
            assert copied.insert_run("a", "manual", T0, 1, "{}", T0) == highest + 1
    finally:
        copied.close()


def test_the_copy_columns_are_every_column_of_the_schema(tmp_path: Path) -> None:
    """A migration that adds a column must add it to the copy too."""
    import sqlite3

    SQLiteStore(tmp_path / "s").close()
    db = sqlite3.connect(tmp_path / "s" / "wfsched.db")
    try:
        for table, columns in COPY_TABLES:
            assert tuple(row[1] for row in db.execute(f"PRAGMA table_info({table})")) == columns
        tables = {
            name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    finally:
        db.close()
    assert tables - {"sqlite_sequence", *RUNTIME_TABLES} == {table for table, _ in COPY_TABLES}


def test_refused_while_a_supervisor_owns_either_side_and_nothing_is_written(
    tmp_path: Path, pg_url: str, run_cli: CliRun
) -> None:
    build(tmp_path / "source").store.close()
    owner = Ownership(tmp_path / "source" / "supervisor.lock")
    owner.acquire()
    try:
        code, _, err = run_cli("--store", str(tmp_path / "source"), "store", "copy", "--to", pg_url)
    finally:
        owner.release()
    assert code == 4 and "another supervisor" in err and err.count("\n") == 1
    destination = PostgresStore(resolve_store(pg_url))
    try:
        assert destination.is_empty()
        destination.take_ownership()
        code, _, err = run_cli("--store", str(tmp_path / "source"), "store", "copy", "--to", pg_url)
        assert code == 4 and "another supervisor" in err
        assert destination.is_empty()
    finally:
        destination.close()


def test_a_destination_with_anything_in_it_is_refused(
    tmp_path: Path, run_cli: CliRun, make_definition: Any
) -> None:
    build(tmp_path / "source").store.close()
    other = tmp_path / "other"
    assert run_cli("--store", str(other), "create", str(make_definition("x")))[0] == 0
    code, _, err = run_cli("--store", str(tmp_path / "source"), "store", "copy", "--to", str(other))
    assert code == 4 and "not empty" in err
    store = open_location(resolve_store(other), create=False)
    assert store is not None
    try:
        assert [row.id for row in store.list_schedules()] == ["x"]
    finally:
        store.close()


def test_a_missing_source_is_not_found_and_creates_nothing(tmp_path: Path, run_cli: CliRun) -> None:
    code, _, err = run_cli(
        "--store", str(tmp_path / "none"), "store", "copy", "--to", str(tmp_path / "dest")
    )
    assert code == 3 and "nothing to copy" in err
    assert not (tmp_path / "none").exists() and not (tmp_path / "dest").exists()


def test_a_store_cannot_be_copied_onto_itself(tmp_path: Path, pg_url: str, run_cli: CliRun) -> None:
    alias = pg_url.replace("postgresql://", "postgres://", 1)
    code, _, err = run_cli("--store", pg_url, "store", "copy", "--to", alias)
    assert code == 4 and "onto itself" in err
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT to_regclass('schedules')").fetchone() == (None,)


def test_the_bulk_load_into_postgresql_still_refuses_a_duplicate_and_keeps_the_schema(
    tmp_path: Path, pg_url: str, run_cli: CliRun
) -> None:
    """The copy loads each PostgreSQL table without its indexes and foreign keys,
    then rebuilds them: a source whose ledger holds one instant twice (a damaged
    SQLite store) still fails the copy, which leaves no row and the full schema."""
    import sqlite3

    source = build(tmp_path / "source")
    source.store.close()
    db = sqlite3.connect(tmp_path / "source" / "wfsched.db")
    db.execute("DROP INDEX occurrences_instant")
    db.execute(
        "INSERT INTO occurrences (schedule_id, scheduled_at, state, revision, recorded_at)"
        " SELECT schedule_id, scheduled_at, 'superseded', revision, recorded_at"
        " FROM occurrences WHERE summary = 0 LIMIT 1"
    )
    db.commit()
    db.close()
    code, _out, err = run_cli("--store", str(tmp_path / "source"), "store", "copy", "--to", pg_url)
    assert code == 1, err
    assert err.count("\n") == 1 and "occurrences_instant" in err, err
    copied = PostgresStore(resolve_store(pg_url))
    try:
        assert copied.is_empty()
        assert copied.schema_problems() == []
    finally:
        copied.close()


def test_the_bulk_load_into_sqlite_still_refuses_a_duplicate_and_keeps_the_schema(
    tmp_path: Path, pg_url: str, run_cli: CliRun
) -> None:
    """The copy also loads each SQLite table without its secondary indexes and
    builds them afterwards: a source whose ledger holds one instant twice (a
    damaged PostgreSQL store) fails the copy, which leaves no row and the full
    schema, indexes included."""
    source = build(tmp_path / "source")
    source.store.close()
    code, _out, err = run_cli("--store", str(tmp_path / "source"), "store", "copy", "--to", pg_url)
    assert code == 0, err
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP INDEX occurrences_instant")
        conn.execute(
            "INSERT INTO occurrences (schedule_id, scheduled_at, state, revision, recorded_at)"
            " SELECT schedule_id, scheduled_at, 'superseded', revision, recorded_at"
            " FROM occurrences WHERE summary = 0 LIMIT 1"
        )
    destination = tmp_path / "back"
    code, _out, err = run_cli("--store", pg_url, "store", "copy", "--to", str(destination))
    assert code == 1, err
    assert err.count("\n") == 1 and "UNIQUE" in err, err
    copied = SQLiteStore(destination)
    try:
        assert copied.is_empty()
        assert copied.schema_problems() == []
    finally:
        copied.close()
