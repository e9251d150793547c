"""Fault injection for the crash tests: kill the supervisor, or its launcher,
at a named point.

The supervisor takes a `fault` callable (a no-op in production). The CLI
builds one from `WFSCHED_FAULT=point[:N]` so a test can run the real daemon
in a subprocess and have it SIGKILL itself right at a persistence boundary
(the N-th time the point is reached, default the first).

`WFSCHED_FAULT=point[:N]:raise` raises `InjectedFault` there instead (the
N-th time only): a stand-in for a store error (a full disk, a locked
database) that the supervisor must contain, and retry, without dying.

`WFSCHED_FAULT=point[:N]:stop` makes the supervisor SIGSTOP itself there
(the N-th time only), so a test can do something to the world at exactly
that moment (restart the database mid-admission) and then SIGCONT it.

The `keeper-*` points are reached in the run keeper (the first one the
supervisor starts; its replacements get no fault), in kill mode only.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

FaultHook = Callable[[str], None]

POINTS = (
    "before-admission-commit",
    "after-admission-commit",
    "after-run-dir",
    "admission-held",
    "after-attempt-mark",
    "after-spawn",
    "before-ingest",
    "after-ingest",
    "before-resume-mark",
    "after-resume-mark",
    "before-notify",
    # In the run keeper: around the started record and the spawn of a
    # command, after the reply, and around a batch of exit records (before
    # it, after each record's rename, after the whole batch is on disk).
    "keeper-before-started",
    "keeper-after-started",
    "keeper-after-fork",
    "keeper-after-spawn",
    "keeper-after-reply",
    "keeper-before-exit-record",
    "keeper-exit-record-renamed",
    "keeper-after-exit-record",
)


def no_fault(point: str) -> None:
    """Production: boundaries are just boundaries."""


class InjectedFault(Exception):
    """Raised at a fault point in `raise` mode."""


def fault_at(spec: str) -> FaultHook:
    """The hook for `point[:N]` (SIGKILL), `point[:N]:raise` or `point[:N]:stop`."""
    point, *rest = spec.split(":")
    mode = rest.pop() if rest and rest[-1] in ("raise", "stop") else "kill"
    if point not in POINTS or len(rest) > 1 or (rest and not rest[0].isdigit()):
        raise ValueError(
            f"bad fault {spec!r}; point[:N][:raise|:stop] with point one of {', '.join(POINTS)}"
        )
    remaining = [int(rest[0]) if rest else 1]

    def hook(reached: str) -> None:
        if reached != point:
            return
        remaining[0] -= 1
        if remaining[0] != 0:
            return
        if mode == "raise":
            raise InjectedFault(f"injected fault at {point}")
        os.kill(os.getpid(), signal.SIGSTOP if mode == "stop" else signal.SIGKILL)

    return hook
