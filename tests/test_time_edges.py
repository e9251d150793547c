"""The ends of representable time: instants are UTC datetimes of years 1-9999.

Near either end croniter and datetime overflow instead of answering. A
calendar that runs off the end is exhausted, like a cron that never fires
again; an instant from outside (a one-shot `at`, `next --after`) is refused
where it enters; nothing in between may crash on them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import CliRun
from fakes import Clock, FakeControl

from wfsched.api.admin import Admin
from wfsched.api.audit_checks import audit
from wfsched.daemon.supervisor import Supervisor
from wfsched.domain.calendar import CronCalendar, OneShotCalendar, normalize_cron
from wfsched.domain.config import SupervisorConfig
from wfsched.domain.decisions import ScheduleView, ask, decide, span_between
from wfsched.domain.definition import parse_definition
from wfsched.domain.timeutil import (
    MAX_INSTANT,
    MIN_INSTANT,
    format_event,
    format_instant,
    occurrence_id,
    parse_instant,
)
from wfsched.errors import EndOfTime
from wfsched.store import SQLiteStore

T0 = 1_796_083_200  # 2026-12-01T00:00:00Z
LAST_MINUTE = MAX_INSTANT - 59  # 9999-12-31T23:59:00Z


def cron(expr: str, zone: str = "UTC") -> CronCalendar:
    return CronCalendar(normalize_cron(expr), zone)


def view(consumed: int) -> ScheduleView:
    return ScheduleView("s", consumed, None, "skip", None, "skip", 60)


# ------------------------------------------------------------ the calendar's end


@pytest.mark.parametrize(
    ("expr", "zone", "consumed", "last"),
    [
        ("* * * * *", "UTC", LAST_MINUTE - 60, LAST_MINUTE),
        # local 23:59 on 9999-12-31 is in year 10000 in UTC: 18:59 is the last
        ("* * * * *", "America/New_York", MAX_INSTANT - 6 * 3600, LAST_MINUTE),
        # +14:00: the local year 9999 ends at 9999-12-31T09:59:59Z
        ("* * * * *", "Pacific/Kiritimati", MAX_INSTANT - 15 * 3600, MAX_INSTANT - 14 * 3600 - 59),
        ("0 0 1 1 *", "UTC", MAX_INSTANT - 400 * 86400, parse_instant("9999-01-01T00:00:00Z")),
        (
            "0 0 29 2 *",
            "UTC",
            parse_instant("9995-01-01T00:00:00Z"),
            parse_instant("9996-02-29T00:00:00Z"),
        ),
    ],
)
def test_a_cron_near_year_9999_ends_exhausted_not_as_a_crash(
    expr: str, zone: str, consumed: int, last: int
) -> None:
    cal = cron(expr, zone)
    decision = decide(view(consumed), cal, MAX_INSTANT - 1, active=0, capacity_left=1000)
    assert decision.blocked is None
    assert decision.exhausted and decision.next_due is None
    decided = [entry.last or entry.at for entry in decision.entries if entry.state != "exhausted"]
    decided += [at for at, _ in decision.admit]
    assert max(decided) == last
    (end,) = [entry for entry in decision.entries if entry.state == "exhausted"]
    assert "end of representable time" in (end.reason or "")


def test_span_and_previous_instant_near_year_1_are_bounded() -> None:
    cal = cron("* * * * *")
    span = span_between(cal, MIN_INSTANT + 1, MIN_INSTANT + 3 * 60)
    assert span is not None and (span.first, span.count) == (MIN_INSTANT + 60, 3)
    with pytest.raises(EndOfTime):
        ask(cal.prev_before_epoch, MIN_INSTANT)


def test_overflow_far_from_the_ends_stays_an_error() -> None:
    """Only near year 1 or 9999 is an overflow the calendar's end; elsewhere it
    is a defect, and the supervisor must block the schedule, not exhaust it."""

    def broken(t: int) -> int:
        raise OverflowError("date value out of range")

    with pytest.raises(OverflowError):
        ask(broken, T0)
    with pytest.raises(EndOfTime):
        ask(broken, MAX_INSTANT - 10)


def test_one_shot_calendar_queries_past_the_end_are_exhaustion() -> None:
    cal = OneShotCalendar(MAX_INSTANT)
    assert ask(cal.next_after_epoch, MAX_INSTANT - 1) == MAX_INSTANT
    with pytest.raises(EndOfTime):
        ask(cal.next_after_epoch, MAX_INSTANT + 1)


def test_supervisor_admits_the_last_minute_then_the_schedule_is_exhausted(tmp_path: Path) -> None:
    clock = Clock(LAST_MINUTE - 30)
    store = SQLiteStore(tmp_path / "store")
    admin = Admin(store, clock)
    text = 'id = "last"\n[trigger]\ncron = "* * * * *"\n[run]\ncommand = ["true"]\n'
    admin.create(parse_definition(text, "last.toml", now=int(clock())))
    control = FakeControl(clock=clock)
    events: list[tuple[str, dict[str, object]]] = []
    supervisor = Supervisor(
        store,
        SupervisorConfig(),
        control,
        clock=clock,
        log=lambda event, **fields: events.append((event, fields)),
    )
    supervisor.tick()
    clock.set(LAST_MINUTE)
    supervisor.tick()
    control.finish("run-000001")
    clock.set(MAX_INSTANT)
    supervisor.tick()
    view = admin.get("last")
    assert view["state"] == "exhausted" and view["blocked_reason"] is None
    assert [spec.run_id for spec, _ in control.spawned] == ["run-000001"]
    items, _ = admin.occurrences("last", limit=10)
    rows = {item["state"]: item for item in items}
    assert rows["completed"]["scheduled_at"] == "9999-12-31T23:59:00Z"
    assert "end of representable time" in rows["exhausted"]["reason"]
    assert not [event for event, _ in events if event == "blocked"]
    # The audit walks the same calendar to the same end and finds the ledger whole.
    report = audit(store)
    assert report["ok"] is True, report
    store.close()


# ------------------------------------------------------------ the forms of an instant


def test_instants_in_years_below_1000_keep_four_digit_years() -> None:
    # strftime's %Y gives "1" for year 1 on glibc.
    first = MIN_INSTANT + 1
    assert format_instant(first) == "0001-01-01T00:00:01Z"
    assert format_event(first + 0.25) == "0001-01-01T00:00:01.250Z"
    assert occurrence_id("x", first) == "x@00010101T000001Z"
    assert parse_instant(format_instant(first) or "") == first
    assert format_instant(MAX_INSTANT) == "9999-12-31T23:59:59Z"


@pytest.mark.parametrize(
    "text", ["9999-12-31T23:00:00-05:00", "0001-01-01T00:30:00+01:00", "0001-01-01T00:00:00+00:01"]
)
def test_parse_instant_refuses_what_utc_cannot_hold(text: str) -> None:
    with pytest.raises(ValueError, match="outside the instants wfsched can represent"):
        parse_instant(text)


# ------------------------------------------------------------ `next --after`


def create(run_cli: CliRun, tmp_path: Path, text: str) -> None:
    path = tmp_path / "def.toml"
    path.write_text(text)
    code, _, err = run_cli("create", str(path))
    assert code == 0, err


def assert_one_line(err: str, *needles: str) -> None:
    assert err.startswith("wfsched: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)


CRON = 'id = "{id}"\n[trigger]\ncron = "{cron}"\ntimezone = "{zone}"\n[run]\ncommand = ["true"]\n'


@pytest.mark.parametrize(
    ("after", "needle"),
    [
        ("9999-12-31T23:59:00Z", "m has no instant after 9999-12-31T23:59:00Z before the end"),
        ("9999-12-31T23:59:59Z", "before the end of representable time (9999-12-31T23:59:59Z)"),
        ("9999-12-31T23:00:00-05:00", "outside the instants wfsched can represent"),
        ("10000-01-01T00:00:00Z", "not an RFC 3339 date-time"),
    ],
)
def test_next_after_the_last_instant_is_a_clear_error(
    run_cli: CliRun, tmp_path: Path, after: str, needle: str
) -> None:
    create(run_cli, tmp_path, CRON.format(id="m", cron="* * * * *", zone="UTC"))
    code, out, err = run_cli("next", "m", "--after", after)
    assert code == 2 and out == ""
    assert_one_line(err, "--after: ", needle)


@pytest.mark.parametrize(
    ("cron_expr", "zone", "after", "expected"),
    [
        ("* * * * *", "UTC", "9999-12-31T23:58:00Z", ["9999-12-31T23:59:00Z"]),
        (
            "0 * * * *",
            "Pacific/Kiritimati",
            "9999-12-31T07:30:00Z",
            ["9999-12-31T08:00:00Z", "9999-12-31T09:00:00Z"],
        ),
        (
            "0 0 29 2 *",
            "UTC",
            "9990-01-01T00:00:00Z",
            ["9992-02-29T00:00:00Z", "9996-02-29T00:00:00Z"],
        ),
    ],
)
def test_next_near_the_end_lists_the_instants_that_exist(
    run_cli: CliRun, tmp_path: Path, cron_expr: str, zone: str, after: str, expected: list[str]
) -> None:
    create(run_cli, tmp_path, CRON.format(id="m", cron=cron_expr, zone=zone))
    code, out, err = run_cli("next", "m", "--after", after, "--json")
    assert code == 0, err
    assert [item["scheduled_at"] for item in json.loads(out)["items"]] == expected
    code, out, err = run_cli("next", "m", "--after", after)
    assert code == 0 and err == ""
    assert expected[-1] in out


def test_one_shots_at_both_ends_are_created_listed_and_shown(
    run_cli: CliRun, tmp_path: Path
) -> None:
    for name, at in (("first", "0001-01-01T00:00:01Z"), ("last", "9999-12-31T18:59:59-05:00")):
        create(
            run_cli,
            tmp_path,
            f'id = "{name}"\n[trigger]\nat = {at}\n[run]\ncommand = ["true"]\n',
        )
    code, out, err = run_cli("list", "--json")
    assert code == 0, err
    due = {item["id"]: item["next_due"] for item in json.loads(out)["items"]}
    assert due == {"first": "0001-01-01T00:00:01Z", "last": "9999-12-31T23:59:59Z"}
    for name in ("first", "last"):
        for args in (("get", name), ("next", name), ("occurrences", name)):
            code, _, err = run_cli(*args)
            assert code == 0 and err == "", (args, err)
