"""Failure hooks: `[notify] on_failure` (or the config default) after a run fails.

A hook is launched like a run (through the run keeper, its own process
group, a timeout), with the run's facts in its environment. It runs once:
its own failure is logged and never retried, so a broken mail command cannot
turn into a loop. A hook in flight when the supervisor dies is not re-run.

Each hook's outcome is also recorded in the store (`notifications`), so
`runs show` can say whether the alert went out long after the log is gone.
A `preflight-rejected` occurrence fires the hook too (it is a failure to the
operator): it has no run, so `WFSCHED_RUN_ID` and `WFSCHED_RUN_DIR` are
empty and the hook's own output goes to `<store>/notify/<occurrence id>/`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from wfsched.daemon.job_environment import inherited_environment
from wfsched.domain.timeutil import Clock, wall_clock
from wfsched.process.launcher import ExitRecord, LaunchSpec, ShimHandle
from wfsched.store.rundirs import prepare_record_dir

if TYPE_CHECKING:
    from wfsched.store import Store

HOOK_TIMEOUT = 60
HOOK_KILL_GRACE = 5


class HookLauncher(Protocol):
    """The process operations a hook needs; the supervisor passes its
    process control, so hooks need not import the supervisor."""

    def spawn(self, spec: LaunchSpec) -> ShimHandle: ...
    def alive(self, handle: ShimHandle) -> bool: ...
    def read_exit(self, record_dir: str) -> ExitRecord | None: ...


@dataclass(frozen=True)
class RunFacts:
    run_id: str
    schedule_id: str
    occurrence_id: str
    scheduled_at: str
    attempt: int
    state: str
    reason: str
    exit_code: int | None
    run_dir: Path | None
    """None for a preflight rejection (no run, no run directory)."""
    record_dir: Path
    """Where the hook's shim keeps its records (out of any job's reach)."""
    run_seq: int | None = None
    scheduled_epoch: int | None = None
    hook_dir: Path | None = None
    """Where the hook's logs go (default: the run's `notify-N/`)."""


class FailureHooks:
    def __init__(
        self,
        control: HookLauncher,
        log: Callable[..., None],
        default_argv: Sequence[str] | None,
        store: Store | None = None,
        clock: Clock = wall_clock,
    ) -> None:
        self.control = control
        self.log = log
        self.default_argv = tuple(default_argv) if default_argv else None
        self.store = store
        self.clock = clock
        self._in_flight: dict[int, tuple[dict[str, str], Path, ShimHandle, int | None]] = {}
        """pid -> (what it is about, for its log line: run or occurrence, or
        fault; record dir, handle, notification row)."""
        self._polling = False
        """Set when the launcher that would report their exits was replaced."""

    def recover(self) -> None:
        """Hooks a previous supervisor left running are not re-run; say so."""
        if self.store is not None:
            with self.store.atomic():
                self.store.abandon_notifications(
                    "the supervisor stopped while the hook ran; not re-run", self.clock()
                )

    def fire(self, facts: RunFacts, argv: Sequence[str] | None) -> None:
        command = tuple(argv) if argv else self.default_argv
        if not command:
            return
        directory = facts.hook_dir or (facts.run_dir or Path()) / f"notify-{facts.attempt}"
        label = facts.run_id or facts.occurrence_id
        env = inherited_environment(os.environ)
        env.update(
            WFSCHED_SCHEDULE_ID=facts.schedule_id,
            WFSCHED_RUN_ID=facts.run_id,
            WFSCHED_OCCURRENCE_ID=facts.occurrence_id,
            WFSCHED_SCHEDULED_AT=facts.scheduled_at,
            WFSCHED_ATTEMPT=str(facts.attempt),
            WFSCHED_RUN_STATE=facts.state,
            WFSCHED_REASON=facts.reason,
            WFSCHED_EXIT_CODE="" if facts.exit_code is None else str(facts.exit_code),
            WFSCHED_RUN_DIR="" if facts.run_dir is None else str(facts.run_dir),
        )
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            prepare_record_dir(facts.record_dir)
            handle = self.control.spawn(
                LaunchSpec(
                    run_id=f"{label}-notify",
                    attempt=facts.attempt,
                    argv=command,
                    cwd=None,
                    env=env,
                    stdin_path=os.devnull,
                    attempt_dir=str(directory),
                    record_dir=str(facts.record_dir),
                    timeout=HOOK_TIMEOUT,
                    kill_grace=HOOK_KILL_GRACE,
                )
            )
        except OSError as exc:
            reason = f"could not start: {exc}"
            self.log("notify-failed", run=label, reason=reason)
            self._record(facts, "failed", reason)
            return
        seq = self._record(facts, "running", None)
        self._in_flight[handle.pid] = ({"run": label}, facts.record_dir, handle, seq)

    def _record(self, facts: RunFacts, state: str, reason: str | None) -> int | None:
        if self.store is None:
            return None
        with self.store.atomic():
            return self.store.insert_notification(
                facts.schedule_id,
                facts.run_seq,
                facts.scheduled_epoch,
                facts.attempt,
                self.clock(),
                state=state,
                reason=reason,
            )

    def _finish(self, seq: int | None, state: str, reason: str | None) -> None:
        if self.store is not None and seq is not None:
            with self.store.atomic():
                self.store.finish_notification(seq, state, reason, self.clock())

    def fire_fault(self, kind: str, error: str, since: str, directory: Path) -> None:
        """The config's default hook, once per fault episode (schedules' own
        hooks are about their runs). Its records go to `directory`, outside
        the store, which may be the thing that is full; no notification row
        is written (the store may refuse it)."""
        if not self.default_argv:
            return
        env = inherited_environment(os.environ)
        env.update(
            WFSCHED_EVENT="fault",
            WFSCHED_FAULT_KIND=kind,
            WFSCHED_FAULT_SINCE=since,
            WFSCHED_REASON=error,
        )
        record_dir = directory / "records"
        try:
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            prepare_record_dir(record_dir)
            handle = self.control.spawn(
                LaunchSpec(
                    run_id="fault-notify",
                    attempt=1,
                    argv=self.default_argv,
                    cwd=None,
                    env=env,
                    stdin_path=os.devnull,
                    attempt_dir=str(directory),
                    record_dir=str(record_dir),
                    timeout=HOOK_TIMEOUT,
                    kill_grace=HOOK_KILL_GRACE,
                )
            )
        except OSError as exc:
            self.log("notify-failed", fault=kind, reason=f"could not start: {exc}")
            return
        self._in_flight[handle.pid] = ({"fault": kind}, record_dir, handle, None)

    @property
    def busy(self) -> bool:
        """Whether a hook runs (its end is still to be logged)."""
        return bool(self._in_flight)

    def orphaned(self) -> None:
        """The launcher was replaced: the exits of hooks in flight will never
        be reported, so `reaped` polls them from now on."""
        self._polling = bool(self._in_flight)

    def reaped(self, pids: Sequence[int]) -> list[int]:
        """Log the hooks among `pids` (and, after a launcher replacement, the
        hooks found gone); return the pids that were not hooks."""
        others = [pid for pid in pids if pid not in self._in_flight]
        ended = [pid for pid in pids if pid in self._in_flight]
        if self._polling:
            ended += [
                pid
                for pid, (_, _, handle, _) in self._in_flight.items()
                if pid not in ended and not self.control.alive(handle)
            ]
            self._polling = bool(self._in_flight.keys() - set(ended))
        for pid in ended:
            about, directory, _, seq = self._in_flight.pop(pid)
            try:
                record = self.control.read_exit(str(directory))
            except (ValueError, OSError) as exc:
                reason: str | None = str(exc)
            else:
                if record is None:
                    reason = "the hook left no exit record"
                elif record.outcome == "exited" and record.exit_code == 0:
                    reason = None
                else:
                    reason = record.reason or record.outcome
            if reason is None:
                self.log("notified", **about)
                self._finish(seq, "succeeded", None)
            else:
                self.log("notify-failed", **about, reason=reason)
                self._finish(seq, "failed", reason)
        return others
