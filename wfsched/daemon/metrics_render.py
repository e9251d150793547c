"""Rendering metrics snapshots in the Prometheus text format (HTTP thread).

Rendering thousands of schedules is the expensive part of a scrape (about
ten microseconds a sample), so `Renderer` keeps each family's text, and
within a family each schedule's lines, and renders only what changed since
the previous scrape. Every byte comes from prometheus-client's
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


class _Keyed:
    """One labelled family, rendered label set by label set.

    Each key's sample lines are kept. A scrape re-renders only the keys the
    published family says changed since the version rendered last; when that
    is too far back, it compares the two mappings (a set difference of their
    items, done in C). The whole family is reused when nothing was published
    since.
    """

    def __init__(self, build: Callable[[Any, Any], Metric]) -> None:
        self.build = build
        self.source = Published(MappingProxyType({}))
        self.header, _ = _family_text(build(None, None))
        self.lines: dict[Any, bytes] = {}
        self.text = self.header

    def render(self, family: Published) -> bytes:
        if family is self.source:
            return self.text
        data = family.data
        changed = family.changed_since(self.source.version)
        if changed is None:
            changed = frozenset(self.source.data.keys() - data.keys()) | {
                key for key, _ in data.items() - self.source.data.items()
            }
        for key in changed:
            if key in data:
                self.lines[key] = _family_text(self.build(key, data[key]))[1]
            else:
                self.lines.pop(key, None)
        self.source = family
        self.text = self.header + b"".join(self.lines.values())
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
        with self._lock:
            parts = [
                self._occurrences.render(snapshot.occurrences),
                self._runs.render(snapshot.runs),
                b"".join(_text(metric) for metric in _scalars(snapshot)),
            ]
            for name, family in self._gauges.items():
                parts.append(family.render(snapshot.schedule_gauges[name]))
            parts.append(self._durations.render(snapshot.run_duration))
            return b"".join(parts)


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
