"""What to admit, skip, hold or pass over: pure functions of (state, now, counts).

Nothing here reads a clock, the store or the file system. The supervisor and
the administration API gather the state, call these, persist the result in
one transaction, and only then act. Instants are UTC epoch seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from wfsched.domain.timeutil import MAX_INSTANT, MIN_INSTANT, format_instant
from wfsched.errors import CalendarError, CalendarExhausted, EndOfTime, WfschedError

SCAN_CAP = 100
"""Due instants enumerated one by one per tick; past this, one jump."""

Why = str  # "due" | "misfire" | "capacity" | "queued"


class Calendar(Protocol):
    def next_after_epoch(self, t: int) -> int | None: ...
    def prev_before_epoch(self, t: int) -> int | None: ...


EDGE_OF_TIME = 100 * 366 * 86400
"""How near year 1 or 9999 a query must be for a date overflow to mean the
end of time: croniter searches up to 50 years ahead, plus zone offsets."""


def ask(query: Callable[[int], int | None], t: int) -> int | None:
    """`query(t)` (a calendar's next_after_epoch or prev_before_epoch), where
    running off the representable years 1-9999 is EndOfTime (exhaustion).

    There croniter and datetime raise OverflowError or ValueError ("year
    10000 is out of range") instead of answering: the calendar has ended,
    like a cron that never fires again. The same errors anywhere else are a
    defect and stay errors (the supervisor blocks the schedule, visibly).
    """
    try:
        return query(t)
    except (OverflowError, ValueError) as exc:
        if (
            isinstance(exc, WfschedError)
            or MIN_INSTANT + EDGE_OF_TIME < t < MAX_INSTANT - EDGE_OF_TIME
        ):
            raise
        raise EndOfTime(
            "the calendar reaches the end of representable time"
            f" ({format_instant(MIN_INSTANT)} to {format_instant(MAX_INSTANT)})"
        ) from exc


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


class _Guarded:
    """The calendar as the decision logic sees it.

    Answers must advance (`next_after(t) > t`, `prev_before(t) < t`): anything
    else is a CalendarError, so a misbehaving calendar blocks the schedule
    instead of making the same instant due twice. CalendarExhausted ends the
    calendar (no further instant) instead of aborting the decision, so
    instants found before the end are still decided; it is remembered for
    the `exhausted` entry, and later queries past that point are not repeated.
    """

    def __init__(self, cal: Calendar) -> None:
        self.cal = cal
        self.exhaustion: CalendarExhausted | None = None
        self._exhausted_after: int | None = None

    def next_after_epoch(self, t: int) -> int | None:
        if self._exhausted_after is not None and t >= self._exhausted_after:
            return None
        try:
            answer = ask(self.cal.next_after_epoch, t)
        except CalendarExhausted as exc:
            self.exhaustion, self._exhausted_after = exc, t
            return None
        if answer is not None and answer <= t:
            raise CalendarError(f"calendar regression: next instant after {t} answered as {answer}")
        return answer

    def prev_before_epoch(self, t: int) -> int | None:
        try:
            answer = ask(self.cal.prev_before_epoch, t)
        except CalendarExhausted:
            return None
        if answer is not None and answer >= t:
            raise CalendarError(
                f"calendar regression: previous instant before {t} answered as {answer}"
            )
        return answer


def _guarded(cal: Calendar) -> _Guarded:
    return cal if isinstance(cal, _Guarded) else _Guarded(cal)


def _scan(cal: _Guarded, after: int, through: int) -> tuple[list[int], bool]:
    """The instants in (after, through], with at most SCAN_CAP + 1 calls
    (SCAN_CAP + 2 when backward search misses what forward iteration found).

    Up to SCAN_CAP are enumerated one by one. If more remain, one
    `prev_before` finds the latest, which is appended, and `jumped` is True:
    the instants strictly between the enumerated ones and the latest were
    never seen (the caller summarizes them).
    """
    instants: list[int] = []
    cursor = after
    while len(instants) < SCAN_CAP:
        following = cal.next_after_epoch(cursor)
        if following is None or following > through:
            return instants, False
        instants.append(following)
        cursor = following
    latest = cal.prev_before_epoch(through + 1)
    if latest is not None and latest > cursor:
        instants.append(latest)
        return instants, True
    if latest == cursor:
        # Whatever backward search may have missed after the cursor is
        # found by forward iteration next tick: nothing is lost.
        return instants, False
    # Backward search answered older than what forward iteration already
    # found (croniter alone does so in some fall folds; the adapter completes
    # them, and this guard stays for any calendar that does not). Forward is
    # authoritative: the jump never moves backwards.
    beyond = cal.next_after_epoch(cursor)
    if beyond is None or beyond > through:
        return instants, False
    instants.append(beyond)
    return instants, True


def _before_latest(cal: _Guarded, instants: list[int]) -> int:
    """After a jump: the instant just before the latest (the skipped span's
    end), never before what forward iteration already found."""
    latest, floor = instants[-1], instants[-2]
    before = cal.prev_before_epoch(latest)
    return floor if before is None or before < floor else before


def span_between(cal: Calendar, after: int, through: int) -> Span | None:
    """The calendar instants in (after, through], found with bounded calls.

    A calendar that ends (CalendarExhausted) ends the span; a non-advancing
    answer raises CalendarError.
    """
    instants, jumped = _scan(_guarded(cal), after, through)
    if not instants:
        return None
    return Span(instants[0], instants[-1], None if jumped else len(instants))


def span_entry(span: Span, state: str, reason: str) -> Entry:
    """A single instant gets a row of its own; more get one summary row."""
    if span.count == 1:
        return Entry(state, span.first, reason)
    return Entry(state, span.first, reason, last=span.last, count=span.count, summary=True)


class _Tick:
    """Mutable working state for one schedule's decision in one tick."""

    def __init__(
        self, view: ScheduleView, now: int, active: int, capacity_left: int, late_reason: str
    ) -> None:
        self.view = view
        self.now = now
        self.active = active
        self.capacity_left = capacity_left
        self.late_reason = late_reason
        self.decision = Decision(view.consumed_through, view.candidate)

    def late(self, instant: int) -> bool:
        return instant < self.now - self.view.lateness

    def supersede(self, reason: str) -> None:
        held = self.decision.candidate
        if held is not None:
            self.decision.entries.append(Entry("superseded", held.at, reason))
            self.decision.candidate = None

    def hold(self, instant: int, why: Why) -> None:
        self.supersede(_superseded_by(instant))
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


SUPERVISOR_DOWN = "supervisor-down"
"""Reason of what the startup rule passes over (section 4, startup)."""
FAILOVER = "failover"
"""The late reason of the first decisions after a leader took over from
another: the instants it passes over are recorded as one span."""


def decide(
    view: ScheduleView,
    cal: Calendar,
    now: int,
    *,
    active: int,
    capacity_left: int,
    owned_at: int | None = None,
    late_reason: str = "late",
) -> Decision:
    """One schedule, one tick (docs/semantics.md, "Each tick" and "Startup after downtime").

    `active` counts this schedule's unfinished scheduled runs; `capacity_left`
    is what remains of max_concurrent_runs. The caller charges `admit` to
    capacity and runs preflight and admission for each admitted instant.

    `owned_at` is when this supervisor took ownership of the store: instants
    due up to then were missed while no supervisor ran and fall under the
    startup rule (step 7), however late the first decision that commits is.
    Every later instant is judged by lateness; `late_reason` is the reason a
    late one is skipped with (`store-unavailable` when the supervisor could
    not decide in time because its store was failing; `failover` after a
    takeover, when the late instants skipped become one summary row).

    A calendar that ends makes the schedule exhausted once nothing is held.
    A calendar that answers backward (CalendarError) blocks the schedule and
    the decision makes no progress at all: nothing admitted, nothing
    recorded, the watermark and the candidate as they were.
    """
    tick = _Tick(view, now, active, capacity_left, late_reason)
    decision = tick.decision
    guarded = _Guarded(cal)
    try:
        if owned_at is not None:
            _startup(tick, guarded, min(owned_at, now))
        if owned_at is None or owned_at < now:
            _walk_due(tick, guarded)
        if decision.candidate is not None and not decision.admit:
            _retry_candidate(tick, decision.candidate)
        decision.next_due = guarded.next_after_epoch(decision.consumed_through)
    except CalendarError as exc:
        return Decision(view.consumed_through, view.candidate, blocked=str(exc))
    decision.exhausted = decision.next_due is None and decision.candidate is None
    if decision.exhausted and guarded.exhaustion is not None:
        decision.entries.append(
            Entry(
                "exhausted",
                decision.consumed_through,
                f"no further instant: {guarded.exhaustion}",
                summary=True,
            )
        )
    return decision


def _startup(tick: _Tick, cal: _Guarded, through: int) -> None:
    """What was missed while no supervisor ran: the instants up to `through`,
    when this supervisor took ownership, and a candidate held from before.

    `skip` drops it all, even within lateness; `latest` holds the latest
    missed instant. Either way one row accounts for what was passed over.
    Once decided it is consumed, so later ticks find nothing here.
    """
    decision, view = tick.decision, tick.view
    if view.misfire == "skip":
        span = (
            span_between(cal, decision.consumed_through, through)
            if decision.consumed_through < through
            else None
        )
        held = decision.candidate
        if held is not None and held.why != "queued" and held.at <= through:
            decision.entries.append(Entry("skipped-misfire", held.at, SUPERVISOR_DOWN))
            decision.candidate = None
        elif span is not None:
            # A queued instant was not missed, but a newer instant was: the
            # newer one supersedes it, and is itself dropped as missed.
            tick.supersede(_superseded_by(span.first))
        # Otherwise the queued instant waits for its schedule's run, which
        # recovery re-adopts or settles.
        if span is not None:
            decision.entries.append(span_entry(span, "skipped-misfire", SUPERVISOR_DOWN))
            decision.consumed_through = span.last
        return
    if decision.consumed_through >= through:
        return
    instants, jumped = _scan(cal, decision.consumed_through, through)
    if not instants:
        return
    tick.supersede(_superseded_by(instants[0]))
    if jumped:
        passed: Span | None = Span(instants[0], _before_latest(cal, instants), None)
    elif len(instants) > 1:
        passed = Span(instants[0], instants[-2], len(instants) - 1)
    else:
        passed = None
    if passed is not None:
        decision.entries.append(span_entry(passed, "skipped-misfire", SUPERVISOR_DOWN))
    tick.hold(instants[-1], "misfire")
    decision.consumed_through = instants[-1]


def _walk_due(tick: _Tick, cal: _Guarded) -> None:
    """Each due instant, oldest first. Every one of them, timely or late,
    supersedes the held candidate: at most the newest instant ever waits, so
    under `skip` a late instant leaves nothing older behind to run stale.
    Superseded rows are written before the newer instants' rows."""
    decision, view = tick.decision, tick.view
    instants, jumped = _scan(cal, decision.consumed_through, tick.now)
    if jumped:
        tick.supersede(_superseded_by(instants[0]))
        decision.entries.append(
            Entry(
                "skipped-misfire",
                instants[0],
                "catch-up-jump",
                last=_before_latest(cal, instants),
                count=None,
                summary=True,
            )
        )
        instants = instants[-1:]
    passed: list[int] = []
    """Late instants skipped during a failover, recorded as one span."""
    for instant in instants:
        tick.supersede(_superseded_by(instant))
        if not tick.late(instant):
            _passed_over(decision, passed)
            tick.try_admit(instant, "due")
        elif view.misfire == "skip" and tick.late_reason == FAILOVER:
            passed.append(instant)
        elif view.misfire == "skip":
            decision.entries.append(Entry("skipped-misfire", instant, tick.late_reason))
        else:
            tick.hold(instant, "misfire")
        decision.consumed_through = instant
    _passed_over(decision, passed)


def _passed_over(decision: Decision, passed: list[int]) -> None:
    """The late instants a failover passed over: one row for the span (a row
    of its own for a single instant), then forgotten."""
    if passed:
        span = Span(passed[0], passed[-1], len(passed))
        decision.entries.append(span_entry(span, "skipped-misfire", FAILOVER))
        passed.clear()


def _superseded_by(instant: int) -> str:
    return f"superseded by a newer instant ({format_instant(instant)})"


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


# -- administration transitions (docs/semantics.md, "Administration") ---------


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
    following = _guarded(cal).next_after_epoch(consumed_through)
    return following, following is None
