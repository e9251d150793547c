"""What surprises an operator coming from cron: warnings, never refusals.

Every definition these functions look at is valid and runs exactly as
docs/semantics.md says; the warnings name where that differs from what a
cron, systemd-timer or Kubernetes CronJob user would guess, so it is read
before the night it matters. `validate`, `create` and `apply` print them;
nothing is stored. Each returns `(key path, message)` pairs.
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta, tzinfo

from wfsched.domain.model import CronTrigger, Definition, OneShotTrigger
from wfsched.domain.timeutil import format_instant

Advice = tuple[str, str]

_DAY = 86400
_LOOKAHEAD = 366 * _DAY
"""DST changes looked for: the next twelve months, every rule a zone has."""

_WINDOW = 4 * 3600
"""Instants looked at on either side of a clock change (the widest change is 2 h)."""

_ONE_SECOND = timedelta(seconds=1)
_ONE_HOUR = timedelta(hours=1)
_MAX_INSTANTS = 2000
"""A bound on the instants one clock change may cost (`* 2 * * *` has 120)."""

# Zones whose names read like a region's time but are one fixed offset all
# year: what the operator most likely meant instead.
_FIXED_MEANT = {
    "EST": "America/New_York",
    "MST": "America/Denver",
    "HST": "Pacific/Honolulu",
}
# Names that are UTC under another spelling: nothing to warn about.
_UTC_NAMES = frozenset(
    {"UTC", "Etc/UTC", "UCT", "Etc/UCT", "Universal", "Etc/Universal", "Zulu", "Etc/Zulu"}
    | {"GMT", "Etc/GMT", "GMT0", "GMT+0", "GMT-0", "Etc/GMT0", "Etc/GMT+0", "Etc/GMT-0"}
    | {"Greenwich", "Etc/Greenwich"}
)
# The tz database's `backward` areas: names kept only so old settings load.
_LEGACY_AREAS = ("US/", "Canada/", "Brazil/", "Mexico/", "Chile/", "SystemV/")


def advise(defn: Definition, now: int) -> list[Advice]:
    """Every warning for `defn`, as of `now` (epoch seconds)."""
    trigger = defn.trigger
    if isinstance(trigger, OneShotTrigger):
        return _past_one_shot(defn, trigger, now)
    found: list[Advice] = []
    found.extend(_day_fields(trigger))
    found.extend(_zone_name(trigger.timezone, now))
    found.extend(_clock_changes(trigger, now))
    return found


def _day_fields(trigger: CronTrigger) -> list[Advice]:
    """wfsched ORs day-of-month and day-of-week whenever neither is exactly
    `*` (croniter's `day_or`, Kubernetes' reading). Vixie cron and cronie AND
    them when either starts with `*` (`*/2`, `*/3`...), so the same line runs
    on other days there."""
    fields = trigger.normalized.split(" ")
    dom, dow = fields[2], fields[4]
    if dom == "*" or dow == "*" or not (dom.startswith("*") or dow.startswith("*")):
        return []
    return [
        (
            "trigger.cron",
            f"{trigger.cron!r}: wfsched runs it on the days that match day-of-month {dom!r}"
            f" OR day-of-week {dow!r} (as croniter and Kubernetes read it); Vixie cron and"
            f" cronie run it only on days that match both, because one field starts with"
            " '*'. To run only on days matching both, list the days of one field explicitly"
            " and check the other in the command",
        )
    ]


def _zone_name(zone: str, now: int) -> list[Advice]:
    """A legacy or fixed-offset zone name: valid, but rarely what was meant."""
    if zone in _UTC_NAMES:
        return []
    offset = _fixed_offset(zone, now)
    if offset is not None:
        meant = _FIXED_MEANT.get(zone)
        behind = "behind" if "+" in zone else "ahead of"
        posix = f" (the sign is POSIX's: it is {behind} UTC)" if zone.startswith("Etc/GMT") else ""
        hint = (
            f"; did you mean {meant!r}, which follows daylight saving time?"
            if meant is not None
            else "; use the zone of the place the job belongs to, such as 'Europe/Berlin'"
        )
        return [("trigger.timezone", f"{zone!r} is {offset} all year{posix}{hint}")]
    if "/" not in zone or zone.startswith(_LEGACY_AREAS):
        target = _links().get(zone)
        follows = f" (it follows {target!r})" if target is not None else ""
        return [
            (
                "trigger.timezone",
                f"{zone!r} is a legacy zone name{follows}; write the zone of the place the job"
                f" belongs to as Area/City, such as {target or 'Europe/Berlin'!r}",
            )
        ]
    return []


def _fixed_offset(zone: str, now: int) -> str | None:
    """`UTC-05:00` when `zone` is an abbreviation or Etc/ offset (`EST`,
    `Etc/GMT+5`) with one offset over the last and next twelve months.

    A place without DST (Asia/Tokyo, or its alias Japan) is what it says;
    an abbreviation or Etc/ offset is a fixed offset the operator may have
    mistaken for a region's time."""
    if zone not in _FIXED_MEANT and not zone.startswith("Etc/"):
        return None
    from wfsched.domain.calendar import load_zone

    if _offset_changes(zone, now - _LOOKAHEAD, 2 * _LOOKAHEAD):
        return None
    offset = datetime.fromtimestamp(now, load_zone(zone)).utcoffset()
    assert offset is not None  # a ZoneInfo always has one
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


@functools.cache
def _links() -> dict[str, str]:
    """Alias -> target, from the tz database's own link lines (`L target alias`)."""
    from importlib.resources import files

    text = files("tzdata").joinpath("zoneinfo", "tzdata.zi").read_text(encoding="utf-8")
    links = {}
    for line in text.splitlines():
        if line.startswith("L "):
            _, target, alias = line.split()
            links[alias] = target
    return links


def _clock_changes(trigger: CronTrigger, now: int) -> list[Advice]:
    return list(_clock_changes_of(trigger.cron, trigger.normalized, trigger.timezone, now))


@functools.lru_cache(maxsize=1024)
def _clock_changes_of(cron: str, normalized: str, zone: str, now: int) -> tuple[Advice, ...]:
    """A fixed-time schedule whose time falls in a DST gap or fold.

    cron users expect a daily job to run once a day; wfsched runs every
    wall time a fold repeats twice (two distinct instants) and moves a time
    a gap removes to the first instant after the gap (docs/semantics.md,
    "Daylight saving time"). Schedules with an hour field of `*` keep
    their cadence through both and are not warned about.
    """
    from wfsched.domain.calendar import cron_calendar, describe_local

    changes = _offset_changes(zone, now, _LOOKAHEAD)
    if not changes:
        return ()
    cal = cron_calendar(normalized, zone)
    hours = cal.hours()
    if hours is None:
        return ()
    twice: tuple[str, str] | None = None
    moved: tuple[str, str] | None = None
    for change in changes:
        if not _touches(change, hours, cal.zone):
            continue
        instant = cal.next_after_epoch(change - _WINDOW)
        for _ in range(_MAX_INSTANTS):
            if instant > change + _WINDOW:
                break
            text, note = describe_local(instant, zone, cal)
            day, clock = text.split(" ")[0], text.split(" ")[1]
            if note == "dst-fold-repeat" and twice is None:
                twice = (clock, day)
            elif note == "dst-gap-shifted" and moved is None:
                moved = (clock, day)
            instant = cal.next_after_epoch(instant)
    parts = []
    if twice is not None:
        parts.append(f"runs twice at {twice[0]} on {twice[1]}, the night clocks go back")
    if moved is not None:
        parts.append(
            f"runs at {moved[0]} on {moved[1]}, the night clocks go forward"
            " (its own time does not exist that night)"
        )
    if not parts:
        return ()
    return (
        (
            "trigger.cron",
            f"{cron!r} in {zone}: " + " and ".join(parts) + "; choose a time"
            " outside the hours the clocks change, or timezone = 'UTC', if that matters",
        ),
    )


def _touches(change: int, hours: frozenset[int], zone: tzinfo) -> bool:
    """Whether a wall time the change repeats or skips is in an hour the
    expression names: a cheap test that spares most schedules the walk.

    The wall times concerned run from the wall clock just before the change
    to the one just after it, whichever is earlier (a fold's repeat, a gap's
    missing span)."""
    before = datetime.fromtimestamp(change - 1, zone).replace(tzinfo=None) + _ONE_SECOND
    after = datetime.fromtimestamp(change, zone).replace(tzinfo=None)
    start, end = min(before, after), max(before, after)
    hour = start.replace(minute=0, second=0)
    while hour < end:
        if hour.hour in hours:
            return True
        hour += _ONE_HOUR
    return False


@functools.lru_cache(maxsize=256)
def _offset_changes(zone: str, start: int, length: int) -> tuple[int, ...]:
    """The instants in `[start, start + length)` at which `zone`'s UTC offset
    changes, to the second, read from the zone database (no rule of ours)."""
    from wfsched.domain.calendar import load_zone

    tz = load_zone(zone)

    def offset(t: int) -> object:
        return datetime.fromtimestamp(t, tz).utcoffset()

    found = []
    day = start - start % _DAY
    while day < start + length:
        if offset(day) != offset(day + _DAY):
            low, high = day, day + _DAY
            while high - low > 1:
                middle = (low + high) // 2
                if offset(middle) == offset(low):
                    low = middle
                else:
                    high = middle
            found.append(high)
        day += _DAY
    return tuple(found)


def _past_one_shot(defn: Definition, trigger: OneShotTrigger, now: int) -> list[Advice]:
    late = now - trigger.at
    if late <= 0:
        return []
    when = format_instant(trigger.at)
    if late <= defn.policy.lateness:
        outcome = "it is still within its lateness and runs as soon as a supervisor admits it"
    elif defn.policy.misfire == "latest":
        outcome = 'with misfire = "latest" it runs once, as soon as a supervisor admits it'
    else:
        outcome = (
            'with misfire = "skip" it never runs (recorded skipped-misfire);'
            ' set misfire = "latest" to run it once'
        )
    return [("trigger.at", f"{when} is already past; {outcome}")]
