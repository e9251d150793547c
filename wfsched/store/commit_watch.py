"""A file descriptor that becomes readable when a SQLite store is written.

A commit to a SQLite store in WAL mode appends to `wfsched.db-wal` (a
checkpoint writes `wfsched.db`), and WAL mode only works between processes
of one host, so every writer is local and the kernel sees every commit.
inotify on the store's directory turns that into an event an idle
supervisor can sleep on in epoll: it then wakes when an operator's command
commits instead of polling for it every poll interval.

An event only says "look": the store's change counter (`PRAGMA
data_version`) decides whether another connection committed. The watch
also fires on the supervisor's own writes (drained before it sleeps) and on
other files of the directory (a spare look). Without inotify (another
kernel, no watches left) there is no watch and the supervisor polls.

Python's standard library has no inotify binding and the package takes no
new dependency for two system calls: they are called through ctypes,
imported when a supervisor opens the watch (no other command pays for it).
"""

from __future__ import annotations

import os
from pathlib import Path

IN_MODIFY = 0x002
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
WATCHED = IN_MODIFY | IN_MOVED_TO | IN_CREATE
"""A file of the directory written, created or renamed into it."""


class CommitWatch:
    """inotify on one directory; `fileno()` for epoll, `drain()` to re-arm."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def open(cls, directory: Path) -> CommitWatch | None:
        """The watch, or None where inotify is not to be had."""
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            init, add = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError):
            return None
        fd = init(os.O_NONBLOCK | os.O_CLOEXEC)  # IN_NONBLOCK, IN_CLOEXEC
        if fd < 0:
            return None
        if add(fd, os.fsencode(directory), WATCHED) < 0:
            os.close(fd)
            return None
        return cls(fd)

    def fileno(self) -> int:
        return self._fd

    def drain(self) -> bool:
        """Read every pending event (the watch is readable until then);
        True if there was any."""
        seen = False
        while True:
            try:
                if not os.read(self._fd, 4096):
                    return seen
            except BlockingIOError:
                return seen
            seen = True

    def close(self) -> None:
        os.close(self._fd)
