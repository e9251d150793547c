"""What to admit, skip, hold or pass over: pure functions of (state, now, counts).

Nothing here reads a clock, the store or the file system. The supervisor and
the administration API gather the state, call these, persist the result in
one transaction, and only then act. Instants are UTC epoch seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from wfsched.errors import CalendarError, CalendarExhausted

SCAN_CAP = 100
"""Due instants enumerated one by one per tick; past this, one jump."""

Why = str  # "due" | "misfire" | "capacity" | "queued"


class Calendar(Protocol):
    def next_after_epoch(self, t: int) -> int | None: ...
    def prev_before_epoch(self, t: int) -> int | None: ...


@dataclass(frozen=True)
class Candidate:
    at: int
    why: Why


@dataclass(frozen=True)
class Entry:
    """A ledger row to write: one instant, or a span summary (first..last)."""

    state: str
    at: int
    reason: str | None = None
    last: int | None = None
    count: int | None = None
    summary: bool = False


@dataclass(frozen=True)
class ScheduleView:
    schedule_id: str
    consumed_through: int
    candidate: Candidate | None
    overlap: str
    max_active_runs: int | None
    misfire: str
    lateness: int


@dataclass
class Decision:
    consumed_through: int
    candidate: Candidate | None
    entries: list[Entry] = field(default_factory=list)
    admit: list[tuple[int, Why]] = field(default_factory=list)
    next_due: int | None = None
    exhausted: bool = False
    blocked: str | None = None


@dataclass(frozen=True)
class Span:
    first: int
    last: int
    count: int | None
    """Exact when at most SCAN_CAP, else None (counting would mean iterating)."""


def span_between(cal: Calendar, after: int, through: int) -> Span | None:
    """The calendar instants in (after, through], found with bounded calls."""
    first = cal.next_after_epoch(after)
    if first is None or first > through:
        return None
    last, count = first, 1
    while count <= SCAN_CAP:
        following = cal.next_after_epoch(last)
        if following is None or following > through:
            return Span(first, last, count)
        last, count = following, count + 1
    latest = cal.prev_before_epoch(through + 1)
    # croniter's backward search can miss a fold instant and answer older
    # than what forward iteration already found; never report a span that
    # ends before its own enumerated part.
    return Span(first, max(latest or last, last), None)


def span_entry(span: Span, state: str, reason: str) -> Entry:
    """A single instant gets a row of its own; more get one summary row."""
    if span.count == 1:
        return Entry(state, span.first, reason)
    return Entry(state, span.first, reason, last=span.last, count=span.count, summary=True)


class _Tick:
    """Mutable working state for one schedule's decision in one tick."""

    def __init__(self, view: ScheduleView, now: int, active: int, capacity_left: int) -> None:
        self.view = view
        self.now = now
        self.active = active
        self.capacity_left = capacity_left
        self.decision = Decision(view.consumed_through, view.candidate)

    def late(self, instant: int) -> bool:
        return instant < self.now - self.view.lateness

    def supersede(self, reason: str) -> None:
        held = self.decision.candidate
        if held is not None:
            self.decision.entries.append(Entry("superseded", held.at, reason))
            self.decision.candidate = None

    def hold(self, instant: int, why: Why) -> None:
        self.supersede(f"superseded by a newer instant ({instant})")
        self.decision.candidate = Candidate(instant, why)

    def try_admit(self, instant: int, why: Why) -> None:
        """Overlap first, then capacity; the candidate slot takes what must wait."""
        view, decision = self.view, self.decision
        if view.overlap == "skip" and self.active > 0:
            decision.entries.append(
                Entry("skipped-overlap", instant, "a run of this schedule is unfinished")
            )
            return
        if view.overlap == "parallel" and self.active >= (view.max_active_runs or 1):
            decision.entries.append(
                Entry(
                    "skipped-overlap",
                    instant,
                    f"max_active_runs ({view.max_active_runs}) unfinished runs",
                )
            )
            return
        if view.overlap == "queue" and self.active > 0:
            decision.candidate = Candidate(instant, "queued")
            return
        if self.capacity_left <= 0:
            decision.candidate = Candidate(instant, why if why != "due" else "capacity")
            return
        decision.admit.append((instant, why))
        self.active += 1
        self.capacity_left -= 1


def decide(
    view: ScheduleView,
    cal: Calendar,
    now: int,
    *,
    active: int,
    capacity_left: int,
    startup: bool = False,
) -> Decision:
    """One schedule, one tick (DESIGN section 4, steps 1-4 and 7).

    `active` counts this schedule's unfinished scheduled runs; `capacity_left`
    is what remains of max_concurrent_runs. The caller charges `admit` to
    capacity and runs preflight and admission for each admitted instant.
    """
    tick = _Tick(view, now, active, capacity_left)
    decision = tick.decision
    try:
        if startup:
            _startup(tick, cal)
        else:
            _walk_due(tick, cal)
        if decision.candidate is not None and not decision.admit:
            _retry_candidate(tick, decision.candidate)
        decision.next_due = cal.next_after_epoch(decision.consumed_through)
        decision.exhausted = decision.next_due is None and decision.candidate is None
    except CalendarExhausted as exc:
        decision.exhausted = True
        decision.next_due = None
        decision.entries.append(
            Entry(
                "exhausted",
                decision.consumed_through,
                f"no further instant: {exc}",
                summary=True,
            )
        )
    except CalendarError as exc:
        decision.blocked = str(exc)
        decision.next_due = None
        decision.admit.clear()
    return decision


def _startup(tick: _Tick, cal: Calendar) -> None:
    """First tick after taking ownership: what was missed while down.

    `skip` drops it all, even within lateness; `latest` holds the latest
    missed instant. Either way one row accounts for what was passed over.
    """
    decision, view = tick.decision, tick.view
    span = span_between(cal, decision.consumed_through, tick.now)
    if view.misfire == "skip":
        if decision.candidate is not None:
            held = decision.candidate
            decision.entries.append(Entry("skipped-misfire", held.at, "supervisor-down"))
            decision.candidate = None
        if span is not None:
            decision.entries.append(span_entry(span, "skipped-misfire", "supervisor-down"))
            decision.consumed_through = span.last
        return
    if span is None:
        return
    if span.count != 1:
        before = cal.prev_before_epoch(span.last)
        passed = Span(
            span.first,
            before if before is not None else span.first,
            None if span.count is None else span.count - 1,
        )
        decision.entries.append(span_entry(passed, "skipped-misfire", "supervisor-down"))
    tick.hold(span.last, "misfire")
    decision.consumed_through = span.last


def _walk_due(tick: _Tick, cal: Calendar) -> None:
    decision, view = tick.decision, tick.view
    instants: list[int] = []
    cursor = decision.consumed_through
    while len(instants) < SCAN_CAP:
        following = cal.next_after_epoch(cursor)
        if following is None or following > tick.now:
            break
        instants.append(following)
        cursor = following
    else:
        beyond = cal.next_after_epoch(cursor)
        if beyond is not None and beyond <= tick.now:
            found = cal.prev_before_epoch(tick.now + 1)
            # Guard croniter's rare fold miss (an answer older than instants
            # already enumerated): the jump may never move backwards.
            latest = found if found is not None and found > cursor else beyond
            skipped_last = cal.prev_before_epoch(latest)
            if skipped_last is None or skipped_last < cursor:
                skipped_last = cursor
            decision.entries.append(
                Entry(
                    "skipped-misfire",
                    instants[0],
                    "catch-up-jump",
                    last=skipped_last,
                    count=None,
                    summary=True,
                )
            )
            instants = [latest]
    for instant in instants:
        if tick.late(instant):
            if view.misfire == "skip":
                decision.entries.append(Entry("skipped-misfire", instant, "late"))
            else:
                tick.hold(instant, "misfire")
        else:
            tick.supersede(f"superseded by a newer instant ({instant})")
            tick.try_admit(instant, "due")
        decision.consumed_through = instant


def _retry_candidate(tick: _Tick, held: Candidate) -> None:
    """A held candidate gets another chance each tick; a skip-policy capacity
    wait expires at its lateness deadline."""
    decision = tick.decision
    if held.why == "capacity" and tick.view.misfire == "skip" and tick.late(held.at):
        decision.entries.append(Entry("skipped-misfire", held.at, "capacity"))
        decision.candidate = None
        return
    decision.candidate = None
    tick.try_admit(held.at, held.why)


# -- administration transitions (DESIGN section 4, "Administration") ---------


@dataclass
class AdminChange:
    consumed_through: int
    entries: list[Entry] = field(default_factory=list)
    next_due: int | None = None
    exhausted: bool = False


def consume_until(
    cal: Calendar,
    consumed_through: int,
    candidate: Candidate | None,
    now: int,
    operation: str,
    span_state: str = "skipped-misfire",
) -> AdminChange:
    """Clear the candidate (recorded superseded, reason = the operation) and
    account for every instant in (consumed_through, now] as passed over."""
    change = AdminChange(max(consumed_through, now))
    if candidate is not None:
        change.entries.append(Entry("superseded", candidate.at, operation))
    span = span_between(cal, consumed_through, now)
    if span is not None:
        change.entries.append(span_entry(span, span_state, operation))
    return change


def next_due_after(cal: Calendar, consumed_through: int) -> tuple[int | None, bool]:
    """(next instant, exhausted?) for an active schedule."""
    try:
        following = cal.next_after_epoch(consumed_through)
    except CalendarExhausted:
        return None, True
    return following, following is None
