"""Errors the supervisor contained during its ticks, for the log and `status`.

A tick is a sequence of phases (ingest exits, answer requests, launch,
admit, notify failures, retention, liveness stamp). A store error or any
unexpected exception in one phase is recorded here and the supervisor goes
on with the next phase; every phase re-reads its work from the store (or
from its own retry list), so the next tick retries what failed. The counts
and the last error are published in the store's meta table (key
`tick_errors`, JSON) with the liveness stamp, which is how `wfsched status`
sees them from another process.

A resource fault (a full disk, a read-only remount, EIO, the database held
locked past the busy timeout, a PostgreSQL server restarted, unreachable or
out of disk, exhausted file descriptors or processes;
wfsched.store.resource_faults) is not counted as one more error per tick but opens a
fault *episode*: one log line when it starts and one when it ends (with its
duration), `status` shows it while it lasts, and meanwhile the supervisor
only retries a probe with backoff (FAULT_BACKOFF_FIRST doubling up to
FAULT_BACKOFF_MAX) instead of running every phase into the same error.

The same error repeating in one phase is logged once a minute (with how
many times it was seen since), not on every tick: a full disk must not turn
into one journal line per poll interval, while the count stays exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from wfsched.domain.timeutil import format_event

PHASES = (  # the names the supervisor's phases are counted under
    "leadership",
    "ingestion",
    "requests",
    "launch",
    "admission",
    "notification",
    "retention",
    "hosts",
    "metrics",
    "liveness",
    "next-due",
    "checkpoint",
    "watch",
)
META_KEY = "tick_errors"
REPEAT_LOG_INTERVAL = 60.0
FAULT_BACKOFF_FIRST = 0.5
FAULT_BACKOFF_MAX = 10.0
FAULT_KINDS = (
    "disk-full",
    "read-only",
    "io-error",
    "locked",
    "unreachable",
    "fd-limit",
    "process-limit",
    "no-memory",
)
"""Every kind of resource fault (a bounded set: the metrics label them by kind)."""
STORE_FAULTS = frozenset(
    {"disk-full", "read-only", "io-error", "locked", "unreachable", "fd-limit"}
)
"""Kinds that stop every phase but watching runs ("unreachable": a networked
store's server restarted, stopped or out of reach); "process-limit" and
"no-memory" hold launches only (the store is fine, admissions go on and the
runs wait to launch)."""


@dataclass
class Episode:
    """An open resource fault: what, since when, and when to probe again."""

    kind: str
    error: str
    phase: str
    since: float
    retry_at: float
    backoff: float = FAULT_BACKOFF_FIRST
    probes: int = 0
    where: str | None = None
    """The directory whose filesystem failed, if the error named one: the
    probe checks it too (run directories may be on their own filesystem,
    which the database's probe says nothing about)."""

    @property
    def holds_store(self) -> bool:
        return self.kind in STORE_FAULTS

    def failed_probe(self, error: str, now: float) -> None:
        self.error = error
        self.probes += 1
        self.backoff = min(FAULT_BACKOFF_MAX, self.backoff * 2)
        self.retry_at = now + self.backoff

    def public(self) -> dict[str, Any]:
        return {"kind": self.kind, "error": self.error, "since": self.since, "phase": self.phase}


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
    episode: Episode | None = None
    episodes: int = 0
    last_episode: dict[str, Any] | None = None
    """The last episode that ended: kind, error, since, ended, duration."""

    def open_episode(
        self, phase: str, kind: str, error: str, now: float, where: str | None = None
    ) -> Episode | None:
        """Count the fault; return the new episode, or None if one is open
        (the same episode goes on: its error is the latest one seen)."""
        self.counts[phase] = self.counts.get(phase, 0) + 1
        self.changed = True
        if self.episode is not None:
            self.episode.error = error
            self.episode.where = self.episode.where or where
            return None
        self.episodes += 1
        self.episode = Episode(kind, error, phase, now, now + FAULT_BACKOFF_FIRST, where=where)
        return self.episode

    def close_episode(self, now: float) -> Episode | None:
        episode, self.episode = self.episode, None
        if episode is not None:
            self.last_episode = {
                "kind": episode.kind,
                "error": episode.error,
                "since": episode.since,
                "ended": now,
                "duration": round(now - episode.since, 3),
            }
            self.changed = True
        return episode

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
        return json.dumps(
            {
                "counts": self.counts,
                "last": self.last,
                "episodes": self.episodes,
                "last_episode": self.last_episode,
            },
            sort_keys=True,
        )


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
    episodes = document.get("episodes")
    ended = document.get("last_episode")
    if isinstance(ended, dict):
        ended = {
            **ended,
            **{
                key: format_event(ended[key])
                for key in ("since", "ended")
                if isinstance(ended.get(key), int | float)
            },
        }
    else:
        ended = None
    return {
        "total": sum(counts.values()),
        "by_phase": counts,
        "last": last,
        "fault_episodes": episodes if isinstance(episodes, int) else 0,
        "last_fault": ended,
    }
