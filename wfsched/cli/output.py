"""The one output layer: documented JSON for machines, rich tables for people.

`--json` prints the view dicts of `wfsched.api.views` as they are (documented
field order, indent 2) and never touches rich, so scripted calls stay fast.
Human output goes through the injectable console of `CliState`; times are
shown in UTC and in the schedule's own zone.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from functools import cache
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table


def print_json(obj: Any) -> None:
    """`obj` as JSON, keys in the documented order (never sorted), indent 2."""
    click.echo(json.dumps(obj, indent=2, ensure_ascii=False))


def say(message: str) -> None:
    """One plain line on stdout (confirmations such as `created x (revision 1)`).

    Operator text in it (reasons, descriptions) is escaped: see `printable`.
    """
    click.echo(printable(message))


class Lines:
    """Plain stdout lines written together (`say` each, then `flush`).

    click.echo flushes on every call: `apply` prints a line per schedule,
    and 10,000 writes cost more than the rest of an unchanged apply's
    output. Flush before writing to stderr, so a terminal that shows both
    keeps their order.
    """

    def __init__(self) -> None:
        self._lines: list[str] = []

    def say(self, message: str) -> None:
        self._lines.append(printable(message))

    def flush(self) -> None:
        if self._lines:
            click.echo("\n".join(self._lines))
            self._lines.clear()


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_BIDI = frozenset(chr(code) for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A)))


def printable(value: str) -> str:
    """`value` with control characters escaped (`\\x1b`, `\\n`, `\\u202e`).

    Descriptions, commands, reasons and notes are written by operators and
    by jobs; printed raw, an escape sequence could rewrite the terminal
    (hide a line, fake a state, set the title). JSON output stays exact.
    """
    if value.isprintable():
        return value
    out = []
    for char in value:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif char in _BIDI or unicodedata.category(char) == "Cc":
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def advise(source: str, advice: Iterable[tuple[str, str]]) -> None:
    """Print a definition's warnings (`wfsched.domain.advice`) on stderr,
    one line each, named like definition errors: `FILE: key.path: what`."""
    for path, message in advice:
        click.echo(printable(f"wfsched: warning: {source}: {path}: {message}"), err=True)


def still_blocked(schedule_id: str, reason: str) -> None:
    """The stderr note after an update of a blocked schedule: the update
    succeeded, and the block (which only `resume` clears) is still there."""
    click.echo(
        printable(
            f"wfsched: note: {schedule_id} is still blocked ({' '.join(reason.split())});"
            f" only `wfsched resume {schedule_id}` clears a block"
        ),
        err=True,
    )


def table(*columns: str, title: str | None = None) -> Table:
    from rich import box
    from rich.table import Table

    grid = Table(
        title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False
    )
    for name in columns:
        grid.add_column(name, overflow="fold")
    return grid


def add_row(grid: Table, *cells: Any) -> None:
    """Cells as plain text: a command like `["a", "[b]"]` is not rich markup."""
    from rich.text import Text

    grid.add_row(*(Text(printable(text(cell))) for cell in cells))


def show(console: Console, renderable: Any) -> None:
    console.print(renderable)


def next_page(*words: str, options: dict[str, Any], cursor: str) -> None:
    """Print the command for the next page: the same query (every filter and
    the limit that were given, and `--store` when it was given on the
    command line), plus `--page CURSOR`."""
    import shlex

    command = ["wfsched"]
    root = click.get_current_context().find_root()
    if root.get_parameter_source("store") is click.core.ParameterSource.COMMANDLINE:
        command += ["--store", str(root.params["store"])]
    command += words
    for name, value in options.items():
        if value is not None:
            command += [name, str(value)]
    command += ["--page", cursor]
    say(f"next page: {shlex.join(command)}")


# ------------------------------------------------------------------ times


@cache
def _zone(name: str) -> tzinfo:
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)


def schedule_zone(view: dict[str, Any]) -> tzinfo:
    """The zone a schedule's times are shown in: the schedule's, not the operator's.

    A cron schedule has its IANA `timezone`; a one-shot's zone is the offset
    written in `at` (the offset is the zone). The schedule view carries it
    as `zone`.
    """
    name = view.get("zone")
    if not isinstance(name, str) or name == "UTC":
        return UTC
    match = re.fullmatch(r"([+-])(\d{2}):(\d{2})", name)
    if match:
        sign = -1 if match.group(1) == "-" else 1
        minutes = int(match.group(2)) * 60 + int(match.group(3))
        return timezone(sign * timedelta(minutes=minutes))
    try:
        return _zone(name)
    except (ValueError, OSError):
        return UTC


def zone_label(view: dict[str, Any]) -> str:
    return str(view.get("zone") or "UTC")


def local_text(instant: str | None, zone: tzinfo) -> str:
    """An RFC 3339 UTC string shown as local wall time with offset and zone name.

    Display only: local values are never compared (the two 01:30s of a fall
    fold are equal as local datetimes).
    """
    if instant is None:
        return "-"
    try:
        moment = datetime.fromisoformat(instant.replace("Z", "+00:00"))
    except ValueError:
        return instant
    local = moment.astimezone(zone)
    offset = local.utcoffset()
    clock = "%H:%M:%S" if local.second else "%H:%M"
    text = local.strftime(f"%Y-%m-%d {clock}")
    if offset is not None:
        text += f" {_offset_text(offset.total_seconds())}"
    name = local.tzname()
    if name and not name.startswith(("UTC+", "UTC-", "+", "-")):
        text += f" ({name})"
    return text


def utc_text(instant: str | None) -> str:
    return instant if instant is not None else "-"


def _offset_text(seconds: float) -> str:
    sign = "-" if seconds < 0 else "+"
    whole = abs(int(seconds))
    return f"{sign}{whole // 3600:02d}:{whole % 3600 // 60:02d}"


def duration_text(seconds: Any) -> str | None:
    """A duration for people: `10s`, `5m`, `2h`, `1d` (JSON keeps seconds)."""
    if seconds is None or isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return seconds if seconds is None else str(seconds)
    from wfsched.domain.timeutil import format_duration

    if seconds != int(seconds):
        return f"{seconds:g}s"
    return format_duration(int(seconds))


def trigger_text(trigger: dict[str, Any]) -> str:
    if "cron" in trigger:
        return str(trigger["cron"])
    return f"at {trigger.get('at')}"


def text(value: Any) -> str:
    """A cell: None is `-`, lists and tables are compact JSON."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
