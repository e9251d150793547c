"""The audit's ledger walk asks each calendar question once per audit.

Schedules sharing an expression and zone share one calendar whose answers the
audit remembers, and the walk between two ledger rows asks one question
(`_none_between`) before the capped enumeration (`_missing`). These tests pin
that the shortcut answers exactly what the enumeration answers (property test
across DST transitions), and that an audit of many schedules sharing a
calendar still names every gap, fold repeats included, on both
stores (a second row for one instant is refused by the database itself).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_calendar import POOL, ZONES, instants
from wfsched.api import audit_checks
from wfsched.api.admin import Admin
from wfsched.api.audit_checks import _Ended, _missing, _none_between, _Segment, audit
from wfsched.domain.calendar import CronCalendar, cron_calendar
from wfsched.domain.definition import parse_definition
from wfsched.domain.timeutil import format_instant
from wfsched.store import Store


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(POOL),
    st.sampled_from(ZONES),
    instants,
    st.integers(0, 3 * 86400),
    st.integers(0, 3 * 86400),
    st.sampled_from(POOL),
    st.sampled_from(("any", "on", "before")),
)
def test_property_the_shortcut_answers_like_the_enumeration(
    expr: str, zone: str, t: datetime, length: int, split: int, other: str, edge: str
) -> None:
    """`_none_between` is True exactly when `_missing` finds nothing, over one
    revision and over two (each owning its side of `split`), with the same
    remembered calendar asked before and after (a remembered answer is the
    answer). The audit asks from a row's instant to a second before the
    next row's: `edge` puts the bounds on instants, or a second short."""
    one = _Ended(CronCalendar(expr, zone))
    two = _Ended(CronCalendar(other, zone))
    after, through = _epoch(t) - 86400, _epoch(t) - 86400 + length
    if edge != "any":
        after = one.prev_before_epoch(_epoch(t)) or after
        following = one.next_after_epoch(after)
        if following is not None:
            through = following - (edge == "before")
    cut = after + split
    for segments in (
        [_Segment(1, after - 86400, float("inf"), one)],
        [_Segment(1, after - 86400, cut, one), _Segment(2, cut, float("inf"), two)],
    ):
        for _ in range(2):
            assert _none_between(segments, after, through) == (
                _missing(segments, after, through) is None
            )


BERLIN = "Europe/Berlin"
START = _epoch(datetime(2026, 10, 24, 20, 0, tzinfo=UTC))
END = START + 10 * 3600  # past the fold of 2026-10-25 (02:00-03:00 twice)
SHARED = ("s1", "s2", "s3", "s4", "s5")
OWN = {"d1": "*/20 1-3 * * *", "d2": "0,30 1,2 * * *"}
ZONED = {"n1": "America/St_Johns"}
"""The shared expression in a zone half an hour off Berlin's: its own calendar."""


def _instants(normalized: str, zone: str = BERLIN) -> list[int]:
    """The calendar's own instants in (START, END], by its own steps."""
    cal = cron_calendar(normalized, zone)
    found, cursor = [], START
    while (cursor := cal.next_after_epoch(cursor)) <= END:
        found.append(cursor)
    return found


def _seed(store: Store, drop: dict[str, int]) -> None:
    """Every schedule with a row per instant through END, less `drop`'s instant."""
    admin = Admin(store, clock=lambda: float(START))
    crons = {**dict.fromkeys([*SHARED, *ZONED], "30 * * * *"), **OWN}
    rows: list[tuple[object, ...]] = []
    for schedule_id, cron in crons.items():
        zone = ZONED.get(schedule_id, BERLIN)
        text = (
            f'id = "{schedule_id}"\n[trigger]\ncron = "{cron}"\ntimezone = "{zone}"\n'
            '[run]\ncommand = ["true"]\n'
        )
        definition = parse_definition(text, "test", now=START)
        admin.create(definition)
        normalized = definition.trigger.normalized  # type: ignore[union-attr]
        at_ = [at for at in _instants(normalized, zone) if at != drop.get(schedule_id)]
        rows.extend(
            (schedule_id, at, None, None, 0, "skipped-misfire", "supervisor-down", 1, None, at)
            for at in at_
        )
        store.update_schedule(schedule_id, consumed_through=END, next_due=END + 3600)
    store.insert_occurrences(rows)


def _fold_repeat() -> int:
    """The second 02:30 of the fold (the instant croniter alone may skip):
    an hourly instant an hour after another with the same local wall time."""
    zone = ZoneInfo(BERLIN)

    def wall(at: int) -> str:
        return datetime.fromtimestamp(at, zone).strftime("%H:%M")

    hourly = _instants("30 * * * *")
    repeats = [at for at in hourly if at - 3600 in hourly and wall(at) == wall(at - 3600)]
    assert len(repeats) == 1
    return repeats[0]


@pytest.mark.parametrize("batch_rows", [50_000, 25, 5])
def test_an_audit_of_schedules_sharing_a_calendar_names_every_gap(
    make_store: Callable[[Path], Store],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    batch_rows: int,
) -> None:
    """s1, s3, s5, d2 and n1 are whole (clean); s2, s4 and d1 each miss one row.

    Ledgers are read in batches of schedules: all at once, two or three
    schedules at a time, and each alone (streamed, more rows than a batch)."""
    monkeypatch.setattr(audit_checks, "_LEDGER_BATCH_ROWS", batch_rows)
    repeat = _fold_repeat()
    middle = _instants("30 * * * *")[3]
    d1 = _instants(OWN["d1"])
    drop = {"s2": middle, "s4": repeat, "d1": d1[len(d1) // 2]}
    store = make_store(tmp_path / "store")
    try:
        # s1 and s3 ask the calendar about `middle` and `repeat` before s2
        # and s4 (and s5 after): the remembered answers must not hide them.
        _seed(store, drop)
        streamed: list[str] = []
        if batch_rows == 50_000:
            # One batch: no schedule's ledger is read on its own.
            monkeypatch.setattr(store, "ledger_rows", streamed.append)
        report = audit(store)
    finally:
        store.close()
    found = [(v["check"], v["schedule_id"], v["detail"]) for v in report["violations"]]
    assert found == [
        *(
            ("ledger-gap", schedule_id, f"{format_instant(at)} is not accounted for in the ledger")
            for schedule_id, at in sorted(drop.items())
        ),
    ]
