"""How the supervisor sleeps between ticks: in epoll until the next due
instant, woken at once by a run's exit or a signal, with a short stop just
before a due instant.

`early` seconds (20 ms) before a due instant the supervisor wakes and the
caller's `prewake` runs (the supervisor's runs the instant's tick, holding
its first admission until the instant: docs/architecture.md, "A held
admission"); then, if time is left, it sleeps in epoll again, to within a
millisecond or two of the instant, then in a plain sleep (a nanosecond
timer) to the instant itself.

It used to spin through what was left of the 20 ms instead of sleeping. Measured once
the keeper made the launch short: the spin cost about 20 ms of CPU per due
instant on an idle host (5.6 ms median under load, where a spinning process
is also preempted and woke later: median 6.0 ms, max 22 ms after the
instant), while the second epoll sleep costs 0.1 ms and wakes 0.2 ms late
(median; max 15.6 ms under the same load). epoll's timeout has millisecond
resolution, rounded up: woken by epoll alone, the tick began up to a
millisecond after the instant (1.0 ms median, measured), a tenth of the
whole launch; the last milliseconds in a plain sleep cost no CPU either.
"""

from __future__ import annotations

import contextlib
import math
import os
import selectors
import signal
import time
from collections.abc import Callable

WAKE_EARLY = 0.02
"""Seconds before a due instant at which the caller's prewake runs."""


class Waiter:
    """One epoll set: the watched fds (the launcher's exit pipe) and a pipe
    that `signal.set_wakeup_fd` writes to, so a signal ends any sleep.

    Only the main thread may create it (a wakeup fd is process-wide); close
    it before the process handles signals without it.
    """

    def __init__(
        self,
        early: float = WAKE_EARLY,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.early = early
        self._monotonic = monotonic
        self._sleep = sleep
        self._selector = selectors.DefaultSelector()
        self._wakeup_read, self._wakeup_write = os.pipe()
        os.set_blocking(self._wakeup_read, False)
        os.set_blocking(self._wakeup_write, False)
        signal.set_wakeup_fd(self._wakeup_write, warn_on_full_buffer=False)
        self._selector.register(self._wakeup_read, selectors.EVENT_READ)
        self.overslept = 0.0
        """How much later than asked the last wait returned (negative: early)."""

    def watch(self, fd: int, drain: Callable[[], object] | None = None) -> None:
        """Wake when `fd` is readable. With `drain`, the wait that it woke
        calls it (an fd that stays readable until read, like the store's
        commit watch, would otherwise end every later wait at once)."""
        self._selector.register(fd, selectors.EVENT_READ, drain)

    def unwatch(self, fd: int) -> None:
        """Stop watching `fd` (before it is closed); unknown fds are ignored."""
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(fd)

    def wait(self, timeout: float, stopped: Callable[[], bool]) -> bool:
        """Sleep up to `timeout` seconds; True when an fd or a signal woke us."""
        self.overslept = 0.0
        if stopped() or timeout <= 0:
            return False
        started = self._monotonic()
        events = self._selector.select(timeout)
        self.overslept = self._monotonic() - started - timeout
        for key, _ in events:
            if key.fd == self._wakeup_read:
                with contextlib.suppress(BlockingIOError):
                    os.read(key.fd, 512)
            elif key.data is not None:
                key.data()
        return bool(events)

    def wait_until_due(
        self,
        timeout: float,
        due: bool,
        stopped: Callable[[], bool],
        prewake: Callable[[], None],
    ) -> bool:
        """`wait`, but when `due` (the timeout ends at a due instant) wake
        `early` seconds before it for `prewake()`, then sleep to the
        instant, less what epoll overslept the first time. True when woken
        early by an fd or a signal."""
        if not due:
            return self.wait(timeout, stopped)
        early = min(timeout, self.early)
        if early <= 0:
            return self._wait_until(self._monotonic() + timeout, stopped)
        woken = self.wait(timeout - early, stopped)
        if woken or stopped():
            return woken
        deadline = self._monotonic() + early - max(0.0, self.overslept)
        prewake()
        return self._wait_until(deadline, stopped)

    def _wait_until(self, deadline: float, stopped: Callable[[], bool]) -> bool:
        """`wait` until the monotonic `deadline`, to the microsecond: epoll
        (whole milliseconds, rounded up: up to 1 ms late) for all but the
        last one or two milliseconds, then a plain sleep (nanosecond timer)
        for the rest. An fd or a signal ends the epoll part; the last
        milliseconds are not interrupted (an exit or a stop is then handled
        by the tick that follows at once)."""
        coarse = (math.floor((deadline - self._monotonic()) * 1e3 + 1e-6) - 1) / 1e3
        if coarse > 0 and self.wait(coarse, stopped):
            return True
        rest = deadline - self._monotonic()
        if rest > 0 and not stopped():
            self._sleep(rest)
        return False

    def close(self) -> None:
        """Unhook the signal wakeup, then release the pipe and the epoll set."""
        signal.set_wakeup_fd(-1)
        self._selector.close()
        os.close(self._wakeup_read)
        os.close(self._wakeup_write)
