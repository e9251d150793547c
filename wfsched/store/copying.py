"""Queries behind `wfsched store copy` (mixed into both stores).

A copy moves every row of every table, keys included (run and ledger
sequence numbers are the identities operators and the ledger refer to), in
the order foreign keys need. Reading streams; writing goes in batches.
`wfsched.api.store_copy` decides and owns the transactions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import islice
from typing import Any

from wfsched.store.connection import Connected

RUNTIME_TABLES = ("leader_lease", "hosts")
"""Not copied: who leads and which hosts are alive are facts of the running
supervisors (a copy is refused while any runs), not of the store's history."""

COPY_TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "schedules",
        (
            "id",
            "revision",
            "definition",
            "created_at",
            "updated_at",
            "paused",
            "deleted_at",
            "exhausted",
            "blocked_reason",
            "consumed_through",
            "candidate_at",
            "candidate_why",
            "next_due",
        ),
    ),
    ("revisions", ("schedule_id", "revision", "definition", "created_at", "watermark")),
    (
        "runs",
        (
            "seq",
            "schedule_id",
            "kind",
            "scheduled_at",
            "state",
            "reason",
            "exit_code",
            "revision",
            "invocation",
            "admitted_at",
            "started_at",
            "finished_at",
            "attempt",
            "host",
        ),
    ),
    (
        "attempts",
        (
            "run_seq",
            "attempt",
            "state",
            "started_at",
            "finished_at",
            "exit_code",
            "reason",
            "shim_pid",
            "shim_start_time",
            "stdout_tail",
            "stderr_tail",
        ),
    ),
    (
        "occurrences",
        (
            "seq",
            "schedule_id",
            "scheduled_at",
            "last_at",
            "count",
            "summary",
            "state",
            "reason",
            "revision",
            "run_seq",
            "recorded_at",
            "ledger_pos",
        ),
    ),
    (
        "requests",
        (
            "seq",
            "kind",
            "schedule_id",
            "run_seq",
            "payload",
            "created_at",
            "state",
            "result",
            "handled_at",
        ),
    ),
    ("meta", ("key", "value")),
    (
        "notifications",
        (
            "seq",
            "schedule_id",
            "run_seq",
            "scheduled_at",
            "attempt",
            "state",
            "reason",
            "started_at",
            "finished_at",
        ),
    ),
    (
        "applied",
        ("schedule_id", "revision", "applied_at", "source_path", "source_digest"),
    ),
)
"""Every table with every column, parents before children."""

BATCH = 5000


def batches(rows: Iterable[tuple[Any, ...]], size: int = BATCH) -> Iterator[list[tuple[Any, ...]]]:
    iterator = iter(rows)
    while chunk := list(islice(iterator, size)):
        yield chunk


class CopyQueries(Connected):
    def is_empty(self) -> bool:
        """No row in any table: the only kind of store a copy may write into."""
        return all(
            self._execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is None
            for table, _ in COPY_TABLES
        )

    def export_rows(self, table: str, columns: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
        """Every row of `table`, in key order, streamed."""
        cursor = self._execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY 1, 2")
        while rows := cursor.fetchmany(BATCH):
            yield from (tuple(row) for row in rows)

    def import_rows(
        self, table: str, columns: tuple[str, ...], rows: Iterable[tuple[Any, ...]]
    ) -> int:
        """Insert `rows` as they are (keys included); how many.

        The table's secondary indexes are dropped for the insert and then
        created again from their own stored definitions, in the caller's
        transaction: one sorted build per index instead of a B-tree insert
        per row and index (a million ledger rows: about 40 % less CPU).
        Building a unique index checks every row as inserting would: a
        duplicate fails the copy and rolls it back, and `audit` compares the
        schema with the migrations afterwards."""
        marks = ", ".join("?" for _ in columns)
        statement = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
        indexes = self._execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
            " AND sql IS NOT NULL ORDER BY name",
            (table,),
        ).fetchall()
        for name, _definition in indexes:
            self._execute(f"DROP INDEX {name}")
        count = 0
        for chunk in batches(rows):
            self._execute_many(statement, chunk)
            count += len(chunk)
        for _name, definition in indexes:
            self._execute(definition)
        return count

    def after_import(self) -> None:
        """Key generators past the copied keys (SQLite's AUTOINCREMENT follows
        explicit keys by itself; PostgreSQL overrides this)."""
