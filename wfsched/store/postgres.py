"""The PostgreSQL store: the `Store` interface over one PostgreSQL database.

It runs the very statements of the SQLite store (inherited from
`SQLiteStore`: they are written in the SQL both engines share), through
psycopg with `wfsched.store.pg_dialect.POSTGRES` translating what differs.
What is PostgreSQL's own lives here: the connection, transactions,
migrations, the schema audit and the supervisor's ownership lock.

Isolation and locking (why section 4's rules hold with concurrent writers):
every write transaction is READ COMMITTED and takes one transaction-scoped
advisory lock (`pg_advisory_xact_lock`) as its first statement, released by
COMMIT or ROLLBACK. Write transactions therefore run one at a time, exactly
as SQLite's `BEGIN IMMEDIATE` makes them, and since READ COMMITTED takes a
fresh snapshot per statement, every statement after the lock sees every
transaction committed before it: an admission, an edit's revision check or
a watermark change can never act on a stale read, and no serialization
failure or retry loop exists. Reads (`snapshot()`) are REPEATABLE READ READ
ONLY: one consistent state, no lock taken, never blocking a writer. The
unique occurrence key, the one-run-per-row key and the monotone watermark
are enforced by the database (unique indexes and a trigger), not by this
code.

A lost connection becomes `StoreConnectionLost`, and the server's resource
errors (out of disk, I/O error, read-only) `StoreUnavailable`: one line naming
the store by its URL without password and what to do, never the driver's
exception class. The supervisor rides both out as fault episodes.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import lru_cache
from pathlib import Path
from typing import Any

import psycopg
import psycopg.conninfo
from psycopg import pq

from wfsched.errors import (
    ConflictError,
    LeaseLost,
    NotFoundError,
    StoreConnectionLost,
    StoreError,
    StoreUnavailable,
)
from wfsched.store.audit_queries import normalize_sql
from wfsched.store.copying import BATCH, COPY_TABLES
from wfsched.store.driver_log import drop_cleanup_notes
from wfsched.store.lease import HostRow, LeaseRow
from wfsched.store.location import StoreLocation, ensure_local_dir
from wfsched.store.pg_dialect import POSTGRES
from wfsched.store.pg_lease import DB_NOW, LEASE_COLUMNS, PgLeaseChannel, lease_row
from wfsched.store.resource_faults import UNREACHABLE_ADVICE, from_server
from wfsched.store.rows import RunRow, SchemaProblem
from wfsched.store.sqlite import LOCK_NAME, RUN_COLUMNS, RUNS_DIR, SQLiteStore

drop_cleanup_notes()  # a broken pipeline's raw note is no log line of ours

LOCK_CLASS = 0x77667363
"""First key of wfsched's advisory locks (ASCII 'wfsc'); advisory locks are per database."""
WRITE_LOCK = 1
"""Second key: the transaction lock every write transaction takes first."""
OWNER_LOCK = 2
"""Second key: the session lock every supervisor holds (shared) for its whole
life; `store copy` takes it exclusively, so the two exclude each other."""
CONNECT_TIMEOUT = 10
SILENT_CLIENT = 5.0
"""Seconds after which the server ends a session of ours whose client went
silent (the default lease), until a leader sets its own (`set_idle_limit`)."""


def silent_client_settings(seconds: float) -> dict[str, int]:
    """Server settings that end a session within about `seconds` once its
    client stops answering at the TCP level (a network cut, a host gone).

    `idle_in_transaction_session_timeout` does not cover every such session:
    the server arms it only when it reports ready for a query, and a
    pipeline (psycopg's `executemany`, the held writes of `_send`) sends its
    statements before its Sync. Cut off between the two, the session waits
    for the rest inside its transaction, holding the write lock (and a
    leader's lease row FOR SHARE), and nothing would end it before the
    kernel's default keepalive, two hours later: no write and no takeover
    until then. TCP keepalives end a silent session with nothing in flight,
    TCP_USER_TIMEOUT one whose answer was never acknowledged. Both are
    ignored on a Unix socket, where no such cut exists."""
    whole = max(1, round(seconds))
    return {
        "tcp_keepalives_idle": 1,
        "tcp_keepalives_interval": 1,
        "tcp_keepalives_count": max(1, whole - 1),
        "tcp_user_timeout": whole * 1000,
    }


def _startup_options(conninfo: str, read_only: bool = False) -> str:
    """The connection's `options` (server settings at its start): the
    operator's own, from the URL or PGOPTIONS, then `silent_client_settings`
    (no extra round trip for every command). A read-only store's session
    starts every transaction READ ONLY, so the server refuses any write
    (the web view's guarantee that it changes nothing)."""
    given = psycopg.conninfo.conninfo_to_dict(conninfo).get("options")
    if given is None:
        given = os.environ.get("PGOPTIONS", "")
    ours = " ".join(
        f"-c {name}={value}" for name, value in silent_client_settings(SILENT_CLIENT).items()
    )
    if read_only:
        ours += " -c default_transaction_read_only=on"
    return f"{given} {ours}".strip()


class NoStore(NotFoundError):
    """The database holds no wfsched schema yet (reading commands create nothing)."""


@lru_cache(maxsize=512)
def _translated(statement: str) -> str:
    return POSTGRES.sql(statement)


def _adapt(value: Any) -> Any:
    # Flags are 0/1 integers in both schemas; psycopg would send a bool as boolean.
    return int(value) if isinstance(value, bool) else value


_Held = tuple[str, Any, bool]
"""A statement held back (`PostgresStore._write`): its SQL as sent, its
parameters (None: none, the SQL as written; a list of rows for many), and
whether it runs once per row."""


class PostgresStore(SQLiteStore):
    """A PostgreSQL database holding one store; run directories on this host."""

    dialect = POSTGRES  # type: ignore[assignment]
    driver_errors: tuple[type[Exception], ...] = (psycopg.Error,)
    _conn: psycopg.Connection[Any]  # type: ignore[assignment]

    def __init__(
        self,
        location: StoreLocation,
        *,
        create: bool = True,
        runs_dir: Path | None = None,
        read_only: bool = False,
    ) -> None:
        assert location.conninfo is not None
        self.read_only = read_only
        self.location = location
        self.display = location.display
        self._schema_place = location.display
        self.root = location.local_dir
        self.db_path = self.root
        self.lock_path = self.root / LOCK_NAME
        self.runs_dir = runs_dir or self.root / RUNS_DIR
        self._savepoints = itertools.count(1)
        self._held: list[_Held] = []
        """Statements of the open transaction not sent yet (see `_write`)."""
        self._owner = False
        self._member = False
        self._fence: int | None = None
        self._idle_limit: float | None = None
        self._conn = self._connect()
        try:
            version = self.schema_version
            if not create and version == 0:
                raise NoStore(f"no store at {self.display} (the database holds no wfsched schema)")
            self._migrate(version)
            if create:
                # This host's side of the store, private like a SQLite store's directory.
                ensure_local_dir(location)
                self.runs_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except BaseException:
            self._conn.close()
            raise

    # -- connection --------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:  # type: ignore[override]
        try:
            conninfo = self.location.conninfo or ""
            return psycopg.connect(
                conninfo,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT,
                options=_startup_options(conninfo, self.read_only),
            )
        except psycopg.Error as exc:
            raise StoreConnectionLost(
                f"cannot connect to store {self.display}: {self._scrub(exc)}; {UNREACHABLE_ADVICE}"
            ) from None

    def reconnect(self) -> None:
        """A new connection after a lost one (the supervisor's outage handling).

        The ownership lock died with the old session: an owner takes it again
        before anything else, and if another supervisor holds it by now, that
        is a ConflictError (this one must stop)."""
        with suppress(psycopg.Error):
            self._conn.close()
        self._held = []  # the transaction they belonged to died with the session
        self._conn = self._connect()
        if self._owner:
            self.take_ownership()
        if self._member:
            self.join_supervisors()
        if self._idle_limit is not None:
            self.set_idle_limit(self._idle_limit)

    def close(self) -> None:
        self._conn.close()

    def ensure_connected(self) -> bool:
        """A fault episode's probe: a new connection if the server dropped the
        old one (restarted, stopped, terminated the session)."""
        if not (self._conn.closed or self._conn.broken):
            return False
        self.reconnect()
        return True

    def probe_space(self, min_free: int) -> None:
        """This host's run directories, then the server's disk: a temporary
        table of `min_free` bytes in the database's default tablespace, rolled
        back. The server extends a table's file as rows arrive, so this fails
        with disk_full (53100) until that much is free where the store's
        tables grow; a one-row update could succeed long before. A role that
        may not create temporary tables cannot ask this way: the probe's
        durable write decides alone then (an episode must never outlast its
        fault because of the probe)."""
        super().probe_space(min_free)
        rows = max(1, min_free // 1000)
        self._raw("BEGIN")
        try:
            self._raw("SET LOCAL temp_tablespaces = ''")
            self._raw(
                "CREATE TEMP TABLE wfsched_space_probe ON COMMIT DROP AS"
                f" SELECT repeat('x', 1000) AS filler FROM generate_series(1, {rows})"
            )
        except StoreUnavailable:
            raise
        except StoreError:
            return
        finally:
            with suppress(psycopg.Error, StoreError):
                self._raw("ROLLBACK")

    def _scrub(self, exc: BaseException) -> str:
        """The server's or libpq's message on one line, never holding the password."""
        text = " ".join(str(exc).split()) or "connection failed"
        password = psycopg.conninfo.conninfo_to_dict(self.location.conninfo or "").get("password")
        if password:
            text = text.replace(str(password), "***")
        return text

    def _failed(self, exc: psycopg.Error) -> StoreError:
        """A driver error as the store's own: a lost or refused connection is
        StoreConnectionLost; the server out of disk, failing I/O or read-only a
        resource fault (StoreUnavailable); any other server error one line
        naming the store. Integrity errors are not translated: they are the
        database refusing a write, and propagate as such (as SQLite's do)."""
        fault = from_server(exc.sqlstate, self.display, self._scrub(exc))
        if fault is not None:
            return fault
        if isinstance(exc, psycopg.OperationalError):
            return StoreConnectionLost(
                f"store {self.display}: connection lost: {self._scrub(exc)}; {UNREACHABLE_ADVICE}"
            )
        return StoreError(f"store {self.display}: {self._scrub(exc)}")

    def _execute(self, statement: str, params: Sequence[Any] = ()) -> Any:
        return self._send((_translated(statement), [_adapt(value) for value in params], False))

    def _execute_many(self, statement: str, rows: Sequence[Sequence[Any]]) -> Any:
        return self._send(
            (_translated(statement), [[_adapt(value) for value in row] for row in rows], True)
        )

    def _raw(self, statement: str) -> None:
        self._send((statement, None, False))

    def _write(self, statement: str, params: Sequence[Any] = ()) -> None:
        """Inside a transaction, held back and sent with the transaction's
        next statement that must be answered, in one pipeline: one round
        trip (a socket write and read, a wakeup of the server process) for
        all of them instead of one each. What makes that safe: nothing reads
        the answer of a held write, every write transaction's last statement
        before COMMIT is answered (the fence check, or `_flush`), and a
        nested `atomic()` flushes before it ends, so an error of a held
        write is raised inside the same savepoint as when it ran at once."""
        self._hold_or_send((_translated(statement), [_adapt(value) for value in params], False))

    def _write_many(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            rows = [[_adapt(value) for value in row] for row in rows]
            self._hold_or_send((_translated(statement), rows, True))

    def _hold_or_send(self, write: _Held) -> None:
        """Held inside a transaction (`_write`), sent at once outside one."""
        if self._in_transaction():
            self._held.append(write)
        else:
            self._send(write)

    def _hold_raw(self, statement: str) -> None:
        """A transaction's own statement (BEGIN, its lock, a savepoint),
        held back like a write (`_write`)."""
        self._held.append((statement, None, False))

    def _send(self, last: _Held | None) -> Any:
        """The held statements, then `last`, in one pipeline (or `last` alone
        when nothing is held); the cursor of `last`, its answer read. The
        first error of any of them is raised (the server skips the rest)."""
        held, self._held = self._held, []
        try:
            if not held:
                assert last is not None
                return self._run(last)
            with self._conn.pipeline():
                for statement in held:
                    self._run(statement)
                cursor = self._run(last) if last is not None else None
            return cursor
        except psycopg.IntegrityError:
            raise
        except psycopg.Error as exc:
            raise self._failed(exc) from exc

    def _run(self, statement: _Held) -> Any:
        sql, params, many = statement
        if many:
            cursor = self._conn.cursor()
            cursor.executemany(sql, params)
            return cursor
        return self._conn.execute(sql, params)

    def _flush(self) -> None:
        """Send what is held, and raise its first error here."""
        if self._held:
            self._send(None)

    def _in_transaction(self) -> bool:
        # A held BEGIN opened one, though the server has not seen it yet.
        return bool(self._held) or (self._conn.info.transaction_status != pq.TransactionStatus.IDLE)

    def _discard_held(self) -> bool:
        """Forget what is held (a transaction rolling back); whether the
        server saw any of this transaction (False: nothing to roll back)."""
        self._held = []
        return self._conn.info.transaction_status != pq.TransactionStatus.IDLE

    # -- transactions ------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One write transaction, serialized with every other writer by the
        write lock; nested calls become savepoints. A failing rollback never
        hides the error that caused it; a COMMIT that fails is an error (its
        outcome unknown), never reported as done."""
        if self._in_transaction():
            name = f"sp{next(self._savepoints)}"
            savepoint: _Held = (f"SAVEPOINT {name}", None, False)
            self._held.append(savepoint)
            try:
                yield
                if self._held and self._held[-1] is savepoint:
                    self._held.pop()  # nothing written: no savepoint needed
                    return
                self._flush()  # a held write's error belongs to this savepoint
            except BaseException:
                self._undo(savepoint, name)
                raise
            self._hold_raw(f"RELEASE SAVEPOINT {name}")
            return
        self._hold_raw(self.dialect.begin_write())
        try:
            self._hold_raw(f"SELECT pg_advisory_xact_lock({LOCK_CLASS}, {WRITE_LOCK})")
            yield
            if self._fence is not None:
                self._check_fence(self._fence)
            self._flush()
        except BaseException:
            if self._discard_held():
                with suppress(psycopg.Error, StoreError):
                    self._raw("ROLLBACK")
            raise
        self._commit()

    def _commit(self) -> None:
        """COMMIT, and make sure it committed: PostgreSQL answers a COMMIT of
        a transaction that an error aborted with a plain `ROLLBACK` status,
        not an error (one swallowed inside, e.g. by a rollback to a
        savepoint that failed in turn, would otherwise pass as written)."""
        done = self._send(("COMMIT", None, False)).statusmessage
        if done != "COMMIT":
            raise StoreError(
                f"store {self.display}: the database rolled this transaction back"
                f" ({done}: an earlier statement of it failed); nothing of it was written"
            )

    def _undo(self, savepoint: _Held, name: str) -> None:
        """Roll a nested `atomic()` back. Everything held now was held
        after its SAVEPOINT: if the SAVEPOINT itself is still held, none of
        it reached the server and it is simply dropped; otherwise it is
        dropped and the server rolls back to the savepoint."""
        for index, statement in enumerate(self._held):
            if statement is savepoint:
                del self._held[index:]
                return
        self._held = []
        with suppress(psycopg.Error, StoreError):
            self._raw(f"ROLLBACK TO SAVEPOINT {name}")
            self._raw(f"RELEASE SAVEPOINT {name}")

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """A read transaction (REPEATABLE READ): multi-statement reads see one state."""
        if self._in_transaction():
            yield
            return
        self._raw("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            yield
        finally:
            if self._conn.info.transaction_status != pq.TransactionStatus.UNKNOWN:
                self._raw("COMMIT")

    @contextmanager
    def audit_snapshot(self) -> Iterator[None]:
        try:
            with self.snapshot():
                yield
        except psycopg.DatabaseError as exc:
            raise StoreError(f"cannot audit the store {self.display}: {self._scrub(exc)}") from None

    def changes(self) -> int | None:
        """Not known (another host's commits leave no trace here): every
        tick reads its work from the store."""
        return None

    def defer_checkpoints(self) -> None:
        """Nothing to defer: the server checkpoints, apart from any commit."""

    def checkpoint(self, quiet: bool = True) -> bool:
        """The server's own business (see `defer_checkpoints`)."""
        return False

    def watch_commits(self) -> None:
        """None: another host's commits leave no trace on this one."""
        return None

    def touch_meta(self, **values: str) -> None:
        """The liveness stamp without waiting for the WAL flush (see SQLiteStore)."""
        with self.atomic():
            self._hold_raw("SET LOCAL synchronous_commit = off")
            self.set_meta(**values)

    def note_shim_handles(self, handles: Sequence[tuple[int, int, int, int]]) -> None:
        """The started pids without waiting for the WAL flush (see SQLiteStore)."""
        with self.atomic():
            self._hold_raw("SET LOCAL synchronous_commit = off")
            self._set_shim_handles(handles)

    def insert_admitted_run(
        self,
        schedule_id: str,
        scheduled_at: int,
        revision: int,
        invocation: str,
        admitted_at: float,
        host: str | None = None,
    ) -> int:
        """One statement (a data-modifying WITH): on a server each statement
        costs both processes a few tens of microseconds whatever it does, and
        this one is made once per run of a burst. The ledger row's position
        is its own seq (the BEFORE INSERT trigger), as `insert_occurrence`
        gives it."""
        row = self._execute(
            "WITH run AS (INSERT INTO runs (schedule_id, kind, scheduled_at, state, revision,"
            " invocation, admitted_at, host) VALUES (?, 'scheduled', ?, 'admitted', ?, ?, ?, ?)"
            " RETURNING seq, schedule_id, scheduled_at, revision, admitted_at)"
            " INSERT INTO occurrences (schedule_id, scheduled_at, summary, state, revision,"
            " run_seq, recorded_at) SELECT schedule_id, scheduled_at, 0, 'admitted', revision,"
            " seq, admitted_at FROM run RETURNING run_seq",
            (schedule_id, scheduled_at, revision, invocation, admitted_at, host),
        ).fetchone()
        return int(row[0])

    # -- schema --------------------------------------------------------------------

    @property
    def schema_version(self) -> int:
        """0 before the first migration (no version table yet)."""
        # A scan of pg_class with the statement's snapshot, not to_regclass():
        # the name cache can still hold "no such table" from before another
        # session's migration committed, which would make this one migrate again.
        row = self._execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class WHERE relname = 'schema_version'"
            " AND relnamespace = current_schema()::regnamespace)"
        ).fetchone()
        if not row[0]:
            return 0
        return int(self._execute(self.dialect.get_schema_version()).fetchone()[0])

    def schema_problems(self) -> list[SchemaProblem]:
        """Compare the catalogue with what the migrations build on this server,
        in a scratch schema of a second connection that is rolled back."""
        present = {
            (kind, name): normalize_sql(sql)
            for kind, name, sql in self._execute(self.dialect.schema_objects())
        }
        problems = []
        for (kind, name), sql in sorted(self._expected_schema().items()):
            found = present.get((kind, name))
            if found != normalize_sql(sql):
                problems.append(SchemaProblem(kind, name, found))
        return problems

    def _expected_schema(self) -> dict[tuple[str, str], str]:
        try:
            with psycopg.connect(
                self.location.conninfo or "", connect_timeout=CONNECT_TIMEOUT
            ) as scratch:
                scratch.execute("CREATE SCHEMA wfsched_expected")
                scratch.execute("SET LOCAL search_path TO wfsched_expected")
                for _number, _why, statements in self.dialect.migrations:
                    for statement in statements:
                        scratch.execute(statement)  # type: ignore[arg-type]
                rows = scratch.execute(self.dialect.schema_objects()).fetchall()  # type: ignore[arg-type]
                scratch.rollback()
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot audit the schema of {self.display}: {self._scrub(exc)}"
                " (the audit builds the expected schema in a scratch schema it rolls back;"
                " the role needs CREATE on the database)"
            ) from None
        return {(kind, name): sql for kind, name, sql in rows}

    # -- `wfsched store copy` -------------------------------------------------------

    def export_rows(self, table: str, columns: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
        """Streamed through a server-side cursor (inside the caller's snapshot),
        so a million ledger rows never sit in memory at once."""
        self._flush()
        cursor = self._conn.cursor(name=f"export_{table}")
        try:
            cursor.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY 1, 2")  # type: ignore[arg-type]
            while rows := cursor.fetchmany(BATCH):
                yield from (tuple(row) for row in rows)
        except psycopg.Error as exc:
            raise self._failed(exc) from exc
        finally:
            with suppress(psycopg.Error):
                cursor.close()

    def import_rows(
        self, table: str, columns: tuple[str, ...], rows: Iterable[tuple[Any, ...]]
    ) -> int:
        """PostgreSQL's COPY into a table without its secondary indexes and
        foreign keys, which are then rebuilt from their own catalogue
        definitions, in the caller's transaction (PostgreSQL's advice for
        populating a table: one bulk index build and one join validating each
        key, instead of an index insert and a key lookup per row). Rebuilding
        checks every row as inserting would: a duplicate or a dangling key
        fails the copy and rolls it back, and `audit` compares the schema with
        the migrations afterwards."""
        count = 0
        self._flush()
        try:
            with (
                self._without_checks(table),
                self._conn.cursor().copy(
                    f"COPY {table} ({', '.join(columns)}) FROM STDIN"  # type: ignore[arg-type]
                ) as copy,
            ):
                for row in rows:
                    copy.write_row([_adapt(value) for value in row])
                    count += 1
        except psycopg.IntegrityError:
            raise
        except psycopg.Error as exc:
            raise self._failed(exc) from exc
        return count

    @contextmanager
    def _without_checks(self, table: str) -> Iterator[None]:
        """`table`'s foreign keys and non-primary-key indexes dropped for the
        block and recreated, exactly as the catalogue defined them, after it."""
        keys = self._execute(
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = CAST(? AS regclass) AND contype = 'f' ORDER BY conname",
            (table,),
        ).fetchall()
        indexes = self._execute(
            "SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x"
            " JOIN pg_class i ON i.oid = x.indexrelid"
            " WHERE x.indrelid = CAST(? AS regclass) AND NOT x.indisprimary ORDER BY i.relname",
            (table,),
        ).fetchall()
        for name, _definition in keys:
            self._raw(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
        for name, _definition in indexes:
            self._raw(f"DROP INDEX {name}")
        yield
        for _name, definition in indexes:
            self._raw(definition)
        for name, definition in keys:
            self._raw(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")

    def after_import(self) -> None:
        """Identity sequences continue after the copied keys, and the planner
        learns what was loaded (ANALYZE, PostgreSQL's advice after a bulk
        load; autovacuum would get to it only later, after the audit that
        follows a copy has planned its scans of a million rows blind)."""
        for table in ("runs", "occurrences", "requests", "notifications"):
            # is_called: the copied maximum counts as handed out, as it was.
            self._raw(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'seq'), MAX(seq))"
                f" FROM {table} HAVING MAX(seq) IS NOT NULL"
            )
        self._raw(f"ANALYZE {', '.join(table for table, _ in COPY_TABLES)}")

    # -- leadership (a lease with a fencing epoch) ------------------------------------

    def fence(self, epoch: int | None) -> None:
        """Make every write transaction from now on a leader's of `epoch`
        (None: a standby's, unfenced): each checks, just before its COMMIT,
        that the lease still holds this epoch and has not expired by the
        database's clock, and rolls back with LeaseLost if not.

        The check holds the lease row FOR SHARE until COMMIT, so a takeover
        (which updates that row) waits for it: a leader's commit can never land
        after a takeover. A leader stopped inside a transaction (SIGSTOP) would
        hold that lock, so a leader's session may idle in a transaction for one
        lease at most before the server ends it."""
        self._fence = epoch

    def set_idle_limit(self, seconds: float) -> None:
        """The server ends this session if it idles that long inside a
        transaction, or if its client goes silent that long (see
        `silent_client_settings`): its locks, the write lock included, die
        with it."""
        self._idle_limit = seconds
        settings = {
            "idle_in_transaction_session_timeout": max(1, int(seconds * 1000)),
            **silent_client_settings(seconds),
        }
        calls = ", ".join(
            f"set_config('{name}', '{value}', false)" for name, value in settings.items()
        )
        self._raw(f"SELECT {calls}")

    def _check_fence(self, epoch: int) -> None:
        row = self._execute(
            "SELECT 1 FROM leader_lease WHERE id = 1 AND epoch = ?"
            f" AND released = 0 AND expires_at > {DB_NOW} FOR SHARE",
            (epoch,),
        ).fetchone()
        if row is None:
            raise LeaseLost(
                f"store {self.display}: the lease of epoch {epoch} is no longer held;"
                " this transaction was rolled back"
            )

    def lease_channel(self, host: str, pid: int) -> PgLeaseChannel:  # type: ignore[override]
        """A connection of its own for taking and renewing the lease."""
        return PgLeaseChannel(self.location.conninfo or "", self.display, host, pid, self._scrub)

    def leader_lease(self) -> LeaseRow | None:
        row = self._execute(
            f"SELECT {LEASE_COLUMNS}, {DB_NOW} FROM leader_lease WHERE id = 1"
        ).fetchone()
        return lease_row(row) if row is not None else None

    def host_rows(self) -> list[HostRow]:
        rows = self._execute(
            "SELECT host, pid, started_at, last_seen, clock_offset, executing, stopped,"
            f" {DB_NOW} FROM hosts ORDER BY host"
        ).fetchall()
        return [
            HostRow(
                str(host),
                int(pid),
                float(started),
                float(seen),
                float(offset),
                int(executing),
                bool(stopped),
                float(now),
            )
            for host, pid, started, seen, offset, executing, stopped, now in rows
        ]

    def runs_on_lost_hosts(self, host_timeout: float) -> list[tuple[RunRow, str, float]]:
        """(run, host, its last heartbeat) of every running run whose host has
        not written a heartbeat for `host_timeout` seconds (database clock)."""
        columns = ", ".join(f"r.{name.strip()}" for name in RUN_COLUMNS.split(","))
        rows = self._execute(
            f"SELECT {columns}, h.last_seen FROM runs r JOIN hosts h ON h.host = r.host"
            " WHERE r.state IN ('admitted', 'running', 'interrupted') AND r.state = 'running'"
            f" AND h.last_seen < {DB_NOW} - ? ORDER BY r.seq",
            (host_timeout,),
        ).fetchall()
        found = []
        for row in rows:
            run = RunRow(*row[:-1])
            found.append((run, run.host or "", float(row[-1])))
        return found

    # -- the supervisor's ownership --------------------------------------------------

    def join_supervisors(self) -> None:
        """The shared session lock every supervisor of this store holds (any
        number may: one leads by the lease); ConflictError while `store copy`
        holds the store."""
        row = self._execute(
            f"SELECT pg_try_advisory_lock_shared({LOCK_CLASS}, {OWNER_LOCK})"
        ).fetchone()
        if not row[0]:
            raise ConflictError(
                f"{self.display}: the store is being copied (wfsched store copy);"
                " start the supervisor once the copy is done"
            )
        self._member = True

    def take_ownership(self) -> None:
        """The session advisory lock held exclusively (`store copy`): none of
        the store's supervisors may run meanwhile; the server drops it with
        the connection. ConflictError if a supervisor holds the store."""
        row = self._execute(f"SELECT pg_try_advisory_lock({LOCK_CLASS}, {OWNER_LOCK})").fetchone()
        if not row[0]:
            pid = self.supervisor_pid()
            who = f" (pid {pid})" if pid else ""
            raise ConflictError(
                f"{self.display}: another supervisor{who} owns this store;"
                " stop it first or use another --store"
            )
        self._owner = True

    def supervisor_pid(self) -> int | None:
        """The leading supervisor's pid; 0 when supervisors (or a copy) hold
        the store but none leads right now; None if none holds it."""
        row = self._execute(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            f" AND classid = {LOCK_CLASS} AND objid = {OWNER_LOCK} AND objsubid = 2"
        ).fetchone()
        if row is None:
            return None
        lease = self.leader_lease()
        if lease is not None and lease.live:
            return lease.pid
        pid = self.get_meta("pid")
        return int(pid) if pid and pid.isdigit() and lease is None else 0
