"""The read side of the API: `list`, `get`, `occurrences`.

Kept apart from `wfsched.api.admin` so a read imports neither the definition
parser nor the decision logic (nor croniter): `wfsched list --json` is a
whole process, and its budget is 150 ms.
"""

from __future__ import annotations

from typing import Any

from wfsched.api.paging import decode_directed, encode_cursor
from wfsched.api.views import (
    listed_schedule_view,
    occurrence_view,
    pending_view,
    rejection_view,
    schedule_view,
)
from wfsched.domain.timeutil import Clock, wall_clock
from wfsched.errors import NotFoundError, UsageError
from wfsched.store import ScheduleRow, Store

MAX_PAGE = 100


class Reads:
    def __init__(self, store: Store, clock: Clock = wall_clock) -> None:
        self.store = store
        self.clock = clock

    def row(self, schedule_id: str) -> ScheduleRow:
        row = self.store.get_schedule(schedule_id)
        if row is None:
            raise NotFoundError(f"no schedule {schedule_id!r}; `wfsched list --all` shows them")
        return row

    def get(self, schedule_id: str) -> dict[str, Any]:
        with self.store.snapshot():
            row = self.row(schedule_id)
            active = self.store.active_run_counts([row.id]).get(row.id, 0)
            rejected = {found.schedule_id: found for found in self.store.standing_rejections()}
        view = schedule_view(row, active)
        view["preflight_rejected"] = rejection_view(rejected.get(row.id))
        return view

    def schedules(self, include_deleted: bool = False) -> list[dict[str, Any]]:
        with self.store.snapshot():
            rows = self.store.list_schedules(include_deleted)
            active = self.store.all_active_run_counts()
            last_runs = self.store.last_runs([row.id for row in rows])
            rejected = {found.schedule_id: found for found in self.store.standing_rejections()}
        views = [
            listed_schedule_view(
                row, active.get(row.id, 0), last_runs.get(row.id), rejected.get(row.id)
            )
            for row in rows
        ]
        return views

    def occurrences(
        self,
        schedule_id: str,
        limit: int = 20,
        cursor: str | None = None,
        *,
        newest_first: bool = False,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """History oldest first, in the order it was recorded (`newest_first`:
        the other way round); a held candidate is a `pending` row at the top
        of the first page either way (it counts toward `limit`).

        Record order, not instant order, is what makes pages stable: a row
        written late for an older instant comes after the rows written before
        it, so a cursor that already passed that instant still reaches it.
        """
        if not 1 <= limit <= MAX_PAGE:
            raise UsageError(f"--limit must be between 1 and {MAX_PAGE}")
        after: int | None = None
        items: list[dict[str, Any]] = []
        with self.store.snapshot():
            row = self.row(schedule_id)
            if cursor is not None:
                after = decode_directed(cursor, "pos", "before", reverse=newest_first)
            elif row.candidate_at is not None and row.candidate_why is not None:
                items.append(
                    pending_view(row.id, row.candidate_at, row.candidate_why, row.revision)
                )
            room = limit - len(items)
            # With no room left, one row still tells whether a next page exists.
            rows = self.store.page_occurrences(row.id, after, room + 1, newest_first=newest_first)
        items.extend(occurrence_view(occurrence) for occurrence in rows[:room])
        key = "before" if newest_first else "pos"
        next_cursor = None
        if room == 0:
            if rows:
                next_cursor = encode_cursor(**{key: None})
        elif len(rows) > room:
            next_cursor = encode_cursor(**{key: rows[room - 1].ledger_pos})
        return items, next_cursor
