"""Fault injection for the crash tests: kill the supervisor at a named point.

The supervisor takes a `fault` callable (a no-op in production). The CLI
builds one from `WFSCHED_FAULT=point[:N]` so a test can run the real daemon
in a subprocess and have it SIGKILL itself right at a persistence boundary
(the N-th time the point is reached, default the first).
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
    "after-attempt-mark",
    "after-spawn",
    "before-ingest",
    "after-ingest",
    "before-resume-mark",
    "after-resume-mark",
)


def no_fault(point: str) -> None:
    """Production: boundaries are just boundaries."""


def kill_at(spec: str) -> FaultHook:
    point, _, nth = spec.partition(":")
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; one of {', '.join(POINTS)}")
    remaining = [int(nth) if nth else 1]

    def hook(reached: str) -> None:
        if reached != point:
            return
        remaining[0] -= 1
        if remaining[0] == 0:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook
