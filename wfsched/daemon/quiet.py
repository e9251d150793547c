"""Keeping the metrics threads off the GIL while the loop admits an instant.

The metrics listener and renderer are Python threads in the supervisor's
process. A scrape costs about a millisecond of Python (http.server parses
the request through the email package, a thread is started per request),
and while another thread runs Python the loop cannot: when it wakes from
epoll at a due instant, or comes back from each fsync, SQLite step or
socket call of the admission, it waits for the other thread to give up the
GIL, which CPython asks for only after its switch interval (5 ms), and on a
busy host the other thread may be preempted while holding it. Measured
before this existed (lightly loaded host): the launch latency bench with a
scraper every 100 ms had medians of 8.6 and 16.2 ms against 6.7 and 7.4 ms
without, and outliers of hundreds of ms.

So the loop says when it is about to be latency-bound, and the metrics
threads hold off then: `expect(due_in)` before each sleep names the next due
instant (or none). From LEAD seconds before it (which covers the supervisor's
own pre-wake, 20 ms before) until the loop's next `expect`, after the tick
that admitted and launched the instant and published its snapshot, `hold()`
waits. A scrape is then answered a few milliseconds late, which Prometheus
cannot tell from network delay; each hold lasts at most LONGEST, so a loop
stuck in a tick (or a long burst) still gets its /healthz answer (a request
is held at most twice: before its thread starts and before it is parsed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

LEAD = 0.1
"""Seconds before a due instant from which the metrics threads hold off: the
pre-wake's 20 ms, plus room for a scrape accepted just before, which on a
busy host can take tens of milliseconds to finish."""
LONGEST = 0.5
"""The longest one `hold()` waits, however long the admission takes."""


class Quiet:
    """The loop's announcement of its next due instant (loop thread), and a
    wait for the metrics threads while that instant is near (any thread)."""

    def __init__(
        self,
        monotonic: Callable[[], float] = time.monotonic,
        lead: float = LEAD,
        longest: float = LONGEST,
    ) -> None:
        self._monotonic = monotonic
        self.lead = lead
        self.longest = longest
        self._cond = threading.Condition()
        self._opens_at: float | None = None
        self.waiting = 0
        """Threads inside `hold()` now (read by tests)."""

    def expect(self, due_in: float | None) -> None:
        """Loop thread, before it sleeps: the next due instant is `due_in`
        seconds away, or None when the sleep ends without one (poll interval,
        woken early). Ends any hold that this moves out of the window."""
        opens_at = None if due_in is None else self._monotonic() + due_in - self.lead
        with self._cond:
            self._opens_at = opens_at
            self._cond.notify_all()

    def near(self) -> bool:
        """Whether the loop is within LEAD of a due instant or admitting it."""
        opens_at = self._opens_at
        return opens_at is not None and self._monotonic() >= opens_at

    def hold(self) -> None:
        """Return once the loop is not near a due instant, or after LONGEST
        seconds. Immediate (no lock) when it is not."""
        if not self.near():
            return
        deadline = self._monotonic() + self.longest
        with self._cond:
            self.waiting += 1
            try:
                while self.near():
                    left = deadline - self._monotonic()
                    if left <= 0:
                        return
                    self._cond.wait(left)
            finally:
                self.waiting -= 1
