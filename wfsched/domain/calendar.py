"""The calendar adapter over croniter (docs/definitions.md, "The cron
dialect"; docs/semantics.md, "DST").

croniter owns every piece of calendar arithmetic, DST included; this module
only (1) refuses the inputs croniter would read differently from Unix cron,
(2) converts between UTC instants and the schedule's zone at the edges,
(3) refuses answers that do not advance, and (4) completes fall folds:
croniter 7.0.0 drops one of the two instants of a repeated wall time in some
shapes of the fields, so an answer whose wall time is ambiguous brings its
other instant along (the zone database's `fold` names it; no arithmetic of
ours). Local datetimes never leave a function: the two 01:30s of a fall fold
compare and hash equal as local values, so everything returned is UTC.

`reference/calendar-probe.md` records what croniter 7.0.0 does, value by value;
`tests/test_calendar.py` pins those values so an upgrade is noticed.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from wfsched.errors import CalendarError, CalendarExhausted, ZoneUnavailable

if TYPE_CHECKING:
    from wfsched.domain.model import CronTrigger, OneShotTrigger

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECOND = timedelta(seconds=1)
_MINUTE = timedelta(minutes=1)

# --------------------------------------------------------------------- zones


@functools.cache
def _zone_names() -> frozenset[str]:
    # Membership in the tz database's list, not ZoneInfo() succeeding, is the
    # test: on a case-insensitive filesystem ZoneInfo("europe/berlin") loads.
    # The list is the `tzdata` package's (its Zone and Link names), not
    # zoneinfo.available_timezones(): that one also offers every TZif file of
    # the host's zoneinfo directory, such as `localtime` (the host's own
    # setting, which can change under a schedule) and `posixrules`. `Factory`
    # is in the database but names no place ("local time zone must be set").
    # Every name here loads: ZoneInfo falls back to the tzdata package.
    from importlib.resources import files

    names = files("tzdata").joinpath("zones").read_text(encoding="utf-8").split()
    return frozenset(names) - {"Factory"}


def load_zone(name: str) -> zoneinfo.ZoneInfo:
    """The IANA zone `name`, or ValueError naming what to write instead.

    The rule for a definition coming in (validate, create, update, apply,
    edit). A stored one is loaded with `resolve_zone`.
    """
    if not isinstance(name, str) or name not in _zone_names():
        meant = _zone_names_folded().get(name.casefold()) if isinstance(name, str) else None
        if meant is not None:
            # Zone names are case-sensitive (they are file names on most
            # hosts); the right spelling is offered rather than guessed.
            raise ValueError(f"unknown time zone {name!r}; did you mean {meant!r}?")
        raise ValueError(f"unknown time zone {name!r}; use an IANA name such as 'Europe/Berlin'")
    return zoneinfo.ZoneInfo(name)


@functools.cache
def _zone_names_folded() -> dict[str, str]:
    return {name.casefold(): name for name in _zone_names()}


@functools.cache
def _host_zone_names() -> frozenset[str]:
    # What releases before the tz-database-only rule accepted, and may have
    # stored: every zone file the host's zoneinfo directories list.
    return frozenset(zoneinfo.available_timezones())


def resolve_zone(name: str) -> zoneinfo.ZoneInfo:
    """The zone of a stored schedule, as earlier releases accepted it.

    A name `load_zone` accepts, or one only the host lists (`localtime`):
    a schedule accepted then keeps its calendar after an upgrade. A name
    that resolves neither way (removed from the tz database since, or its
    file gone) is ZoneUnavailable, naming the zone and what to do.
    """
    if isinstance(name, str) and (name in _zone_names() or name in _host_zone_names()):
        # ZoneInfoNotFoundError is a KeyError; a damaged file, a ValueError.
        with contextlib.suppress(KeyError, ValueError, OSError):
            return zoneinfo.ZoneInfo(name)
    raise ZoneUnavailable(
        f"time zone {name!r} does not resolve on this host (not in its tz database);"
        " update the schedule to an IANA name such as 'Europe/Berlin'"
    )


# ---------------------------------------------------------------- expressions

_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_NAMES: tuple[dict[str, int], ...] = (
    {},
    {},
    {},
    {name: i + 1 for i, name in enumerate(_MONTHS)},
    {name: i for i, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))},
)
_ALIASES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_ITEM = re.compile(r"(?P<lo>\*|\w+)(?:-(?P<hi>\w+))?(?:/(?P<step>\w+))?", re.ASCII)
# croniter extensions with no Unix meaning, named so the operator learns why.
_FOREIGN = {
    "?": "'?' is not Unix cron; use '*'",
    "#": "'#' (nth weekday) is not Unix cron",
    "H": "'H' (hashed value) is not Unix cron",
    "R": "'R' (random value) is not Unix cron",
    "L": "'L' (last day) is not Unix cron",
    "W": "'W' (nearest weekday) is not Unix cron",
}
_SHAPE = "five fields: minute hour day-of-month month day-of-week"


def _foreign(text: str) -> str | None:
    """Why `text` is croniter-only syntax (H, R, L, W), if it is."""
    for run in re.findall(r"[A-Za-z]+", text):
        if re.fullmatch(r"[HRLW]+", run.upper()):
            return _FOREIGN[run[0].upper()]
    return None


def _value(token: str, index: int, field: str) -> int:
    """One number or name of field `index`, range-checked."""
    names = _NAMES[index]
    if token.lower() in names:
        return names[token.lower()]
    if not token.isdigit():
        why = _foreign(token)
        if why is None:
            example = {3: " or a name like 'jan'", 4: " or a name like 'mon'"}.get(index, "")
            why = f"{token!r} is not a number{example}"
        raise ValueError(f"{field} field: {why}")
    number = int(token)
    low, high = _BOUNDS[index]
    if not low <= number <= high:
        raise ValueError(f"{field} field: {number} is out of range {low}-{high}")
    return number


def _item(item: str, index: int) -> str:
    """Check one list item; rewrite `N-N[/S]` to `N` (croniter: whole field)."""
    field = _FIELDS[index]
    for mark in "?#":
        if mark in item:
            raise ValueError(f"{field} field: {_FOREIGN[mark]}")
    match = _ITEM.fullmatch(item)
    if match is None:
        why = _foreign(item) or f"{item!r} is not N, N-M, */S, N-M/S or N/S"
        raise ValueError(f"{field} field: {why}")
    lo, hi, step = match.group("lo", "hi", "step")
    if step is not None:
        if not step.isdigit():
            raise ValueError(f"{field} field: step {step!r} is not a number")
        if int(step) < 1:
            raise ValueError(f"{field} field: step must be at least 1")
    if lo == "*":
        if hi is not None:
            raise ValueError(f"{field} field: {item!r} is not N, N-M, */S, N-M/S or N/S")
        return item
    first = _value(lo, index, field)
    if hi is None:
        if step is not None and index == 4:
            # croniter ends `N/S` at Saturday, cronie at 7 (Sunday again): 1/2
            # includes Sunday in one and not the other. A range says which.
            raise ValueError(
                f"{field} field: {item!r} is ambiguous; write a range such as 1-7/{step}"
            )
        return item
    last = _value(hi, index, field)
    if first > last:
        # croniter wraps reversed ranges (5-1 is 0,1,5..59); Vixie rejects them.
        hint = "; write 6-7 for Saturday and Sunday" if index == 4 else ""
        raise ValueError(f"{field} field: range {item!r} is reversed{hint}")
    if first == last:
        return lo
    return item


def _check(expr: str) -> str:
    """The grammar guard alone (no croniter): the rewritten five fields."""
    if not isinstance(expr, str):
        raise ValueError(f"cron expression must be a string, not {type(expr).__name__}")
    if not expr.isascii():
        bad = next(ch for ch in expr if not ch.isascii())
        raise ValueError(f"cron expression contains non-ASCII character U+{ord(bad):04X}")
    text = expr.strip(" \t\r\n")
    if not text:
        raise ValueError(f"cron expression is empty; expected {_SHAPE}")
    if text.startswith("@"):
        alias = _ALIASES.get(text.lower())
        if alias is not None:
            return alias
        if text.lower() == "@reboot":
            raise ValueError("@reboot is not supported: wfsched has no boot event")
        raise ValueError(f"unknown alias {text!r}; use {', '.join(_ALIASES)} or {_SHAPE}")
    fields = re.split(r"[ \t]+", text)
    if len(fields) != 5:
        raise ValueError(f"expected {_SHAPE}; got {len(fields)} fields{_extra_fields(fields)}")
    out = []
    for index, field in enumerate(fields):
        items = field.split(",")
        if "" in items:
            raise ValueError(f"{_FIELDS[index]} field: empty item in {field!r}")
        out.append(",".join(_item(item, index) for item in items))
    return " ".join(out)


def _extra_fields(fields: list[str]) -> str:
    """Why a line has more than five fields: usually a crontab line pasted
    whole, its command (and in /etc/crontab its user) after the times."""
    if len(fields) <= 5:
        return ""
    sixth = fields[5]
    if _COMMAND_LIKE.search(sixth) or len(fields) > 7:
        return (
            f"; the sixth field {sixth!r} looks like a command (or, in /etc/crontab, a user):"
            " the command goes in run.command (`wfsched import-crontab` translates whole"
            " crontabs)"
        )
    return " (seconds and year fields are not supported)"


_COMMAND_LIKE = re.compile(r"[/~.$=]|^[A-Za-z_][\w-]*[a-z]{3,}")
"""A field no cron grammar has: a path, a variable, or a word longer than a
month or weekday name."""


def _croniter(normalized: str, zone: tzinfo) -> croniter:
    try:
        # Any start will do: start_time is passed again with every query.
        start = datetime(2000, 1, 1, tzinfo=zone)
        return croniter(normalized, start, ret_type=datetime, day_or=True)
    except CroniterBadCronError as exc:
        detail = " ".join(str(exc).split())
        raise ValueError(f"invalid cron expression {normalized!r}: {detail}") from exc


def normalize_cron(expr: str) -> str:
    """Guard `expr` against croniter's non-Unix readings; the five fields croniter gets.

    Raises ValueError with a one-line operator message for anything refused.
    """
    if not isinstance(expr, str):
        raise ValueError(f"cron expression must be a string, not {type(expr).__name__}")
    return _normalize_cron(expr)


@functools.lru_cache(maxsize=1024)
def _normalize_cron(expr: str) -> str:
    normalized = _check(expr)
    _croniter(normalized, UTC)
    return normalized


# ---------------------------------------------------------------- calendars


def _query_instant(t: object) -> datetime:
    if not isinstance(t, datetime):
        raise TypeError(f"expected an aware datetime, not {type(t).__name__}")
    if t.tzinfo is None or t.utcoffset() is None:
        raise ValueError("naive datetime: an offset or zone is required")
    return t


def _from_epoch(t: object) -> datetime:
    if isinstance(t, bool) or not isinstance(t, int | float):
        raise TypeError(f"expected epoch seconds, not {type(t).__name__}")
    return datetime.fromtimestamp(t, UTC)


def _to_epoch(moment: datetime) -> int:
    return (moment - _EPOCH) // _SECOND


def _twin(local: datetime) -> datetime | None:
    """The other UTC instant of `local`'s wall time, if that wall time is ambiguous.

    The zone database says so through PEP 495's `fold`: an existing wall time
    whose offset changes with `fold` occurs twice. Built with the constructor
    (about half the cost of `replace`) since every forward query asks.
    """
    zone = local.tzinfo
    assert zone is not None  # answers and queries are aware
    other = datetime(
        local.year,
        local.month,
        local.day,
        local.hour,
        local.minute,
        local.second,
        local.microsecond,
        zone,
        fold=1 - local.fold,
    )
    if zone.utcoffset(other) == zone.utcoffset(local):
        return None
    return other.astimezone(UTC)


def _ceil_minute(moment: datetime) -> datetime:
    floor = moment.replace(second=0, microsecond=0)
    return floor if floor == moment else floor + _MINUTE


_REMEMBERED = 16
"""Answers a calendar keeps per direction (see `CronCalendar._remembered`)."""


class CronCalendar:
    """Occurrences of a normalized five-field expression in an IANA zone.

    Holds one croniter object and passes each query as `start_time` (about
    5x cheaper than constructing one per call, identical answers); a lock
    makes that reuse safe across threads.
    """

    def __init__(self, normalized: str, zone: str) -> None:
        if _check(normalized) != normalized:
            # Only normalize_cron's output is known to mean what Unix cron means.
            raise ValueError(f"{normalized!r} is not normalized; pass it through normalize_cron")
        self.expression = normalized
        self.zone_name = zone
        self.zone = resolve_zone(zone)
        self._iter = _croniter(normalized, self.zone)
        self._lock = threading.Lock()
        self._next_answers: dict[int, int] = {}
        self._prev_answers: dict[int, int] = {}

    def __repr__(self) -> str:
        return f"CronCalendar({self.expression!r}, {self.zone_name!r})"

    def hours(self) -> frozenset[int] | None:
        """The hours the expression names, or None for an hour field of `*`."""
        hours = self._iter.expanded[1]
        return None if hours == ["*"] else frozenset(int(hour) for hour in hours)

    def _matches_clock(self, local: datetime) -> bool:
        """Whether the local hour and minute satisfy the expression's fields.

        croniter only answers matching wall times, except when it moves a
        nonexistent one forward out of a DST gap.
        """
        minutes, hours = self._iter.expanded[0], self._iter.expanded[1]
        return (minutes == ["*"] or local.minute in minutes) and (
            hours == ["*"] or local.hour in hours
        )

    def _raw(self, local: datetime, forward: bool) -> tuple[datetime, datetime]:
        """croniter's own answer for the query `local`: in the zone (its `fold`
        says which pass of a repeated wall time) and in UTC.

        Checked to advance, so nothing built on it can loop or go backwards.
        """
        try:
            with self._lock:
                if forward:
                    answer: datetime = self._iter.get_next(datetime, start_time=local)
                else:
                    answer = self._iter.get_prev(datetime, start_time=local)
        except CroniterBadDateError as exc:
            way = "after" if forward else "before"
            raise CalendarExhausted(
                f"{self.expression!r} ({self.zone_name}) has no instant {way} "
                f"{local.astimezone(UTC).isoformat()}"
            ) from exc
        moment = answer.astimezone(UTC) if answer.utcoffset() is not None else None
        if (
            moment is None
            or moment.microsecond
            or not (moment > local if forward else moment < local)
        ):
            raise CalendarError(
                f"calendar regression: croniter answered {answer.isoformat()} for "
                f"{'next after' if forward else 'previous before'} "
                f"{local.astimezone(UTC).isoformat()} ({self.expression!r}, {self.zone_name})"
            )
        return answer, moment

    @staticmethod
    def _in_pass(local: datetime, near: datetime, shift: timedelta, second: bool) -> bool:
        """Whether `local` is in the first (or `second`) pass of the fold that
        `near` is in; `shift` is that fold's length (a pass never spans more)."""
        return (
            local.fold == int(second)
            and abs(local.astimezone(UTC) - near) < shift
            and _twin(local) is not None
        )

    def next_after(self, t: datetime) -> datetime:
        """The first occurrence strictly after `t`, in UTC (fold repeats completed)."""
        return self._step(t, forward=True)

    def prev_before(self, t: datetime) -> datetime:
        """The last occurrence strictly before `t`, in UTC (fold repeats completed)."""
        return self._step(t, forward=False)

    def _step(self, t: datetime, *, forward: bool) -> datetime:
        """One step from `t`, completing what croniter misses in a fold.

        Forward, croniter is exact from a second pass and may skip the first
        pass's repeats; backward, the mirror image. Named for forward:
        `ahead` is the pass croniter may skip wall times of, `behind` the
        other one, where it is exact.
        """
        t = _query_instant(t)
        if t.tzinfo is not UTC:
            t = t.astimezone(UTC)
        beyond = (lambda x: x > t) if forward else (lambda x: x < t)
        nearer = min if forward else max
        local = t.astimezone(self.zone)
        answer, best = self._raw(local, forward=forward)
        if bool(answer.fold) == forward:
            # croniter named one instant of a repeated wall time; its twin on
            # the near side counts if it is still beyond `t`.
            twin = _twin(answer)
            if twin is not None and beyond(twin):
                best = twin
        if bool(local.fold) == forward:
            return best  # `t` is in the pass where croniter is exact
        twin = _twin(local)
        if twin is None:
            return best
        # `t` is in the pass croniter may skip. What follows it (forward) in
        # its own pass comes first; after that, the other pass repeats the
        # matching wall times up to `t`'s own, which croniter may skip. They
        # are found from the other pass walking back towards `t`, where
        # croniter is exact.
        shift = twin - t if forward else t - twin
        if self._in_pass(best.astimezone(self.zone), t, shift, second=not forward):
            return best
        cursor = (
            twin.replace(second=0, microsecond=0) + _MINUTE
            if forward
            else _ceil_minute(twin) - _MINUTE
        )
        while True:
            try:
                found, moment = self._raw(cursor.astimezone(self.zone), forward=not forward)
            except CalendarExhausted:
                return best
            if not self._in_pass(found, twin, shift, second=forward):
                return best
            cursor = moment
            best = nearer(best, moment)

    def next_after_epoch(self, t: int) -> int:
        return self._remembered(self._next_answers, t, self.next_after)

    def prev_before_epoch(self, t: int) -> int:
        return self._remembered(self._prev_answers, t, self.prev_before)

    @staticmethod
    def _remembered(answers: dict[int, int], t: int, query: Callable[[datetime], datetime]) -> int:
        """A few recent answers are kept: calendars are shared by every
        schedule with the same expression and zone (`cron_calendar`), and
        when those fall due together each asks the same questions (the due
        instant, the one after it); `apply` asks the never-fires probe's
        question again for the first due instant."""
        answer = answers.get(t)
        if answer is None:
            answer = _to_epoch(query(_from_epoch(t)))
            if len(answers) >= _REMEMBERED:
                answers.clear()
            answers[t] = answer
        return answer


class OneShotCalendar:
    """A single instant (whole epoch seconds, seconds kept), same interface."""

    def __init__(self, at: int) -> None:
        if isinstance(at, bool) or not isinstance(at, int):
            raise TypeError(f"one-shot instant must be int epoch seconds, not {type(at).__name__}")
        self.at = at
        self._moment = datetime.fromtimestamp(at, UTC)

    def __repr__(self) -> str:
        return f"OneShotCalendar({self.at!r})"

    def next_after(self, t: datetime) -> datetime | None:
        return self._moment if self._moment > _query_instant(t) else None

    def prev_before(self, t: datetime) -> datetime | None:
        return self._moment if self._moment < _query_instant(t) else None

    def next_after_epoch(self, t: int) -> int | None:
        return self.at if self._moment > _from_epoch(t) else None

    def prev_before_epoch(self, t: int) -> int | None:
        return self.at if self._moment < _from_epoch(t) else None


def calendar_for(trigger: CronTrigger | OneShotTrigger) -> CronCalendar | OneShotCalendar:
    from wfsched.domain.model import CronTrigger, OneShotTrigger

    if isinstance(trigger, CronTrigger):
        return cron_calendar(trigger.normalized, trigger.timezone)
    if isinstance(trigger, OneShotTrigger):
        return OneShotCalendar(trigger.at)
    raise TypeError(f"not a trigger: {type(trigger).__name__}")


@functools.lru_cache(maxsize=1024)
def cron_calendar(normalized: str, zone: str) -> CronCalendar:
    """The calendar of an expression in a zone, shared by every schedule that
    uses it: building one costs croniter's whole parse (most of what `apply`
    spends per definition), and a calendar holds no per-schedule state."""
    return CronCalendar(normalized, zone)


def check_fires(normalized: str, zone: str, after: int) -> None:
    """Refuse an expression with no instant after `after` (create-time probe).

    croniter constructs `0 0 30 2 *` happily and only fails when asked; its
    strict validation would also refuse the valid `0 0 30 2 fri`, so asking
    for the next instant is the exact test.
    """
    try:
        cron_calendar(normalized, zone).next_after_epoch(after)
    except CalendarExhausted as exc:
        raise ValueError(
            f"never fires (e.g. 30 February); {normalized!r} has no instant "
            "within croniter's 50-year search: check the day-of-month and month fields"
        ) from exc


# ------------------------------------------------------------------- display


def _offset_text(offset: timedelta) -> str:
    sign = "-" if offset < timedelta(0) else "+"
    seconds = abs(int(offset.total_seconds()))
    text = f"{sign}{seconds // 3600:02d}:{seconds % 3600 // 60:02d}"
    return text + (f":{seconds % 60:02d}" if seconds % 60 else "")


_WRITTEN_OFFSET = re.compile(r"([+-])(\d{2}):(\d{2})$")


def describe_one_shot_local(instant: int, written: str) -> str:
    """A one-shot's instant as wall time in the offset written in its `at`:
    that offset is the schedule's zone, as `get` and `occurrences` show it
    (`Z` is UTC). Never the zone of the machine running the command."""
    match = _WRITTEN_OFFSET.search(written.strip())
    sign = -1 if match is not None and match.group(1) == "-" else 1
    offset = (
        timedelta(hours=int(match.group(2)), minutes=int(match.group(3))) * sign
        if match is not None
        else timedelta(0)
    )
    if not offset:  # `Z`, `+00:00`, `-00:00`: UTC
        return describe_local(instant, "UTC", None)[0]
    local = datetime.fromtimestamp(instant, timezone(offset))
    clock = "%H:%M:%S" if local.second else "%H:%M"
    return f"{local.strftime('%Y-%m-%d ' + clock)} {_offset_text(offset)}"


def describe_local(instant: int, zone: str, cal: CronCalendar | None) -> tuple[str, str | None]:
    """Local wall time with offset and abbreviation, plus a DST note.

    The note is "dst-gap-shifted" when croniter moved a nonexistent wall time
    forward (the local hour/minute do not match the expression's fields), or
    "dst-fold-repeat" for the second (fold=1) of two instants sharing a wall
    time in a fall fold. Display only: the local value is never compared.
    """
    local = datetime.fromtimestamp(instant, resolve_zone(zone))
    offset = local.utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    clock = "%H:%M:%S" if local.second else "%H:%M"
    text = f"{local.strftime('%Y-%m-%d ' + clock)} {_offset_text(offset)} ({local.tzname()})"
    note = None
    if cal is not None:
        if cal.zone_name != zone:
            raise ValueError(f"calendar zone {cal.zone_name!r} is not {zone!r}")
        if not cal._matches_clock(local):
            note = "dst-gap-shifted"
    if note is None and local.fold == 1 and local.replace(fold=0).utcoffset() != offset:
        note = "dst-fold-repeat"
    return text, note
