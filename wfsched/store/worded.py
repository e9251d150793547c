"""The SQLite connection with resource errors turned into words (WordedConnection)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from wfsched.store.resource_faults import from_sqlite


class WordedConnection:
    """The sqlite3 connection, with resource errors turned into words.

    Every statement of the store goes through `execute`/`executemany`, so
    this is the one place where "database or disk is full" becomes "the
    store's filesystem is full: free space under PATH" (a StoreUnavailable,
    exit 1 in the CLI, a fault episode in the supervisor). Other errors
    (corruption, constraint violations, bugs) pass through unchanged.
    """

    def __init__(self, conn: sqlite3.Connection, db_path: Path, busy_timeout: float) -> None:
        self.raw = conn
        self._db_path = db_path
        self._busy_timeout = busy_timeout

    @property
    def in_transaction(self) -> bool:
        return self.raw.in_transaction

    def execute(self, sql: str, parameters: Sequence[Any] = ()) -> sqlite3.Cursor:
        try:
            return self.raw.execute(sql, parameters)
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> sqlite3.Cursor:
        try:
            return self.raw.executemany(sql, rows)
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc

    def close(self) -> None:
        self.raw.close()

    def _translate(self, exc: sqlite3.Error) -> BaseException:
        return from_sqlite(exc, self._db_path, self._busy_timeout) or exc
