"""Read-only queries behind `wfsched audit` (mixed into SQLiteStore).

Every statement here only reads. The checks themselves live in
`wfsched.api.audit_checks`; these methods hand it rows, grouped where SQLite can do the
grouping (duplicates, orphans) so the Python side never holds a whole table.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from wfsched.errors import StoreError
from wfsched.store.batching import chunked
from wfsched.store.connection import Connected
from wfsched.store.rows import LedgerRow, RevisionRow, RunAttempts, SchemaProblem


def normalize_sql(sql: str) -> str:
    return " ".join(sql.split())


def _texts(packed: str | None) -> list[str]:
    """A `group_concat` column as the list it aggregated (ids hold no comma)."""
    return [item for item in str(packed or "").split(",") if item]


def _ints(packed: str | int | None) -> list[int]:
    return [int(item) for item in _texts(None if packed is None else str(packed))]


class AuditQueries(Connected):
    @contextmanager
    def audit_snapshot(self) -> Iterator[None]:
        """One read transaction for the whole audit, so a supervisor writing
        meanwhile cannot make the checks see half of a transaction; database
        errors become one-line StoreErrors."""
        try:
            with self.snapshot():
                yield
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot audit the store: {exc}") from exc

    def schema_problems(self) -> list[SchemaProblem]:
        """Every table, index or trigger the migrations create that is missing
        here or differs from what they create, by (kind, name)."""
        present = {
            (kind, name): normalize_sql(sql)
            for kind, name, sql in self._execute(self.dialect.schema_objects())
        }
        problems = []
        for (kind, name), sql in sorted(self.dialect.expected_schema().items()):
            found = present.get((kind, name))
            if found != normalize_sql(sql):
                problems.append(SchemaProblem(kind, name, found))
        return problems

    def audit_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for table in ("schedules", "revisions", "occurrences", "runs", "attempts"):
            counts[table] = int(self._execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
        return counts

    def revision_history(self) -> dict[str, list[RevisionRow]]:
        """schedule id -> its revisions, oldest first."""
        history: dict[str, list[RevisionRow]] = {}
        rows = self._execute(
            "SELECT schedule_id, revision, definition, created_at, watermark FROM revisions"
            " ORDER BY schedule_id, revision"
        )
        for schedule_id, *fields in rows:
            history.setdefault(schedule_id, []).append(RevisionRow(*fields))
        return history

    # -- admissions ---------------------------------------------------------------

    def duplicate_instants(self) -> list[tuple[str, int, int, int, list[int]]]:
        """(schedule_id, instant, rows, run-bearing rows, run seqs) for every
        instant with more than one single (non-summary) ledger row."""
        rows = self._execute(
            "SELECT schedule_id, scheduled_at, COUNT(*),"
            f" SUM(CASE WHEN run_seq IS NOT NULL OR state = 'admitted' THEN 1 ELSE 0 END),"
            f" {self.dialect.group_concat('run_seq')}"
            " FROM occurrences WHERE summary = 0 GROUP BY schedule_id, scheduled_at"
            " HAVING COUNT(*) > 1 ORDER BY schedule_id, scheduled_at"
        )
        return [(s, at, int(n), int(bearing or 0), _ints(seqs)) for s, at, n, bearing, seqs in rows]

    def duplicate_scheduled_runs(self) -> list[tuple[str, int, list[int]]]:
        """(schedule_id, instant, run seqs) where two scheduled runs share an instant."""
        rows = self._execute(
            f"SELECT schedule_id, scheduled_at, {self.dialect.group_concat('seq')} FROM runs"
            " WHERE kind = 'scheduled' GROUP BY schedule_id, scheduled_at"
            " HAVING COUNT(*) > 1 ORDER BY schedule_id, scheduled_at"
        )
        return [(s, at, _ints(seqs)) for s, at, seqs in rows]

    def runs_claimed_twice(self) -> list[tuple[int, list[str], list[int]]]:
        """(run seq, schedule ids, instants) of runs referenced by more than one
        occurrence row."""
        rows = self._execute(
            f"SELECT run_seq, {self.dialect.group_concat('schedule_id')},"
            f" {self.dialect.group_concat('scheduled_at')}"
            " FROM occurrences WHERE run_seq IS NOT NULL GROUP BY run_seq"
            " HAVING COUNT(*) > 1 ORDER BY run_seq"
        )
        return [(seq, _texts(ids), _ints(instants)) for seq, ids, instants in rows]

    def scheduled_runs_without_admission(self) -> list[tuple[int, str, int]]:
        """(run seq, schedule id, instant) of scheduled runs no occurrence row points at."""
        rows = self._execute(
            "SELECT r.seq, r.schedule_id, r.scheduled_at FROM runs r"
            " LEFT JOIN occurrences o ON o.run_seq = r.seq"
            " WHERE r.kind = 'scheduled' AND o.seq IS NULL ORDER BY r.seq"
        )
        return [(seq, s, at) for seq, s, at in rows]

    def mismatched_admissions(
        self,
    ) -> list[tuple[int, str, int, bool, str, int, str]]:
        """Occurrence rows pointing at a run that is not the run of that
        occurrence: (run seq, occurrence schedule, occurrence instant, summary,
        run schedule, run instant, run kind)."""
        rows = self._execute(
            "SELECT r.seq, o.schedule_id, o.scheduled_at, o.summary, r.schedule_id,"
            " r.scheduled_at, r.kind FROM occurrences o JOIN runs r ON r.seq = o.run_seq"
            " WHERE o.schedule_id != r.schedule_id OR o.scheduled_at != r.scheduled_at"
            " OR r.kind != 'scheduled' OR o.summary != 0 ORDER BY r.seq, o.seq"
        )
        return [
            (seq, s, at, bool(summary), rs, rat, kind)
            for seq, s, at, summary, rs, rat, kind in rows
        ]

    def admissions_without_run(self) -> list[tuple[str, int, int | None]]:
        """(schedule id, instant, run seq) of occurrence rows that claim a run
        which does not exist, or say `admitted` and point at none."""
        rows = self._execute(
            "SELECT o.schedule_id, o.scheduled_at, o.run_seq FROM occurrences o"
            " LEFT JOIN runs r ON r.seq = o.run_seq"
            " WHERE (o.run_seq IS NOT NULL AND r.seq IS NULL)"
            " OR (o.run_seq IS NULL AND o.state = 'admitted') ORDER BY o.schedule_id, o.seq"
        )
        return [(s, at, seq) for s, at, seq in rows]

    # -- the ledger ------------------------------------------------------------------

    def ledger_rows(self, schedule_id: str) -> Iterator[LedgerRow]:
        """The schedule's ledger in instant order, streamed (an index walk)."""
        cursor = self._execute(
            "SELECT seq, scheduled_at, last_at, count, summary, state, revision"
            " FROM occurrences WHERE schedule_id = ? ORDER BY scheduled_at, seq",
            (schedule_id,),
        )
        for seq, at, last, count, summary, state, revision in cursor:
            yield LedgerRow(seq, at, last, count, bool(summary), state, revision)

    def ledger_row_counts(self) -> dict[str, int]:
        """schedule id -> its number of ledger rows (how the audit sizes the
        batches it reads ledgers in)."""
        rows = self._execute("SELECT schedule_id, COUNT(*) FROM occurrences GROUP BY schedule_id")
        return {schedule_id: int(count) for schedule_id, count in rows}

    def ledgers_of(self, schedule_ids: Sequence[str]) -> dict[str, list[LedgerRow]]:
        """The ledgers of several schedules, each in instant order as `ledger_rows`
        streams one: a statement per IN-list chunk instead of one per schedule (on
        a database server each is a round trip). Held in memory: the caller
        bounds the rows it asks for."""
        ledgers: dict[str, list[LedgerRow]] = {}
        for chunk in chunked(schedule_ids):
            marks = ",".join("?" for _ in chunk)
            rows = self._execute(
                "SELECT schedule_id, seq, scheduled_at, last_at, count, summary, state, revision"
                f" FROM occurrences WHERE schedule_id IN ({marks})"
                " ORDER BY schedule_id, scheduled_at, seq",
                chunk,
            ).fetchall()  # in one call: psycopg converts row by row when iterated
            for schedule_id, seq, at, last, count, summary, state, revision in rows:
                ledgers.setdefault(schedule_id, []).append(
                    LedgerRow(seq, at, last, count, bool(summary), state, revision)
                )
        return ledgers

    def misplaced_ledger_rows(self) -> list[tuple[str, int, int, int | None]]:
        """(schedule id, seq, instant, position) of occurrence rows with no
        ledger position, or with one beyond the last row ever recorded: a
        row written later would be placed behind it, where a cursor that
        already passed it never looks."""
        rows = self._execute(
            "SELECT schedule_id, seq, scheduled_at, ledger_pos FROM occurrences"
            " WHERE ledger_pos IS NULL OR ledger_pos >"
            f" COALESCE({self.dialect.highest_seq('occurrences')}, 0) ORDER BY schedule_id, seq"
        )
        return [(s, seq, at, pos) for s, seq, at, pos in rows]

    def ledger_high_marks(self) -> dict[str, int]:
        """schedule id -> the latest instant any of its rows accounts for."""
        rows = self._execute(
            "SELECT schedule_id, MAX(COALESCE(last_at, scheduled_at)) FROM occurrences"
            " GROUP BY schedule_id"
        )
        return {schedule_id: int(high) for schedule_id, high in rows}

    def ledger_high_marks_by_revision(self, schedule_id: str) -> dict[int, int]:
        """revision -> the latest instant the schedule's rows of that revision
        account for."""
        rows = self._execute(
            "SELECT revision, MAX(COALESCE(last_at, scheduled_at)) FROM occurrences"
            " WHERE schedule_id = ? GROUP BY revision",
            (schedule_id,),
        )
        return {revision: int(high) for revision, high in rows}

    def ledger_high_marks_by_revision_of(
        self, schedule_ids: Sequence[str]
    ) -> dict[str, dict[int, int]]:
        """`ledger_high_marks_by_revision` of several schedules, a statement per
        IN-list chunk."""
        highs: dict[str, dict[int, int]] = {}
        for chunk in chunked(schedule_ids):
            marks = ",".join("?" for _ in chunk)
            rows = self._execute(
                "SELECT schedule_id, revision, MAX(COALESCE(last_at, scheduled_at))"
                f" FROM occurrences WHERE schedule_id IN ({marks}) GROUP BY schedule_id, revision",
                chunk,
            )
            for schedule_id, revision, high in rows:
                highs.setdefault(schedule_id, {})[revision] = int(high)
        return highs

    # -- runs and attempts -------------------------------------------------------------

    def runs_with_attempts(self) -> Iterator[RunAttempts]:
        packed_attempts = self.dialect.group_concat("a.attempt || ':' || a.state")
        cursor = self._execute(
            "SELECT r.seq, r.schedule_id, r.kind, r.state, r.attempt, r.host,"
            f" {packed_attempts}"
            " FROM runs r LEFT JOIN attempts a ON a.run_seq = r.seq"
            " GROUP BY r.seq ORDER BY r.seq"
        )
        for seq, schedule_id, kind, state, attempt, host, packed in cursor:
            attempts: dict[int, str] = {}
            for item in (packed or "").split(","):
                if item:
                    number, _, attempt_state = item.partition(":")
                    attempts[int(number)] = attempt_state
            yield RunAttempts(seq, schedule_id, kind, state, attempt, attempts, host)

    def attempts_without_run(self) -> list[tuple[int, int]]:
        """(run seq, attempt rows) for attempt rows whose run does not exist."""
        rows = self._execute(
            "SELECT a.run_seq, COUNT(*) FROM attempts a LEFT JOIN runs r ON r.seq = a.run_seq"
            " WHERE r.seq IS NULL GROUP BY a.run_seq ORDER BY a.run_seq"
        )
        return [(seq, int(n)) for seq, n in rows]

    def known_run_seqs(self, seqs: list[int]) -> set[int]:
        found: set[int] = set()
        for chunk in chunked(seqs):
            marks = ",".join("?" for _ in chunk)
            rows = self._execute(f"SELECT seq FROM runs WHERE seq IN ({marks})", chunk)
            found.update(seq for (seq,) in rows)
        return found
