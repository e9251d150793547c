"""Resource faults in words: what failed, where, and what the operator does.

A full disk, a read-only remount, EIO, a database held locked past the busy
timeout, exhausted file descriptors or processes: none is a bug of
wfsched, each is fixed by the operator, and each reaches them as one
sentence naming the path and the fix (never a driver's class name). The
store layer turns SQLite's errors, and a PostgreSQL server's (by SQLSTATE:
out of disk, I/O error, read-only, unreachable), into `StoreUnavailable`
with these words; the supervisor reads the kind to run a fault episode
(wfsched.domain.tickerrors).
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from wfsched.errors import StoreUnavailable

_OS_KINDS = {
    errno.ENOSPC: "disk-full",
    errno.EDQUOT: "disk-full",
    errno.EROFS: "read-only",
    errno.EIO: "io-error",
    errno.EMFILE: "fd-limit",
    errno.ENFILE: "fd-limit",
    errno.EAGAIN: "process-limit",
    errno.ENOMEM: "no-memory",
}
_SQLITE_KINDS = {
    "SQLITE_FULL": "disk-full",
    "SQLITE_READONLY": "read-only",
    "SQLITE_IOERR": "io-error",
    "SQLITE_BUSY": "locked",
    "SQLITE_LOCKED": "locked",
    "SQLITE_NOMEM": "no-memory",
}


def advice(kind: str, where: Path | str, *, busy_timeout: float | None = None) -> str:
    """The sentence for a fault of `kind` at `where` (a directory or file)."""
    if kind == "disk-full":
        return f"the store's filesystem is full: free space under {where}"
    if kind == "read-only":
        return f"the store's filesystem is read-only: repair it and remount {where} read-write"
    if kind == "io-error":
        return (
            f"I/O error on the store's disk under {where}: check the disk and the kernel"
            " log (dmesg); restore from a backup if `wfsched audit` finds damage"
        )
    if kind == "locked":
        held = f" for longer than the busy timeout ({busy_timeout:g}s)" if busy_timeout else ""
        return (
            f"the database {where} is held locked by another process{held}: find it"
            f" (fuser {where}) and let it finish or stop it"
        )
    if kind == "fd-limit":
        return (
            "out of file descriptors: raise the supervisor's limit (LimitNOFILE= in its"
            " unit, ulimit -n) or lower max_concurrent_runs"
        )
    if kind == "process-limit":
        return (
            "cannot create a process, the process limit is reached: raise it (LimitNPROC="
            " or TasksMax= in the unit, ulimit -u) or lower max_concurrent_runs"
        )
    return "out of memory: free memory on the host or lower max_concurrent_runs"


def from_sqlite(exc: sqlite3.Error, db_path: Path, busy_timeout: float) -> StoreUnavailable | None:
    """SQLite's error as a resource fault at `db_path`, or None if it is another
    kind of error (corruption, a bug) that must not be retried as a fault."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    kind = next((k for prefix, k in _SQLITE_KINDS.items() if name.startswith(prefix)), None)
    if kind is None and name.startswith("SQLITE_CANTOPEN"):
        # A WAL database cannot even be opened for reading where its -shm
        # file cannot be created: say so if that is why.
        cause = _io_error_cause(db_path.parent)
        kind = cause if cause in ("read-only", "disk-full") else None
    if kind is None:
        return None
    if kind == "io-error":
        kind = _io_error_cause(db_path.parent)
    where: Path = db_path if kind == "locked" else db_path.parent
    return StoreUnavailable(
        kind, f"{advice(kind, where, busy_timeout=busy_timeout)} ({_words(exc)})"
    )


UNREACHABLE_ADVICE = "check that the server runs and accepts connections (pg_isready)"
"""What every lost connection says. Only the supervisor reconnects by itself
(a fault episode, `supervisor_words`); a one-shot command that lost its
connection has failed, and must not promise a retry nobody makes."""


def supervisor_words(fault: StoreUnavailable) -> str:
    """`fault` as the supervisor reports it (log, `status`, STATUS=): a lost
    connection adds that the supervisor reconnects, which it does."""
    if fault.kind == "unreachable":
        return f"{fault}; the supervisor reconnects by itself"
    return str(fault)


_SERVER_KINDS = {
    "53100": "disk-full",  # disk_full: could not extend a file, write WAL...
    "58030": "io-error",  # io_error
    "25006": "read-only",  # read_only_sql_transaction: a standby, or read-only by setting
}


def from_server(sqlstate: str | None, display: str, words: str) -> StoreUnavailable | None:
    """A PostgreSQL server's resource error (by SQLSTATE) in words naming the
    store, or None if it is another kind of error. A lost connection is the
    store's StoreConnectionLost, not this."""
    kind = _SERVER_KINDS.get(sqlstate or "")
    if kind == "disk-full":
        advice_text = (
            f"the database server of store {display} is out of disk space: free space in"
            " its data directory or in the tablespace holding the store"
        )
    elif kind == "io-error":
        advice_text = (
            f"the database server of store {display} reports an I/O error: check its disk"
            " and its server log"
        )
    elif kind == "read-only":
        advice_text = (
            f"the database server of store {display} accepts no writes (a standby, or"
            " default_transaction_read_only): point the store at the primary"
        )
    else:
        return None
    return StoreUnavailable(kind, f"{advice_text} ({words})")


def _io_error_cause(directory: Path) -> str:
    """SQLite reports a write refused by a filesystem gone read-only, or one
    that filled up under it, as a plain I/O error: ask the filesystem. (A
    kernel that turns a filesystem read-only after an error need not say so
    in its mount flags, so an empty file is tried too.)"""
    try:
        space = os.statvfs(directory)
    except OSError:
        return "io-error"
    if space.f_flag & os.ST_RDONLY:
        return "read-only"
    if space.f_bavail == 0:
        return "disk-full"
    probe = directory / f".wfsched-probe-{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600))
        probe.unlink()
    except OSError as exc:
        return _OS_KINDS.get(exc.errno or 0, "io-error")
    return "io-error"


def from_os(exc: OSError, default_where: Path) -> StoreUnavailable | None:
    """An OSError of a resource kind (ENOSPC, EROFS, EIO, EMFILE...), in words."""
    if isinstance(exc, StoreUnavailable):
        return exc
    if isinstance(exc, BlockingIOError):
        return None  # EAGAIN of a non-blocking descriptor: no fork was refused
    kind = _OS_KINDS.get(exc.errno or 0)
    if kind is None:
        return None
    where = default_where
    named = None
    if exc.filename and kind in ("disk-full", "read-only", "io-error"):
        name = Path(os.fsdecode(exc.filename))
        where = name if name.is_dir() else name.parent
        named = str(where)
    return StoreUnavailable(kind, f"{advice(kind, where)} ({_words(exc)})", named)


def probe_directory(kind: str, where: str, min_free: int) -> None:
    """Raise the OSError that `where` still has for a fault of `kind`
    (read-only, full, failing), or return if it can be written again: its
    filesystem's flags and free space, then a small file written, synced
    and removed (a kernel that turned a filesystem read-only after an error
    need not say so in its flags)."""
    directory = Path(where)
    while not directory.is_dir() and directory != directory.parent:
        directory = directory.parent  # removed since (a pruned run's directory)
    space = os.statvfs(directory)
    if space.f_flag & os.ST_RDONLY:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), where)
    if kind == "disk-full" and space.f_bavail * space.f_frsize < min_free:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), where)
    probe = directory / f".wfsched-probe-{os.getpid()}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, b"probe\n")
        os.fsync(fd)
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)


def classify(exc: BaseException, store_root: Path) -> StoreUnavailable | None:
    """The resource fault `exc` is (or carries as its cause), or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, StoreUnavailable):
            return seen
        if isinstance(seen, OSError):
            fault = from_os(seen, store_root)
            if fault is not None:
                return fault
        seen = seen.__cause__
    return None


def _words(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror if not exc.filename else f"{exc.strerror}: {exc.filename}"
    return " ".join(str(exc).split()) or "no detail"


def os_error_words(exc: OSError, store_root: Path) -> str:
    """One line for an OSError that reached the CLI's edge: the fault and its
    fix when it is a resource fault, else the system's words and the file."""
    fault = from_os(exc, store_root)
    return str(fault) if fault is not None else _words(exc)
