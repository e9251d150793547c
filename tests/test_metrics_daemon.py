"""Layer 2: the real supervisor with `--metrics`, scraped over HTTP."""

from __future__ import annotations

import re
import socket
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.daemon import Daemon, define, utc_in, wait_for, wfsched, wfsched_json
from wfsched.daemon.metrics import reason_label


@pytest.fixture
def store(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """SQLite; a test parametrized with `BOTH_STORES` also runs on PostgreSQL
    (then the store is a URL, typed loosely: every helper passes it on)."""
    if getattr(request, "param", "sqlite") == "postgresql":
        return request.getfixturevalue("pg_url")  # type: ignore[no-any-return]
    return tmp_path / "store"


BOTH_STORES = pytest.mark.parametrize("store", ["sqlite", "postgresql"], indirect=True)


def one_shot(at: str, command: str) -> str:
    return f'[trigger]\nat = "{at}"\n[run]\ncommand = {command}\n'


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metrics_url(daemon: Daemon) -> str:
    match = wait_for(
        lambda: re.search(r" metrics listen=127\.0\.0\.1:(\d+)", daemon.text()),
        what="the metrics listener",
    )
    return f"http://127.0.0.1:{match.group(1)}"


def samples(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = get(base + "/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(base: str, name: str, **labels: str) -> float | None:
    return samples(base).get((name, tuple(sorted(labels.items()))))


@BOTH_STORES
def test_scraped_values_move_as_runs_complete_fail_and_are_skipped(
    store: Path, tmp_path: Path
) -> None:
    daemon = Daemon(store, "--metrics", "127.0.0.1:0")
    daemon.wait_started()
    try:
        base = metrics_url(daemon)
        # 503 "starting" until the loop's first tick publishes: wait past it.
        # On a PostgreSQL store the first ticks may stand by until the lease
        # is taken (`standby ok`).
        healthz = wait_for(
            lambda: (answer := get(base + "/healthz")) == (200, "leader ok\n") and answer
        )
        assert healthz == (200, "leader ok\n")
        assert value(base, "wfsched_leader", host=socket.gethostname()) == 1.0
        # The store's own kind (a PostgreSQL store was reported as sqlite).
        kind = "sqlite" if isinstance(store, Path) else "postgresql"
        assert value(base, "wfsched_store_info", kind=kind) == 1.0
        assert value(base, "wfsched_runs_total", schedule="ok", outcome="completed") is None

        at = utc_in(1.5)
        define(store, tmp_path, "ok", one_shot(at, '["true"]'))
        define(store, tmp_path, "bad", one_shot(at, '["sh", "-c", "exit 3"]'))
        define(store, tmp_path, "gone", one_shot(at, '["/nonexistent/tool"]'))
        paused_at = utc_in(6)  # far enough to pause it first, even on a loaded machine
        define(store, tmp_path, "paused", one_shot(paused_at, '["true"]'))
        assert wfsched(store, "pause", "paused").returncode == 0
        define(
            store, tmp_path, "yearly", '[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["true"]\n'
        )
        next_due = datetime.fromisoformat(
            wfsched_json(store, "get", "yearly")["next_due"].replace("Z", "+00:00")
        ).timestamp()
        wait_for(
            lambda: (
                value(base, "wfsched_schedule_next_due_timestamp_seconds", schedule="yearly")
                == next_due
            ),
            what="the next due gauge",
        )
        wait_for(
            lambda: value(base, "wfsched_runs_total", schedule="ok", outcome="completed") == 1,
            what="the completed run counted",
        )
        wait_for(
            lambda: value(base, "wfsched_runs_total", schedule="bad", outcome="failed") == 1,
            what="the failed run counted",
        )
        scraped = samples(base)
        key = (
            "wfsched_occurrences_total",
            (("reason", ""), ("schedule", "ok"), ("state", "admitted")),
        )
        assert scraped[key] == 1
        rejected = (
            "wfsched_occurrences_total",
            (("reason", "executable"), ("schedule", "gone"), ("state", "preflight-rejected")),
        )
        assert scraped[rejected] == 1
        success = scraped[
            ("wfsched_schedule_last_success_timestamp_seconds", (("schedule", "ok"),))
        ]
        [run] = wfsched_json(store, "runs", "--schedule", "ok")["items"]
        finished = datetime.fromisoformat(run["finished_at"].replace("Z", "+00:00"))
        assert success == pytest.approx(finished.timestamp(), abs=0.001)
        assert ("wfsched_schedule_last_failure_timestamp_seconds", (("schedule", "gone"),)) in (
            scraped
        )
        assert scraped[("wfsched_launch_latency_seconds_count", ())] == 2
        assert scraped[("wfsched_run_duration_seconds_count", (("schedule", "bad"),))] == 1
        # A one-shot exhausted: no next due any more.
        assert ("wfsched_schedule_next_due_timestamp_seconds", (("schedule", "ok"),)) not in (
            scraped
        )

        # Skipped: the paused one-shot's instant passes; resume records it skipped.
        instant = datetime.fromisoformat(paused_at.replace("Z", "+00:00")).timestamp()
        wait_for(lambda: time.time() > instant + 1, what="the paused instant to pass")
        assert wfsched(store, "resume", "paused").returncode == 0
        [row] = wfsched_json(store, "occurrences", "paused")["items"]
        assert row["state"].startswith("skipped-")
        wait_for(
            lambda: (
                value(
                    base,
                    "wfsched_occurrences_total",
                    schedule="paused",
                    state=row["state"],
                    reason=reason_label(row["reason"]),
                )
                == 1
            ),
            what="the skipped row counted",
        )
        assert value(base, "wfsched_runs_executing") == 0
    finally:
        assert daemon.stop() == 0


@BOTH_STORES
def test_counters_continue_across_a_restart(store: Path, tmp_path: Path) -> None:
    daemon = Daemon(store, "--metrics", "127.0.0.1:0")
    daemon.wait_started()
    try:
        define(store, tmp_path, "ok", one_shot(utc_in(1.5), '["true"]'))
        base = metrics_url(daemon)
        wait_for(
            lambda: value(base, "wfsched_runs_total", schedule="ok", outcome="completed") == 1,
            what="the completed run counted",
        )
    finally:
        assert daemon.stop() == 0
    again = Daemon(store, "--metrics", "127.0.0.1:0")
    again.wait_started()
    try:
        base = metrics_url(again)
        assert value(base, "wfsched_runs_total", schedule="ok", outcome="completed") == 1
        assert (
            value(base, "wfsched_occurrences_total", schedule="ok", state="admitted", reason="")
            == 1
        )
    finally:
        assert again.stop() == 0


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("abc", "expected HOST:PORT, :PORT or PORT"),
        ("127.0.0.1:70000", "port 70000 is out of range"),
        ("[::1]", "expected HOST:PORT"),
        ("no.such.host.invalid:9464", "cannot resolve"),
    ],
)
def test_a_bad_metrics_address_exits_2_with_one_line_and_starts_nothing(
    store: Path, given: str, expected: str
) -> None:
    result = wfsched(store, "supervise", "--metrics", given)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--metrics" in lines[0] and expected in lines[0], lines
    assert not store.exists()


def test_a_port_in_use_exits_2_before_the_lock_or_any_run(store: Path, tmp_path: Path) -> None:
    # Due at once for a supervisor that starts (misfire latest holds a missed one-shot).
    define(
        store,
        tmp_path,
        "due",
        one_shot(utc_in(-0.5), '["true"]') + '[policy]\nmisfire = "latest"\n',
    )
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = wfsched(store, "supervise", "--metrics", f"127.0.0.1:{port}")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"wfsched: error: --metrics 127.0.0.1:{port}: cannot listen: address already in use;"
        " pick another port or stop what holds it"
    ]
    assert wfsched_json(store, "runs")["items"] == []
    assert wfsched_json(store, "status")["supervisor"]["started_at"] is None


def test_a_bad_metrics_listen_in_config_exits_2_naming_the_file(store: Path) -> None:
    store.mkdir()
    (store / "config.toml").write_text('metrics_listen = "localhost"\n')
    result = wfsched(store, "supervise")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "config.toml: metrics_listen:" in lines[0], lines


def test_a_restart_after_sigkill_gets_the_same_port_while_a_run_goes_on(
    store: Path, tmp_path: Path
) -> None:
    """Runs never inherit the listening socket: after the supervisor dies, a
    job still running must not keep its port from the next supervisor."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"127.0.0.1:{port}"
    daemon = Daemon(store, "--metrics", address)
    daemon.wait_started()
    define(store, tmp_path, "long", one_shot(utc_in(1.5), '["sleep", "30"]'))
    wait_for(lambda: wfsched_json(store, "runs")["items"], what="the run")
    wait_for(lambda: run_is(store, "running"), what="the run to start")
    daemon.kill()
    again = Daemon(store, "--metrics", address)
    try:
        again.wait_started()
        wait_for(lambda: get(f"http://{address}/healthz")[0] == 200, what="healthy")
        assert value(f"http://{address}", "wfsched_runs_executing") == 1
    finally:
        wfsched(store, "runs", "cancel", "run-000001")
        assert again.stop() == 0


def run_is(store: Path, state: str) -> bool:
    return wfsched_json(store, "runs", "show", "run-000001")["state"] == state
