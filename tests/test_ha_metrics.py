"""Layer 2, two real supervisors on one PostgreSQL store: schedule-level
series are the store's, on the leader and on the standby alike, and stay
so across a takeover (docs/monitoring.md, "Store-wide series")."""

from __future__ import annotations

import signal
from datetime import datetime
from pathlib import Path

from tests.daemon import define, wait_for, wfsched, wfsched_json
from tests.ha import Host, leader_then_standby, wait_leader
from tests.test_metrics_daemon import metrics_url, samples, value
from wfsched.daemon.metrics import STORE_REFRESH

SLACK = 10.0
"""Seconds past the refresh interval a loaded machine may need (ticks, scrapes)."""

YEARLY = '[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = {command}\n'


def finished_at(url: str, run_id: str) -> float:
    run = wfsched_json(url, "runs", "show", run_id)
    return datetime.fromisoformat(run["finished_at"].replace("Z", "+00:00")).timestamp()


def near(found: float | None, expected: float) -> bool:
    """The gauge against `runs show`, which prints milliseconds."""
    return found is not None and abs(found - expected) <= 0.001


def finished(url: str, count: int) -> bool:
    items = wfsched_json(url, "runs")["items"]
    return len(items) == count and all(item["finished_at"] for item in items)


def test_the_standby_reports_the_leaders_runs_and_a_takeover_keeps_the_counts(
    pg_url: str, tmp_path: Path
) -> None:
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    define(pg_url, tmp_path, "ok", YEARLY.format(command='["true"]'))
    define(pg_url, tmp_path, "bad", YEARLY.format(command='["sh", "-c", "exit 3"]'))
    first, second = leader_then_standby(pg_url, a, b, "--metrics", "127.0.0.1:0")
    try:
        leader, standby = metrics_url(first), metrics_url(second)
        assert wfsched(pg_url, "trigger", "ok").returncode == 0
        assert wfsched(pg_url, "trigger", "bad").returncode == 0
        wait_for(lambda: finished(pg_url, 2), what="both runs recorded by the leader")
        success, failure = finished_at(pg_url, "run-000001"), finished_at(pg_url, "run-000002")
        for base in (standby, leader):
            wait_for(
                lambda base=base: (
                    near(
                        value(
                            base, "wfsched_schedule_last_success_timestamp_seconds", schedule="ok"
                        ),
                        success,
                    )
                    and near(
                        value(
                            base, "wfsched_schedule_last_failure_timestamp_seconds", schedule="bad"
                        ),
                        failure,
                    )
                    and value(base, "wfsched_runs_total", schedule="ok", outcome="completed") == 1
                    and value(base, "wfsched_runs_total", schedule="bad", outcome="failed") == 1
                ),
                timeout=STORE_REFRESH + SLACK,
                what=f"the store's runs on {base}",
                explain=lambda base=base: str(
                    {k: v for k, v in samples(base).items() if "schedule" in str(k)}
                ),
            )

        first.proc.send_signal(signal.SIGKILL)
        first.wait_exit()
        wait_leader(pg_url, [second])
        assert wfsched(pg_url, "trigger", "ok").returncode == 0
        wait_for(lambda: finished(pg_url, 3), what="the new leader's run")
        latest = finished_at(pg_url, "run-000003")
        # The new leader counts the run host a recorded too: the store's count.
        wait_for(
            lambda: (
                value(standby, "wfsched_runs_total", schedule="ok", outcome="completed") == 2
                and near(
                    value(
                        standby, "wfsched_schedule_last_success_timestamp_seconds", schedule="ok"
                    ),
                    latest,
                )
            ),
            timeout=STORE_REFRESH + SLACK,
            what="the store's counts on the new leader",
            explain=lambda: (
                f"{latest} "
                + str({k: v for k, v in samples(standby).items() if "schedule" in str(k)})
            ),
        )
        assert value(standby, "wfsched_runs_total", schedule="bad", outcome="failed") == 1
        assert value(standby, "wfsched_leader", host="b") == 1.0
    finally:
        assert second.stop() == 0
        first.kill()
