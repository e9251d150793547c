"""Stop signals caught from the first instructions of `wfsched supervise`.

A service manager may send SIGTERM at any moment after it starts the unit,
and importing the CLI alone takes a good part of a second on a loaded host:
until a handler is in place, that SIGTERM kills the process (status 143,
not the clean exit a stop asks for). So the
program's entry point arms this before any heavy import when the command
line may be `supervise`; the supervisor reads `caught()` once it has its
own handlers. Any other command disarms it as soon as click has resolved
the command, and a signal caught meanwhile is delivered again, so it acts
exactly as it would have.

Standard library only, and no work in the handler: it appends to a list.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_caught: list[int] = []
_previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}


def _catch(signum: int, frame: FrameType | None) -> None:
    _caught.append(signum)


def arm(args: Sequence[str]) -> None:
    if "supervise" not in args or _previous:
        return
    for signum in STOP_SIGNALS:
        _previous[signum] = signal.signal(signum, _catch)


def caught() -> bool:
    return bool(_caught)


def disarm() -> None:
    """Not `supervise` after all: the previous handlers back, and what was
    caught meanwhile delivered to them."""
    if not _previous:
        return
    for signum, handler in _previous.items():
        signal.signal(signum, handler)
    _previous.clear()
    pending, _caught[:] = list(_caught), []
    for signum in pending:
        os.kill(os.getpid(), signum)
