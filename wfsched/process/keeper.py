"""The run keeper: one process per store directory on a host, the parent of
every command wfsched starts there. It knows nothing of the store: it takes
requests on a Unix socket (`keeper.sock` in the store's local directory),
spawns commands, enforces their timeouts, kills process groups, and writes
each attempt's exit record into the private record tree; the supervisor (or
whoever connects) records the rest.

Why a keeper rather than a Python shim per run: a forked shim cost several
milliseconds of CPU per run (a fork of an interpreter, its copy-on-write
faults, its own exit); the keeper about a quarter of that (a vfork spawn,
one wait, one record); docs/architecture.md has the figures.

It outlives the supervisor: started detached (its own session) by the first
`Launcher.start()`, it keeps parenting runs, enforcing their timeouts and
writing their exit records while no supervisor runs, and the next supervisor
re-attaches through the socket. It exits by itself once it has neither a
run nor a client for `_IDLE_EXIT` seconds, and one `keeper.lock` (flock,
held for life) keeps it alone per directory.

Protocol: length-prefixed JSON messages (`launcher._send_message`), one
reply per request, in order, on a connection: `hello` (optionally
subscribing the connection to exit events, `{"exited": [pid, ...]}`, sent
once each attempt's exit record is on disk), `spawn`, `cancel`, `signal`,
`list`, `held` (does it still hold an attempt, by record directory),
`warm` (a no-op: the round trip wakes the keeper before a due instant),
`probe` (a throwaway fork: can it fork now?) and `shutdown` (take
no new client or launch, exit once the last run is recorded). Peers of
another uid are refused.

Per attempt the launch lock and started record are `shim.json` in its record
directory, as the records module docstring says: the keeper takes the flock
before anything else and holds it until the exit record is on disk, so the
lock is free exactly when the attempt's end is recorded or its keeper died.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import heapq
import json
import os
import select
import signal
import socket
import struct
import subprocess
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, NoReturn

from wfsched.process.launcher import (
    _KILLED_GROUP_WAIT,
    _RECORD_RETRY_ERRNOS,
    _RECORD_RETRY_FIRST,
    _RECORD_RETRY_MAX,
    KEEPER_LOCK,
    KEEPER_PROTOCOL,
    KEEPER_SOCKET,
    SHIM_RECORD,
    STDERR_LOG,
    STDOUT_LOG,
    LaunchSpec,
    _close_fds_except,
    _group_alive,
    _LogCap,
    _read_message,
    _send_message,
    _set_comm,
    _signal_group,
    _to_json,
    _why,
    _write_all,
    _write_exit_records,
    blake2b,
    exit_outcome,
    launch_fingerprint,
    process_start_time,
)

_IDLE_EXIT = 1.0  # seconds without runs or clients before the keeper exits
_LOCK_WAIT = 5.0  # seconds a new keeper waits for a dying one's keeper.lock
_GROUP_POLL = 0.1  # re-check cadence while a terminated group drains
_MAX_WAIT = 3600.0  # the longest single poll: far below poll()'s int overflow
_REQUESTS_PER_TURN = 16  # requests served per client per turn of the loop (a spawn window)
_STARTED_SIZE = 512  # both started records are padded to this: one pwrite replaces the other
_PR_SET_CHILD_SUBREAPER = 36
_SO_PEERCRED = struct.Struct("3i")
_MAX_CANCEL_REASON = 500  # characters of a canceller's reason kept in the exit record


@dataclass
class _Run:
    """One attempt the keeper parents (`key` is the command's pid; a
    negative key is an attempt whose command never started)."""

    spec: LaunchSpec
    key: int
    start_time: int
    lock_fd: int
    started_at: float
    timeout_at: float | None
    cap: _LogCap | None
    terminating: str | None = None  # "timeout" | "cancelled"
    cancel_reason: str | None = None  # the canceller's words, into the exit record
    status: int | None = None  # the leader's wait status once known
    kill_at: float | None = None
    give_up_at: float | None = None
    record: dict[str, Any] | None = None  # the exit record until it is on disk
    retry_at: float = 0.0
    retry_delay: float = _RECORD_RETRY_FIRST
    wake_at: float | None = None  # its live entry in Keeper.timers
    queued: bool = False  # its exit record is in Keeper.pending (this turn's batch)


@dataclass
class _Client:
    sock: socket.socket
    events: bool = False
    backlog: bytearray = field(default_factory=bytearray)
    probe: Any = None  # a select.poll of `sock` alone, made when first needed

    def hung_up(self) -> bool:
        """Whether the client closed its end (a dead supervisor): the kernel
        says so at once (POLLHUP), while requests it sent may still wait
        unread on our side."""
        if self.probe is None:
            self.probe = select.poll()
            self.probe.register(self.sock, select.POLLIN)
        return any(events & select.POLLHUP for _, events in self.probe.poll(0))


def _noop(signum: int, frame: FrameType | None) -> None:
    """Installed so a signal only wakes the loop (through the wakeup fd), and
    so that, unlike an ignored one, it is reset to default in the commands."""


def main(directory: str, fault_spec: str = "") -> NoReturn:
    """Entry point of `python -I -S -c ...` (see `launcher._keeper_argv`)."""
    code = 70
    try:
        keeper = Keeper(directory, fault_spec)
    except OSError as exc:  # its directory: one line, the launcher reports the rest
        with contextlib.suppress(BaseException):
            _write_all(2, f"wfsched-keeper: cannot start in {directory}: {exc}\n".encode())
        os._exit(code)
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
        os._exit(code)
    try:
        keeper.serve()
        code = 0
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        os._exit(code)


class Keeper:
    def __init__(self, directory: str, fault_spec: str) -> None:
        from wfsched.faults import fault_at, no_fault

        self.fault: Callable[[str], None] = fault_at(fault_spec) if fault_spec else no_fault
        self.directory = directory
        self.pid = os.getpid()
        self.start_time = process_start_time(self.pid) or 0
        self.runs: dict[int, _Run] = {}
        self.timers: list[tuple[float, int, int]] = []  # (when, tie-breaker, run key)
        self._seq = 0
        self.exited: list[int] = []  # recorded this turn, reported at its end
        self.pending: list[_Run] = []  # exit records of this turn, written as one batch
        self.clients: dict[int, _Client] = {}
        self.shutting_down = False
        self.idle_since = time.monotonic()
        self._unstarted = 0
        blake2b()  # loaded now, not by the first launch (`launch_fingerprint`)
        self._prepare_process()
        self.lock_fd = self._take_keeper_lock()
        # The directory stays open: a long path is bound through it, and the
        # socket is unlinked through it at exit.
        self.dir_fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self.path = os.path.join(directory, KEEPER_SOCKET)
        if len(self.path.encode()) >= 100:
            self.path = f"/proc/self/fd/{self.dir_fd}/{KEEPER_SOCKET}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(KEEPER_SOCKET, dir_fd=self.dir_fd)  # a dead keeper's: we hold keeper.lock
        # Never pin the directory it was started in (commands get their cwd
        # from each request): it may outlive that directory by far.
        os.chdir("/")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.listener.bind(self.path)
        finally:
            os.umask(old)
        self.listener.listen(128)
        self.listener.setblocking(False)

    def _prepare_process(self) -> None:
        try:
            import ctypes

            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (ImportError, OSError, AttributeError):
            prctl = None
        _set_comm(prctl, b"wfsched-keeper")
        # As subreaper the keeper inherits the commands' orphaned
        # descendants and reaps them, so a terminated group really empties.
        if prctl is not None:
            prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # Dispositions: handled, never ignored (ignored ones survive exec
        # into the commands; handled ones are reset to default there). SIGINT,
        # SIGHUP and SIGTERM are aimed at the supervisor or its terminal: the
        # keeper outlives them. Python's own SIGPIPE/SIGXFSZ are restored in
        # each command by Popen.
        for signum in signal.valid_signals():
            if signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGKILL, signal.SIGSTOP):
                continue
            with contextlib.suppress(OSError, ValueError):
                if (
                    signum
                    in (
                        signal.SIGINT,
                        signal.SIGHUP,
                        signal.SIGTERM,
                        signal.SIGCHLD,
                    )
                    or signal.getsignal(signum) == signal.SIG_IGN
                ):
                    signal.signal(signum, _noop)
        self.wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        self._wake_w = wake_w
        # The launcher blocked these while we started; commands inherit the mask.
        signal.pthread_sigmask(signal.SIG_SETMASK, set())

    def _take_keeper_lock(self) -> int:
        path = os.path.join(self.directory, KEEPER_LOCK)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        deadline = time.monotonic() + _LOCK_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    # One line (main): the launcher then attaches to that keeper.
                    raise OSError(errno.EBUSY, "another keeper holds it", path) from None
                time.sleep(0.01)

    # -- the loop ---------------------------------------------------------------

    def serve(self) -> None:
        ready = json.dumps({"ready": True, "pid": self.pid}).encode() + b"\n"
        _write_all(1, ready)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)  # stdout was the ready pipe; stderr stays (tracebacks)
        keep = {0, 1, 2, self.wake_r, self._wake_w, self.lock_fd, self.dir_fd}
        keep.add(self.listener.fileno())
        _close_fds_except(keep)
        gc.collect()
        gc.freeze()  # long-lived objects stay out of every later collection
        self.poller = select.poll()
        self.poller.register(self.listener.fileno(), select.POLLIN)
        self.poller.register(self.wake_r, select.POLLIN)
        clock = time.monotonic
        while True:
            now = clock()
            self._reap(now)
            self._tick(now)
            if self.pending:
                self._write_batch(now)
            wait = self._next_wait(now)
            if not self.runs and (
                self.shutting_down or (not self.clients and now - self.idle_since >= _IDLE_EXIT)
            ):
                break
            if not self.runs and not self.clients:
                wait = min(wait, self.idle_since + _IDLE_EXIT - now)
            if self.exited:
                self._report()
            for fd, events in self.poller.poll(max(1, int(wait * 1000) + 1)):
                if fd == self.wake_r:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 4096):
                            pass
                elif not self.shutting_down and fd == self.listener.fileno():
                    self._accept()
                elif fd in self.clients:
                    self._serve_client(fd, events)
        self._shut_down()  # unlinked while keeper.lock is held: a successor binds afresh

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors: the client sees its connect fail
                return
            try:
                cred = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _SO_PEERCRED.size)
            except OSError:  # gone already
                sock.close()
                continue
            if _SO_PEERCRED.unpack(cred)[1] != os.getuid():
                sock.close()
                continue
            sock.setblocking(True)
            self.clients[sock.fileno()] = _Client(sock)
            self.poller.register(sock.fileno(), select.POLLIN)

    def _drop(self, fd: int) -> None:
        client = self.clients.pop(fd)
        self.poller.unregister(fd)
        client.sock.close()
        if not self.clients:
            self.idle_since = time.monotonic()

    def _serve_client(self, fd: int, events: int) -> None:
        client = self.clients[fd]
        if events & select.POLLOUT:
            self._flush(client)
            if fd not in self.clients:
                return
        if not events & (select.POLLIN | select.POLLHUP | select.POLLERR):
            return
        # Every request already waiting (a pipelined chunk of spawns), up
        # to a bound: the exits of their commands then share one batch of
        # exit records, and timers wait for at most that many requests.
        for _ in range(_REQUESTS_PER_TURN):
            if not self._serve_request(client, fd) or client.events:
                return
            try:
                if not client.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                    return  # EOF: seen by the next poll
            except OSError:  # nothing more now (or an error the next read meets)
                return

    def _serve_request(self, client: _Client, fd: int) -> bool:
        """Read one request, handle it and reply; False once the client is gone."""
        try:
            message = _read_message(fd)
        except OSError:
            message = None
        if message is None:
            self._drop(fd)
            return False
        request: Any = None
        try:
            request = json.loads(message)
            if not isinstance(request, dict):
                raise TypeError("not a JSON object")
            if request.get("op") == "spawn" and client.hung_up():
                # Sent by a supervisor that died before our reply: its
                # successor may already have found the attempt with nothing
                # started and failed it as abandoned, so it must not start
                # now. (Only replying fails on a closed socket: the first
                # such request would start.)
                self._drop(fd)
                return False
            reply = self._handle(client, request)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            reply = {"error": f"malformed request ({exc})"}
        try:
            _send_message(fd, reply)
        except OSError:
            self._drop(fd)
            return False
        if client.events:
            client.sock.setblocking(False)  # from now on it only gets events
        if isinstance(request, dict) and request.get("op") == "spawn" and "pid" in reply:
            self.fault("keeper-after-reply")
        return fd in self.clients

    def _handle(self, client: _Client, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op == "spawn":
            return self._spawn(LaunchSpec.from_wire(request["spec"]))
        if op == "hello":
            client.events = bool(request.get("events"))
            return {"keeper": self.pid, "start_time": self.start_time, "protocol": KEEPER_PROTOCOL}
        if op in ("cancel", "signal"):
            run = self.runs.get(int(request["pid"]))
            if run is None or run.start_time != request["start_time"] or run.record is not None:
                return {"done": False}
            if op == "cancel":
                if run.terminating is None:
                    run.cancel_reason = _cancel_reason(request.get("reason"))
                    self._terminate(run, "cancelled", time.monotonic())
            else:
                _signal_group(run.key, int(request["signum"]))
            return {"done": True}
        if op == "list":
            return {
                "live": [
                    {
                        "run_id": run.spec.run_id,
                        "attempt": run.spec.attempt,
                        "pid": run.key,
                        "start_time": run.start_time,
                        "record_dir": run.spec.record_dir,
                    }
                    for run in self.runs.values()
                    if run.key > 0 and run.record is None
                ]
            }
        if op == "held":
            # Its exit record is not on disk yet (queued in this turn's batch,
            # or waiting for a disk): the launch lock's own answer, for a lock
            # file a job replaced or removed.
            record_dir = request["record_dir"]
            return {"held": any(run.spec.record_dir == record_dir for run in self.runs.values())}
        if op == "warm":
            return {"warm": True}  # the round trip itself wakes the keeper's pages
        if op == "probe":
            return _probe_fork()
        if op == "shutdown":
            self._shut_down()
            return {"done": True}
        return {"error": f"unknown request {op!r}"}

    def _shut_down(self) -> None:
        """Take no new client and no launch; exit once the last run held is
        recorded. The socket and keeper.lock go at once, so a successor can
        start meanwhile (the runs here keep their launch locks)."""
        if self.shutting_down:
            return
        self.shutting_down = True
        with contextlib.suppress(OSError):
            os.unlink(KEEPER_SOCKET, dir_fd=self.dir_fd)
        self.poller.unregister(self.listener.fileno())
        self.listener.close()
        os.close(self.lock_fd)

    # -- spawning ---------------------------------------------------------------

    def _spawn(self, spec: LaunchSpec) -> dict[str, Any]:
        """Lock, started record, spawn, the command's pid in the record, reply.

        A lock already held, or a started record already written, means this
        attempt was launched before: refused rather than started twice.
        """
        if self.shutting_down:
            return {"error": "the keeper is shutting down"}
        now = time.monotonic()
        lock_path = os.path.join(spec.record_dir, SHIM_RECORD)
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            lock_fd = os.open(lock_path, flags, 0o600)
        except OSError as exc:
            return {
                "error": f"cannot create the launch lock {lock_path} ({_why(exc)})",
                "errno": exc.errno,
            }
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            started = os.fstat(lock_fd).st_size > 0
        except BlockingIOError:
            os.close(lock_fd)
            return {"error": f"attempt {spec.attempt} of {spec.run_id} is running", "launched": 1}
        except OSError as exc:
            os.close(lock_fd)
            return {"error": f"cannot take the launch lock {lock_path} ({_why(exc)})"}
        if started:
            os.close(lock_fd)
            return {"error": f"attempt {spec.attempt} of {spec.run_id} was started", "launched": 1}
        self.fault("keeper-before-started")
        started_at = time.time()
        try:
            # The keeper's own identity until the command's replaces it: with
            # the lock free afterwards, a record says "it may have run".
            os.pwrite(lock_fd, _started(spec, self.pid, self.start_time, find=True), 0)
        except OSError as exc:
            os.close(lock_fd)
            return {"error": f"cannot write the started record ({_why(exc)})", "errno": exc.errno}
        self.fault("keeper-after-started")
        before = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
        try:
            pid = _start_command(spec)
        except OSError as exc:
            if exc.filename is None and exc.errno in (errno.EAGAIN, errno.ENOMEM):
                # The fork itself failed (a process limit): nothing started,
                # so the started record goes and the attempt may be launched
                # again once the limit passes.
                with contextlib.suppress(OSError):
                    os.ftruncate(lock_fd, 0)
                os.close(lock_fd)
                return {"error": f"fork failed ({_why(exc)})", "errno": exc.errno}
            return self._not_started(spec, lock_fd, started_at, exc)
        except ValueError as exc:
            return self._not_started(spec, lock_fd, started_at, exc)
        tick = _start_tick(before, time.clock_gettime_ns(time.CLOCK_BOOTTIME))
        start_time = tick if tick is not None else process_start_time(pid) or 0
        self.fault("keeper-after-fork")
        with contextlib.suppress(OSError):  # found by its fingerprint if this fails
            os.pwrite(lock_fd, _started(spec, pid, start_time), 0)
        cap = None if spec.max_log_bytes is None else _LogCap(spec.attempt_dir, spec.max_log_bytes)
        timeout_at = None if spec.timeout is None else now + spec.timeout
        run = _Run(spec, pid, start_time, lock_fd, started_at, timeout_at, cap)
        self.runs[pid] = run
        self._schedule(run, now)
        self.fault("keeper-after-spawn")
        return {"pid": pid, "start_time": start_time}

    def _not_started(
        self, spec: LaunchSpec, lock_fd: int, started_at: float, exc: Exception
    ) -> dict[str, Any]:
        """The command could not be started (exec or chdir failed, no input
        file): recorded as spawn-failed like any other end."""
        self._unstarted -= 1
        run = _Run(spec, self._unstarted, 0, lock_fd, started_at, None, None)
        self.runs[run.key] = run
        self._record(run, "spawn-failed", None, None, _spawn_failure(spec, exc))
        # On disk before the reply: the supervisor reads it next.
        self._write_batch(time.monotonic())
        return {"error": _spawn_failure(spec, exc), "not_started": 1}

    # -- waiting ----------------------------------------------------------------

    def _reap(self, now: float) -> None:
        """Every child that ended is reaped; a run's leader gets its exit
        record queued for this turn's batch (`_write_batch`). Until that record is
        on disk the keeper still holds the attempt's launch lock, which is
        what says "alive" to the supervisor (`launch_locked`) once the pid is
        gone, and the run keeps its entry here, so its pid cannot be mistaken
        for a new command's: the batch is written before the next request."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            run = self.runs.get(pid)
            if run is not None and run.status is None and run.record is None:
                run.status = status
                if run.terminating is None:
                    self._conclude(run, now)
                else:
                    self._schedule(run, now)  # what is left of its group is polled

    def _tick(self, now: float) -> None:
        """The timers of every run, from one heap (one poll timeout for all):
        timeouts, the SIGKILL after the grace, draining groups, log caps and
        exit records waiting for a disk.

        A run has one live entry (`_Run.wake_at`); stale ones are skipped."""
        timers = self.timers
        while timers and timers[0][0] <= now:
            at, _, key = heapq.heappop(timers)
            run = self.runs.get(key)
            if run is not None and run.wake_at == at:
                run.wake_at = None
                self._visit(run, now)

    def _next_wait(self, now: float) -> float:
        """How long the loop may sleep: until the earliest timer."""
        timers = self.timers
        # Clamped: a timeout of years is waited out in pieces, never overflows poll().
        return min(max(0.0, timers[0][0] - now), _MAX_WAIT) if timers else _MAX_WAIT

    def _schedule(self, run: _Run, now: float) -> None:
        """(Re)arm the run's timer at its earliest deadline."""
        if run.queued:
            return  # its record is written this turn; a failure re-arms it
        if run.record is not None:
            deadlines = [run.retry_at]
        else:
            deadlines = [run.cap.next_at] if run.cap is not None else []
            if run.terminating is None:
                if run.timeout_at is not None:
                    deadlines.append(run.timeout_at)
            else:
                deadlines += [d for d in (run.kill_at, run.give_up_at) if d is not None and d > now]
                if run.status is not None:  # only the leader's exit is an event
                    deadlines.append(now + _GROUP_POLL)
        at = min(deadlines, default=None)
        if at is not None and (run.wake_at is None or at < run.wake_at):
            run.wake_at = at
            self._seq += 1
            heapq.heappush(self.timers, (at, self._seq, run.key))

    def _visit(self, run: _Run, now: float) -> None:
        if run.record is not None:
            if now >= run.retry_at:
                self._queue(run)
                return  # the batch re-arms it if the disk still refuses
        else:
            if run.terminating is None and run.timeout_at is not None and now >= run.timeout_at:
                self._terminate(run, "timeout", now)
            if run.terminating is not None:
                if run.status is not None and not _group_alive(run.key):
                    self._conclude(run, now)
                    return
                if run.give_up_at is None and run.kill_at is not None and now >= run.kill_at:
                    _signal_group(run.key, signal.SIGKILL)
                    run.give_up_at = now + _KILLED_GROUP_WAIT
                if run.give_up_at is not None and now >= run.give_up_at:
                    self._conclude(run, now)  # a process stuck in the kernel is not ours
                    return
            if run.cap is not None:
                run.cap.check(now)
        if run.key in self.runs:
            self._schedule(run, now)

    def _terminate(self, run: _Run, why: str, now: float) -> None:
        run.terminating = why
        _signal_group(run.key, signal.SIGTERM)
        run.kill_at = now + run.spec.kill_grace
        self._schedule(run, now)

    def _conclude(self, run: _Run, now: float) -> None:
        if run.cap is not None:
            run.cap.check(now, final=True)
        spec = run.spec
        ending = exit_outcome(
            run.status,
            run.terminating,
            timeout=spec.timeout,
            kill_grace=spec.kill_grace,
            killed=run.give_up_at is not None,
            cancel_reason=run.cancel_reason,
        )
        self._record(run, *ending)

    def _record(
        self, run: _Run, outcome: str, code: int | None, signum: int | None, reason: str | None
    ) -> None:
        """Queue the attempt's exit record for this turn's batch (`_write_batch`)."""
        run.record = {  # the fields of ExitRecord, plus the run
            "attempt": run.spec.attempt,
            "outcome": outcome,
            "exit_code": code,
            "signal": signum,
            "reason": reason,
            "started_at": run.started_at,
            "finished_at": time.time(),
            "run_id": run.spec.run_id,
        }
        self._queue(run)

    def _queue(self, run: _Run) -> None:
        """Into this turn's batch, once: its live timer entry goes stale (an
        earlier timeout or log check must not queue it a second time)."""
        run.queued = True
        run.wake_at = None
        self.pending.append(run)

    def _write_batch(self, now: float) -> None:
        """Write the exit records of this turn as one batch, then release
        their locks and report them.

        Why a batch: a record costs a journal commit and a device flush for
        its file and another for its directory; written one by one, the
        keeper sat in fsync for milliseconds per exit while spawn requests
        waited. Here every file of the batch is written first, then fsynced
        (the first fsync commits the journal for all of them), renamed into
        place, and their directories fsynced. A lock is released, and its
        exit reported, only once the whole batch is on disk; a keeper killed
        in between leaves each attempt either with its complete exit record
        or without one, never with half of one (docs/recovery.md).

        A full or failing disk is retried with backoff, per record: the exit
        code lives here, and the lock stays held, until the record is on disk.
        """
        batch, self.pending = self.pending, []
        self.fault("keeper-before-exit-record")
        failures = _write_exit_records(
            [(run.spec.record_dir, run.record or {}) for run in batch], self.fault
        )
        self.fault("keeper-after-exit-record")
        for run, exc in zip(batch, failures, strict=True):
            run.queued = False
            if exc is not None:
                if exc.errno in _RECORD_RETRY_ERRNOS:
                    run.retry_at = now + run.retry_delay
                    run.retry_delay = min(run.retry_delay * 2, _RECORD_RETRY_MAX)
                    run.wake_at = None
                    self._schedule(run, now)
                    continue
                # Not a passing fault (the record directory is gone...): the
                # lock is released without a record, and the run is failed
                # abandoned.
                with contextlib.suppress(OSError):
                    _write_all(
                        2,
                        f"wfsched-keeper: cannot write the exit record of {run.spec.run_id}"
                        f" attempt {run.spec.attempt}: {_why(exc)}\n".encode(),
                    )
            os.close(run.lock_fd)
            del self.runs[run.key]
            if run.key > 0:
                self.exited.append(run.key)

    def _report(self) -> None:
        """One event for every exit recorded in this turn of the loop."""
        event = _to_json({"exited": self.exited}).encode()
        self.exited = []
        frame = struct.pack("!I", len(event)) + event
        for client in list(self.clients.values()):
            if client.events:
                waiting = bool(client.backlog)
                client.backlog += frame
                if not waiting:
                    self._flush(client)

    def _flush(self, client: _Client) -> None:
        """Exit events never block the keeper (an events connection is
        non-blocking): what a busy client does not read yet waits in its
        backlog, sent on POLLOUT."""
        fd = client.sock.fileno()
        try:
            while client.backlog:
                del client.backlog[: client.sock.send(client.backlog)]
        except BlockingIOError:
            pass
        except OSError:
            self._drop(fd)
            return
        self.poller.modify(fd, select.POLLIN | (select.POLLOUT if client.backlog else 0))


def _cancel_reason(value: object) -> str | None:
    """A cancel request's reason, if it is one: text, bounded (the record
    must stay small), a line of its own."""
    if not isinstance(value, str) or not value.strip():
        return None
    return " ".join(value.split())[:_MAX_CANCEL_REASON]


def _started(spec: LaunchSpec, pid: int, start_time: int, find: bool = False) -> bytes:
    """The started record; `find`: written before the spawn, it names the
    keeper and carries the command's fingerprint (`launch_fingerprint`), by
    which recovery finds the command if the keeper dies before naming it."""
    record: dict[str, Any] = {
        "pid": pid,
        "start_time": start_time,
        "run_id": spec.run_id,
        "attempt": spec.attempt,
    }
    fingerprint = launch_fingerprint(spec.env) if find else None
    if fingerprint is not None:
        record["find"] = fingerprint
    return _to_json(record).encode().ljust(_STARTED_SIZE)


_NS_PER_TICK, _TICKS_EXACT = divmod(1_000_000_000, os.sysconf("SC_CLK_TCK"))


def _start_tick(before: int, after: int) -> int | None:
    """The start time /proc/PID/stat gives a command spawned between two
    CLOCK_BOOTTIME readings (ns), or None when they straddle a clock tick.

    The kernel stamps a process with CLOCK_BOOTTIME in fork (clone runs in
    the parent, between the two readings) and /proc shows that stamp in
    whole ticks, truncated. Reading /proc/PID/stat instead, right after the
    spawn, cost 30-40 us of CPU and waited about 0.2 ms for the command's
    exec to finish (docs/architecture.md); a spawn takes well under a tick
    (10 ms), so the readings rarely straddle one."""
    if _TICKS_EXACT:  # a tick of no whole number of ns: /proc's own rounding
        return None
    tick = before // _NS_PER_TICK
    return tick if after // _NS_PER_TICK == tick else None


def _start_command(spec: LaunchSpec) -> int:
    """Spawn the command in its own session and process group; returns its
    pid. OSError/ValueError mean it never ran.

    Popen uses vfork (no page tables copied), searches spec.env's PATH,
    applies cwd in the child, restores the SIGPIPE and SIGXFSZ that Python
    ignores to default, and reports exec and chdir failures as OSError
    naming the file. os.posix_spawn is a little cheaper (about 0.1 ms) but
    has no cwd, searches the keeper's PATH, not the command's, and glibc's
    leaves its internal signals (32, 33) ignored in the child: ignored
    dispositions survive exec into the job.
    """
    if not spec.argv:
        raise ValueError("empty command")
    try:
        stdin_fd = os.open(spec.stdin_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ValueError(f"cannot open input {spec.stdin_path!r}: {exc.strerror}") from None
    fds = [stdin_fd]
    try:
        log_flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        fds.append(os.open(os.path.join(spec.attempt_dir, STDOUT_LOG), log_flags, 0o644))
        fds.append(os.open(os.path.join(spec.attempt_dir, STDERR_LOG), log_flags, 0o644))
        proc = subprocess.Popen(
            spec.argv,
            cwd=spec.cwd,
            env=spec.env,
            stdin=fds[0],
            stdout=fds[1],
            stderr=fds[2],
            close_fds=True,
            start_new_session=True,  # session and group of its own: killpg takes it whole
        )
    finally:
        for fd in fds:
            os.close(fd)
    # The keeper reaps it (waitpid); Popen must never try to.
    proc.returncode = 0
    return proc.pid


def _spawn_failure(spec: LaunchSpec, exc: Exception) -> str:
    if not isinstance(exc, OSError):
        return str(exc)
    why = exc.strerror or str(exc)
    if isinstance(exc.filename, str) and os.path.dirname(exc.filename) == spec.attempt_dir:
        return f"cannot open {exc.filename!r}: {why}"
    if spec.cwd is not None and exc.filename == spec.cwd:
        return f"cannot change to directory {spec.cwd!r}: {why}"
    return f"cannot execute {spec.argv[0]!r}: {why}"


def _probe_fork() -> dict[str, Any]:
    """Fork a child that exits at once and reap it: whether the keeper can
    fork right now (a process limit is an answer, never the keeper's death)."""
    try:
        pid = os.fork()
    except OSError as exc:
        return {"error": f"fork failed ({exc.strerror or exc})", "errno": exc.errno}
    if pid == 0:  # pragma: no cover - the child only exits
        os._exit(0)
    os.waitpid(pid, 0)
    return {"warm": True}
