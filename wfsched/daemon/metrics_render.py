"""Rendering metrics snapshots in the Prometheus text format (own thread).

Rendering thousands of schedules is the expensive part of a scrape (about
ten microseconds a sample), so `Renderer` keeps each family's text, and
within a family each schedule's lines, and renders only what changed since
the previous rendering; `Warm` runs it on its own thread as soon as the loop
publishes, so a scrape only sends bytes already rendered. Every byte comes from prometheus-client's
`generate_latest`: the text format is a sequence of families, each a HELP
and a TYPE line and its samples, and only whole families, or one schedule's
samples of a family under the header prometheus-client wrote for it, are
kept and joined.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from types import MappingProxyType
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from wfsched.daemon.metrics import SCHEDULE_GAUGES, Buckets, Published, Snapshot
from wfsched.daemon.quiet import Quiet
from wfsched.domain.tickerrors import FAULT_KINDS


class _One:
    """A collector yielding one family, for prometheus-client's renderer."""

    def __init__(self, metric: Metric) -> None:
        self.metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self.metric


def _text(metric: Metric) -> bytes:
    return generate_latest(_One(metric))  # type: ignore[arg-type]


def _family_text(metric: Metric) -> tuple[bytes, bytes]:
    """prometheus-client's text for one family, split into its two header lines
    (HELP, TYPE) and its sample lines."""
    text = _text(metric)
    cut = text.index(b"\n", text.index(b"\n") + 1) + 1
    return text[:cut], text[cut:]


CHUNK = 256
"""Label sets whose lines are joined together: a change re-joins its chunk and
the family's chunks, never every line of a family (10,000 joins took ~18 ms
under load for one paused schedule)."""


class _Keyed:
    """One labelled family, rendered label set by label set.

    Each key's sample lines are kept, grouped in chunks of CHUNK keys whose
    joined bytes are kept too. A render re-renders only the keys the published
    family says changed since the version rendered last; when that is too far
    back, it compares the two mappings (a set difference of their items, done
    in C). The whole family is reused when nothing was published since.
    """

    def __init__(self, build: Callable[[Any, Any], Metric]) -> None:
        self.build = build
        self.source = Published(MappingProxyType({}))
        self.header, _ = _family_text(build(None, None))
        self.chunk_of: dict[Any, int] = {}
        self.chunks: list[dict[Any, bytes]] = []
        self.joined: list[bytes] = []
        self.text = self.header

    def render(self, family: Published, pause: Callable[[], None] = lambda: None) -> bytes:
        """The family's text; `pause()` is called before every CHUNK keys
        rendered (the caller's chance to yield to the loop)."""
        if family is self.source:
            return self.text
        data = family.data
        changed = family.changed_since(self.source.version)
        if changed is None:
            changed = frozenset(self.source.data.keys() - data.keys()) | {
                key for key, _ in data.items() - self.source.data.items()
            }
        dirty = set()
        for done, key in enumerate(changed):
            if done % CHUNK == 0:
                pause()
            index = self.chunk_of.get(key)
            if key in data:
                if index is None:
                    if not self.chunks or len(self.chunks[-1]) >= CHUNK:
                        self.chunks.append({})
                        self.joined.append(b"")
                    index = self.chunk_of[key] = len(self.chunks) - 1
                self.chunks[index][key] = _family_text(self.build(key, data[key]))[1]
                dirty.add(index)
            elif index is not None:
                del self.chunks[index][key], self.chunk_of[key]
                dirty.add(index)
        for index in dirty:
            self.joined[index] = b"".join(self.chunks[index].values())
        self.source = family
        self.text = b"".join([self.header, *self.joined])
        return self.text


def _counter(name: str, documentation: str, labels: list[str]) -> Callable[[Any, Any], Metric]:
    def build(key: tuple[str, ...] | None, value: int | None) -> Metric:
        family = CounterMetricFamily(name, documentation, labels=labels)
        if key is not None and value is not None:
            family.add_metric(list(key), value)
        return family

    return build


def _gauge(name: str, documentation: str) -> Callable[[str, Any], Metric]:
    def build(schedule_id: str, value: float | None) -> Metric:
        family = GaugeMetricFamily(name, documentation, labels=["schedule"])
        if value is not None:
            family.add_metric([schedule_id], value)
        return family

    return build


def _duration(schedule_id: str, value: Buckets | None) -> Metric:
    family = HistogramMetricFamily(
        "wfsched_run_duration_seconds",
        "Run durations (first start to finish) of runs that ended since the supervisor started.",
        labels=["schedule"],
    )
    if value is not None:
        family.add_metric([schedule_id], value.cumulative(), sum_value=value.total)
    return family


class Renderer:
    """Turns snapshots into the Prometheus text format; safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._occurrences = _Keyed(
            _counter(
                "wfsched_occurrences",
                "Occurrence decisions recorded in the ledger, by state and reason"
                " (a summary row for a span passed over counts once).",
                ["schedule", "state", "reason"],
            )
        )
        self._runs = _Keyed(
            _counter(
                "wfsched_runs",
                "Runs that ended, by outcome (completed, failed, cancelled).",
                ["schedule", "outcome"],
            )
        )
        self._gauges = {
            name: _Keyed(_gauge(name, documentation))
            for name, documentation in SCHEDULE_GAUGES.items()
        }
        self._durations = _Keyed(_duration)

    def render(self, snapshot: Snapshot) -> bytes:
        return b"".join(self.parts(snapshot))

    def parts(
        self, snapshot: Snapshot, pause: Callable[[], None] = lambda: None
    ) -> tuple[bytes, ...]:
        """The exposition as a few whole families' texts, to be sent in order
        (joining them would copy megabytes for nothing). `pause()` is called
        between families and every CHUNK schedules rendered."""
        with self._lock:
            parts = [
                self._occurrences.render(snapshot.occurrences, pause),
                self._runs.render(snapshot.runs, pause),
            ]
            pause()
            parts.append(b"".join(_text(metric) for metric in _scalars(snapshot)))
            for name, family in self._gauges.items():
                parts.append(family.render(snapshot.schedule_gauges[name], pause))
            parts.append(self._durations.render(snapshot.run_duration, pause))
            return tuple(parts)


class Warm:
    """Renders every published snapshot on its own thread, so a scrape sends
    bytes already rendered and never renders (the first rendering of 10,000
    schedules takes over a second) and a tick never waits for either.

    `published()` (the loop, after each publish) wakes the thread; it renders
    the latest snapshot, skipping any published meanwhile. A scrape gets the
    latest rendered parts when they are at most one publish behind the latest
    snapshot, and otherwise waits for the thread to catch up.
    """

    def __init__(self, source: Callable[[], Snapshot | None], quiet: Quiet | None = None) -> None:
        self.source = source
        self.quiet = quiet or Quiet()
        self.renderer = Renderer()
        self._cond = threading.Condition()
        self._wanted = False
        self._stopped = False
        self._ready: tuple[Snapshot, tuple[bytes, ...]] | None = None
        self._thread = threading.Thread(
            target=self._run, name="wfsched-metrics-render", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(5)

    def published(self) -> None:
        with self._cond:
            self._wanted = True
            self._cond.notify_all()

    def parts(self, timeout: float) -> tuple[bytes, ...] | None:
        """Rendered parts no more than one publish older than the latest
        snapshot; None when there is no snapshot or they are not ready within
        `timeout` seconds."""
        snapshot = self.source()
        if snapshot is None:
            return None

        def fresh() -> bool:
            return self._ready is not None and self._ready[0].seq >= snapshot.seq - 1

        with self._cond:
            if self._ready is None or self._ready[0] is not snapshot:
                self._wanted = True
                self._cond.notify_all()
            if not self._cond.wait_for(fresh, timeout):
                return None
            assert self._ready is not None
            return self._ready[1]

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._wanted or self._stopped)
                if self._stopped:
                    return
                self._wanted = False
                done = self._ready[0] if self._ready is not None else None
            snapshot = self.source()
            if snapshot is None or snapshot is done:
                continue
            parts = self.renderer.parts(snapshot, self.quiet.hold)
            with self._cond:
                self._ready = (snapshot, parts)
                self._cond.notify_all()


def _scalars(snapshot: Snapshot) -> list[Metric]:
    """The small families, rendered afresh on every scrape."""

    def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, documentation, value=value)

    leader = GaugeMetricFamily(
        "wfsched_leader", "1 while this supervisor leads, 0 while it stands by.", labels=["host"]
    )
    leader.add_metric([snapshot.host], 1.0 if snapshot.leader else 0.0)
    store = GaugeMetricFamily(
        "wfsched_store_info", "The kind of store the supervisor uses (always 1).", labels=["kind"]
    )
    store.add_metric([snapshot.store_kind], 1.0)
    metrics: list[Metric] = [
        gauge("wfsched_runs_executing", "Runs whose process is executing.", snapshot.executing),
        gauge(
            "wfsched_runs_interrupted",
            "Interrupted runs waiting for `runs resume`.",
            snapshot.interrupted,
        ),
        gauge(
            "wfsched_schedules_blocked", "Schedules blocked with a diagnostic.", snapshot.blocked
        ),
        leader,
        gauge(
            "wfsched_lease_epoch",
            "Leadership fencing epoch (0 on SQLite, where the lock holder leads without a lease).",
            snapshot.lease_epoch,
        ),
        store,
        gauge(
            "wfsched_supervisor_start_time_seconds",
            "When this supervisor process started (Unix time).",
            snapshot.started_at,
        ),
        gauge(
            "wfsched_poll_interval_seconds",
            "The supervisor's poll interval: the longest it sleeps between ticks.",
            snapshot.poll_interval,
        ),
    ]
    fault = GaugeMetricFamily(
        "wfsched_resource_fault",
        "1 while the supervisor is in a resource-fault episode of this kind (it admits and"
        " launches nothing it cannot record), else 0.",
        labels=["kind"],
    )
    episodes = CounterMetricFamily(
        "wfsched_resource_fault_episodes",
        "Resource-fault episodes since this supervisor started, by kind.",
        labels=["kind"],
    )
    for kind in FAULT_KINDS:
        fault.add_metric([kind], 1.0 if snapshot.fault_kind == kind else 0.0)
        episodes.add_metric([kind], snapshot.fault_episodes.get(kind, 0))
    metrics.extend((fault, episodes))
    if snapshot.last_tick_at is not None:
        metrics.append(
            gauge(
                "wfsched_last_tick_timestamp_seconds",
                "When the supervisor's loop last completed a tick (Unix time).",
                snapshot.last_tick_at,
            )
        )
    for name, documentation, buckets in (
        (
            "wfsched_tick_duration_seconds",
            "Duration of the supervisor's ticks.",
            snapshot.tick_seconds,
        ),
        (
            "wfsched_launch_latency_seconds",
            "Scheduled runs' first attempts: from the due instant to the launch.",
            snapshot.launch_latency,
        ),
    ):
        histogram = HistogramMetricFamily(name, documentation)
        histogram.add_metric([], buckets.cumulative(), sum_value=buckets.total)
        metrics.append(histogram)
    return metrics
