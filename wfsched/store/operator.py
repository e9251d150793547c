"""Queries behind what the operator sees of failures and of `apply`
(mixed into Store): failure-hook outcomes, preflight rejections still
standing, and the revision each schedule last got from `apply`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from wfsched.store.batching import chunked
from wfsched.store.connection import Connected
from wfsched.store.rows import NotificationRow, RejectionRow

_NOTIFICATION_COLUMNS = (
    "seq, schedule_id, run_seq, scheduled_at, attempt, state, reason, started_at, finished_at"
)


class OperatorQueries(Connected):
    # -- failure hooks -----------------------------------------------------------

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
        cursor = self._execute(
            "INSERT INTO notifications (schedule_id, run_seq, scheduled_at, attempt, state,"
            " reason, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
            + self.dialect.returning_key(),
            (
                schedule_id,
                run_seq,
                scheduled_at,
                attempt,
                state,
                reason,
                now,
                None if state == "running" else now,
            ),
        )
        return self.dialect.inserted_id(cursor)

    def finish_notification(self, seq: int, state: str, reason: str | None, now: float) -> None:
        self._execute(
            "UPDATE notifications SET state = ?, reason = ?, finished_at = ?"
            " WHERE seq = ? AND state = 'running'",
            (state, reason, now, seq),
        )

    def abandon_notifications(self, reason: str, now: float) -> int:
        """Hooks recorded as running by a supervisor that is gone: they are
        never re-run (a hook runs once), so their ending is unknown."""
        return self._execute(
            "UPDATE notifications SET state = 'failed', reason = ?, finished_at = ?"
            " WHERE state = 'running'",
            (reason, now),
        ).rowcount

    def run_notifications(self, run_seq: int) -> list[NotificationRow]:
        rows = self._execute(
            f"SELECT {_NOTIFICATION_COLUMNS} FROM notifications WHERE run_seq IS NOT NULL"
            " AND run_seq = ? ORDER BY attempt, seq",
            (run_seq,),
        )
        return [NotificationRow(*row) for row in rows]

    # -- preflight rejections --------------------------------------------------------

    def standing_rejections(self) -> list[RejectionRow]:
        """Per schedule not deleted: the newest `preflight-rejected` occurrence,
        unless a run admitted after it has completed since. A small partial
        index finds the rejections; only their schedules' runs are read."""
        rows = self._execute(
            "SELECT o.schedule_id, o.scheduled_at, o.reason FROM occurrences o"
            " JOIN schedules s ON s.id = o.schedule_id AND s.deleted_at IS NULL"
            " WHERE o.state = 'preflight-rejected' AND o.seq = (SELECT MAX(seq) FROM occurrences"
            "  WHERE schedule_id = o.schedule_id AND state = 'preflight-rejected')"
            " AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.schedule_id = o.schedule_id"
            "  AND r.state = 'completed' AND r.admitted_at >= o.recorded_at)"
            " ORDER BY o.schedule_id"
        )
        return [RejectionRow(*row) for row in rows]

    # -- apply's memory --------------------------------------------------------------

    def set_applied(self, schedule_id: str, revision: int, now: float) -> None:
        self.record_applied([(schedule_id, revision, now, None, None)])

    def record_applied(
        self, rows: Sequence[tuple[str, int, float, str | None, str | None]]
    ) -> None:
        if rows:
            self._execute_many(
                self.dialect.upsert(
                    "applied",
                    "schedule_id",
                    ("revision", "applied_at", "source_path", "source_digest"),
                ),
                rows,
            )

    def applied_sources(self) -> dict[tuple[str, str], tuple[str, int]]:
        # Only schedules still live at the revision apply gave them: an
        # `edit` or `update` since (a newer revision) or a delete makes the
        # file's bytes say nothing about the stored schedule any more.
        rows = self._execute(
            "SELECT a.source_path, a.source_digest, a.schedule_id, a.revision FROM applied a"
            " JOIN schedules s ON s.id = a.schedule_id"
            " WHERE a.source_digest IS NOT NULL AND s.deleted_at IS NULL"
            " AND s.revision = a.revision"
        )
        return {(path, digest): (schedule, revision) for path, digest, schedule, revision in rows}

    def applied_revisions(self, schedule_ids: Iterable[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for chunk in chunked(list(schedule_ids)):
            rows = self._execute(
                "SELECT schedule_id, revision FROM applied"
                f" WHERE schedule_id IN ({','.join('?' for _ in chunk)})",
                chunk,
            )
            found.update(dict(rows.fetchall()))
        return found
