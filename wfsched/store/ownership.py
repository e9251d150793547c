"""Who owns a store: `supervisor.lock`, an OS lock held by the process.

An flock on the file: the kernel drops it when the process dies, so there is
no PID file or lease to go stale. `holder()` answers "is a supervisor
running?" without taking the lock (taking it, even briefly, could make a
starting supervisor fail), by reading the kernel's lock table.

The lock is one `flock` call on a descriptor kept open (close-on-exec) for
the supervisor's life. A wrapper library would add nothing here (this is
Linux-only, and `fallback_to_soft` locks are refused anyway) while its
imports cost the long-running daemon about 4 MB of resident memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Collection
from pathlib import Path

from wfsched.errors import ConflictError, StoreError
from wfsched.store.resource_faults import from_os


class Ownership:
    """The held supervisor lock, released last on shutdown."""

    def __init__(self, lock_path: Path) -> None:
        self.lock_path = lock_path
        self._fd: int | None = None

    def acquire(self) -> None:
        fd: int | None = None
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            with contextlib.suppress(PermissionError):
                os.fchmod(fd, 0o600)  # whatever the umask or an older file said
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # type: ignore[arg-type]  # only flock raises it
            pid = holder(self.lock_path)
            who = f" (pid {pid})" if pid else ""
            raise ConflictError(
                f"{self.lock_path.parent}: another supervisor{who} owns this store;"
                " stop it first or use another --store"
            ) from None
        except OSError as exc:
            if fd is not None:
                os.close(fd)
            fault = from_os(exc, self.lock_path.parent)
            if fault is not None:
                raise fault from exc  # read-only, full, EIO: the words and the fix
            raise StoreError(
                f"{self.lock_path}: cannot lock ({exc.strerror or exc}); wfsched needs a"
                " file system with flock support for its store"
            ) from exc
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


PROC_LOCKS = Path("/proc/locks")
PROC_MOUNTINFO = Path("/proc/self/mountinfo")


def holder(
    lock_path: Path, locks: Path = PROC_LOCKS, mountinfo: Path = PROC_MOUNTINFO
) -> int | None:
    """The pid holding an flock on `lock_path`, from /proc/locks; None if free.

    A lock is identified by device and inode: an inode number alone also
    matches a lock on another file system (another store on another disk,
    any flock on a tmpfs), which would report a supervisor that is not there.
    """
    try:
        inode, devices = _identity(lock_path, mountinfo)
        table = locks.read_text()
    except OSError:
        return None
    return lock_holder(table, devices, inode)


def lock_holder(table: str, devices: Collection[tuple[int, int]], inode: int) -> int | None:
    """The pid of the FLOCK in `table` (/proc/locks text) on (device, inode).

    A line reads "1: FLOCK  ADVISORY  WRITE 1234 fe:01:5678 0 EOF", the
    device as hexadecimal major:minor; waiters blocked on a lock carry "->"
    and hold nothing.
    """
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or "->" in fields[1:3]:
            continue
        parts = fields[5].split(":")
        try:
            device = (int(parts[0], 16), int(parts[1], 16))
            if len(parts) == 3 and device in devices and int(parts[2]) == inode:
                return int(fields[4])
        except (ValueError, IndexError):
            continue
    return None


def _identity(lock_path: Path, mountinfo: Path) -> tuple[int, set[tuple[int, int]]]:
    """The lock file's inode and the device numbers the kernel may print for it.

    /proc/locks prints the file system's own device. stat() says the same on
    most file systems, but not on btrfs (a per-subvolume number) or overlayfs
    (the lower layer's), so the device of the file's mount, found through the
    mount id of an open descriptor, is accepted too.
    """
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except PermissionError:
        status = lock_path.stat()
        return status.st_ino, {(os.major(status.st_dev), os.minor(status.st_dev))}
    try:
        status = os.fstat(fd)
        devices = {(os.major(status.st_dev), os.minor(status.st_dev))}
        mount_id = _fdinfo_mount_id(fd)
    finally:
        # A read-only descriptor of our own: closing it releases no flock.
        os.close(fd)
    if mount_id is not None:
        with contextlib.suppress(OSError, ValueError):
            for line in mountinfo.read_text().splitlines():
                # "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw"
                fields = line.split()
                if len(fields) > 2 and fields[0] == str(mount_id):
                    major, minor = fields[2].split(":")
                    devices.add((int(major), int(minor)))
                    break
    return status.st_ino, devices


def _fdinfo_mount_id(fd: int) -> int | None:
    try:
        text = Path(f"/proc/self/fdinfo/{fd}").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "mnt_id" and value.strip().isdigit():
            return int(value)
    return None
