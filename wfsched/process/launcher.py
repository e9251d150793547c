"""All process handling of wfsched on the supervisor's side: the client of
the run keeper (`wfsched.process.keeper`), the records each attempt leaves,
and /proc. Linux only (/proc, pidfds, close_range, PR_SET_CHILD_SUBREAPER;
kernel >= 5.3).

Process tree::

    supervisor ──requests──▶ run keeper  (a fresh interpreter in its own
               ◀──replies──      │         session; outlives the supervisor,
               ◀──exits─────      │         re-attached through keeper.sock)
                                  └─ command  (one per attempt; own session
                                               and process group)

Why a keeper: starting a fresh interpreter per run costs 70-100 ms, and a
forked Python shim per run still cost about 5 ms of CPU; the keeper spawns
each command itself (vfork), so a run costs one spawn, one wait and one
record. Why a fresh interpreter rather than a fork of the supervisor: it
holds only the process modules (a fraction of the supervisor's memory) and
inherits nothing but a pipe for its ready line, never `supervisor.lock` or
an SQLite handle. Why it outlives the supervisor: it is the commands'
parent, so it sees their exit statuses while no supervisor runs, enforces
their timeouts and writes `exit.json`; the next supervisor re-attaches and
ingests those records (`read_exit_record`) or re-adopts the live runs
(`Launcher.alive`/`launch_locked`).

Records live in a record directory per attempt, in a tree private to the
store that the command is never told about (not its run directory, state
directory or cwd), so a job cannot forge or destroy them:

- `shim.json`, the launch lock and started record. The keeper creates and
  flock()s it before anything else of the launch, writes its own pid and
  start time into it before the command starts and the command's once it
  runs (the command gets no copy of the lock: close-on-exec), and holds
  the lock until the exit record is on disk. So after a lost reply from a
  dead keeper: lock held = the keeper holds the attempt; lock free + exit
  record = it finished; lock free + started record = its keeper died, its
  command may have run; lock free and no record = nothing of the attempt
  ever ran. The name is kept from the per-run shims of earlier releases,
  whose records recovery still reads.
- `exit.json`, how the attempt ended (tmp + fsync + rename).

The command's `stdout.log` and `stderr.log` are in its attempt directory
(`LaunchSpec.attempt_dir`), which the job may write.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import select
import signal
import socket
import stat as stat_module
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from wfsched.errors import OperationError

SHIM_RECORD = "shim.json"  # also the launch lock, see the module docstring
EXIT_RECORD = "exit.json"
_RECORD_MAX = 65536  # a record is a few hundred bytes; more is not one
STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"

OUTCOMES = frozenset({"exited", "signaled", "timeout", "cancelled", "spawn-failed"})

_to_json = json.JSONEncoder(separators=(",", ":")).encode  # one encoder, not one per call
_HEADER = struct.Struct("!I")  # length prefix of a request, reply or event
KEEPER_PROTOCOL = 1
KEEPER_SOCKET = "keeper.sock"  # in the store's local directory
KEEPER_LOCK = "keeper.lock"  # flock held by the keeper for life: one per directory
_CONNECT_TRIES = 5  # start(): connect, else start a keeper, so many times
_KEEPER_STOP_WAIT = 5.0  # seconds start() waits for a keeper that failed to start
_KEEPER_READY_WAIT = 60.0  # seconds start() waits for a new keeper (a loaded host is slow)
# Signals aimed at the supervisor or its terminal that the keeper must
# outlive (it keeps parenting runs and recording their exits).
_KEEPER_OUTLIVES = frozenset({signal.SIGINT, signal.SIGHUP, signal.SIGTERM})
_KILLED_GROUP_WAIT = 5.0  # seconds the keeper waits for a SIGKILLed group to vanish
# Reading a record that fails with these is a resource fault of the reader
# (no descriptor left, a failing disk), never a verdict on the record.
_READ_AGAIN_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EIO, errno.ENOMEM})
_RECORD_RETRY_FIRST = 0.05  # seconds before a failed exit record is written again
_RECORD_RETRY_MAX = 5.0  # the backoff's cap: a freed disk is seen within seconds
# The errors that a full, read-only or failing disk (or a descriptor limit)
# gives: the keeper keeps the exit code and tries again until they pass.
_RECORD_RETRY_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EMFILE, errno.ENFILE}
)
_LOG_CHECK_FIRST = 0.1  # seconds between log size checks while output grows
_LOG_CHECK_MAX = 2.0  # ... backing off to this while it does not
LOG_TRUNCATED = b"[wfsched: "
"""How a log begins once the keeper cut it to max_log_bytes (the first line
says how many bytes of earlier output were dropped; rundirs.log_truncation)."""
_PR_SET_NAME = 15


class LauncherError(OperationError, OSError):
    """The run keeper cannot launch (gone, fork failed, bad request).

    An OSError too: to the caller it is one more way a process fails to start.
    """


class LauncherLost(LauncherError):
    """The run keeper died while handling a launch: whether it started the
    command is unknown (an ambiguous launch). Never retry blindly: look at the
    attempt's launch lock and records first (`launch_locked`)."""


class AlreadyLaunched(LauncherError):
    """The keeper refused the launch: this attempt's launch lock is held, or
    it left a started record. Never "not started": adopt what is there."""


class CommandNotStarted(LauncherError):
    """The keeper could not start the command (not found, bad cwd...): the
    attempt's exit record (outcome spawn-failed) says why, and is ingested
    like any other end."""


class RecordError(ValueError):
    """A record that cannot be read or is not a valid record (names the file)."""


class SpawnRefused(OSError):
    """The keeper is fine but could not fork (a process limit, out of
    memory) or could not write the attempt's launch lock or started record
    (a full or failing disk): nothing started, the next launch may succeed.
    Carries the errno."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


@dataclass(frozen=True)
class LaunchSpec:
    """Everything the keeper needs to run an attempt; it crosses a socket as
    JSON, so plain data only.

    `cwd=None` runs the command in the working directory of the process
    that calls `Launcher.spawn()`; `env` is passed as is (PATH in it
    is what finds `argv[0]`); `timeout=None` means no limit. `attempt_dir`
    gets the command's logs, `record_dir` (out of the job's reach) the
    attempt's records.
    """

    run_id: str
    attempt: int
    argv: tuple[str, ...]
    cwd: str | None
    env: dict[str, str]
    stdin_path: str
    attempt_dir: str
    record_dir: str
    timeout: int | None
    kill_grace: int
    max_log_bytes: int | None = None
    """Keep each of stdout.log and stderr.log within this many bytes (the
    tail is kept, see _LogCap); None: no limit (failure hooks)."""

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> LaunchSpec:
        return cls(**{**data, "argv": tuple(data["argv"])})


@dataclass(frozen=True)
class ShimHandle:
    """A run's identity (its command's; a shim's for runs of earlier
    releases): pid alone is reused by the kernel, pid + starttime is not."""

    pid: int
    start_time: int


@dataclass(frozen=True)
class ExitRecord:
    attempt: int
    outcome: str
    exit_code: int | None
    signal: int | None
    reason: str | None
    started_at: float
    finished_at: float


# --------------------------------------------------------------------------
# /proc and records: used by the supervisor, recovery and the keeper alike.


def _read_stat(pid: int) -> tuple[str, int, int] | None:
    """(state letter, ppid, starttime) from /proc/<pid>/stat, or None if no such process."""
    if pid <= 0:
        return None
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        raw = os.read(fd, 4096)  # one read: /proc generates the line whole
    except ProcessLookupError:  # exited and reaped between open and read
        return None
    finally:
        os.close(fd)
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[19])


def process_start_time(pid: int) -> int | None:
    """Clock ticks after boot at which `pid` started (zombies included); None if absent."""
    stat = _read_stat(pid)
    return None if stat is None else stat[2]


def process_alive(handle: ShimHandle) -> bool:
    """True while that very process runs: same starttime (not a reused pid), not a zombie.

    A process whose parent died may stay a zombie for a while (an init that
    never reaps), so a zombie counts as gone.
    """
    stat = _read_stat(handle.pid)
    return stat is not None and stat[0] not in "ZX" and stat[2] == handle.start_time


def session_members(sid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in session `sid`.

    A command is a session leader (setsid; a shim of an earlier release was),
    so once its parent is dead this is what is left of its run. The kernel
    never hands out a pid that is still some session's id, so a dead
    leader's pid names its own session's leftovers and nothing else.
    """
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                raw = handle.read()
            fields = raw[raw.rindex(b")") + 2 :].split()  # state, ppid, pgrp, session, ...
            if int(fields[3]) == sid and fields[0] not in (b"Z", b"X"):
                members.append(int(name))
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    return members


def signal_session(shim: ShimHandle, signum: int) -> bool:
    """Send `signum` to every process group with a member in the session the
    `shim` (a run's command) led; False if nothing of that session is left.

    The leader's pid stays allocated while its session has members, so if a
    process holds that pid now it is either the leader itself (same start
    time) or, the session having emptied, someone else who may lead a
    session of their own: never ours to signal.
    """
    holder = process_start_time(shim.pid)
    if holder is not None and holder != shim.start_time:
        return False
    members = session_members(shim.pid)
    groups = set()
    for pid in members:
        with contextlib.suppress(OSError):
            groups.add(os.getpgid(pid))
    for pgid in groups:
        _signal_group(pgid, signum)
    return bool(members)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _load_record(path: str, *, empty_is_absent: bool = False) -> dict[str, Any] | None:
    """A record's JSON object; None if absent (or, with `empty_is_absent`,
    empty: an empty started record is a lock nothing has written into yet).

    Any failure to read (a directory, a symlink, a FIFO, EACCES, EIO...) is
    a RecordError naming the file: reading a record must never raise
    anything its callers do not expect.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in _READ_AGAIN_ERRNOS:
            raise  # the supervisor's fault, not the record's: read it again later
        raise RecordError(f"{path}: cannot read the record ({_why(exc)})") from None
    try:
        if not stat_module.S_ISREG(os.fstat(fd).st_mode):
            raise RecordError(f"{path}: not a regular file")
        raw = os.read(fd, _RECORD_MAX + 1)
    except OSError as exc:
        if exc.errno in _READ_AGAIN_ERRNOS:
            raise
        raise RecordError(f"{path}: cannot read the record ({_why(exc)})") from None
    finally:
        os.close(fd)
    if not raw and empty_is_absent:
        return None
    if len(raw) > _RECORD_MAX:
        raise RecordError(f"{path}: not a valid record (larger than {_RECORD_MAX} bytes)")
    try:
        data = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError both are
        raise RecordError(f"{path}: not a valid record ({exc})") from None
    if not isinstance(data, dict):
        raise RecordError(f"{path}: not a valid record (expected a JSON object)")
    return data


def _field(data: dict[str, Any], key: str, types: tuple[type, ...], path: str) -> Any:
    value = data.get(key, _MISSING)
    # bool is an int subclass; a true/false where a number belongs is corruption.
    if value is _MISSING or isinstance(value, bool) or not isinstance(value, types):
        names = " or ".join("null" if t is type(None) else t.__name__ for t in types)
        raise RecordError(f"{path}: field {key!r} must be {names}, got {value!r}")
    return value


_MISSING = object()


def read_shim_record(record_dir: str) -> ShimHandle | None:
    """The attempt's started record (pid + start time: the command's, or the
    keeper's until the command runs); None if none was written, i.e. the
    command never started. RecordError if unreadable.

    A record still naming the keeper carries the command's fingerprint
    (`launch_fingerprint`): if the keeper died between the spawn and naming
    the command, the command is found by it, so what is left of it can be
    terminated before its run is recorded."""
    path = os.path.join(record_dir, SHIM_RECORD)
    data = _load_record(path, empty_is_absent=True)
    if data is None:
        return None
    handle = ShimHandle(
        pid=_field(data, "pid", (int,), path), start_time=_field(data, "start_time", (int,), path)
    )
    fingerprint = data.get("find")
    if isinstance(fingerprint, str):
        return find_spawned(fingerprint) or handle
    return handle


_FIND_KEYS = (b"WFSCHED_RUN_DIR=", b"WFSCHED_ATTEMPT=")


def launch_fingerprint(env: dict[str, str]) -> str | None:
    """What identifies an attempt's command among the host's processes before
    its pid is known: its run directory (one store's, one run's) and attempt,
    from the environment every run's command starts with. None without them
    (a failure hook)."""
    run_dir, attempt = env.get("WFSCHED_RUN_DIR"), env.get("WFSCHED_ATTEMPT")
    if run_dir is None or attempt is None:
        return None
    return _fingerprint(os.fsencode(run_dir), attempt.encode())


def _fingerprint(run_dir: bytes, attempt: bytes) -> str:
    return blake2b()(run_dir + b"\0" + attempt, digest_size=16).hexdigest()


def blake2b() -> Any:
    """BLAKE2b from CPython's own module when it has one: `hashlib` also
    loads OpenSSL's libcrypto, 4-5 ms of the keeper's first launch (the
    first job after a keeper starts paid for it) and 3.4 MB resident. The
    keeper calls this when it starts, so no launch loads anything."""
    try:
        from _blake2 import blake2b as constructor  # type: ignore[import-not-found]
    except ImportError:
        from hashlib import blake2b as constructor
    return constructor


def find_spawned(fingerprint: str) -> ShimHandle | None:
    """The live session leader of our uid whose initial environment carries
    `fingerprint`: a command whose keeper died before naming it. Commands
    lead their own sessions, and /proc/PID/environ is the environment they
    were started with."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    uid = os.getuid()
    for name in entries:
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                raw = handle.read()
            fields = raw[raw.rindex(b")") + 2 :].split()  # state, ppid, pgrp, session, ...
            if int(fields[3]) != pid or fields[0] in (b"Z", b"X"):
                continue  # not a live session leader
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/environ", "rb") as handle:
                environ = handle.read()
            start_time = int(fields[19])
        except (OSError, ValueError, IndexError):
            continue
        values: dict[bytes, bytes] = {}
        for entry in environ.split(b"\0"):
            for key in _FIND_KEYS:
                if entry.startswith(key):
                    values[key] = entry[len(key) :]
        found = [values.get(key) for key in _FIND_KEYS]
        if None not in found and _fingerprint(*found) == fingerprint:  # type: ignore[arg-type]
            return ShimHandle(pid, start_time)
    return None


def launch_locked(record_dir: str) -> bool:
    """Whether a keeper holds this attempt: it holds the launch lock
    (`shim.json`) from before the command starts until its exit record is on
    disk, whatever pids say. RecordError if the lock cannot be examined."""
    path = os.path.join(record_dir, SHIM_RECORD)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise RecordError(f"{path}: cannot examine the launch lock ({_why(exc)})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError as exc:
        raise RecordError(f"{path}: cannot examine the launch lock ({_why(exc)})") from None
    finally:
        os.close(fd)  # also releases our probe's own shared lock
    return False


def read_exit_record(record_dir: str) -> ExitRecord | None:
    """The attempt's exit record; None if absent, RecordError if unreadable,
    corrupt or partial.

    The keeper renames a complete, fsynced file into place, so a partial file
    means outside interference: the caller fails the run closed.
    """
    path = os.path.join(record_dir, EXIT_RECORD)
    data = _load_record(path)
    if data is None:
        return None
    outcome = _field(data, "outcome", (str,), path)
    if outcome not in OUTCOMES:
        raise RecordError(f"{path}: unknown outcome {outcome!r}")
    return ExitRecord(
        attempt=_field(data, "attempt", (int,), path),
        outcome=outcome,
        exit_code=_field(data, "exit_code", (int, type(None)), path),
        signal=_field(data, "signal", (int, type(None)), path),
        reason=_field(data, "reason", (str, type(None)), path),
        started_at=float(_field(data, "started_at", (int, float), path)),
        finished_at=float(_field(data, "finished_at", (int, float), path)),
    )


def _write_exit_records(
    items: Sequence[tuple[str, dict[str, Any]]], fault: Callable[[str], None]
) -> list[OSError | None]:
    """Write a batch of exit records, each (record directory, record): every
    file written to `exit.json.tmp` and fsynced, then renamed over
    `exit.json`, then every directory fsynced. Readers never see half a
    record, and each survives a power cut once this returns.

    One answer per item, in order: None once its record is on disk, or the
    OSError that stopped it (the caller retries or gives up on that one;
    the others are unaffected). `fault` is called after each rename (the
    crash tests kill the keeper between two records of a batch)."""
    failures: list[OSError | None] = [None] * len(items)
    files: list[tuple[int, int]] = []  # (item, fd) of tmp files written
    try:
        for index, (record_dir, data) in enumerate(items):
            tmp = os.path.join(record_dir, EXIT_RECORD + ".tmp")
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
            try:
                fd = os.open(tmp, flags, 0o600)
            except OSError as exc:
                failures[index] = exc
                continue
            files.append((index, fd))
            try:
                _write_all(fd, _to_json(data).encode())
            except OSError as exc:
                failures[index] = exc
        # The first fsync commits the journal for the whole batch; the
        # others find their files clean and only flush the device cache.
        for index, fd in files:
            if failures[index] is None:
                try:
                    os.fsync(fd)
                except OSError as exc:
                    failures[index] = exc
    finally:
        for _, fd in files:
            os.close(fd)
    for index, (record_dir, _) in enumerate(items):
        if failures[index] is None:
            path = os.path.join(record_dir, EXIT_RECORD)
            try:
                os.replace(path + ".tmp", path)
            except OSError as exc:
                failures[index] = exc
                continue
            fault("keeper-exit-record-renamed")
    for index, (record_dir, _) in enumerate(items):
        if failures[index] is None:
            try:
                dir_fd = os.open(record_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
            except OSError as exc:
                failures[index] = exc
    return failures


# --------------------------------------------------------------------------
# Pipe plumbing.


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, size: int) -> bytes | None:
    """Blocking read of exactly `size` bytes; None at EOF (the other side is gone)."""
    chunks = bytearray()
    while len(chunks) < size:
        chunk = os.read(fd, size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def _read_message(fd: int) -> bytes | None:
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    return _read_exact(fd, _HEADER.unpack(header)[0])


def _frame(payload: dict[str, Any]) -> bytes:
    body = _to_json(payload).encode()
    return _HEADER.pack(len(body)) + body


def _send_message(fd: int, payload: dict[str, Any]) -> None:
    _write_all(fd, _frame(payload))


# --------------------------------------------------------------------------
# The supervisor's side: a client of the run keeper (wfsched.process.keeper).


_SPAWN_WINDOW = 16
"""Spawn requests on the wire at once (`Launcher.spawn_many`): enough to keep
the keeper busy, few enough that its replies never fill our socket buffer
while we still write requests (the keeper writes its replies blocking)."""


def _spawn_frame(spec: LaunchSpec) -> bytes:
    """The spawn request of `spec`, framed for the wire."""
    return _frame({"op": "spawn", "spec": _spawn_wire(spec)})


def _spawn_wire(spec: LaunchSpec) -> dict[str, Any]:
    """A spawn request's spec, every path absolute."""
    for directory in (spec.attempt_dir, spec.record_dir):
        if not os.path.isdir(directory):
            raise LauncherError(f"{directory}: directory does not exist")
    wire = dict(vars(spec))  # not asdict(): that deep-copies, 20-80 us per launch
    # Records are for recovery, and the keeper outlives our cwd: no
    # relative path. A cwd of None is ours.
    wire["attempt_dir"] = os.path.abspath(spec.attempt_dir)
    wire["record_dir"] = os.path.abspath(spec.record_dir)
    wire["stdin_path"] = os.path.abspath(spec.stdin_path)
    wire["cwd"] = os.path.abspath(spec.cwd if spec.cwd is not None else ".")
    return wire


def _spawn_answer(spec: LaunchSpec, data: dict[str, Any]) -> ShimHandle:
    """The keeper's reply to a spawn request, as `Launcher.spawn` returns or raises it."""
    if data.get("launched"):
        raise AlreadyLaunched(f"cannot launch {spec.run_id}: {data['error']}")
    if data.get("not_started"):
        raise CommandNotStarted(data["error"])
    if "errno" in data:
        raise SpawnRefused(data["errno"], f"cannot launch {spec.run_id}: {data['error']}")
    if "error" in data:
        raise LauncherError(f"cannot launch {spec.run_id}: {data['error']}")
    return ShimHandle(pid=data["pid"], start_time=data["start_time"])


def _keeper_argv(directory: str, fault: str = "") -> list[str]:
    """The keeper's command line: this interpreter, isolated (-I: no PYTHON*
    variables, no user site, no script directory on sys.path) and without site
    (-S: no site-packages, no .pth files, fewer modules and less memory).

    The directory holding the wfsched package is appended to sys.path, i.e.
    after the standard library so nothing there can shadow a stdlib module;
    that finds the package the supervisor itself runs, whether it comes from
    a venv, a plain or an editable install (whose finder hook needs site).
    """
    if not sys.executable:
        raise LauncherError("cannot start the run keeper: no Python executable (sys.executable)")
    flags = ["-I", "-S"]
    if sys.flags.dont_write_bytecode:  # -I ignores PYTHONDONTWRITEBYTECODE
        flags.append("-B")
    if sys.pycache_prefix:
        flags += ["-X", f"pycache_prefix={sys.pycache_prefix}"]
    package_parent = os.path.abspath(__file__)
    for _ in range(__name__.count(".") + 1):  # up from the module to the package's parent
        package_parent = os.path.dirname(package_parent)
    code = (
        "import sys; sys.path.append(sys.argv[1]);"
        " from wfsched.process.keeper import main;"
        " main(sys.argv[2], sys.argv[3])"
    )
    return [sys.executable, *flags, "-c", code, package_parent, directory, fault]


class ProcessControl(Protocol):
    """What the supervisor needs from process handling. `Launcher` is the
    production implementation; the tests drive the supervisor with a fake."""

    def start(self) -> None: ...
    def spawn(self, spec: LaunchSpec) -> ShimHandle: ...
    def fileno(self) -> int: ...
    def warm(self) -> None: ...
    def encode_ahead(self, specs: Sequence[LaunchSpec]) -> None: ...
    def probe_fork(self) -> None: ...
    def drain_exits(self) -> list[int]: ...
    def alive(self, handle: ShimHandle) -> bool: ...
    def cancel(self, handle: ShimHandle, reason: str | None = None) -> bool: ...
    def read_exit(self, record_dir: str) -> ExitRecord | None: ...
    def read_shim(self, record_dir: str) -> ShimHandle | None: ...
    def launch_locked(self, record_dir: str) -> bool: ...
    def signal_session(self, shim: ShimHandle, signum: int) -> bool: ...
    def stop(self) -> None: ...


class Launcher:
    """Client of the run keeper of `directory` (the store's local directory;
    None: a private temporary one, for tests and benchmarks). Thread-safe.

    `start()` re-attaches to the keeper that runs there, or starts one (a
    fresh interpreter in its own session that inherits nothing but a pipe
    for its ready line, never `supervisor.lock` or a database handle); it
    may be called at any time, with the lock held, SQLite open or threads
    running. Two connections: requests and their replies on one, exit
    events (`fileno()`) on the other, so a reply never waits behind events.

    `stop()` only disconnects, as a crash of the client would: the keeper
    keeps its runs and waits for the next client to re-attach, and exits by
    itself once it has neither runs nor clients. `shutdown()` lets it go.

    It implements `ProcessControl`. `fault` (crash tests only: a
    `wfsched.faults` spec at which the keeper SIGKILLs itself) goes to the
    first keeper this Launcher starts: a replacement that killed itself at
    the same point would never let a launch through.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None, fault: str = "") -> None:
        self._fault = fault
        self._directory = None if directory is None else os.path.abspath(directory)
        self._lock = threading.Lock()
        self._requests: socket.socket | None = None
        self._events: socket.socket | None = None
        self._keeper_pid: int | None = None
        self._started: subprocess.Popen[bytes] | None = None
        self._partial = b""  # an event split across reads
        self._ahead: dict[int, tuple[LaunchSpec, bytes]] = {}  # see encode_ahead

    @property
    def server_pid(self) -> int | None:
        """The keeper's pid while connected."""
        return self._keeper_pid if self._requests is not None else None

    def __enter__(self) -> Launcher:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """Connect to the keeper, starting one if none listens.

        LauncherError if no keeper can be started or reached; a keeper's own
        traceback, if any, is on our stderr.
        """
        with self._lock:
            if self._requests is not None:
                raise RuntimeError("Launcher already started")
            if self._directory is None:
                import tempfile

                self._directory = tempfile.mkdtemp(prefix="wfsched-keeper-")
            # What the keeper will need of its directory, checked here first:
            # a read-only or full store is then the plain OSError the
            # supervisor reports for its store, not a keeper's traceback.
            with contextlib.suppress(FileExistsError):
                os.makedirs(self._directory, mode=0o700)
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
            os.close(os.open(os.path.join(self._directory, KEEPER_LOCK), flags, 0o600))
            self._reap_started()
            problem, failed = "no keeper", False
            for _ in range(_CONNECT_TRIES):
                try:
                    self._connect()
                    return
                except (FileNotFoundError, ConnectionRefusedError):
                    # None listens (or it just exited). After a keeper of ours
                    # failed to start, only another one that won may answer.
                    if failed:
                        break
                    why = self._start_keeper()
                    if why:
                        problem, failed = why, True
                except LauncherError as exc:  # it went away during the handshake
                    problem = str(exc)
                except OSError as exc:
                    raise LauncherError(f"cannot reach the run keeper ({_why(exc)})") from exc
            raise LauncherError(f"the run keeper did not start: {problem}")

    def _connect(self) -> None:
        assert self._directory is not None
        path = socket_path(self._directory)
        pair: list[socket.socket] = []
        try:
            for events in (False, True):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
                pair.append(sock)
                sock.connect(path)
                _send_message(sock.fileno(), {"op": "hello", "events": events})
                reply = _read_message(sock.fileno())
                if reply is None:
                    raise LauncherError("the run keeper closed the connection")
                hello = json.loads(reply)
                if hello.get("protocol") != KEEPER_PROTOCOL:
                    raise OSError(errno.EPROTO, f"unknown keeper protocol {hello!r}")
        except BaseException:
            for sock in pair:
                sock.close()
            raise
        finally:
            if path.startswith("/proc/self/fd/"):
                with contextlib.suppress(OSError, ValueError):
                    os.close(int(path.split("/")[4]))
        self._requests, self._events = pair
        self._events.setblocking(False)
        self._keeper_pid = hello["keeper"]
        self._partial = b""

    def _start_keeper(self) -> str:
        """Start a keeper and wait for its ready line; what went wrong, if anything."""
        assert self._directory is not None
        fault, self._fault = self._fault, ""
        argv = _keeper_argv(self._directory, fault)
        # SIGTERM, SIGINT and SIGHUP blocked until the keeper chose its own
        # dispositions: the mask survives exec, so a signal meant for the
        # supervisor (Ctrl-C, systemd's stop) cannot kill it while it starts.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _KEEPER_OUTLIVES)
        try:
            keeper = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=None,  # ours: where a keeper traceback belongs
                close_fds=True,
                start_new_session=True,  # not in our terminal's or our group's signals
            )
        except OSError as exc:
            raise LauncherError(f"cannot start the run keeper ({exc})") from exc
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        self._started = keeper
        assert keeper.stdout is not None
        with keeper.stdout:
            readable, _, _ = select.select([keeper.stdout], [], [], _KEEPER_READY_WAIT)
            line = keeper.stdout.readline() if readable else b""
        if line.startswith(b'{"ready"'):
            return ""
        if not readable:
            with contextlib.suppress(OSError):
                keeper.kill()
            return f"not ready after {_KEEPER_READY_WAIT:g}s"
        try:
            status = keeper.wait(_KEEPER_STOP_WAIT)
        except subprocess.TimeoutExpired:
            return "it closed its pipe"
        return f"it exited with status {status} (its error, if any, is on stderr above)"

    def _reap_started(self) -> None:
        if self._started is not None and self._started.poll() is not None:
            self._started = None

    def _request(self, payload: dict[str, Any]) -> dict[str, Any]:
        """One request and its reply; LauncherLost if the keeper is gone
        (whether it acted on the request is then unknown)."""
        return self._request_framed(_frame(payload))

    def _request_framed(self, frame: bytes) -> dict[str, Any]:
        """`_request` of a request already framed."""
        if self._requests is None:
            raise LauncherError("the launcher is not started")
        try:
            _write_all(self._requests.fileno(), frame)
            reply = _read_message(self._requests.fileno())
        except OSError as exc:  # EPIPE, ECONNRESET: the keeper is gone
            raise LauncherLost(f"the run keeper is gone ({exc})") from exc
        if reply is None:
            raise LauncherLost("the run keeper exited while handling a request")
        data: dict[str, Any] = json.loads(reply)
        return data

    def spawn(self, spec: LaunchSpec) -> ShimHandle:
        """Have the keeper start `spec`'s command; returns once it runs.

        Its end is reported later through `fileno()` / `drain_exits()`; its
        outcome is in `exit.json`. LauncherLost if the keeper died meanwhile
        (whether it started the command is then unknown: see the launch
        lock), CommandNotStarted if the command could not be started (its
        exit record says why), any other LauncherError: nothing was started.
        """
        frame = self._frame_of(spec)
        with self._lock:
            data = self._request_framed(frame)
        return _spawn_answer(spec, data)

    def encode_ahead(self, specs: Sequence[LaunchSpec]) -> None:
        """Encode these specs' spawn requests now, for `spawn`/`spawn_many`
        of the same spec objects to send as they are: a held admission
        encodes its chunk's while it waits for the instant, so after its
        commit only the send is left. Replaces what an earlier call left
        (a held chunk rolled back never spawns). A spec that cannot be
        encoded is left to `spawn`, which raises for it."""
        ahead: dict[int, tuple[LaunchSpec, bytes]] = {}
        for spec in specs:
            with contextlib.suppress(LauncherError):
                ahead[id(spec)] = (spec, _spawn_frame(spec))
        self._ahead = ahead

    def _frame_of(self, spec: LaunchSpec) -> bytes:
        """The spawn request of `spec`: encoded ahead (the very object, so an
        id reused by another spec never matches), else now."""
        ahead = self._ahead.pop(id(spec), None)
        if ahead is not None and ahead[0] is spec:
            return ahead[1]
        return _spawn_frame(spec)

    def spawn_many(self, specs: Sequence[LaunchSpec]) -> list[ShimHandle | Exception | None]:
        """`spawn` of each spec, pipelined: up to `_SPAWN_WINDOW` requests
        are on the wire before their replies are read, so the keeper spawns
        the next command while we encode the one after and read replies.

        One answer per spec, in order: its handle, or the exception `spawn`
        would have raised. When the connection is lost, that spec's answer
        is LauncherLost and every later one is None: sent or not, whether
        the keeper acted on it is unknown, so the caller asks again (and the
        launch lock refuses an attempt that started: AlreadyLaunched).
        """
        answers: list[ShimHandle | Exception | None] = [None] * len(specs)
        on_wire: list[bool] = []  # per spec sent so far: whether a request went out
        with self._lock:
            if self._requests is None:
                return [LauncherError("the launcher is not started")] * len(specs)
            fd = self._requests.fileno()
            for index, spec in enumerate(specs):
                try:
                    # Encoded as it goes out: the first request leaves at once.
                    while len(on_wire) < len(specs) and len(on_wire) - index < _SPAWN_WINDOW:
                        ahead = len(on_wire)
                        try:
                            frame = self._frame_of(specs[ahead])
                        except LauncherError as exc:
                            answers[ahead] = exc
                            on_wire.append(False)
                            continue
                        _write_all(fd, frame)
                        on_wire.append(True)
                    if not on_wire[index]:
                        continue
                    reply = _read_message(fd)
                except OSError as exc:  # EPIPE, ECONNRESET: the keeper is gone
                    answers[index] = LauncherLost(f"the run keeper is gone ({exc})")
                    return answers
                if reply is None:
                    answers[index] = LauncherLost("the run keeper exited while handling a request")
                    return answers
                try:
                    answers[index] = _spawn_answer(spec, json.loads(reply))
                except OSError as exc:  # a LauncherError or SpawnRefused, as spawn() raises
                    answers[index] = exc
        return answers

    def warm(self) -> None:
        """Wake the keeper just before a due instant (a no-op round trip), so
        the launch itself finds it and its pages awake. No fork: the keeper
        spawns with vfork, which a throwaway fork would not warm, and a fork
        of it costs milliseconds. Best effort: errors are for `spawn()`."""
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._request({"op": "warm"})

    def probe_fork(self) -> None:
        """Whether the keeper can fork right now (a throwaway child):
        SpawnRefused if not, LauncherError if the keeper is gone. The
        supervisor's probe while a process-limit episode lasts."""
        with self._lock:
            data = self._request({"op": "probe"})
        if "errno" in data:
            raise SpawnRefused(data["errno"], f"cannot fork: {data['error']}")

    def fileno(self) -> int:
        """Readable once the keeper reported ended attempts (or exited)."""
        if self._events is None:
            raise ValueError("the launcher is not started")
        return self._events.fileno()

    def drain_exits(self) -> list[int]:
        """Pids of commands whose exit records are on disk since the last
        call; never blocks.

        Raises LauncherError when the keeper has exited (EOF, which would stay
        readable): the supervisor then must stop() and start() again, or
        stop; the keeper's runs then lost their parent (see docs/recovery.md).
        """
        if self._events is None:
            return []
        data, eof = self._partial, False
        while True:
            try:
                chunk = self._events.recv(65536)
            except BlockingIOError:
                break
            except OSError:
                eof = True
                break
            if not chunk:
                eof = True
                break
            data += chunk
        pids: list[int] = []
        while len(data) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(data)
            if len(data) < _HEADER.size + size:
                break
            pids += json.loads(data[_HEADER.size : _HEADER.size + size])["exited"]
            data = data[_HEADER.size + size :]
        self._partial = data
        if eof and not pids:
            raise LauncherError("the run keeper exited; its runs in flight lost their parent")
        return pids

    def list_live(self) -> list[dict[str, Any]]:
        """The attempts the keeper parents whose exit is not recorded yet."""
        with self._lock:
            live: list[dict[str, Any]] = self._request({"op": "list"})["live"]
        return live

    def alive(self, handle: ShimHandle) -> bool:
        """Whether that command is still a child of our keeper (a zombie the
        keeper has not reaped yet counts). The keeper reaps a command before
        its exit record is on disk (records are written in batches), so
        False is not "ended and recorded": the launch lock (`launch_locked`),
        held until the record is on disk, says that. A command whose keeper
        died is not alive, whatever it still does."""
        stat = _read_stat(handle.pid)
        if stat is None or stat[2] != handle.start_time or self._keeper_pid is None:
            return False
        return stat[1] == self._keeper_pid

    def cancel(self, handle: ShimHandle, reason: str | None = None) -> bool:
        """Have the keeper terminate the command's process group (SIGTERM,
        kill_grace, SIGKILL) and record outcome "cancelled", with `reason`
        (why it was cancelled) leading the exit record's reason: a
        supervisor that cannot record the end (a store fault during a drain)
        leaves it there for the next start to record.

        A run that an earlier release started under a per-run shim (still
        running after an upgrade) is no keeper's: its shim gets SIGTERM,
        which it takes as "cancel" the same way."""
        with self._lock:
            try:
                request = {"op": "cancel", "pid": handle.pid, "start_time": handle.start_time}
                if reason is not None:
                    request["reason"] = reason
                data = self._request(request)
            except LauncherError:
                data = {}  # no keeper: its runs are abandoned, recovery ends what is left
        return bool(data.get("done")) or _cancel_old_shim(handle)

    # The record and signal operations need no keeper; they are methods here
    # so the supervisor reaches all process handling through one object.

    def read_exit(self, record_dir: str) -> ExitRecord | None:
        return read_exit_record(record_dir)

    def read_shim(self, record_dir: str) -> ShimHandle | None:
        return read_shim_record(record_dir)

    def launch_locked(self, record_dir: str) -> bool:
        """`launch_locked`, or our keeper's word that it still holds the
        attempt. The keeper reaps a command before its exit record's batch
        is on disk, so for that moment the pid says "gone" and only the lock
        says "alive"; a job that replaced or removed its lock file (the
        keeper's lock is on the file it opened) must not make that moment
        read as an abandoned run. Once the keeper has let the attempt go, a
        lock file that cannot be read is free if the exit record is on disk
        (a lock is only released after it), and a RecordError otherwise."""
        try:
            if launch_locked(record_dir):
                return True
        except RecordError:
            if self._keeper_holds(record_dir):
                return True
            if read_exit_record(record_dir) is not None:
                return False  # ended and recorded: a lock outlives no record
            raise
        return self._keeper_holds(record_dir)

    def _keeper_holds(self, record_dir: str) -> bool:
        """Whether our keeper still holds the attempt: its exit record is not
        on disk yet. No keeper (or one that predates the question): no."""
        with self._lock:
            try:
                data = self._request({"op": "held", "record_dir": record_dir})
            except LauncherError:
                return False
        return data.get("held") is True

    def signal_session(self, shim: ShimHandle, signum: int) -> bool:
        return signal_session(shim, signum)

    def signal(self, handle: ShimHandle, signum: int) -> bool:
        """Have the keeper send `signum` to the run's process group (no
        outcome of its own: the run ends, or not, as the signal makes it)."""
        request = {"op": "signal", "pid": handle.pid, "start_time": handle.start_time}
        with self._lock:
            data = self._request({**request, "signum": int(signum)})
        return bool(data.get("done"))

    def shutdown(self) -> None:
        """Let the keeper go: it takes no new client or launch, finishes the
        runs it holds (recording their exits) and exits; a `start()` after
        this starts a new keeper at once. Then disconnect."""
        with self._lock, contextlib.suppress(LauncherError, OSError, ValueError):
            self._request({"op": "shutdown"})
        self.stop()

    def stop(self) -> None:
        """Disconnect (idempotent); the keeper and its runs are not touched:
        a `start()` re-attaches to it, and it exits by itself once it has
        neither a run nor a client for a second. Unregister `fileno()` from
        selectors first: it is closed here."""
        with self._lock:
            for sock in (self._requests, self._events):
                if sock is not None:
                    sock.close()
            self._requests = self._events = None
            self._keeper_pid = None
            self._reap_started()


OLD_SHIM_COMM = b"wfsched-shim\n"
"""/proc/<pid>/comm of a per-run shim of an earlier release."""


def _cancel_old_shim(handle: ShimHandle) -> bool:
    """SIGTERM `handle` if it is an earlier release's shim (same start time,
    named so); the check and the kill go through one pidfd, so a pid reused
    between them is never hit."""
    try:
        pidfd = os.pidfd_open(handle.pid)
    except OSError:
        return False
    try:
        with open(f"/proc/{handle.pid}/comm", "rb") as comm:
            if comm.read() != OLD_SHIM_COMM or not process_alive(handle):
                return False
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        return True
    except OSError:
        return False
    finally:
        os.close(pidfd)


def socket_path(directory: str) -> str:
    """The keeper's socket path, short enough for sun_path (108 bytes): a
    long directory is reached through an O_PATH descriptor of it (the
    caller's `/proc/self/fd/N`, which `connect` follows; the caller closes
    it after connecting)."""
    path = os.path.join(directory, KEEPER_SOCKET)
    if len(path.encode()) < 100:
        return path
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"/proc/self/fd/{fd}/{KEEPER_SOCKET}"


# --------------------------------------------------------------------------
# Helpers of the keeper.


def _set_comm(prctl: Any, name: bytes) -> None:
    """Name the process for ps/top/pgrep (15 bytes max); cosmetic, so never fatal."""
    if prctl is not None and prctl(_PR_SET_NAME, name, 0, 0, 0) == 0:
        return  # one syscall, where /proc/self/comm takes a path walk and three
    with contextlib.suppress(OSError):
        fd = os.open("/proc/self/comm", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, name)
        finally:
            os.close(fd)


def _close_fds_except(keep: Iterable[int]) -> None:
    """Close every fd not in `keep` (close_range under the hood: microseconds)."""
    low = 0
    for fd in sorted(set(keep)):
        if low < fd:  # closerange(n, n) would become close_range(n, UINT_MAX)
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, max(os.sysconf("SC_OPEN_MAX"), 65536))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed uid: still there
        return True
    return True


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def exit_outcome(
    status: int | None,
    terminated: str | None,
    *,
    timeout: int | None,
    kill_grace: int,
    killed: bool,
    cancel_reason: str | None = None,
) -> tuple[str, int | None, int | None, str | None]:
    """(outcome, exit code, signal, reason) of an attempt, as `exit.json` says it.

    `status` is the leader's wait status (None when it was never reaped:
    stuck in the kernel after SIGKILL); `terminated` is "timeout" or
    "cancelled" when the keeper ended the group, and `killed` says SIGKILL
    followed the grace; `cancel_reason`, the canceller's words for a
    cancel ("cancelled" when none was given). Pure, so the words the operator reads are tested
    without running a command.
    """
    exit_code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None
    signum = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
    if terminated is not None:
        what = (
            "timed out after " + _duration(timeout or 0)
            if terminated == "timeout"
            else cancel_reason or "cancelled"
        )
        how = (
            f"process group killed (SIGKILL after {_duration(kill_grace)} grace)"
            if killed
            else "process group terminated"
        )
        return terminated, exit_code, signum, f"{what}; {how}"
    if signum is not None:
        return "signaled", exit_code, signum, f"killed by signal {signum} ({_signal_name(signum)})"
    return "exited", exit_code, signum, None if exit_code == 0 else f"exited with code {exit_code}"


class _LogCap:
    """Keeps the attempt's stdout.log and stderr.log within `limit` bytes
    each, so a job's output cannot fill the disk the store lives on.

    The command writes its logs directly (no copy through the keeper: a
    background process the job leaves behind keeps writing to them as under
    cron). The keeper checks their sizes every 0.1 s while they grow, backing
    off to 2 s while they do not; a log found over the limit is cut in place
    to its last half, after a first line saying how many bytes of earlier
    output were dropped. A log can therefore exceed the limit by what the
    job writes between two checks, and bytes written at the very moment of
    a cut can be lost (the marker says output was dropped).
    """

    def __init__(self, attempt_dir: str, limit: int) -> None:
        self.paths = (os.path.join(attempt_dir, STDOUT_LOG), os.path.join(attempt_dir, STDERR_LOG))
        self.limit = limit
        self.sizes: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.markers: dict[str, int] = {}
        self.interval = _LOG_CHECK_FIRST
        self.next_at = time.monotonic() + self.interval

    def check(self, now: float, *, final: bool = False) -> None:
        """Cut what is over the limit, if a check is due (or `final`: the
        command ended, so the logs are left within the limit)."""
        if now < self.next_at and not final:
            return
        grew = False
        for path in self.paths:
            try:
                info = os.lstat(path)
                if not stat_module.S_ISREG(info.st_mode):
                    continue  # not the log the keeper opened: leave it be
                size = info.st_size
                if size > self.limit:
                    size = self._keep_tail(path)
            except OSError:
                continue  # the disk refuses even this: try again next time
            grew = grew or size != self.sizes.get(path)
            self.sizes[path] = size
        self.interval = _LOG_CHECK_FIRST if grew else min(self.interval * 2, _LOG_CHECK_MAX)
        self.next_at = now + self.interval

    def _keep_tail(self, path: str) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
            if not stat_module.S_ISREG(info.st_mode):
                return 0
            size = info.st_size
            keep = self.limit // 2
            tail = os.pread(fd, keep, size - keep)
            dropped = self.dropped.get(path, 0) + size - keep - self.markers.get(path, 0)
            marker = (
                LOG_TRUNCATED
                + f"{dropped} bytes of earlier output dropped"
                f" (max_log_bytes = {self.limit})]\n".encode()
            )
            head = marker + tail
            os.pwrite(fd, head, 0)
            # What the command appended meanwhile goes after the kept tail.
            grown = os.fstat(fd).st_size
            extra = os.pread(fd, grown - size, size) if grown > size else b""
            os.pwrite(fd, extra, len(head))
            os.ftruncate(fd, len(head) + len(extra))
        finally:
            os.close(fd)
        self.dropped[path] = dropped
        self.markers[path] = len(marker)
        return len(head) + len(extra)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


def _duration(seconds: int) -> str:
    """2h, 1m30s, 45s: how operators write timeouts."""
    if seconds <= 0:
        return "0s"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n]
    return "".join(parts)
