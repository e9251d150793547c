"""The SQL that differs between database engines, in one object per engine.

Every statement in the store is written once, in the SQL that SQLite and
PostgreSQL share (`?` placeholders, row-value comparisons, partial indexes,
`COALESCE`, correlated sub-queries). What they do not share is asked of the
store's dialect: transactions and savepoints, the schema version, the schema
catalogue, upserts, string aggregation, the id of an inserted row, and the
migrations (DDL: types, autoincrement, triggers). A second engine is then a
new `Dialect` subclass with its migrations, not an edit across the store.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cache
from typing import Any

import wfsched.store.migrations as sqlite_migrations

Migration = tuple[int, str, list[str]]


class Dialect(ABC):
    """The engine-specific fragments; each method returns SQL text."""

    name: str

    @property
    @abstractmethod
    def migrations(self) -> Sequence[Migration]:
        """(version, why, statements) entries; applied in version order."""

    @abstractmethod
    def sql(self, statement: str) -> str:
        """The statement in the driver's placeholder style (written with `?`)."""

    @abstractmethod
    def begin_write(self) -> str:
        """Open a write transaction that holds the write lock from its start."""

    def savepoint(self, name: str) -> tuple[str, str, str]:
        """(create, roll back to, release) statements for a nested transaction."""
        return f"SAVEPOINT {name}", f"ROLLBACK TO SAVEPOINT {name}", f"RELEASE SAVEPOINT {name}"

    @abstractmethod
    def get_schema_version(self) -> str:
        """A query answering the schema version as one integer."""

    @abstractmethod
    def set_schema_version(self, version: int) -> str:
        """Record `version`, inside the migration's own transaction."""

    @abstractmethod
    def schema_objects(self) -> str:
        """(kind, name, sql) of every table, index and trigger the schema holds."""

    @abstractmethod
    def expected_schema(self) -> dict[tuple[str, str], str]:
        """(kind, name) -> SQL of every object the migrations create."""

    def upsert(self, table: str, key: str, columns: Sequence[str]) -> str:
        """Insert `key, *columns`, or update `columns` where `key` exists."""
        names = ", ".join((key, *columns))
        marks = ", ".join("?" for _ in (key, *columns))
        updates = ", ".join(f"{column} = excluded.{column}" for column in columns)
        return (
            f"INSERT INTO {table} ({names}) VALUES ({marks})"
            f" ON CONFLICT({key}) DO UPDATE SET {updates}"
        )

    @abstractmethod
    def data_version(self) -> str:
        """A query answering one integer that changes when another connection
        commits (and only then), so a reader knows when to look again."""

    @abstractmethod
    def highest_seq(self, table: str) -> str:
        """An expression: the highest key `table`'s seq generator ever handed out
        (NULL if none), deleted rows included."""

    @abstractmethod
    def next_ledger_position(self) -> str:
        """An expression for a new ledger row's position: the seq it is about to
        get, above every seq (and so every position) the table ever used. Each
        statement of an executemany sees the sequence its predecessor advanced.
        (A database trigger does the same for an insert that names no position.)"""

    @abstractmethod
    def group_concat(self, expression: str) -> str:
        """Aggregate `expression` into one comma-separated string."""

    def returning_key(self) -> str:
        """What an INSERT whose key `inserted_id` reads ends with ("" when
        the driver reports the key itself)."""
        return ""

    @abstractmethod
    def inserted_id(self, cursor: Any) -> int:
        """The generated key of the row the cursor's INSERT added (the
        INSERT ends with `returning_key()`)."""


class SQLiteDialect(Dialect):
    name = "sqlite"

    @property
    def migrations(self) -> Sequence[Migration]:
        # Read at each use, not bound at import: tests swap the list.
        return sqlite_migrations.MIGRATIONS

    def sql(self, statement: str) -> str:
        return statement

    def begin_write(self) -> str:
        # IMMEDIATE takes the write lock up front instead of failing on upgrade.
        return "BEGIN IMMEDIATE"

    def get_schema_version(self) -> str:
        return "PRAGMA user_version"

    def set_schema_version(self, version: int) -> str:
        return f"PRAGMA user_version = {int(version)}"

    def schema_objects(self) -> str:
        return (
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL"
            " AND name NOT LIKE 'sqlite_%'"
        )

    def expected_schema(self) -> dict[tuple[str, str], str]:
        return _sqlite_expected_schema()

    def data_version(self) -> str:
        return "PRAGMA data_version"

    def highest_seq(self, table: str) -> str:
        return f"(SELECT MAX(seq) FROM sqlite_sequence WHERE name = '{table}')"

    def next_ledger_position(self) -> str:
        return "COALESCE((SELECT seq + 1 FROM sqlite_sequence WHERE name = 'occurrences'), 1)"

    def group_concat(self, expression: str) -> str:
        return f"GROUP_CONCAT({expression})"

    def inserted_id(self, cursor: Any) -> int:
        return int(cursor.lastrowid or 0)


SQLITE = SQLiteDialect()


@cache
def _sqlite_expected_schema() -> dict[tuple[str, str], str]:
    """Built by running the migrations in a throwaway in-memory database, so
    the audit's idea of the schema can never drift from them."""
    conn = sqlite3.connect(":memory:")
    try:
        for _number, _why, statements in sorted(SQLITE.migrations, key=lambda m: m[0]):
            for statement in statements:
                conn.execute(statement)
        rows = conn.execute(SQLITE.schema_objects()).fetchall()
    finally:
        conn.close()
    return {(kind, name): sql for kind, name, sql in rows}
