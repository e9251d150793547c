"""One line per supervisor event on stderr: human by default, JSON for collectors.

Idle ticks log nothing; only things an operator would want in a journal do.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from wfsched.domain.timeutil import Clock, format_event, wall_clock

_JSON = json.JSONEncoder(default=str)
"""`json.dumps(..., default=str)` builds an encoder per call; a burst logs
three lines per run."""


class EventLog:
    def __init__(
        self, fmt: str = "human", stream: TextIO | None = None, clock: Clock = wall_clock
    ) -> None:
        self.fmt = fmt
        self.stream = stream or sys.stderr
        self.clock = clock
        self.dropped = 0
        """Lines that could not be written (a closed pipe, a full disk)."""

    def __call__(self, event: str, **fields: Any) -> None:
        at = format_event(self.clock())
        fields = {key: value for key, value in fields.items() if value is not None}
        if self.fmt == "json":
            line = _JSON.encode({"time": at, "event": event, **fields})
        else:
            details = " ".join(f"{key}={_human(value)}" for key, value in fields.items())
            line = f"{at} {event}" + (f" {details}" if details else "")
        # The journal is a side path: a broken stderr (journald restarted, a
        # closed pipe) must never stop the supervisor, whose facts are in the
        # store. The line is dropped and counted.
        try:
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            self.dropped += 1


def _human(value: Any) -> str:
    # Quoted (JSON escapes) when it has a space, is empty, or holds a control
    # character: a reason or command must never drive the terminal.
    text = str(value)
    return json.dumps(text) if (" " in text or not text or not text.isprintable()) else text
