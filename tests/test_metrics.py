"""Layer 1: metrics from the supervisor loop with an injected clock and the
fake launcher; the renderer, the health rule and the listener in-process."""

from __future__ import annotations

import socket
import sqlite3
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.daemon import wait_for
from tests.fakes import Clock, FakeControl
from wfsched.api.admin import Admin
from wfsched.daemon.metrics import Metrics, Snapshot, health, reason_label
from wfsched.daemon.metrics_render import Renderer
from wfsched.daemon.metrics_server import MetricsServer
from wfsched.daemon.observe import Observer
from wfsched.daemon.quiet import Quiet
from wfsched.daemon.supervisor import Supervisor
from wfsched.domain.config import Listen, SupervisorConfig, parse_listen
from wfsched.domain.definition import parse_definition
from wfsched.domain.tickerrors import FAULT_KINDS
from wfsched.errors import StoreUnavailable, UsageError
from wfsched.store import SQLiteStore

T0 = int(datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp())
MINUTE = 60


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Harness:
    """A supervisor with a Metrics observer; `tick_at` ticks as serve() does."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = Clock(T0 - 30)
        self.monotonic = Monotonic()
        self.store = SQLiteStore(root)
        self.admin = Admin(self.store, self.clock)
        self.control = FakeControl(clock=self.clock)
        self.metrics = Metrics(
            poll_interval=1.0, host="h1", clock=self.clock, monotonic=self.monotonic
        )
        self.supervisor = Supervisor(
            self.store,
            SupervisorConfig(),
            self.control,
            clock=self.clock,
            log=lambda *_, **__: None,
            observer=self.metrics,
        )
        self.metrics.started(self.store)
        self.ticks = 0
        self.tick_at(T0 - 30)

    def define(self, schedule_id: str, command: str = '["true"]', extra: str = "") -> None:
        text = (
            f'id = "{schedule_id}"\n[trigger]\ncron = "* * * * *"\n'
            f"[run]\ncommand = {command}\n{extra}"
        )
        self.admin.create(parse_definition(text, "x.toml", now=int(self.clock())))

    def tick_at(self, instant: float) -> Snapshot:
        # Time passes for the refresh intervals (monotonic) as for the calendar.
        self.monotonic.now += max(0.0, instant - self.clock())
        self.clock.set(instant)
        self.supervisor.tick()
        self.metrics.ticked(0.002)
        self.ticks += 1
        snapshot = self.metrics.snapshot
        assert snapshot is not None
        return snapshot

    def cli_admin(self) -> Admin:
        """An operator's command: another connection to the same store."""
        return Admin(SQLiteStore(self.root), self.clock)


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    return Harness(tmp_path / "store")


def gauge(snapshot: Snapshot, name: str, schedule_id: str) -> float | None:
    return snapshot.schedule_gauges[f"wfsched_schedule_{name}"].get(schedule_id)


def test_counters_and_gauges_follow_what_the_loop_commits(h: Harness) -> None:
    h.define("ok")
    h.define("bad", command='["/nonexistent/tool"]')
    h.tick_at(T0 - 1)
    h.tick_at(T0)
    snap = h.tick_at(T0 + 0.25)
    assert snap.occurrences[("ok", "admitted", "")] == 1
    # A preflight-rejected occurrence is a failure: state label and last failure.
    assert snap.occurrences[("bad", "preflight-rejected", "executable")] == 1
    assert gauge(snap, "last_failure_timestamp_seconds", "bad") == T0
    assert snap.executing == 1
    assert snap.launch_latency.counts[0] == 1 and snap.launch_latency.total == 0.0
    assert gauge(snap, "next_due_timestamp_seconds", "ok") == T0 + MINUTE
    assert gauge(snap, "period_seconds", "ok") == MINUTE
    assert gauge(snap, "lateness_seconds", "ok") == 60

    h.clock.set(T0 + 5)
    h.control.finish("run-000001")
    snap = h.tick_at(T0 + 5)
    assert snap.runs[("ok", "completed")] == 1
    assert gauge(snap, "last_success_timestamp_seconds", "ok") == T0 + 5
    assert snap.run_duration["ok"].total == pytest.approx(5.0)
    assert snap.executing == 0

    h.tick_at(T0 + MINUTE)
    snap = h.tick_at(T0 + MINUTE + 1)
    h.control.finish("run-000002", exit_code=3)
    snap = h.tick_at(T0 + MINUTE + 2)
    assert snap.runs[("ok", "failed")] == 1
    assert gauge(snap, "last_failure_timestamp_seconds", "ok") == T0 + MINUTE + 1
    # Every tick is observed once, 2 ms falling in the 2.5 ms bucket.
    assert snap.tick_seconds.counts[2] == sum(snap.tick_seconds.counts) == h.ticks


def test_skips_are_counted_with_a_bounded_reason(h: Harness) -> None:
    h.define("ok")
    h.tick_at(T0)
    snap = h.tick_at(T0 + MINUTE)
    assert snap.occurrences[("ok", "skipped-overlap", "overlap")] == 1
    labels = {key[2] for key in snap.occurrences}
    assert labels <= {"", "overlap"}


def test_counters_are_derived_from_the_store_at_startup(h: Harness) -> None:
    h.define("ok")
    h.define("bad", command='["/nonexistent/tool"]')
    h.tick_at(T0)
    h.control.finish("run-000001")
    h.tick_at(T0 + 1)
    h.tick_at(T0 + MINUTE)
    before = h.metrics.snapshot
    assert before is not None
    restarted = Metrics(poll_interval=1.0, host="h1", clock=h.clock)
    restarted.started(SQLiteStore(h.root))
    after = restarted.snapshot
    assert after is not None
    assert dict(after.occurrences) == dict(before.occurrences)
    assert dict(after.runs) == dict(before.runs) == {("ok", "completed"): 1}
    for name in ("last_success_timestamp_seconds", "last_failure_timestamp_seconds"):
        assert dict(after.schedule_gauges[f"wfsched_schedule_{name}"]) == dict(
            before.schedule_gauges[f"wfsched_schedule_{name}"]
        )


def test_operator_commands_in_another_process_are_seen(h: Harness) -> None:
    h.define("ok")
    h.tick_at(T0 - 10)
    other = h.cli_admin()
    other.pause("ok")
    snap = h.tick_at(T0 - 9)
    assert gauge(snap, "next_due_timestamp_seconds", "ok") is None
    assert gauge(snap, "period_seconds", "ok") is None
    h.clock.set(T0 + 2 * MINUTE + 5)
    other.resume("ok")
    snap = h.tick_at(T0 + 2 * MINUTE + 5)
    assert snap.occurrences[("ok", "skipped-paused", "paused")] == 1
    assert gauge(snap, "next_due_timestamp_seconds", "ok") == T0 + 3 * MINUTE
    other.delete("ok")
    snap = h.tick_at(T0 + 2 * MINUTE + 6)
    assert gauge(snap, "created_timestamp_seconds", "ok") is None
    assert snap.occurrences[("ok", "skipped-paused", "paused")] == 1


def test_a_blocked_schedule_is_counted_and_loses_its_next_due(h: Harness) -> None:
    h.define("ok")
    h.tick_at(T0 - 10)
    h.supervisor.block("ok", "records contradict each other")
    snap = h.tick_at(T0 - 9)
    assert snap.blocked == 1
    assert gauge(snap, "next_due_timestamp_seconds", "ok") is None


def test_an_idle_tick_reads_no_schedule_rows(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    for index in range(50):
        h.define(f"s{index:02d}")
    h.tick_at(T0 - 20)
    h.tick_at(T0 - 19.5)  # reads the rows the store-wide read found moved

    def refuse(*_: object) -> None:
        raise AssertionError("an idle tick must not read schedule rows")

    monkeypatch.setattr(h.store, "list_schedules", refuse)
    monkeypatch.setattr(h.store, "schedules_by_id", refuse)
    monkeypatch.setattr(h.store, "finished_run_counts", refuse)
    monkeypatch.setattr(h.store, "schedule_due_states", refuse)
    monkeypatch.setattr(h.store, "schedule_ids_updated_since", refuse)
    before = h.metrics.snapshot
    snap = h.tick_at(T0 - 19)
    assert before is not None
    # Unchanged families are the same objects: nothing was copied either.
    assert (
        snap.schedule_gauges["wfsched_schedule_next_due_timestamp_seconds"]
        is (before.schedule_gauges["wfsched_schedule_next_due_timestamp_seconds"])
    )


def test_a_store_fault_in_the_metrics_never_stops_the_loop(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    h.define("ok")
    h.tick_at(T0 - 20)

    def locked() -> int:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(h.store, "last_occurrence_seq", locked)
    snap = h.tick_at(T0 - 19)
    assert h.metrics.refresh_error == "database is locked"
    assert health(snap, h.monotonic.now)[0] == 200
    monkeypatch.undo()
    snap = h.tick_at(T0)
    assert h.metrics.refresh_error is None
    assert snap.occurrences[("ok", "admitted", "")] == 1


def test_reason_labels_come_from_a_small_vocabulary() -> None:
    assert reason_label(None) == ""
    assert reason_label("supervisor-down") == "supervisor-down"
    assert reason_label("cwd '/srv/x' does not exist or is not a directory") == "cwd"
    assert reason_label("executable 'backup' not found on PATH") == "executable"
    assert reason_label("input: report.time: bad") == "input"
    assert reason_label("superseded by a newer instant (2026-12-01T09:00:00Z)") == "newer-instant"
    assert reason_label("Something /with/a/path 2026") == "other"


def test_health_is_503_after_three_silent_poll_intervals(h: Harness) -> None:
    snap = h.tick_at(T0 - 20)
    assert health(snap, h.monotonic.now + 2.9) == (200, "leader ok\n")
    status, body = health(snap, h.monotonic.now + 3.1)
    assert status == 503 and body.startswith("leader stalled: no tick for 3.1s")
    assert health(None, 0.0)[0] == 503


def same_samples(one: bytes, other: bytes) -> bool:
    """The same lines; a cached family may list its label sets in another order."""
    return sorted(one.splitlines()) == sorted(other.splitlines())


def test_the_renderer_reuses_only_what_did_not_change(h: Harness) -> None:
    for name in ("a", "b", "c"):
        h.define(name)
    renderer = Renderer()
    renderer.render(h.tick_at(T0 - 20))
    idle = h.tick_at(T0 - 19)
    assert same_samples(renderer.render(idle), Renderer().render(idle))
    h.tick_at(T0)
    h.control.finish("run-000002")
    snap = h.tick_at(T0 + 1)
    cached = renderer.render(snap)
    assert same_samples(cached, Renderer().render(snap))
    families = {family.name: family for family in text_string_to_metric_families(cached.decode())}
    due = {
        sample.labels["schedule"]: sample.value
        for sample in families["wfsched_schedule_next_due_timestamp_seconds"].samples
    }
    assert due == {"a": T0 + MINUTE, "b": T0 + MINUTE, "c": T0 + MINUTE}
    runs = [s for s in families["wfsched_runs"].samples if s.name == "wfsched_runs_total"]
    assert [(s.labels, s.value) for s in runs] == [({"schedule": "b", "outcome": "completed"}, 1.0)]
    h.cli_admin().delete("c")
    text = renderer.render(h.tick_at(T0 + 2)).decode()
    assert 'schedule="c"' in text  # its counters stay: history
    assert 'next_due_timestamp_seconds{schedule="c"}' not in text
    assert 'next_due_timestamp_seconds{schedule="a"}' in text


def test_listen_addresses() -> None:
    assert parse_listen("9464") == Listen("127.0.0.1", 9464)
    assert parse_listen(":9464") == Listen("127.0.0.1", 9464)
    assert parse_listen("0.0.0.0:9464") == Listen("0.0.0.0", 9464)
    assert parse_listen("[::1]:9464") == Listen("::1", 9464)
    assert str(parse_listen("[::1]:9464")) == "[::1]:9464"
    for bad in ("", "abc", "1.2.3.4", "host:99999", "[::1]", "::1:80", "h:-1"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_listener_serves_the_latest_snapshot_and_health(h: Harness) -> None:
    server = MetricsServer(parse_listen("127.0.0.1:0"), "--metrics")
    server.start(lambda: h.metrics.snapshot, monotonic=h.monotonic)
    try:
        base = f"http://127.0.0.1:{server.address.port}"
        h.tick_at(T0 - 20)
        assert _get(base + "/healthz") == (200, "leader ok\n")
        h.monotonic.now += 3.5
        status, body = _get(base + "/healthz")
        assert status == 503 and "stalled" in body
        status, text = _get(base + "/metrics")
        assert status == 200
        names = {family.name for family in text_string_to_metric_families(text)}
        assert {"wfsched_leader", "wfsched_store_info", "wfsched_tick_duration_seconds"} <= names
        assert _get(base + "/other")[0] == 404
    finally:
        server.close()


def test_a_port_in_use_is_one_clear_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(UsageError) as caught:
            MetricsServer(parse_listen(f"127.0.0.1:{port}"), "--metrics")
    message = str(caught.value)
    assert message.startswith(f"--metrics 127.0.0.1:{port}: cannot listen: address already in use")
    assert "\n" not in message


def test_ipv6_loopback_listens_where_the_host_has_it() -> None:
    if not socket.has_ipv6:
        pytest.skip("this host has no IPv6")
    try:
        server = MetricsServer(parse_listen("[::1]:0"), "--metrics")
    except UsageError as exc:
        pytest.skip(f"no IPv6 loopback here: {exc}")
    try:
        server.start(lambda: None)
        assert server.address.host == "::1"
        assert _get(f"http://[::1]:{server.address.port}/healthz")[0] == 503
    finally:
        server.close()


def test_published_families_name_their_changed_keys_and_fall_back_when_far_behind() -> None:
    from wfsched.daemon.metrics import HISTORY, _Family
    from wfsched.daemon.metrics_render import _gauge, _Keyed

    family = _Family()
    family.set("a", 1.0)
    family.set("b", 2.0)
    first = family.publish()
    assert family.publish() is first  # nothing changed: the same object
    family.set("b", 3.0)
    family.drop("a")
    second = family.publish()
    assert second.changed_since(first.version) == {"a", "b"}
    assert first.changed_since(second.version) is None
    keyed = _Keyed(_gauge("wfsched_x_seconds", "x"))
    keyed.render(first)
    for value in range(HISTORY + 2):
        family.set("c", float(value))
        family.publish()
    far = family.publish()
    assert far.changed_since(second.version) is None
    text = keyed.render(far).decode()
    assert 'wfsched_x_seconds{schedule="a"}' not in text
    assert f'wfsched_x_seconds{{schedule="c"}} {HISTORY + 1:.1f}' in text
    assert 'wfsched_x_seconds{schedule="b"} 3.0' in text


def test_a_first_scrape_of_10000_schedules_sends_bytes_rendered_off_the_request_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    from wfsched.daemon.metrics import SCHEDULE_GAUGES

    metrics = Metrics(poll_interval=1.0, host="h1")
    for index in range(10_000):
        for name in SCHEDULE_GAUGES:
            metrics._gauges[name].set(f"s{index:05d}", 1.0e9 + index)
    renders: list[str] = []
    real = Renderer.parts

    def counted(self: Renderer, snapshot: Snapshot, *pause: Any) -> tuple[bytes, ...]:
        renders.append(threading.current_thread().name)
        return real(self, snapshot, *pause)

    monkeypatch.setattr(Renderer, "parts", counted)
    server = MetricsServer(parse_listen("127.0.0.1:0"), "--metrics")
    server.start(lambda: metrics.snapshot)
    metrics.on_publish = server.published
    try:
        metrics._publish()
        status, text = _get(f"http://127.0.0.1:{server.address.port}/metrics")
    finally:
        server.close()
    assert status == 200
    due = [
        family
        for family in text_string_to_metric_families(text)
        if family.name == "wfsched_schedule_next_due_timestamp_seconds"
    ]
    assert len(due[0].samples) == 10_000
    # Every rendering happened on the renderer's thread, none on the request's.
    assert renders and set(renders) == {"wfsched-metrics-render"}


def test_a_scrape_is_at_most_one_publish_behind(h: Harness) -> None:
    from wfsched.daemon.metrics_render import Warm

    h.define("a")
    h.metrics.schedule_changed("a")  # as the supervisor says of its own commits
    warm = Warm(lambda: h.metrics.snapshot)
    warm.start()
    try:
        first = h.tick_at(T0 - 20)
        assert gauge(first, "next_due_timestamp_seconds", "a") == T0
        parts = warm.parts(10)
        assert parts is not None and b'due_timestamp_seconds{schedule="a"}' in b"".join(parts)
        h.cli_admin().pause("a")
        h.tick_at(T0 - 19)
        latest = h.tick_at(T0 - 18)
        # Two publishes since the last rendering: the scrape waits for the thread.
        parts = warm.parts(10)
        assert parts is not None and latest.seq == first.seq + 2
        assert b'due_timestamp_seconds{schedule="a"}' not in b"".join(parts)
    finally:
        warm.stop()


def test_a_family_over_several_chunks_renders_as_a_fresh_one() -> None:
    from wfsched.daemon.metrics import _Family
    from wfsched.daemon.metrics_render import CHUNK, _gauge, _Keyed

    family = _Family()
    for index in range(3 * CHUNK + 5):
        family.set(f"s{index:04d}", float(index))
    keyed = _Keyed(_gauge("wfsched_x_seconds", "x"))
    keyed.render(family.publish())
    family.drop("s0001")
    family.drop(f"s{2 * CHUNK:04d}")
    family.set(f"s{CHUNK + 3:04d}", -1.0)
    family.set("new", 7.0)
    latest = family.publish()
    text = keyed.render(latest)
    assert same_samples(text, _Keyed(_gauge("wfsched_x_seconds", "x")).render(latest))
    assert b'{schedule="s0001"}' not in text and b'{schedule="new"} 7.0' in text


def fault_samples(snap: Snapshot) -> dict[tuple[str, str], float]:
    text = Renderer().render(snap).decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("wfsched_resource_fault"):
                found[(sample.name, sample.labels["kind"])] = sample.value
    return found


def test_a_fault_episode_is_a_gauge_by_kind_and_a_counter(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gauge is 1 for the open episode's kind only (every kind is always
    exported, so the label's values are bounded and known), from the
    moment it opens; the counter counts episodes, not failed probes."""
    h.define("ok")
    h.tick_at(T0 - 20)
    full = StoreUnavailable("disk-full", "the store's filesystem is full: free space under /s")

    def refuse(**_: str) -> None:
        raise full

    monkeypatch.setattr(h.store, "touch_meta", refuse)
    monkeypatch.setattr(h.store, "set_meta", refuse)
    snap = h.tick_at(T0 - 19)
    samples = fault_samples(snap)
    assert {kind for _, kind in samples} == set(FAULT_KINDS)
    assert samples[("wfsched_resource_fault", "disk-full")] == 1.0
    assert sum(v for (name, _), v in samples.items() if name == "wfsched_resource_fault") == 1.0
    assert samples[("wfsched_resource_fault_episodes_total", "disk-full")] == 1.0
    for second in range(-18, 0):
        snap = h.tick_at(T0 + second)  # failing probes: the same episode
    assert fault_samples(snap)[("wfsched_resource_fault_episodes_total", "disk-full")] == 1.0
    monkeypatch.undo()
    snap = h.tick_at(T0 + 30)
    samples = fault_samples(snap)
    assert samples[("wfsched_resource_fault", "disk-full")] == 0.0
    assert samples[("wfsched_resource_fault_episodes_total", "disk-full")] == 1.0
    assert snap.fault_kind is None


# -- the metrics threads hold off while the loop admits (wfsched.daemon.quiet) ----


def _in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    results: list[object] = []
    thread = threading.Thread(target=lambda: results.append(call()), daemon=True)
    thread.start()
    return thread, results


def test_quiet_holds_only_near_a_due_instant_and_until_the_loop_moves_on() -> None:
    monotonic = Monotonic()
    quiet = Quiet(monotonic, lead=0.05)
    quiet.hold()  # nothing expected: no wait
    quiet.expect(1.0)
    monotonic.now += 0.9
    assert not quiet.near()
    quiet.hold()  # 100 ms before the instant: no wait
    monotonic.now += 0.06
    assert quiet.near()
    thread, done = _in_thread(quiet.hold)
    wait_for(lambda: quiet.waiting == 1, what="hold() waiting")
    monotonic.now += 0.5  # the instant came and its tick runs: still held
    assert not done and quiet.near()
    quiet.expect(2.0)  # the loop sleeps toward the next instant
    thread.join(10)
    assert done and quiet.waiting == 0


def test_a_hold_ends_after_its_longest_wait_when_the_loop_never_moves_on() -> None:
    quiet = Quiet(lead=0.05, longest=0.01)
    quiet.expect(0.0)
    quiet.hold()  # returns (a stuck tick must not silence /healthz)
    assert quiet.near() and quiet.waiting == 0


def test_a_scrape_near_a_due_instant_is_answered_once_the_admission_tick_ends(
    h: Harness,
) -> None:
    server = MetricsServer(parse_listen("127.0.0.1:0"), "--metrics")
    server.start(lambda: h.metrics.snapshot, monotonic=h.monotonic, quiet=h.metrics.quiet)
    try:
        base = f"http://127.0.0.1:{server.address.port}"
        assert _get(base + "/healthz") == (200, "leader ok\n")  # not near: at once
        h.metrics.sleeping(0.0)  # an instant is due now; the loop admits it
        for path in ("/metrics", "/healthz"):
            thread, answers = _in_thread(lambda path=path: _get(base + path))  # type: ignore[misc]
            wait_for(lambda: h.metrics.quiet.waiting == 1, what="the request held")
            assert not answers
            h.metrics.sleeping(None)  # the tick ended; the loop sleeps
            thread.join(10)
            assert answers and answers[0][0] == 200  # type: ignore[index]
            h.metrics.sleeping(0.0)
    finally:
        h.metrics.sleeping(None)
        server.close()


def test_a_request_accepted_before_the_loop_came_near_is_held_before_parsing(
    h: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    from http.server import BaseHTTPRequestHandler

    parsed_near: list[bool] = []
    real = BaseHTTPRequestHandler.parse_request

    def parse(self: BaseHTTPRequestHandler) -> bool:
        parsed_near.append(h.metrics.quiet.near())
        return real(self)

    monkeypatch.setattr(BaseHTTPRequestHandler, "parse_request", parse)
    server = MetricsServer(parse_listen("127.0.0.1:0"), "--metrics")
    server.start(lambda: h.metrics.snapshot, monotonic=h.monotonic, quiet=h.metrics.quiet)
    try:
        with socket.create_connection(("127.0.0.1", server.address.port), timeout=10) as conn:
            wait_for(
                lambda: any("process_request" in t.name for t in threading.enumerate()),
                what="the connection accepted, its thread reading",
            )
            h.metrics.sleeping(0.0)
            conn.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            wait_for(lambda: h.metrics.quiet.waiting == 1, what="the parsing held")
            h.metrics.sleeping(None)
            reply = conn.makefile("rb").read()
        assert reply.startswith(b"HTTP/1.0 200") and reply.endswith(b"leader ok\n")
        assert parsed_near == [False]  # parsed only once the loop had moved on
    finally:
        h.metrics.sleeping(None)
        server.close()


def test_the_renderer_holds_off_while_the_loop_admits(h: Harness) -> None:
    from wfsched.daemon.metrics_render import Warm

    warm = Warm(lambda: h.metrics.snapshot, h.metrics.quiet)
    warm.start()
    try:
        assert warm.parts(10) is not None
        h.define("a")
        h.metrics.schedule_changed("a")
        h.metrics.sleeping(0.0)
        h.tick_at(T0 - 20)
        warm.published()
        wait_for(lambda: h.metrics.quiet.waiting == 1, what="the rendering held")
        h.metrics.sleeping(None)
        wait_for(
            lambda: b'due_timestamp_seconds{schedule="a"}' in b"".join(warm.parts(10) or ()),
            what="the held rendering done once the tick ended",
        )
    finally:
        h.metrics.sleeping(None)
        warm.stop()


class _Sleeps(Observer):
    """Records what serve() says before it sleeps; stops it after one tick."""

    def __init__(self) -> None:
        self.said: list[float | None] = []
        self.supervisor: Supervisor | None = None

    def ticked(self, seconds: float | None) -> None:
        if self.supervisor is not None:
            self.supervisor.stop_requested = True

    def sleeping(self, due_in: float | None) -> None:
        self.said.append(due_in)


@pytest.mark.parametrize(("define", "expected"), [(True, 0.5), (False, None)])
def test_the_loop_names_the_due_instant_it_sleeps_toward(
    tmp_path: Path, define: bool, expected: float | None
) -> None:
    import signal

    store = SQLiteStore(tmp_path / "store")
    clock = Clock(T0 - 0.5)
    if define:
        text = 'id = "a"\n[trigger]\ncron = "* * * * *"\n[run]\ncommand = ["true"]\n'
        Admin(store, clock).create(parse_definition(text, "x.toml", now=int(clock())))
    observer = _Sleeps()
    supervisor = Supervisor(
        store,
        SupervisorConfig(),
        FakeControl(clock=clock),
        clock=clock,
        log=lambda *_, **__: None,
        observer=observer,
    )
    observer.supervisor = supervisor
    try:
        supervisor.serve()
    finally:
        signal.set_wakeup_fd(-1)
    assert observer.said == [pytest.approx(expected) if expected is not None else None]
