"""Who owns a store: `supervisor.lock`, an OS lock held by the process.

filelock takes an flock on the file; the kernel drops it when the process
dies, so there is no PID file or lease to go stale. `holder()` answers "is a
supervisor running?" without taking the lock (taking it, even briefly, could
make a starting supervisor fail), by reading the kernel's lock table.
"""

from __future__ import annotations

from pathlib import Path

from filelock import FileLock, Timeout

from wfsched.errors import ConflictError, StoreError


class Ownership:
    """The held supervisor lock, released last on shutdown."""

    def __init__(self, lock_path: Path) -> None:
        self.lock_path = lock_path
        self._lock = FileLock(
            str(lock_path), timeout=0, mode=0o600, fallback_to_soft=False, thread_local=False
        )

    def acquire(self) -> None:
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            pid = holder(self.lock_path)
            who = f" (pid {pid})" if pid else ""
            raise ConflictError(
                f"{self.lock_path.parent}: another supervisor{who} owns this store;"
                " stop it first or use another --store"
            ) from None
        except OSError as exc:
            raise StoreError(
                f"{self.lock_path}: cannot lock ({exc.strerror or exc}); wfsched needs a"
                " file system with flock support for its store"
            ) from exc

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release()


def holder(lock_path: Path) -> int | None:
    """The pid holding an flock on `lock_path`, from /proc/locks; None if free."""
    try:
        inode = lock_path.stat().st_ino
        with open("/proc/locks") as table:
            lines = table.read().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:02:5678 0 EOF" (blocked waiters carry "->")
        if len(fields) < 6 or fields[1] != "FLOCK" or "->" in fields[1:3]:
            continue
        device_inode = fields[5].split(":")
        if len(device_inode) == 3 and device_inode[2] == str(inode):
            return int(fields[4])
    return None
