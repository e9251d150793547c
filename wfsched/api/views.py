"""Rows -> the documented JSON shapes (docs/operations.md, "JSON output").

The CLI prints these for `--json` and renders the same dicts as tables, so
there is one mapping from the store to what operators and machines see.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from wfsched.domain.decisions import Entry
from wfsched.domain.definition import definition_from_document
from wfsched.domain.model import Definition
from wfsched.domain.timeutil import format_event, format_instant, occurrence_id, parse_instant
from wfsched.errors import DefinitionError, StoreError
from wfsched.store import AttemptRow, OccurrenceRow, RunRow, ScheduleRow, Store, run_id
from wfsched.store.rows import NotificationRow, RejectionRow


def stored_document(row: ScheduleRow) -> dict[str, Any]:
    """The stored definition document; a corrupt row is a clear StoreError."""
    try:
        document = json.loads(row.definition)
        if not isinstance(document, dict) or not all(
            isinstance(document.get(table), dict) for table in ("trigger", "run", "policy")
        ):
            raise ValueError("not a definition document")
    except ValueError as exc:
        raise corrupt_definition(row, exc) from None
    return document


def corrupt_definition(row: ScheduleRow, exc: Exception) -> StoreError:
    return StoreError(
        f"store: schedule {row.id!r} revision {row.revision} has a corrupt definition row"
        f" ({exc}); `wfsched audit` lists the damage, restore the store from a backup"
    )


class DefinitionCache:
    """Stored definitions parsed once per revision: the operator API and the
    supervisor both read them at every decision. Per schedule only its
    current revision is kept (an edit replaces the entry), and the supervisor
    sweeps out deleted and exhausted schedules (`forget`), so a long-running
    supervisor's cache never outgrows its live schedules."""

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[int, Definition]] = {}

    def __len__(self) -> int:
        return len(self._parsed)

    def ids(self) -> list[str]:
        return list(self._parsed)

    def forget(self, schedule_ids: Iterable[str]) -> None:
        """Drop these schedules' entries (deleted or exhausted: never read
        again, or parsed afresh if they are)."""
        for schedule_id in schedule_ids:
            self._parsed.pop(schedule_id, None)

    def get(self, row: ScheduleRow) -> Definition:
        """The stored definition, with the rules it was accepted under (a
        later release's tighter bounds apply to definitions coming in, never
        to what the store already holds)."""
        cached = self._parsed.get(row.id)
        if cached is not None and cached[0] == row.revision:
            return cached[1]
        try:
            parsed = definition_from_document(stored_document(row), f"store:{row.id}", stored=True)
        except DefinitionError as exc:
            raise corrupt_definition(row, exc) from None
        self._parsed[row.id] = (row.revision, parsed)
        return parsed


def record_entries(
    store: Store, schedule_id: str, revision: int, entries: Iterable[Entry], now: float
) -> None:
    """Write decision entries as ledger rows: the one mapping from a decision
    (the supervisor's or an administrative operation's) to the ledger."""
    for entry in entries:
        store.insert_occurrence(
            schedule_id,
            entry.at,
            entry.state,
            revision,
            now,
            reason=entry.reason,
            last_at=entry.last,
            count=entry.count,
            summary=entry.summary,
        )


# The stored JSON has sorted keys (it is the change test); views keep the
# documented order of docs/operations.md, "JSON output".
_DOCUMENT_ORDER = {
    "trigger": ("cron", "timezone", "at"),
    "run": ("command", "cwd", "env", "timeout", "kill_grace", "interrupt_exit_code"),
    "policy": ("overlap", "max_active_runs", "misfire", "lateness"),
}


def schedule_view(row: ScheduleRow, active_runs: int) -> dict[str, Any]:
    """The stored definition is `Definition.to_document()` as canonical JSON,
    so the view reads it as is: listing never re-validates (or imports the
    calendar) just to show what was validated on the way in."""
    document = stored_document(row)
    for table, keys in _DOCUMENT_ORDER.items():
        document[table] = {key: document[table].get(key) for key in keys if key in document[table]}
    trigger = document["trigger"]
    zone = trigger.get("timezone")
    if isinstance(trigger.get("at"), str):
        # Machines get the instant (UTC, whole seconds); the offset as written
        # stays in the stored document for `get --toml`, and is the zone.
        zone = _written_offset(trigger["at"])
        trigger["at"] = _utc_instant(trigger["at"])
    return {
        "id": row.id,
        "revision": row.revision,
        "description": document["description"],
        "trigger": trigger,
        "zone": zone,
        "run": document["run"],
        "policy": document["policy"],
        "notify": document["notify"],
        "input": document["input"],
        "state": row.state,
        "blocked_reason": row.blocked_reason,
        "next_due": format_instant(row.next_due)
        if row.state in ("active", "blocked") and not row.blocked_reason
        else None,
        "pending": format_instant(row.candidate_at),
        "active_runs": active_runs,
        "created_at": format_event(row.created_at),
        "updated_at": format_event(row.updated_at),
        "deleted_at": format_event(row.deleted_at),
    }


_WRITTEN_AT = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)


def _utc_instant(written: str) -> str:
    """A one-shot's `at` as written -> `2026-12-24T17:00:00Z` (truncated seconds)."""
    match = _WRITTEN_AT.match(written.strip())
    if match is None:
        return written
    day, clock, offset = match.groups()
    try:
        return format_instant(parse_instant(f"{day}T{clock}{offset.upper()}")) or written
    except ValueError:
        return written


def _written_offset(written: str) -> str | None:
    """The zone of a one-shot: its written offset (`+01:00`; `Z` is UTC)."""
    match = _WRITTEN_AT.match(written.strip())
    if match is None:
        return None
    offset = match.group(3).upper()
    return "UTC" if offset in ("Z", "+00:00", "-00:00") else offset


def rejection_view(row: RejectionRow | None) -> dict[str, Any] | None:
    """A standing preflight rejection: the newest rejected instant and why.

    It stands until a run of the schedule admitted after it completes.
    """
    if row is None:
        return None
    return {"scheduled_at": format_instant(row.scheduled_at), "reason": row.reason}


def notification_view(row: NotificationRow) -> dict[str, Any]:
    """One failure hook's outcome: `running`, `succeeded` or `failed`."""
    return {
        "attempt": row.attempt,
        "state": row.state,
        "reason": row.reason,
        "started_at": format_event(row.started_at),
        "finished_at": format_event(row.finished_at),
    }


def shown_state(state: str, run_seq: int | None, run_state: str | None) -> str:
    """A ledger row's state as shown: an admitted row shows its run's state."""
    return run_state if run_seq is not None and run_state else state


def occurrence_view(row: OccurrenceRow) -> dict[str, Any]:
    state = shown_state(row.state, row.run_seq, row.run_state)
    reason = row.run_reason if row.run_seq is not None and row.run_reason else row.reason
    view: dict[str, Any] = {
        "occurrence_id": None if row.summary else occurrence_id(row.schedule_id, row.scheduled_at),
        "schedule_id": row.schedule_id,
        "scheduled_at": format_instant(row.scheduled_at),
        "state": state,
        "reason": reason,
        "revision": row.revision,
        "run_id": run_id(row.run_seq) if row.run_seq is not None else None,
        "admitted_at": format_event(row.admitted_at),
        "started_at": format_event(row.started_at),
        "finished_at": format_event(row.finished_at),
    }
    if row.summary:
        view.update(
            count=row.count,
            first=format_instant(row.scheduled_at),
            last=format_instant(row.last_at),
        )
    return view


def pending_view(schedule_id: str, at: int, why: str, revision: int) -> dict[str, Any]:
    """The held candidate, synthesized at the top of the first history page."""
    return {
        "occurrence_id": occurrence_id(schedule_id, at),
        "schedule_id": schedule_id,
        "scheduled_at": format_instant(at),
        "state": "pending",
        "reason": {
            "misfire": "misfire catch-up",
            "capacity": "waiting for capacity",
            "queued": "queued behind a run",
        }.get(why, why),
        "revision": revision,
        "run_id": None,
        "admitted_at": None,
        "started_at": None,
        "finished_at": None,
    }


def attempt_view(row: AttemptRow) -> dict[str, Any]:
    return {
        "attempt": row.attempt,
        "state": row.state,
        "started_at": format_event(row.started_at),
        "finished_at": format_event(row.finished_at),
        "exit_code": row.exit_code,
        "reason": row.reason,
    }


def run_occurrence_id(row: RunRow) -> str | None:
    """The occurrence a scheduled run was admitted for; None for a manual run."""
    return None if row.is_manual else occurrence_id(row.schedule_id, row.scheduled_at)


def run_outcome(row: RunRow) -> str:
    """A run's state, except that a cancelled run reads `cancelled`.

    A cancel (`runs cancel`, or a drain whose grace expired) stores the run
    as `failed` with a reason starting `cancelled`; an operator who stopped
    a run should not read that it failed.
    """
    reason = row.reason or ""
    if row.state == "failed" and (reason == "cancelled" or reason.startswith("cancelled:")):
        return "cancelled"
    return row.state


def last_run_view(row: RunRow | None) -> dict[str, Any] | None:
    """The newest run of a schedule, as `list` shows it (null: never ran)."""
    if row is None:
        return None
    return {
        "run_id": row.run_id,
        "kind": row.kind,
        "state": row.state,
        "outcome": run_outcome(row),
        "started_at": format_event(row.started_at),
        "finished_at": format_event(row.finished_at),
    }


def listed_schedule_view(
    row: ScheduleRow, active: int, last: RunRow | None, rejection: RejectionRow | None
) -> dict[str, Any]:
    """A schedule as a listing shows it (`list`, the web view's schedules):
    its view plus its newest run and any standing preflight rejection."""
    view = schedule_view(row, active)
    view["last_outcome"] = last.state if last is not None else None
    view["last_run"] = last_run_view(last)
    view["preflight_rejected"] = rejection_view(rejection)
    return view


def run_view(row: RunRow, attempts: list[AttemptRow]) -> dict[str, Any]:
    invocation = row.frozen
    return {
        "run_id": row.run_id,
        "schedule_id": row.schedule_id,
        "occurrence_id": run_occurrence_id(row),
        "kind": row.kind,
        "state": row.state,
        "reason": row.reason,
        "exit_code": row.exit_code,
        "revision": row.revision,
        "host": row.host,
        "scheduled_at": format_instant(row.scheduled_at),
        "admitted_at": format_event(row.admitted_at),
        "started_at": format_event(row.started_at),
        "finished_at": format_event(row.finished_at),
        "invocation": {
            "command": invocation.command,
            "cwd": invocation.cwd,
            "env": invocation.env,
            "input": invocation.input,
            "timeout": invocation.timeout,
        },
        "attempts": [attempt_view(attempt) for attempt in attempts],
    }
