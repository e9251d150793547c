"""Paged overviews for the web view: schedules, runs, the calendar of
outcomes per day and the timeline of runs over a window.

Each reads one page through the store's keyset queries
(`wfsched.store.web_queries`), maps rows with the same views the CLI prints
(`wfsched.api.views`), and shows a ledger row's state the way `occurrences`
does (`shown_state`), so the web view computes no state of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from wfsched.api.views import (
    listed_schedule_view,
    run_view,
    shown_state,
    stored_document,
)
from wfsched.domain.timeutil import Clock, format_instant, wall_clock
from wfsched.errors import StoreError, UsageError
from wfsched.store import ScheduleRow, Store, run_id
from wfsched.store.web_queries import RunFilter

SCHEDULE_STATES = ("active", "paused", "blocked", "exhausted", "deleted")
_STATE_FLAG = {
    "paused": "paused",
    "blocked": "blocked_reason",
    "exhausted": "exhausted",
    "deleted": "deleted_at",
}
"""The column a schedule in that state must have set (the store's prefilter;
`ScheduleRow.state` still decides)."""
_PLAIN = re.compile(r"[ -!#-\[\]-~]+")
"""Text the stored JSON holds as written (printable ASCII without `"` and
backslash), so the store may prefilter on it."""
RUN_KINDS = ("scheduled", "manual")
DAY = 86400
SCAN_CHUNK = 500
"""Schedules read per statement while a filtered page fills."""
WINDOW_ROWS = 5000
"""Ledger rows one timeline page draws at most (the page says when it was cut)."""


def outcome_class(state: str) -> str:
    """The colour a shown state gets in the calendar and the timeline."""
    if state == "completed":
        return "completed"
    if state in ("failed", "preflight-rejected"):
        return "failed"
    if state.startswith("skipped-"):
        return "skipped"
    if state in ("running", "admitted"):
        return "running"
    return "other"


@dataclass
class CalendarRow:
    schedule_id: str
    cells: dict[int, dict[str, int]] = field(default_factory=dict)
    """Day (since the epoch, UTC) -> outcome class -> instants."""

    def cell(self, day: int) -> dict[str, int]:
        return self.cells.get(day, {})


@dataclass
class Lane:
    schedule_id: str
    bars: list[dict[str, Any]] = field(default_factory=list)
    """Runs: start, end (epoch seconds), class, state, run_id, host, at."""
    marks: list[dict[str, Any]] = field(default_factory=list)
    """Verdicts without a run (skips, rejections): at, until, class, state, reason."""


class Overview:
    def __init__(self, store: Store, clock: Clock = wall_clock) -> None:
        self.store = store
        self.clock = clock

    def _schedule_rows(
        self, state: str | None, text: str | None, after: str | None, limit: int
    ) -> tuple[list[ScheduleRow], str | None]:
        """A page of schedules matching the filter, and the id to continue after.

        The filter runs on `ScheduleRow.state` (the one definition of a
        schedule's state) over chunks in id order, so a page reads as many
        rows as it must skip, and no more.
        """
        if state is not None and state not in SCHEDULE_STATES:
            raise UsageError(f"state must be one of {', '.join(SCHEDULE_STATES)}")
        needle = (text or "").strip().casefold()
        found: list[ScheduleRow] = []
        cursor = after
        having = _STATE_FLAG.get(state or "")
        containing = needle if _PLAIN.fullmatch(needle) else None
        while len(found) <= limit:
            chunk = self.store.schedules_after(
                cursor, SCAN_CHUNK, include_deleted=True, having=having, containing=containing
            )
            for row in chunk:
                if row.state == "deleted" and state != "deleted":
                    continue
                if state is not None and row.state != state:
                    continue
                if needle and needle not in row.id.casefold() and needle not in _described(row):
                    continue
                found.append(row)
            if len(chunk) < SCAN_CHUNK:
                break
            cursor = chunk[-1].id
        more = len(found) > limit
        page = found[:limit]
        return page, page[-1].id if more and page else None

    def schedules(
        self,
        *,
        state: str | None = None,
        text: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of `list`'s views (with last outcome and standing
        rejection), and the id the next page starts after (None: last page)."""
        with self.store.snapshot():
            rows, next_after = self._schedule_rows(state, text, after, limit)
            ids = [row.id for row in rows]
            active = self.store.active_run_counts(ids)
            last_runs = self.store.last_runs(ids)
            rejected = {found.schedule_id: found for found in self.store.standing_rejections()}
        views = []
        for row in rows:
            view = listed_schedule_view(
                row, active.get(row.id, 0), last_runs.get(row.id), rejected.get(row.id)
            )
            view["next_due_epoch"] = row.next_due if view["next_due"] else None
            views.append(view)
        return views, next_after

    def runs(
        self, where: RunFilter, before: int | None = None, limit: int = 50
    ) -> tuple[list[dict[str, Any]], int | None]:
        """One page of run views matching `where`, newest first, and the seq
        the next page comes before (None: last page)."""
        if where.kind is not None and where.kind not in RUN_KINDS:
            raise UsageError(f"kind must be one of {', '.join(RUN_KINDS)}")
        with self.store.snapshot():
            rows = self.store.find_runs(where, before_seq=before, limit=limit + 1)
            items = [run_view(row, self.store.attempts(row.seq)) for row in rows[:limit]]
        for item, row in zip(items, rows, strict=False):
            item["duration"] = _duration(row.started_at, row.finished_at)
        return items, rows[limit - 1].seq if len(rows) > limit else None

    def durations(self, schedule_id: str, limit: int = 50) -> list[dict[str, Any]]:
        """The schedule's latest finished runs, oldest first: what the duration chart draws."""
        rows = self.store.find_runs(RunFilter(schedule_id=schedule_id), limit=limit * 2)
        done = [row for row in rows if row.started_at is not None and row.finished_at is not None]
        return [
            {
                "run_id": row.run_id,
                "state": row.state,
                "class": outcome_class(row.state),
                "started_at": row.started_at,
                "seconds": max(0.0, (row.finished_at or 0.0) - (row.started_at or 0.0)),
            }
            for row in reversed(done[:limit])
        ]

    def calendar(
        self, *, days: int = 90, after: str | None = None, limit: int = 25
    ) -> tuple[list[int], list[CalendarRow], str | None]:
        """The last `days` UTC days (today included) for a page of schedules:
        per day the instants the ledger decided, by outcome class."""
        if not 1 <= days <= 366:
            raise UsageError("days must be between 1 and 366")
        today = int(self.clock()) // DAY
        day_list = list(range(today - days + 1, today + 1))
        with self.store.snapshot():
            rows, next_after = self._schedule_rows(None, None, after, limit)
            ids = [row.id for row in rows]
            counted = self.store.ledger_days(ids, day_list[0] * DAY, (today + 1) * DAY)
        table = {row.id: CalendarRow(row.id) for row in rows}
        for item in counted:
            state = shown_state(item.state, None if item.run_state is None else 0, item.run_state)
            cell = table[item.schedule_id].cells.setdefault(item.day, {})
            kind = outcome_class(state)
            cell[kind] = cell.get(kind, 0) + item.count
        return day_list, list(table.values()), next_after

    def timeline(
        self, *, hours: int = 24, after: str | None = None, limit: int = 25
    ) -> tuple[float, float, list[Lane], str | None, bool]:
        """Lanes for a page of schedules over the last `hours`: runs as bars,
        verdicts without a run as marks. Returns (start, end, lanes, next
        page's after, cut: the window held more rows than one page draws)."""
        if not 1 <= hours <= 24 * 31:
            raise UsageError("hours must be between 1 and 744")
        end = self.clock()
        start = end - hours * 3600
        with self.store.snapshot():
            rows, next_after = self._schedule_rows(None, None, after, limit)
            ids = [row.id for row in rows]
            items = self.store.ledger_in_window(ids, int(start), int(end) + 1, WINDOW_ROWS + 1)
        lanes = {row.id: Lane(row.id) for row in rows}
        for item in items[:WINDOW_ROWS]:
            state = shown_state(item.state, item.run_seq, item.run_state)
            lane = lanes[item.schedule_id]
            if item.run_seq is not None:
                begin = item.started_at if item.started_at is not None else item.scheduled_at
                lane.bars.append(
                    {
                        "start": begin,
                        "end": item.finished_at if item.finished_at is not None else end,
                        "class": outcome_class(state),
                        "state": state,
                        "run_id": run_id(item.run_seq),
                        "host": item.host,
                        "at": format_instant(item.scheduled_at),
                    }
                )
            else:
                lane.marks.append(
                    {
                        "at": item.scheduled_at,
                        "until": item.last_at if item.summary and item.last_at else None,
                        "class": outcome_class(state),
                        "state": state,
                        "reason": item.reason,
                        "label": format_instant(item.scheduled_at),
                    }
                )
        return start, end, list(lanes.values()), next_after, len(items) > WINDOW_ROWS


def _described(row: ScheduleRow) -> str:
    """The schedule's description, folded for a text filter ("" if unreadable)."""
    try:
        description = stored_document(row).get("description")
    except StoreError:
        return ""
    return str(description or "").casefold()


def _duration(started: float | None, finished: float | None) -> float | None:
    if started is None or finished is None:
        return None
    return max(0.0, finished - started)
