"""The store interface: everything outside the store needs from persistence.

The operator API (admin, reads, runs, status, audit, retention), the
supervisor and the CLI reach the database only through these methods. They
take and return plain values and the row dataclasses of `wfsched.store.rows`;
no connection, cursor, driver row or SQL crosses this line, so a second
backend (PostgreSQL) is one more class that satisfies this Protocol and
passes `tests/test_store_contract.py`.

Guarantees every implementation keeps (the contract tests check each):
- `atomic()` is one write transaction: all of its writes or none; nested use
  is a savepoint whose failure rolls back only the nested part; an error
  inside propagates unchanged after the rollback.
- `snapshot()` gives multi-statement reads one consistent state.
- The database itself refuses a second non-summary occurrence row for one
  (schedule, instant), a second occurrence row for one run, and a watermark
  (`consumed_through`) that moves back; the refusal is an exception raised
  from the write and rolls back the transaction it was in.
- Paging is keyset paging: `page_occurrences` in record order by ledger
  position; `list_runs` newest first by seq, before `before_seq`; each
  also pages the other way round.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from wfsched.store.lease import HostRow, LeaseRow
from wfsched.store.metrics_queries import LedgerCount, RunCount, RunFact
from wfsched.store.rows import (
    AttemptEnd,
    AttemptRow,
    LedgerItem,
    LedgerRow,
    NotificationRow,
    OccurrenceRow,
    PrunableRow,
    RejectionRow,
    RequestRow,
    RevisionRow,
    RunAttempts,
    RunRow,
    ScheduleRow,
    SchemaProblem,
)
from wfsched.store.web_queries import LedgerDay, RunFilter, WindowItem

if TYPE_CHECKING:
    from wfsched.store.commit_watch import CommitWatch


class Store(Protocol):
    """One store: its database plus the run directories beside it."""

    root: Path
    """This host's directory of the store: the SQLite store directory, or for
    PostgreSQL the local state directory (config.toml, run directories)."""
    display: str
    """How output and errors name the store: a path, or a URL without password."""
    runs_dir: Path
    """Run directories (`runs/<run-id>/attempt-N/`) on this host."""
    lock_path: Path
    """The file the supervisor's ownership lock is taken on."""
    driver_errors: tuple[type[Exception], ...]
    """What a statement may raise besides a `WfschedError`: the driver's own
    errors that the store does not word (resource faults are worded). A caller
    that must contain any store failure (the metrics) catches these and never
    names a driver."""

    # -- transactions ----------------------------------------------------------------------

    def atomic(self) -> AbstractContextManager[None]:
        """One write transaction; nested calls become savepoints."""
        ...

    def snapshot(self) -> AbstractContextManager[None]:
        """A read transaction, so multi-statement reads see one state."""
        ...

    # -- schedules, ledger, runs, attempts, requests, meta ---------------------------------

    def close(self) -> None: ...

    def reconnect(self) -> None:
        """Replace a lost connection; an owning supervisor's ownership is taken
        again (ConflictError if another supervisor holds the store by now)."""
        ...

    @property
    def schema_version(self) -> int: ...

    def insert_schedule(
        self,
        schedule_id: str,
        definition: str,
        now: float,
        consumed_through: int,
        next_due: int | None,
        exhausted: bool = False,
    ) -> None: ...

    def insert_schedules(
        self, rows: Sequence[tuple[str, str, float, int, int | None, bool]]
    ) -> None:
        """`insert_schedule` of each (schedule_id, definition, now,
        consumed_through, next_due, exhausted), in one statement per table."""
        ...

    def insert_revision(
        self, schedule_id: str, revision: int, definition: str, now: float, watermark: int
    ) -> None:
        """`watermark`: the schedule's consumed_through as this revision takes over; it owes the
        calendar instants after it (audit reads it)."""
        ...

    def get_schedule(self, schedule_id: str) -> ScheduleRow | None: ...

    def list_schedules(self, include_deleted: bool = False) -> list[ScheduleRow]: ...

    def schedules_by_id(self, ids: Iterable[str]) -> dict[str, ScheduleRow]: ...

    def update_schedule(self, schedule_id: str, **fields: Any) -> None: ...

    def due_schedules(self, now: int, limit: int) -> list[ScheduleRow]:
        """Schedules the tick must look at: due by calendar, or holding a candidate."""
        ...

    def blocked_schedules(self) -> list[ScheduleRow]: ...

    def earliest_due_schedule(self) -> ScheduleRow | None:
        """The schedule due next (an index seek on next_due)."""
        ...

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
        """A ledger row, appended to its schedule's history unless `ledger_pos` places it
        (retention's `pruned` rows only)."""
        ...

    def insert_occurrences(self, rows: Sequence[tuple[Any, ...]]) -> None:
        """Bulk insert of (schedule_id, scheduled_at, last_at, count, summary, state, reason,
        revision, run_seq, recorded_at) tuples (seeding and benchmarks)."""
        ...

    def page_occurrences(
        self, schedule_id: str, after: int | None, limit: int, *, newest_first: bool = False
    ) -> list[OccurrenceRow]:
        """In record order, after ledger position `after` (`newest_first`: in
        reverse record order, before it): keyset paging on occurrences_ledger,
        so any page is an index seek, and a row written later always lands after every
        position already handed out."""
        ...

    def occurrence_for_run(self, run_seq: int) -> OccurrenceRow | None: ...

    def last_runs(self, schedule_ids: Sequence[str]) -> dict[str, RunRow]:
        """The newest run per schedule (for `list`)."""
        ...

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
        """`host`: the host whose supervisor admits the run and executes it."""
        ...

    def insert_admitted_run(
        self,
        schedule_id: str,
        scheduled_at: int,
        revision: int,
        invocation: str,
        admitted_at: float,
        host: str | None = None,
    ) -> int:
        """A scheduled run admitted at `admitted_at` and its `admitted` ledger
        row (recorded then, naming the run): `insert_run` then
        `insert_occurrence`, which a server store sends as one statement.
        The run's seq."""
        ...

    def get_run(self, seq: int) -> RunRow | None: ...

    def runs_by_seq(self, seqs: Sequence[int]) -> dict[int, RunRow]:
        """The runs of these seqs that exist, by seq (one statement per
        IN-list chunk, not one per run)."""
        ...

    def update_run(self, seq: int, **fields: Any) -> None: ...

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
        ...

    def unfinished_runs(self) -> list[RunRow]: ...

    def admitted_runs(self) -> list[RunRow]:
        """Runs admitted but not launched yet (recovery leaves these for a tick)."""
        ...

    def active_run_counts(self, schedule_ids: Sequence[str]) -> dict[str, int]:
        """Unfinished scheduled runs per schedule: what overlap counts."""
        ...

    def all_active_run_counts(self) -> dict[str, int]: ...

    def executing_count(self, host: str | None = None) -> int:
        """Scheduled runs holding an execution slot: running, or admitted and launchable. An
        admitted run of a blocked schedule cannot launch, so it waits without a slot until
        `resume` clears the block; manual runs bypass capacity. `host`: that host's only."""
        ...

    def blocked_admitted_count(self) -> int:
        """Scheduled runs admitted but waiting for their schedule's block to clear."""
        ...

    def scheduled_running_count(self) -> int: ...

    def run_state_counts(self) -> dict[str, int]: ...

    def insert_attempt(self, run_seq: int, attempt: int, started_at: float) -> None: ...

    def mark_attempts(self, marks: Sequence[tuple[int, int, float, float]]) -> None:
        """(run_seq, attempt, started_at, run started_at): attempts and runs running."""
        ...

    def note_shim_handles(self, handles: Sequence[tuple[int, int, int, int]]) -> None:
        """(run_seq, attempt, shim_pid, shim_start_time) of started shims, in
        a transaction of its own committed without an fsync: a hint, as the
        keeper's started record holds the same."""
        ...

    def update_attempt(self, run_seq: int, attempt: int, **fields: Any) -> None: ...

    def end_attempts(self, ends: Sequence[AttemptEnd]) -> None:
        """Attempts ended: each attempt row and its run get the end's state,
        reason, exit code and times, the attempt row its output tails. Two
        statements for all the endings a tick ingests, not two per run."""
        ...

    def attempts(self, run_seq: int) -> list[AttemptRow]: ...

    def get_attempt(self, run_seq: int, attempt: int) -> AttemptRow | None: ...

    def attempt_output(self, run_seq: int, attempt: int) -> tuple[bytes | None, bytes | None]:
        """(stdout tail, stderr tail) the attempt's exit record kept in the store, the last
        64 KiB of each (`update_attempt(stdout_tail=..., stderr_tail=...)`); None: not kept
        (the attempt has not ended, or ended before tails were kept)."""
        ...

    def insert_request(
        self,
        kind: str,
        now: float,
        *,
        schedule_id: str | None = None,
        run_seq: int | None = None,
        payload: str | None = None,
    ) -> int: ...

    def pending_requests(self, limit: int = 100) -> list[RequestRow]: ...

    def pending_run_requests(self, host: str, limit: int = 100) -> list[RequestRow]:
        """Pending cancels and resumes of runs recorded on `host` (or on no host),
        oldest first: the work of that host's agent, leader or standby."""
        ...

    def get_request(self, seq: int) -> RequestRow | None: ...

    def finish_request(self, seq: int, state: str, result: str, now: float) -> bool:
        """Answer a pending request (compare-and-set on `pending`); False, with
        nothing written, if it was answered already."""
        ...

    def note_request(self, seq: int, progress: str) -> None:
        """A pending request's progress, kept in its `result` while it stays pending."""
        ...

    def set_meta(self, **values: str) -> None: ...

    def touch_meta(self, **values: str) -> None:
        """A bookkeeping write (the liveness stamp) committed without an fsync."""
        ...

    def defer_checkpoints(self) -> None:
        """This connection's commits stop folding the write-ahead log into
        the database (SQLite; nothing on a server): the caller runs
        `checkpoint()` at quiet moments instead."""
        ...

    def checkpoint(self, quiet: bool = True) -> bool:
        """Fold the log once enough was written since the last time (more
        when not `quiet`); whether it ran."""
        ...

    def changes(self) -> int | None:
        """Changes whenever another connection commits; None if unknown."""
        ...

    def watch_commits(self) -> CommitWatch | None:
        """A watch readable when another connection may have committed
        (`changes()` then says whether it did); None if commits can land
        unseen (another host's), so the supervisor polls."""
        ...

    def get_meta(self, key: str) -> str | None: ...

    def set_draining(self, host: str, state: str | None) -> None:
        """Record that `host`'s supervisor drains (`state`: its JSON), or
        no longer does (None); what `status` reports as `draining`."""
        ...

    def draining_hosts(self) -> dict[str, str]:
        """The drain states `set_draining` recorded, by host."""
        ...

    def ensure_connected(self) -> bool:
        """Reconnect if the connection to the database was lost (True if it
        did; an owner takes ownership again, ConflictError if another
        supervisor holds the store by now). A fault episode's probe."""
        ...

    def probe_space(self, min_free: int) -> None:
        """Raise the store's disk-full fault unless `min_free` bytes can be
        written where the store keeps its data. A disk-full episode's probe."""
        ...

    def supervisor_pid(self) -> int | None:
        """The pid of the supervisor owning the store, None if none does (never takes the lock)."""
        ...

    def join_supervisors(self) -> None:
        """Join the supervisors serving this store, before recovery. Several
        may serve a PostgreSQL store (a shared session lock; the lease says
        which one leads): ConflictError while `store copy` holds it. A SQLite
        store has one supervisor, which owns it through `supervisor.lock`
        before opening it: nothing more to join."""
        ...

    def take_ownership(self) -> None:
        """Own the store alone until `close()` (`store copy`): no supervisor
        may start meanwhile. ConflictError, naming its pid, if one holds it."""
        ...

    # -- leadership (one leader per store) ------------------------------------

    @property
    def kind(self) -> str:
        """ "sqlite" or "postgresql"."""
        ...

    def fence(self, epoch: int | None) -> None:
        """From now on every write transaction is a leader's of `epoch` (None:
        unfenced) and rolls back with LeaseLost, checked in that transaction,
        if the lease no longer holds that epoch unexpired. A no-op where a lock
        file fences the one supervisor (SQLite)."""
        ...

    def set_idle_limit(self, seconds: float) -> None:
        """A session idle inside a transaction this long is ended by the server."""
        ...

    def lease_channel(self, host: str, pid: int) -> Any:
        """A `wfsched.daemon.leadership.LeaseChannel` on a connection of its own,
        or None when the store has no lease (SQLite: its supervisor leads)."""
        ...

    def leader_lease(self) -> LeaseRow | None:
        """The lease as the database holds it (None: no lease, or never taken)."""
        ...

    def host_rows(self) -> list[HostRow]:
        """Every host's heartbeat, by host name."""
        ...

    def failed_runs_of_host(self, host: str, reason_prefix: str, unless: str) -> list[RunRow]:
        """Failed runs recorded on `host` whose reason starts with `reason_prefix`
        and does not contain `unless`."""
        ...

    def runs_on_lost_hosts(self, host_timeout: float) -> list[tuple[RunRow, str, float]]:
        """(run, host, last heartbeat) of running runs whose host's heartbeat is
        older than `host_timeout` seconds by the database's clock."""
        ...

    # -- `wfsched store copy` ----------------------------------------------------------

    def is_empty(self) -> bool:
        """No row in any table."""
        ...

    def export_rows(self, table: str, columns: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
        """Every row of `table` (one of `wfsched.store.copying.COPY_TABLES`), streamed."""
        ...

    def import_rows(
        self, table: str, columns: tuple[str, ...], rows: Iterable[tuple[Any, ...]]
    ) -> int:
        """Insert rows as they are, keys included; how many."""
        ...

    def after_import(self) -> None:
        """Key generators continue after the imported keys."""
        ...

    # -- read-only queries for `wfsched audit` ---------------------------------------------

    def audit_snapshot(self) -> AbstractContextManager[None]:
        """One read transaction for the whole audit, so a supervisor writing meanwhile cannot
        make the checks see half of a transaction; database errors become one-line
        StoreErrors."""
        ...

    def schema_problems(self) -> list[SchemaProblem]:
        """Every table, index or trigger the migrations create that is missing here or differs
        from what they create, by (kind, name)."""
        ...

    def audit_counts(self) -> dict[str, int]: ...

    def revision_history(self) -> dict[str, list[RevisionRow]]:
        """schedule id -> its revisions, oldest first."""
        ...

    def duplicate_instants(self) -> list[tuple[str, int, int, int, list[int]]]:
        """(schedule_id, instant, rows, run-bearing rows, run seqs) for every instant with more
        than one single (non-summary) ledger row."""
        ...

    def duplicate_scheduled_runs(self) -> list[tuple[str, int, list[int]]]:
        """(schedule_id, instant, run seqs) where two scheduled runs share an instant."""
        ...

    def runs_claimed_twice(self) -> list[tuple[int, list[str], list[int]]]:
        """(run seq, schedule ids, instants) of runs referenced by more than one occurrence row."""
        ...

    def scheduled_runs_without_admission(self) -> list[tuple[int, str, int]]:
        """(run seq, schedule id, instant) of scheduled runs no occurrence row points at."""
        ...

    def mismatched_admissions(
        self,
    ) -> list[tuple[int, str, int, bool, str, int, str]]:
        """Occurrence rows pointing at a run that is not the run of that occurrence: (run seq,
        occurrence schedule, occurrence instant, summary, run schedule, run instant, run
        kind)."""
        ...

    def admissions_without_run(self) -> list[tuple[str, int, int | None]]:
        """(schedule id, instant, run seq) of occurrence rows that claim a run which does not
        exist, or say `admitted` and point at none."""
        ...

    def ledger_rows(self, schedule_id: str) -> Iterator[LedgerRow]:
        """The schedule's ledger in instant order, streamed (an index walk)."""
        ...

    def ledger_row_counts(self) -> dict[str, int]:
        """schedule id -> its number of ledger rows."""
        ...

    def ledgers_of(self, schedule_ids: Sequence[str]) -> dict[str, list[LedgerRow]]:
        """The ledgers of several schedules, each in instant order, a statement per
        IN-list chunk (the caller bounds the rows it asks for)."""
        ...

    def ledger_high_marks_by_revision_of(
        self, schedule_ids: Sequence[str]
    ) -> dict[str, dict[int, int]]:
        """`ledger_high_marks_by_revision` of several schedules at once."""
        ...

    def misplaced_ledger_rows(self) -> list[tuple[str, int, int, int | None]]:
        """(schedule id, seq, instant, position) of occurrence rows with no ledger position, or
        with one beyond the last row ever recorded: a row written later would be placed behind
        it, where a cursor that already passed it never looks."""
        ...

    def ledger_high_marks(self) -> dict[str, int]:
        """schedule id -> the latest instant any of its rows accounts for."""
        ...

    def ledger_high_marks_by_revision(self, schedule_id: str) -> dict[int, int]:
        """revision -> the latest instant the schedule's rows of that revision account for."""
        ...

    def runs_with_attempts(self) -> Iterator[RunAttempts]: ...

    def attempts_without_run(self) -> list[tuple[int, int]]:
        """(run seq, attempt rows) for attempt rows whose run does not exist."""
        ...

    def known_run_seqs(self, seqs: list[int]) -> set[int]: ...

    # -- retention (`wfsched prune` and the supervisor's periodic prune) -------------------

    def retention_schedule_ids(self) -> list[str]:
        """Every schedule, deleted ones included: their history ages too."""
        ...

    def prunable_ledger_rows(
        self,
        schedule_id: str,
        cutoff: float,
        after: tuple[int, int] | None,
        limit: int,
    ) -> list[PrunableRow]:
        """The schedule's oldest removable occurrence rows, by (instant, seq)."""
        ...

    def prunable_runs(self, cutoff: float, after_seq: int, limit: int) -> list[tuple[int, str]]:
        """Finished runs that finished before `cutoff`, by seq: (seq, schedule_id)."""
        ...

    def occurrence_rows_of_runs(self, run_seqs: Sequence[int]) -> list[PrunableRow]:
        """The ledger rows linked to these runs (occurrences_run index)."""
        ...

    def attempt_count(self, run_seqs: Sequence[int]) -> int: ...

    def run_seqs_between(self, low: int, high: int) -> set[int]:
        """Run rows that exist with low <= seq <= high (a rowid range)."""
        ...

    def delete_occurrence_rows(self, seqs: Sequence[int]) -> int:
        """Occurrence rows first: they reference runs (occurrences.run_seq)."""
        ...

    def delete_finished_runs(self, run_seqs: Sequence[int]) -> tuple[int, int]:
        """Attempts, then the runs; (runs, attempts) removed."""
        ...

    def prunable_requests(self, cutoff: float, after_seq: int, limit: int) -> list[int]:
        """Answered requests (done or refused) answered before `cutoff`, by seq."""
        ...

    def delete_answered_requests(self, seqs: Sequence[int]) -> int:
        """The state test is repeated so no caller can remove a pending request."""
        ...

    def ledger_window(self, schedule_id: str, low: int, high: int) -> list[LedgerItem]:
        """Rows with low <= instant <= high, by (instant, seq)."""
        ...

    def ledger_neighbour(
        self, schedule_id: str, instant: int, *, before: bool
    ) -> LedgerItem | None:
        """The row just before (or after) `instant` in ledger order."""
        ...

    def update_pruned_row(
        self,
        seq: int,
        first: int,
        last: int,
        count: int | None,
        revision: int,
        reason: str,
        recorded_at: float,
        ledger_pos: int,
    ) -> None: ...

    def delete_pruned_rows(self, seqs: Sequence[int]) -> None:
        """Merged away: another `pruned` row now covers their span."""
        ...

    # -- metrics (`supervise --metrics`) ---------------------------------------------------

    def data_version(self) -> int:
        """Changes whenever another connection (a CLI command) commits; our own commits leave it
        alone, so the tick knows when to re-read schedules."""
        ...

    def schedule_ids_updated_since(self, since: float) -> list[str]:
        """Schedules an administrative change stamped at or after `since`."""
        ...

    def last_occurrence_seq(self) -> int: ...

    def ledger_counts(self, after_seq: int, through_seq: int) -> list[LedgerCount]:
        """Ledger rows with `after_seq < seq <= through_seq`, grouped. Rows that record pruning
        are bookkeeping, not decisions, and are left out."""
        ...

    def finished_run_counts(self) -> list[RunCount]:
        """Finished runs per (schedule, state, cancelled) and the newest end:
        one grouped query over the runs table."""
        ...

    def schedule_due_states(self) -> list[tuple[str, int | None, bool]]:
        """(schedule, next due instant, blocked) of every schedule not deleted."""
        ...

    def unfinished_run_states(self) -> dict[str, int]:
        """Unfinished runs (scheduled and manual) by state: a partial-index count."""
        ...

    def run_facts(self, seqs: Sequence[int]) -> list[RunFact]:
        """The few columns metrics need of the runs a tick launched or ended."""
        ...

    # -- what the operator sees of failures and of `apply` ---------------------------------

    def insert_notification(
        self,
        schedule_id: str,
        run_seq: int | None,
        scheduled_at: int | None,
        attempt: int,
        now: float,
        *,
        state: str = "running",
        reason: str | None = None,
    ) -> int:
        """Record a failure hook's launch (or its outcome, when `state` is
        final); `run_seq` None for a preflight-rejected occurrence. Its seq."""
        ...

    def finish_notification(self, seq: int, state: str, reason: str | None, now: float) -> None:
        """Record a running hook's outcome; a finished one is left alone."""
        ...

    def abandon_notifications(self, reason: str, now: float) -> int:
        """Fail hooks recorded as running by a supervisor that is gone (a hook
        runs once, so it is never re-run). How many."""
        ...

    def run_notifications(self, run_seq: int) -> list[NotificationRow]:
        """A run's hook outcomes, by attempt."""
        ...

    def standing_rejections(self) -> list[RejectionRow]:
        """Per live schedule, its newest preflight rejection not followed by a
        completed run."""
        ...

    def set_applied(self, schedule_id: str, revision: int, now: float) -> None:
        """Remember the revision `apply` last gave `schedule_id`."""
        ...

    def record_applied(
        self, rows: Sequence[tuple[str, int, float, str | None, str | None]]
    ) -> None:
        """Remember, per (schedule_id, revision, now, source_path, source_digest),
        the revision `apply` gave a schedule and the file it came from (the
        path and the digest of its bytes; None when not known)."""
        ...

    def applied_sources(self) -> dict[tuple[str, str], tuple[str, int]]:
        """(source_path, source_digest) -> (schedule_id, revision) for every
        live schedule whose revision is still the one `apply` gave it from
        that file."""
        ...

    def applied_revisions(self, schedule_ids: Iterable[str]) -> dict[str, int]:
        """The revision `apply` last gave each of `schedule_ids` that it touched."""
        ...

    # -- the web view's pages (wfsched.store.web_queries) ----------------------------------

    read_only: bool
    """Opened so that the database refuses writes (the web view)."""

    def schedules_after(
        self,
        after_id: str | None,
        limit: int,
        include_deleted: bool = False,
        *,
        having: str | None = None,
        containing: str | None = None,
    ) -> list[ScheduleRow]:
        """Schedules in id order after `after_id` (keyset paging); `having`
        and `containing` prefilter on a set flag column and on text in the id
        or stored definition (the caller still decides the match)."""
        ...

    def find_runs(
        self, where: RunFilter, before_seq: int | None = None, limit: int = 50
    ) -> list[RunRow]:
        """Runs matching `where`, newest first, before `before_seq`."""
        ...

    def ledger_days(self, schedule_ids: Sequence[str], since: int, until: int) -> list[LedgerDay]:
        """Per schedule and UTC day, how many instants in [since, until) got
        each (verdict, run state)."""
        ...

    def ledger_in_window(
        self, schedule_ids: Sequence[str], since: int, until: int, limit: int
    ) -> list[WindowItem]:
        """These schedules' ledger rows with instants in [since, until), oldest first."""
        ...
