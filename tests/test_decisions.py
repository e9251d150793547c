"""Layer 1: the pure decision rules (docs/semantics.md: each tick,
startup after downtime, clock jumps).

Every test is a short timeline driven by an injected `now`: no clock, no
store, no sleeps, no processes. A fake calendar (sorted list or arithmetic
"every N seconds") counts its calls so boundedness is checked, not assumed;
a few end-to-end cases use the real croniter adapter.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wfsched.domain.calendar import CronCalendar, OneShotCalendar, normalize_cron
from wfsched.domain.decisions import (
    SCAN_CAP,
    Candidate,
    Decision,
    Entry,
    ScheduleView,
    Span,
    consume_until,
    decide,
    next_due_after,
    span_between,
)
from wfsched.errors import CalendarError, CalendarExhausted

T0 = 1_796_083_200  # 2026-12-01T00:00:00Z, a whole hour
MIN = 60
HOUR = 3600
DAY = 86400
YEAR = 365 * DAY


class FakeCal:
    """`next_after_epoch`/`prev_before_epoch` over an arithmetic rule
    (`origin + k * every`, unbounded both ways) or a sorted list.

    `exhaust_after`: like croniter's CroniterBadDateError, asking for an
    instant past it raises CalendarExhausted. `error_on_call`: the n-th call
    (1-based) raises CalendarError. `stuck_on_call`: the n-th call answers
    its own argument (a non-advancing answer).
    """

    def __init__(
        self,
        instants: list[int] | None = None,
        *,
        every: int | None = None,
        origin: int = T0,
        exhaust_after: int | None = None,
        error_on_call: int | None = None,
        stuck_on_call: int | None = None,
        blind: tuple[int, int] | None = None,
    ) -> None:
        assert (instants is None) != (every is None)
        self.instants = sorted(instants) if instants is not None else None
        self.every = every
        self.origin = origin
        self.exhaust_after = exhaust_after
        self.error_on_call = error_on_call
        self.stuck_on_call = stuck_on_call
        self.blind = blind
        self.next_calls = 0
        self.prev_calls = 0

    @property
    def calls(self) -> int:
        return self.next_calls + self.prev_calls

    def _fault(self, t: int) -> int | None:
        if self.calls == self.error_on_call:
            raise CalendarError(f"calendar regression (fake) at call {self.calls}")
        if self.calls == self.stuck_on_call:
            return t
        return None

    # the rule itself, uncounted (tests use it to check answers)
    def after(self, t: int) -> int | None:
        if self.every is not None:
            return self.origin + ((t - self.origin) // self.every + 1) * self.every
        assert self.instants is not None
        i = bisect.bisect_right(self.instants, t)
        return self.instants[i] if i < len(self.instants) else None

    def before(self, t: int) -> int | None:
        if self.every is not None:
            return self.origin + ((t - self.origin - 1) // self.every) * self.every
        assert self.instants is not None
        i = bisect.bisect_left(self.instants, t)
        return self.instants[i - 1] if i > 0 else None

    def is_instant(self, t: int) -> bool:
        if self.every is not None:
            return (t - self.origin) % self.every == 0
        assert self.instants is not None
        return t in self.instants

    def between(self, first: int, last: int) -> list[int]:
        """Every instant in [first, last] (uncounted)."""
        out = []
        at = first - 1
        while True:
            following = self.after(at)
            if following is None or following > last:
                return out
            out.append(following)
            at = following

    def next_after_epoch(self, t: int) -> int | None:
        self.next_calls += 1
        stuck = self._fault(t)
        if stuck is not None:
            return stuck
        answer = self.after(t)
        if self.exhaust_after is not None and (answer is None or answer > self.exhaust_after):
            raise CalendarExhausted(f"no instant after {t} (fake)")
        return answer

    def prev_before_epoch(self, t: int) -> int | None:
        self.prev_calls += 1
        stuck = self._fault(t)
        if stuck is not None:
            return stuck
        answer = self.before(t)
        if self.blind is not None:
            # croniter-like backward blind spot: instants in (lo, hi] are
            # invisible to prev_before although next_after finds them.
            lo, hi = self.blind
            while answer is not None and lo < answer <= hi:
                answer = self.before(answer)
        return answer


def hourly(**kw: object) -> FakeCal:
    return FakeCal(every=HOUR, **kw)  # type: ignore[arg-type]


def minutely(**kw: object) -> FakeCal:
    return FakeCal(every=MIN, **kw)  # type: ignore[arg-type]


@dataclass
class Sim:
    """One schedule's persisted state (watermark + candidate) across ticks,
    applying each decision the way the supervisor persists it."""

    cal: object
    consumed: int
    candidate: Candidate | None = None
    overlap: str = "skip"
    max_active_runs: int | None = None
    misfire: str = "skip"
    lateness: int = 60
    admitted: list[int] = field(default_factory=list)
    rows: list[Entry] = field(default_factory=list)

    def view(self) -> ScheduleView:
        return ScheduleView(
            "s",
            self.consumed,
            self.candidate,
            self.overlap,
            self.max_active_runs,
            self.misfire,
            self.lateness,
        )

    def tick(
        self,
        now: int,
        *,
        active: int = 0,
        capacity: int = 4,
        startup: bool = False,
        owned_at: int | None = None,
        late_reason: str = "late",
    ) -> Decision:
        """`startup`: the supervisor took ownership at `now` (its first tick)."""
        d = decide(
            self.view(),
            self.cal,  # type: ignore[arg-type]
            now,
            active=active,
            capacity_left=capacity,
            owned_at=now if startup else owned_at,
            late_reason=late_reason,
        )
        assert d.consumed_through >= self.consumed, "the watermark moved back"
        self.consumed, self.candidate = d.consumed_through, d.candidate
        self.admitted += [at for at, _ in d.admit]
        self.rows += d.entries
        return d


def states(d: Decision) -> list[tuple[str, int, str | None]]:
    """Per-instant rows as (state, at, reason) with the reason's first word."""
    return [
        (e.state, e.at, e.reason.split()[0] if e.reason else None)
        for e in d.entries
        if not e.summary
    ]


def summaries(d: Decision) -> list[Entry]:
    return [e for e in d.entries if e.summary]


def admitted(d: Decision) -> list[int]:
    return [at for at, _ in d.admit]


# ------------------------------------------------------------ 1. due window


def test_due_window_excludes_consumed_and_includes_now() -> None:
    # consumed_through is exactly 10:00 (decided); now is exactly 11:00.
    d = decide(
        ScheduleView("s", T0 + 10 * HOUR, None, "skip", None, "skip", 60),
        hourly(),
        T0 + 11 * HOUR,
        active=0,
        capacity_left=4,
    )
    assert admitted(d) == [T0 + 11 * HOUR]
    assert d.entries == []
    assert d.consumed_through == T0 + 11 * HOUR
    assert d.next_due == T0 + 12 * HOUR
    assert not d.exhausted


def test_instant_one_second_in_the_future_is_not_due() -> None:
    sim = Sim(hourly(), T0 + 10 * HOUR)
    d = sim.tick(T0 + 11 * HOUR - 1)
    assert d.admit == [] and d.entries == [] and d.candidate is None
    assert d.consumed_through == T0 + 10 * HOUR  # nothing decided, nothing consumed
    assert d.next_due == T0 + 11 * HOUR
    d = sim.tick(T0 + 11 * HOUR)
    assert admitted(d) == [T0 + 11 * HOUR]


def test_span_between_is_exclusive_after_inclusive_through() -> None:
    cal = hourly()
    assert span_between(cal, T0, T0 + 3 * HOUR) == Span(T0 + HOUR, T0 + 3 * HOUR, 3)
    assert span_between(cal, T0, T0 + 3 * HOUR - 1) == Span(T0 + HOUR, T0 + 2 * HOUR, 2)
    assert span_between(cal, T0 - 1, T0) == Span(T0, T0, 1)
    assert span_between(cal, T0, T0 + HOUR - 1) is None
    assert span_between(cal, T0 + HOUR, T0) is None  # through before after: nothing


def test_span_between_counts_exactly_up_to_the_cap_then_jumps() -> None:
    cal = minutely()
    exact = span_between(cal, T0, T0 + SCAN_CAP * MIN)
    assert exact == Span(T0 + MIN, T0 + SCAN_CAP * MIN, SCAN_CAP)
    cal = minutely()
    over = span_between(cal, T0, T0 + 3 * YEAR + 30)
    assert over is not None
    assert (over.first, over.last, over.count) == (T0 + MIN, T0 + 3 * YEAR, None)
    assert cal.calls <= SCAN_CAP + 3


def test_span_between_one_shot() -> None:
    cal = OneShotCalendar(T0 + 5)
    assert span_between(cal, T0, T0 + 5) == Span(T0 + 5, T0 + 5, 1)
    assert span_between(cal, T0 + 5, T0 + DAY) is None
    assert span_between(cal, T0, T0 + 4) is None


# ------------------------------------------------------------ 1. the scan cap


def test_three_years_down_per_minute_costs_one_jump_row_and_bounded_calls() -> None:
    cal = minutely()
    now = T0 + 3 * YEAR + 30  # the latest instant (T0 + 3y) is 30 s old: timely
    sim = Sim(cal, T0)
    d = sim.tick(now)
    assert cal.calls <= SCAN_CAP + 3
    jump = summaries(d)
    assert len(jump) == 1
    (row,) = jump
    assert (row.state, row.reason) == ("skipped-misfire", "catch-up-jump")
    assert row.count is None
    assert row.at == T0 + MIN  # first exact
    assert row.last == T0 + 3 * YEAR - MIN  # last exact: the instant before the latest
    assert admitted(d) == [T0 + 3 * YEAR]  # the latest is timely and admitted
    assert states(d) == []
    assert d.consumed_through == T0 + 3 * YEAR
    assert d.next_due == T0 + 3 * YEAR + MIN


def test_three_years_jump_under_latest_holds_one_candidate() -> None:
    cal = minutely()
    now = T0 + 3 * YEAR + 30
    sim = Sim(cal, T0, misfire="latest", lateness=10)  # even the latest is late
    d = sim.tick(now, capacity=0)
    assert cal.calls <= SCAN_CAP + 3
    assert len(summaries(d)) == 1
    assert states(d) == []
    assert d.candidate == Candidate(T0 + 3 * YEAR, "misfire")
    assert d.admit == []
    assert d.consumed_through == T0 + 3 * YEAR


def test_exactly_cap_due_instants_are_decided_one_by_one() -> None:
    cal = minutely()
    now = T0 + SCAN_CAP * MIN
    d = Sim(cal, T0).tick(now)
    assert summaries(d) == []
    rows = states(d)
    # 98 late ones skipped one by one, (now - lateness) admitted, then `now`
    # meets the run just admitted.
    assert rows[:-1] == [("skipped-misfire", T0 + k * MIN, "late") for k in range(1, SCAN_CAP - 1)]
    assert admitted(d) == [now - MIN]
    assert rows[-1] == ("skipped-overlap", now, "a")


def test_cap_plus_one_due_instants_jump() -> None:
    cal = minutely()
    now = T0 + (SCAN_CAP + 1) * MIN
    d = Sim(cal, T0).tick(now)
    (row,) = summaries(d)
    assert (row.at, row.last) == (T0 + MIN, T0 + SCAN_CAP * MIN)
    assert row.count is None
    assert admitted(d) == [now]
    assert cal.calls <= SCAN_CAP + 3


# ------------------------------------------------------------ 2. misfire


@pytest.mark.parametrize("misfire", ["skip", "latest"])
def test_lateness_boundary_is_timely(misfire: str) -> None:
    sim = Sim(hourly(), T0 + 9 * HOUR, misfire=misfire, lateness=60)
    d = sim.tick(T0 + 10 * HOUR + 60)  # instant == now - lateness
    assert d.admit == [(T0 + 10 * HOUR, "due")]
    assert d.entries == []


def test_one_second_older_than_lateness_is_a_misfire_under_skip() -> None:
    sim = Sim(hourly(), T0 + 9 * HOUR, lateness=60)
    d = sim.tick(T0 + 10 * HOUR + 61)
    assert d.admit == [] and d.candidate is None
    assert states(d) == [("skipped-misfire", T0 + 10 * HOUR, "late")]
    assert d.consumed_through == T0 + 10 * HOUR


def test_one_second_older_than_lateness_is_a_candidate_under_latest() -> None:
    sim = Sim(hourly(), T0 + 9 * HOUR, misfire="latest", lateness=60)
    d = sim.tick(T0 + 10 * HOUR + 61, capacity=0)
    assert d.candidate == Candidate(T0 + 10 * HOUR, "misfire")
    assert d.entries == [] and d.admit == []
    # With capacity it is admitted at once, at its own instant (not "now").
    sim = Sim(hourly(), T0 + 9 * HOUR, misfire="latest", lateness=60)
    d = sim.tick(T0 + 10 * HOUR + 61)
    assert d.admit == [(T0 + 10 * HOUR, "misfire")]
    assert d.candidate is None


def test_zero_lateness() -> None:
    sim = Sim(hourly(), T0, lateness=0)
    assert admitted(sim.tick(T0 + HOUR)) == [T0 + HOUR]
    d = sim.tick(T0 + 2 * HOUR + 1)
    assert states(d) == [("skipped-misfire", T0 + 2 * HOUR, "late")]


def test_latest_keeps_one_candidate_and_records_the_older_as_superseded() -> None:
    # Reference example: hourly, back at 12:20 after missing 10:00, 11:00, 12:00.
    sim = Sim(hourly(), T0 + 9 * HOUR, misfire="latest")
    d = sim.tick(T0 + 12 * HOUR + 20 * MIN, capacity=0)
    assert d.candidate == Candidate(T0 + 12 * HOUR, "misfire")
    assert states(d) == [
        ("superseded", T0 + 10 * HOUR, "superseded"),
        ("superseded", T0 + 11 * HOUR, "superseded"),
    ]
    assert d.admit == []
    assert d.consumed_through == T0 + 12 * HOUR
    # Capacity stays short until 13:00: the candidate becomes 13:00.
    d = sim.tick(T0 + 13 * HOUR, capacity=0)
    assert states(d) == [("superseded", T0 + 12 * HOUR, "superseded")]
    assert d.candidate is not None and d.candidate.at == T0 + 13 * HOUR
    assert d.admit == []


def test_newer_misfire_supersedes_a_held_candidate_across_ticks() -> None:
    sim = Sim(hourly(), T0, misfire="latest", candidate=Candidate(T0, "misfire"))
    d = sim.tick(T0 + HOUR + 2 * MIN, capacity=0)
    assert states(d) == [("superseded", T0, "superseded")]
    assert d.candidate == Candidate(T0 + HOUR, "misfire")


@pytest.mark.parametrize("capacity", [1, 2, 5])
def test_tick_exactly_at_a_due_instant_admits_only_the_due_instant(capacity: int) -> None:
    # A 12:00 catch-up candidate is held; the tick lands exactly at 13:00
    # with room for both (parallel, plenty of capacity): only 13:00 runs.
    sim = Sim(
        hourly(),
        T0 + 12 * HOUR,
        candidate=Candidate(T0 + 12 * HOUR, "misfire"),
        misfire="latest",
        overlap="parallel",
        max_active_runs=5,
    )
    d = sim.tick(T0 + 13 * HOUR, capacity=capacity)
    assert d.admit == [(T0 + 13 * HOUR, "due")]
    assert states(d) == [("superseded", T0 + 12 * HOUR, "superseded")]
    assert d.candidate is None


def test_timely_instant_supersedes_an_older_capacity_candidate() -> None:
    sim = Sim(hourly(), T0 + HOUR, candidate=Candidate(T0 + HOUR, "capacity"), lateness=HOUR)
    d = sim.tick(T0 + 2 * HOUR + 5)
    assert d.admit == [(T0 + 2 * HOUR, "due")]
    assert states(d) == [("superseded", T0 + HOUR, "superseded")]


# ------------------------------------------------------------ 3. overlap


def test_overlap_skip_is_terminal_and_never_resurrected() -> None:
    sim = Sim(hourly(), T0)
    d = sim.tick(T0 + HOUR, active=1)
    assert states(d) == [("skipped-overlap", T0 + HOUR, "a")]
    assert d.candidate is None and d.admit == []
    assert d.consumed_through == T0 + HOUR
    # The run finishes; later ticks never bring 01:00 back.
    for now in (T0 + HOUR + 1, T0 + HOUR + 30, T0 + 2 * HOUR - 1):
        d = sim.tick(now, active=0)
        assert d.admit == [] and d.entries == [] and d.candidate is None
    d = sim.tick(T0 + 2 * HOUR, active=0)
    assert admitted(d) == [T0 + 2 * HOUR]
    assert sim.admitted == [T0 + 2 * HOUR]


def test_overlap_skip_counts_interrupted_runs_too() -> None:
    # `active` is every unfinished run (admitted, running, interrupted); one is enough.
    d = Sim(hourly(), T0).tick(T0 + HOUR, active=1, capacity=4)
    assert states(d)[0][0] == "skipped-overlap"


def test_overlap_skip_makes_a_held_candidate_terminal() -> None:
    sim = Sim(hourly(), T0, candidate=Candidate(T0, "misfire"), misfire="latest")
    d = sim.tick(T0 + 10 * MIN, active=1)
    assert states(d) == [("skipped-overlap", T0, "a")]
    assert d.candidate is None
    d = sim.tick(T0 + 20 * MIN, active=0)
    assert d.admit == [] and d.candidate is None


def test_overlap_parallel_limit_and_lowering_it() -> None:
    sim = Sim(minutely(), T0, overlap="parallel", max_active_runs=2, lateness=0)
    assert admitted(sim.tick(T0 + MIN, active=0)) == [T0 + MIN]
    assert admitted(sim.tick(T0 + 2 * MIN, active=1)) == [T0 + 2 * MIN]
    d = sim.tick(T0 + 3 * MIN, active=2)
    assert states(d) == [("skipped-overlap", T0 + 3 * MIN, "max_active_runs")]
    # The limit was lowered to 1 while 3 runs are active: nothing is
    # cancelled (a decision has no way to), admission is blocked until below.
    sim.max_active_runs = 1
    d = sim.tick(T0 + 4 * MIN, active=3)
    assert states(d) == [("skipped-overlap", T0 + 4 * MIN, "max_active_runs")]
    d = sim.tick(T0 + 5 * MIN, active=1)
    assert states(d) == [("skipped-overlap", T0 + 5 * MIN, "max_active_runs")]
    assert admitted(sim.tick(T0 + 6 * MIN, active=0)) == [T0 + 6 * MIN]


def test_overlap_parallel_counts_admissions_within_one_tick() -> None:
    # Three timely instants in one tick, limit 2: two admitted, one skipped.
    sim = Sim(minutely(), T0, overlap="parallel", max_active_runs=2, lateness=HOUR)
    d = sim.tick(T0 + 3 * MIN, active=0, capacity=10)
    assert admitted(d) == [T0 + MIN, T0 + 2 * MIN]
    assert states(d) == [("skipped-overlap", T0 + 3 * MIN, "max_active_runs")]


def test_overlap_queue_holds_one_candidate_newer_supersedes_admitted_when_idle() -> None:
    sim = Sim(hourly(), T0, overlap="queue")
    d = sim.tick(T0 + HOUR, active=1)
    assert d.candidate == Candidate(T0 + HOUR, "queued") and d.entries == []
    d = sim.tick(T0 + HOUR + 30 * MIN, active=1)
    assert d.candidate == Candidate(T0 + HOUR, "queued") and d.admit == []
    d = sim.tick(T0 + 2 * HOUR, active=1)
    assert states(d) == [("superseded", T0 + HOUR, "superseded")]
    assert d.candidate == Candidate(T0 + 2 * HOUR, "queued")
    # The run finishes long after 02:00's lateness: still admitted, at 02:00.
    d = sim.tick(T0 + 2 * HOUR + 40 * MIN, active=0)
    assert d.admit == [(T0 + 2 * HOUR, "queued")]
    assert d.candidate is None and d.entries == []
    assert sim.admitted == [T0 + 2 * HOUR]


def test_queue_skip_a_late_newer_instant_supersedes_the_queued_one() -> None:
    """At most the newest instant ever waits: a late instant under `skip`
    supersedes the queued candidate and is itself skipped, so nothing older
    is left to start stale when the run ends."""
    sim = Sim(minutely(), T0, overlap="queue", lateness=0)
    assert admitted(sim.tick(T0 + MIN)) == [T0 + MIN]
    sim.tick(T0 + 2 * MIN, active=1)
    d = sim.tick(T0 + 3 * MIN, active=1)
    assert d.candidate == Candidate(T0 + 3 * MIN, "queued")
    # The supervisor is stopped across 00:04; the run ended meanwhile.
    d = sim.tick(T0 + 4 * MIN + 5, active=0)
    assert states(d) == [
        ("superseded", T0 + 3 * MIN, "superseded"),
        ("skipped-misfire", T0 + 4 * MIN, "late"),
    ]
    assert d.entries[0].reason == "superseded by a newer instant (2026-12-01T00:04:00Z)"
    assert d.candidate is None and d.admit == []
    assert admitted(sim.tick(T0 + 5 * MIN)) == [T0 + 5 * MIN]


def test_every_newer_instant_supersedes_a_capacity_candidate_first() -> None:
    # Under skip a capacity wait is superseded by a newer late instant (its
    # own row comes first), not left to expire after it.
    sim = Sim(minutely(), T0, lateness=30)
    sim.tick(T0 + MIN, capacity=0)
    d = sim.tick(T0 + 2 * MIN + 31, capacity=0)
    assert states(d) == [
        ("superseded", T0 + MIN, "superseded"),
        ("skipped-misfire", T0 + 2 * MIN, "late"),
    ]
    assert d.candidate is None


def test_a_jump_supersedes_the_candidate_before_its_summary_row() -> None:
    sim = Sim(minutely(), T0, overlap="queue", candidate=Candidate(T0, "queued"))
    d = sim.tick(T0 + 500 * MIN, active=1)
    assert [(e.state, e.at, e.summary) for e in d.entries][:2] == [
        ("superseded", T0, False),
        ("skipped-misfire", T0 + MIN, True),
    ]


def test_overlap_is_checked_before_capacity() -> None:
    d = Sim(hourly(), T0).tick(T0 + HOUR, active=1, capacity=0)
    assert states(d) == [("skipped-overlap", T0 + HOUR, "a")] and d.candidate is None
    d = Sim(hourly(), T0, overlap="parallel", max_active_runs=1).tick(
        T0 + HOUR, active=1, capacity=0
    )
    assert states(d)[0][0] == "skipped-overlap" and d.candidate is None
    d = Sim(hourly(), T0, overlap="queue").tick(T0 + HOUR, active=1, capacity=0)
    assert d.candidate == Candidate(T0 + HOUR, "queued")


# ------------------------------------------------------------ 4. capacity


def test_capacity_short_skip_instant_waits_until_its_lateness_deadline() -> None:
    sim = Sim(hourly(), T0, lateness=120)
    d = sim.tick(T0 + HOUR, capacity=0)
    assert d.candidate == Candidate(T0 + HOUR, "capacity")
    assert d.consumed_through == T0 + HOUR and d.entries == []
    d = sim.tick(T0 + HOUR + 120, capacity=0)  # exactly at the deadline: still waiting
    assert d.candidate == Candidate(T0 + HOUR, "capacity") and d.entries == []
    d = sim.tick(T0 + HOUR + 121, capacity=0)
    assert states(d) == [("skipped-misfire", T0 + HOUR, "capacity")]
    assert d.candidate is None and d.admit == []


def test_capacity_wait_admitted_at_the_deadline_when_a_slot_frees() -> None:
    sim = Sim(hourly(), T0, lateness=120)
    sim.tick(T0 + HOUR, capacity=0)
    d = sim.tick(T0 + HOUR + 120, capacity=1)
    assert d.admit == [(T0 + HOUR, "capacity")]
    assert d.candidate is None


def test_capacity_expiry_even_if_a_slot_frees_too_late() -> None:
    sim = Sim(hourly(), T0, lateness=120)
    sim.tick(T0 + HOUR, capacity=0)
    d = sim.tick(T0 + HOUR + 121, capacity=3)
    assert states(d) == [("skipped-misfire", T0 + HOUR, "capacity")]
    assert d.admit == []


def test_latest_and_queued_candidates_never_expire_under_capacity_shortage() -> None:
    sim = Sim(hourly(), T0, misfire="latest", candidate=Candidate(T0, "misfire"))
    d = sim.tick(T0 + 50 * MIN, capacity=0)
    assert d.candidate == Candidate(T0, "misfire") and d.entries == []
    # A timely instant short of capacity under latest: held, never expires.
    sim = Sim(hourly(), T0, misfire="latest")
    sim.tick(T0 + HOUR, capacity=0)
    d = sim.tick(T0 + HOUR + 59 * MIN, capacity=0)
    assert d.candidate is not None and d.candidate.at == T0 + HOUR and d.entries == []
    # A queued candidate (misfire = skip) whose run finished while capacity is short.
    sim = Sim(hourly(), T0, overlap="queue", candidate=Candidate(T0, "queued"))
    d = sim.tick(T0 + 59 * MIN, active=0, capacity=0)
    assert d.candidate == Candidate(T0, "queued") and d.entries == []
    d = sim.tick(T0 + 59 * MIN + 1, active=0, capacity=1)
    assert d.admit == [(T0, "queued")]


# ------------------------------------------------ overlap x misfire timelines


def test_timeline_overlap_skip_misfire_skip() -> None:
    sim = Sim(hourly(), T0)
    assert admitted(sim.tick(T0 + HOUR)) == [T0 + HOUR]
    d = sim.tick(T0 + 2 * HOUR, active=1)  # 01:00 still running
    assert states(d) == [("skipped-overlap", T0 + 2 * HOUR, "a")]
    d = sim.tick(T0 + 4 * HOUR + 5 * MIN, active=0)  # a stall: 03:00 and 04:00 late
    assert states(d) == [
        ("skipped-misfire", T0 + 3 * HOUR, "late"),
        ("skipped-misfire", T0 + 4 * HOUR, "late"),
    ]
    assert d.admit == [] and d.candidate is None
    assert admitted(sim.tick(T0 + 5 * HOUR)) == [T0 + 5 * HOUR]
    assert sim.admitted == [T0 + HOUR, T0 + 5 * HOUR]


def test_timeline_overlap_skip_misfire_latest() -> None:
    sim = Sim(hourly(), T0, misfire="latest")
    assert admitted(sim.tick(T0 + HOUR)) == [T0 + HOUR]
    d = sim.tick(T0 + 3 * HOUR + 5 * MIN, active=1)  # stall while 01:00 runs
    # 02:00 held then superseded by 03:00; 03:00 examined while a run is
    # unfinished: terminal skipped-overlap, not held.
    assert states(d) == [
        ("superseded", T0 + 2 * HOUR, "superseded"),
        ("skipped-overlap", T0 + 3 * HOUR, "a"),
    ]
    assert d.candidate is None
    d = sim.tick(T0 + 3 * HOUR + 10 * MIN, active=0)
    assert d.admit == [] and d.entries == []  # 03:00 never resurrected
    d = sim.tick(T0 + 5 * HOUR + 30 * MIN, active=0)  # stall: 04:00, 05:00 late
    assert states(d) == [("superseded", T0 + 4 * HOUR, "superseded")]
    assert d.admit == [(T0 + 5 * HOUR, "misfire")]
    assert sim.admitted == [T0 + HOUR, T0 + 5 * HOUR]


def test_timeline_overlap_parallel_misfire_skip() -> None:
    sim = Sim(hourly(), T0, overlap="parallel", max_active_runs=2)
    assert admitted(sim.tick(T0 + HOUR, active=0)) == [T0 + HOUR]
    assert admitted(sim.tick(T0 + 2 * HOUR, active=1)) == [T0 + 2 * HOUR]
    d = sim.tick(T0 + 3 * HOUR, active=2)
    assert states(d) == [("skipped-overlap", T0 + 3 * HOUR, "max_active_runs")]
    d = sim.tick(T0 + 4 * HOUR + 2 * MIN, active=1)
    assert states(d) == [("skipped-misfire", T0 + 4 * HOUR, "late")]
    d = sim.tick(T0 + 5 * HOUR, active=1, capacity=0)
    assert d.candidate == Candidate(T0 + 5 * HOUR, "capacity")
    d = sim.tick(T0 + 5 * HOUR + 61, active=1, capacity=0)
    assert states(d) == [("skipped-misfire", T0 + 5 * HOUR, "capacity")]
    assert sim.admitted == [T0 + HOUR, T0 + 2 * HOUR]


def test_timeline_overlap_parallel_misfire_latest() -> None:
    sim = Sim(hourly(), T0, overlap="parallel", max_active_runs=2, misfire="latest")
    assert admitted(sim.tick(T0 + HOUR, active=1)) == [T0 + HOUR]
    d = sim.tick(T0 + 3 * HOUR + 5 * MIN, active=2)  # both slots busy, 02:00/03:00 late
    assert states(d) == [
        ("superseded", T0 + 2 * HOUR, "superseded"),
        ("skipped-overlap", T0 + 3 * HOUR, "max_active_runs"),
    ]
    assert d.candidate is None
    d = sim.tick(T0 + 5 * HOUR + 5 * MIN, active=1, capacity=0)  # slot free, no capacity
    assert states(d) == [("superseded", T0 + 4 * HOUR, "superseded")]
    assert d.candidate == Candidate(T0 + 5 * HOUR, "misfire")
    d = sim.tick(T0 + 5 * HOUR + 50 * MIN, active=1, capacity=1)
    assert d.admit == [(T0 + 5 * HOUR, "misfire")]
    assert sim.admitted == [T0 + HOUR, T0 + 5 * HOUR]


def test_timeline_overlap_queue() -> None:
    sim = Sim(hourly(), T0, overlap="queue")
    assert admitted(sim.tick(T0 + HOUR)) == [T0 + HOUR]
    d = sim.tick(T0 + 2 * HOUR, active=1)
    assert d.candidate == Candidate(T0 + 2 * HOUR, "queued")
    d = sim.tick(T0 + 3 * HOUR, active=1)
    assert states(d) == [("superseded", T0 + 2 * HOUR, "superseded")]
    assert d.candidate == Candidate(T0 + 3 * HOUR, "queued")
    d = sim.tick(T0 + 3 * HOUR + 20 * MIN, active=0, capacity=0)  # idle, no capacity
    assert d.candidate == Candidate(T0 + 3 * HOUR, "queued") and d.admit == []
    d = sim.tick(T0 + 3 * HOUR + 25 * MIN, active=0, capacity=1)
    assert d.admit == [(T0 + 3 * HOUR, "queued")]
    d = sim.tick(T0 + 4 * HOUR, active=0)
    assert d.admit == [(T0 + 4 * HOUR, "due")]
    assert sim.admitted == [T0 + HOUR, T0 + 3 * HOUR, T0 + 4 * HOUR]


# ------------------------------------------------------------ 7. startup


def test_startup_skip_drops_everything_even_within_lateness() -> None:
    sim = Sim(hourly(), T0, lateness=HOUR)
    now = T0 + 5 * HOUR + 10  # 05:00 is 10 s old, well within lateness
    d = sim.tick(now, startup=True)
    assert d.admit == [] and d.candidate is None
    (row,) = d.entries
    assert row.summary and (row.state, row.reason) == ("skipped-misfire", "supervisor-down")
    assert (row.at, row.last, row.count) == (T0 + HOUR, T0 + 5 * HOUR, 5)
    assert d.next_due == T0 + 6 * HOUR
    # The next tick (no longer startup) waits for the next future instant.
    d = sim.tick(now + 1)
    assert d.admit == [] and d.entries == []
    assert admitted(sim.tick(T0 + 6 * HOUR)) == [T0 + 6 * HOUR]


def test_startup_skip_drops_a_held_candidate_with_its_own_row() -> None:
    sim = Sim(hourly(), T0 + HOUR, candidate=Candidate(T0 + HOUR, "capacity"))
    d = sim.tick(T0 + 3 * HOUR + 1, startup=True)
    assert states(d) == [("skipped-misfire", T0 + HOUR, "supervisor-down")]
    (row,) = summaries(d)
    assert (row.at, row.last, row.count) == (T0 + 2 * HOUR, T0 + 3 * HOUR, 2)
    assert d.candidate is None and d.admit == []


def test_startup_skip_keeps_a_queued_candidate_only_if_nothing_newer_was_missed() -> None:
    sim = Sim(hourly(), T0 + HOUR, overlap="queue", candidate=Candidate(T0 + HOUR, "queued"))
    d = sim.tick(T0 + HOUR + 30 * MIN, startup=True, active=1)
    assert d.candidate == Candidate(T0 + HOUR, "queued") and d.entries == []
    # Missed instants are newer: they supersede it, and are dropped themselves.
    d = sim.tick(T0 + 3 * HOUR + 1, startup=True, active=0)
    assert [(e.state, e.at, e.summary) for e in d.entries] == [
        ("superseded", T0 + HOUR, False),
        ("skipped-misfire", T0 + 2 * HOUR, True),
    ]
    assert d.candidate is None and d.admit == []


def test_startup_latest_supersedes_the_held_candidate_before_the_summary() -> None:
    sim = Sim(hourly(), T0 + HOUR, misfire="latest", candidate=Candidate(T0 + HOUR, "misfire"))
    d = sim.tick(T0 + 4 * HOUR + 1, startup=True, capacity=0)
    assert [(e.state, e.at, e.summary) for e in d.entries] == [
        ("superseded", T0 + HOUR, False),
        ("skipped-misfire", T0 + 2 * HOUR, True),
    ]
    assert d.candidate == Candidate(T0 + 4 * HOUR, "misfire")


def test_startup_latest_holds_the_latest_and_summarizes_the_rest() -> None:
    sim = Sim(hourly(), T0, misfire="latest")
    d = sim.tick(T0 + 5 * HOUR + 20 * MIN, startup=True, capacity=0)
    assert d.candidate == Candidate(T0 + 5 * HOUR, "misfire")
    (row,) = d.entries
    assert row.summary and (row.state, row.reason) == ("skipped-misfire", "supervisor-down")
    assert (row.at, row.last, row.count) == (T0 + HOUR, T0 + 4 * HOUR, 4)
    assert d.admit == []
    d = sim.tick(T0 + 5 * HOUR + 30 * MIN, capacity=1)
    assert d.admit == [(T0 + 5 * HOUR, "misfire")] and d.entries == []


def test_startup_latest_admits_at_once_when_capacity_allows() -> None:
    d = Sim(hourly(), T0, misfire="latest").tick(T0 + 2 * HOUR + 1, startup=True)
    assert d.admit == [(T0 + 2 * HOUR, "misfire")]
    assert [(e.at, e.summary) for e in d.entries] == [(T0 + HOUR, False)]


def test_startup_latest_with_nothing_missed_keeps_the_held_candidate() -> None:
    sim = Sim(hourly(), T0 + HOUR, misfire="latest", candidate=Candidate(T0 + HOUR, "misfire"))
    d = sim.tick(T0 + HOUR + 30 * MIN, startup=True, capacity=0)
    assert d.candidate == Candidate(T0 + HOUR, "misfire") and d.entries == []


def test_startup_rule_covers_only_instants_due_until_ownership() -> None:
    """The first decision commits 10 s after 05:00 (the store failed from
    04:59:40, when the supervisor took over): 01:00-04:00 were missed while
    none ran; 05:00 fell due under this supervisor and is only 10 s late."""
    sim = Sim(hourly(), T0)
    d = sim.tick(T0 + 5 * HOUR + 10, owned_at=T0 + 5 * HOUR - 20)
    (row,) = summaries(d)
    assert (row.reason, row.at, row.last, row.count) == (
        "supervisor-down",
        T0 + HOUR,
        T0 + 4 * HOUR,
        4,
    )
    assert admitted(d) == [T0 + 5 * HOUR]


@pytest.mark.parametrize("misfire", ["skip", "latest"])
def test_an_instant_decided_late_after_ownership_is_judged_by_lateness(misfire: str) -> None:
    sim = Sim(hourly(), T0, misfire=misfire)
    d = sim.tick(T0 + 2 * HOUR + 5 * MIN, owned_at=T0 + 30 * MIN, late_reason="store-unavailable")
    if misfire == "skip":
        assert states(d) == [
            ("skipped-misfire", T0 + HOUR, "store-unavailable"),
            ("skipped-misfire", T0 + 2 * HOUR, "store-unavailable"),
        ]
    else:
        assert admitted(d) == [T0 + 2 * HOUR]
        assert states(d) == [("superseded", T0 + HOUR, "superseded")]


def test_the_startup_rule_passed_every_tick_decides_nothing_twice() -> None:
    """The supervisor passes its ownership instant to every decision: once
    the missed span is consumed, later candidates are judged normally."""
    owned = T0 + 3 * HOUR + 1
    sim = Sim(hourly(), T0 + HOUR, candidate=Candidate(T0 + HOUR, "capacity"))
    d = sim.tick(owned, owned_at=owned)
    assert states(d) == [("skipped-misfire", T0 + HOUR, "supervisor-down")]
    (row,) = summaries(d)
    assert (row.reason, row.at, row.last) == ("supervisor-down", T0 + 2 * HOUR, T0 + 3 * HOUR)
    assert sim.tick(owned + 1, owned_at=owned).entries == []
    d = sim.tick(T0 + 4 * HOUR, owned_at=owned, capacity=0)
    assert d.candidate == Candidate(T0 + 4 * HOUR, "capacity")
    d = sim.tick(T0 + 4 * HOUR + 30, owned_at=owned)
    assert admitted(d) == [T0 + 4 * HOUR] and d.entries == []


@pytest.mark.parametrize("misfire", ["skip", "latest"])
def test_startup_after_three_years_is_bounded(misfire: str) -> None:
    cal = minutely()
    d = Sim(cal, T0, misfire=misfire).tick(T0 + 3 * YEAR + 30, startup=True, capacity=0)
    assert cal.calls <= SCAN_CAP + 3
    (row,) = summaries(d)
    assert (row.reason, row.count, row.at) == ("supervisor-down", None, T0 + MIN)
    if misfire == "skip":
        assert row.last == T0 + 3 * YEAR and d.candidate is None
    else:
        assert row.last == T0 + 3 * YEAR - MIN
        assert d.candidate == Candidate(T0 + 3 * YEAR, "misfire")
    assert d.admit == []


# ------------------------------------------------------------ one-shots


def test_one_shot_admitted_then_exhausted() -> None:
    cal = OneShotCalendar(T0 + 90)
    d = Sim(cal, T0).tick(T0 + 90)
    assert admitted(d) == [T0 + 90]
    assert d.exhausted and d.next_due is None


def test_one_shot_not_yet_due_is_not_exhausted() -> None:
    d = Sim(OneShotCalendar(T0 + 90), T0).tick(T0 + 89)
    assert not d.exhausted and d.next_due == T0 + 90


def test_one_shot_missed_at_startup_under_skip() -> None:
    d = Sim(OneShotCalendar(T0 + 90), T0).tick(T0 + 100, startup=True)
    assert states(d) == [("skipped-misfire", T0 + 90, "supervisor-down")]
    assert summaries(d) == []
    assert d.exhausted and d.candidate is None and d.admit == []


def test_one_shot_missed_at_startup_under_latest() -> None:
    sim = Sim(OneShotCalendar(T0 + 90), T0, misfire="latest")
    d = sim.tick(T0 + DAY, startup=True, capacity=0)
    assert d.candidate == Candidate(T0 + 90, "misfire")
    assert d.entries == [] and not d.exhausted
    d = sim.tick(T0 + 2 * DAY, capacity=1)
    assert d.admit == [(T0 + 90, "misfire")] and d.exhausted


def test_one_shot_late_under_skip_and_capacity_expiry_exhaust() -> None:
    d = Sim(OneShotCalendar(T0 + 90), T0).tick(T0 + 200)
    assert states(d) == [("skipped-misfire", T0 + 90, "late")] and d.exhausted
    sim = Sim(OneShotCalendar(T0 + 90), T0)
    d = sim.tick(T0 + 90, capacity=0)
    assert d.candidate == Candidate(T0 + 90, "capacity") and not d.exhausted
    d = sim.tick(T0 + 151, capacity=0)
    assert states(d) == [("skipped-misfire", T0 + 90, "capacity")]
    assert d.exhausted  # without the flag the expiry branch would refire every tick


# ------------------------------------------------------------ 8. the clock


def test_clock_rollback_admits_nothing_and_keeps_the_watermark() -> None:
    sim = Sim(hourly(), T0)
    assert admitted(sim.tick(T0 + 2 * HOUR + 1)) == [T0 + 2 * HOUR]
    for now in (T0 + HOUR, T0 + 2 * HOUR - 1, T0 + 2 * HOUR, T0):
        d = sim.tick(now)
        assert d.admit == [] and d.entries == []
        assert d.consumed_through == T0 + 2 * HOUR
    d = sim.tick(T0 + 2 * HOUR, startup=True)
    assert d.admit == [] and d.entries == [] and d.consumed_through == T0 + 2 * HOUR
    assert admitted(sim.tick(T0 + 3 * HOUR)) == [T0 + 3 * HOUR]
    assert sim.admitted == [T0 + 2 * HOUR, T0 + 3 * HOUR]


def test_forward_jump_applies_lateness_not_replay() -> None:
    sim = Sim(minutely(), T0, lateness=60)
    d = sim.tick(T0 + 10 * MIN)  # the wall clock jumped 10 minutes
    late = [("skipped-misfire", T0 + k * MIN, "late") for k in range(1, 9)]
    assert states(d)[:8] == late
    assert admitted(d) == [T0 + 9 * MIN]  # exactly now - lateness: timely
    assert states(d)[8:] == [("skipped-overlap", T0 + 10 * MIN, "a")]


# ------------------------------------------------------------ calendar failures


def test_calendar_exhausted_marks_exhausted_with_an_entry() -> None:
    cal = hourly(exhaust_after=T0 + 2 * HOUR)
    d = Sim(cal, T0 + HOUR).tick(T0 + 2 * HOUR)
    assert admitted(d) == [T0 + 2 * HOUR]  # progress up to the end is real
    assert d.exhausted and d.next_due is None and d.blocked is None
    assert [e.state for e in d.entries] == ["exhausted"]


def test_calendar_exhausted_while_a_candidate_is_held_is_not_yet_exhausted() -> None:
    sim = Sim(hourly(exhaust_after=T0 + 2 * HOUR), T0, misfire="latest")
    d = sim.tick(T0 + 2 * HOUR + 10 * MIN, capacity=0)
    assert d.candidate == Candidate(T0 + 2 * HOUR, "misfire")
    assert not d.exhausted  # a pending instant remains
    d = sim.tick(T0 + 3 * HOUR, capacity=0)
    assert d.candidate == Candidate(T0 + 2 * HOUR, "misfire") and not d.exhausted
    d = sim.tick(T0 + 4 * HOUR, capacity=1)
    assert d.admit == [(T0 + 2 * HOUR, "misfire")] and d.exhausted
    # One `exhausted` row for the whole timeline, not one per tick.
    assert [e.state for e in sim.rows].count("exhausted") == 1


def test_calendar_exhausted_does_not_skip_capacity_expiry() -> None:
    sim = Sim(hourly(exhaust_after=T0 + HOUR), T0)
    sim.tick(T0 + HOUR, capacity=0)
    d = sim.tick(T0 + HOUR + 61, capacity=0)
    assert states(d) == [("skipped-misfire", T0 + HOUR, "capacity")]
    assert d.exhausted and d.candidate is None


def test_span_between_and_next_due_after_survive_exhaustion() -> None:
    cal = hourly(exhaust_after=T0 + 3 * HOUR)
    assert span_between(cal, T0, T0 + DAY) == Span(T0 + HOUR, T0 + 3 * HOUR, 3)
    assert next_due_after(hourly(exhaust_after=T0), T0) == (None, True)
    assert next_due_after(hourly(), T0) == (T0 + HOUR, False)
    assert next_due_after(OneShotCalendar(T0), T0) == (None, True)


@pytest.mark.parametrize("call", [1, 2, 3, 4])
def test_calendar_error_blocks_with_nothing_admitted_and_no_progress(call: int) -> None:
    # Whichever call fails, the decision makes no progress at all: no admit,
    # no consumed instants without a row, the held candidate kept.
    cal = hourly(error_on_call=call)
    held = Candidate(T0, "misfire")
    view = ScheduleView("s", T0, held, "parallel", 5, "latest", HOUR)
    d = decide(view, cal, T0 + 2 * HOUR, active=0, capacity_left=4)
    assert d.blocked is not None and "regression" in d.blocked
    assert d.admit == []
    assert d.consumed_through == T0
    assert d.candidate == held
    assert d.entries == []
    assert d.next_due is None


@pytest.mark.parametrize("call", [1, 2, 3])
def test_non_advancing_calendar_answer_blocks(call: int) -> None:
    # A calendar that answers its own argument would otherwise make the same
    # instant due again and again within one tick.
    cal = hourly(stuck_on_call=call)
    view = ScheduleView("s", T0, None, "parallel", 5, "skip", HOUR)
    d = decide(view, cal, T0 + 2 * HOUR, active=0, capacity_left=4)
    assert d.blocked is not None
    assert d.admit == [] and d.consumed_through == T0 and d.entries == []


def test_non_advancing_prev_before_in_a_jump_blocks() -> None:
    cal = minutely(stuck_on_call=SCAN_CAP + 1)
    view = ScheduleView("s", T0, None, "skip", None, "skip", 60)
    d = decide(view, cal, T0 + YEAR, active=0, capacity_left=4)
    assert d.blocked is not None and d.admit == [] and d.consumed_through == T0


def summaries_of(rows: list[Entry]) -> list[Entry]:
    return [e for e in rows if e.summary]


@pytest.mark.parametrize(
    "blind_lo",
    [
        T0 + 100 * MIN,  # backward answers exactly the last enumerated instant
        T0 + 98 * MIN,  # backward answers older than what forward found
    ],
)
def test_backward_blind_spot_never_blocks_moves_back_or_loses_instants(blind_lo: int) -> None:
    # A calendar whose backward search misses instants that forward
    # iteration finds (croniter alone did in fall folds): forward is
    # authoritative, so the tick neither blocks nor jumps backwards, and the
    # instants backward search cannot see are still decided, once.
    cal = minutely(blind=(blind_lo, T0 + 500 * MIN))
    now = T0 + 150 * MIN + 30
    sim = Sim(cal, T0, misfire="latest")
    d = sim.tick(now, capacity=0)
    assert d.blocked is None
    assert d.consumed_through >= T0 + SCAN_CAP * MIN
    for _ in range(3):
        d = sim.tick(now, capacity=0)
        assert d.blocked is None
    assert sim.consumed == T0 + 150 * MIN
    assert sim.candidate == Candidate(T0 + 150 * MIN, "capacity")  # 30 s old: timely
    decided = [e.at for e in sim.rows if not e.summary]
    assert len(decided) == len(set(decided))
    covered = [t for e in summaries_of(sim.rows) for t in cal.between(e.at, e.last or e.at)]
    assert not set(covered) & set(decided)
    assert set(cal.between(T0 + MIN, T0 + 149 * MIN)) == set(covered) | set(decided)


def test_span_between_with_a_backward_blind_spot_never_ends_before_its_enumerated_part() -> None:
    cal = minutely(blind=(T0 + 98 * MIN, T0 + 500 * MIN))
    span = span_between(cal, T0, T0 + 150 * MIN)
    assert span is not None
    assert span.first == T0 + MIN and span.last >= T0 + SCAN_CAP * MIN and span.count is None


# ------------------------------------------------------------ administration


def test_consume_until_records_candidate_and_span_and_never_moves_back() -> None:
    change = consume_until(hourly(), T0, Candidate(T0, "misfire"), T0 + 3 * HOUR, "pause")
    assert change.consumed_through == T0 + 3 * HOUR
    assert change.entries[0] == Entry("superseded", T0, "pause")
    span = change.entries[1]
    assert (span.at, span.last, span.count, span.reason) == (
        T0 + HOUR,
        T0 + 3 * HOUR,
        3,
        "pause",
    )
    back = consume_until(hourly(), T0 + 3 * HOUR, None, T0, "update")
    assert back.consumed_through == T0 + 3 * HOUR and back.entries == []
    one = consume_until(hourly(), T0, None, T0 + HOUR, "delete")
    assert one.entries == [Entry("skipped-misfire", T0 + HOUR, "delete")]


# ------------------------------------------------------------ real calendar


def cron(expr: str, zone: str = "UTC") -> CronCalendar:
    return CronCalendar(normalize_cron(expr), zone)


def test_cron_reference_example_hourly_latest() -> None:
    sim = Sim(cron("0 * * * *"), T0 + 9 * HOUR, misfire="latest")
    d = sim.tick(T0 + 12 * HOUR + 20 * MIN, startup=True, capacity=0)
    assert d.candidate == Candidate(T0 + 12 * HOUR, "misfire")
    (row,) = d.entries
    assert (row.at, row.last, row.count) == (T0 + 10 * HOUR, T0 + 11 * HOUR, 2)
    d = sim.tick(T0 + 13 * HOUR, capacity=1)
    assert d.admit == [(T0 + 13 * HOUR, "due")]
    assert states(d) == [("superseded", T0 + 12 * HOUR, "superseded")]


def test_cron_three_years_per_minute_jump() -> None:
    sim = Sim(cron("* * * * *"), T0)
    d = sim.tick(T0 + 3 * YEAR + 5)
    (row,) = summaries(d)
    assert (row.at, row.last, row.count) == (T0 + MIN, T0 + 3 * YEAR - MIN, None)
    assert admitted(d) == [T0 + 3 * YEAR]


def test_cron_dst_gap_and_fold_are_distinct_utc_occurrences() -> None:
    # Daily 02:30 New York: on 2026-03-08 the wall time does not exist and
    # croniter resolves it forward to 03:00 EDT = 07:00Z.
    gap = 1_772_953_200  # 2026-03-08T07:00:00Z
    sim = Sim(cron("30 2 * * *", "America/New_York"), gap - HOUR)
    assert admitted(sim.tick(gap)) == [gap]
    # Daily 01:30 New York: both 01:30s of the 2026-11-01 fold run, one each.
    first = 1_793_511_000  # 2026-11-01T05:30:00Z
    sim = Sim(cron("30 1 * * *", "America/New_York"), first - HOUR)
    assert admitted(sim.tick(first)) == [first]
    assert sim.tick(first + 30 * MIN).admit == []
    assert admitted(sim.tick(first + HOUR)) == [first + HOUR]
    assert sim.tick(first + HOUR).admit == []


def _forward(cal: CronCalendar, after: int, through: int) -> list[int]:
    out = []
    while (after := cal.next_after_epoch(after)) <= through:
        out.append(after)
    return out


@pytest.mark.parametrize("back", [100, 101, 102, 103])
def test_cron_fold_miss_in_a_catch_up_jump(back: int) -> None:
    # `30 1 1-7 11 *` New York: croniter alone answers 2025-11-07T06:30Z for
    # the instant before 2026-11-01T06:00Z, missing 05:30Z that forward finds
    # (tests/test_calendar.py pins it); the adapter answers 05:30Z. With about
    # 100 instants due, the jump meets that fold head on.
    cal = cron("30 1 1-7 11 *", "America/New_York")
    now = 1_793_512_800  # 2026-11-01T06:00:00Z
    latest = now - 30 * MIN
    assert cal.prev_before_epoch(now) == latest
    due = _forward(cal, now - 20 * YEAR, now)
    assert due[-1] == latest and len(due) > back
    sim = Sim(cal, due[-back - 1], misfire="latest")
    for _ in range(3):
        d = sim.tick(now, capacity=0)
        assert d.blocked is None
    assert sim.consumed == latest
    assert sim.candidate == Candidate(latest, "misfire")
    assert len(summaries_of(sim.rows)) <= 1


# ------------------------------------------------------------ property


POLICIES = st.tuples(
    st.sampled_from(["skip", "parallel", "queue"]),
    st.integers(1, 3),
    st.sampled_from(["skip", "latest"]),
    st.sampled_from([0, 30, 60, 600]),
)
STEPS = st.lists(
    st.tuples(
        st.integers(-2 * HOUR, 6 * HOUR),  # clock step (negative: rollback)
        st.integers(0, 4),  # active runs
        st.integers(0, 3),  # capacity left
        st.booleans(),  # restart (startup tick)
    ),
    min_size=1,
    max_size=25,
)
CALENDARS = st.one_of(
    st.sampled_from([60, 300, 3600, 7]).map(lambda every: ("every", every)),
    st.lists(st.integers(0, 40 * HOUR), min_size=0, max_size=40, unique=True).map(
        lambda offsets: ("list", sorted(T0 + o for o in offsets))
    ),
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=POLICIES, steps=STEPS, spec=CALENDARS)
def test_property_no_double_admission_monotone_watermark(
    policy: tuple[str, int, str, int],
    steps: list[tuple[int, int, int, bool]],
    spec: tuple[str, object],
) -> None:
    overlap, max_active, misfire, lateness = policy
    kind, arg = spec
    cal = FakeCal(every=arg) if kind == "every" else FakeCal(arg)  # type: ignore[arg-type]
    start = T0 - 1
    sim = Sim(
        cal,
        start,
        overlap=overlap,
        max_active_runs=max_active if overlap == "parallel" else None,
        misfire=misfire,
        lateness=lateness,
    )
    now = T0
    verdicts: dict[int, str] = {}  # instant -> its one per-instant verdict
    spans: list[tuple[int, int]] = []
    for step, active, capacity, startup in steps:
        now += step
        before, held = sim.consumed, sim.candidate
        d = sim.tick(now, active=active, capacity=capacity, startup=startup)
        assert d.blocked is None
        assert d.consumed_through >= before
        assert len(d.admit) <= capacity
        for at, _why in d.admit:
            assert cal.is_instant(at)
            assert at not in verdicts, f"{at} decided twice"
            assert at <= d.consumed_through
            # a due instant, or the candidate held before this tick
            assert before < at <= now or (held is not None and at == held.at)
            verdicts[at] = "admitted"
        for e in d.entries:
            if e.state == "exhausted":
                continue
            assert cal.is_instant(e.at)
            if e.summary:
                assert e.last is not None and cal.is_instant(e.last) and e.at <= e.last
                if e.count is not None:
                    assert e.count == len(cal.between(e.at, e.last))
                spans.append((e.at, e.last))
            else:
                assert e.at not in verdicts, f"{e.at} decided twice"
                verdicts[e.at] = e.state
        if d.candidate is not None:
            assert cal.is_instant(d.candidate.at)
            assert d.candidate.at <= d.consumed_through
            assert d.candidate.at not in verdicts
        assert d.next_due is None or d.next_due > d.consumed_through
    # Summary spans never overlap each other or a per-instant verdict, and
    # every calendar instant up to the watermark is accounted for once.
    covered: list[int] = []
    for first, last in spans:
        covered += cal.between(first, last)
    assert len(covered) == len(set(covered))
    assert not set(covered) & set(verdicts)
    pending = {sim.candidate.at} if sim.candidate else set()
    accounted = set(covered) | set(verdicts) | pending
    assert set(cal.between(start + 1, sim.consumed)) <= accounted
    assert sorted(sim.admitted) == sorted(at for at, v in verdicts.items() if v == "admitted")


def test_startup_under_skip_keeps_a_queued_candidate_but_drops_a_capacity_wait() -> None:
    queued = Sim(hourly(), T0, overlap="queue", candidate=Candidate(T0, "queued"))
    d = queued.tick(T0 + 30, active=1, startup=True)
    assert d.candidate == Candidate(T0, "queued") and d.entries == []
    waiting = Sim(hourly(), T0, candidate=Candidate(T0, "capacity"))
    d = waiting.tick(T0 + 30, startup=True)
    assert d.candidate is None
    assert states(d) == [("skipped-misfire", T0, "supervisor-down")]


def test_a_failover_passes_over_late_instants_in_one_summary_row() -> None:
    """After a takeover (no startup rule), late instants under `skip` are one
    `failover` span; a timely one after them is admitted as usual."""
    sim = Sim(hourly(), T0, lateness=10 * MIN)
    d = sim.tick(T0 + 3 * HOUR + 5 * MIN, late_reason="failover")
    (row,) = summaries(d)
    assert (row.state, row.reason, row.at, row.last, row.count) == (
        "skipped-misfire",
        "failover",
        T0 + HOUR,
        T0 + 2 * HOUR,
        2,
    )
    assert admitted(d) == [T0 + 3 * HOUR]
    assert states(d) == []
    single = Sim(hourly(), T0, lateness=10 * MIN)
    d = single.tick(T0 + HOUR + 20 * MIN, late_reason="failover")
    assert states(d) == [("skipped-misfire", T0 + HOUR, "failover")]
