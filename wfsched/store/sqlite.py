"""The SQLite store: the `Store` interface over one SQLite database.

Its statements live here and in the query groups it combines
(`wfsched.store.audit_queries`, `wfsched.store.retention_queries`); what is SQLite-specific
among them is asked of `wfsched.store.dialect.SQLITE`.

One database per store directory (WAL, synchronous=FULL, foreign keys).
Writes go through `atomic()`, which opens `BEGIN IMMEDIATE` so a writer takes
the lock up front instead of failing on upgrade; nested use becomes a
savepoint. Administration commands and the supervisor share the database;
each operation is one transaction, so they serialize cleanly.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wfsched.errors import NotFoundError, StoreError
from wfsched.store.audit_queries import AuditQueries
from wfsched.store.batching import chunked
from wfsched.store.copying import CopyQueries
from wfsched.store.dialect import SQLITE
from wfsched.store.lease import HostRow, LeaseRow
from wfsched.store.metrics_queries import MetricsQueries
from wfsched.store.operator import OperatorQueries
from wfsched.store.ownership import Ownership
from wfsched.store.retention_queries import RetentionQueries
from wfsched.store.rows import (
    AttemptEnd,
    AttemptRow,
    OccurrenceRow,
    RequestRow,
    RunRow,
    ScheduleRow,
)
from wfsched.store.web_queries import WebQueries
from wfsched.store.worded import WordedConnection

if TYPE_CHECKING:
    from wfsched.store.commit_watch import CommitWatch

DB_NAME = "wfsched.db"
LOCK_NAME = "supervisor.lock"
RUNS_DIR = "runs"
BUSY_TIMEOUT_MS = 15000
DRAINING_PREFIX = "draining:"
"""Meta keys `draining:<host>`: a supervisor draining on that host (`set_draining`)."""

_SCHEDULE_COLUMNS = (
    "id, revision, definition, created_at, updated_at, paused, deleted_at, exhausted,"
    " blocked_reason, consumed_through, candidate_at, candidate_why, next_due"
)
_SCHEDULE_MUTABLE = frozenset(
    {
        "revision",
        "definition",
        "updated_at",
        "paused",
        "deleted_at",
        "exhausted",
        "blocked_reason",
        "consumed_through",
        "candidate_at",
        "candidate_why",
        "next_due",
    }
)
_RUN_COLUMNS = (
    "seq, schedule_id, kind, scheduled_at, state, reason, exit_code, revision, invocation,"
    " admitted_at, started_at, finished_at, attempt, host"
)
RUN_COLUMNS = _RUN_COLUMNS
"""The run columns in `RunRow`'s order (the PostgreSQL store's own queries use them too)."""
_RUN_MUTABLE = frozenset(
    {"state", "reason", "exit_code", "started_at", "finished_at", "attempt", "host"}
)
_ATTEMPT_COLUMNS = (
    "run_seq, attempt, state, started_at, finished_at, exit_code, reason, shim_pid, shim_start_time"
)
_ATTEMPT_MUTABLE = frozenset(
    {
        "state",
        "started_at",
        "finished_at",
        "exit_code",
        "reason",
        "shim_pid",
        "shim_start_time",
        "stdout_tail",
        "stderr_tail",
    }
)
# State lists are SQL literals, never bound parameters: SQLite only uses the
# partial index `runs_unfinished` when the query repeats its WHERE literally.
_REQUEST_COLUMNS = "seq, kind, schedule_id, run_seq, payload, created_at, state, result, handled_at"
_UNFINISHED = "state IN ('admitted', 'running', 'interrupted')"
_EXECUTING = f"{_UNFINISHED} AND state IN ('admitted', 'running')"
_SCHEDULE_BLOCKED = (
    "EXISTS (SELECT 1 FROM schedules s WHERE s.id = r.schedule_id AND s.blocked_reason IS NOT NULL)"
)
_OCCURRENCE_SELECT = (
    "SELECT o.seq, o.schedule_id, o.scheduled_at, o.last_at, o.count, o.summary, o.state,"
    " o.reason, o.revision, o.run_seq, o.recorded_at, r.state, r.reason, r.admitted_at,"
    " r.started_at, r.finished_at, o.ledger_pos"
    " FROM occurrences o LEFT JOIN runs r ON r.seq = o.run_seq"
)


CHECKPOINT_CHANGES = 100
"""Rows a supervisor's connection changes between two checkpoints: an
admission with its mark writes about 13 log pages for 5 rows, so this is
about 260 pages, 1 MiB of log (SQLite's own 1,000 pages, 4 MiB, filled a
small filesystem by itself); an idle supervisor, whose only writes are its
liveness stamps (one row every 5 s), checkpoints about every 8 minutes."""
JOURNAL_SIZE_LIMIT = 1 << 20
"""Bytes of write-ahead log every connection keeps once a checkpoint has
folded it (`PRAGMA journal_size_limit`): SQLite reuses its log file from
the start after a checkpoint and never shrinks it by itself, so a burst's
log would hold its high-water mark of disk for good."""


def _placeholders(values: Sequence[object]) -> str:
    return ",".join("?" for _ in values)


SQLITE_MAGIC = b"SQLite format 3\x00"


def check_database_file(path: Path) -> None:
    """StoreError, before anything is created or locked, when `path` exists
    and is not an SQLite database (its header says so in 16 bytes): SQLite
    itself would only notice after the journal and lock files exist."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot open store {path.parent}: {exc}") from exc
    if header and header != SQLITE_MAGIC:
        raise StoreError(
            f"{path}: not a usable wfsched database: file is not a database; restore it from"
            " a backup or point --store elsewhere (nothing was changed)"
        )


class SQLiteStore(
    AuditQueries, RetentionQueries, MetricsQueries, OperatorQueries, CopyQueries, WebQueries
):
    """A store directory: `wfsched.db`, `runs/`, `supervisor.lock`.

    Implements `wfsched.store.interface.Store`. Query groups for `audit` and
    retention live in their own modules as mixins; this class holds the
    connection and the core statements.
    """

    dialect = SQLITE
    _ownership: Ownership | None = None
    driver_errors: tuple[type[Exception], ...] = (sqlite3.Error,)

    def __init__(
        self,
        root: str | Path,
        *,
        create: bool = True,
        busy_timeout: float | None = None,
        runs_dir: Path | None = None,
        read_only: bool = False,
    ) -> None:
        self.read_only = read_only
        self.busy_timeout = BUSY_TIMEOUT_MS / 1000 if busy_timeout is None else busy_timeout
        self.root = Path(os.path.realpath(os.path.expanduser(str(root))))
        self.db_path = self.root / DB_NAME
        self.lock_path = self.root / LOCK_NAME
        self.runs_dir = runs_dir or self.root / RUNS_DIR
        # A runs root given elsewhere is created by the supervisor that uses
        # it, never by opening the store (a reading command creates nothing).
        self._own_runs_dir = runs_dir is None
        self.display = str(self.root)
        self._schema_place = str(self.db_path)
        if not self.db_path.exists() and not create:
            raise StoreError(f"no store at {self.root}; create a schedule there first")
        check_database_file(self.db_path)
        self._checkpoints_deferred = False
        self._folded_at = 0  # the connection's total_changes at the last checkpoint
        self._create = create
        self._conn = self._connect()
        self._migrate()
        if create and self._own_runs_dir:
            # Only once the database proved usable: a command refused by a
            # broken store leaves nothing behind.
            self._make_runs_dir()

    # -- connection and transactions ---------------------------------------

    def _connect(self) -> WordedConnection:
        if self.read_only:
            return self._connect_read_only()
        old_umask = os.umask(0o077)
        try:
            if self._create:
                self.root.mkdir(parents=True, exist_ok=True)
            raw = sqlite3.connect(self.db_path, isolation_level=None, timeout=self.busy_timeout)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open store {self.root}: {exc}") from exc
        finally:
            os.umask(old_umask)
        conn = WordedConnection(raw, self.db_path, self.busy_timeout)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
            if self._checkpoints_deferred:
                conn.execute("PRAGMA wal_autocheckpoint = 0")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.db_path}: not a usable wfsched database: {exc}") from exc
        return conn

    def _make_runs_dir(self) -> None:
        old_umask = os.umask(0o077)
        try:
            self.runs_dir.mkdir(exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot open store {self.root}: {exc}") from exc
        finally:
            os.umask(old_umask)

    def _connect_read_only(self) -> WordedConnection:
        """A connection SQLite itself refuses to write through (`mode=ro`):
        the web view's guarantee that it changes nothing does not rest on its
        own code. Nothing is created; the journal mode is the writers' (WAL)."""
        uri = f"{self.db_path.as_uri()}?mode=ro"
        try:
            # One reader thread uses it; the server closes it from its main
            # thread once the others have stopped.
            raw = sqlite3.connect(
                uri,
                uri=True,
                isolation_level=None,
                timeout=self.busy_timeout,
                check_same_thread=False,
            )
            conn = WordedConnection(raw, self.db_path, self.busy_timeout)
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.root} read-only: {exc}") from exc
        return conn

    def _migrate(self, version: int | None = None) -> None:
        """Every migration above the stored version, in order, each with its
        version, in one transaction (taken under the write lock, so two first
        opens cannot both migrate; versions may skip numbers). `version`: the
        stored one when the caller has just read it (on a server, a read is
        two round trips, and every command opens a store)."""
        migrations = sorted(self.dialect.migrations, key=lambda migration: migration[0])
        latest = migrations[-1][0]
        if version is None:
            version = self.schema_version
        if version > latest:
            raise StoreError(
                f"{self._schema_place}: schema version {version} is newer than this wfsched"
                f" understands ({latest}); upgrade wfsched to use this store"
            )
        if version == latest:
            return
        if self.read_only:
            raise StoreError(
                f"{self._schema_place}: schema version {version} is older than this wfsched"
                f" ({latest}); a read-only reader cannot upgrade it: run any writing"
                " command (or the supervisor) of this version once"
            )
        with self.atomic():
            version = self.schema_version
            for number, _why, statements in migrations:
                if number <= version:
                    continue
                for statement in statements:
                    self._raw(statement)
                self._raw(self.dialect.set_schema_version(number))

    def _raw(self, statement: str) -> None:
        """A schema statement, run as written."""
        self._execute(statement)

    def close(self) -> None:
        self._conn.close()
        ownership, self._ownership = self._ownership, None
        if ownership is not None:
            ownership.release()

    def join_supervisors(self) -> None:
        """Nothing to join: the one supervisor took `supervisor.lock` before
        it opened the store."""

    def take_ownership(self) -> None:
        ownership = Ownership(self.lock_path)
        ownership.acquire()
        self._ownership = ownership

    def reconnect(self) -> None:
        """A fresh connection (the database file stays where it is)."""
        self._conn.close()
        self._conn = self._connect()
        self._folded_at = 0

    @property
    def schema_version(self) -> int:
        return int(self._execute(self.dialect.get_schema_version()).fetchone()[0])

    # -- schedules -----------------------------------------------------------

    def insert_schedule(
        self,
        schedule_id: str,
        definition: str,
        now: float,
        consumed_through: int,
        next_due: int | None,
        exhausted: bool = False,
    ) -> None:
        self.insert_schedules(
            [(schedule_id, definition, now, consumed_through, next_due, exhausted)]
        )

    def insert_schedules(
        self, rows: Sequence[tuple[str, str, float, int, int | None, bool]]
    ) -> None:
        # Two statements for the lot (apply creates thousands in one go).
        if not rows:
            return
        self._execute_many(
            "INSERT INTO schedules (id, revision, definition, created_at, updated_at,"
            " consumed_through, next_due, exhausted) VALUES (?, 1, ?, ?, ?, ?, ?, ?)",
            [
                (schedule_id, definition, now, now, consumed, next_due, int(exhausted))
                for schedule_id, definition, now, consumed, next_due, exhausted in rows
            ],
        )
        self._execute_many(
            "INSERT INTO revisions (schedule_id, revision, definition, created_at, watermark)"
            " VALUES (?, 1, ?, ?, ?)",
            [
                (schedule_id, definition, now, consumed)
                for schedule_id, definition, now, consumed, _next_due, _exhausted in rows
            ],
        )

    def insert_revision(
        self, schedule_id: str, revision: int, definition: str, now: float, watermark: int
    ) -> None:
        """`watermark`: the schedule's consumed_through as this revision takes
        over; it owes the calendar instants after it (audit reads it)."""
        self._execute(
            "INSERT INTO revisions (schedule_id, revision, definition, created_at, watermark)"
            " VALUES (?, ?, ?, ?, ?)",
            (schedule_id, revision, definition, now, watermark),
        )

    def get_schedule(self, schedule_id: str) -> ScheduleRow | None:
        row = self._execute(
            f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE id = ?", (schedule_id,)
        ).fetchone()
        return _schedule(row) if row else None

    def list_schedules(self, include_deleted: bool = False) -> list[ScheduleRow]:
        where = "" if include_deleted else " WHERE deleted_at IS NULL"
        rows = self._execute(f"SELECT {_SCHEDULE_COLUMNS} FROM schedules{where} ORDER BY id")
        return [_schedule(row) for row in rows]

    def schedules_by_id(self, ids: Iterable[str]) -> dict[str, ScheduleRow]:
        wanted = list(ids)
        found: dict[str, ScheduleRow] = {}
        for chunk in chunked(wanted):
            rows = self._execute(
                f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE id IN ({_placeholders(chunk)})",
                chunk,
            )
            for row in rows:
                found[row[0]] = _schedule(row)
        return found

    def update_schedule(self, schedule_id: str, **fields: Any) -> None:
        unknown = set(fields) - _SCHEDULE_MUTABLE
        if unknown:
            raise ValueError(f"not mutable: {sorted(unknown)}")
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self._write(
            f"UPDATE schedules SET {assignments} WHERE id = ?", (*fields.values(), schedule_id)
        )

    def due_schedules(self, now: int, limit: int) -> list[ScheduleRow]:
        """Schedules the tick must look at: due by calendar, or holding a candidate."""
        rows = self._execute(
            f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE next_due <= ?"
            f" UNION SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE candidate_at IS NOT NULL"
            " AND blocked_reason IS NULL AND paused = 0 AND deleted_at IS NULL"
            " ORDER BY id LIMIT ?",
            (now, limit),
        )
        return [_schedule(row) for row in rows]

    def blocked_schedules(self) -> list[ScheduleRow]:
        rows = self._execute(
            f"SELECT {_SCHEDULE_COLUMNS} FROM schedules"
            " WHERE blocked_reason IS NOT NULL AND deleted_at IS NULL ORDER BY id"
        )
        return [_schedule(row) for row in rows]

    def earliest_due_schedule(self) -> ScheduleRow | None:
        """The schedule due next (an index seek on next_due)."""
        row = self._execute(
            f"SELECT {_SCHEDULE_COLUMNS} FROM schedules WHERE next_due IS NOT NULL"
            " ORDER BY next_due LIMIT 1"
        ).fetchone()
        return _schedule(row) if row else None

    def insert_occurrence(
        self,
        schedule_id: str,
        scheduled_at: int,
        state: str,
        revision: int,
        recorded_at: float,
        *,
        reason: str | None = None,
        run_seq: int | None = None,
        last_at: int | None = None,
        count: int | None = None,
        summary: bool = False,
        ledger_pos: int | None = None,
    ) -> int:
        """A ledger row, appended to its schedule's history unless
        `ledger_pos` places it (retention's `pruned` rows only)."""
        cursor = self._execute(
            "INSERT INTO occurrences (schedule_id, scheduled_at, last_at, count, summary, state,"
            " reason, revision, run_seq, recorded_at, ledger_pos)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
            f" COALESCE(?, {self.dialect.next_ledger_position()})){self.dialect.returning_key()}",
            (
                schedule_id,
                scheduled_at,
                last_at,
                count,
                int(summary),
                state,
                reason,
                revision,
                run_seq,
                recorded_at,
                ledger_pos,
            ),
        )
        return self.dialect.inserted_id(cursor)

    def insert_occurrences(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Bulk insert of (schedule_id, scheduled_at, last_at, count, summary, state,
        reason, revision, run_seq, recorded_at) tuples (seeding and benchmarks)."""
        self._execute_many(
            "INSERT INTO occurrences (schedule_id, scheduled_at, last_at, count, summary, state,"
            " reason, revision, run_seq, recorded_at, ledger_pos)"
            f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, {self.dialect.next_ledger_position()})",
            rows,
        )

    def page_occurrences(
        self, schedule_id: str, after: int | None, limit: int, *, newest_first: bool = False
    ) -> list[OccurrenceRow]:
        """In record order, after ledger position `after` (`newest_first`: in
        reverse record order, before it): keyset paging on occurrences_ledger,
        so any page is an index seek, and a row written later always lands
        after every position already handed out."""
        if newest_first:
            rows = self._execute(
                f"{_OCCURRENCE_SELECT} WHERE o.schedule_id = ? AND o.ledger_pos < ?"
                " ORDER BY o.ledger_pos DESC LIMIT ?",
                (schedule_id, after if after is not None else 2**62, limit),
            )
        else:
            rows = self._execute(
                f"{_OCCURRENCE_SELECT} WHERE o.schedule_id = ? AND o.ledger_pos > ?"
                " ORDER BY o.ledger_pos LIMIT ?",
                (schedule_id, after if after is not None else -(2**62), limit),
            )
        return [_occurrence(row) for row in rows]

    def occurrence_for_run(self, run_seq: int) -> OccurrenceRow | None:
        row = self._execute(f"{_OCCURRENCE_SELECT} WHERE o.run_seq = ?", (run_seq,)).fetchone()
        return _occurrence(row) if row else None

    def last_runs(self, schedule_ids: Sequence[str]) -> dict[str, RunRow]:
        """The newest run per schedule (for `list`)."""
        found: dict[str, RunRow] = {}
        columns = ", ".join(f"r.{name.strip()}" for name in _RUN_COLUMNS.split(","))
        for chunk in chunked(schedule_ids):
            # A correlated MAX per schedule is one index seek each; a grouped
            # MAX would read every run of every schedule.
            rows = self._execute(
                f"SELECT {columns} FROM schedules s JOIN runs r ON r.seq ="
                " (SELECT MAX(seq) FROM runs WHERE schedule_id = s.id)"
                f" WHERE s.id IN ({_placeholders(chunk)})",
                chunk,
            )
            found.update((run.schedule_id, run) for run in (RunRow(*row) for row in rows))
        return found

    # -- runs and attempts ----------------------------------------------------

    def insert_run(
        self,
        schedule_id: str,
        kind: str,
        scheduled_at: int,
        revision: int,
        invocation: str,
        admitted_at: float,
        host: str | None = None,
    ) -> int:
        cursor = self._execute(
            "INSERT INTO runs (schedule_id, kind, scheduled_at, state, revision, invocation,"
            " admitted_at, host) VALUES (?, ?, ?, 'admitted', ?, ?, ?, ?)"
            + self.dialect.returning_key(),
            (schedule_id, kind, scheduled_at, revision, invocation, admitted_at, host),
        )
        return self.dialect.inserted_id(cursor)

    def insert_admitted_run(
        self,
        schedule_id: str,
        scheduled_at: int,
        revision: int,
        invocation: str,
        admitted_at: float,
        host: str | None = None,
    ) -> int:
        seq = self.insert_run(
            schedule_id, "scheduled", scheduled_at, revision, invocation, admitted_at, host
        )
        self.insert_occurrence(
            schedule_id, scheduled_at, "admitted", revision, admitted_at, run_seq=seq
        )
        return seq

    def get_run(self, seq: int) -> RunRow | None:
        row = self._execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE seq = ?", (seq,)).fetchone()
        return RunRow(*row) if row else None

    def runs_by_seq(self, seqs: Sequence[int]) -> dict[int, RunRow]:
        found: dict[int, RunRow] = {}
        for chunk in chunked(seqs):
            rows = self._execute(
                f"SELECT {_RUN_COLUMNS} FROM runs WHERE seq IN ({_placeholders(chunk)})", chunk
            )
            for row in rows:
                found[row[0]] = RunRow(*row)
        return found

    def update_run(self, seq: int, **fields: Any) -> None:
        unknown = set(fields) - _RUN_MUTABLE
        if unknown:
            raise ValueError(f"not mutable: {sorted(unknown)}")
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self._write(f"UPDATE runs SET {assignments} WHERE seq = ?", (*fields.values(), seq))

    def list_runs(
        self,
        *,
        schedule_id: str | None = None,
        state: str | None = None,
        before_seq: int | None = None,
        limit: int = 50,
        oldest_first: bool = False,
    ) -> list[RunRow]:
        """Newest first (`oldest_first`: oldest first, and `before_seq` is the
        seq the page starts after); keyset paging on seq."""
        clauses: list[str] = []
        params: list[Any] = []
        if schedule_id is not None:
            clauses.append("schedule_id = ?")
            params.append(schedule_id)
        if state is not None:
            clauses.append("state = ?")
            params.append(state)
        if before_seq is not None:
            clauses.append("seq > ?" if oldest_first else "seq < ?")
            params.append(before_seq)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        order = "" if oldest_first else " DESC"
        rows = self._execute(
            f"SELECT {_RUN_COLUMNS} FROM runs{where} ORDER BY seq{order} LIMIT ?",
            (*params, limit),
        )
        return [RunRow(*row) for row in rows]

    def unfinished_runs(self) -> list[RunRow]:
        rows = self._execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE {_UNFINISHED} ORDER BY seq")
        return [RunRow(*row) for row in rows]

    def admitted_runs(self) -> list[RunRow]:
        """Runs admitted but not launched yet (recovery leaves these for a tick)."""
        rows = self._execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE {_UNFINISHED} AND state = 'admitted'"
            " ORDER BY seq"
        )
        return [RunRow(*row) for row in rows]

    def active_run_counts(self, schedule_ids: Sequence[str]) -> dict[str, int]:
        """Unfinished scheduled runs per schedule: what overlap counts."""
        counts: dict[str, int] = {}
        for chunk in chunked(schedule_ids):
            rows = self._execute(
                f"SELECT schedule_id, COUNT(*) FROM runs WHERE {_UNFINISHED}"
                f" AND kind = 'scheduled' AND schedule_id IN ({_placeholders(chunk)})"
                " GROUP BY schedule_id",
                chunk,
            )
            counts.update(dict(rows.fetchall()))
        return counts

    def all_active_run_counts(self) -> dict[str, int]:
        rows = self._execute(
            f"SELECT schedule_id, COUNT(*) FROM runs WHERE {_UNFINISHED} GROUP BY schedule_id"
        )
        return dict(rows.fetchall())

    def executing_count(self, host: str | None = None) -> int:
        """Scheduled runs holding an execution slot: running, or admitted and
        launchable. An admitted run of a blocked schedule cannot launch, so it
        waits without a slot until `resume` clears the block; manual runs
        bypass capacity. `host`: that host's slots only."""
        only_host = "" if host is None else " AND host = ?"
        row = self._execute(
            f"SELECT COUNT(*) FROM runs r WHERE {_EXECUTING} AND kind = 'scheduled'"
            f" AND NOT (state = 'admitted' AND {_SCHEDULE_BLOCKED}){only_host}",
            () if host is None else (host,),
        ).fetchone()
        return int(row[0])

    def blocked_admitted_count(self) -> int:
        """Scheduled runs admitted but waiting for their schedule's block to clear."""
        row = self._execute(
            f"SELECT COUNT(*) FROM runs r WHERE {_UNFINISHED} AND state = 'admitted'"
            f" AND kind = 'scheduled' AND {_SCHEDULE_BLOCKED}"
        ).fetchone()
        return int(row[0])

    def scheduled_running_count(self) -> int:
        row = self._execute(
            f"SELECT COUNT(*) FROM runs WHERE {_UNFINISHED} AND state = 'running'"
            " AND kind = 'scheduled'"
        ).fetchone()
        return int(row[0])

    def run_state_counts(self) -> dict[str, int]:
        rows = self._execute(f"SELECT state, COUNT(*) FROM runs WHERE {_UNFINISHED} GROUP BY state")
        return dict(rows.fetchall())

    def insert_attempt(self, run_seq: int, attempt: int, started_at: float) -> None:
        self._execute(
            "INSERT INTO attempts (run_seq, attempt, state, started_at)"
            " VALUES (?, ?, 'running', ?)",
            (run_seq, attempt, started_at),
        )

    def mark_attempts(self, marks: Sequence[tuple[int, int, float, float]]) -> None:
        """Attempts starting, as (run_seq, attempt, started_at, the run's
        started_at): each attempt row running, its run running with no reason
        or exit code. Two statements for a whole launch chunk."""
        self._write_many(
            "INSERT INTO attempts (run_seq, attempt, state, started_at)"
            " VALUES (?, ?, 'running', ?)",
            [(seq, attempt, started) for seq, attempt, started, _ in marks],
        )
        self._write_many(
            "UPDATE runs SET state = 'running', started_at = ?, attempt = ?, reason = NULL,"
            " exit_code = NULL WHERE seq = ?",
            [(run_started, attempt, seq) for seq, attempt, _, run_started in marks],
        )

    def _set_shim_handles(self, handles: Sequence[tuple[int, int, int, int]]) -> None:
        """Started shims, as (run_seq, attempt, shim_pid, shim_start_time)."""
        self._write_many(
            "UPDATE attempts SET shim_pid = ?, shim_start_time = ?"
            " WHERE run_seq = ? AND attempt = ?",
            [(pid, start_time, seq, attempt) for seq, attempt, pid, start_time in handles],
        )

    def note_shim_handles(self, handles: Sequence[tuple[int, int, int, int]]) -> None:
        """`_set_shim_handles` committed without an fsync (as `touch_meta`):
        the stored pid only saves a read of the keeper's started record
        (`shim.json`, written before the command starts), which recovery
        reads when no pid is stored. A supervisor crash loses nothing (the
        commit is in the WAL); a power cut that loses it also ended the run,
        and recovery then finds what the records say. Its fsync came right
        after every spawn, before the next chunk of a burst."""
        if self._conn.in_transaction:
            self._set_shim_handles(handles)
            return
        with self._unsynced(), self.atomic():
            self._set_shim_handles(handles)

    def update_attempt(self, run_seq: int, attempt: int, **fields: Any) -> None:
        unknown = set(fields) - _ATTEMPT_MUTABLE
        if unknown:
            raise ValueError(f"not mutable: {sorted(unknown)}")
        assignments = ", ".join(f"{name} = ?" for name in fields)
        self._write(
            f"UPDATE attempts SET {assignments} WHERE run_seq = ? AND attempt = ?",
            (*fields.values(), run_seq, attempt),
        )

    def end_attempts(self, ends: Sequence[AttemptEnd]) -> None:
        self._write_many(
            "UPDATE attempts SET state = ?, finished_at = ?, exit_code = ?, reason = ?,"
            " stdout_tail = ?, stderr_tail = ? WHERE run_seq = ? AND attempt = ?",
            [
                (
                    e.state,
                    e.finished_at,
                    e.exit_code,
                    e.reason,
                    e.stdout_tail,
                    e.stderr_tail,
                    e.run_seq,
                    e.attempt,
                )
                for e in ends
            ],
        )
        self._write_many(
            "UPDATE runs SET state = ?, reason = ?, exit_code = ?, finished_at = ? WHERE seq = ?",
            [(e.state, e.reason, e.exit_code, e.run_finished_at, e.run_seq) for e in ends],
        )

    def attempts(self, run_seq: int) -> list[AttemptRow]:
        rows = self._execute(
            f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE run_seq = ? ORDER BY attempt",
            (run_seq,),
        )
        return [AttemptRow(*row) for row in rows]

    def attempt_output(self, run_seq: int, attempt: int) -> tuple[bytes | None, bytes | None]:
        """The stdout and stderr tails the attempt's exit record kept (None: not kept)."""
        row = self._execute(
            "SELECT stdout_tail, stderr_tail FROM attempts WHERE run_seq = ? AND attempt = ?",
            (run_seq, attempt),
        ).fetchone()
        if row is None:
            return None, None
        return tuple(None if tail is None else bytes(tail) for tail in row)  # type: ignore[return-value]

    def get_attempt(self, run_seq: int, attempt: int) -> AttemptRow | None:
        row = self._execute(
            f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE run_seq = ? AND attempt = ?",
            (run_seq, attempt),
        ).fetchone()
        return AttemptRow(*row) if row else None

    # -- requests for the supervisor --------------------------------------------

    def insert_request(
        self,
        kind: str,
        now: float,
        *,
        schedule_id: str | None = None,
        run_seq: int | None = None,
        payload: str | None = None,
    ) -> int:
        cursor = self._execute(
            "INSERT INTO requests (kind, schedule_id, run_seq, payload, created_at)"
            " VALUES (?, ?, ?, ?, ?)" + self.dialect.returning_key(),
            (kind, schedule_id, run_seq, payload, now),
        )
        return self.dialect.inserted_id(cursor)

    def ensure_connected(self) -> bool:
        """An embedded database has no connection to lose."""
        return False

    def probe_space(self, min_free: int) -> None:
        """A full disk counts as cleared once `min_free` bytes are free again:
        SQLite can write into WAL space it already has, so one small write
        succeeding proves little, while an admission also writes the run's
        directory.

        First the log is folded into the database and truncated to nothing
        (`wal_checkpoint(TRUNCATE)`): the space the log holds is this
        store's own, and counted as used it could keep the episode open
        after the operator freed space, however much was freed. A
        checkpoint that fails here (the database file must grow and cannot,
        a reader holds an old snapshot) leaves the free space to decide."""
        with suppress(sqlite3.Error, StoreError):
            self._execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            self._folded_at = self._conn.raw.total_changes
        space = os.statvfs(self.root)
        if space.f_bavail * space.f_frsize < min_free:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.root))

    def pending_requests(self, limit: int = 100) -> list[RequestRow]:
        rows = self._execute(
            f"SELECT {_REQUEST_COLUMNS} FROM requests WHERE state = 'pending' ORDER BY seq LIMIT ?",
            (limit,),
        )
        return [RequestRow(*row) for row in rows]

    def pending_run_requests(self, host: str, limit: int = 100) -> list[RequestRow]:
        """Pending cancels and resumes of runs recorded on `host` (or on no
        host: recorded before runs had hosts), oldest first: what that host's
        agent carries out, whoever leads."""
        columns = ", ".join(f"q.{name.strip()}" for name in _REQUEST_COLUMNS.split(","))
        rows = self._execute(
            f"SELECT {columns} FROM requests q JOIN runs r ON r.seq = q.run_seq"
            " WHERE q.state = 'pending' AND q.kind IN ('cancel', 'resume')"
            " AND (r.host = ? OR r.host IS NULL) ORDER BY q.seq LIMIT ?",
            (host, limit),
        )
        return [RequestRow(*row) for row in rows]

    def get_request(self, seq: int) -> RequestRow | None:
        row = self._execute(
            f"SELECT {_REQUEST_COLUMNS} FROM requests WHERE seq = ?", (seq,)
        ).fetchone()
        return RequestRow(*row) if row else None

    def finish_request(self, seq: int, state: str, result: str, now: float) -> bool:
        """Answer a pending request; False (and nothing written) if it was
        answered already: a request is answered once, by whoever gets there
        first (its host's agent or the leader)."""
        cursor = self._execute(
            "UPDATE requests SET state = ?, result = ?, handled_at = ?"
            " WHERE seq = ? AND state = 'pending'",
            (state, result, now, seq),
        )
        return bool(cursor.rowcount)

    def note_request(self, seq: int, progress: str) -> None:
        """What a pending request's handler has done so far (`result`, while
        the request stays pending): a cancel that waits for its run to end."""
        self._write(
            "UPDATE requests SET result = ? WHERE seq = ? AND state = 'pending'", (progress, seq)
        )

    # -- supervisor bookkeeping --------------------------------------------------

    def set_meta(self, **values: str) -> None:
        self._write_many(self.dialect.upsert("meta", "key", ["value"]), list(values.items()))

    def touch_meta(self, **values: str) -> None:
        """A bookkeeping write (the liveness stamp) committed without an fsync.

        In WAL mode `synchronous=NORMAL` still commits atomically; only the
        last stamps can be lost in a power cut, which costs nothing, while an
        fsync every poll interval costs the disk a sync per second forever.
        """
        with self._unsynced():
            if len(values) == 1 and not self._conn.in_transaction:
                # The usual stamp: one statement, its own transaction.
                ((key, value),) = values.items()
                if self._execute("UPDATE meta SET value = ? WHERE key = ?", (value, key)).rowcount:
                    return
            with self.atomic():
                self.set_meta(**values)

    @contextmanager
    def _unsynced(self) -> Iterator[None]:
        """Commits in this block skip the fsync (`synchronous=NORMAL`): still
        atomic in WAL mode, only the last ones can be lost to a power cut."""
        self._execute("PRAGMA synchronous = NORMAL")
        try:
            yield
        finally:
            self._execute("PRAGMA synchronous = FULL")

    def defer_checkpoints(self) -> None:
        """This connection's commits stop folding the log into the database.

        Why: SQLite checkpoints inside the commit that takes the log past
        1,000 pages, and a supervisor's commits repeat in a cycle (admit and
        mark, the pids, the exits, the stamp), so it was always the same
        one: the admission's, between a due instant and its job's start. It
        added 2-16 ms to about one launch in 55. The supervisor calls
        `checkpoint` instead while it waits for its next instant."""
        self._checkpoints_deferred = True
        self._execute("PRAGMA wal_autocheckpoint = 0")
        self._folded_at = self._conn.raw.total_changes

    def checkpoint(self, quiet: bool = True) -> bool:
        """Fold the log into the database (PASSIVE: never waits for a reader
        or a writer) once this connection has changed CHECKPOINT_CHANGES
        rows since the last time, about as often as SQLite would have; when
        not `quiet` (a supervisor that never waits long), only at ten times
        that, so the log stays bounded. Whether it ran."""
        if not self._checkpoints_deferred:
            return False
        changed = self._conn.raw.total_changes - self._folded_at
        if changed < (CHECKPOINT_CHANGES if quiet else 10 * CHECKPOINT_CHANGES):
            return False
        self._execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        self._folded_at = self._conn.raw.total_changes
        return True

    def changes(self) -> int | None:
        """A number that changes whenever another connection commits to the
        database (SQLite's `data_version`; this connection's own commits
        leave it alone): an idle supervisor asks it instead of reading its
        work from the store every tick."""
        return int(self._execute("PRAGMA data_version").fetchone()[0])

    def watch_commits(self) -> CommitWatch | None:
        """inotify on the store's directory: every writer of a WAL database
        is on this host (wfsched.store.commit_watch)."""
        from wfsched.store.commit_watch import CommitWatch

        return CommitWatch.open(self.root)

    def get_meta(self, key: str) -> str | None:
        row = self._execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_draining(self, host: str, state: str | None) -> None:
        """Say that `host`'s supervisor drains (`state`, its JSON: pid, since,
        until), or no longer does (None). One meta row per host, so two
        hosts draining at once never overwrite each other's."""
        key = DRAINING_PREFIX + host
        with self.atomic():
            if state is None:
                self._write("DELETE FROM meta WHERE key = ?", (key,))
            else:
                self.set_meta(**{key: state})

    def draining_hosts(self) -> dict[str, str]:
        """Every host's drain state written by `set_draining`, by host."""
        rows = self._execute(
            "SELECT key, value FROM meta WHERE key LIKE ?", (DRAINING_PREFIX + "%",)
        ).fetchall()
        return {key.removeprefix(DRAINING_PREFIX): value for key, value in rows}

    def supervisor_pid(self) -> int | None:
        """The pid holding the store's supervisor.lock, from the kernel's lock table."""
        from wfsched.store.ownership import holder

        return holder(self.lock_path)

    # -- leadership: one supervisor, fenced by its lock file ----------------------

    @property
    def kind(self) -> str:
        """ "sqlite" or "postgresql" (what `status` and the metrics call the store)."""
        return self.dialect.name

    def fence(self, epoch: int | None) -> None:
        """Nothing to check: the lock file lets one supervisor write at all."""

    def set_idle_limit(self, seconds: float) -> None:
        """No server to end a stuck session; the lock file is the fence."""

    def lease_channel(self, host: str, pid: int) -> None:
        """No lease: the supervisor holding the lock file leads."""
        return None

    def leader_lease(self) -> LeaseRow | None:
        return None

    def host_rows(self) -> list[HostRow]:
        return []

    def failed_runs_of_host(self, host: str, reason_prefix: str, unless: str) -> list[RunRow]:
        """Failed runs of `host` whose reason starts with `reason_prefix` and
        does not contain `unless` (a scan of the failed runs; run at start)."""
        rows = self._execute(
            f"SELECT {_RUN_COLUMNS} FROM runs WHERE state = 'failed' AND host = ?"
            " AND reason LIKE ? AND reason NOT LIKE ? ORDER BY seq",
            (host, reason_prefix.replace("%", "") + "%", "%" + unless.replace("%", "") + "%"),
        )
        return [RunRow(*row) for row in rows]

    def runs_on_lost_hosts(self, host_timeout: float) -> list[tuple[RunRow, str, float]]:
        """One host, no heartbeats: nothing is ever lost."""
        return []


def _schedule(row: Sequence[Any]) -> ScheduleRow:
    values = list(row)
    values[5] = bool(values[5])
    values[7] = bool(values[7])
    return ScheduleRow(*values)


def _occurrence(row: Sequence[Any]) -> OccurrenceRow:
    values = list(row)
    values[5] = bool(values[5])
    return OccurrenceRow(*values)


def open_existing_store(root: Path, *, missing: str, runs_dir: Path | None = None) -> SQLiteStore:
    """The store at `root`, never creating one: no database is NotFoundError
    (exit 3) ending with `missing`; one that will not open is a StoreError."""
    if not (root / DB_NAME).is_file():
        raise NotFoundError(f"no store at {root} (no {DB_NAME}); {missing}")
    try:
        return SQLiteStore(root, create=False, runs_dir=runs_dir)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {root}: {exc}") from exc
