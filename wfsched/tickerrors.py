"""Errors the supervisor contained during its ticks, for the log and `status`.

A tick is a sequence of phases (ingest exits, answer requests, launch,
admit, notify failures, retention, liveness stamp). A store error or any
unexpected exception in one phase is recorded here and the supervisor goes
on with the next phase; every phase re-reads its work from the store (or
from its own retry list), so the next tick retries what failed. The counts
and the last error are published in the store's meta table (key
`tick_errors`, JSON) with the liveness stamp, which is how `wfsched status`
sees them from another process.

The same error repeating in one phase is logged once a minute (with how
many times it was seen since), not on every tick: a full disk must not turn
into one journal line per poll interval, while the count stays exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from wfsched.timeutil import format_event

PHASES = (  # the names the supervisor's phases are counted under
    "ingestion",
    "requests",
    "launch",
    "admission",
    "notification",
    "retention",
    "metrics",
    "liveness",
    "next-due",
)
META_KEY = "tick_errors"
REPEAT_LOG_INTERVAL = 60.0


def describe(exc: BaseException) -> str:
    """The error in words, for an operator: its message, never just a class."""
    text = " ".join(str(exc).split())
    return text or f"unexpected {type(exc).__name__} without a message"


@dataclass
class TickErrors:
    """Per-phase counts since the supervisor started, and the last error."""

    counts: dict[str, int] = field(default_factory=dict)
    last: dict[str, Any] | None = None
    _logged: dict[str, tuple[str, float, int]] = field(default_factory=dict)
    """phase -> (message, when last logged, occurrences since)."""
    changed: bool = False

    def record(self, phase: str, exc: BaseException, context: dict[str, Any], now: float) -> int:
        """Count the error; return how many identical ones to report in a log
        line now (0: stay quiet, it was logged less than a minute ago)."""
        message = describe(exc)
        self.counts[phase] = self.counts.get(phase, 0) + 1
        about = {key: value for key, value in context.items() if value is not None}
        self.last = {"phase": phase, "at": now, "error": message, **about}
        self.changed = True
        previous = self._logged.get(phase)
        if previous is not None and previous[0] == message:
            _, logged_at, since = previous
            if now - logged_at < REPEAT_LOG_INTERVAL:
                self._logged[phase] = (message, logged_at, since + 1)
                return 0
            self._logged[phase] = (message, now, 0)
            return since + 1
        self._logged[phase] = (message, now, 0)
        return 1

    def to_meta(self) -> str:
        return json.dumps({"counts": self.counts, "last": self.last}, sort_keys=True)


def published(text: str | None) -> dict[str, Any]:
    """The `errors` object of `status` from the meta value (garbled: none)."""
    try:
        document = json.loads(text) if text else {}
    except ValueError:
        document = {}
    if not isinstance(document, dict):
        document = {}
    raw_counts = document.get("counts")
    counts = (
        {str(k): int(v) for k, v in raw_counts.items() if isinstance(v, int)}
        if isinstance(raw_counts, dict)
        else {}
    )
    last = document.get("last")
    if isinstance(last, dict) and isinstance(last.get("at"), int | float):
        last = {**last, "at": format_event(last["at"])}
    else:
        last = None
    return {"total": sum(counts.values()), "by_phase": counts, "last": last}
