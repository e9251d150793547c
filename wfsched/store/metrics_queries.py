"""Queries behind the Prometheus metrics (mixed into Store).

Every tick asks only for what is new (occurrence rows past a sequence
number, an index range that is empty on an idle tick) and for the few rows
the tick changed. The store-wide per-schedule facts that another supervisor
may change (finished runs, next due instants) are read by two grouped
queries once per refresh interval (`wfsched.daemon.metrics`), whatever the
number of schedules or scrapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from wfsched.store.batching import chunked
from wfsched.store.connection import Connected

_UNFINISHED = "state IN ('admitted', 'running', 'interrupted')"


@dataclass(frozen=True)
class LedgerCount:
    """Occurrence rows of one (schedule, state, reason), and the newest recording."""

    schedule_id: str
    state: str
    reason: str | None
    count: int
    last_recorded_at: float


@dataclass(frozen=True)
class RunCount:
    """Finished runs of one (schedule, state, cancelled by the operator)."""

    schedule_id: str
    state: str
    cancelled: bool
    count: int
    last_finished_at: float | None


@dataclass(frozen=True)
class RunFact:
    seq: int
    schedule_id: str
    kind: str
    scheduled_at: int
    state: str
    reason: str | None
    started_at: float | None
    finished_at: float | None
    attempt: int


class MetricsQueries(Connected):
    def data_version(self) -> int:
        """Changes whenever another connection (a CLI command) commits; our own
        commits leave it alone, so the tick knows when to re-read schedules."""
        return int(self._execute(self.dialect.data_version()).fetchone()[0])

    def schedule_ids_updated_since(self, since: float) -> list[str]:
        """Schedules an administrative change stamped at or after `since`."""
        rows = self._execute("SELECT id FROM schedules WHERE updated_at >= ?", (since,))
        return [row[0] for row in rows]

    def last_occurrence_seq(self) -> int:
        row = self._execute("SELECT MAX(seq) FROM occurrences").fetchone()
        return int(row[0] or 0)

    def ledger_counts(self, after_seq: int, through_seq: int) -> list[LedgerCount]:
        """Ledger rows with `after_seq < seq <= through_seq`, grouped. Rows that
        record pruning are bookkeeping, not decisions, and are left out."""
        rows = self._execute(
            "SELECT schedule_id, state, reason, COUNT(*), MAX(recorded_at) FROM occurrences"
            " WHERE seq > ? AND seq <= ? AND state != 'pruned'"
            " GROUP BY schedule_id, state, reason",
            (after_seq, through_seq),
        )
        return [LedgerCount(*row) for row in rows]

    def finished_run_counts(self) -> list[RunCount]:
        rows = self._execute(
            "SELECT schedule_id, state, COALESCE(reason, '') = 'cancelled', COUNT(*),"
            " MAX(finished_at) FROM runs WHERE state IN ('completed', 'failed')"
            " GROUP BY schedule_id, state, COALESCE(reason, '') = 'cancelled'"
        )
        return [
            RunCount(schedule_id, state, bool(cancelled), count, last)
            for schedule_id, state, cancelled, count, last in rows
        ]

    def schedule_due_states(self) -> list[tuple[str, int | None, bool]]:
        """(schedule, next due instant, blocked) of every schedule not deleted:
        two narrow columns, so a standby sees the leader advance its schedules
        without reading their definitions."""
        rows = self._execute(
            "SELECT id, next_due, COALESCE(blocked_reason, '') != '' FROM schedules"
            " WHERE deleted_at IS NULL"
        )
        return [(schedule_id, next_due, bool(blocked)) for schedule_id, next_due, blocked in rows]

    def unfinished_run_states(self) -> dict[str, int]:
        """Unfinished runs (scheduled and manual) by state: a partial-index count."""
        rows = self._execute(f"SELECT state, COUNT(*) FROM runs WHERE {_UNFINISHED} GROUP BY state")
        return dict(rows.fetchall())

    def run_facts(self, seqs: Sequence[int]) -> list[RunFact]:
        """The few columns metrics need of the runs a tick launched or ended."""
        found: list[RunFact] = []
        for chunk in chunked(seqs):
            marks = ",".join("?" for _ in chunk)
            rows = self._execute(
                "SELECT seq, schedule_id, kind, scheduled_at, state, reason, started_at,"
                f" finished_at, attempt FROM runs WHERE seq IN ({marks})",
                chunk,
            )
            found.extend(RunFact(*row) for row in rows)
        return found
