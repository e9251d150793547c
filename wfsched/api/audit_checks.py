"""`wfsched audit`: prove the store's invariants from what it holds (docs/operations.md, "audit").

Read-only: one read transaction over the database plus a look at `runs/`.
Each violation names a stable `check`:

- `schema`: a table, index or trigger the migrations create is missing or
  altered (e.g. the unique index that refuses a second admission, or the
  trigger that keeps the watermark monotone); a revision whose stored
  definition no longer parses. A missing table stops the other checks.
- `admitted-twice`: more than one admitted (run-bearing) row for one
  instant of a schedule, two scheduled runs for one instant, or one run
  claimed by two occurrence rows.
- `decided-twice`: more than one single ledger row for one instant, none or
  one of them an admission (two verdicts for one occurrence).
- `run-without-admission`: a scheduled run no occurrence row points at, or
  whose occurrence row names another schedule or instant (or is a summary,
  or points at a manual run).
- `admission-without-run`: an occurrence row whose run does not exist, or an
  `admitted` row that points at no run.
- `ledger-gap`: calendar instants after the schedule's creation and up to its
  `consumed_through` that no row accounts for (a row at the instant, a
  summary row's [first, last] span, or the held candidate). Reported with the
  first and last missing instants. Each instant is judged by the calendar of
  the revision current when it passed: revision N owns the instants in
  (start of N, start of N+1], where a revision starts at the watermark it
  took over at (stored with it: an edit accounts the old calendar through
  the later of its own time and the watermark, and the new one after that,
  so an edit after a clock rollback owes nothing before the watermark).
  Revisions written before schema version 3 have no stored watermark; they
  start at their created_at (whole seconds) or the last instant an older
  revision's rows decided, whichever is later, which can still report a
  false gap for such an old edit made after a pause or resume and a clock
  rollback.
- `ledger-unchecked`: the calendar refused to answer (a regression), so the
  ledger of that schedule could not be proven.
- `ledger-order`: an occurrence row without a ledger position, or placed
  beyond the last row ever recorded, so that a row written later would sort
  before it and be missed by a history page already past it.
- `summary-count-mismatch`: a summary row with an exact count (at most
  SCAN_CAP) whose [first, last] holds another number of instants of its
  revision's calendar, or whose last precedes its first. Retention's
  `pruned` rows count the rows they replaced, so only their span is checked.
- `watermark-behind`: `consumed_through` lower than an instant the ledger
  already accounts for (the watermark moved back, or rows ran ahead of it).
- `candidate-ahead`: the held candidate lies after `consumed_through`.
- `rundir-mismatch`: a run with attempt rows but no `runs/<run-id>/`, or no
  `attempt-N/` for one of its attempt rows.
- `rundir-orphan`: an entry under `runs/` that is no run's directory.
- `attempt-count-mismatch`: the attempt rows of a run are not exactly
  1..`runs.attempt`, or attempt rows belong to a run that does not exist.
- `state-contradiction`: a finished or interrupted run whose latest attempt
  says otherwise (e.g. still `running`), a running run without a running
  latest attempt, an admitted run with attempts, or an earlier attempt
  still `running`.

A revision whose time zone does not resolve on this host (accepted by an
earlier release, or removed from the tz database since) is not damage to
the store: its instants cannot be listed, so its ledger is not checked and
the report says so in `notes`, without failing.

The ledger walk is bounded: ledgers are read a batch of schedules at a time
(at most `_LEDGER_BATCH_ROWS` rows held; a schedule with more is streamed
alone), each in instant order, and the calendar is only asked about the
space between consecutive accounted spans (each answer once per audit),
with `span_between`'s capped enumeration, so a summary row for years of
per-minute instants costs a few calls, not millions.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wfsched.domain.calendar import calendar_for
from wfsched.domain.decisions import SCAN_CAP, Span, ask, span_between
from wfsched.domain.definition import definition_from_document
from wfsched.domain.timeutil import format_instant
from wfsched.errors import (
    CalendarError,
    CalendarExhausted,
    NotFoundError,
    WfschedError,
    ZoneUnavailable,
)
from wfsched.store import (
    PRUNED_STATE,
    LedgerRow,
    RevisionRow,
    ScheduleRow,
    Store,
    StoreLocation,
    open_existing_store,
    open_location,
    parse_run_id,
    run_id,
)
from wfsched.store.rundirs import never_launched

CHECKS = (
    "schema",
    "admitted-twice",
    "decided-twice",
    "run-without-admission",
    "admission-without-run",
    "ledger-gap",
    "ledger-unchecked",
    "ledger-order",
    "summary-count-mismatch",
    "watermark-behind",
    "candidate-ahead",
    "rundir-mismatch",
    "rundir-orphan",
    "attempt-count-mismatch",
    "state-contradiction",
)
_ORDER = {name: index for index, name in enumerate(CHECKS)}
_REQUIRED_TABLES = ("schedules", "revisions", "occurrences", "runs", "attempts")
_LAUNCHED_STATES = ("running", "completed", "failed", "interrupted")

Add = Callable[..., None]


def audit(store: Store, host: str | None = None) -> dict[str, Any]:
    """Check every invariant; `{"ok", "violations", "checked", "notes"}`
    (read-only). Notes say what could not be checked and is no violation.

    Run directories live on the host that executed the run: with `host` (this
    host's name), only runs recorded on it (or before runs had hosts) are
    checked against `store.runs_dir`; None checks every run's directory here."""
    violations: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []

    def add(
        check: str, detail: str, schedule_id: str | None = None, run: int | None = None
    ) -> None:
        violations.append(
            {
                "check": check,
                "schedule_id": schedule_id,
                "run_id": run_id(run) if run is not None else None,
                "detail": detail,
            }
        )

    def note(schedule_id: str | None, detail: str, run: int | None = None) -> None:
        notes.append(
            {
                "schedule_id": schedule_id,
                "run_id": run_id(run) if run is not None else None,
                "detail": detail,
            }
        )

    # Listed before the snapshot. A scheduled run's directories are made
    # inside its admission's transaction, before its row commits, and its
    # command starts only after: a directory whose run never started (no
    # started record under records/) may be an admission in flight, or one
    # that rolled back; any other directory has its row in the snapshot.
    run_dirs = _list_run_dirs(store.runs_dir)
    unlaunched = never_launched(store.root, run_dirs)
    checked: dict[str, int] = {}
    with store.audit_snapshot():
        if _check_schema(store, add):
            counts = store.audit_counts()
            checked = {
                "schedules": counts["schedules"],
                "revisions": counts["revisions"],
                "occurrences": counts["occurrences"],
                "runs": counts["runs"],
                "attempts": counts["attempts"],
                "run_dirs": len(run_dirs),
            }
            _check_admissions(store, add)
            schedules = store.list_schedules(include_deleted=True)
            history = store.revision_history()
            _check_ledgers(schedules, history, store, add, note)
            _check_ledger_order(store, add)
            _check_watermarks(schedules, store.ledger_high_marks(), add)
            _check_runs(store, add, host)
            _check_orphans(store, run_dirs, unlaunched, add, note)
    violations.sort(key=lambda v: (_ORDER[v["check"]], v["schedule_id"] or "", v["run_id"] or ""))
    return {"ok": not violations, "violations": violations, "checked": checked, "notes": notes}


def empty_report() -> dict[str, Any]:
    """What `audit` of an empty store says: clean, nothing in any table."""
    checked = dict.fromkeys(
        ("schedules", "revisions", "occurrences", "runs", "attempts", "run_dirs"), 0
    )
    return {"ok": True, "violations": [], "checked": checked, "notes": []}


def audit_location(location: StoreLocation, host: str | None = None) -> dict[str, Any]:
    """Audit the store `location` names, never creating one (NotFoundError if none);
    `host` as in `audit`."""
    if location.path is not None:
        return audit_path(location.path, host, runs_dir=location.runs_dir)
    store = open_location(location, create=False)
    if store is None:
        raise NotFoundError(f"no store at {location.display}; nothing to audit")
    try:
        return audit(store, host)
    finally:
        store.close()


def audit_path(
    root: Path, host: str | None = None, *, runs_dir: Path | None = None
) -> dict[str, Any]:
    """Open the store at `root` only to audit it (NotFoundError if there is none)."""
    store = open_existing_store(root, missing="nothing to audit", runs_dir=runs_dir)
    try:
        return audit(store, host)
    finally:
        store.close()


# ------------------------------------------------------------------- schema


def _check_schema(store: Store, add: Add) -> bool:
    """Report missing or altered schema objects; False when a table is gone
    (the other checks would only fail on it)."""
    usable = True
    for problem in store.schema_problems():
        kind, name = problem.kind, problem.name
        if problem.found is None:
            add("schema", f"{kind} {name} is missing")
        else:
            add("schema", f"{kind} {name} differs from the schema: {problem.found}")
        if kind == "table" and name in _REQUIRED_TABLES:
            usable = False
    return usable


# --------------------------------------------------------------- admissions


def _check_admissions(store: Store, add: Add) -> None:
    twice: set[tuple[str, int]] = set()
    for schedule_id, at, rows, bearing, seqs in store.duplicate_instants():
        when = format_instant(at)
        if bearing > 1:
            twice.add((schedule_id, at))
            runs = _run_list(seqs)
            add(
                "admitted-twice",
                f"{when}: {bearing} admitted rows for one occurrence (runs: {runs or 'none'})",
                schedule_id,
            )
        else:
            add("decided-twice", f"{when}: {rows} ledger rows for one occurrence", schedule_id)
    for schedule_id, at, seqs in store.duplicate_scheduled_runs():
        if (schedule_id, at) not in twice:
            add(
                "admitted-twice",
                f"{format_instant(at)}: scheduled runs {_run_list(seqs)} share one occurrence",
                schedule_id,
            )
    for seq, schedule_ids, instants in store.runs_claimed_twice():
        claims = ", ".join(
            f"{s}@{format_instant(int(at))}" for s, at in zip(schedule_ids, instants, strict=False)
        )
        add(
            "admitted-twice",
            f"claimed by {len(instants)} occurrence rows ({claims})",
            schedule_ids[0],
            seq,
        )
    for seq, schedule_id, at in store.scheduled_runs_without_admission():
        add(
            "run-without-admission",
            f"scheduled run for {format_instant(at)} has no admitted occurrence row",
            schedule_id,
            seq,
        )
    for seq, o_schedule, o_at, summary, r_schedule, r_at, kind in store.mismatched_admissions():
        if kind != "scheduled":
            why = f"is a {kind} run, yet occurrence {o_schedule}@{format_instant(o_at)} claims it"
        elif summary:
            why = f"is claimed by a summary row at {format_instant(o_at)}"
        else:
            why = (
                f"is the run of {r_schedule}@{format_instant(r_at)}, but its admission row"
                f" is {o_schedule}@{format_instant(o_at)}"
            )
        add("run-without-admission", why, r_schedule, seq)
    for schedule_id, at, claimed in store.admissions_without_run():
        if claimed is None:
            detail = f"{format_instant(at)}: admitted row points at no run"
        else:
            detail = (
                f"{format_instant(at)}: admitted row points at {run_id(claimed)},"
                " which does not exist"
            )
        add("admission-without-run", detail, schedule_id, claimed)


def _run_list(seqs: list[int]) -> str:
    return ", ".join(run_id(seq) for seq in seqs)


# ------------------------------------------------------------------ ledger


_MEMO_CAP = 1 << 16
"""Answers one audit calendar keeps per direction before starting afresh."""


class _Ended:
    """The calendar with exhaustion meaning "no further instant", its answers
    remembered for the whole audit.

    One `_Ended` serves every revision with the same trigger (`_Calendars`),
    and schedules sharing an expression and zone ask the same questions (the
    instant after each of their rows): each is asked of the calendar once. A
    calendar is a pure function of the instant asked about, so a remembered
    answer is the answer; errors are not remembered (asked again, raised
    again).
    """

    def __init__(self, cal: Any) -> None:
        self.cal = cal
        self._next: dict[int, int | None] = {}
        self._prev: dict[int, int | None] = {}

    def next_after_epoch(self, t: int) -> int | None:
        return self._answer(self._next, self.cal.next_after_epoch, t)

    def prev_before_epoch(self, t: int) -> int | None:
        return self._answer(self._prev, self.cal.prev_before_epoch, t)

    def none_between(self, after: int, through: int) -> bool:
        """`_none_between` for one segment that owns all of (after, through]:
        the question the walk asks between every two ledger rows, answered
        from the remembered answer without the general loop's calls."""
        memo = self._next
        following = memo[after] if after in memo else self.next_after_epoch(after)
        return following is None or (following > after and following > through)

    @staticmethod
    def _answer(
        memo: dict[int, int | None], query: Callable[[int], int | None], t: int
    ) -> int | None:
        if t in memo:
            return memo[t]
        try:
            answer: int | None = ask(query, t)
        except CalendarExhausted:
            answer = None
        if len(memo) >= _MEMO_CAP:
            memo.clear()
        memo[t] = answer
        return answer


class _Calendars:
    """One `_Ended` per trigger for the length of one audit."""

    def __init__(self) -> None:
        self._by_trigger: dict[object, _Ended] = {}

    def get(self, trigger: Any) -> _Ended:
        cal = self._by_trigger.get(trigger)
        if cal is None:
            cal = self._by_trigger[trigger] = _Ended(calendar_for(trigger))
        return cal


@dataclass(frozen=True)
class _Segment:
    """Revision `revision` owns the instants in (after, through]."""

    revision: int
    after: int
    through: float
    cal: _Ended | None


def _segments(
    row: ScheduleRow,
    history: list[RevisionRow],
    decided: dict[int, int],
    calendars: _Calendars,
    add: Add,
    note: Callable[[str, str], None],
) -> list[_Segment]:
    """Who owes what: revision N from the watermark it took over at (stored
    with it since schema version 3).

    An edit made while `consumed_through` was ahead of the wall clock (after
    a clock rollback) leaves the new calendar's instants up to that watermark
    undecided, by design (never replayed), so the edit's time is not the
    bound. Revisions written before version 3 have no stored watermark: for
    them the bound is their creation (whole seconds) or the last instant an
    older revision decided, whichever is later, which misses a watermark
    moved ahead without ledger rows (a pause and resume) before the rollback.
    """
    if not history:
        # No revision rows (a damaged store): the current definition for all time.
        history = [RevisionRow(row.revision, row.definition, row.created_at, None)]
    starts: list[tuple[int, _Ended | None, int]] = []
    start = math.floor(row.created_at)
    for index, revision in enumerate(history):
        try:
            document = json.loads(revision.definition)
            defn = definition_from_document(document, f"store:{row.id}", stored=True)
            cal: _Ended | None = calendars.get(defn.trigger)
        except ZoneUnavailable as exc:
            note(row.id, f"revision {revision.revision}: ledger not checked: {exc}")
            cal = None
        except (WfschedError, ValueError, TypeError, KeyError) as exc:
            add(
                "schema",
                f"revision {revision.revision}: stored definition unreadable: {exc}",
                row.id,
            )
            cal = None
        if index > 0 and revision.watermark is not None:
            start = max(start, revision.watermark)
        elif index > 0:
            older = [high for number, high in decided.items() if number < revision.revision]
            start = max(start, math.floor(revision.created_at), *older)
        starts.append((revision.revision, cal, start))
    segments: list[_Segment] = []
    for index, (number, cal, after) in enumerate(starts):
        through = starts[index + 1][2] if index + 1 < len(starts) else math.inf
        segments.append(_Segment(number, after, through, cal))
    return segments


def _none_between(segments: list[_Segment], after: int, through: int) -> bool:
    """Whether no revision owns a calendar instant in (after, through]: what
    `_missing` answers None for, asked once per segment instead of through
    `span_between` (the audit asks it between every two ledger rows). Any
    doubt (an answer that does not advance) is False: `_missing` decides,
    and reports the regression."""
    for segment in segments:
        low = max(after, segment.after)
        high = min(through, segment.through)
        if segment.cal is None or low >= high:
            continue
        following = segment.cal.next_after_epoch(low)
        if following is not None and (following <= low or following <= high):
            return False
    return True


def _missing(segments: list[_Segment], after: int, through: int) -> Span | None:
    """The calendar instants in (after, through], each by its owning revision."""
    parts: list[Span] = []
    for segment in segments:
        low = max(after, segment.after)
        high = min(through, segment.through)
        if segment.cal is None or low >= high:
            continue
        span = span_between(segment.cal, low, int(high))
        if span is not None:
            parts.append(span)
    if not parts:
        return None
    counts = [part.count for part in parts]
    total = None if None in counts else sum(c for c in counts if c is not None)
    return Span(parts[0].first, parts[-1].last, total)


def _check_ledgers(
    schedules: list[ScheduleRow],
    history: dict[str, list[RevisionRow]],
    store: Store,
    add: Add,
    note: Callable[[str, str], None],
) -> None:
    """Every schedule's ledger, read in batches of schedules holding at most
    `_LEDGER_BATCH_ROWS` rows together (two statements per batch, where one
    per schedule cost a round trip each to a database server: 20,000 of them
    for 10,000 schedules); a schedule with more rows than that is streamed
    alone."""
    calendars = _Calendars()
    counts = store.ledger_row_counts()
    for batch in _ledger_batches(schedules, counts):
        if len(batch) == 1:
            only = batch[0].id
            ledgers: dict[str, Iterable[LedgerRow]] = {only: store.ledger_rows(only)}
            highs = {only: store.ledger_high_marks_by_revision(only)}
        else:
            ids = [row.id for row in batch]
            highs = store.ledger_high_marks_by_revision_of(ids)
            ledgers = dict(store.ledgers_of(ids))
        for row in batch:
            _check_ledger(
                row,
                history.get(row.id, []),
                ledgers.get(row.id, ()),
                highs.get(row.id, {}),
                calendars,
                add,
                note,
            )


_LEDGER_BATCH_ROWS = 50_000
"""Ledger rows the audit holds in memory at once (a few MB)."""


def _ledger_batches(
    schedules: list[ScheduleRow], counts: dict[str, int]
) -> Iterator[list[ScheduleRow]]:
    batch: list[ScheduleRow] = []
    held = 0
    for row in schedules:
        count = counts.get(row.id, 0)
        if batch and held + count > _LEDGER_BATCH_ROWS:
            yield batch
            batch, held = [], 0
        batch.append(row)
        held += count
    if batch:
        yield batch


def _spans(row: ScheduleRow, rows: Iterable[LedgerRow]) -> Iterator[tuple[int, int, Any]]:
    """Accounted spans in order: ledger rows merged with the held candidate."""
    candidate = row.candidate_at
    for ledger in rows:
        if ledger.summary and ledger.last_at is None:
            continue  # a marker (e.g. `exhausted`) accounts for no instant
        if candidate is not None and candidate <= ledger.scheduled_at:
            yield candidate, candidate, None
            candidate = None
        last = (
            ledger.last_at if ledger.summary and ledger.last_at is not None else ledger.scheduled_at
        )
        yield ledger.scheduled_at, max(ledger.scheduled_at, last), ledger
    if candidate is not None:
        yield candidate, candidate, None


def _check_ledger(
    row: ScheduleRow,
    history: list[RevisionRow],
    ledger: Iterable[LedgerRow],
    decided: dict[int, int],
    calendars: _Calendars,
    add: Add,
    note: Callable[[str, str], None],
) -> None:
    segments = _segments(row, history, decided, calendars, add, note)
    by_revision = {segment.revision: segment.cal for segment in segments}
    end = row.consumed_through
    cursor = segments[0].after

    def gap(after: int, through: int) -> None:
        if _none_between(segments, after, through):
            return
        span = _missing(segments, after, through)
        if span is None:
            return
        first, last = format_instant(span.first), format_instant(span.last)
        if span.count == 1:
            what = f"{first} is"
        elif span.count is None:
            what = f"more than {SCAN_CAP} instants, {first} through {last}, are"
        else:
            what = f"{span.count} instants, {first} through {last}, are"
        add("ledger-gap", f"{what} not accounted for in the ledger", row.id)

    # One revision owns every instant from the walk's start on (the common
    # case): the walk asks its calendar directly, and `gap` (which asks again
    # through the general path) only runs when something is owed.
    only = segments[0].cal if len(segments) == 1 and segments[0].through == math.inf else None
    try:
        for first, last, entry in _spans(row, ledger):
            if entry is not None and entry.summary:
                _check_summary(row.id, entry, by_revision, segments, add)
            if cursor < end and first - 1 > cursor:
                through = first - 1 if first - 1 < end else end
                if only is None or not only.none_between(cursor, through):
                    gap(cursor, through)
            if last > cursor:
                cursor = last
        if cursor < end:
            gap(cursor, end)
    except CalendarError as exc:
        add("ledger-unchecked", f"the calendar refused to answer: {exc}", row.id)


def _check_summary(
    schedule_id: str,
    ledger: LedgerRow,
    by_revision: dict[int, _Ended | None],
    segments: list[_Segment],
    add: Add,
) -> None:
    first, last = ledger.scheduled_at, ledger.last_at
    assert last is not None  # markers never reach here
    where = f"summary {format_instant(first)} .. {format_instant(last)}"
    if last < first:
        add("summary-count-mismatch", f"{where}: last precedes first", schedule_id)
        return
    if ledger.count is None or ledger.count > SCAN_CAP:
        return
    if ledger.state == PRUNED_STATE:
        # Retention's count is the number of rows it replaced, and a row may
        # sit at another revision's instant (a one-shot recorded as already
        # past at update): not a count of any one calendar's instants.
        return
    if ledger.revision not in by_revision:
        found = _owned_count(segments, first, last)
    else:
        cal = by_revision[ledger.revision]
        if cal is None:
            return  # its definition is unreadable: reported under `schema`
        span = span_between(cal, first - 1, last)
        found = 0 if span is None else span.count
    if found != ledger.count:
        held = f"more than {SCAN_CAP}" if found is None else str(found)
        add(
            "summary-count-mismatch",
            f"{where}: count says {ledger.count}, the calendar has {held} instants",
            schedule_id,
        )


def _owned_count(segments: list[_Segment], first: int, last: int) -> int | None:
    """Instants in [first, last], each by the revision that owns it; before
    creation (a one-shot already past at create) the first revision's."""
    total = 0
    for index, segment in enumerate(segments):
        low = first - 1 if index == 0 else max(first - 1, segment.after)
        high = min(last, segment.through)
        if segment.cal is None or low >= high:
            continue
        span = span_between(segment.cal, low, int(high))
        if span is not None:
            if span.count is None:
                return None
            total += span.count
    return total


def _check_ledger_order(store: Store, add: Add) -> None:
    for schedule_id, seq, at, position in store.misplaced_ledger_rows():
        where = (
            "has no ledger position"
            if position is None
            else f"has ledger position {position}, beyond the last row recorded"
        )
        add(
            "ledger-order",
            f"occurrence row {seq} ({format_instant(at)}) {where}; history pages could miss"
            " rows written after it",
            schedule_id,
        )


def _check_watermarks(schedules: list[ScheduleRow], highs: dict[str, int], add: Add) -> None:
    for row in schedules:
        high = highs.get(row.id)
        if high is not None and high > row.consumed_through:
            add(
                "watermark-behind",
                f"consumed_through {format_instant(row.consumed_through)} is behind the ledger,"
                f" which accounts through {format_instant(high)}",
                row.id,
            )
        if row.candidate_at is not None and row.candidate_at > row.consumed_through:
            add(
                "candidate-ahead",
                f"candidate {format_instant(row.candidate_at)} is after consumed_through"
                f" {format_instant(row.consumed_through)}",
                row.id,
            )


# -------------------------------------------------------- runs and directories


def _check_runs(store: Store, add: Add, host: str | None) -> None:
    for run in store.runs_with_attempts():
        numbers = sorted(run.attempts)
        if numbers != list(range(1, run.attempt + 1)):
            add(
                "attempt-count-mismatch",
                f"runs.attempt is {run.attempt} but the attempt rows are {numbers or 'none'}",
                run.schedule_id,
                run.seq,
            )
        _check_states(run, add)
        here = host is None or run.host is None or run.host == host
        if here and run.attempts and run.state in _LAUNCHED_STATES:
            directory = store.runs_dir / run_id(run.seq)
            if not directory.is_dir():
                add(
                    "rundir-mismatch",
                    f"{run.state} run with {len(numbers)} attempt(s) has no directory {directory}",
                    run.schedule_id,
                    run.seq,
                )
                continue
            for number in numbers:
                if not (directory / f"attempt-{number}").is_dir():
                    add(
                        "rundir-mismatch",
                        f"attempt {number} has no directory {directory / f'attempt-{number}'}",
                        run.schedule_id,
                        run.seq,
                    )
    for seq, count in store.attempts_without_run():
        add(
            "attempt-count-mismatch",
            f"{count} attempt row(s) of a run that does not exist",
            None,
            seq,
        )


def _check_states(run: Any, add: Add) -> None:
    if not run.attempts:
        if run.state == "running":
            add("state-contradiction", "running run has no attempt rows", run.schedule_id, run.seq)
        return
    latest = max(run.attempts)
    latest_state = run.attempts[latest]
    for number, state in sorted(run.attempts.items()):
        if number != latest and state == "running":
            add(
                "state-contradiction",
                f"attempt {number} is still running under attempt {latest}",
                run.schedule_id,
                run.seq,
            )
    if run.state == "admitted":
        detail = f"admitted run has attempt rows (latest {latest} is {latest_state})"
    elif run.state == "running" and latest_state != "running":
        detail = f"running run without a running attempt (attempt {latest} is {latest_state})"
    elif run.state != "running" and latest_state != run.state:
        detail = f"{run.state} run, but its latest attempt {latest} is {latest_state}"
    else:
        return
    add("state-contradiction", detail, run.schedule_id, run.seq)


def _list_run_dirs(runs_dir: Path) -> list[str]:
    try:
        with os.scandir(runs_dir) as entries:
            return sorted(entry.name for entry in entries)
    except FileNotFoundError:
        return []


def _check_orphans(
    store: Store,
    names: list[str],
    unlaunched: set[str],
    add: Add,
    note: Callable[..., None],
) -> None:
    parsed = {name: parse_run_id(name) for name in names}
    known = store.known_run_seqs([seq for seq in parsed.values() if seq is not None])
    for name, seq in parsed.items():
        if seq is None or run_id(seq) != name:
            add("rundir-orphan", f"{store.runs_dir / name} is not a run directory")
        elif seq in known:
            continue
        elif name in unlaunched:
            note(
                None,
                f"{store.runs_dir / name} has no run row and was never launched: an"
                " admission in flight, or one a crash rolled back (prune removes it)",
                seq,
            )
        else:
            add("rundir-orphan", f"{store.runs_dir / name} has no run row", None, seq)
