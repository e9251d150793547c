"""Prometheus metrics: the loop publishes a snapshot, scrapes render it.

`Metrics` is the supervisor's observer. It runs on the loop's thread: at
startup it derives the counters from the store (so they continue across a
restart), and at the end of every tick it folds in what the tick committed
and publishes an immutable `Snapshot` (one reference assignment). A scrape
(`wfsched.daemon.metrics_render`, on the HTTP server's thread) reads only the
latest snapshot; it never touches the store or the loop's state, so a slow
scrape cannot slow a tick, and a tick never waits for a scrape.

Per-tick cost is kept small: the idle tick asks the store for three tiny
things (has another process committed, the newest ledger sequence number, the
unfinished-run counts from their partial index) and copies a family's data
only when it changed. Only the rows a tick or an operator's command changed
are read again, and the calendar work for schedule periods is spread over
ticks.

Schedule-level series are facts of the store, not of this process: with
several supervisors on one store, the leader records most runs, and every
supervisor, leader or standby, must report the same `wfsched_runs_total`,
last success and failure and next due instant, or a standby would page for
schedules that are fine. So once every STORE_REFRESH seconds (and, after
this process ended runs, at most MIN_STORE_REFRESH seconds later) two
grouped queries read them from the store: the finished runs per schedule and
outcome, and each schedule's next due instant. Their cost depends on the
size of the store, never on the number of scrapes (docs/monitoring.md,
"Store-wide series").
"""

from __future__ import annotations

import re
import socket
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from prometheus_client.utils import floatToGoString

from wfsched.api.views import stored_document
from wfsched.daemon.observe import Observer
from wfsched.daemon.quiet import Quiet
from wfsched.domain.calendar import CronCalendar, normalize_cron
from wfsched.domain.tickerrors import FAULT_KINDS
from wfsched.domain.timeutil import Clock, wall_clock
from wfsched.errors import WfschedError

if TYPE_CHECKING:
    from wfsched.store import ScheduleRow, Store

STALE_AFTER_POLLS = 3
"""/healthz turns 503 when the loop has not ticked for this many poll intervals."""

TICK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DURATION_BUCKETS = (1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0)

_TOKEN = re.compile(r"[a-z][a-z-]{0,31}")
_REASON_PREFIXES = (
    ("a run of this schedule is unfinished", "overlap"),
    ("max_active_runs", "max-active-runs"),
    ("superseded by a newer instant", "newer-instant"),
    ("no further instant", "calendar-exhausted"),
    ("cwd ", "cwd"),
    ("executable ", "executable"),
    ("input:", "input"),
)


def reason_label(reason: str | None) -> str:
    """A ledger reason as a label value from a small fixed vocabulary.

    Reasons can carry paths and instants; a label must not (each distinct
    value is a new series). One-word reasons (`supervisor-down`, `capacity`,
    `late`, `paused`, `update`...) are kept; sentences map to a word for their
    kind; anything else is `other`.
    """
    if not reason:
        return ""
    if _TOKEN.fullmatch(reason):
        return reason
    for prefix, label in _REASON_PREFIXES:
        if reason.startswith(prefix):
            return label
    return "other"


@dataclass(frozen=True)
class Buckets:
    """One histogram's observations: count per bucket (the last is +Inf) and sum."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    total: float = 0.0

    @classmethod
    def empty(cls, bounds: tuple[float, ...]) -> Buckets:
        return cls(bounds, (0,) * (len(bounds) + 1))

    def observe(self, value: float) -> Buckets:
        index = next((i for i, bound in enumerate(self.bounds) if value <= bound), len(self.bounds))
        counts = list(self.counts)
        counts[index] += 1
        return Buckets(self.bounds, tuple(counts), self.total + value)

    def cumulative(self) -> list[tuple[str, float]]:
        running = 0
        pairs = []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            pairs.append((floatToGoString(bound), float(running)))
        return pairs


@dataclass(frozen=True)
class Snapshot:
    """Everything a scrape shows, as of the end of one tick. Never mutated."""

    host: str
    store_kind: str
    leader: bool
    lease_epoch: int
    started_at: float
    poll_interval: float
    last_tick_at: float | None
    last_tick_monotonic: float | None
    executing: int
    interrupted: int
    blocked: int
    tick_seconds: Buckets
    launch_latency: Buckets
    occurrences: Published
    runs: Published
    schedule_gauges: Mapping[str, Published]
    """Gauge family name -> schedule -> value."""
    run_duration: Published
    seq: int = 0
    """Publishes before this one: a renderer tells how far behind it is."""
    fault_kind: str | None = None
    """The kind of the open resource-fault episode, if one is open."""
    fault_episodes: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Resource-fault episodes since this supervisor started, by kind."""


SCHEDULE_GAUGES = {
    "wfsched_schedule_next_due_timestamp_seconds": (
        "Next calendar instant the schedule is due (Unix time); absent while"
        " paused, blocked, exhausted or deleted."
    ),
    "wfsched_schedule_last_success_timestamp_seconds": (
        "When the schedule's latest completed run finished (Unix time)."
    ),
    "wfsched_schedule_last_failure_timestamp_seconds": (
        "When the schedule's latest failure was recorded (a failed run, not an"
        " operator's cancel, or a preflight-rejected occurrence; Unix time)."
    ),
    "wfsched_schedule_lateness_seconds": (
        "The schedule's lateness policy: how late an instant may still start;"
        " active schedules only."
    ),
    "wfsched_schedule_period_seconds": (
        "Length of the calendar interval that ends at the next due instant; active"
        " cron schedules only."
    ),
    "wfsched_schedule_created_timestamp_seconds": "When the schedule was created (Unix time).",
}
_NEXT_DUE, _LAST_SUCCESS, _LAST_FAILURE, _LATENESS, _PERIOD, _CREATED = SCHEDULE_GAUGES
PERIOD_BUDGET = 0.005
"""Seconds a tick may spend computing schedule periods."""
UPDATED_MARGIN = 1.0
"""Schedules stamped this long before the newest stamp seen are re-read too."""
STORE_REFRESH = 5.0
"""Seconds between two reads of the store-wide per-schedule facts: a
standby's series follow the leader's records within this."""
MIN_STORE_REFRESH = 1.0
"""After this process ended runs, the store-wide facts are read again this
soon (not at once: a burst of endings would read them every tick)."""


@dataclass(frozen=True)
class _Policy:
    lateness: float
    cron: str | None
    zone: str


HISTORY = 64
"""Publishes whose changed keys a family remembers (see `Published`)."""


class Published(Mapping[Any, Any]):
    """One family's data as published: read-only, never mutated.

    It also names the keys that changed in each of the last HISTORY
    publishes, so a renderer that saw an earlier version re-renders only
    those instead of comparing every schedule.
    """

    def __init__(
        self,
        data: Mapping[Any, Any],
        version: int = 0,
        recent: tuple[tuple[int, frozenset[Any]], ...] = (),
    ) -> None:
        self.data = data
        self.version = version
        self.recent = recent

    def __getitem__(self, key: Any) -> Any:
        return self.data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def changed_since(self, version: int) -> frozenset[Any] | None:
        """Keys changed after `version`, or None when this family cannot say
        (that version is too long ago, or not an earlier one of this family)."""
        if not self.recent or version >= self.version or self.recent[0][0] > version + 1:
            return None
        return frozenset().union(*(keys for seen, keys in self.recent if seen > version))


class _Family:
    """Loop-side data of one family and the keys changed since publishing."""

    def __init__(self) -> None:
        self.data: dict[Any, Any] = {}
        self.published = Published(MappingProxyType({}))
        self._changed: set[Any] = set()
        self._history: deque[tuple[int, frozenset[Any]]] = deque(maxlen=HISTORY)

    def set(self, key: Any, value: Any) -> None:
        if self.data.get(key) != value:
            self.data[key] = value
            self._changed.add(key)

    def drop(self, key: Any) -> None:
        if self.data.pop(key, None) is not None:
            self._changed.add(key)

    def add(self, key: Any, amount: int) -> None:
        self.data[key] = self.data.get(key, 0) + amount
        self._changed.add(key)

    def publish(self) -> Published:
        if self._changed:
            version = self.published.version + 1
            self._history.append((version, frozenset(self._changed)))
            self._changed.clear()
            self.published = Published(
                MappingProxyType(dict(self.data)), version, tuple(self._history)
            )
        return self.published


class Metrics(Observer):
    """The supervisor's metrics observer (loop thread) and its published snapshot."""

    paces_ticks = True
    """/healthz and the stall alert judge the loop by three poll intervals."""

    def __init__(
        self,
        *,
        poll_interval: float,
        host: str | None = None,
        store_kind: str = "sqlite",
        clock: Clock = wall_clock,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.poll_interval = poll_interval
        self.host = host or socket.gethostname()
        self.store_kind = store_kind
        self.clock = clock
        self.monotonic = monotonic
        self.started_at = clock()
        self._store: Store | None = None
        self._snapshot: Snapshot | None = None
        self._data_version: int | None = None
        self._ledger_seq = 0
        self._changed: set[str] = set()
        self._launched: list[int] = []
        self._ended: list[int] = []
        self._updated_seen = float("-inf")
        """The newest `updated_at` among the schedule rows read."""
        self._policies: dict[str, tuple[int, _Policy]] = {}
        """schedule -> (revision, its lateness and cron)."""
        self._period_for: dict[str, tuple[int, int]] = {}
        """schedule -> (revision, next_due) its period gauge was computed for."""
        self._pending: dict[str, tuple[int, int, _Policy]] = {}
        """Periods still to compute, oldest request first."""
        self._calendars: dict[tuple[str | None, str], CronCalendar] = {}
        self._blocked: set[str] = set()
        self._deleted: set[str] = set()
        """Schedules seen deleted: their runs stay in the store, their gauges go."""
        self._run_counts: dict[tuple[str, str], int] = {}
        """(schedule, outcome) -> finished runs the store held at the last read."""
        self._store_read_at: float | None = None
        """Monotonic time of the last read of the store-wide facts."""
        self._store_due_at = float("-inf")
        """Monotonic time the store-wide facts are to be read again."""
        self._occurrences = _Family()
        self._runs = _Family()
        self._gauges = {name: _Family() for name in SCHEDULE_GAUGES}
        self._durations = _Family()
        self._tick = Buckets.empty(TICK_BUCKETS)
        self._latency = Buckets.empty(LATENCY_BUCKETS)
        self._last_tick: tuple[float, float] | None = None
        self._unfinished: dict[str, int] = {}
        self.refresh_error: str | None = None
        """Why the last tick's store reads failed, if they did."""
        self._leading = True
        self._epoch = 0
        self._fault_kind: str | None = None
        self._fault_episodes = dict.fromkeys(FAULT_KINDS, 0)
        self.quiet = Quiet(monotonic)
        """When the listener and renderer hold off (see `wfsched.daemon.quiet`)."""
        self.on_publish: Callable[[], None] | None = None
        """Called (loop thread) after each publish: wakes the metrics renderer."""
        self._seq = 0

    @property
    def snapshot(self) -> Snapshot | None:
        """The latest published snapshot (safe from any thread)."""
        return self._snapshot

    # -- the observer interface (loop thread) -------------------------------------

    def started(self, store: Store) -> None:
        self._store = store
        self.started_at = self.clock()
        with store.snapshot():
            self._data_version = store.data_version()
            self._fold_ledger(store)
            for row in store.list_schedules():
                self._schedule(row)
            self._fold_store_wide(store)
            self._unfinished = store.unfinished_run_states()
        self._publish()

    def ticked(self, seconds: float | None) -> None:
        store = self._store
        if store is None:
            return
        if seconds is not None:
            self._tick = self._tick.observe(seconds)
        store_errors: tuple[type[Exception], ...] = (*store.driver_errors, WfschedError)
        try:
            self._refresh(store)
            self._compute_periods()
        except store_errors as exc:
            # Metrics never stop the scheduler: a store fault is the loop's
            # episode to report; the snapshot keeps the values last read and
            # everything is re-read once the store answers again.
            self._data_version = None
            self.refresh_error = str(exc)
        else:
            self.refresh_error = None
        self._last_tick = (self.clock(), self.monotonic())
        self._publish()

    def sleeping(self, due_in: float | None) -> None:
        self.quiet.expect(due_in)

    def _refresh(self, store: Store) -> None:
        with store.snapshot():
            version = store.data_version()
            if version != self._data_version:
                # Another process committed (create, update, pause, delete, a
                # trigger request...): every administrative change stamps
                # `updated_at`, so the rows to re-read are those stamped since
                # the newest stamp seen (less a margin for the CLI's clock).
                self._data_version = version
                self._changed.update(
                    store.schedule_ids_updated_since(self._updated_seen - UPDATED_MARGIN)
                )
            if self._changed:
                rows = store.schedules_by_id(sorted(self._changed))
                self._changed.clear()
                for row in rows.values():
                    self._schedule(row)
            self._fold_ledger(store)
            if self._launched or self._ended:
                self._fold_runs(store)
            if self.monotonic() >= self._store_due_at:
                self._fold_store_wide(store)
            self._unfinished = store.unfinished_run_states()

    def schedule_changed(self, schedule_id: str) -> None:
        self._changed.add(schedule_id)

    def leadership(self, leading: bool, epoch: int | None) -> None:
        self._leading = leading
        if epoch is not None:
            self._epoch = epoch
        self._publish()

    def run_launched(self, seq: int) -> None:
        self._launched.append(seq)

    def run_ended(self, seq: int) -> None:
        self._ended.append(seq)

    def fault_opened(self, kind: str) -> None:
        # Published at once: during a store fault the loop's next publish
        # comes only after a failing probe, and the alert must not wait.
        self._fault_kind = kind
        self._fault_episodes[kind] = self._fault_episodes.get(kind, 0) + 1
        self._publish()

    def fault_closed(self) -> None:
        self._fault_kind = None
        self._publish()

    # -- folding committed facts in --------------------------------------------------

    def _fold_ledger(self, store: Store) -> None:
        """Ledger rows recorded since the last look, by anyone (the supervisor,
        or `pause`/`resume`/`update` in a CLI process): an index range on the
        row sequence, empty on an idle tick."""
        newest = store.last_occurrence_seq()
        if newest <= self._ledger_seq:
            return
        for item in store.ledger_counts(self._ledger_seq, newest):
            key = (item.schedule_id, item.state, reason_label(item.reason))
            self._occurrences.add(key, item.count)
            if item.state == "preflight-rejected":
                self._latest(_LAST_FAILURE, item.schedule_id, item.last_recorded_at)
        self._ledger_seq = newest

    def _fold_store_wide(self, store: Store) -> None:
        """The store-wide per-schedule facts, as the store has them now.

        `wfsched_runs_total` grows by what the store gained since the last
        read, so it continues across a restart and follows runs any
        supervisor recorded; a count that shrank (retention removed finished
        runs) adds nothing. A schedule whose next due instant or blocked
        state moved (the leader admitted it) is re-read in full."""
        counts: dict[tuple[str, str], int] = {}
        for item in store.finished_run_counts():
            outcome = "cancelled" if item.cancelled else item.state
            key = (item.schedule_id, outcome)
            counts[key] = item.count
            gained = item.count - self._run_counts.get(key, 0)
            if gained > 0:
                self._runs.add(key, gained)
            if (
                item.last_finished_at is not None
                and outcome != "cancelled"
                and item.schedule_id not in self._deleted
            ):
                family = _LAST_SUCCESS if item.state == "completed" else _LAST_FAILURE
                self._latest(family, item.schedule_id, item.last_finished_at)
        self._run_counts = counts
        for schedule_id, next_due, blocked in store.schedule_due_states():
            shown = self._gauges[_NEXT_DUE].data.get(schedule_id)
            if shown != (None if next_due is None else float(next_due)) or blocked != (
                schedule_id in self._blocked
            ):
                self._changed.add(schedule_id)
        now = self.monotonic()
        self._store_read_at = now
        self._store_due_at = now + STORE_REFRESH

    def _fold_runs(self, store: Store) -> None:
        """What only this process saw of the runs it launched and ended: launch
        latency and run durations. Their counts and last outcomes are the
        store's (`_fold_store_wide`), read again soon after they ended."""
        launched, ended = set(self._launched), set(self._ended)
        facts = store.run_facts(sorted(launched | ended))
        self._launched, self._ended = [], []
        for run in facts:
            # Attempt 1 only: a resumed attempt is not late for its instant.
            if (
                run.seq in launched
                and run.kind == "scheduled"
                and run.attempt == 1
                and run.started_at is not None
            ):
                self._latency = self._latency.observe(max(0.0, run.started_at - run.scheduled_at))
            if run.seq not in ended or run.state not in ("completed", "failed"):
                continue
            if self._store_read_at is not None:
                self._store_due_at = min(
                    self._store_due_at, self._store_read_at + MIN_STORE_REFRESH
                )
            if run.finished_at is None:
                continue
            if run.started_at is not None:
                current = self._durations.data.get(run.schedule_id) or Buckets.empty(
                    DURATION_BUCKETS
                )
                self._durations.set(
                    run.schedule_id, current.observe(max(0.0, run.finished_at - run.started_at))
                )

    def _latest(self, family: str, schedule_id: str, at: float) -> None:
        gauges = self._gauges[family]
        if at > gauges.data.get(schedule_id, float("-inf")):
            gauges.set(schedule_id, at)

    def _forget(self, schedule_id: str) -> None:
        """A deleted schedule: its gauges go; its counters stay (history)."""
        for gauges in self._gauges.values():
            gauges.drop(schedule_id)
        self._blocked.discard(schedule_id)
        self._period_for.pop(schedule_id, None)
        self._pending.pop(schedule_id, None)
        self._policies.pop(schedule_id, None)

    def _schedule(self, row: ScheduleRow) -> None:
        """The gauges of one schedule row; its period is queued, not computed."""
        self._updated_seen = max(self._updated_seen, row.updated_at)
        if row.deleted_at is not None:
            self._deleted.add(row.id)
            self._forget(row.id)
            return
        self._deleted.discard(row.id)
        self._gauges[_CREATED].set(row.id, row.created_at)
        if row.blocked_reason:
            self._blocked.add(row.id)
        else:
            self._blocked.discard(row.id)
        if row.next_due is None:
            self._gauges[_NEXT_DUE].drop(row.id)
        else:
            self._gauges[_NEXT_DUE].set(row.id, float(row.next_due))
        policy = self._policy(row) if row.state == "active" else None
        if policy is None:
            self._gauges[_LATENESS].drop(row.id)
        else:
            self._gauges[_LATENESS].set(row.id, policy.lateness)
        if policy is None or policy.cron is None or row.next_due is None:
            self._gauges[_PERIOD].drop(row.id)
            self._period_for.pop(row.id, None)
            self._pending.pop(row.id, None)
        elif self._period_for.get(row.id) != (row.revision, row.next_due):
            self._pending[row.id] = (row.revision, row.next_due, policy)

    def _policy(self, row: ScheduleRow) -> _Policy | None:
        """Lateness and cron of the stored definition, read once per revision
        (the JSON document only: a full parse costs a millisecond a schedule)."""
        cached = self._policies.get(row.id)
        if cached is not None and cached[0] == row.revision:
            return cached[1]
        try:
            document = stored_document(row)
            trigger = document["trigger"]
            policy = _Policy(
                float(document["policy"]["lateness"]),
                trigger.get("cron"),
                trigger.get("timezone") or "UTC",
            )
        except (WfschedError, KeyError, TypeError, ValueError):
            return None
        self._policies[row.id] = (row.revision, policy)
        return policy

    def _compute_periods(self) -> None:
        """Periods queued by `_schedule`, within PERIOD_BUDGET seconds a tick:
        a calendar step costs about a millisecond, and after a start with
        10,000 schedules that is seconds of work the loop must not wait for."""
        deadline = self.monotonic() + PERIOD_BUDGET
        while self._pending and self.monotonic() <= deadline:
            schedule_id = next(iter(self._pending))
            revision, next_due, policy = self._pending.pop(schedule_id)
            self._period_for[schedule_id] = (revision, next_due)
            try:
                calendar = self._calendars.get((policy.cron, policy.zone))
                if calendar is None:
                    if len(self._calendars) > 1024:
                        self._calendars.clear()
                    calendar = CronCalendar(normalize_cron(policy.cron or ""), policy.zone)
                    self._calendars[(policy.cron, policy.zone)] = calendar
                previous = calendar.prev_before_epoch(next_due)
            except (WfschedError, KeyError, ValueError):
                self._gauges[_PERIOD].drop(schedule_id)
                continue
            self._gauges[_PERIOD].set(schedule_id, float(next_due - previous))

    def _publish(self) -> None:
        tick_at, tick_mono = self._last_tick if self._last_tick else (None, None)
        self._snapshot = Snapshot(
            host=self.host,
            store_kind=self.store_kind,
            # SQLite: the supervisor holding the store's lock is the only one,
            # so it always leads; there is no lease, hence epoch 0. With a
            # lease: the epoch it last led with (kept while it stands by).
            leader=self._leading,
            lease_epoch=self._epoch,
            started_at=self.started_at,
            poll_interval=self.poll_interval,
            last_tick_at=tick_at,
            last_tick_monotonic=tick_mono,
            executing=self._unfinished.get("running", 0),
            interrupted=self._unfinished.get("interrupted", 0),
            blocked=len(self._blocked),
            tick_seconds=self._tick,
            launch_latency=self._latency,
            occurrences=self._occurrences.publish(),
            runs=self._runs.publish(),
            schedule_gauges=MappingProxyType(
                {name: family.publish() for name, family in self._gauges.items()}
            ),
            run_duration=self._durations.publish(),
            seq=self._seq,
            fault_kind=self._fault_kind,
            fault_episodes=MappingProxyType(dict(self._fault_episodes)),
        )
        self._seq += 1
        if self.on_publish is not None:
            self.on_publish()


# -- health (HTTP thread) ----------------------------------------------------------


def health(snapshot: Snapshot | None, now_monotonic: float) -> tuple[int, str]:
    """(HTTP status, body) of /healthz: 200 while the loop ticks, 503 when it
    has not ticked for more than STALE_AFTER_POLLS poll intervals."""
    if snapshot is None or snapshot.last_tick_monotonic is None:
        return 503, "starting: no tick yet\n"
    role = "leader" if snapshot.leader else "standby"
    silent = now_monotonic - snapshot.last_tick_monotonic
    limit = STALE_AFTER_POLLS * snapshot.poll_interval
    if silent > limit:
        return 503, f"{role} stalled: no tick for {silent:.1f}s (limit {limit:g}s)\n"
    return 200, f"{role} ok\n"
