"""The store layer: the only package that speaks SQL.

`Store` is the interface everything else programs against
(`wfsched.store.interface`); `SQLiteStore` and `PostgresStore` implement it,
opened through `open_location` so callers never name the backend.
"""

from __future__ import annotations

from pathlib import Path

from wfsched.store.interface import Store
from wfsched.store.location import StoreLocation, require_psycopg, resolve_store
from wfsched.store.paths import default_store_path, resolve_store_path
from wfsched.store.rows import (
    PRUNED_STATE,
    AttemptRow,
    LedgerItem,
    LedgerRow,
    OccurrenceRow,
    PrunableRow,
    RequestRow,
    RevisionRow,
    RunAttempts,
    RunRow,
    ScheduleRow,
    SchemaProblem,
    parse_run_id,
    run_id,
)
from wfsched.store.sqlite import DB_NAME, LOCK_NAME, RUNS_DIR, SQLiteStore, open_existing_store


def open_store(
    root: str | Path, *, create: bool = True, busy_timeout: float | None = None
) -> Store:
    """The store at `root` (a directory: SQLite), created if missing unless
    `create` is False. `busy_timeout`: seconds a write waits for another
    process's transaction before the store counts as locked (default 15)."""
    return SQLiteStore(root, create=create, busy_timeout=busy_timeout)


def open_location(
    location: StoreLocation,
    *,
    create: bool,
    busy_timeout: float | None = None,
    read_only: bool = False,
) -> Store | None:
    """The store `location` names; with `create=False` a store that does not exist
    yet is None (reading commands create nothing: no directory, no schema).
    `busy_timeout` is SQLite's wait for a lock held by another writer.
    `read_only`: the database itself refuses writes on this connection
    (SQLite `mode=ro`, PostgreSQL `default_transaction_read_only`); implies
    `create=False`."""
    create = create and not read_only
    if location.is_postgres:
        require_psycopg()
        from wfsched.store.postgres import NoStore, PostgresStore

        try:
            return PostgresStore(
                location, create=create, runs_dir=location.runs_dir, read_only=read_only
            )
        except NoStore:
            return None
    assert location.path is not None
    if not create and not (location.path / DB_NAME).exists():
        return None
    return SQLiteStore(
        location.path,
        create=create,
        busy_timeout=busy_timeout,
        runs_dir=location.runs_dir,
        read_only=read_only,
    )


__all__ = [
    "DB_NAME",
    "LOCK_NAME",
    "PRUNED_STATE",
    "RUNS_DIR",
    "AttemptRow",
    "LedgerItem",
    "LedgerRow",
    "OccurrenceRow",
    "PrunableRow",
    "RequestRow",
    "RevisionRow",
    "RunAttempts",
    "RunRow",
    "SQLiteStore",
    "ScheduleRow",
    "SchemaProblem",
    "Store",
    "StoreLocation",
    "default_store_path",
    "open_existing_store",
    "open_location",
    "open_store",
    "parse_run_id",
    "resolve_store",
    "resolve_store_path",
    "run_id",
]
