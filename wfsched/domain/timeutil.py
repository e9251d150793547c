"""UTC instants, RFC 3339 text and durations.

Everything stored or compared is a UTC instant in whole epoch seconds
(occurrence instants) or float epoch seconds (event times). Local datetimes
are only ever produced for display: two fold 01:30s compare equal locally.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import lru_cache

Clock = Callable[[], float]
"""A wall clock returning epoch seconds; injected wherever time is judged."""

MIN_INSTANT = int(datetime(1, 1, 1, tzinfo=UTC).timestamp())
MAX_INSTANT = int(datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp())
"""The instants a `datetime` can hold in UTC (years 1-9999). Beyond them the
calendar, the display and the occurrence ids overflow, so no instant from
outside enters the system."""

MAX_DURATION = 3650 * 86400
"""The longest duration anywhere (definitions, config.toml, flags): 3650d,
about ten years. Longer only means "never", and every deadline computed from
a duration (a clock plus a timeout, now minus a retention) must stay inside
what the clocks and the date arithmetic can represent."""


def wall_clock() -> float:
    """The one production seam for reading the wall clock."""
    return time.time()


def to_datetime(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def _date_text(moment: datetime, separator: str = "-") -> str:
    # strftime's %Y does not pad years below 1000 on glibc (`1-01-01`), which
    # would break the fixed-width RFC 3339 and occurrence-id forms.
    return f"{moment.year:04d}{separator}{moment.month:02d}{separator}{moment.day:02d}"


def format_instant(epoch: int | float | None) -> str | None:
    """Whole-second UTC RFC 3339 (`2026-12-01T09:00:00Z`) for instants."""
    if epoch is None:
        return None
    return _second_text(int(epoch)) + "Z"


@lru_cache(maxsize=256)
def _second_text(second: int) -> str:
    """`2026-12-01T09:00:00`: cached, since a burst formats one instant per
    run several times, and the event log one second per many lines."""
    moment = to_datetime(second)
    return _date_text(moment) + moment.strftime("T%H:%M:%S")


def format_event(epoch: float | None) -> str | None:
    """Millisecond UTC RFC 3339 for event times (admission, start, finish).

    Launch latency is measured in milliseconds, so event times keep them;
    instants (which are whole seconds by contract) use `format_instant`.
    """
    if epoch is None:
        return None
    moment = to_datetime(epoch)
    second = math.floor(epoch)
    if second % 60 != moment.second:
        second += 1  # rounded to the microsecond, it is the next second
    return f"{_second_text(second)}.{moment.microsecond // 1000:03d}Z"


def occurrence_id(schedule_id: str, instant: int) -> str:
    return f"{schedule_id}@{_compact_instant(instant)}"


@lru_cache(maxsize=256)
def _compact_instant(instant: int) -> str:
    moment = to_datetime(instant)
    return f"{_date_text(moment, '')}{moment.strftime('T%H%M%SZ')}"


def parse_instant(text: str) -> int:
    """Parse an RFC 3339 string that carries an offset; naive text is refused,
    and so is an instant outside years 1-9999 in UTC."""
    instant = parse_unchecked_instant(text)
    check_instant(instant, repr(text))
    return instant


def parse_unchecked_instant(text: str) -> int:
    """`parse_instant` without the range check, for callers that check it
    themselves with their own words."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError as exc:
        raise ValueError(f"not an RFC 3339 date-time: {text!r}") from exc
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset; add one, e.g. +00:00 or Z")
    return int(moment.timestamp() // 1)


def check_instant(instant: int, written: str) -> None:
    """ValueError unless `instant` lies in years 1-9999 once converted to UTC.

    A date-time can be valid where it is written and not in UTC:
    9999-12-31T23:00:00-05:00 is in the year 10000 in UTC.
    """
    if not MIN_INSTANT <= instant <= MAX_INSTANT:
        raise ValueError(
            f"{written} is outside the instants wfsched can represent: in UTC it must lie"
            f" from {format_instant(MIN_INSTANT)} to {format_instant(MAX_INSTANT)}"
        )


_DURATION = re.compile(r"([0-9]+)([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: object, *, bounded: bool = True) -> int:
    """Integer seconds or `<n>s|m|h|d`; anything else raises ValueError.

    `bounded=False` skips the MAX_DURATION check, for stored definitions
    only: earlier releases stored longer durations, which must still load
    (their users clamp them where a deadline is computed).
    """
    if isinstance(value, bool):
        raise ValueError("expected seconds or a duration like '90s', '5m', '2h', '1d'")
    seconds = None
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        seconds = value
    elif isinstance(value, str):
        match = _DURATION.fullmatch(value.strip())
        if match:
            # Cap the digits before int(): a 5,000-digit count is just "too long".
            digits = match.group(1).lstrip("0")[:20] or "0"
            seconds = int(digits) * _UNIT_SECONDS[match.group(2)]
    if seconds is None:
        raise ValueError(
            f"{value!r} is not a duration; use integer seconds or '<n>s', '<n>m', '<n>h', '<n>d'"
        )
    if bounded:
        check_duration(seconds, value)
    return seconds


def check_duration(seconds: float, written: object) -> None:
    """ValueError if `seconds` exceeds MAX_DURATION (3650d, ten years)."""
    if seconds > MAX_DURATION:
        raise ValueError(
            f"{written!r} is too long: at most {MAX_DURATION} seconds (3650d, ten years)"
        )


def format_duration(seconds: int) -> str:
    """The shortest exact `<n>d|h|m|s` spelling, so `get --toml` round-trips."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
