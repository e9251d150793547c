"""Ctrl-C around a command's commit: the operator is told what was committed.

A Ctrl-C that lands while a command writes either rolls its transaction back
(nothing was written) or comes after the commit; in between it must not
land, or the command could not say which. `Interrupts.hold()` defers SIGINT
from the last step of the transaction until the command has noted what it
committed (`CliState.interrupted`); `release()` then delivers a deferred
Ctrl-C as the KeyboardInterrupt it would have been, and the error edge
prints the note instead of a bare `aborted`.

Only the main thread can set signal handlers; elsewhere (never in the CLI)
holding is a no-op.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any


class Interrupts:
    def __init__(self) -> None:
        self._previous: Any = None
        self._held = False
        self._pending = False

    def hold(self) -> None:
        if self._held or threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.signal(signal.SIGINT, self._defer)
        self._held = True

    def _defer(self, signum: int, frame: FrameType | None) -> None:
        self._pending = True

    def release(self) -> None:
        if not self._held:
            return
        signal.signal(signal.SIGINT, self._previous)
        self._held = False
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt
