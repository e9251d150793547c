"""All process handling of wfsched: the warm fork server, the per-run shim and
the records they leave in each attempt directory. Linux only (/proc, pidfds,
close_range, PR_SET_CHILD_SUBREAPER; kernel >= 5.3).

Process tree::

    supervisor ──request pipe──▶ fork server  (a fresh interpreter, started once
               ◀──reply pipe───      │          by Launcher.start)
               ◀──exit pipe────      └─ shim  (one per attempt; own session)
                                          └─ command  (own process group)

Why a fork server: starting a fresh interpreter per run costs 70-100 ms; a
fork of a small, already-warm process costs about 1 ms. Why a fresh
interpreter for the server rather than a fork of the supervisor: the server
then holds only this module (about half the supervisor's memory), so each
fork, each shim's copy-on-write faults and each shim's exit cost less CPU;
and it inherits nothing but its three pipes (`pass_fds`), never
`supervisor.lock` or an SQLite handle, whenever it is (re)started. A shim
that inherited the lock's open file description would keep the store
"owned" after the supervisor died; each shim also closes every fd it did not
open itself.

Why a shim: it is the command's parent, so it sees the exit status even while
the supervisor is down, enforces the timeout, and writes `exit.json`
atomically; recovery then ingests that record (`read_exit_record`) or
re-adopts the live shim (`read_shim_record` + `shim_alive`/`launch_locked`).

Records live in a record directory per attempt, in a tree private to the
store that the command is never told about (not its run directory, state
directory or cwd), so a job cannot forge or destroy them:

- `shim.json`, the launch lock and started record. The server creates and
  flock()s it before it forks; the shim inherits that lock (its copy is
  close-on-exec, and the command gets none) and holds it until it exits;
  the server closes its own copy after the fork. The shim writes its pid and
  start time into it before the command starts. So after a lost reply from
  a dead server: lock held = a shim is alive; lock free + exit record = it
  finished; lock free + started record = it died, its command may have run;
  lock free and no record = nothing of the attempt ever ran.
- `exit.json`, how the attempt ended (tmp + fsync + rename).

The command's `stdout.log` and `stderr.log` are in its attempt directory
(`LaunchSpec.attempt_dir`), which the job may write.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import json
import os
import select
import signal
import stat as stat_module
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import FrameType
from typing import Any, NoReturn, Protocol

from wfsched.errors import OperationError

SHIM_RECORD = "shim.json"  # also the launch lock, see the module docstring
EXIT_RECORD = "exit.json"
_RECORD_MAX = 65536  # a record is a few hundred bytes; more is not one
STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"

OUTCOMES = frozenset({"exited", "signaled", "timeout", "cancelled", "spawn-failed"})

_to_json = json.JSONEncoder(separators=(",", ":")).encode  # one encoder, not one per call
_HEADER = struct.Struct("!I")  # length prefix of a request or reply
_PID = struct.Struct("=i")  # one reaped shim pid on the exit pipe
_SERVER_STOP_WAIT = 5.0  # seconds stop() waits for the server before SIGKILL
_SERVER_READY_WAIT = 60.0  # seconds start() waits for a new server (a loaded host is slow)
# Signals aimed at the supervisor or its terminal that the server must outlive
# (it keeps reporting exits while the supervisor drains); SIGTERM also stays
# blocked in it, see _serve.
_SERVER_IGNORES = frozenset({signal.SIGINT, signal.SIGHUP, signal.SIGTERM})
_KILLED_GROUP_WAIT = 5.0  # seconds a shim waits for a SIGKILLed group to vanish
_GROUP_POLL = 0.1  # re-check cadence while a terminated group drains
# poll() takes a C int of milliseconds (about 24.8 days): a longer timeout or
# kill_grace (definitions allow up to 3650d) is waited out in day-long polls.
_LONGEST_POLL = 86400.0
_REHEARSALS = 50  # see _rehearse
_SHIM_BROKEN = 70  # EX_SOFTWARE: the shim itself failed (see stderr.log)
_MAX_WAIT = 3600.0  # the shim's longest single poll: far below poll()'s int overflow
# Reading a record that fails with these is a resource fault of the reader
# (no descriptor left, a failing disk), never a verdict on the record.
_READ_AGAIN_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EIO, errno.ENOMEM})
_RECORD_RETRY_FIRST = 0.05  # seconds before a failed exit record is written again
_RECORD_RETRY_MAX = 5.0  # the backoff's cap: a freed disk is seen within seconds
# The errors that a full, read-only or failing disk (or a descriptor limit)
# gives: the shim keeps its exit code and tries again until they pass.
_RECORD_RETRY_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EMFILE, errno.ENFILE}
)
_LOG_CHECK_FIRST = 0.1  # seconds between log size checks while output grows
_LOG_CHECK_MAX = 2.0  # ... backing off to this while it does not
LOG_TRUNCATED = b"[wfsched: "
"""How a log begins once the shim cut it to max_log_bytes (the first line
says how many bytes of earlier output were dropped; rundirs.log_truncation)."""
_PR_SET_NAME = 15
_PR_SET_CHILD_SUBREAPER = 36


class LauncherError(OperationError, OSError):
    """The fork server cannot launch (gone, fork failed, bad request).

    An OSError too: to the caller it is one more way a process fails to start.
    """


class LauncherLost(LauncherError):
    """The fork server died while handling a launch: whether it forked the
    shim is unknown (an ambiguous launch). Never retry blindly: look at the
    attempt's launch lock and records first (`launch_locked`)."""


class AlreadyLaunched(LauncherError):
    """The server refused the launch: this attempt's shim holds its launch
    lock, or left a started record. Never "not started": adopt what is there."""


class RecordError(ValueError):
    """A record that cannot be read or is not a valid record (names the file)."""


class SpawnRefused(OSError):
    """The fork server is fine but could not fork (a process limit, out of
    memory): this launch failed, the next one may succeed. Carries the errno."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a shim needs; it crosses a pipe as JSON, so plain data only.

    `cwd=None` runs the command in the fork server's working directory, i.e.
    the supervisor's at `Launcher.start()`; `env` is passed as is (PATH in it
    is what finds `argv[0]`); `timeout=None` means no limit. `attempt_dir`
    gets the command's logs, `record_dir` (out of the job's reach) the
    shim's records.
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
    """A shim's identity: pid alone is reused by the kernel, pid + starttime is not."""

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
# /proc and records: used by the supervisor, recovery and the shim alike.


def _read_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, starttime) from /proc/<pid>/stat, or None if no such process."""
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
    return fields[0].decode(), int(fields[19])


def process_start_time(pid: int) -> int | None:
    """Clock ticks after boot at which `pid` started (zombies included); None if absent."""
    stat = _read_stat(pid)
    return None if stat is None else stat[1]


def shim_alive(handle: ShimHandle) -> bool:
    """True while that very process runs: same starttime (not a reused pid), not a zombie.

    A finished shim can stay a zombie for a while (the fork server reaps it,
    but after the supervisor died its new parent may never do so), so a zombie
    counts as gone.
    """
    stat = _read_stat(handle.pid)
    return stat is not None and stat[0] not in "ZX" and stat[1] == handle.start_time


def cancel_shim(handle: ShimHandle) -> bool:
    """SIGTERM the shim (never the command directly); returns whether it was signalled.

    The shim then terminates the command's process group (SIGTERM, kill_grace,
    SIGKILL) and records outcome "cancelled". The check and the kill go
    through one pidfd, so a pid reused between them cannot be hit.
    """
    try:
        pidfd = os.pidfd_open(handle.pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfd support: accept the tiny check-then-kill race
        if not shim_alive(handle):
            return False
        try:
            os.kill(handle.pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True
    try:
        if not shim_alive(handle):
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)


def session_members(sid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in session `sid`.

    A shim is a session leader (setsid) and its command's process group is in
    that session, so once the shim is dead this is what is left of its run.
    The kernel never hands out a pid that is still some session's id, so a
    dead shim's pid names its own session's leftovers and nothing else.
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
    (dead) `shim` led; False if nothing of that session is left.

    The shim's pid stays allocated while its session has members, so if a
    process holds that pid now it is either the shim itself (a zombie, same
    start time) or, the session having emptied, someone else who may lead a
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
    empty: an empty started record is a lock no shim has written yet).

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
    """The shim's started record (pid + start time); None if no shim wrote one,
    i.e. the command never started. RecordError if unreadable."""
    path = os.path.join(record_dir, SHIM_RECORD)
    data = _load_record(path, empty_is_absent=True)
    if data is None:
        return None
    return ShimHandle(
        pid=_field(data, "pid", (int,), path), start_time=_field(data, "start_time", (int,), path)
    )


def launch_locked(record_dir: str) -> bool:
    """Whether a shim of this attempt is alive: it holds the launch lock
    (`shim.json`) from its fork until it exits, dead or alive whatever its pid
    says. RecordError if the lock cannot be examined."""
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

    The shim renames a complete, fsynced file into place, so a partial file
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


def _write_exit_record(record_dir: str, data: dict[str, Any]) -> None:
    """tmp + fsync + rename + directory fsync: readers never see half a
    record, and it survives a power cut once the shim has exited."""
    path = os.path.join(record_dir, EXIT_RECORD)
    tmp = f"{path}.tmp"
    payload = _to_json(data).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        _write_all(fd, payload)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(record_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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


_WARM: dict[str, Any] = {"warm": True}
_WARM_BYTES = json.dumps(_WARM, separators=(",", ":")).encode()


def _read_message(fd: int) -> bytes | None:
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    return _read_exact(fd, _HEADER.unpack(header)[0])


def _send_message(fd: int, payload: dict[str, Any]) -> None:
    body = _to_json(payload).encode()
    _write_all(fd, _HEADER.pack(len(body)) + body)


# --------------------------------------------------------------------------
# The supervisor's side.


def _server_argv(req_r: int, reply_w: int, exit_w: int, fault: str = "") -> list[str]:
    """The fork server's command line: this interpreter, isolated (-I: no PYTHON*
    variables, no user site, no script directory on sys.path) and without site
    (-S: no site-packages, no .pth files, fewer modules and less memory).

    The directory holding the wfsched package is appended to sys.path, i.e.
    after the standard library so nothing there can shadow a stdlib module;
    that finds the package the supervisor itself runs, whether it comes from
    a venv, a plain or an editable install (whose finder hook needs site).
    """
    if not sys.executable:
        raise LauncherError("cannot start the fork server: no Python executable (sys.executable)")
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
        " from wfsched.process.launcher import _server_main;"
        " _server_main(*map(int, sys.argv[2:5]), sys.argv[5])"
    )
    fds = (str(req_r), str(reply_w), str(exit_w))
    return [sys.executable, *flags, "-c", code, package_parent, *fds, fault]


class ProcessControl(Protocol):
    """What the supervisor needs from process handling. `Launcher` is the
    production implementation; the tests drive the supervisor with a fake."""

    def start(self) -> None: ...
    def spawn(self, spec: LaunchSpec) -> ShimHandle: ...
    def fileno(self) -> int: ...
    def warm(self) -> None: ...
    def probe_fork(self) -> None: ...
    def drain_exits(self) -> list[int]: ...
    def alive(self, handle: ShimHandle) -> bool: ...
    def cancel(self, handle: ShimHandle) -> bool: ...
    def read_exit(self, record_dir: str) -> ExitRecord | None: ...
    def read_shim(self, record_dir: str) -> ShimHandle | None: ...
    def launch_locked(self, record_dir: str) -> bool: ...
    def signal_session(self, shim: ShimHandle, signum: int) -> bool: ...
    def stop(self) -> None: ...


class Launcher:
    """Client of the fork server. Thread-safe; one server per Launcher.

    The server is a fresh interpreter that inherits only its three pipes, so
    `start()` may be called at any time, with the lock held, SQLite open or
    threads running (the supervisor calls it again to replace a dead server).

    No other process may inherit the request pipe (it is close-on-exec; only a
    bare `os.fork()` elsewhere in the supervisor would leak it), because the
    server exits when that pipe reaches EOF, i.e. when the supervisor dies.

    It implements `ProcessControl`. `fault` (crash tests only: a
    `wfsched.faults` spec at which the server SIGKILLs itself) goes to the
    first server alone: a replacement that killed itself at the same point
    would never let a launch through.
    """

    def __init__(self, fault: str = "") -> None:
        self._fault = fault
        self._lock = threading.Lock()
        self._server: subprocess.Popen[bytes] | None = None
        self._req_w = -1
        self._reply_r = -1
        self._exit_r = -1
        self._partial = b""  # a pid record split across reads

    @property
    def server_pid(self) -> int | None:
        return None if self._server is None else self._server.pid

    def __enter__(self) -> Launcher:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the fork server and wait until it is ready to launch.

        One interpreter start (tens of milliseconds). LauncherError if the
        server cannot start; its own traceback, if any, is on our stderr.
        """
        with self._lock:
            if self._server is not None:
                raise RuntimeError("Launcher already started")
            fault, self._fault = self._fault, ""
            req_r, req_w = _pipe()
            reply_r, reply_w = _pipe()
            exit_r, exit_w = _pipe()
            ours = (req_w, reply_r, exit_r)
            try:
                server = _start_server(req_r, reply_w, exit_w, fault)
            except BaseException:
                for fd in ours:
                    os.close(fd)
                raise
            finally:
                for fd in (req_r, reply_w, exit_w):
                    os.close(fd)
            problem = _await_ready(server, reply_r, _SERVER_READY_WAIT)
            if problem is not None:
                os.close(req_w)  # EOF: the server exits if it ever gets that far
                with contextlib.suppress(OSError):
                    server.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    server.wait(_SERVER_STOP_WAIT)
                os.close(reply_r)
                os.close(exit_r)
                raise LauncherError(f"the fork server did not start: {problem}")
            os.set_blocking(exit_r, False)
            self._server = server
            self._req_w, self._reply_r, self._exit_r = ours
            self._partial = b""

    def spawn(self, spec: LaunchSpec) -> ShimHandle:
        """Have the server fork a shim for `spec`; returns once the shim exists.

        The exit of the shim is reported later through `fileno()` /
        `drain_exits()`; its outcome is in `exit.json`. LauncherLost if the
        server died meanwhile (whether the shim was forked is then unknown);
        any other LauncherError means no shim was started.
        """
        for directory in (spec.attempt_dir, spec.record_dir):
            if not os.path.isdir(directory):
                raise LauncherError(f"{directory}: directory does not exist")
        request = dict(vars(spec))  # not asdict(): that deep-copies, 20-80 us per launch
        # Records are for recovery: store no path relative to some cwd.
        request["attempt_dir"] = os.path.abspath(spec.attempt_dir)
        request["record_dir"] = os.path.abspath(spec.record_dir)
        request["stdin_path"] = os.path.abspath(spec.stdin_path)
        with self._lock:
            if self._server is None:
                raise LauncherError("the launcher is not started")
            try:
                _send_message(self._req_w, request)
                reply = _read_message(self._reply_r)
            except OSError as exc:  # EPIPE: the server is gone
                raise LauncherLost(f"the fork server is gone ({exc})") from exc
        if reply is None:
            raise LauncherLost("the fork server exited while launching")
        data = json.loads(reply)
        if data.get("launched"):
            raise AlreadyLaunched(f"cannot launch {spec.run_id}: {data['error']}")
        if "errno" in data:
            raise SpawnRefused(data["errno"], f"cannot launch {spec.run_id}: {data['error']}")
        if "error" in data:
            raise LauncherError(f"cannot launch {spec.run_id}: {data['error']}")
        return ShimHandle(pid=data["pid"], start_time=data["start_time"])

    def warm(self) -> None:
        """Have the server fork (and reap) a throwaway child now.

        On a virtual machine the first fork after an idle spell costs
        milliseconds; the supervisor calls this just before a due instant so
        the launch itself finds the path warm. Best effort: errors are for
        `spawn()` to report.
        """
        with self._lock:
            if self._server is None:
                return
            with contextlib.suppress(OSError):
                _send_message(self._req_w, _WARM)
                _read_message(self._reply_r)

    def probe_fork(self) -> None:
        """Whether the server can fork right now (a throwaway child, like
        warm()): SpawnRefused if not, LauncherError if the server is gone.
        The supervisor's probe while a process-limit episode lasts."""
        with self._lock:
            if self._server is None:
                raise LauncherError("the launcher is not started")
            try:
                _send_message(self._req_w, _WARM)
                reply = _read_message(self._reply_r)
            except OSError as exc:
                raise LauncherError(f"the fork server is gone ({exc})") from exc
        if reply is None:
            raise LauncherError("the fork server exited; runs cannot be launched")
        data = json.loads(reply)
        if "errno" in data:
            raise SpawnRefused(data["errno"], f"cannot fork: {data['error']}")

    def fileno(self) -> int:
        """Readable once the server reported reaped shims (or exited)."""
        if self._exit_r < 0:
            raise ValueError("the launcher is not started")
        return self._exit_r

    def drain_exits(self) -> list[int]:
        """Pids of shims reaped since the last call; never blocks.

        Raises LauncherError when the server has exited unexpectedly (its pipe
        is at EOF and would stay readable): the supervisor then must stop() and
        start() again, or stop; shims already running are unaffected, but their
        exits are no longer reported here (poll shim_alive / exit records).
        """
        if self._exit_r < 0:
            return []
        data, eof = self._partial, False
        while True:
            try:
                chunk = os.read(self._exit_r, 65536)
            except BlockingIOError:
                break
            if not chunk:
                eof = True
                break
            data += chunk
        whole = len(data) - len(data) % _PID.size
        self._partial = data[whole:]
        pids = [pid for (pid,) in _PID.iter_unpack(data[:whole])]
        if eof and not pids:
            raise LauncherError("the fork server exited unexpectedly; runs cannot be launched")
        return pids

    # The record and signal operations need no server; they are methods here
    # so the supervisor reaches all process handling through one object.

    def alive(self, handle: ShimHandle) -> bool:
        return shim_alive(handle)

    def cancel(self, handle: ShimHandle) -> bool:
        return cancel_shim(handle)

    def read_exit(self, record_dir: str) -> ExitRecord | None:
        return read_exit_record(record_dir)

    def read_shim(self, record_dir: str) -> ShimHandle | None:
        return read_shim_record(record_dir)

    def launch_locked(self, record_dir: str) -> bool:
        return launch_locked(record_dir)

    def signal_session(self, shim: ShimHandle, signum: int) -> bool:
        return signal_session(shim, signum)

    def stop(self) -> None:
        """End the server (idempotent); running shims are not touched.

        Closing the request pipe is the stop signal, the same EOF the server
        sees when the supervisor dies. Unregister `fileno()` from selectors
        first: it is closed here.
        """
        with self._lock:
            server = self._server
            if server is None:
                return
            os.close(self._req_w)
            try:
                server.wait(_SERVER_STOP_WAIT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    server.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    server.wait(_SERVER_STOP_WAIT)  # stuck in the kernel: give up on it
            os.close(self._reply_r)
            os.close(self._exit_r)
            self._server = None
            self._req_w = self._reply_r = self._exit_r = -1


def _pipe() -> tuple[int, int]:
    """os.pipe() on fds above 2: with our stdin or stdout closed, a pipe could get
    fd 0 or 1, where the server's /dev/null would then replace it."""
    ends = []
    for fd in os.pipe():
        if fd <= 2:
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(fd)
            fd = moved
        ends.append(fd)
    return ends[0], ends[1]


def _start_server(req_r: int, reply_w: int, exit_w: int, fault: str) -> subprocess.Popen[bytes]:
    """Popen the server with SIGTERM, SIGINT and SIGHUP blocked: the mask survives
    exec, so a signal meant for the supervisor (Ctrl-C, systemd's stop) stays
    pending until the server has chosen to ignore it, instead of killing it
    while it starts up."""
    argv = _server_argv(req_r, reply_w, exit_w, fault)
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SERVER_IGNORES)
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=None,  # ours: where a server traceback belongs
            pass_fds=(req_r, reply_w, exit_w),
            close_fds=True,
        )
    except OSError as exc:
        raise LauncherError(f"cannot start the fork server ({exc})") from exc
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def _await_ready(server: subprocess.Popen[bytes], reply_r: int, timeout: float) -> str | None:
    """None once the server said it is ready, else what went wrong."""
    readable, _, _ = select.select([reply_r], [], [], timeout)
    if not readable:
        return f"not ready after {timeout:g}s"
    message = _read_message(reply_r)
    if message is None:
        try:
            status = server.wait(_SERVER_STOP_WAIT)
        except subprocess.TimeoutExpired:
            return "it closed its pipes"
        return f"it exited with status {status} (its error, if any, is on stderr above)"
    if json.loads(message) != {"ready": True}:
        return f"unexpected first message {message[:100]!r}"
    return None


# --------------------------------------------------------------------------
# Helpers shared by the server and the shim.


def _load_prctl() -> Any:
    """libc's prctl() through ctypes, or None. Resolved once in the server: ctypes
    looks a symbol up on first attribute access, which in a shim would be after
    the fork, i.e. once per run."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (ImportError, OSError, AttributeError):
        return None


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


def _noop_handler(signum: int, frame: FrameType | None) -> None:
    """Installed only so the signal reaches the wakeup fd; the loop does the work."""


# --------------------------------------------------------------------------
# The fork server: `python -I -S -c ...` started by Launcher.start().


def _server_main(req_r: int, reply_w: int, exit_w: int, fault: str = "") -> NoReturn:
    _exit_after(_serve, req_r, reply_w, exit_w, fault)


def _exit_after(work: Callable[..., None], *args: Any) -> NoReturn:
    """Run the server's or a shim's body, then `os._exit`: no interpreter
    teardown (nothing to flush or finalize), and a fork never unwinds into
    its parent's loop. A crash is printed to fd 2 (a shim's stderr.log)."""
    code = _SHIM_BROKEN
    try:
        work(*args)
        code = 0
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(code)


def _serve(req_r: int, reply_w: int, exit_w: int, fault_spec: str) -> None:
    try:
        _serve_requests(req_r, reply_w, exit_w, fault_spec)
    except BrokenPipeError:
        return  # the supervisor is gone (e.g. stopped while we started): nothing to report


def _serve_requests(req_r: int, reply_w: int, exit_w: int, fault_spec: str) -> None:
    from wfsched.faults import fault_at, no_fault

    fault = fault_at(fault_spec) if fault_spec else no_fault
    supervisor = os.getppid()
    prctl = _load_prctl()
    _set_comm(prctl, b"wfsched-launch")
    # The server lives exactly as long as its request pipe, so it ignores the
    # terminal's SIGINT/SIGHUP and systemd's SIGTERM (it must keep reporting
    # exits while the supervisor drains); Launcher.start() had them blocked
    # until now. SIGTERM stays blocked so each shim is born with it blocked:
    # an early cancel stays pending until the shim's handler is in place
    # instead of killing it before it writes any record.
    for signum in _SERVER_IGNORES:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, {signal.SIGTERM})
    # Those and whatever the supervisor inherited ignored (nohup...), computed
    # once here rather than per shim: see _run_shim. Not Python's own SIGPIPE
    # and SIGXFSZ: Popen restores those to default in the command itself.
    ignored = frozenset(
        int(signum)
        for signum in signal.valid_signals()
        if signum not in (signal.SIGTERM, signal.SIGPIPE, signal.SIGXFSZ)
        and signal.getsignal(signum) == signal.SIG_IGN
    )
    # Popen gave us /dev/null as stdin and stdout (each shim relies on fd 1
    # being it) and the supervisor's stderr, kept for a traceback; and only
    # our pipes besides, but close anything else regardless.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    _close_fds_except({0, 1, 2, req_r, reply_w, exit_w})
    _rehearse()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, _noop_handler)
    # Never block on the exit pipe: a supervisor that is busy in spawn() is
    # not reading it, and a full pipe would then deadlock both processes.
    os.set_blocking(exit_w, False)
    # Everything alive now lives as long as the server: keep it out of the
    # collector, whose passes would otherwise touch (and, right after a fork,
    # copy) every page that holds an object.
    gc.collect()
    gc.freeze()
    _send_message(reply_w, {"ready": True})
    backlog = bytearray()
    poller = select.poll()
    poller.register(req_r, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    watching_exit_w = False
    while True:
        if bool(backlog) != watching_exit_w:
            if backlog:
                poller.register(exit_w, select.POLLOUT)
            else:
                poller.unregister(exit_w)
            watching_exit_w = not watching_exit_w
        events = dict(poller.poll())
        if wake_r in events:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 4096):
                    pass
        if req_r in events:
            request = _read_message(req_r)
            if request is None:
                return  # the supervisor closed the pipe or died; shims live on
            if request == _WARM_BYTES:
                _send_message(reply_w, _warm_fork())
            elif os.getppid() != supervisor:
                # Our supervisor died and left this request behind: a new one
                # may already be recovering this attempt, so never fork it.
                return
            else:
                _send_message(reply_w, _fork_shim(request, prctl, ignored, fault))
                fault("launcher-after-reply")
        _reap_shims(backlog)
        if backlog:
            fault("launcher-exit-report")
            try:
                del backlog[: os.write(exit_w, backlog)]
            except BlockingIOError:
                pass
            except BrokenPipeError:
                backlog.clear()  # nobody listens any more; EOF on requests follows


def _warm_fork() -> dict[str, Any]:
    """Fork a child that exits at once, and reap it here (it is no shim, so
    it is never reported): the next real fork finds the path warm. A fork
    that fails (a process limit) is an answer, never the server's death."""
    try:
        pid = os.fork()
    except OSError as exc:
        return {"error": f"fork failed ({exc.strerror or exc})", "errno": exc.errno}
    if pid == 0:  # pragma: no cover - the child only exits
        os._exit(0)
    os.waitpid(pid, 0)
    return {"warm": True}


def _rehearse() -> None:
    """Start a command the way each shim does, a number of times, in the server
    itself (it fails at exec: no external program is needed).

    Every shim is a copy-on-write fork of the server, and a page the shim
    writes costs it a fault and a copy. Code runs cold the first few times:
    CPython then rewrites its bytecode into specialized forms and fills
    lookup caches, i.e. writes. Rehearsed here, that happens once instead of
    in every shim (measured: fewer faults and less CPU per launch).
    """
    argv = (os.path.join(os.devnull, "wfsched-rehearsal"),)  # ENOTDIR, always
    for _ in range(_REHEARSALS):
        with contextlib.suppress(OSError):
            subprocess.Popen(
                argv, env={}, stdin=0, stdout=1, stderr=2, close_fds=True, process_group=0
            )


def _reap_shims(backlog: bytearray) -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        backlog += _PID.pack(pid)


def _fork_shim(
    request: bytes, prctl: Any, ignored: frozenset[int], fault: Callable[[str], None]
) -> dict[str, Any]:
    """Fork one shim; returns the reply for the supervisor.

    The attempt's launch lock is taken before the fork and handed to the
    shim (see the module docstring): a lock already held, or a started
    record already written, means this attempt was launched before, and it
    is refused rather than started twice.

    Forked on demand. A spare shim forked ahead of need (fork and set-up off
    the launch path, the request handed over a pipe) was measured and
    dropped: more CPU per launch, slower bursts, and on an idle host the
    latency is dominated by waking cold processes, not by the fork.
    """
    try:
        spec = LaunchSpec.from_wire(json.loads(request))
    except (ValueError, TypeError, KeyError) as exc:
        return {"error": f"malformed launch request ({exc})"}
    lock_path = os.path.join(spec.record_dir, SHIM_RECORD)
    try:
        lock_fd = os.open(
            lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600
        )
    except OSError as exc:
        return {"error": f"cannot create the launch lock {lock_path} ({_why(exc)})"}
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        started = os.fstat(lock_fd).st_size > 0
    except BlockingIOError:
        os.close(lock_fd)
        return {"error": f"attempt {spec.attempt} of {spec.run_id} is running", "launched": True}
    except OSError as exc:
        os.close(lock_fd)
        return {"error": f"cannot take the launch lock {lock_path} ({_why(exc)})"}
    if started:
        os.close(lock_fd)
        return {"error": f"attempt {spec.attempt} of {spec.run_id} was started", "launched": True}
    fault("launcher-before-fork")
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(lock_fd)
        return {"error": f"fork failed ({_why(exc)})", "errno": exc.errno}
    if pid == 0:  # pragma: no cover - runs in the shim
        _shim_main(spec, prctl, ignored, lock_fd)
    os.close(lock_fd)  # the shim holds the lock now
    fault("launcher-after-fork")
    # The child exists (at worst as an unreaped zombie), so this cannot miss.
    return {"pid": pid, "start_time": process_start_time(pid) or 0}


# --------------------------------------------------------------------------
# The shim: one per attempt, a grandchild of the supervisor.


def _shim_main(spec: LaunchSpec, prctl: Any, ignored: frozenset[int], lock_fd: int) -> NoReturn:
    _exit_after(_run_shim, spec, prctl, ignored, lock_fd)


class _Shim:
    """Process-wide state of a shim (it runs exactly one command)."""

    cancelled = False  # set by the SIGTERM handler, acted on by the wait loop
    # Kept referenced until os._exit: a collected Popen whose child it never
    # reaped itself would warn into stderr.log and queue itself for reaping.
    command: subprocess.Popen[bytes] | None = None


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _Shim.cancelled = True


def _run_shim(spec: LaunchSpec, prctl: Any, ignored: frozenset[int], lock_fd: int) -> None:
    gc.disable()  # short-lived: and every collection would copy shared pages
    # Our own wakeup pipe replaces the server's before that is closed. SIGCHLD
    # keeps the server's handler (_noop_handler), which only wakes the poll.
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    os.setsid()
    _set_comm(prctl, b"wfsched-shim")
    os.dup2(1, 2)  # /dev/null (see _serve) until stderr.log; not the supervisor's stderr
    # The server's pipes, and anything else: the shim opens what it needs itself.
    # The launch lock stays open (close-on-exec: the command never gets it)
    # until the shim exits: its being held is what says this shim is alive.
    _close_fds_except({0, 1, 2, wake_r, wake_w, lock_fd})
    # As subreaper the shim inherits the command's orphaned descendants, reaps
    # them, and so can tell when a terminated group is really empty (an init
    # that never reaps would otherwise leave zombies that keep the group "alive").
    subreaper = prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    signal.signal(signal.SIGTERM, _on_sigterm)
    # Ignored dispositions survive exec, handled ones are reset to default:
    # catching what the server ignores keeps the shim deaf to them (it has no
    # terminal anyway) while the command starts with defaults.
    for signum in ignored:
        signal.signal(signum, _noop_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())  # a pending cancel lands now

    started_at = time.time()
    try:
        _write_started_record(spec, lock_fd)
    except OSError as exc:
        why = f"cannot write the started record ({_why(exc)}); the command was not started"
        _finish(spec, "spawn-failed", None, None, why, started_at)
        return
    if _Shim.cancelled:
        _finish(spec, "cancelled", None, None, "cancelled before the command started", started_at)
        return
    try:
        _Shim.command = _start_command(spec)
    except (OSError, ValueError) as exc:
        _finish(spec, "spawn-failed", None, None, _spawn_failure(spec, exc), started_at)
        return
    _supervise_command(spec, _Shim.command.pid, wake_r, subreaper, started_at)


def _write_started_record(spec: LaunchSpec, lock_fd: int) -> None:
    """pid + start time into the launch lock file, before the command starts:
    with the lock free afterwards, a record means "the command may have run"
    and no record "it never did". One write() of a few bytes, no fsync (after
    a power cut nothing runs any more, and the database has the pid too)."""
    pid = os.getpid()
    record = {
        "pid": pid,
        "start_time": process_start_time(pid),
        "run_id": spec.run_id,
        "attempt": spec.attempt,
    }
    _write_all(lock_fd, _to_json(record).encode())


def _start_command(spec: LaunchSpec) -> subprocess.Popen[bytes]:
    """Spawn the command; OSError/ValueError mean it never ran.

    Popen searches spec.env's PATH, applies cwd in the child, restores the
    SIGPIPE and SIGXFSZ that Python ignores to default (restore_signals), and
    reports exec and chdir failures as OSError naming the file. Measured
    against the alternatives in a shim: os.posix_spawn costs 0.1-0.3 ms less
    but glibc's leaves its internal signals (32, 33) ignored in the child, and
    ignored dispositions survive exec; os.fork() + os.execve() costs more
    (a fork copies the shim's page tables and makes it fault again on every
    page it then writes, where Popen uses vfork).
    """
    if not spec.argv:
        raise ValueError("empty command")
    try:
        stdin_fd = os.open(spec.stdin_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"cannot open input {spec.stdin_path!r}: {exc.strerror}") from None
    log_flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    out_fd = os.open(os.path.join(spec.attempt_dir, STDOUT_LOG), log_flags, 0o644)
    err_fd = os.open(os.path.join(spec.attempt_dir, STDERR_LOG), log_flags, 0o644)
    os.dup2(err_fd, 2, inheritable=False)  # a shim traceback lands where operators look
    proc = subprocess.Popen(
        spec.argv,
        cwd=spec.cwd,
        env=spec.env,
        stdin=stdin_fd,
        stdout=out_fd,
        stderr=err_fd,
        close_fds=True,
        process_group=0,  # its own group: the shim can killpg it and survive
    )
    for fd in (stdin_fd, out_fd, err_fd):
        os.close(fd)
    return proc


def _spawn_failure(spec: LaunchSpec, exc: Exception) -> str:
    if not isinstance(exc, OSError):
        return str(exc)
    why = exc.strerror or str(exc)
    if isinstance(exc.filename, str) and os.path.dirname(exc.filename) == spec.attempt_dir:
        return f"cannot open {exc.filename!r}: {why}"
    if spec.cwd is not None and exc.filename == spec.cwd:
        return f"cannot change to directory {spec.cwd!r}: {why}"
    return f"cannot execute {spec.argv[0]!r}: {why}"


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


def _supervise_command(
    spec: LaunchSpec, leader: int, wake_r: int, subreaper: bool, started_at: float
) -> None:
    """Wait for the command, enforcing timeout and cancellation, then record.

    Event-driven: SIGCHLD and SIGTERM wake the poll through the wakeup fd, so
    an idle shim costs no CPU however long the command runs.

    After a normal exit the leader's background children are left alone (a
    job may mean to start a daemon, as under cron). Terminating a run
    (timeout, cancel) takes the whole process group: SIGTERM, then after
    kill_grace SIGKILL, and the record is written once the group is gone.
    """
    poller = select.poll()
    poller.register(wake_r, select.POLLIN)
    clock = time.monotonic
    cap = None if spec.max_log_bytes is None else _LogCap(spec.attempt_dir, spec.max_log_bytes)
    timeout_at = None if spec.timeout is None else clock() + spec.timeout
    status: int | None = None
    outcome: str | None = None  # "timeout" | "cancelled" once terminating
    kill_at: float | None = None  # when SIGKILL follows SIGTERM
    give_up_at: float | None = None  # after SIGKILL, stop waiting for D-state stragglers
    while True:
        while True:  # reap the leader and, as subreaper, orphaned descendants
            try:
                pid, wstatus = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == leader:
                status = wstatus
        now = clock()
        if outcome is None:
            if status is not None:
                break
            if _Shim.cancelled or (timeout_at is not None and now >= timeout_at):
                outcome = "cancelled" if _Shim.cancelled else "timeout"
                _signal_group(leader, signal.SIGTERM)
                kill_at = now + spec.kill_grace
        if outcome is not None:
            if status is not None and not _group_alive(leader):
                break
            if give_up_at is None and kill_at is not None and now >= kill_at:
                _signal_group(leader, signal.SIGKILL)
                give_up_at = now + _KILLED_GROUP_WAIT
            if give_up_at is not None and now >= give_up_at:
                break  # SIGKILL was sent; a process stuck in the kernel is not ours to wait for
        check_at = None
        if cap is not None:
            cap.check(now)
            check_at = cap.next_at
        deadlines = [
            d for d in (timeout_at, kill_at, give_up_at, check_at) if d is not None and d > now
        ]
        wait = min(min(deadlines) - now, _LONGEST_POLL) if deadlines else None
        if outcome is not None and (status is not None or not subreaper):
            # Only the leader's exit is an event; the rest of the group is polled.
            wait = _GROUP_POLL if wait is None else min(wait, _GROUP_POLL)
        # Clamped: a timeout of years must wait in pieces, never overflow poll().
        wait = _MAX_WAIT if wait is None else min(wait, _MAX_WAIT)
        poller.poll(max(1, int(wait * 1000) + 1))
        with contextlib.suppress(BlockingIOError):
            while os.read(wake_r, 4096):
                pass
    if cap is not None:
        cap.check(clock(), final=True)
    ending = exit_outcome(
        status,
        outcome,
        timeout=spec.timeout,
        kill_grace=spec.kill_grace,
        killed=give_up_at is not None,
    )
    _finish(spec, *ending, started_at)


def exit_outcome(
    status: int | None,
    terminated: str | None,
    *,
    timeout: int | None,
    kill_grace: int,
    killed: bool,
) -> tuple[str, int | None, int | None, str | None]:
    """(outcome, exit code, signal, reason) of an attempt, as `exit.json` says it.

    `status` is the leader's wait status (None when it was never reaped:
    stuck in the kernel after SIGKILL); `terminated` is "timeout" or
    "cancelled" when the shim ended the group, and `killed` says SIGKILL
    followed the grace. Pure, so the words the operator reads are tested
    without running a command.
    """
    exit_code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None
    signum = os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None
    if terminated is not None:
        what = (
            "timed out after " + _duration(timeout or 0) if terminated == "timeout" else "cancelled"
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

    The command writes its logs directly (no copy through the shim: a
    background process the job leaves behind keeps writing to them as under
    cron). The shim checks their sizes every 0.1 s while they grow, backing
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
                    continue  # not the log the shim opened: leave it be
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


def _finish(
    spec: LaunchSpec,
    outcome: str,
    exit_code: int | None,
    signum: int | None,
    reason: str | None,
    started_at: float,
) -> None:
    record = {  # the fields of ExitRecord (not asdict(): a deep copy), plus the run
        "attempt": spec.attempt,
        "outcome": outcome,
        "exit_code": exit_code,
        "signal": signum,
        "reason": reason,
        "started_at": started_at,
        "finished_at": time.time(),
        "run_id": spec.run_id,
    }
    delay = _RECORD_RETRY_FIRST
    while True:
        try:
            _write_exit_record(spec.record_dir, record)
            return
        except OSError as exc:
            if exc.errno not in _RECORD_RETRY_ERRNOS:
                raise
        # The exit code lives in this process until the record is on disk:
        # the supervisor sees the shim alive and keeps waiting for it.
        time.sleep(delay)
        delay = min(delay * 2, _RECORD_RETRY_MAX)


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
