"""How the web view writes times and spans: every time carries its zone.

Instants are shown in UTC (`2026-12-08 01:15:00 UTC`) and, for a schedule,
also in its own zone; the page's script adds a countdown from the
`data-epoch` attribute, so the server never guesses the reader's zone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from wfsched.domain.timeutil import parse_unchecked_instant


def epoch_of(text: str | None) -> float | None:
    """An instant as the views print it (`...Z`, maybe with fractions) -> epoch seconds."""
    if not text:
        return None
    whole, dot, rest = text.partition(".")
    if not dot:
        return float(parse_unchecked_instant(text))
    return parse_unchecked_instant(whole + "Z") + float("0." + rest.rstrip("Z"))


def utc_text(epoch: float | None) -> str:
    if epoch is None:
        return "—"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def zone_text(epoch: float | None, zone: str | None) -> str | None:
    """The instant in `zone` (an IANA name) with its abbreviation; None for
    UTC or a zone this host cannot resolve (the UTC text is shown anyway)."""
    if epoch is None or not zone or zone == "UTC" or zone.startswith(("+", "-")):
        return None
    try:
        local = datetime.fromtimestamp(epoch, ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return local.strftime("%Y-%m-%d %H:%M:%S %Z") + f" ({zone})"


def span_text(seconds: float | None) -> str:
    """A duration: `850 ms`, `42.0 s`, `3 min 05 s`, `2 h 07 min`."""
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
