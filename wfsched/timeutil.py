"""UTC instants, RFC 3339 text and durations.

Everything stored or compared is a UTC instant in whole epoch seconds
(occurrence instants) or float epoch seconds (event times). Local datetimes
are only ever produced for display: two fold 01:30s compare equal locally.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], float]
"""A wall clock returning epoch seconds; injected wherever time is judged."""


def wall_clock() -> float:
    """The one production seam for reading the wall clock."""
    return time.time()


def to_datetime(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def format_instant(epoch: int | float | None) -> str | None:
    """Whole-second UTC RFC 3339 (`2026-12-01T09:00:00Z`) for instants."""
    if epoch is None:
        return None
    return to_datetime(int(epoch)).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_event(epoch: float | None) -> str | None:
    """Millisecond UTC RFC 3339 for event times (admission, start, finish).

    Launch latency is measured in milliseconds, so event times keep them;
    instants (which are whole seconds by contract) use `format_instant`.
    """
    if epoch is None:
        return None
    moment = to_datetime(epoch)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def occurrence_id(schedule_id: str, instant: int) -> str:
    return f"{schedule_id}@{to_datetime(instant).strftime('%Y%m%dT%H%M%SZ')}"


def parse_instant(text: str) -> int:
    """Parse an RFC 3339 string that carries an offset; naive text is refused."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("z", "Z"))
    except ValueError as exc:
        raise ValueError(f"not an RFC 3339 date-time: {text!r}") from exc
    if moment.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset; add one, e.g. +00:00 or Z")
    return int(moment.timestamp() // 1)


_DURATION = re.compile(r"^([0-9]+)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: object) -> int:
    """Integer seconds or `<n>s|m|h|d`; anything else raises ValueError."""
    if isinstance(value, bool):
        raise ValueError("expected seconds or a duration like '90s', '5m', '2h', '1d'")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("must not be negative")
        return value
    if isinstance(value, str):
        match = _DURATION.match(value.strip())
        if match:
            return int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    raise ValueError(
        f"{value!r} is not a duration; use integer seconds or '<n>s', '<n>m', '<n>h', '<n>d'"
    )


def format_duration(seconds: int) -> str:
    """The shortest exact `<n>d|h|m|s` spelling, so `get --toml` round-trips."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
