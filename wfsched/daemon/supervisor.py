"""`wfsched supervise`: owns the store, admits due occurrences, launches and
watches runs, recovers after crashes, drains on SIGTERM (docs/semantics.md,
docs/runs.md, docs/recovery.md).

The loop gathers state from the store, asks `wfsched.domain.decisions` what to do,
persists that in one transaction, and only then acts (run directories,
launches). Every process operation goes through a `ProcessControl`, so the
loop can be driven in tests with a fake launcher and an injected clock.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from wfsched.api.preflight import preflight
from wfsched.api.run_hosts import resume_refusal, unreachable
from wfsched.api.views import DefinitionCache, record_entries, run_occurrence_id
from wfsched.daemon.eventlog import EventLog
from wfsched.daemon.hooks import FailureHooks, RunFacts
from wfsched.daemon.job_environment import inherited_environment
from wfsched.daemon.leadership import Leadership
from wfsched.daemon.observe import Observer
from wfsched.daemon.sdnotify import Notifier
from wfsched.daemon.wakeup import Waiter
from wfsched.domain.calendar import CronCalendar, OneShotCalendar, calendar_for
from wfsched.domain.config import SupervisorConfig
from wfsched.domain.decisions import (
    FAILOVER,
    SCAN_CAP,
    SUPERVISOR_DOWN,
    Candidate,
    Decision,
    ScheduleView,
    decide,
)
from wfsched.domain.inputs import resolve_input
from wfsched.domain.model import Definition
from wfsched.domain.passed_over import HINT, PassedOver
from wfsched.domain.passed_over import META_KEY as PASSED_OVER_KEY
from wfsched.domain.tickerrors import META_KEY, TickErrors, describe
from wfsched.domain.timeutil import (
    MAX_DURATION,
    Clock,
    format_event,
    format_instant,
    occurrence_id,
    wall_clock,
)
from wfsched.errors import (
    ConflictError,
    LeaseLost,
    OperationError,
    StoreUnavailable,
    UsageError,
    WfschedError,
)
from wfsched.faults import FaultHook, no_fault
from wfsched.process.launcher import (
    AlreadyLaunched,
    CommandNotStarted,
    ExitRecord,
    Launcher,
    LauncherError,
    LauncherLost,
    LaunchSpec,
    ProcessControl,
    RecordError,
    ShimHandle,
)
from wfsched.store import (
    DB_NAME,
    LOCK_NAME,
    AttemptRow,
    RequestRow,
    RunRow,
    ScheduleRow,
    Store,
    StoreLocation,
    open_location,
    resolve_store,
    run_id,
)
from wfsched.store.commit_watch import CommitWatch
from wfsched.store.location import ensure_local_dir
from wfsched.store.ownership import Ownership
from wfsched.store.resource_faults import classify, probe_directory, supervisor_words
from wfsched.store.rows import AttemptEnd, Invocation
from wfsched.store.rundirs import (
    NO_RESUME_INPUT,
    RunDir,
    attempt_log_paths,
    attempt_record_dir,
    log_tail,
    prepare_record_dir,
    record_dir,
    records_root,
)
from wfsched.store.runtime_file import FaultFile, fault_path
from wfsched.store.sqlite import check_database_file


class RequestWithdrawn(Exception):
    """The request was withdrawn (`wfsched requests cancel`) before this
    supervisor's answer committed: the transaction that acted on it rolls back."""


HOST_LOST_PREFIX = "abandoned: its host "
HOST_LOST = HOST_LOST_PREFIX + (
    "{host} has sent no heartbeat since {since} (host_timeout {timeout:g}s);"
    " its command may have started, so external effects may already have happened. Not retried"
)
CANCEL_UNREACHED = "could not be reached to cancel it"
"""In the reason of a run failed because its cancel could not reach its host:
that host's agent, back, terminates what is left of it (`_watch_abandoned`)."""
CANCEL_HOST_LOST = HOST_LOST_PREFIX + (
    "{host} " + CANCEL_UNREACHED + " ({why}); its process may still run there, so external"
    " effects may still happen. Not retried"
)
LATE_EXIT_MARK = "; its host reported later"
LATE_EXIT = LATE_EXIT_MARK + " that it {outcome} at {at}"
HOSTS_INTERVAL = 5.0
"""Seconds between the leader's looks for lost hosts."""
ABANDONED = (
    "abandoned: the supervisor lost this run (no live parent, no exit record); its command"
    " may have started, so external effects may already have happened. Not retried"
)
FIRST_CHUNK = 4
"""Admissions in a burst's first chunk: committed, marked and launched before
the next schedule is decided, so the first run starts milliseconds after its
instant however many are due with it."""
LAUNCH_CHUNK = 64
"""The largest chunk (chunks double from FIRST_CHUNK): one admission commit
and one mark commit per chunk keeps the per-run cost of a big burst low."""
BURST_SLICE = 0.25
"""Seconds one tick spends on a burst's chunks; the rest is decided by the
next ticks, so exits and requests are still handled during a long burst."""
RETENTION_BATCH = 50
RETENTION_INTERVAL = 60.0
CACHE_SWEEP_INTERVAL = 3600.0
"""Seconds (monotonic) between sweeps of the per-schedule caches (`_sweep_caches`)."""
STAMP_INTERVAL = 5.0
"""Seconds between liveness stamps while ticks are quiet (a store with a
change counter; never below the poll interval). The supervisor records it
as `stamp_interval`; `status` calls it stale after three of them. A full
tick stamps as it ends, whatever the interval."""
STAMP_SLACK = 0.01
"""A quiet tick this close to its stamp's time stamps (its sleep was timed
to end there, by another clock)."""
_DURING_FAULTS = ("watch", "metrics")
"""The phases that run through a store fault episode: taking the launcher's
exit reports (no store write) and the metrics refresh (reads only; it keeps
its last values when reads fail)."""
_DISK_FAULTS = ("disk-full", "read-only", "io-error")
"""Faults of a disk: a spawn the keeper refused for one of these started
nothing and waits for the episode's end (`_spawn`)."""
WARM_AHEAD = 60.0
WARM_LIMIT = 10_000
"""Within WARM_AHEAD seconds of a due instant, up to WARM_LIMIT schedules due
then get their definitions parsed and calendars built while the supervisor
waits, not while the burst's first runs wait."""
PROBE_FREE_BYTES = 256 * 1024
"""A full disk counts as cleared once this much is free again: SQLite can
write into WAL space it already has, so one small write succeeding proves
little, while an admission also writes the run's directory."""
NOTIFY_TRIES = 5
"""A failure notification whose preparation keeps failing is dropped (and
logged) after this many ticks, so one broken definition cannot loop."""
LAUNCHER_BACKOFF_FIRST = 0.1
LAUNCHER_BACKOFF_MAX = 5.0
"""Seconds between attempts to start a replacement launcher (doubling)."""
NOT_LAUNCHED_AT_DRAIN = "not started: no launcher was up before the supervisor shut down"
KILL_SLACK = 5.0
"""Seconds past a cancelled run's kill_grace for its keeper to reap the
group and write the exit record, before a drain stops waiting for it."""
DRAIN_PROGRESS_INTERVAL = 10.0
"""Seconds between a drain's progress lines while nothing changes."""
NEVER_STARTED = (
    "not started: its run keeper died before starting the command; the command never ran"
)
DISK_REFUSED = "not started: the store's disk refused its launch until the supervisor shut down"
"""The reason of an attempt whose spawn waited for a disk fault to pass
when the supervisor was stopped (`_spawn`, `drain`)."""
REQUEST_TRIES = 5
RECORD_READ_TRIES = 3
"""Reads of one attempt's records failing with an I/O error (each a fault
episode, read again once the disk answers its probe) before the error is
taken for the record's own: its run is failed closed and its schedule
blocked, so one bad sector never holds every other run's ingestion."""
"""A request (trigger, resume, cancel) whose handling keeps failing is
answered `refused`, with the error in words, after this many tries: retried
forever it would be pending forever, and its operator would never learn why."""
HOLD_LIMIT = 0.1
"""Seconds a held admission may still have to wait for its instant (the
pre-wake is WAKE_EARLY before it); more means the wall clock went back, and
the held chunk is rolled back rather than keep the store's write lock."""
CHECKPOINT_QUIET = 0.1
"""Seconds of sleep ahead (nothing due sooner) in which the supervisor folds
the store's write-ahead log into its database (`_checkpoint`): a checkpoint
took 1-9 ms here, off every launch's path."""
AFTER_HELD_LAUNCH = 0.003
"""Seconds the supervisor sleeps after a held chunk's spawns when nothing
else of the instant is left to admit, before the rest of its tick.

Why: the job's first instruction is what launch latency measures, and on
a host of two cores the supervisor's bookkeeping right after the spawn
(its log lines, the pids' commit, the rest of the tick and the full tick
after the pre-wake's) competes with the job's own start (`sh` and `date`
take about 2.2 ms on an idle core, about 2 ms more beside a busy
spawner). In eight rotated rounds of `bench_latency.py` against the same
build without it (load 1-7), the median latency was lower in six, by 0.87
(median ratio), the keeper's launch time unchanged (docs/benchmarks.md).
A burst's later chunks do not wait for it; exits and requests wait 3 ms
more, once per due instant."""
LOST_LAUNCH_TRIES = 3
"""Launches of one attempt that may each lose the launcher having started
nothing; the attempt then fails as never started (no replacement storm)."""
Prepared = tuple[RunRow, Invocation, RunDir, str]
"""A run ready to be marked: its invocation, its run directory, its
attempt's record directory."""

T = TypeVar("T")


@dataclass
class Watch:
    """An attempt whose shim we are waiting on.

    `handle` is None while the shim's pid is unknown (a launch whose reply
    was lost: its launch lock says whether it lives). `spec` is set while
    the attempt, marked in the store, waits for a launcher to be spawned.
    `ending` is set once the attempt ended without a valid exit record: the
    run is recorded only when its shim's session is empty (`kill_at`: when
    SIGKILL follows the SIGTERM).
    """

    run_seq: int
    schedule_id: str
    attempt: int
    record_dir: str
    handle: ShimHandle | None
    adopted: bool
    cancel_reason: str | None = None
    cancel_request: int | None = None
    """The cancel request this process carried out for the attempt: answered
    in the transaction that records the attempt's end."""
    spec: LaunchSpec | None = None
    ending: tuple[str, str | None] | None = None
    kill_at: float | None = None
    killed: bool = False
    lost_launch: bool = False
    """Its launch was ambiguous and its launcher is known gone, so no record
    and a free lock prove the command never started. (At recovery a crashed
    supervisor's launcher may still be exiting: there it counts as abandoned.)"""
    never_started: str = NEVER_STARTED
    """The reason recorded when a lost launch proves to have started nothing."""
    lost_launches: int = 0
    read_faults: int = 0
    """Reads of its records that failed with a resource error (EIO...)."""
    kill_grace: int = 0
    """Its frozen invocation's kill_grace, known from the launch or the run
    row it was adopted from: terminating it (a drain's cancel, an ending
    without a record) needs no store read, so a store fault cannot stop it."""


class _Unheld(Exception):
    """A held admission chunk (`Supervisor._hold`) that cannot commit within
    its instant's second: rolled back, decided again by the next tick."""


@dataclass(frozen=True)
class Refusal:
    """Why a run cannot start (preflight or input resolution)."""

    reason: str


@dataclass
class _Burst:
    """What one tick's admission still has to decide (see `admit_due`)."""

    ids: list[str]
    """Due schedules not decided yet, in round-robin order."""
    rows: dict[str, ScheduleRow]
    """Rows read in the current transaction (the first chunk's)."""
    active: dict[str, int]
    capacity_left: int
    budget: int


def _still_due(row: ScheduleRow, instant_now: int) -> bool:
    """`Store.due_schedules`' condition, for a row read again by id."""
    if row.next_due is not None and row.next_due <= instant_now:
        return True
    return (
        row.candidate_at is not None
        and not row.blocked_reason
        and not row.paused
        and row.deleted_at is None
    )


@dataclass
class LauncherHealth:
    """The launcher episode reported by `status` (`launcher`)."""

    up: bool = True
    since: float = 0.0
    error: str | None = None
    retry_at: float = 0.0  # time.monotonic() of the next start attempt
    backoff: float = LAUNCHER_BACKOFF_FIRST


@dataclass
class Rejection:
    """A preflight-rejected occurrence whose failure hook is owed."""

    schedule_id: str
    on_failure: tuple[str, ...] | None
    instant: int
    reason: str
    tries: int = 0


@dataclass
class Notice:
    """A failure hook owed for a run whose end is already committed."""

    run: RunRow
    attempt: int
    reason: str
    exit_code: int | None
    tries: int = 0


class Supervisor:
    def __init__(
        self,
        store: Store,
        config: SupervisorConfig,
        control: ProcessControl,
        *,
        clock: Clock = wall_clock,
        fault: FaultHook = no_fault,
        log: Callable[..., None] | None = None,
        notifier: Notifier | None = None,
        observer: Observer | None = None,
        leadership: Leadership | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store = store
        store.defer_checkpoints()  # at quiet moments only (`_checkpoint`)
        self.config = config
        self.control = control
        self.clock = clock
        self._sleep = sleep
        """How a held admission sleeps to its instant (see `_hold`)."""
        self.fault = fault
        self.log = log or EventLog()
        self.notifier = notifier or Notifier("")
        self.observer = observer or Observer()
        """Told of every committed fact (the metrics); a no-op by default."""
        self.definitions = DefinitionCache()
        self._records_root = str(records_root(store.root))
        self.fault_file = FaultFile(store.root)
        self.hooks = FailureHooks(control, self.log, config.on_failure, store=store, clock=clock)
        self.launcher = LauncherHealth(since=clock())
        self._rejections: list[Rejection] = []
        """Preflight rejections of the admission being decided (not committed)."""
        self._rejected: list[Rejection] = []
        """Committed preflight rejections whose failure hook is owed."""
        self.watches: dict[int, Watch] = {}
        self._pids: dict[int, int] = {}
        self._reaped: set[int] = set()
        """Watched runs whose shim was reaped but whose end is not committed
        yet: the launcher reports a pid once, so a failed ingestion must
        remember to read the exit record again next tick."""
        self._notices: list[Notice] = []
        self._request_tries: dict[int, int] = {}
        """Failed tries per pending request (see REQUEST_TRIES)."""
        self.errors = TickErrors()
        self._focus: dict[str, Any] = {}
        """What the current phase is working on (schedule, run, request), for
        the log line if it fails."""
        self._calendars: dict[str, tuple[int, CronCalendar | OneShotCalendar]] = {}
        """Per schedule, the calendar of its current revision only: an edit
        replaces the entry; deleted and exhausted schedules are swept out."""
        self._next_cache_sweep = time.monotonic() + CACHE_SWEEP_INTERVAL
        self._round_robin_after = ""
        self.owned_at: float | None = None
        """When this supervisor took ownership (its first tick): instants due
        up to then were missed while none ran (the startup rule); later ones
        are judged by lateness, however long the store keeps failing. A
        schedule created after it missed nothing while none ran (a one-shot
        already past at create is judged by lateness too)."""
        self._admission_failed = False
        """The last admission phase did not commit: instants decided late now
        were late because the store failed (`store-unavailable`)."""
        self._passed_over: PassedOver | None = PassedOver()
        """What the startup rule passed over, until reported once (None after)."""
        self._passing: list[tuple[str, int | None]] = []
        """This admission transaction's startup rows, counted once it committed."""
        self._waiter: Waiter | None = None
        """Set while serving: the sleep between ticks (tests tick directly)."""
        self._next_retention = 0.0
        self._unlaunched = True
        """Admitted runs may await launch (recovery's, a burst's later chunks)."""
        self._quiet_due: tuple[int | None, int] | None = None
        """(next due instant, the store's change counter) when the last full
        tick found nothing due: until either moves, ticks are quiet."""
        self._nothing_due = False
        """The last admission phase found nothing due (the idle tick)."""
        self._warmed_for: int | None = None
        """The due instant whose schedules were warmed (see `_read_next_due`)."""
        self._sleeping_to: int | None = None
        """The due instant the loop is sleeping to, if the sleep ends there."""
        self._tick_changes: int | None = None
        """The store's change counter as the last full tick began."""
        self._commits: CommitWatch | None = None
        """While serving a store that has one and no health check paces the
        loop: readable once another connection may have committed, so an
        idle loop sleeps past the poll interval (see `_idle_sleep`)."""
        self._stamped_at = -math.inf
        """When the last liveness stamp was written (this clock)."""
        self._watchdog_due: float | None = None
        """When the loop owes systemd its next WATCHDOG=1 (monotonic)."""
        self._burst_rest: list[str] = []
        """Due schedules a burst's last tick left undecided (`_start_burst`)."""
        self._chunk = FIRST_CHUNK
        """The size of the next admission chunk (see `admit_due`)."""
        self._environ: dict[str, str] | None = None
        """`os.environ` as this tick read it (see `_environment`)."""
        self._preflights: dict[tuple[str, str | None, str | None], str | None] = {}
        """This tick's preflight answers (see `_preflight`)."""
        self._hook_pids: list[int] = []
        """Pids the launcher reported that are no runs' (hooks'), kept while
        a store fault episode holds their outcomes back."""
        self._resynchronise_owed = False
        """The probe reconnected to the store: resynchronise once the episode ends."""
        self._deferred: list[tuple[str, dict[str, Any]]] | None = None
        """Log lines of the admission transaction, written once it committed."""
        self._unsaid: list[tuple[str, dict[str, Any]]] = []
        """A held chunk's committed log lines, written once its first spawn
        request was answered (`_say`), not between its commit and the spawn."""
        self.draining = False
        self.stop_requested = False
        self.stop_signals = 0
        """Stop signals received; a second one during the drain cancels at once."""
        self.unrecorded: list[int] = []
        """Runs whose ends the drain could not record by its deadline."""
        self.wake_now = False
        self.leadership = leadership or Leadership(None, config.lease, config.lease_renew)
        """Who leads (`wfsched.daemon.leadership`); without a lease (SQLite, or a
        supervisor driven by tests) this one always leads."""
        self.leading = not self.leadership.fenced
        """Whether this supervisor acts as the leader: admits, launches, answers
        requests, applies retention. A standby only watches its own host's runs."""
        self.epoch: int | None = None
        self._led = False
        self._handover = False
        """This leadership began with a takeover from another leader (or after
        losing its own lease): instants due meanwhile are judged by lateness,
        never by the startup rule, and late ones are recorded `failover`."""
        self._failover_pending = False
        self._next_hosts_check = 0.0
        self._lease_error: str | None = None

    # -- lifecycle -------------------------------------------------------------

    def announce(self) -> None:
        now = self.clock()
        with self.store.atomic():
            self.store.set_meta(
                pid=str(os.getpid()),
                started_at=repr(now),
                last_tick_at=repr(now),
                poll_interval=repr(self.config.poll_interval),
                stamp_interval=repr(self._stamp_interval(quiet=self.store.changes() is not None)),
                max_concurrent_runs=str(self.config.max_concurrent_runs),
                host_timeout=repr(self.config.host_timeout),
                lease_renew=repr(self.config.lease_renew),
                **{META_KEY: self.errors.to_meta()},
            )
            self._store_launcher_health()

    def serve(self) -> None:
        """Recover, then tick until asked to stop, then drain. With a lease,
        the leadership thread starts after recovery and the first tick that
        finds the lease held starts leading."""
        if not self.leadership.fenced:
            self.announce()
        # A drain this host's last supervisor did not finish is over.
        self.store.set_draining(self.config.host, None)
        self.observer.started(self.store)
        if self.leadership.fenced:
            self.observer.leadership(False, None)
        self.recover()
        self.leadership.start()
        # Opened now, while descriptors are to be had (see FaultFile).
        self.fault_file.write(None)
        self.notifier.send("READY=1", "STATUS=supervising")
        # `ready`, as READY=1: `started` is an attempt's launch.
        self.log("ready", pid=os.getpid(), host=self.config.host, store=self.store.display)
        waiter = self._waiter = Waiter()
        waiter.watch(self.control.fileno())
        if self.leadership.fenced:
            waiter.watch(self.leadership.wake_fd)
        commits = self.watch_commits()
        if commits is not None:
            waiter.watch(commits.fileno(), commits.drain)
        while not self.stop_requested:
            tick_started = time.monotonic()
            self.tick()
            self._phase("metrics", self.observer.ticked, time.monotonic() - tick_started)
            interval = self.notifier.watchdog_interval
            if interval and time.monotonic() >= (self._watchdog_due or 0.0):
                self.notifier.send("WATCHDOG=1")
                self._watchdog_due = time.monotonic() + interval
            episode = self.errors.episode
            timing: tuple[float, bool] | None
            if episode is not None and episode.holds_store:
                left = max(0.0, episode.retry_at - self.clock())
                timing = (min(self.config.poll_interval, left), False)
            else:
                timing = self._phase("next-due", self._sleep_seconds)
            timeout, due = timing or (self.config.poll_interval, False)
            self._phase("checkpoint", self._checkpoint, timeout)
            self.observer.sleeping(timeout if due else None)
            self._wait_until_due(waiter, timeout, due)
        self.drain()
        self.leadership.stop(release=True)
        waiter.close()
        self._waiter = None
        if commits is not None:
            self._commits = None
            commits.close()
        self.leadership.close()

    def _checkpoint(self, sleep: float) -> None:
        """The store's checkpoint, when the sleep ahead leaves time for it
        (`CHECKPOINT_QUIET`), or regardless once the log grew ten times
        that much (a supervisor that is never idle). The supervisor's own
        commits never checkpoint (`Store.defer_checkpoints`): one inside the
        admission's commit delayed that launch.

        The commit watch then fires once for the checkpoint's own write: a
        spare look, once per few hundred changes. Drained here instead, it
        could swallow an operator's commit landing meanwhile, and the loop
        would sleep through it."""
        self.store.checkpoint(quiet=sleep >= CHECKPOINT_QUIET)

    def resynchronise(self) -> None:
        """After the connection to the store was lost (a networked store):
        what the store says, not what memory says. A transaction whose COMMIT
        failed may or may not have happened, so runs marked running that no
        watch covers get recovery's verdict, and admitted runs are looked up
        again. Runs already executing went on; their exits waited in their
        run directories."""
        self._unlaunched = True
        for run in self.store.unfinished_runs():
            if run.state == "running" and run.seq not in self.watches and self._runs_here(run):
                self._recover_running(run)

    def _runs_here(self, run: RunRow) -> bool:
        """Whether `run` executes on this host, so this supervisor is its agent.
        With one supervisor (no lease) every run is. With a lease, the run's
        recorded host says; a run recorded before runs had hosts is this
        host's if its attempt record directory is here (it is made on the
        launching host before the attempt is marked)."""
        if not self.leadership.fenced:
            return True
        if run.host is not None:
            return run.host == self.config.host
        return attempt_record_dir(self.store.root, run.run_id, run.attempt).exists()

    # -- leadership ----------------------------------------------------------------

    def _follow_lease(self) -> None:
        """Act on what the leadership thread found: lead with a newly held
        epoch, or step down from a lost one."""
        if not self.leadership.fenced:
            return
        self.leadership.drain_wake()
        error = self.leadership.error
        if error != self._lease_error:
            # Logged once per change: the thread retries on its own.
            self._lease_error = error
            if error is not None:
                self.log("lease-error", reason=error)
        holds, epoch = self.leadership.holds()
        if holds and (not self.leading or epoch != self.epoch):
            self._lead(epoch)
        elif not holds and self.leading:
            reason = "deposed" if epoch is None else "no renewal for a whole lease"
            self._step_down(reason)

    def _may_lead(self) -> bool:
        """Checked before admitting or launching: a leader whose lease may have
        lapsed by its own monotonic clock stops at once (the database's fence
        would refuse its commits anyway)."""
        if not self.leading:
            return False
        if self.leadership.holds()[0]:
            return True
        self._step_down("no renewal for a whole lease")
        return False

    def _lead(self, epoch: int | None) -> None:
        led_before = self._led
        self._handover = self._led or self.leadership.saw_leader
        self._failover_pending = self._handover
        self._led = True
        self.epoch = epoch
        self.store.fence(epoch)
        self.leading = True
        self.log("leading", epoch=epoch, handover=self._handover)
        self.observer.leadership(True, epoch)
        self.notifier.send(f"STATUS=leading (epoch {epoch})")
        try:
            self.store.set_idle_limit(self.config.lease)
            self.announce()
        except LeaseLost as exc:
            self._step_down(str(exc))
            return
        except Exception as exc:
            # A store error (a lost connection): stand by again and take up
            # leadership next tick while the lease holds (not as a handover
            # from ourselves). The leadership phase counts it. The lease was
            # won: what falls due from now is judged by lateness, late because
            # the store failed, as for a lock taken before the store failed.
            self._led = led_before
            if self.owned_at is None:
                self.owned_at = self.clock()
                self._admission_failed = True
            self._step_down(f"could not take up leadership: {describe(exc)}")
            raise
        self._unlaunched = True
        self.wake_now = True

    def _step_down(self, reason: str) -> None:
        """Stop leading now: nothing more is admitted, launched, answered or
        pruned; runs already executing on this host go on and are recorded."""
        self.store.fence(None)
        was = self.epoch
        self.leading = False
        self.epoch = None
        self._rejections = []
        self.log("standby", epoch=was, reason=reason)
        self.observer.leadership(False, None)
        self.notifier.send("STATUS=standby")

    def request_stop(self, *_: Any) -> None:
        """Signal handler: only sets the flag and counts (a second signal
        cuts a drain short); the loop does the work."""
        self.stop_signals += 1
        self.stop_requested = True

    def _wait(self, timeout: float) -> None:
        if self._waiter is not None and self._waiter.wait(timeout, self._stopping):
            # Woken early by an exit or a signal: no precise sleep after it.
            self.wake_now = True

    def _stopping(self) -> bool:
        """What ends a sleep early: a stop signal; during the drain, which
        sleeps while runs end, only a second one."""
        return self._hurried() if self.draining else self.stop_requested

    def _sleep_seconds(self) -> tuple[float, bool]:
        """Until the next due instant, capped by the poll interval; and
        whether that instant ends the sleep (rather than the poll interval).

        While idle, the schedule due next gets its definition parsed and its
        calendar built, so the tick at its instant admits without that cost.
        """
        if self._commits is not None:
            # Our own writes of this tick: events from here on are others'.
            self._commits.drain()
        self._sleeping_to = None
        if self.wake_now:
            self.wake_now = False
            return 0.0, False
        timeout = self.config.poll_interval
        if not self.launcher.up:
            timeout = min(timeout, max(0.0, self.launcher.retry_at - time.monotonic()))
        # While quiet, nothing changed since the next due instant was read.
        quiet = self._quiet_due
        next_due = quiet[0] if quiet is not None else self._read_next_due()
        now = self.clock()
        if self._commits is not None:
            timeout = max(timeout, self._idle_sleep(now))
        if next_due is None:
            return timeout, False
        until_due = next_due - now
        if next_due != self._warmed_for and until_due <= WARM_AHEAD:
            # Everything due with it, once per instant: a burst then decides
            # from parsed definitions and built calendars.
            self._warmed_for = next_due
            self._warm(self.store.due_schedules(next_due, limit=WARM_LIMIT))
        due = until_due <= timeout
        self._sleeping_to = next_due if due else None
        return max(0.0, min(timeout, until_due)), due

    def _idle_sleep(self, now: float) -> float:
        """How long an idle loop may sleep, woken by the commit watch: until
        the next liveness stamp, retention or watchdog message is owed; 0
        when it is not idle or another connection committed since the last
        full tick read its work (the next tick reads it at once)."""
        quiet = self._quiet_due
        if quiet is None or not self._idle():
            return 0.0
        try:
            if self.store.changes() != quiet[1]:
                return 0.0
        except Exception:
            return 0.0  # the next tick is a full one and counts the error
        until = self._stamped_at + self._stamp_interval(quiet=True) - now
        if self.config.retention is not None:
            until = min(until, self._next_retention - now)
        if self._watchdog_due is not None:
            until = min(until, self._watchdog_due - time.monotonic())
        return max(0.0, until)

    def _stamp_owed(self, now: float) -> bool:
        """Whether a quiet tick stamps: the interval is up, give or take the
        millisecond an epoll timeout is rounded to."""
        return now >= self._stamped_at + self._stamp_interval(quiet=True) - STAMP_SLACK

    def _stamp_interval(self, *, quiet: bool) -> float:
        """Seconds between liveness stamps: every poll interval unless ticks
        can be quiet (see STAMP_INTERVAL)."""
        if not quiet:
            return self.config.poll_interval
        return max(self.config.poll_interval, STAMP_INTERVAL)

    def watch_commits(self) -> CommitWatch | None:
        """Open the store's commit watch unless a health check judges the
        loop by its ticks every poll interval (metrics' /healthz)."""
        if self.observer.paces_ticks:
            return None
        self._commits = self.store.watch_commits()
        return self._commits

    def _read_next_due(self) -> int | None:
        """The next due instant; remembered for the quiet ticks (`_quiet`)
        when nothing was due this tick, with the store's change counter read
        first (a commit after it is seen as a change)."""
        row = self.store.earliest_due_schedule()
        next_due = row.next_due if row is not None else None
        if row is not None and next_due is not None:
            self._warm([row])
        if self._nothing_due and self._tick_changes is not None:
            self._quiet_due = (next_due, self._tick_changes)
        return next_due

    def _warm(self, rows: list[ScheduleRow]) -> None:
        """Parse these schedules' definitions and build their calendars ahead
        of their instant (a definition that fails is blocked when decided)."""
        for row in rows:
            with contextlib.suppress(WfschedError, ValueError):
                self._calendar(row, self.definitions.get(row))

    def _wait_until_due(self, waiter: Waiter, timeout: float, due: bool) -> None:
        """Sleep until the next tick; before a due instant, the pre-wake
        (`_prewake`) prepares its admission."""
        if waiter.wait_until_due(timeout, due, self._stopping, self._prewake):
            self.wake_now = True

    def _prewake(self) -> None:
        """WAKE_EARLY before a due instant: the instant's tick, its first
        admission chunk held open at the instant (`_hold`), so only the
        mark, the commit and the spawn are left after the instant.

        Without a tick to hold (a standby, a drain, the startup tick not
        taken yet) it only wakes the run keeper."""
        instant = self._sleeping_to
        if instant is None or not self.leading or self.draining or self.owned_at is None:
            self.control.warm()
            return
        self.tick(at=instant)
        if self._commits is not None:
            # Its own commits must not end the sleep to the instant early;
            # the next tick reads everything anyway.
            self._commits.drain()

    def _hold(self, instant: int) -> None:
        """Inside the first admission chunk's transaction, decided for
        `instant` at the pre-wake, its run directories written and its
        launch specs encoded (`_mark_with_admission`, which marks the
        attempts after this returns): wake the run keeper, then sleep to the
        instant, so the transaction commits at or after it, never before.

        Why: deciding the chunk and writing its directories cost 1-4 ms
        (more under load) that the instant's own tick spent before its
        commit; now the instant finds them done. The decision is the one
        the instant's tick would make: `decide` reads whole seconds, this
        transaction holds the store's write lock (nothing else commits
        meanwhile) and it commits only within the instant's second. A
        sleep that ends in a later second (a stopped process, a clock
        step) or too far ahead of it (the clock went back) rolls the chunk
        back (`_Unheld`), and the next tick decides it as any tick would."""
        self.fault("admission-held")
        self.control.warm()
        while (left := instant - self.clock()) > 0:
            if left > HOLD_LIMIT:
                raise _Unheld(f"{left:.3f}s before its instant")
            self._sleep(left)
        if self.clock() >= instant + 1:
            raise _Unheld("past its instant's second")

    # -- one tick -------------------------------------------------------------------

    def tick(self, at: int | None = None) -> None:
        """One pass over every phase. A phase that fails is logged, counted
        and skipped; the others still run, and the next tick retries it
        (each phase re-reads its work from the store or its retry list).

        During a fault episode the tick first probes the resource (after
        its backoff); while the store stays unusable it only watches the
        runs: their exits wait on disk and in `_reaped` until they can be
        recorded, and nothing is written or started meanwhile.

        `at`: the due instant a pre-wake's tick is for (`_prewake`): its
        decisions are the instant's, and its first admission chunk commits
        at the instant (`_hold`)."""
        if not self._store_usable():
            self._phase("watch", self._collect_reaped)
            return
        now = self.clock() if at is None else float(at)
        self._phase("leadership", self._follow_lease)
        if self._quiet(now):
            if self.leading and self._stamp_owed(now):
                self._phase("liveness", self._stamp)
            return
        self._quiet_due = None  # read again by `_sleep_seconds` after this tick
        # Read before anything else: a commit from now on changes it again.
        self._tick_changes = self._phase("liveness", self.store.changes)
        if self.owned_at is None and self.leading:
            self.owned_at = now
        self._environ = None
        self._preflights = {}
        self._phase("ingestion", self.ingest_exits)
        self._phase("requests", self.handle_requests)
        if not self.draining:
            self._phase("launch", self._launch_phase)
            if self._may_lead():
                self._phase("admission", self.admit_due, now, at is not None)
        self._phase("notification", self.notify_failures)
        self._phase("notification", self.notify_rejections)
        if time.monotonic() >= self._next_cache_sweep:
            self._phase("retention", self._sweep_caches)
        if not self.draining and self._may_lead():
            self._phase("retention", self.retain, now)
            self._phase("hosts", self.abandon_lost_hosts, now)
        if self.leading:
            self._phase("liveness", self._stamp)

    def _quiet(self, now: float) -> bool:
        """Whether this tick has nothing to do but the liveness stamp: no
        run or hook to watch, no work left in memory, nothing woke the loop,
        nothing due before the next due instant the last full tick found,
        and no other connection committed since (a new schedule, an edit, a
        request). An idle supervisor then costs one statement and a stamp per
        tick, not a read of all its work."""
        due = self._quiet_due
        if (
            due is None
            or not self._idle()
            or (due[0] is not None and now >= due[0])
            or (self.config.retention is not None and now >= self._next_retention)
        ):
            return False
        try:
            changes = self.store.changes()
        except Exception:
            # Not quiet then: the full tick reads it again in its liveness
            # phase, which counts the error (it never ends the supervisor).
            return False
        return changes is not None and changes == due[1]

    def _idle(self) -> bool:
        """Nothing in flight or in memory that a tick must look at."""
        return not (
            self.wake_now
            or self.watches
            or self._reaped
            or self._hook_pids
            or self._unlaunched
            or self._notices
            or self._rejected
            or self._burst_rest
            or self.draining
            or not self.launcher.up
            or self.errors.episode is not None
            or self.hooks.busy
        )

    def _phase(self, name: str, action: Callable[..., T], *args: Any) -> T | None:
        """Run one phase; contain what it raises (a store error, a bug).

        Whatever failed is retried by the next tick: an admission or a mark
        rolled back as a whole, a reaped shim stays in `_reaped`, a notice
        stays queued, and admitted runs are looked for again (a launch may
        have failed after its admission committed).
        """
        episode = self.errors.episode
        if episode is not None and episode.holds_store and name not in _DURING_FAULTS:
            return None  # the probe alone writes the store until the fault clears
        self._focus = {}
        try:
            return action(*args)
        except LeaseLost as exc:
            # The fence rolled the transaction back: another leads now.
            self._unlaunched = True
            if self.leading:
                self._step_down(str(exc))
            return None
        except Exception as exc:
            self._unlaunched = True
            if self._fault(name, exc):
                return None
            repeated = self.errors.record(name, exc, self._focus, self.clock())
            if repeated:
                about = {key: value for key, value in self._focus.items() if value is not None}
                if repeated > 1:
                    about["repeated"] = repeated
                self.log("tick-error", phase=name, **about, reason=describe(exc))
            return None
        finally:
            self._focus = {}

    # -- resource faults ------------------------------------------------------------

    def _fault(self, phase: str, exc: BaseException) -> bool:
        """If `exc` is a resource fault, count it and open an episode (or go on
        with the open one); False if it is another kind of error."""
        fault = classify(exc, self.store.root)
        if fault is None:
            return False
        now = self.clock()
        words = supervisor_words(fault)
        episode = self.errors.open_episode(phase, fault.kind, words, now, fault.where)
        if episode is None:
            return True
        if episode.holds_store:
            # Instants decided late once it ends were late because of it.
            self._admission_failed = True
        self.log("fault", kind=fault.kind, phase=phase, reason=words)
        self.observer.fault_opened(fault.kind)
        self.notifier.send(f"STATUS=fault since {format_event(now)}: {words}")
        problem = self.fault_file.write(episode.public())
        if problem is not None:
            self.log("fault-status-failed", reason=problem)
        hook_dir = fault_path(self.store.root).with_name(
            f"fault-hook-{os.getpid()}-{self.errors.episodes}"
        )
        self.hooks.fire_fault(fault.kind, words, format_event(now) or "", hook_dir)
        return True

    def _store_usable(self) -> bool:
        """No episode, or its probe just passed, or it holds launches only."""
        episode = self.errors.episode
        return episode is None or self._probe() or not episode.holds_store

    def _probe(self) -> bool:
        """Try the faulted resource again once the backoff allows: a file
        descriptor, the connection to the database (a networked store's
        server restarted or unreachable: reconnect and take ownership again),
        free space, then a durable write to the store. Ends the episode (one
        log line with its duration) and returns True when all work.

        Another supervisor that took the store while the connection was
        down is a ConflictError: this one stops (it must not share it)."""
        episode = self.errors.episode
        assert episode is not None
        now = self.clock()
        if now < episode.retry_at:
            return False
        try:
            if not episode.holds_store:
                self.control.probe_fork()
            os.close(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
            if self.store.ensure_connected():
                self._resynchronise_owed = True
            if episode.kind == "disk-full":
                self.store.probe_space(PROBE_FREE_BYTES)
            if episode.where is not None:
                probe_directory(episode.kind, episode.where, PROBE_FREE_BYTES)
            try:
                self._stamp(durable=True)
            except LeaseLost as exc:
                # The database took the write up to its fence: the store is
                # back, only this leader's lease lapsed during the outage. It
                # stands down; the leadership thread takes a lease again.
                self._unlaunched = True
                if self.leading:
                    self._step_down(str(exc))
        except ConflictError:
            raise
        except Exception as exc:
            fault = classify(exc, self.store.root)
            episode.failed_probe(str(fault) if fault else describe(exc), self.clock())
            self.fault_file.write(episode.public())
            return False
        self._end_episode()
        if self._resynchronise_owed:
            self._resynchronise_owed = False
            self._phase("ingestion", self.resynchronise)
        return True

    def _end_episode(self) -> None:
        now = self.clock()
        ended = self.errors.close_episode(now)
        if ended is None:
            return
        self.log(
            "fault-cleared",
            kind=ended.kind,
            since=format_event(ended.since),
            duration=f"{now - ended.since:.1f}s",
            retries=ended.probes,
        )
        self.notifier.send("STATUS=supervising")
        self.observer.fault_closed()
        self.fault_file.write(None)
        self._unlaunched = True
        self.wake_now = True
        if ended.holds_store:
            # What is decided late next was late because the store failed,
            # even when this supervisor had to take its lease again.
            self._admission_failed = True

    def _note(self, event: str, **fields: Any) -> None:
        """Log now, or after the admission transaction commits if one is
        open: a log line states a committed fact, never a rolled-back one."""
        if self._deferred is not None:
            self._deferred.append((event, fields))
        else:
            self.log(event, **fields)

    def _stamp(self, durable: bool = False) -> None:
        """The liveness stamp `status` reads, with the contained-error counts."""
        now = self.clock()
        values = {"last_tick_at": repr(now)}
        if self.errors.changed:
            values[META_KEY] = self.errors.to_meta()
        if durable:
            with self.store.atomic():
                self.store.set_meta(**values)
        else:
            self.store.touch_meta(**values)
        self.errors.changed = False
        self._stamped_at = now

    def retain(self, now: float) -> None:
        """Automatic retention: a small bounded prune per call, at most once a
        minute unless the last call left more, so history growth never
        stalls a tick for long."""
        if self.config.retention is None or now < self._next_retention:
            return
        from wfsched.api.retention import prune

        # Set first: a prune that fails is retried in a minute, not every tick.
        self._next_retention = now + RETENTION_INTERVAL
        report = prune(
            self.store, self.config.retention, now, max_batches=1, batch_size=RETENTION_BATCH
        )
        if report.removed_anything:
            self.log(
                "pruned",
                runs=report.runs,
                occurrences=report.occurrences,
                dirs=report.run_dirs,
                requests=report.requests,
            )
        for error in report.errors:
            self.log("prune-failed", reason=error)
        if report.more:
            self._next_retention = now

    def abandon_lost_hosts(self, now: float) -> None:
        """Fail the running runs of every host whose heartbeat is older than
        `host_timeout`: nobody can watch them any more, and running them
        again elsewhere could repeat external effects. An exit record their
        host reports later is kept on the run as a disclosure."""
        if not self.leadership.fenced or now < self._next_hosts_check:
            return
        self._next_hosts_check = now + HOSTS_INTERVAL
        lost = self.store.runs_on_lost_hosts(self.config.host_timeout)
        if not lost:
            return
        ended = []
        with self.store.atomic():
            for run, host, last_seen in lost:
                reason = HOST_LOST.format(
                    host=host, since=format_event(last_seen), timeout=self.config.host_timeout
                )
                self._mark_failed(run.seq, run.attempt or None, reason, now)
                ended.append((run, reason))
        for run, reason in ended:
            self.observer.run_ended(run.seq)
            self.log("failed", run=run.run_id, schedule=run.schedule_id, reason=reason)
            self._notices.append(Notice(run, run.attempt, reason, None))

    def admit_due(self, now: float, held: bool = False) -> None:
        """Decide the due schedules in chunks: each chunk is one transaction,
        and its runs are marked and launched as soon as it commits, before
        the next chunk is decided (a small first chunk, then doubling).
        `held`: a pre-wake's tick for the instant `now`: the first chunk's
        transaction waits for it before its mark and commit (`_hold`).

        An idle tick is one indexed read, outside any write transaction.
        """
        instant_now = int(now)
        self._nothing_due = False
        if not self._burst_rest:
            failed, self._admission_failed = self._admission_failed, True
            if not self.store.due_schedules(instant_now, limit=1):
                self._admission_failed = False
                self._nothing_due = True
                if self._passed_over is not None:
                    self._report_passed_over()
                return  # the idle tick: one indexed query, nothing more
            self._admission_failed = failed
        began = time.monotonic()
        burst: _Burst | None = None
        hold: int | None = instant_now if held else None
        rest, after = list(self._burst_rest), self._round_robin_after
        while True:
            size = self._chunk
            self._chunk = min(size * 2, LAUNCH_CHUNK)
            try:
                burst, admitted, marked, specs = self._admission_chunk(
                    now, instant_now, burst, size, hold
                )
            except _Unheld:
                # Rolled back: the instant's own tick decides it again.
                self._chunk = FIRST_CHUNK
                self._burst_rest, self._round_robin_after = rest, after
                return
            hold = None
            if marked:
                # Marked with their admission: spawned now, each settled per
                # run whatever fails (the commit's fault point included).
                points = ("after-admission-commit", "after-attempt-mark")
                self._phase(
                    "launch", self._start_marked, marked, 1, NO_RESUME_INPUT, points, None, specs
                )
            elif admitted:
                self.fault("after-admission-commit")
            done = {run.seq for run, *_ in marked}
            unmarked = [run for run in admitted if run.seq not in done]
            if unmarked:
                # A failed launch is the launch phase's: the admissions stand,
                # and the launch phase looks for them again next tick.
                self._phase("launch", self._launch_runs, unmarked)
            if not burst.ids:
                self._chunk = FIRST_CHUNK  # the burst is over
                if specs is not None:
                    self._sleep(AFTER_HELD_LAUNCH)  # a held chunk was all of it
                if self._passed_over is not None:
                    self._report_passed_over()
                return
            if (
                burst.budget <= 0
                or self.errors.episode is not None
                or time.monotonic() - began >= BURST_SLICE
            ):
                # The rest of the burst is decided by the next ticks, in
                # chunks as large as this tick's next one would have been.
                self._burst_rest = burst.ids
                self.wake_now = True
                return

    def _admission_chunk(
        self,
        now: float,
        instant_now: int,
        burst: _Burst | None,
        size: int,
        held: int | None = None,
    ) -> tuple[_Burst, list[RunRow], list[Prepared], list[LaunchSpec] | None]:
        """One transaction: up to `size` admissions (the first chunk also
        reads what is due), their first attempts marked with them (see
        `_mark_with_admission`; the runs so marked are returned too, and for
        a held chunk their launch specs); logged and owed hooks only once it
        committed. `held`: the instant the chunk's commit waits for
        (`_hold`); `_Unheld` leaves everything as it was."""
        failed = self._admission_failed
        late_reason = "store-unavailable" if failed else "late"
        if self._failover_pending and not failed:
            late_reason = FAILOVER
        self._admission_failed = True  # until this decision commits
        self._rejections = []
        self._deferred = []
        self._passing = []
        try:
            with self.store.atomic():
                if burst is None:
                    burst = self._start_burst(instant_now)
                admitted = self._decide_chunk(burst, now, instant_now, size, late_reason)
                self._focus = {}  # the commit is every schedule's
                marked, specs = self._mark_with_admission(admitted, held)
                if admitted:
                    self.fault("before-admission-commit")
            lines, self._deferred = self._deferred, None
            if self._passed_over is not None:
                for schedule_id, count in self._passing:
                    self._passed_over.add(schedule_id, count)
            if held is not None and marked:
                self._unsaid = lines
            else:
                for event, fields in lines:
                    self.log(event, **fields)
        except _Unheld:
            self._admission_failed = failed
            self._rejections = []
            raise
        finally:
            self._deferred = None
        self._admission_failed = False
        self._failover_pending = False
        self._rejected.extend(self._rejections)  # committed: their hooks are owed
        self._rejections = []
        return burst, admitted, marked, specs

    def _report_passed_over(self) -> None:
        """Once, after the first admission pass that decided every due
        schedule: how many instants of how many schedules the startup rule
        passed over (recorded for `status`, then logged). A takeover is no
        startup and passes nothing over by that rule: it reports none."""
        report = self._passed_over
        assert report is not None
        at = format_event(self.owned_at)
        with self.store.atomic():
            self.store.set_meta(**{PASSED_OVER_KEY: report.to_meta(at)})
        if report.instants:
            self.log("passed-over", **report.fields(), reason=SUPERVISOR_DOWN, hint=HINT)
        self._passed_over = None

    def _start_burst(self, instant_now: int) -> _Burst:
        """What this tick decides: the due schedules in round-robin order,
        the free capacity, the admission budget and the overlap counts. Only
        this supervisor adds or ends scheduled runs, so the counts hold for
        the whole tick; the rows themselves are read again per chunk. A burst
        longer than a tick goes on with the schedules the last tick left,
        before anything else is looked at (no re-read of every due row per
        tick; a schedule due meanwhile waits for the burst's end)."""
        rest, self._burst_rest = self._burst_rest, []
        if rest:
            # Continued from the last tick: every row is read per chunk.
            rows: list[ScheduleRow] = []
            ids = rest
        else:
            rows = self._rotate(self.store.due_schedules(instant_now, limit=100_000))
            ids = [row.id for row in rows]
        return _Burst(
            ids=ids,
            rows={row.id: row for row in rows},
            active=self.store.active_run_counts(ids) if ids else {},
            capacity_left=max(0, self.config.max_concurrent_runs - self.store.executing_count()),
            budget=self.config.max_admissions_per_tick,
        )

    def _decide_chunk(
        self, burst: _Burst, now: float, instant_now: int, size: int, late_reason: str
    ) -> list[RunRow]:
        """Decide schedules, in order, until `size` runs are admitted. A
        schedule is decided from its row as this transaction reads it: an
        administration command committed between two chunks (a pause, an
        update) is seen, and a schedule no longer due is passed over."""
        admitted: list[RunRow] = []
        while burst.ids and len(admitted) < size:
            if burst.budget <= 0:
                self.wake_now = True
                break
            take = burst.ids[: size - len(admitted)]
            del burst.ids[: len(take)]
            unread = [schedule_id for schedule_id in take if schedule_id not in burst.rows]
            if unread:
                burst.rows.update(self.store.schedules_by_id(unread))
            for index, schedule_id in enumerate(take):
                row = burst.rows.pop(schedule_id, None)
                if row is None or not _still_due(row, instant_now):
                    continue
                if burst.budget <= 0:
                    burst.ids[:0] = take[index:]  # decided by the next tick
                    self.wake_now = True
                    break
                runs = self._decide_one(
                    row,
                    now,
                    burst.active.get(row.id, 0),
                    burst.capacity_left,
                    burst.budget,
                    late_reason,
                )
                admitted.extend(runs)
                burst.capacity_left -= len(runs)
                burst.budget -= len(runs)
        burst.rows.clear()  # what the next chunk decides, it reads again
        return admitted

    def _rotate(self, rows: list[ScheduleRow]) -> list[ScheduleRow]:
        """Round-robin: start after the schedule admitted last, for fairness
        when capacity is scarce."""
        after = [row for row in rows if row.id > self._round_robin_after]
        return after + [row for row in rows if row.id <= self._round_robin_after]

    def _decide_one(
        self,
        row: ScheduleRow,
        now: float,
        active: int,
        capacity_left: int,
        budget: int,
        late_reason: str,
    ) -> list[RunRow]:
        self._focus = {"schedule": row.id}
        try:
            with self.store.atomic():
                defn = self.definitions.get(row)
                view = ScheduleView(
                    row.id,
                    row.consumed_through,
                    Candidate(row.candidate_at, row.candidate_why)
                    if row.candidate_at is not None and row.candidate_why
                    else None,
                    defn.policy.overlap,
                    defn.policy.max_active_runs,
                    defn.policy.misfire,
                    defn.policy.lateness,
                )
                decision = decide(
                    view,
                    self._calendar(row, defn),
                    int(now),
                    active=active,
                    capacity_left=min(capacity_left, budget),
                    owned_at=self._startup_through(row),
                    late_reason=late_reason,
                )
                return self._persist(row, defn, decision, now)
        except StoreUnavailable:  # a lost connection too
            raise  # a resource fault or a lost store is the tick's, never this schedule's
        except (WfschedError, ValueError, KeyError, TypeError) as exc:
            self.block(row.id, f"cannot decide: {exc}")
            return []

    def _startup_through(self, row: ScheduleRow) -> int | None:
        """The instant the startup rule covers for `row`: none for a schedule
        created after this supervisor took ownership, nor after a handover (a
        failover is not a startup: what fell due meanwhile is judged by
        lateness)."""
        if self._handover or self.owned_at is None or row.created_at > self.owned_at:
            return None
        return int(self.owned_at)

    def _persist(
        self, row: ScheduleRow, defn: Definition, decision: Decision, now: float
    ) -> list[RunRow]:
        # The schedule's row first: nothing reads its answer, so a server
        # store sends it with the ledger and run inserts that follow (one
        # round trip) rather than on its own at the end of the savepoint.
        self.store.update_schedule(
            row.id,
            consumed_through=decision.consumed_through,
            candidate_at=decision.candidate.at if decision.candidate else None,
            candidate_why=decision.candidate.why if decision.candidate else None,
            next_due=decision.next_due,
            exhausted=int(decision.exhausted),
            blocked_reason=decision.blocked,
        )
        record_entries(self.store, row.id, row.revision, decision.entries, now)
        for entry in decision.entries:
            summary: dict[str, Any] = {}
            if entry.summary and entry.last is not None:
                # A summary row's line says how many it stands for (over 100
                # the count is not computed: `count_over` says so).
                summary = {"last": format_instant(entry.last), "count": entry.count}
                if entry.count is None:
                    summary["count_over"] = SCAN_CAP
            self._note(
                entry.state,
                schedule=row.id,
                at=format_instant(entry.at),
                reason=entry.reason,
                **summary,
            )
            if entry.reason == SUPERVISOR_DOWN and entry.state == "skipped-misfire":
                self._passing.append((row.id, entry.count if entry.summary else 1))
        admitted = []
        for instant, _why in decision.admit:
            run = self._admit(row, defn, instant, now)
            if run is not None:
                admitted.append(run)
        if decision.blocked:
            self._note("blocked", schedule=row.id, reason=decision.blocked)
        self.observer.schedule_changed(row.id)
        if admitted:
            self._round_robin_after = row.id
        return admitted

    def _admit(self, row: ScheduleRow, defn: Definition, instant: int, now: float) -> RunRow | None:
        """Freeze the invocation and write the run and its admitted row, or
        record preflight-rejected: no run is invented for a rejected start.
        The run as written (its launch needs no read back)."""
        frozen = self._freeze_invocation(row, defn, instant, "scheduled")
        if isinstance(frozen, Refusal):
            reason = frozen.reason
            self.store.insert_occurrence(
                row.id, instant, "preflight-rejected", row.revision, now, reason=reason
            )
            self._note(
                "preflight-rejected", schedule=row.id, at=format_instant(instant), reason=reason
            )
            # Alerted after the commit: a rejected start is a failure too.
            self._rejections.append(Rejection(row.id, defn.on_failure, instant, reason))
            return None
        text = frozen.to_json()
        seq = self.store.insert_admitted_run(
            row.id, instant, row.revision, text, now, host=self.config.host
        )
        self._note("admitted", schedule=row.id, at=format_instant(instant), run=run_id(seq))
        return RunRow(
            seq, row.id, "scheduled", instant, "admitted", None, None, row.revision, text, now,
            None, None, 0, self.config.host,
        ).parsed_as(frozen)  # fmt: skip

    def _freeze(
        self, row: ScheduleRow, defn: Definition, instant: int, kind: str, now: float
    ) -> tuple[int, str] | Refusal:
        """A manual run made: its invocation frozen (`_freeze_invocation`, as
        a scheduled run's is in `_admit`), then the run inserted. The run's
        seq and frozen invocation, or why it cannot start: then nothing is
        written."""
        frozen = self._freeze_invocation(row, defn, instant, kind)
        if isinstance(frozen, Refusal):
            return frozen
        text = frozen.to_json()
        seq = self.store.insert_run(
            row.id, kind, instant, row.revision, text, now, host=self.config.host
        )
        return seq, text

    def _freeze_invocation(
        self, row: ScheduleRow, defn: Definition, instant: int, kind: str
    ) -> Invocation | Refusal:
        """Resolve the run's inputs and preflight its command: the frozen
        invocation, or why it cannot start. A manual run has no
        occurrence: its `occurrence_id` binding is JSON null."""
        occurrence = None if kind == "manual" else occurrence_id(row.id, instant)
        reason, document = self._resolve(defn, row.id, occurrence, instant)
        if reason is None:
            reason = self._preflight(defn)
        if reason is not None:
            return Refusal(reason)
        return _invocation(defn, document, self.store.runs_dir)

    def _preflight(self, defn: Definition) -> str | None:
        """`preflight`, answered once per tick for each program, cwd and
        PATH: a burst of one command would search PATH once per run."""
        env = self._environment()
        if defn.run.env:
            env = {**env, **dict(defn.run.env)}
        key = (defn.run.command[0], defn.run.cwd, env.get("PATH"))
        if key not in self._preflights:
            self._preflights[key] = preflight(defn.run.command, defn.run.cwd, env)
        return self._preflights[key]

    def _environment(self) -> dict[str, str]:
        """What runs inherit of the supervisor's environment (its store
        credentials withheld: `inherited_environment`), read once per tick:
        copying `os.environ` decodes every variable, and a burst needs it per run."""
        if self._environ is None:
            self._environ = inherited_environment(os.environ)
        return self._environ

    @staticmethod
    def _resolve(
        defn: Definition, schedule_id: str, occurrence: str | None, instant: int
    ) -> tuple[str | None, Any]:
        try:
            document = resolve_input(
                defn.inputs,
                schedule_id=schedule_id,
                occurrence_id=occurrence,
                scheduled_at=format_instant(instant) or "",
            )
        except WfschedError as exc:
            return f"input: {exc}", None
        return None, document

    def _calendar(self, row: ScheduleRow, defn: Definition) -> CronCalendar | OneShotCalendar:
        cached = self._calendars.get(row.id)
        if cached is not None and cached[0] == row.revision:
            return cached[1]
        cal = calendar_for(defn.trigger)
        self._calendars[row.id] = (row.revision, cal)
        return cal

    def _sweep_caches(self) -> None:
        """Forget the parsed definitions and calendars of schedules that are
        never decided again (deleted, exhausted). Ids are never reused, so
        without this a supervisor that sees many one-shots come and go would
        keep every one it ever decided (about 1.3 KB each) for its lifetime."""
        self._next_cache_sweep = time.monotonic() + CACHE_SWEEP_INTERVAL
        cached = set(self._calendars) | set(self.definitions.ids())
        rows = self.store.schedules_by_id(cached)
        gone = [
            schedule_id
            for schedule_id in cached
            if (row := rows.get(schedule_id)) is None or row.deleted_at is not None or row.exhausted
        ]
        for schedule_id in gone:
            self._calendars.pop(schedule_id, None)
        self.definitions.forget(gone)

    def block(self, schedule_id: str, reason: str) -> None:
        """Fail closed: stop admitting for this schedule, visibly, until an
        operator resumes it. Never silently cleared."""
        with self.store.atomic():
            self.store.update_schedule(schedule_id, blocked_reason=reason, next_due=None)
        self.observer.schedule_changed(schedule_id)
        self._note("blocked", schedule=schedule_id, reason=reason)

    # -- launching ------------------------------------------------------------------

    def _launch_phase(self) -> None:
        """A launcher that could not be replaced is tried again (backoff);
        attempts marked while none was up are spawned; then admitted runs."""
        self._revive_launcher()
        self._spawn_waiting()
        if self._may_lead():
            self.launch_admitted()

    def launch_admitted(self) -> None:
        """Admitted runs not yet launched (left by recovery or by a chunked
        burst): through capacity, except manual runs, which bypass it."""
        if not self._unlaunched:
            return
        pending = self.store.admitted_runs()
        if not pending:
            self._unlaunched = False
            return
        room = self.config.max_concurrent_runs - self.store.scheduled_running_count()
        chosen: list[RunRow] = []
        for run in pending:
            if len(chosen) == LAUNCH_CHUNK:
                self.wake_now = True
                break
            if run.attempt:
                # Records that contradict each other (recovery blocked the
                # schedule, and a `resume` cleared it): launching would
                # collide with the attempt rows, so it blocks again, and the
                # run waits for `runs cancel`.
                if self._schedule_usable(run.schedule_id):
                    self.block(run.schedule_id, f"{run.run_id} is admitted but has attempts")
                continue
            if run.is_manual:
                chosen.append(run)
            elif room > 0 and self._schedule_usable(run.schedule_id):
                chosen.append(run)
                room -= 1
        self._launch_runs(chosen)

    def _schedule_usable(self, schedule_id: str) -> bool:
        row = self.store.get_schedule(schedule_id)
        return row is not None and not row.blocked_reason

    def launch(
        self,
        seqs: list[int],
        attempt: int = 1,
        resume_input: Any = NO_RESUME_INPUT,
        answer: RequestRow | None = None,
    ) -> None:
        """Run directory, then the durable attempt mark, then the shim.

        A resume request is answered inside the mark's transaction: a crash
        before it leaves the request pending (acted on after the restart),
        never answered "done" for an attempt that was not marked. With no
        launcher up, nothing is marked: admitted runs stay admitted (durable)
        and launch once a launcher is back; a resume request stays pending.
        """
        if seqs and not self._may_lead():
            self._unlaunched = True
            return
        if not seqs or self._launch_held():
            return
        runs = [run for run in (self.store.get_run(seq) for seq in seqs) if run is not None]
        self._launch_runs(runs, attempt, resume_input, answer)

    def _launch_held(self) -> bool:
        """Whether launches wait: nothing starts that cannot be recorded (or
        cannot be forked) in a fault episode, nor without a launcher. The runs
        stay admitted and launch once it ends."""
        if self.errors.episode is not None or not self.launcher.up:
            self._unlaunched = True
            return True
        return False

    def _launch_runs(
        self,
        runs: list[RunRow],
        attempt: int = 1,
        resume_input: Any = NO_RESUME_INPUT,
        answer: RequestRow | None = None,
    ) -> None:
        """`launch`, for runs as read (or as just admitted)."""
        if not runs or self._launch_held():
            return
        self._focus = {
            "runs": ",".join(run.run_id for run in runs),
            "request": answer.seq if answer else None,
        }
        prepared: list[Prepared] = []
        failure: Exception | None = None
        for run in runs:
            # One run that cannot be prepared (or failed) never holds up the rest.
            try:
                invocation = run.frozen
                try:
                    prepared.append(self._prepare(run, invocation, attempt, resume_input))
                except Exception as exc:
                    if classify(exc, self.store.root) is not None:
                        raise  # a full or read-only disk: not this run's fault
                    why = f"cannot prepare its directories: {describe(exc)}"
                    self._unprepared(run, attempt, answer, why)
            except Exception as exc:
                if classify(exc, self.store.root) is not None:
                    # A fault episode: nothing is marked, every run stays
                    # admitted and launches once it ends.
                    raise
                failure = failure or exc  # left as it was: retried next tick
        if not prepared:
            if failure is not None:
                raise failure
            return
        self.fault("after-run-dir" if attempt == 1 else "before-resume-mark")
        started = self.clock()
        with self.store.atomic():
            if answer is not None and not self._resume_owed(
                answer, prepared[0][0], attempt, started
            ):
                return
            # The previous attempt's reason and exit code stay on its attempt
            # row; the run reports none while this one runs.
            self.store.mark_attempts(
                [(run.seq, attempt, started, run.started_at or started) for run, *_ in prepared]
            )
            for run, *_ in prepared:
                # The host that launches it (a new leader launches what the
                # old one admitted; a resume stays on its own host): its
                # agent from now on.
                self.store.update_run(run.seq, host=self.config.host)
        points = ("after-resume-mark",) if attempt > 1 else ("after-attempt-mark",)
        self._start_marked(prepared, attempt, resume_input, points, failure)

    def _resume_owed(self, request: RequestRow, run: RunRow, attempt: int, now: float) -> bool:
        """Inside the resume's mark transaction: answer `request` (done) if the
        run is still interrupted at the attempt before this one and the request
        still pending; False, with nothing written, if the leader or a cancel
        got there first. The store serializes writers, so this read and the
        mark cannot interleave with another host's: fenced by run and attempt,
        never by leadership."""
        current = self.store.get_run(run.seq)
        if current is None or current.state != "interrupted" or current.attempt != attempt - 1:
            return False
        return self.store.finish_request(
            request.seq, "done", f"{run.run_id} attempt {attempt}", now
        )

    def _prepare(
        self, run: RunRow, invocation: Invocation, attempt: int, resume_input: Any
    ) -> Prepared:
        """The run's directory, its attempt's directory and its record
        directory, each created or checked (an OSError if a job left
        something in the way)."""
        rundir = RunDir(self.store.runs_dir, run.run_id)
        rundir.prepare(invocation.input)
        rundir.prepare_attempt(attempt, resume_input)
        records = prepare_record_dir(
            os.path.join(self._records_root, run.run_id, f"attempt-{attempt}")
        )
        return run, invocation, rundir, records

    def _mark_with_admission(
        self, runs: list[RunRow], held: int | None = None
    ) -> tuple[list[Prepared], list[LaunchSpec] | None]:
        """Inside the admission's transaction: prepare each admitted run's
        directories and mark its first attempt, so one commit (one fsync)
        makes the run both admitted and marked before its command starts.

        Directories prepared for a transaction that then rolls back (a crash
        or an error before the commit) stay behind, for a run the store never
        knew and whose command never started (nothing is spawned before the
        commit); on SQLite the next admission takes the same seq again and
        `_prepare` reuses them (each step is idempotent). A run that cannot
        be prepared here, for any reason, is left admitted and unmarked: the
        usual launch after the commit tries again and settles it (fails it
        closed, or opens a fault episode), exactly as before.

        `held` (a pre-wake's first chunk, decided for that instant): the
        launch specs are built and handed to the launcher to encode
        (`encode_ahead`) before the hold (`_hold`), and returned for
        `_start_marked`; the mark is written after it, with the clock's time
        then: a hold that woke late (up to the end of the instant's second)
        must show that lateness in `started_at`, which the launch-latency
        metric reads, rather than the instant."""
        prepared: list[Prepared] = []
        if runs and not self._launch_held():
            for run in runs:
                with contextlib.suppress(Exception):
                    prepared.append(self._prepare(run, run.frozen, 1, NO_RESUME_INPUT))
        if prepared:
            self.fault("after-run-dir")
        specs: list[LaunchSpec] | None = None
        if held is not None:
            if prepared:
                specs = self._specs_ahead(prepared)
            self._hold(held)
        if prepared:
            # The run's host was set when it was inserted, by this supervisor.
            started = self.clock()
            self.store.mark_attempts([(run.seq, 1, started, started) for run, *_ in prepared])
        return prepared, specs

    def _specs_ahead(self, prepared: list[Prepared]) -> list[LaunchSpec] | None:
        """A held chunk's launch specs, built (and encoded by the launcher)
        while the hold waits for the instant rather than after its commit.
        None if one cannot be built or encoded (never an admission's
        error): `_start_marked` then builds each and settles the one that
        fails, as for any chunk."""
        try:
            specs = [
                self._spec(run, invocation, rundir, records, 1, False)
                for run, invocation, rundir, records in prepared
            ]
            self.control.encode_ahead(specs)
        except Exception:
            return None
        return specs

    def _start_marked(
        self,
        prepared: list[Prepared],
        attempt: int,
        resume_input: Any,
        points: tuple[str, ...],
        failure: Exception | None = None,
        specs: list[LaunchSpec] | None = None,
    ) -> None:
        """Spawn attempts whose marks committed. From the mark on, every
        attempt is watched until its end is recorded: whatever fails from
        here (a fault point in `points` too) is settled per run, as a lost
        launch is. `specs`: theirs, built ahead (`_specs_ahead`)."""
        try:
            self._focus = {"runs": ",".join(run.run_id for run, *_ in prepared)}
            watches = [
                Watch(
                    run.seq,
                    run.schedule_id,
                    attempt,
                    records,
                    None,
                    False,
                    kill_grace=invocation.kill_grace,
                )
                for run, invocation, _, records in prepared
            ]
            try:
                for point in points:
                    self.fault(point)
            except Exception as exc:
                for watch in watches:
                    self._launch_failed(watch, exc)
                raise
            resumed = resume_input is not NO_RESUME_INPUT
            builds: list[Callable[[], LaunchSpec]] = (
                [_built(spec) for spec in specs]
                if specs is not None
                else [
                    partial(self._spec, run, invocation, rundir, watch.record_dir, attempt, resumed)
                    for (run, invocation, rundir, _), watch in zip(prepared, watches, strict=True)
                ]
            )
            self._spawn_and_settle(
                (
                    (run, watch, build)
                    for (run, *_), watch, build in zip(prepared, watches, builds, strict=True)
                ),
                failure,
            )
            self.fault("after-spawn")
        finally:
            self._say()  # a held chunk's admission lines, if no spawn wrote them

    def _spawn_and_settle(
        self,
        launches: Iterable[tuple[RunRow, Watch, Callable[[], LaunchSpec]]],
        failure: Exception | None = None,
    ) -> None:
        """Spawn each marked attempt, the requests pipelined (`_pipelined`; a
        spec that cannot be built fails that attempt alone); an attempt
        whose spawn raises is settled as a lost launch (`_launch_failed`),
        never dropped. The pids started are stored in one statement, then the
        first failure (`failure`, from before, if given) is raised for the
        phase to count and log: by then every attempt is settled."""
        handles: list[tuple[int, ShimHandle]] = []
        ready: list[tuple[RunRow, Watch, LaunchSpec]] = []
        for run, watch, build in launches:
            try:
                ready.append((run, watch, build()))
            except Exception as exc:
                failure = failure or exc
                handle = self._launch_failed(watch, exc)
                if handle is not None:
                    handles.append((run.seq, handle))
        replies = self._pipelined([spec for _, _, spec in ready])
        for (run, watch, spec), reply in zip(ready, replies, strict=True):
            try:
                handle = self._spawn(run, watch, spec, reply)
            except Exception as exc:
                failure = failure or exc
                handle = self._launch_failed(watch, exc)
            if handle is not None:
                handles.append((run.seq, handle))
        self._store_handles(handles)
        if failure is not None:
            raise failure

    def _say(self) -> None:
        """Write a held chunk's admission lines (`_unsaid`).

        Why after the spawn request: between the commit and the request
        every instruction delays the job's start, and a log line written
        there, in code gone cold during the sleep to the instant, took 0.15-0.2
        ms. Written before any line of the launch (`_spawn`), so the journal
        still reads admitted, then started."""
        lines, self._unsaid = self._unsaid, []
        for event, fields in lines:
            self.log(event, **fields)

    def _launch_failed(self, watch: Watch, exc: Exception) -> ShimHandle | None:
        """Settle an attempt whose launch raised after its mark committed, the
        way a lost launch is: watched (never dropped, never spawned again) and
        polled by ingestion, which adopts a shim its launch lock or started
        record shows, records an exit record, or, with neither, records the
        attempt failed as never started, naming the error. No store, no log:
        this must not fail itself."""
        watch.spec = None
        watch.adopted = True
        if watch.handle is None:
            watch.lost_launch = True
            if watch.never_started == NEVER_STARTED:
                watch.never_started = (
                    f"not started: its launch failed ({describe(exc)}); the command never ran"
                )
        self._watch(watch)
        self.wake_now = True
        return watch.handle

    def _unprepared(
        self, run: RunRow, attempt: int, answer: RequestRow | None, reason: str
    ) -> None:
        """Something (a job) left files where this launch writes its own: fail
        closed for this run, never the tick. A first attempt fails (nothing
        was started); a resume is refused and the run stays interrupted."""
        if attempt > 1:
            if answer is not None:
                self._answer(answer, "refused", reason)
            return
        now = self.clock()
        with self.store.atomic():
            self._mark_failed(run.seq, None, reason, now)
        self.observer.run_ended(run.seq)
        self.log("failed", run=run.run_id, schedule=run.schedule_id, reason=reason)
        self._notices.append(Notice(run, attempt, reason, None))

    def _store_handles(self, handles: list[tuple[int, ShimHandle]]) -> None:
        """The started pids, in one commit without an fsync (see
        `note_shim_handles`: the keeper's started record is the durable one)."""
        if not handles:
            return
        self.store.note_shim_handles(
            [
                (seq, watch.attempt, handle.pid, handle.start_time)
                for seq, handle in handles
                if (watch := self.watches.get(seq)) is not None
            ]
        )

    def _spec(
        self,
        run: RunRow,
        invocation: Invocation,
        rundir: RunDir,
        records: str,
        attempt: int,
        resumed: bool,
    ) -> LaunchSpec:
        env = dict(self._environment())
        env.update(invocation.env)
        env.update(
            WFSCHED_SCHEDULE_ID=run.schedule_id,
            WFSCHED_OCCURRENCE_ID=run_occurrence_id(run) or "",
            WFSCHED_SCHEDULED_AT=format_instant(run.scheduled_at) or "",
            WFSCHED_RUN_ID=run.run_id,
            WFSCHED_ATTEMPT=str(attempt),
            WFSCHED_RUN_DIR=rundir.dir,
            WFSCHED_STATE_DIR=rundir.state,
            WFSCHED_INPUT=rundir.input,
        )
        stdin = rundir.input
        if resumed:
            stdin = rundir.resume_input(attempt)
            env["WFSCHED_RESUME_INPUT"] = stdin
        return LaunchSpec(
            run_id=run.run_id,
            attempt=attempt,
            argv=tuple(invocation.command),
            cwd=invocation.cwd,
            env=env,
            stdin_path=stdin,
            attempt_dir=rundir.attempt(attempt),
            record_dir=records,
            timeout=invocation.timeout,
            kill_grace=invocation.kill_grace,
            max_log_bytes=self.config.max_log_bytes,
        )

    def _pipelined(self, specs: list[LaunchSpec]) -> list[ShimHandle | Exception | None]:
        """The keeper's answers to a chunk's spawn requests, sent pipelined
        (`Launcher.spawn_many`); None where the request is to be made again
        one by one: a control without pipelining, no launcher, or a lost
        connection (the launch lock refuses an attempt that did start)."""
        spawn_many = getattr(self.control, "spawn_many", None)
        if spawn_many is None or len(specs) < 2 or not self.launcher.up:
            return [None] * len(specs)
        try:
            answers: list[ShimHandle | Exception | None] = spawn_many(specs)
        except Exception:
            return [None] * len(specs)  # asked again one by one: `_spawn` settles it
        return answers

    def _spawn(
        self,
        run: RunRow,
        watch: Watch,
        spec: LaunchSpec,
        answer: ShimHandle | Exception | None = None,
    ) -> ShimHandle | None:
        """Start the attempt's shim, or leave it waiting for a launcher.
        `answer`: the launcher's answer to a pipelined request for it (see
        `_pipelined`), taken as `spawn()` returning or raising it.

        A launcher lost during the request is an ambiguous launch: once the
        old server is gone (nothing more of it can fork), the attempt's
        launch lock and records say what was started, and that is adopted;
        only an attempt of which nothing started is spawned again.
        """
        self._watch(watch)
        if answer is None and not self.launcher.up:
            watch.spec = spec
            return None
        try:
            try:
                if answer is None:
                    handle = self.control.spawn(spec)
                elif isinstance(answer, Exception):
                    raise answer
                else:
                    handle = answer
            finally:
                self._say()
        except LauncherLost as exc:
            self._replace_launcher(exc)
            return self._settle_lost_launch(run, watch, spec)
        except AlreadyLaunched:
            return self._settle_lost_launch(run, watch, spec)
        except CommandNotStarted:
            # Its exit record (spawn-failed) says why: ingested next tick.
            watch.spec = None
            watch.adopted = True
            self.wake_now = True
            return None
        except OSError as exc:
            fault = classify(exc, self.store.root)
            if fault is not None and fault.kind in _DISK_FAULTS:
                # The keeper could not write the attempt's launch lock or
                # started record (a full or failing disk) and started
                # nothing: the attempt waits, marked and holding its slot,
                # and is spawned once the episode ends, like one marked
                # while no launcher was up. Failed here, it would need the
                # same full disk to record that.
                self._fault("launch", exc)
                watch.spec = spec
                watch.never_started = DISK_REFUSED
                return None
            # A fork or descriptor limit opens an episode that holds later
            # launches (first: recording this run may fail in the same fault).
            self._fault("launch", exc)
            self._finish_unlaunched(run, watch, f"could not start the shim: {exc}")
            return None
        except Exception as exc:
            # Not a launcher error: whether the server handled the request is
            # unknown, so it is replaced (nothing of the old one can fork any
            # more) and the caller settles the attempt as a lost launch.
            self._replace_launcher(exc)
            raise
        watch.spec = None
        self._set_handle(watch, handle)
        self.observer.run_launched(run.seq)
        self.log("started", run=run.run_id, schedule=run.schedule_id, attempt=watch.attempt)
        return handle

    def _settle_lost_launch(self, run: RunRow, watch: Watch, spec: LaunchSpec) -> ShimHandle | None:
        record_dir = watch.record_dir
        try:
            locked = self.control.launch_locked(record_dir)
            handle = self.control.read_shim(record_dir)
            finished = self.control.read_exit(record_dir) is not None
        except RecordError:
            locked, handle, finished = True, None, True  # let ingestion fail it closed
        if not (locked or handle or finished):
            # Lock free and no started record: its command never started.
            watch.lost_launches += 1
            if watch.lost_launches >= LOST_LAUNCH_TRIES:
                # A launch that kills every launcher: stop replacing them.
                reason = (
                    f"not started: the launcher was lost {watch.lost_launches} times while"
                    " launching it; the command never ran"
                )
                self._finish_unlaunched(run, watch, reason)
                return None
            self.log("launch-retried", run=run.run_id, reason="the lost launcher started nothing")
            watch.spec = spec
            if self.launcher.up:
                self._unwatch(run.seq)
                return self._spawn(run, watch, spec)
            return None
        watch.adopted = watch.lost_launch = True
        # Something of this attempt started: it is watched to its end from now
        # on and must never wait for a launcher again (a waiting spec would be
        # spawned once more, refused, adopted again, and at shutdown recorded
        # "not started" although it ran).
        watch.spec = None
        if handle is not None:
            self._set_handle(watch, handle)
        self.log("adopted", run=run.run_id, schedule=run.schedule_id, attempt=watch.attempt)
        return handle

    def _spawn_waiting(self) -> None:
        """Attempts marked while no launcher was up: spawn them now."""
        if not self.launcher.up:
            return
        self._spawn_and_settle(self._waiting_launches())

    def _waiting_launches(self) -> Iterator[tuple[RunRow, Watch, Callable[[], LaunchSpec]]]:
        """Each waiting attempt, unwatched just before its spawn watches it again."""
        waiting = [watch for watch in self.watches.values() if watch.spec is not None]
        for watch in waiting:
            run = self.store.get_run(watch.run_seq)
            spec = watch.spec
            if run is None or spec is None:
                continue
            self._unwatch(watch.run_seq)
            yield run, watch, _built(spec)

    def _set_handle(self, watch: Watch, handle: ShimHandle) -> None:
        watch.handle = handle
        self._pids[handle.pid] = watch.run_seq

    def _replace_launcher(self, exc: Exception) -> None:
        """The run keeper died (or its connection was lost): reconnect, to
        the same keeper if it lives, else to a new one (which inherits no
        descriptor, lock and database included), and poll the runs whose end
        it would have reported, as after a restart: a dead keeper's runs are
        then failed as abandoned. A keeper that cannot start is retried with
        backoff (`tick`)."""
        self.log("launcher-lost", reason=str(exc))
        for watch in self.watches.values():
            watch.adopted = True
        self.hooks.orphaned()
        if self._waiter is not None:
            self._waiter.unwatch(self.control.fileno())
        self.control.stop()
        self.launcher = LauncherHealth(up=False, since=self.clock(), error=str(exc))
        self._start_launcher()

    def _revive_launcher(self) -> None:
        if not self.launcher.up and time.monotonic() >= self.launcher.retry_at:
            self._start_launcher()

    def _start_launcher(self) -> None:
        try:
            self.control.start()
        except OSError as exc:  # LauncherError, or no pipe/fd to start one with
            health = self.launcher
            health.error = str(exc)
            health.retry_at = time.monotonic() + health.backoff
            self.log("launcher-down", reason=str(exc), retry_in=round(health.backoff, 3))
            health.backoff = min(health.backoff * 2, LAUNCHER_BACKOFF_MAX)
            self._store_launcher_health()
            return
        if self._waiter is not None:
            self._waiter.watch(self.control.fileno())
        down_since = self.launcher.since
        self.launcher = LauncherHealth(up=True, since=self.clock(), error=self.launcher.error)
        self.log("launcher-up", down_for=round(self.launcher.since - down_since, 3))
        self._store_launcher_health()
        self._unlaunched = True
        self.wake_now = True

    def _store_launcher_health(self) -> None:
        """Recorded by the leader (the store's meta describes it); a standby's
        launcher health is its own log's."""
        if not self.leading:
            return
        health = self.launcher
        with self.store.atomic():
            self.store.set_meta(
                launcher_state="up" if health.up else "down",
                launcher_since=repr(health.since),
                launcher_error=health.error or "",
            )

    def _watch(self, watch: Watch) -> None:
        self.watches[watch.run_seq] = watch
        if watch.handle is not None:
            self._set_handle(watch, watch.handle)

    def _unwatch(self, seq: int) -> None:
        self._reaped.discard(seq)
        watch = self.watches.pop(seq, None)
        if watch is not None and watch.handle is not None:
            self._pids.pop(watch.handle.pid, None)

    def _mark_failed(self, run_seq: int, attempt: int | None, reason: str, now: float) -> None:
        """Write a run failed for `reason`, with its attempt row when there is
        one (`attempt` None: none was marked). Inside the caller's transaction."""
        if attempt is not None:
            self.store.update_attempt(
                run_seq, attempt, state="failed", finished_at=now, reason=reason
            )
        self.store.update_run(run_seq, state="failed", reason=reason, finished_at=now)

    def _finish_unlaunched(self, run: RunRow, watch: Watch, reason: str) -> None:
        """Record an attempt no shim was started for. Unwatched only once
        that is committed: if the commit fails, the watch stays and the
        caller settles it (ingestion records it, with this reason)."""
        watch.never_started = reason
        now = self.clock()
        with self.store.atomic():
            self._mark_failed(run.seq, watch.attempt, reason, now)
        self._unwatch(run.seq)
        self._notices.append(Notice(run, watch.attempt, reason, None))
        self.observer.run_ended(run.seq)
        self.log("failed", run=run.run_id, schedule=run.schedule_id, reason=reason)

    # -- exits --------------------------------------------------------------------

    def ingest_exits(self) -> None:
        """Exit records of runs the run keeper reported ended, plus a look at
        every adopted run (whose end nobody reports to us). All
        endings found in one tick are recorded in one transaction."""
        self._collect_reaped()
        endings: list[tuple[Watch, ExitRecord | None, str | None]] = []
        corrupt: list[tuple[str, str]] = []
        fault: OSError | None = None
        for seq, watch in list(self.watches.items()):
            polled = watch.adopted or watch.ending is not None
            if watch.spec is not None or (seq not in self._reaped and not polled):
                continue
            self._focus = {"run": run_id(seq), "schedule": watch.schedule_id}
            try:
                ending = self._examine(watch, seq in self._reaped)
            except StoreUnavailable:
                raise
            except OSError as exc:
                # One attempt's records failing to read never holds up the
                # others' endings: they are recorded, then the fault is raised.
                fault = fault or exc
                continue
            if ending is None:
                continue
            record, failure, block = ending
            endings.append((watch, record, failure))
            if block is not None:
                corrupt.append((watch.schedule_id, f"{run_id(seq)}: {block}"))
        if endings:
            self._focus = {"runs": ",".join(run_id(watch.run_seq) for watch, _, _ in endings)}
            if any(record is not None for _, record, _ in endings):
                self.fault("before-ingest")
            self._conclude_all(endings)
            if any(record is not None for _, record, _ in endings):
                self.fault("after-ingest")
            for schedule_id, reason in corrupt:
                self.block(schedule_id, reason)
        if fault is not None:
            raise fault

    def _collect_reaped(self) -> None:
        """Take the pids the run keeper reported ended. Needs no store, so it runs
        through a fault episode too: the exit records wait on disk, the
        reaped runs in `_reaped`, until their ends can be committed."""
        drained: list[int] = []
        if self.launcher.up:
            try:
                drained = self.control.drain_exits()
            except LauncherError as exc:
                self._replace_launcher(exc)
        # Remembered before anything else can fail: the launcher never
        # reports these pids again. (Hooks' pids are never in _pids.)
        self._reaped.update(self._pids[pid] for pid in drained if pid in self._pids)
        self._hook_pids.extend(pid for pid in drained if pid not in self._pids)
        episode = self.errors.episode
        if episode is not None and episode.holds_store:
            return  # hook outcomes are store rows: recorded once it answers
        pids, self._hook_pids = self._hook_pids, []
        self.hooks.reaped(pids)

    def _examine(
        self, watch: Watch, reaped: bool
    ) -> tuple[ExitRecord | None, str | None, str | None] | None:
        """How the attempt ended: (exit record, failure reason, block reason),
        or None while it runs (or while what is left of it is terminated).

        Never raises for a bad record: an unreadable one fails the run closed,
        naming the record and the error, and blocks its schedule. An attempt
        that ended without a valid exit record is recorded only once its
        shim's session is empty (terminated with the run's kill_grace).
        """
        if watch.ending is None:
            try:
                found = self._look(watch, reaped)
            except StoreUnavailable:  # a lost connection too
                raise
            except (RecordError, OSError) as exc:
                if isinstance(exc, OSError) and classify(exc, self.store.root) is not None:
                    # A fault episode (no descriptor, EIO): read again later;
                    # an I/O error that stays on this record is its own.
                    watch.read_faults += 1
                    if exc.errno != errno.EIO or watch.read_faults < RECORD_READ_TRIES:
                        raise
                reason = f"unreadable records: {exc}"
                found = (None, reason, reason)
            if found is None or found[0] is not None:
                return found
            _, failure, block = found
            watch.ending = (failure or ABANDONED, block)
        failure, block = watch.ending
        if self._terminated(watch):
            return None, failure, block
        return None

    def _look(
        self, watch: Watch, reaped: bool
    ) -> tuple[ExitRecord | None, str | None, str | None] | None:
        record_dir = watch.record_dir
        record = self.control.read_exit(record_dir)
        if record is not None:
            return record, None, None
        if watch.handle is None:
            handle = self.control.read_shim(record_dir)
            if handle is not None:
                self._set_handle(watch, handle)
                if watch.cancel_reason is not None:
                    self.control.cancel(handle)
        if not reaped and self._alive(watch):
            return None
        # Gone: its exit record may have landed between the first read and now.
        record = self.control.read_exit(record_dir)
        if record is not None:
            return record, None, None
        never = watch.lost_launch and watch.handle is None
        if never and self.control.read_shim(record_dir) is None:
            return None, watch.never_started, None
        return None, ABANDONED, None

    def _alive(self, watch: Watch) -> bool:
        if watch.handle is not None and self.control.alive(watch.handle):
            return True
        return self.control.launch_locked(watch.record_dir)

    def _terminated(self, watch: Watch) -> bool:
        """Whether nothing of the attempt's session is left; if something is,
        terminate it as a timeout would (SIGTERM, kill_grace, SIGKILL), and
        the run keeps its slots meanwhile."""
        if watch.handle is None:
            return True  # no shim ever started a command
        sid = watch.handle.pid
        now = time.monotonic()
        if watch.kill_at is None:
            if not self.control.signal_session(watch.handle, signal.SIGTERM):
                return True
            grace = watch.kill_grace
            watch.kill_at = now + grace
            self.log("terminating", run=run_id(watch.run_seq), session=sid, grace=grace)
            return False
        if now >= watch.kill_at:
            watch.killed = True
        signum = signal.SIGKILL if watch.killed else 0
        return not self.control.signal_session(watch.handle, signum)

    def _conclude(self, watch: Watch, record: ExitRecord | None, failure: str | None) -> None:
        self._conclude_all([(watch, record, failure)])

    def _conclude_all(self, endings: list[tuple[Watch, ExitRecord | None, str | None]]) -> None:
        """Record how attempts ended (one transaction), then log and alert."""
        ended: list[tuple[Watch, RunRow, AttemptEnd]] = []
        with self.store.atomic():
            # Read at once (one statement, not one per run), and written at
            # once (`end_attempts`); a run that comes up twice is read again
            # once the first ending is written.
            runs = self.store.runs_by_seq([watch.run_seq for watch, _, _ in endings])
            ends: list[AttemptEnd] = []
            for watch, record, failure in endings:
                run = runs.pop(watch.run_seq, None)
                if run is None:
                    if ends:
                        self.store.end_attempts(ends)
                        ends = []
                    run = self.store.get_run(watch.run_seq)
                # An attempt whose end is already recorded (a launch failure
                # settled after its record committed) is not recorded twice.
                if run is not None and run.state == "running" and run.attempt == watch.attempt:
                    end = self._attempt_end(run, watch, record, failure)
                    ends.append(end)
                    ended.append((watch, run, end))
                elif run is not None and record is not None and run.attempt == watch.attempt:
                    self._disclose_late_exit(run, record)
            if ends:
                self.store.end_attempts(ends)
            for watch, run, end in ended:
                if watch.cancel_request is not None:
                    answer = _cancel_answer(run, watch, end)
                    self.store.finish_request(watch.cancel_request, "done", answer, end.finished_at)
        for watch, *_ in endings:
            self._unwatch(watch.run_seq)
        self.wake_now = True
        for watch, run, end in ended:
            state, reason, exit_code = end.state, end.reason, end.exit_code
            self.observer.run_ended(run.seq)
            self.log(
                state, run=run.run_id, schedule=run.schedule_id, exit_code=exit_code, reason=reason
            )
            # An operator's own `runs cancel` needs no alert; every other failure
            # (exit status, signal, timeout, drain, abandonment) gets one.
            if state == "failed" and watch.cancel_reason != "cancelled":
                self._notices.append(Notice(run, watch.attempt, reason or "failed", exit_code))

    def _disclose_late_exit(self, run: RunRow, record: ExitRecord) -> None:
        """The leader failed this run while its host looked lost; the host's
        exit record arrived after all. Kept on the run's reason (its outcome
        and time); the run's state stays as recorded."""
        reason = run.reason or ""
        if run.state != "failed" or not reason.startswith(HOST_LOST_PREFIX):
            return
        if LATE_EXIT_MARK in reason:
            return
        outcome = (
            f"exited with status {record.exit_code}"
            if record.outcome == "exited"
            else record.outcome
        )
        late = LATE_EXIT.format(outcome=outcome, at=format_event(record.finished_at))
        self.store.update_run(run.seq, reason=reason + late)
        self._note("late-exit", run=run.run_id, outcome=outcome)

    def _attempt_end(
        self, run: RunRow, watch: Watch, record: ExitRecord | None, failure: str | None
    ) -> AttemptEnd:
        exit_code: int | None = None
        finished = self.clock()
        reason: str | None
        if record is not None and record.attempt != watch.attempt:
            state = "failed"
            reason = (
                f"ambiguous: exit record of attempt {record.attempt} under active attempt"
                f" {watch.attempt}; not retried"
            )
        elif record is not None:
            exit_code, finished = record.exit_code, record.finished_at
            state, reason = _outcome(record, run)
            if state == "failed" and record.outcome == "cancelled" and watch.cancel_reason:
                reason = watch.cancel_reason
        else:
            state, reason = "failed", failure
        stdout_log, stderr_log = attempt_log_paths(self.store.runs_dir, run.run_id, watch.attempt)
        return AttemptEnd(
            run.seq,
            watch.attempt,
            state,
            finished,
            exit_code,
            reason,
            # The exit record keeps each stream's tail, so the output can be
            # read on any host (the full logs stay in the run directory here).
            log_tail(stdout_log),
            log_tail(stderr_log),
            None if state == "interrupted" else finished,
        )

    def notify_failures(self) -> None:
        """Fire the hooks owed for failed runs (their ends are committed, so
        a failure here never re-records an exit). A notice whose hook could
        not be prepared is retried next tick, up to NOTIFY_TRIES times."""
        notices, self._notices = self._notices, []
        for index, notice in enumerate(notices):
            self._focus = {"run": notice.run.run_id, "schedule": notice.run.schedule_id}
            try:
                self._notify_failure(notice.run, notice.attempt, notice.reason, notice.exit_code)
            except Exception as exc:
                # The rest go first next tick; this error is the phase's.
                self._notices = notices[index + 1 :]
                notice.tries += 1
                if notice.tries < NOTIFY_TRIES:
                    self._notices.append(notice)
                else:
                    self.log(
                        "notify-failed",
                        run=notice.run.run_id,
                        reason=f"gave up after {NOTIFY_TRIES} tries: {describe(exc)}",
                    )
                raise

    def _notify_failure(
        self, run: RunRow, attempt: int, reason: str, exit_code: int | None
    ) -> None:
        self.fault("before-notify")
        row = self.store.get_schedule(run.schedule_id)
        argv = self.definitions.get(row).on_failure if row is not None else None
        self.hooks.fire(
            RunFacts(
                run_id=run.run_id,
                schedule_id=run.schedule_id,
                occurrence_id=run_occurrence_id(run) or "",
                scheduled_at=format_instant(run.scheduled_at) or "",
                attempt=attempt,
                state="failed",
                reason=reason,
                exit_code=exit_code,
                run_dir=RunDir(self.store.runs_dir, run.run_id).path,
                record_dir=record_dir(self.store.root, run.run_id, f"notify-{attempt}"),
                run_seq=run.seq,
                scheduled_epoch=run.scheduled_at,
            ),
            argv,
        )

    def notify_rejections(self) -> None:
        """Fire the hooks owed for committed preflight rejections (a rejected
        start is a failure to the operator); retried like `notify_failures`."""
        while self._rejected:
            rejection = self._rejected.pop(0)
            occurrence = occurrence_id(rejection.schedule_id, rejection.instant)
            self._focus = {"schedule": rejection.schedule_id, "occurrence": occurrence}
            try:
                self.hooks.fire(
                    RunFacts(
                        run_id="",
                        schedule_id=rejection.schedule_id,
                        occurrence_id=occurrence,
                        scheduled_at=format_instant(rejection.instant) or "",
                        attempt=0,
                        state="preflight-rejected",
                        reason=rejection.reason,
                        exit_code=None,
                        run_dir=None,
                        record_dir=record_dir(self.store.root, "notify", occurrence),
                        scheduled_epoch=rejection.instant,
                        hook_dir=self.store.root / "notify" / occurrence,
                    ),
                    rejection.on_failure,
                )
            except Exception as exc:
                rejection.tries += 1
                if rejection.tries < NOTIFY_TRIES:
                    self._rejected.append(rejection)
                else:
                    self.log(
                        "notify-failed",
                        run=occurrence,
                        reason=f"gave up after {NOTIFY_TRIES} tries: {describe(exc)}",
                    )
                raise

    # -- requests from the CLI ------------------------------------------------------

    def handle_requests(self) -> None:
        """Each pending request on its own, oldest first: one that fails is a
        contained `requests` error and is retried next tick, while the others
        are still answered (a cancel must not wait behind a broken resume).

        Requests for a run go to its host: the leader reads every request,
        a standby only the cancels and resumes of its own host's runs, which
        it carries out as their agent (`_cancel`, `_resume`)."""
        if self.leading:
            pending = self.store.pending_requests()
        elif self.leadership.fenced:
            pending = self.store.pending_run_requests(self.config.host)
        else:
            return
        waiting = {request.seq for request in pending}
        self._request_tries = {
            seq: tries for seq, tries in self._request_tries.items() if seq in waiting
        }
        for request in pending:
            self._phase("requests", self._handle_request, request)

    def _handle_request(self, request: RequestRow) -> None:
        self._focus = {
            "request": request.seq,
            "kind": request.kind,
            "schedule": request.schedule_id,
            "run": run_id(request.run_seq) if request.run_seq else None,
        }
        handler = {
            "trigger": self._trigger,
            "resume": self._resume,
            "cancel": self._cancel,
        }[request.kind]
        try:
            handler(request)
        except RequestWithdrawn:
            self._request_tries.pop(request.seq, None)
            self.log("request-withdrawn", request=request.seq, kind=request.kind)
            return
        except Exception as exc:
            if classify(exc, self.store.root) is not None:
                raise  # a resource fault is an episode, not this request's try
            tries = self._request_tries[request.seq] = self._request_tries.get(request.seq, 0) + 1
            current = self.store.get_request(request.seq)
            if tries >= REQUEST_TRIES and current is not None and current.state == "pending":
                # The answer is written first: if the store refuses it too,
                # the request stays pending and is tried again next tick. One
                # already answered (a resume's mark answers it) keeps its answer.
                reason = f"could not be carried out ({tries} tries): {describe(exc)}"
                self._answer(request, "refused", reason)
                del self._request_tries[request.seq]
                self.log("request-refused", request=request.seq, kind=request.kind, reason=reason)
            raise
        self._request_tries.pop(request.seq, None)

    def _answer(self, request: RequestRow, state: str, result: str) -> None:
        with self.store.atomic():
            # Answered once: by whoever gets there first (another host's
            # agent, or `requests cancel` withdrawing it); then nothing changes.
            self.store.finish_request(request.seq, state, result, self.clock())

    def _finish(self, seq: int, state: str, result: str, now: float) -> None:
        """Answer a request inside the transaction that acted on it; one
        withdrawn meanwhile rolls that transaction back (RequestWithdrawn)."""
        if not self.store.finish_request(seq, state, result, now):
            raise RequestWithdrawn(seq)

    def _trigger(self, request: RequestRow) -> None:
        if self.draining:
            self._answer(request, "refused", "the supervisor is shutting down; trigger again")
            return
        now = self.clock()
        with self.store.atomic():
            row = self.store.get_schedule(request.schedule_id or "")
            if row is None or row.deleted_at is not None:
                self._finish(
                    request.seq, "refused", f"schedule {request.schedule_id!r} is deleted", now
                )
                return
            defn = self.definitions.get(row)
            made = self._freeze(row, defn, int(request.created_at), "manual", now)
            if isinstance(made, Refusal):
                self._finish(request.seq, "refused", made.reason, now)
                return
            seq, _ = made
            self._finish(request.seq, "done", run_id(seq), now)
        self.log("admitted", schedule=row.id, run=run_id(seq), kind="manual")
        self._phase("launch", self.launch, [seq])

    def _resume(self, request: RequestRow) -> None:
        """The next attempt starts on the run's own host, where its state
        directory is, through that host's agent (this supervisor, leader or
        standby, when the run is this host's). The leader refuses what no
        agent can do: a run that is not interrupted, or whose host is lost."""
        run = self.store.get_run(request.run_seq or 0)
        if run is None or run.state != "interrupted":
            if self.leading:
                state = run.state if run else "missing"
                self._answer(request, "refused", f"run is {state}, not interrupted")
            return
        if not self._runs_here(run):
            refusal = self._resume_refusal(run) if self.leading else None
            if refusal is not None:
                self._answer(request, "refused", refusal)
            return  # its host's agent starts it
        if self.draining:
            self._answer(request, "refused", "the supervisor is shutting down; resume later")
            return
        # The attempt takes a slot on this host, the one it runs on.
        on_host = self.config.host if self.leadership.fenced else None
        executing = self.store.executing_count(on_host)
        if executing >= self.config.max_concurrent_runs:
            where = f" on host {on_host}" if on_host else ""
            self._answer(
                request,
                "refused",
                f"no execution slot free{where} ({executing}/{self.config.max_concurrent_runs}"
                " executing); try again when a run finishes",
            )
            return
        if self._launch_held():
            return  # pending until a launcher is up and no fault holds launches
        payload = json.loads(request.payload) if request.payload is not None else NO_RESUME_INPUT
        self._launch_runs([run], run.attempt + 1, payload, request)

    def _resume_refusal(self, run: RunRow) -> str | None:
        """Why no agent can resume `run` now: its host is lost. (A host
        draining would refuse here too.)"""
        return resume_refusal(self.store, run, self.config.host_timeout)

    def _cancel(self, request: RequestRow) -> None:
        """A running run is cancelled by its host's agent: the process group
        is terminated there, and the run is recorded cancelled once it ended
        (`_cancel_here`). The leader answers the rest: a run that already
        finished, one that never started (admitted) or is interrupted (no
        process), and a run whose host is lost, recorded failed at once since
        nobody can stop its process (`_cancel_unreached`)."""
        run = self.store.get_run(request.run_seq or 0)
        if run is None:
            if self.leading:
                self._answer(request, "refused", "no such run")
            return
        if run.state in ("completed", "failed"):
            self._answer(request, "done", _finished_answer(run))
            return
        if run.state == "running" and self._runs_here(run):
            self._cancel_here(request, run)
            return
        if not self.leading:
            return
        if run.state == "running":
            why = unreachable(self.store, run.host, self.config.host_timeout)
            if why is not None:
                self._cancel_unreached(request, run, why)
            return  # otherwise its host's agent carries it out
        self._cancel_unstarted(request, run)

    def _cancel_here(self, request: RequestRow, run: RunRow) -> None:
        """As the run's host's agent: terminate its process group (the keeper
        sends SIGTERM, then SIGKILL after kill_grace) and keep the request
        pending, with a note of what was done, until the attempt's end is
        recorded with its answer (`_conclude_all`). After a restart of this
        supervisor the request is still pending and the re-adopted attempt
        is cancelled again (harmless if it is already dying)."""
        watch = self.watches.get(run.seq)
        if watch is None or watch.attempt != run.attempt or watch.cancel_request == request.seq:
            return  # not watched yet (recovery watches it), or already carried out
        if watch.spec is not None:
            # Marked, but waiting for a launcher: nothing was started.
            self._unwatch(run.seq)
            self._cancel_unstarted(request, run)
            return
        if watch.handle is not None:
            # A shim whose pid is not known yet gets the cancel when it is (`_look`).
            self.control.cancel(watch.handle)
        watch.cancel_reason = watch.cancel_reason or "cancelled"
        watch.cancel_request = request.seq
        grace = run.frozen.kill_grace
        with self.store.atomic():
            self.store.note_request(
                request.seq,
                f"{run.run_id} cancelling on host {self.config.host}: SIGTERM sent to its"
                f" process group, SIGKILL after kill_grace ({grace:g}s) if it is still running",
            )
        self.log("cancelling", run=run.run_id, request=request.seq, grace=grace)

    def _cancel_unreached(self, request: RequestRow, run: RunRow, why: str) -> None:
        """The run's host is lost: nobody can terminate its process, so the run
        is failed at once (never recorded cancelled while it may run on),
        saying so; its host's agent, back, terminates what is left and
        discloses how it ended (`_watch_abandoned`)."""
        host = run.host or "?"
        reason = CANCEL_HOST_LOST.format(host=host, why=why)
        now = self.clock()
        with self.store.atomic():
            current = self.store.get_run(run.seq)
            if current is None or current.state != "running" or current.attempt != run.attempt:
                return  # it ended meanwhile: the next tick answers from what is recorded
            self._mark_failed(run.seq, run.attempt or None, reason, now)
            self.store.finish_request(
                request.seq,
                "done",
                f"{run.run_id} failed: its host {host} could not be reached ({why});"
                " its process may still run there",
                now,
            )
        self.observer.run_ended(run.seq)
        self.log("failed", run=run.run_id, schedule=run.schedule_id, reason=reason)
        self._notices.append(Notice(run, run.attempt, reason, None))

    def _cancel_unstarted(self, request: RequestRow, run: RunRow) -> None:
        """A run with no process (admitted, interrupted, or marked while no
        launcher was up) is recorded cancelled, if it is still in the state
        it was read in: a resume that started it meanwhile wins."""
        now = self.clock()
        with self.store.atomic():
            current = self.store.get_run(run.seq)
            if current is None or (current.state, current.attempt) != (run.state, run.attempt):
                return  # changed meanwhile: the next tick looks again
            self._mark_failed(run.seq, run.attempt or None, "cancelled", now)
        self._unwatch(run.seq)  # a marked attempt still waiting for a launcher
        self.observer.run_ended(run.seq)
        self.log("failed", run=run.run_id, schedule=run.schedule_id, reason="cancelled")

    # -- recovery and drain -----------------------------------------------------------

    def recover(self) -> None:
        """Under the lock, before the first tick; never executes anything.

        Nothing found on disk can stop it: a run whose records cannot be
        examined fails closed and blocks its schedule, and the rest recovers.
        """
        if self.leadership.fenced:
            # Several supervisors share the store: each is the agent of its
            # own host's runs only, and the checks below are the leader's.
            for run in self.store.unfinished_runs():
                if run.state == "running" and self._runs_here(run):
                    self._recover_running(run)
            abandoned = self.store.failed_runs_of_host(
                self.config.host, HOST_LOST_PREFIX, LATE_EXIT_MARK
            )
            for run in abandoned:
                self._watch_abandoned(run)
            return
        self.hooks.recover()
        for run in self.store.unfinished_runs():
            if not run.is_manual and self.store.occurrence_for_run(run.seq) is None:
                self.block(run.schedule_id, f"{run.run_id} has no admission record")
                continue
            if run.state == "admitted":
                if run.attempt:
                    self.block(run.schedule_id, f"{run.run_id} is admitted but has attempts")
                continue
            if run.state == "interrupted":
                continue
            self._recover_running(run)

    def _recover_running(self, run: RunRow) -> None:
        attempt = self.store.get_attempt(run.seq, run.attempt)
        if attempt is None or attempt.state != "running":
            self.block(run.schedule_id, f"{run.run_id} is running without a running attempt record")
            return
        handle = _stored_handle(attempt)
        directory = attempt_record_dir(self.store.root, run.run_id, run.attempt)
        if not directory.exists():
            # Launched by a version that kept records in the attempt directory
            # (every launch now creates its record directory before marking).
            directory = RunDir(self.store.runs_dir, run.run_id).attempt_dir(run.attempt)
        watch = _recovered_watch(run, directory, handle)
        self._watch(watch)
        ending = self._examine_at_recovery(watch)
        if ending is None:
            if watch.ending is None and not watch.read_faults:
                pid = watch.handle.pid if watch.handle is not None else None
                self.log("re-adopted", run=run.run_id, pid=pid)
            return  # alive, or what is left of it is being terminated
        record, failure, block = ending
        self._conclude(watch, record, failure)
        if record is not None:
            self.log("recovered", run=run.run_id, outcome=record.outcome)
        if block is not None:
            self.block(run.schedule_id, f"{run.run_id}: {block}")

    def _examine_at_recovery(
        self, watch: Watch
    ) -> tuple[ExitRecord | None, str | None, str | None] | None:
        """`_examine`, except that records that cannot be read now (EIO, no
        descriptor left) never stop the start: the run stays watched, and
        the ticks read it again (`ingest_exits`)."""
        try:
            return self._examine(watch, False)
        except StoreUnavailable:
            raise
        except OSError as exc:
            if classify(exc, self.store.root) is None:
                raise
            self.log("recovery-deferred", run=run_id(watch.run_seq), reason=describe(exc))
            return None

    def _watch_abandoned(self, run: RunRow) -> None:
        """A run of this host the leader failed while the host was silent: if
        its exit record is here, or its shim still runs, its real outcome is
        disclosed on the run (the state stays failed; it is never re-run)."""
        attempt = self.store.get_attempt(run.seq, run.attempt) if run.attempt else None
        if attempt is None:
            return
        handle = _stored_handle(attempt)
        directory = attempt_record_dir(self.store.root, run.run_id, run.attempt)
        if not directory.exists():
            return
        watch = _recovered_watch(run, directory, handle)
        if CANCEL_UNREACHED in (run.reason or ""):
            # An operator cancelled it while this host was lost: carried out now.
            watch.cancel_reason = "cancelled"
        self._watch(watch)
        ending = self._examine_at_recovery(watch)
        if ending is None:
            if watch.cancel_reason is not None and watch.handle is not None:
                self.control.cancel(watch.handle)
                self.log("cancelling", run=run.run_id, reason="cancelled while its host was lost")
            return  # still running: its exit is disclosed when it comes
        record, failure, _ = ending
        self._conclude(watch, record, failure)

    def drain(self) -> None:
        """Stop admitting, let executing runs finish within drain_grace, then
        cancel what is left and record it; a second stop signal cancels at
        once. Everything it writes goes through the phases' fault handling,
        as the loop's writes do: a store fault during the drain is an
        episode, and the drain keeps the ends it could not record (in the
        exit records on disk, the cancel reason in them too) and retries
        until they are recorded or its deadline passes.

        Its deadline (docs/operations.md, "Stopping"): drain_grace, then the
        longest kill_grace of the cancelled runs plus KILL_SLACK, then,
        while a store fault episode is open, drain_record_window more. What
        is still unrecorded then is logged run by run (`drain-left`) and
        named by `unrecorded` for the exit status; the next start records
        it from its exit record (re-adopted, never failed as abandoned)."""
        self.draining = True
        if self.leadership.fenced:
            # The lease goes first (a standby leads within a second); this
            # one then drains its own runs as a standby.
            if self.leading:
                self._step_down("shutting down")
            self.leadership.stop(release=True)
        self.notifier.send("STOPPING=1", "STATUS=draining")
        grace = self.config.drain_grace
        started = time.monotonic()
        longest = max((watch.kill_grace for watch in self.watches.values()), default=0)
        gives_up = grace + longest + KILL_SLACK + self.config.drain_record_window
        self._phase("liveness", self._mark_draining, grace, gives_up)
        self.log("draining", executing=len(self.watches), grace=f"{grace:g}s")
        for watch in self.watches.values():
            if watch.spec is not None:
                # Settled as a lost launch that started nothing, by the
                # ingestion below once the store takes writes (the disk that
                # refused its launch may still be full).
                watch.spec = None
                watch.adopted = watch.lost_launch = True
                if watch.never_started == NEVER_STARTED:
                    watch.never_started = NOT_LAUNCHED_AT_DRAIN
        hurried = self._drain_wait(started + grace, None, hurry=True)
        if self.watches:
            longest = self._cancel_for_drain(hurried)
            cancelled = time.monotonic() + longest + KILL_SLACK
            self._drain_wait(cancelled, cancelled + self.config.drain_record_window, hurry=False)
        self.unrecorded = sorted(self.watches)
        for seq in self.unrecorded:
            watch = self.watches[seq]
            ended = seq in self._reaped or watch.ending is not None
            self.log(
                "drain-left",
                run=run_id(seq),
                schedule=watch.schedule_id,
                state="ended" if ended else "terminating",
                reason=watch.cancel_reason,
            )
        if not self.unrecorded:
            self._phase("liveness", self.store.set_draining, self.config.host, None)
        self.log("drained", left=len(self.unrecorded))

    def _mark_draining(self, grace: float, gives_up: float) -> None:
        """What `status` shows while this host drains: since when, when what
        still runs is cancelled, when the drain gives up at the latest."""
        now = self.clock()
        state = {
            "pid": os.getpid(),
            "since": now,
            "cancel_at": now + grace,
            "until": now + gives_up,
        }
        self.store.set_draining(self.config.host, json.dumps(state))

    def _cancel_for_drain(self, hurried: bool) -> int:
        """Cancel every run still executing (the keeper terminates each
        group: SIGTERM, its kill_grace, SIGKILL; no store needed); the
        longest kill_grace among them."""
        if hurried:
            reason = "cancelled: the supervisor shut down and a second stop signal ended the drain"
            why = "a second stop signal"
        else:
            reason = (
                f"cancelled: the supervisor shut down and drain_grace"
                f" ({self.config.drain_grace:g}s) expired"
            )
            why = f"drain_grace ({self.config.drain_grace:g}s) expired"
        longest = 0
        running = [watch for seq, watch in self.watches.items() if not self._ended(seq)]
        self.log("drain-cancel", runs=len(running), why=why)
        for watch in self.watches.values():
            watch.cancel_reason = reason
            longest = max(longest, watch.kill_grace)
            if watch.handle is not None:
                self.control.cancel(watch.handle, reason)
        return longest

    def _ended(self, seq: int) -> bool:
        """Whether a watched run is known to have ended (recorded or not)."""
        return seq in self._reaped or self.watches[seq].ending is not None

    def _drain_wait(self, until: float, record_until: float | None, *, hurry: bool) -> bool:
        """Watch and record the runs until none is left or `until` passes
        (monotonic); while a store fault episode is open, until
        `record_until` instead (the ends known, not yet recorded). A progress
        line whenever a run ends and every DRAIN_PROGRESS_INTERVAL. With
        `hurry`, a second stop signal ends the wait: True then."""
        told = (-1, -1)
        next_progress = 0.0
        while self.watches:
            if hurry and self._hurried():
                return True
            if self._store_usable():
                self._phase("ingestion", self.ingest_exits)
                self._phase("requests", self.handle_requests)
                self._phase("notification", self.notify_failures)
            else:
                self._phase("watch", self._collect_reaped)
            self._phase("metrics", self.observer.ticked, None)
            now = time.monotonic()
            episode = self.errors.episode
            end = until
            if record_until is not None and episode is not None and episode.holds_store:
                end = record_until
            if not self.watches or now >= end:
                return False
            ended = sum(1 for seq in self.watches if self._ended(seq))
            counts = (len(self.watches) - ended, ended)
            if counts != told or now >= next_progress:
                told, next_progress = counts, now + DRAIN_PROGRESS_INTERVAL
                self.log(
                    "drain-progress",
                    executing=counts[0],
                    unrecorded=counts[1],
                    wait=f"{math.ceil(end - now)}s",
                )
            if self._waiter is None:
                time.sleep(min(0.05, end - now))
            else:
                self._wait(min(0.25, end - now))
        return False

    def _hurried(self) -> bool:
        return self.stop_signals >= 2


def _finished_answer(run: RunRow) -> str:
    """A cancel's answer for a run that had ended before it was carried out."""
    why = f": {run.reason}" if run.reason else ""
    return f"{run.run_id} had already finished ({run.state}){why}"


def _cancel_answer(run: RunRow, watch: Watch, end: AttemptEnd) -> str:
    """A cancel's answer, written with the end of the attempt it cancelled."""
    if end.state == "failed" and end.reason == watch.cancel_reason:
        return f"{run.run_id} cancelled"
    what = end.state if end.reason is None else f"{end.state}: {end.reason}"
    return f"{run.run_id} ended before the cancel took effect ({what})"


def _stored_handle(attempt: AttemptRow) -> ShimHandle | None:
    """The process the store says runs `attempt`, if it recorded one (a run
    admitted but not yet spawned has none)."""
    if attempt.shim_pid is None or attempt.shim_start_time is None:
        return None
    return ShimHandle(attempt.shim_pid, attempt.shim_start_time)


def _recovered_watch(run: RunRow, directory: Path | str, handle: ShimHandle | None) -> Watch:
    """The watch of a run found running in the store (recovery, or a late
    exit of a run failed while its host was silent)."""
    return Watch(
        run.seq,
        run.schedule_id,
        run.attempt,
        str(directory),
        handle,
        True,
        kill_grace=_frozen_kill_grace(run),
    )


def _frozen_kill_grace(run: RunRow) -> int:
    """An adopted run's kill_grace. A damaged frozen invocation must not stop
    recovery (its run fails closed when it ends): it is terminated at once."""
    try:
        return run.frozen.kill_grace
    except (ValueError, KeyError):
        return 0


def _built(spec: LaunchSpec) -> Callable[[], LaunchSpec]:
    """A spec already built, in the form `_spawn_and_settle` builds one in."""
    return lambda: spec


def _invocation(defn: Definition, document: Any, runs_root: Path) -> Invocation:
    """The frozen invocation. A stored definition from an earlier release may
    carry a timeout or kill_grace longer than MAX_DURATION: clamped here, so
    every deadline the shim computes stays representable (ten years still
    means "never" in practice). `runs_root`: this host's, where the run's
    directory will be, so an operator on another host is told where it is."""
    timeout = defn.run.timeout
    return Invocation(
        command=list(defn.run.command),
        cwd=defn.run.cwd,
        env=dict(defn.run.env),
        input=document,
        timeout=None if timeout is None else min(timeout, MAX_DURATION),
        kill_grace=min(defn.run.kill_grace, MAX_DURATION),
        interrupt_exit_code=defn.run.interrupt_exit_code,
        runs_root=str(runs_root),
    )


def _outcome(record: ExitRecord, run: RunRow) -> tuple[str, str | None]:
    """The run's state and reason from its exit record. The frozen invocation
    is parsed only for a nonzero exit (its interrupt_exit_code), not for
    every run a burst ends."""
    if record.outcome == "exited" and record.exit_code == 0:
        return "completed", None
    interrupt_exit_code = run.frozen.interrupt_exit_code if record.outcome == "exited" else None
    if (
        record.outcome == "exited"
        and interrupt_exit_code is not None
        and record.exit_code == interrupt_exit_code
    ):
        return "interrupted", f"exited with interrupt_exit_code {interrupt_exit_code}"
    if record.outcome == "exited":
        return "failed", record.reason or f"exited with status {record.exit_code}"
    return "failed", record.reason or record.outcome


def run_supervisor(
    location: StoreLocation | Path,
    config: SupervisorConfig,
    *,
    control: ProcessControl | None = None,
    clock: Clock = wall_clock,
    fault: FaultHook = no_fault,
    log: Callable[..., None] | None = None,
    notifier: Notifier | None = None,
    prepare: Callable[[Store], None] | None = None,
    stopped: Callable[[], bool] = lambda: False,
    observer: Observer | None = None,
    launcher_fault: str = "",
) -> None:
    # `launcher_fault` names the crash tests' kill point inside the run
    # keeper (WFSCHED_FAULT); the CLI passes it, never a launcher of its own.
    """The whole daemon: stop signals caught first (a stop that lands while
    it starts is a clean exit), the run keeper started or re-attached to (so
    it inherits neither the lock nor the database), then the lock, recovery,
    the loop, the drain, and the lock released last. `stopped` tells whether a stop signal arrived
    before this was called (the CLI catches them even earlier)."""
    if isinstance(location, Path):
        location = resolve_store(location)
    if location.runs_dir is None and config.runs_dir is not None:
        location = replace(location, runs_dir=Path(config.runs_dir))
    early: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda n, _f: early.append(n))
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    }
    try:
        _supervise(
            location,
            config,
            control or Launcher(location.local_dir, fault=launcher_fault),
            clock,
            fault,
            log,
            notifier,
            prepare,
            early,
            stopped,
            observer,
        )
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _supervise(
    location: StoreLocation,
    config: SupervisorConfig,
    control: ProcessControl,
    clock: Clock,
    fault: FaultHook,
    log: Callable[..., None] | None,
    notifier: Notifier | None,
    prepare: Callable[[Store], None] | None,
    early: list[int],
    stopped: Callable[[], bool],
    observer: Observer | None,
) -> None:
    """A SQLite store's ownership lock is its `supervisor.lock` file, taken
    before the database is opened: one supervisor, always the leader. On a
    PostgreSQL store any number of supervisors join (a shared session lock,
    which only `store copy` excludes) and the leader lease decides which one
    leads (`wfsched.daemon.leadership`). A runs root given elsewhere is checked
    first: the launcher already writes in the store's local directory."""
    # The launcher writes in the local directory: made (private) first, or
    # the start refused with where and how to choose another place.
    ensure_local_dir(location)
    if location.runs_dir is not None:
        _prepare_runs_dir(location.runs_dir)
    if location.path is not None:
        # A file that is no database refuses the start before the keeper,
        # the lock or the runs root leaves a file beside it.
        check_database_file(location.path / DB_NAME)
    control.start()
    if early or stopped():
        control.stop()
        return
    ownership: Ownership | None = None
    try:
        if location.path is not None:
            ownership = Ownership(location.path / LOCK_NAME)
            location.path.mkdir(parents=True, exist_ok=True, mode=0o700)
            ownership.acquire()
        store = open_location(location, create=True, busy_timeout=config.busy_timeout)
        assert store is not None
        try:
            store.join_supervisors()
        except BaseException:
            store.close()
            raise
    except BaseException:
        control.stop()
        if ownership is not None:
            ownership.release()
        raise
    try:
        if prepare is not None:
            # Under the lock, before recovery (e.g. `supervise --apply`).
            prepare(store)
        notifier = notifier or Notifier()
        leadership = Leadership(
            store.lease_channel(config.host, os.getpid()),
            config.lease,
            config.lease_renew,
            clock=clock,
        )
        supervisor = Supervisor(
            store,
            config,
            control,
            clock=clock,
            fault=fault,
            log=log,
            notifier=notifier,
            observer=observer,
            leadership=leadership,
        )
        leadership.executing = lambda: len(supervisor.watches)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, supervisor.request_stop)
        supervisor.stop_signals = len(early) or int(stopped())
        supervisor.stop_requested = bool(supervisor.stop_signals)
        try:
            supervisor.serve()
            if supervisor.unrecorded:
                raise OperationError(_unrecorded_message(supervisor.unrecorded))
        finally:
            signal.set_wakeup_fd(-1)
            supervisor.notifier.close()
            supervisor.fault_file.close()
            store.close()
    finally:
        control.stop()
        if ownership is not None:
            ownership.release()


def _unrecorded_message(seqs: list[int]) -> str:
    """The drain's last word when the store never answered in time."""
    ids = ", ".join(run_id(seq) for seq in seqs)
    runs = "run" if len(seqs) == 1 else "runs"
    return (
        f"the drain could not record the end of {len(seqs)} {runs} ({ids}) before its"
        " deadline: the store did not answer; their exits are kept in their run"
        " directories, and the next `wfsched supervise` on this host records them"
    )


def _prepare_runs_dir(path: Path) -> None:
    """A runs root given by `--runs-dir` / `runs_dir`, made (private) before
    anything else, so one that cannot be used refuses the start (exit 2)."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        raise UsageError(f"runs_dir {path}: cannot use it: {exc.strerror or exc}") from None
