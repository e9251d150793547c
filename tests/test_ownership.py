"""Who holds a store's lock: /proc/locks matched by device and inode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.daemon import wait_for
from wfsched.store.ownership import holder, lock_holder

TABLE = """\
1: POSIX  ADVISORY  WRITE 900 fe:01:4242 0 EOF
2: FLOCK  ADVISORY  WRITE 1111 08:02:4242 0 EOF
3: FLOCK  ADVISORY  WRITE 2222 fe:01:4242 0 EOF
3: -> FLOCK  ADVISORY  WRITE 3333 fe:01:4242 0 EOF
4: FLOCK  ADVISORY  WRITE 4444 00:2a:17 0 EOF
5: garbled
"""


def test_the_lock_on_the_same_inode_of_another_device_is_not_ours() -> None:
    assert lock_holder(TABLE, {(0xFE, 0x01)}, 4242) == 2222
    assert lock_holder(TABLE, {(0x08, 0x02)}, 4242) == 1111
    assert lock_holder(TABLE, {(0x00, 0x2A)}, 17) == 4444
    # Same inode number, but no flock on this device: nobody holds our lock.
    assert lock_holder(TABLE, {(0x08, 0x03)}, 4242) is None
    assert lock_holder(TABLE, {(0xFE, 0x01)}, 4243) is None
    # A blocked waiter ("->") holds nothing; a POSIX lock is not the flock.
    assert (
        lock_holder("3: -> FLOCK  ADVISORY  WRITE 3333 fe:01:4242 0 EOF\n", {(254, 1)}, 4242)
        is None
    )
    assert lock_holder("1: POSIX  ADVISORY  WRITE 900 fe:01:4242 0 EOF\n", {(254, 1)}, 4242) is None


def test_holder_reads_an_injected_lock_table(tmp_path: Path) -> None:
    lock = tmp_path / "supervisor.lock"
    lock.touch()
    info = lock.stat()
    major, minor = os.major(info.st_dev), os.minor(info.st_dev)
    table = tmp_path / "locks"
    # The bug: another file system's flock on an equal inode number.
    table.write_text(
        f"1: FLOCK  ADVISORY  WRITE 77 {major + 1:02x}:{minor:02x}:{info.st_ino} 0 EOF\n"
    )
    assert holder(lock, locks=table) is None
    table.write_text(
        f"1: FLOCK  ADVISORY  WRITE 77 {major + 1:02x}:{minor:02x}:{info.st_ino} 0 EOF\n"
        f"2: FLOCK  ADVISORY  WRITE 88 {major:02x}:{minor:02x}:{info.st_ino} 0 EOF\n"
    )
    assert holder(lock, locks=table) == 88
    assert holder(tmp_path / "missing.lock", locks=table) is None


def test_holder_accepts_the_mount_device_when_stat_reports_another(tmp_path: Path) -> None:
    """btrfs and overlayfs: stat's device differs from the one /proc/locks
    prints, which is the mount's (as /proc/self/mountinfo gives it)."""
    lock = tmp_path / "supervisor.lock"
    lock.touch()
    inode = lock.stat().st_ino
    table = tmp_path / "locks"
    table.write_text(f"1: FLOCK  ADVISORY  WRITE 99 00:3b:{inode} 0 EOF\n")
    fd = os.open(lock, os.O_RDONLY)
    try:
        fdinfo = Path(f"/proc/self/fdinfo/{fd}").read_text()
    finally:
        os.close(fd)
    mount_id = next(
        line.split(":")[1].strip() for line in fdinfo.splitlines() if line.startswith("mnt_id")
    )
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"{mount_id} 1 0:59 / / rw - btrfs /dev/vda rw\n")
    assert holder(lock, locks=table, mountinfo=mountinfo) == 99
    mountinfo.write_text(f"{mount_id} 1 0:58 / / rw - btrfs /dev/vda rw\n")
    assert holder(lock, locks=table, mountinfo=mountinfo) is None


def test_holder_finds_a_real_flock_of_another_process(tmp_path: Path) -> None:
    lock = tmp_path / "supervisor.lock"
    ready = tmp_path / "ready"
    code = (
        "import time, pathlib; from wfsched.store.ownership import Ownership\n"
        f"held = Ownership(pathlib.Path({str(lock)!r})); held.acquire()\n"
        f"pathlib.Path({str(ready)!r}).touch(); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_for(ready.exists, what="the child to take the lock")
        assert holder(lock) == child.pid
    finally:
        child.kill()
        child.wait()
    assert holder(lock) is None
