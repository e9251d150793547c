"""Paged queries behind the web view (mixed into Store).

Each answers one page from an index: schedules in id order, runs newest
first by seq with filters, and the ledger of a page of schedules over a time
window (`occurrences_page` is `(schedule_id, scheduled_at, seq)`), so a page
costs the same over 10,000 schedules and a million ledger rows as over ten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wfsched.store.connection import Connected
from wfsched.store.rows import RunRow, ScheduleRow

_SCHEDULE_COLUMNS = (
    "id, revision, definition, created_at, updated_at, paused, deleted_at, exhausted,"
    " blocked_reason, consumed_through, candidate_at, candidate_why, next_due"
)
_RUN_COLUMNS = (
    "seq, schedule_id, kind, scheduled_at, state, reason, exit_code, revision, invocation,"
    " admitted_at, started_at, finished_at, attempt, host"
)


SCHEDULE_FLAGS = {
    "paused": "paused <> 0",
    "blocked_reason": "blocked_reason IS NOT NULL",
    "deleted_at": "deleted_at IS NOT NULL",
    "exhausted": "exhausted <> 0",
}
"""The columns a schedules prefilter may require to be set."""


@dataclass(frozen=True)
class RunFilter:
    """What the runs page narrows to; None leaves a field open. `since` and
    `until` bound the admission time (epoch seconds, `until` exclusive)."""

    schedule_id: str | None = None
    state: str | None = None
    host: str | None = None
    kind: str | None = None
    since: float | None = None
    until: float | None = None


@dataclass(frozen=True)
class LedgerDay:
    """Ledger instants of one schedule on one UTC day with one (verdict, run state)."""

    schedule_id: str
    day: int
    """Days since the epoch (UTC)."""
    state: str
    run_state: str | None
    """The state of the run the verdict admitted (None: no run)."""
    count: int


@dataclass(frozen=True)
class WindowItem:
    """One ledger row in a time window, with its run's placement and times."""

    schedule_id: str
    scheduled_at: int
    last_at: int | None
    summary: bool
    state: str
    reason: str | None
    run_seq: int | None
    run_state: str | None
    run_reason: str | None
    host: str | None
    started_at: float | None
    finished_at: float | None


class WebQueries(Connected):
    def schedules_after(
        self,
        after_id: str | None,
        limit: int,
        include_deleted: bool = False,
        *,
        having: str | None = None,
        containing: str | None = None,
    ) -> list[ScheduleRow]:
        """Schedules in id order after `after_id` (keyset paging on the key).

        `having` keeps only rows whose column of that name is set (one of
        SCHEDULE_FLAGS); `containing` only rows whose id or stored definition
        holds the text, case-folded. Both are prefilters that let a filtered
        page skip most rows in the database; the caller decides the match
        itself (`ScheduleRow.state`, the description), so a prefilter only
        needs to keep every row that could match."""
        clauses = [] if include_deleted else ["deleted_at IS NULL"]
        params: list[Any] = []
        if after_id is not None:
            clauses.append("id > ?")
            params.append(after_id)
        if having is not None:
            clauses.append(SCHEDULE_FLAGS[having])
        if containing:
            escaped = containing.lower().replace("\\", "\\\\").replace("%", "\\%")
            escaped = escaped.replace("_", "\\_")
            clauses.append("(LOWER(id) LIKE ? ESCAPE '\\' OR LOWER(definition) LIKE ? ESCAPE '\\')")
            params += [f"%{escaped}%", f"%{escaped}%"]
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._execute(
            f"SELECT {_SCHEDULE_COLUMNS} FROM schedules{where} ORDER BY id LIMIT ?",
            (*params, limit),
        )
        return [ScheduleRow(*row) for row in rows]

    def find_runs(
        self, where: RunFilter, before_seq: int | None = None, limit: int = 50
    ) -> list[RunRow]:
        """Runs matching `where`, newest first; keyset paging on seq."""
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("schedule_id", where.schedule_id),
            ("state", where.state),
            ("host", where.host),
            ("kind", where.kind),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if where.since is not None:
            clauses.append("admitted_at >= ?")
            params.append(where.since)
        if where.until is not None:
            clauses.append("admitted_at < ?")
            params.append(where.until)
        if before_seq is not None:
            clauses.append("seq < ?")
            params.append(before_seq)
        condition = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._execute(
            f"SELECT {_RUN_COLUMNS} FROM runs{condition} ORDER BY seq DESC LIMIT ?",
            (*params, limit),
        )
        return [RunRow(*row) for row in rows]

    def ledger_days(self, schedule_ids: Sequence[str], since: int, until: int) -> list[LedgerDay]:
        """Instants decided per schedule, UTC day and (verdict, run state), for
        instants in [since, until): a summary row counts as its instants."""
        if not schedule_ids:
            return []
        marks = ",".join("?" for _ in schedule_ids)
        rows = self._execute(
            "SELECT o.schedule_id, o.scheduled_at / 86400, o.state, r.state,"
            " SUM(CASE WHEN o.summary = 1 THEN COALESCE(o.count, 1) ELSE 1 END)"
            " FROM occurrences o LEFT JOIN runs r ON r.seq = o.run_seq"
            f" WHERE o.schedule_id IN ({marks}) AND o.scheduled_at >= ? AND o.scheduled_at < ?"
            " GROUP BY o.schedule_id, o.scheduled_at / 86400, o.state, r.state",
            (*schedule_ids, since, until),
        )
        return [LedgerDay(row[0], int(row[1]), row[2], row[3], int(row[4])) for row in rows]

    def ledger_in_window(
        self, schedule_ids: Sequence[str], since: int, until: int, limit: int
    ) -> list[WindowItem]:
        """The ledger rows of these schedules with instants in [since, until),
        oldest first, at most `limit` (the caller says when it was cut)."""
        if not schedule_ids:
            return []
        marks = ",".join("?" for _ in schedule_ids)
        rows = self._execute(
            "SELECT o.schedule_id, o.scheduled_at, o.last_at, o.summary, o.state, o.reason,"
            " o.run_seq, r.state, r.reason, r.host, r.started_at, r.finished_at"
            " FROM occurrences o LEFT JOIN runs r ON r.seq = o.run_seq"
            f" WHERE o.schedule_id IN ({marks}) AND o.scheduled_at >= ? AND o.scheduled_at < ?"
            " ORDER BY o.scheduled_at, o.seq LIMIT ?",
            (*schedule_ids, since, until, limit),
        )
        return [
            WindowItem(
                row[0],
                int(row[1]),
                row[2],
                bool(row[3]),
                row[4],
                row[5],
                row[6],
                row[7],
                row[8],
                row[9],
                row[10],
                row[11],
            )
            for row in rows
        ]
