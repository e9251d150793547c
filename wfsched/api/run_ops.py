"""Runs for operators: inspection, logs, and requests the supervisor acts on
(trigger, resume, cancel). Requests are rows in the store, so they survive a
supervisor restart and need no socket; the supervisor answers within one
poll interval."""

from __future__ import annotations

import builtins
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wfsched.api.paging import decode_directed, encode_cursor
from wfsched.api.run_hosts import host_row, resume_refusal, unreachable
from wfsched.api.views import notification_view, run_view
from wfsched.domain.config import SupervisorConfig
from wfsched.domain.timeutil import Clock, format_event, format_instant, wall_clock
from wfsched.errors import ConflictError, NotFoundError, OperationError, UsageError
from wfsched.store import RequestRow, RunRow, Store, parse_run_id, run_id
from wfsched.store.rundirs import NO_RESUME_INPUT, RunDir, log_truncation

RUN_STATES = ("admitted", "running", "interrupted", "completed", "failed")
MAX_PAGE = 100
STDERR_TAIL_LINES = 10
TAIL_BYTES = 64 * 1024
"""How much of the end of a log `runs show` reads to find its last lines."""


def check_list_arguments(
    *, status: str | None, limit: int, cursor: str | None, oldest_first: bool = False
) -> int | None:
    """Refuse bad listing arguments (exit 2), store or no store; the cursor's key."""
    if not 1 <= limit <= MAX_PAGE:
        raise UsageError(f"--limit must be between 1 and {MAX_PAGE}")
    if status is not None and status not in RUN_STATES:
        raise UsageError(f"--status must be one of {', '.join(RUN_STATES)}")
    if not cursor:
        return None
    return decode_directed(cursor, "before", "after", reverse=oldest_first)


@dataclass(frozen=True)
class LogPlace:
    """Where an attempt's logs are, seen from this host."""

    run_id: str
    attempt: int
    host: str | None
    """The host that executed the run (None: not recorded)."""
    directory: Path
    """The attempt's directory on that host."""
    here: bool
    """The full logs can be read here: the run is this host's and its run
    directory is in this host's runs root."""
    running: bool
    runs_root: Path
    """This host's runs root, where the logs were looked for."""
    same_host: bool
    """The run's host is this host's name: its directory is simply not in
    `runs_root` (another runs root, or removed)."""

    def elsewhere(self) -> str:
        """`on host web-2 in /var/lib/.../attempt-1`: where the full logs are,
        and why they were not found here when the host is this one."""
        host = f"host {self.host}" if self.host else "the host that ran it (not recorded)"
        where = f"on {host} in {self.directory}"
        if self.same_host:
            where += f" (this host, but not in the runs root read here, {self.runs_root})"
        return where


class Runs:
    def __init__(self, store: Store, clock: Clock = wall_clock, host: str | None = None) -> None:
        """`host`: this host's name, to tell a run executed here from one executed
        elsewhere (None: every run counts as this host's, as with one host)."""
        self.store = store
        self.clock = clock
        self.host = host

    def run(self, text: str) -> RunRow:
        seq = parse_run_id(text)
        run = self.store.get_run(seq) if seq is not None else None
        if run is None:
            raise NotFoundError(f"no run {text!r}; `wfsched runs` lists them")
        return run

    def show(self, text: str) -> dict[str, Any]:
        """The run view plus what an operator needs after a failure: the run
        directory, the last lines of the latest attempt's stderr, and each
        failure hook's outcome; each attempt also says whether the shim cut
        its logs to max_log_bytes (`output_truncated`: bytes dropped per
        stream, or null; known on the host that ran it). `run_dir` is the
        run's directory on the host that executed it; `logs_here` says
        whether it can be read on this one (if not, the stderr lines come from
        the tail the exit record kept in the store)."""
        with self.store.snapshot():
            run = self.run(text)
            view = run_view(run, self.store.attempts(run.seq))
            hooks = self.store.run_notifications(run.seq)
            stored_stderr = (
                self.store.attempt_output(run.seq, run.attempt)[1] if run.attempt else None
            )
        here = self._here(run)
        directory = RunDir(self.store.runs_dir, run.run_id)
        view["run_dir"] = str(directory.path if here else self._directory(run))
        view["logs_here"] = here
        if not run.attempt:
            view["stderr_tail"] = []
        elif here:
            view["stderr_tail"] = _tail(
                directory.log_path(run.attempt, "stderr"), STDERR_TAIL_LINES
            )
        else:
            view["stderr_tail"] = _last_lines(stored_stderr or b"", STDERR_TAIL_LINES)
        view["failure_hooks"] = [notification_view(hook) for hook in hooks]
        for attempt in view["attempts"]:
            dropped = {
                stream: count
                for stream in ("stdout", "stderr")
                if here
                and (count := log_truncation(directory.log_path(attempt["attempt"], stream)))
                is not None
            }
            attempt["output_truncated"] = dropped or None
        return view

    def _here(self, run: RunRow) -> bool:
        """Are the run's files on this host? Its host is this one (or was not
        recorded) and its directory is in this host's runs root."""
        if self.host is not None and run.host is not None and run.host != self.host:
            return False
        return RunDir(self.store.runs_dir, run.run_id).path.is_dir()

    def _directory(self, run: RunRow) -> Path:
        """The run's directory on the host that executed it (the runs root it
        froze, else this host's)."""
        root = run.frozen.runs_root
        return Path(root) / run.run_id if root else RunDir(self.store.runs_dir, run.run_id).path

    def log_place(self, text: str, attempt: int | None = None) -> LogPlace:
        """Where the attempt's logs are (the latest attempt by default); an
        admitted run has none, and we do not invent them."""
        run, chosen = self._started_attempt(text, attempt)
        here = self._here(run)
        root = RunDir(self.store.runs_dir, run.run_id) if here else None
        directory = root.attempt_dir(chosen) if root else self._directory(run) / f"attempt-{chosen}"
        return LogPlace(
            run.run_id,
            chosen,
            run.host,
            directory,
            here,
            self.attempt_running(text, chosen),
            self.store.runs_dir,
            same_host=not here and (self.host is None or run.host is None or run.host == self.host),
        )

    def _started_attempt(self, text: str, attempt: int | None) -> tuple[RunRow, int]:
        """The run and the attempt asked for (its latest by default): one
        that started, since only a started attempt has logs."""
        run = self.run(text)
        if run.attempt == 0:
            raise NotFoundError(f"{run.run_id} has not started yet; it has no logs")
        chosen = attempt if attempt is not None else run.attempt
        if not 1 <= chosen <= run.attempt:
            raise UsageError(f"{run.run_id} has attempts 1..{run.attempt}")
        return run, chosen

    def stored_output(self, place: LogPlace) -> tuple[bytes | None, bytes | None]:
        """The last 64 KiB (OUTPUT_TAIL_BYTES) of stdout and stderr the attempt's exit
        record kept in the store (None: not kept: the attempt has not ended,
        or ended before tails were kept)."""
        seq = parse_run_id(place.run_id)
        assert seq is not None
        return self.store.attempt_output(seq, place.attempt)

    def list(
        self,
        *,
        schedule_id: str | None = None,
        status: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
        oldest_first: bool = False,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Newest first (`oldest_first`: the other way round), one page."""
        start = check_list_arguments(
            status=status, limit=limit, cursor=cursor, oldest_first=oldest_first
        )
        with self.store.snapshot():
            rows = self.store.list_runs(
                schedule_id=schedule_id,
                state=status,
                before_seq=start,
                limit=limit + 1,
                oldest_first=oldest_first,
            )
            items = [run_view(row, self.store.attempts(row.seq)) for row in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            key = "after" if oldest_first else "before"
            next_cursor = encode_cursor(**{key: rows[limit - 1].seq})
        return items, next_cursor

    def latest_started(self, schedule_id: str) -> RunRow | None:
        """The schedule's newest run that has started an attempt (so has logs):
        newer runs still waiting for a slot have none yet."""
        before: int | None = None
        while True:
            rows = self.store.list_runs(schedule_id=schedule_id, before_seq=before, limit=20)
            for row in rows:
                if row.attempt:
                    return row
            if len(rows) < 20:
                return None
            before = rows[-1].seq

    def log_file(self, text: str, *, attempt: int | None = None, stderr: bool = False) -> Path:
        """The attempt's log; an admitted run has none, and we do not invent one."""
        run, chosen = self._started_attempt(text, attempt)
        return RunDir(self.store.runs_dir, run.run_id).log_path(
            chosen, "stderr" if stderr else "stdout"
        )

    def attempt_running(self, text: str, attempt: int | None = None) -> bool:
        run = self.run(text)
        chosen = attempt if attempt is not None else run.attempt
        row = self.store.get_attempt(run.seq, chosen)
        return row is not None and row.state == "running"

    # -- requests for the supervisor --------------------------------------------

    def request_trigger(self, schedule_id: str) -> int:
        with self.store.atomic():
            row = self.store.get_schedule(schedule_id)
            if row is None:
                raise NotFoundError(f"no schedule {schedule_id!r}")
            if row.deleted_at is not None:
                raise ConflictError(f"{schedule_id}: deleted schedules cannot be triggered")
            return self.store.insert_request("trigger", self.clock(), schedule_id=schedule_id)

    def request_resume(self, text: str, resume_input: Any = NO_RESUME_INPUT) -> int:
        """Ask for attempt N+1; `resume_input` (any JSON value, null included)
        becomes its WFSCHED_RESUME_INPUT and stdin. Without it the attempt
        reads the run's original input."""
        with self.store.atomic():
            run = self.run(text)
            if run.state != "interrupted":
                raise ConflictError(f"{run.run_id} is {run.state}; only interrupted runs resume")
            self.check_resume_host(run)
            payload = None if resume_input is NO_RESUME_INPUT else json.dumps(resume_input)
            return self.store.insert_request(
                "resume", self.clock(), run_seq=run.seq, payload=payload
            )

    def request_cancel(self, text: str) -> int | str:
        """A request id, or the message for a run that had already finished."""
        with self.store.atomic():
            run = self.run(text)
            if run.state in ("completed", "failed"):
                return f"{run.run_id} had already finished ({run.state}); nothing to cancel"
            return self.store.insert_request("cancel", self.clock(), run_seq=run.seq)

    def check_resume_host(self, run: RunRow) -> None:
        """ConflictError (exit 4) naming the host while the run's host is lost:
        a run resumes only on its own host, where its state directory is."""
        refusal = resume_refusal(self.store, run, self._host_timeout())
        if refusal is not None:
            raise ConflictError(refusal)

    def _host_timeout(self) -> float:
        """The supervisors' host_timeout, as the leader announced it."""
        text = self.store.get_meta("host_timeout")
        try:
            return float(text) if text else SupervisorConfig.host_timeout
        except ValueError:
            return SupervisorConfig.host_timeout

    def waiting_note(self, request: RequestRow) -> str | None:
        """What a pending cancel or resume waits for, in words: the progress
        its host's agent noted (`cancelling on host a: ...`), or that agent
        itself when the store has several hosts. None: nothing to add."""
        if request.result:
            return request.result
        run = self.store.get_run(request.run_seq) if request.run_seq else None
        if run is None or run.host is None or run.state not in ("running", "interrupted"):
            return None
        row = host_row(self.store, run.host)
        if row is None:
            return None
        if row.stopped:
            return (
                f"it waits for host {run.host}'s agent: its supervisor stopped at"
                f" {format_event(row.last_seen)}, and carries it out once it starts again"
            )
        timeout = self._host_timeout()
        if unreachable(self.store, run.host, timeout) is not None:
            return None  # the leader answers it (a lost host)
        return (
            f"it waits for host {run.host}'s agent (supervisor pid {row.pid}, last seen"
            f" {format_event(row.last_seen)}), which carries it out; if that host stays"
            f" silent past host_timeout ({timeout:g}s), the leader answers it instead"
        )

    def supervisor_pid(self) -> int | None:
        return self.store.supervisor_pid()

    def pending_requests(self) -> builtins.list[dict[str, Any]]:
        """Requests no supervisor has taken yet, oldest first (at most
        MAX_PENDING_SHOWN): what a supervisor will do when it runs."""
        return [request_view(row) for row in self.store.pending_requests(MAX_PENDING_SHOWN)]

    def withdraw(self, seq: int) -> str:
        """Withdraw a request not yet taken, in one statement that the
        supervisor's own answer races against (`Store.finish_request`):
        exactly one of them wins. The words for the operator; NotFoundError
        for an unknown request, ConflictError for one already taken."""
        with self.store.atomic():
            request = self.store.get_request(seq)
            if request is None:
                raise NotFoundError(f"no request {seq}; `wfsched requests` lists the pending ones")
            taken = self.store.finish_request(seq, "refused", WITHDRAWN, self.clock())
        view = request_view(request)
        what = f"{view['kind']} {view['target']}"
        if taken:
            return f"withdrew request {seq} ({what}); the supervisor will not act on it"
        current = self.store.get_request(seq)
        assert current is not None
        if current.result == WITHDRAWN:
            return f"request {seq} ({what}) was already withdrawn"
        raise ConflictError(
            f"request {seq} ({what}) was already taken by the supervisor"
            f" ({current.state}: {current.result}); too late to withdraw it"
            + ("; `wfsched runs cancel` stops a run it started" if view["kind"] != "cancel" else "")
        )

    def wait(self, request_seq: int, timeout: float) -> RequestRow:
        """Poll the request until the supervisor answers or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while True:
            request = self.store.get_request(request_seq)
            if request is None:
                raise OperationError(f"request {request_seq} vanished from the store")
            if request.state != "pending" or time.monotonic() >= deadline:
                return request
            time.sleep(0.05)


WITHDRAWN = "withdrawn by `wfsched requests cancel`"
"""A withdrawn request's answer (its state is `refused`)."""
MAX_PENDING_SHOWN = 1000


def request_view(row: RequestRow) -> dict[str, Any]:
    """A request as `requests --json` shows it. `requested_by` is null: the
    store does not record who asked."""
    target = row.schedule_id if row.kind == "trigger" else run_id(row.run_seq or 0)
    return {
        "id": row.seq,
        "kind": row.kind,
        "target": target,
        "requested_at": format_instant(row.created_at),
        "requested_by": None,
        "state": row.state,
        "result": row.result,
    }


def _last_lines(data: bytes, lines: int) -> list[str]:
    return data.decode("utf-8", errors="replace").splitlines()[-lines:]


def read_tail(path: Path) -> tuple[bytes, int]:
    """The last TAIL_BYTES of a log file and the file's size; (b"", 0) when
    it cannot be read (absent, or not there yet)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            return handle.read(), size
    except OSError:
        return b"", 0


def _tail(path: Path, lines: int) -> list[str]:
    """The last `lines` lines of a log (decoded leniently); [] when absent."""
    data, _size = read_tail(path)
    return _last_lines(data, lines)
