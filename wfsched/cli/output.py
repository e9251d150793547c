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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from functools import cache
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, JustifyMethod
    from rich.table import Table
    from rich.text import Text

WIDE_LIMIT = 10_000
"""Wider than any table: the width columns are measured at (`--wide`)."""


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


def _plain_table(title: str | None) -> Table:
    from rich import box
    from rich.table import Table

    return Table(
        title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False
    )


def table(*columns: str, title: str | None = None) -> Table:
    """A field/value table (`get`, `status`, `runs show`); listings use `Listing`."""
    grid = _plain_table(title)
    for name in columns:
        grid.add_column(name, overflow="fold")
    return grid


def add_row(grid: Table, *cells: Any) -> None:
    """Cells as plain text: a command like `["a", "[b]"]` is not rich markup."""
    from rich.text import Text

    grid.add_row(*(Text(printable(text(cell))) for cell in cells))


def show(console: Console, renderable: Any) -> None:
    console.print(renderable)


@dataclass(frozen=True)
class Column:
    """One column of a listing that fits the terminal (`Listing`)."""

    header: str
    priority: int = 0
    """0: always shown; when the table does not fit the console, the column
    with the highest number goes first (`--wide` keeps them all)."""
    wrap: bool = False
    """Free text (a reason, a note) that may wrap between words. Every other
    column keeps each line of a cell whole: ids, states and times are never
    broken, they are dropped with their column instead."""
    justify: JustifyMethod = "left"


class Listing:
    """A table that fits the console by dropping columns, never by breaking words.

    rich shrinks an over-wide table by folding cells mid-word (`comple /
    ted`, `run-00001 / 9`). A listing instead measures what each column needs
    (the widest line of a kept-whole cell, the longest word of a wrapping
    one), asks rich how wide the table of those columns must be, and drops
    the lowest-priority column until it fits. The one wrapping column left
    then gets the rest of the width, so it wraps between words.
    """

    def __init__(self, *columns: Column, title: str | None = None) -> None:
        self.columns = columns
        self.title = title
        self.rows: list[tuple[Text, ...]] = []

    def add_row(self, *cells: Any) -> None:
        """Cells as plain text: a command like `["a", "[b]"]` is not rich markup.

        A tuple is a cell of several lines (a summary row's first and last
        instant): a line break is ours to make, never the cell text's.
        """
        from rich.text import Text

        self.rows.append(
            tuple(
                Text("\n".join(printable(text(line)) for line in cell))
                if isinstance(cell, tuple)
                else Text(printable(text(cell)))
                for cell in cells
            )
        )

    def show(self, console: Console, *, wide: bool = False) -> None:
        from rich.measure import Measurement

        options = console.options.update_width(WIDE_LIMIT)
        needs = [self._need(console, options, index) for index in range(len(self.columns))]
        kept = list(range(len(self.columns)))
        if wide:
            grid = self._table(kept, needs, rows=True)
            width = Measurement.get(console, options, grid).maximum
            saved = console.width
            console.width = max(saved, width)
            try:
                console.print(grid)
            finally:
                console.width = saved
            return
        while True:
            droppable = [index for index in kept if self.columns[index].priority > 0]
            probe = self._table(kept, needs, rows=False)
            if not droppable or Measurement.get(console, options, probe).minimum <= console.width:
                break
            kept.remove(max(droppable, key=lambda index: (self.columns[index].priority, index)))
        console.print(self._table(kept, needs, rows=True))

    def _need(self, console: Console, options: ConsoleOptions, index: int) -> int:
        from rich.measure import Measurement
        from rich.text import Text

        wrap = self.columns[index].wrap
        cells = [Text(self.columns[index].header), *(row[index] for row in self.rows)]
        measured = (Measurement.get(console, options, cell) for cell in cells)
        return max(each.minimum if wrap else each.maximum for each in measured)

    def _table(self, kept: list[int], needs: list[int], *, rows: bool) -> Table:
        grid = _plain_table(self.title)
        # Two spaces between columns, not three: a column more fits at 80.
        grid.collapse_padding = True
        for index in kept:
            column = self.columns[index]
            grid.add_column(
                column.header,
                justify=column.justify,
                no_wrap=not column.wrap,
                overflow="fold",
                min_width=needs[index],
            )
        if rows:
            for row in self.rows:
                grid.add_row(*(row[index] for index in kept))
        return grid


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
        if value is True:
            command.append(name)
        elif value is not None:
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


def event_text(event: str | None) -> str:
    """An event time (admission, start) to the second for a table (JSON keeps milliseconds)."""
    if event is None:
        return "-"
    return re.sub(r"\.\d+Z$", "Z", event)


def _epoch(instant: str) -> float:
    return datetime.fromisoformat(instant.replace("Z", "+00:00")).timestamp()


def span_text(seconds: float) -> str:
    """`3d 4h`, `2h 5m`, `4m 10s`, `12s`, `0.4s`: a span at a glance."""
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f}s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
    shown = [f"{value}{unit}" for value, unit in parts if value][:2]
    return " ".join(shown) or "0s"


def left_text(instant: str | None, now: float) -> str:
    """Time until `instant`, as `systemctl list-timers` shows LEFT; an
    instant already passed (no supervisor took it yet) is `overdue 5m`."""
    if instant is None:
        return "-"
    left = _epoch(instant) - now
    if left < 0:
        return f"overdue {span_text(int(-left))}"
    return span_text(int(left))


def passed_text(event: str | None, now: float) -> str:
    """Time since `event`, as `systemctl list-timers` shows PASSED: `16m ago`."""
    if event is None:
        return "-"
    return f"{span_text(int(max(0.0, now - _epoch(event))))} ago"


def run_duration_text(started: str | None, finished: str | None, now: float) -> str:
    """How long a run or attempt ran; one still running shows the time so far."""
    if started is None:
        return "-"
    end = _epoch(finished) if finished is not None else now
    return span_text(max(0.0, round(end - _epoch(started), 1)))
