"""Who leads: the supervisor's side of the leader lease (PostgreSQL stores).

A thread of its own, on a connection of its own (`LeaseChannel`), so a long
tick never delays a renewal:
- leading, it renews the lease every `renew` seconds; a renewal the database
  refuses (the lease expired or another epoch holds it) deposes it at once;
- standing by, it takes the lease as soon as it is released or expires,
  sleeping until the expiry the database states (at most `renew`), and woken
  at once by the NOTIFY a releasing leader sends;
- either way it writes this host's heartbeat (database time, and this host's
  clock offset from the database's).

The main loop reads `holds()` before admitting or launching: the epoch, and
a renewal less than one lease ago by this process's monotonic clock (a
process stopped past its lease, SIGSTOP or a stalled VM, finds its own
deadline passed before the database tells it). `holds()` is a hint that
stops work early, never the guarantee: every leader transaction is fenced
in the database (`Store.fence`).

A SQLite store has no channel: its supervisor always leads (its lock file
fences it) and nothing here runs.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Protocol

from wfsched.domain.timeutil import Clock, wall_clock
from wfsched.errors import StoreConnectionLost, StoreError
from wfsched.store.lease import LeaseRow

RETRY_AFTER_ERROR = 0.25
"""Seconds before the thread tries its channel again after an error."""
EXPIRY_MARGIN = 0.01
"""A standby tries to take the lease this long after the expiry it read."""


class LeaseChannel(Protocol):
    """The store's lease statements (`wfsched.store.pg_lease.PgLeaseChannel`)."""

    def take(self, lease: float) -> int | None: ...

    def renew(self, epoch: int, lease: float) -> bool: ...

    def release(self, epoch: int) -> None: ...

    def read(self) -> LeaseRow | None: ...

    def wait(self, timeout: float) -> bool: ...

    def heartbeat(self, started_at: float, now: float, executing: int) -> None: ...

    def stopped(self) -> None: ...

    def close(self) -> None: ...


class Leadership:
    """The lease state the main loop acts on, kept by a background thread."""

    def __init__(
        self,
        channel: LeaseChannel | None,
        lease: float,
        renew: float,
        *,
        clock: Clock = wall_clock,
        executing: Callable[[], int] = lambda: 0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.channel = channel
        self.lease = lease
        self.renew = renew
        self.clock = clock
        self.executing = executing
        self.monotonic = monotonic
        self.started_at = clock()
        self._lock = threading.Lock()
        self._epoch: int | None = None
        self._renewed = 0.0
        """monotonic() just before the last renewal the database accepted."""
        self._stop = threading.Event()
        self._release = False
        self._thread: threading.Thread | None = None
        self.saw_leader = False
        """Another supervisor's live lease was seen since this one started:
        whatever it takes over next is a handover, not a startup."""
        self.deposed = 0
        """Renewals the database refused (each one deposed this supervisor)."""
        self.error: str | None = None
        """The channel's last error (cleared by the next success)."""
        self._wake_read, self._wake_write = -1, -1
        if channel is not None:
            self._wake_read, self._wake_write = os.pipe()
            os.set_blocking(self._wake_read, False)
            os.set_blocking(self._wake_write, False)

    @property
    def fenced(self) -> bool:
        """Whether leadership is a lease (PostgreSQL) rather than a lock file."""
        return self.channel is not None

    @property
    def wake_fd(self) -> int:
        """Readable when the epoch changed: the main loop's waiter watches it."""
        return self._wake_read

    def epoch(self) -> int | None:
        with self._lock:
            return self._epoch

    def holds(self) -> tuple[bool, int | None]:
        """(leading, epoch): the lease held and renewed within one lease by
        this process's monotonic clock. Always leading without a channel."""
        if self.channel is None:
            return True, None
        with self._lock:
            epoch, renewed = self._epoch, self._renewed
        if epoch is None or self.monotonic() - renewed >= self.lease:
            return False, epoch
        return True, epoch

    def drain_wake(self) -> None:
        if self._wake_read >= 0:
            with suppress(BlockingIOError):
                os.read(self._wake_read, 512)

    def start(self) -> None:
        if self.channel is None:
            return
        self._thread = threading.Thread(target=self._run, name="wfsched-lease", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool) -> None:
        """End the thread; with `release`, a held lease is given up first thing
        (the standbys are notified and one leads within a second)."""
        self._release = release
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.renew + 5)
            self._thread = None
        if self.channel is not None:
            self.channel.close()

    def close(self) -> None:
        if self._wake_read >= 0:
            os.close(self._wake_read)
            os.close(self._wake_write)
            self._wake_read = self._wake_write = -1

    # -- the thread ----------------------------------------------------------------

    def _run(self) -> None:
        assert self.channel is not None
        channel = self.channel
        while not self._stop.is_set():
            try:
                pause = self._stand_by(channel) if self.epoch() is None else self._keep(channel)
                channel.heartbeat(self.started_at, self.clock(), self.executing())
                self.error = None
            except Exception as exc:  # the thread must outlive any error: it is retried
                self.error = str(exc) or type(exc).__name__
                pause = RETRY_AFTER_ERROR
            if self.epoch() is not None or self.error is not None:
                if self._stop.wait(pause):
                    break
            elif pause > 0:
                try:
                    channel.wait(pause)  # a released lease wakes it at once
                except (StoreConnectionLost, StoreError) as exc:
                    self.error = str(exc)
        self._finish(channel)

    def _stand_by(self, channel: LeaseChannel) -> float:
        """Take the lease if it is free; else how long until it may be."""
        current = channel.read()
        if current is not None and current.live:
            if current.pid != os.getpid():
                self.saw_leader = True
            return max(0.0, min(self.renew, current.expires_at - current.db_now + EXPIRY_MARGIN))
        before = self.monotonic()
        epoch = channel.take(self.lease)
        if epoch is not None:
            self._set(epoch, before)
        return self.renew

    def _keep(self, channel: LeaseChannel) -> float:
        epoch = self.epoch()
        assert epoch is not None
        before = self.monotonic()
        if channel.renew(epoch, self.lease):
            with self._lock:
                self._renewed = before
            return self.renew
        self._set(None, 0.0)  # deposed: the database refused the renewal
        self.deposed += 1
        return 0.0

    def _set(self, epoch: int | None, renewed: float) -> None:
        with self._lock:
            self._epoch, self._renewed = epoch, renewed
        with suppress(BlockingIOError):
            os.write(self._wake_write, b"l")

    def _finish(self, channel: LeaseChannel) -> None:
        epoch = self.epoch()
        if self._release and epoch is not None:
            self._set(None, 0.0)
            with suppress(StoreConnectionLost, StoreError):
                channel.release(epoch)
        with suppress(StoreConnectionLost, StoreError):
            channel.stopped()
