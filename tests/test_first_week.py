"""An operator's first week (the CLI, the shipped unit, the local directory):
the traps a new operator met, each pinned through the real CLI."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.daemon import Daemon, wait_for, write_definition

if TYPE_CHECKING:
    from wfsched.store import Store

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a subprocess, with `env` as given."""
    return subprocess.run(
        [sys.executable, "-m", "wfsched", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_help_and_package_say_more_than_one_host_and_name_postgresql_urls() -> None:
    shown = cli("--help")
    assert shown.returncode == 0, shown.stderr
    assert "for one host" not in shown.stdout
    assert "postgresql://" in shown.stdout.split("--store", 1)[1].split("--debug", 1)[0]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "one host" not in project["description"].replace("one host on SQLite", "")
    assert "PostgreSQL" in project["description"]


# ------------------------------------------- a PostgreSQL store's local directory


def _env_without_home(**extra: str) -> dict[str, str]:
    """A system user's environment: HOME where nothing can be made (as root
    too: nothing is made under /proc), no XDG_STATE_HOME, no STATE_DIRECTORY."""
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_STATE_HOME", "STATE_DIRECTORY")}
    return {**env, "HOME": "/proc/nonexistent", **extra}


def _modes(top: Path) -> dict[str, int]:
    return {
        str(path.relative_to(top.parent)): stat.S_IMODE(path.stat().st_mode)
        for path in [top, *top.rglob("*")]
        if path.is_dir()
    }


def test_a_user_without_a_home_is_told_what_could_not_be_made_and_how_to_choose(
    pg_url: str,
) -> None:
    result = cli("--store", pg_url, "supervise", env=_env_without_home())
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    line = result.stderr
    assert line.startswith("wfsched: error: cannot create this host's local directory"), line
    assert "/proc/nonexistent/.local/state/wfsched/postgresql/" in line
    assert "No such file or directory" in line and "--local-dir DIR" in line
    assert "STATE_DIRECTORY" not in _env_without_home()


def test_the_local_directory_defaults_to_the_units_state_directory(
    pg_url: str, tmp_path: Path
) -> None:
    state = tmp_path / "var-lib-wfsched"
    daemon = Daemon(pg_url, env=_env_without_home(STATE_DIRECTORY=str(state)))
    try:
        daemon.wait_started()
    finally:
        assert daemon.stop() == 0
    (local,) = (state / "postgresql").iterdir()
    assert (local / "keeper.lock").exists() and (local / "runs").is_dir()
    assert set(_modes(state / "postgresql").values()) == {0o700}, _modes(state)


def test_local_dir_chooses_the_place_and_makes_it_private(pg_url: str, tmp_path: Path) -> None:
    local = tmp_path / "made" / "here"
    folder = tmp_path / "defs"
    write_definition(
        folder, "tick", 'id = "tick"\n[trigger]\ncron = "0 0 * * *"\n[run]\ncommand = ["true"]\n'
    )
    env = _env_without_home()
    applied = cli("--store", pg_url, "--local-dir", str(local), "apply", str(folder), env=env)
    assert applied.returncode == 0, applied.stderr
    assert _modes(tmp_path / "made") == {"made": 0o700, "made/here": 0o700, "made/here/runs": 0o700}
    daemon = Daemon(pg_url, env={**env, "WFSCHED_LOCAL_DIR": str(local)})
    try:
        daemon.wait_started()
        assert (local / "keeper.lock").exists()
    finally:
        assert daemon.stop() == 0
    assert not Path("/proc/nonexistent").exists()


def test_local_dir_is_refused_for_a_sqlite_store_and_nothing_is_written(tmp_path: Path) -> None:
    store = tmp_path / "store"
    local = tmp_path / "local"
    folder = tmp_path / "defs"
    write_definition(
        folder, "tick", 'id = "tick"\n[trigger]\ncron = "0 0 * * *"\n[run]\ncommand = ["true"]\n'
    )
    result = cli("--store", str(store), "--local-dir", str(local), "apply", str(folder))
    assert result.returncode == 2, result.stderr
    assert "only a PostgreSQL store has a local directory" in result.stderr
    assert not store.exists() and not local.exists()


# ----------------------------------------------------------- status --check


def test_problems_name_each_check_that_fails() -> None:
    """Layer 1: the checks over a status object, no store."""
    from wfsched.api.status import problems, status_without_store

    info = status_without_store("/srv/store")
    assert [p["check"] for p in problems(info)] == ["no-supervisor"]
    info["supervisor"].update(running=True, stale=True, last_tick_at="2026-06-01T12:00:00Z")
    info["supervisor"]["fault"] = {
        "kind": "disk-full",
        "since": "2026-06-01T12:00:01Z",
        "error": "full",
    }
    info["blocked"] = [{"schedule_id": "a", "reason": "records contradict"}]
    assert [(p["check"], p["detail"]) for p in problems(info)] == [
        ("stale", "no tick stamped since 2026-06-01T12:00:00Z"),
        ("fault", "disk-full since 2026-06-01T12:00:01Z: full"),
        ("blocked", "schedule a: records contradict"),
    ]
    cluster = status_without_store("postgresql://db/x", "postgresql")
    cluster["supervisor"]["running"] = True
    assert [p["check"] for p in problems(cluster)] == ["no-leader"]
    cluster["leader"] = {
        "host": "db-1", "pid": 7, "silent_since": "2026-06-01T12:00:00Z", "lease_expires_in": 3.5
    }  # fmt: skip
    assert problems(cluster) == [
        {
            "check": "leader-silent",
            "detail": "lease held by a silent host db-1 (pid 7, no heartbeat since"
            " 2026-06-01T12:00:00Z), expires in 3.5 s",
        }
    ]


def test_status_check_exits_1_per_problem_and_0_when_all_is_well(
    store_kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    store: str = (
        str(tmp_path / "store") if store_kind == "sqlite" else request.getfixturevalue("pg_url")
    )
    missing = cli("--store", store, "status", "--check")
    assert missing.returncode == 1, missing.stderr
    assert missing.stdout.startswith("no-supervisor: no supervisor runs on store ")
    assert missing.stdout.count("\n") == 1
    folder = tmp_path / "defs"
    write_definition(
        folder, "tick", 'id = "tick"\n[trigger]\ncron = "0 0 * * *"\n[run]\ncommand = ["true"]\n'
    )
    assert cli("--store", store, "apply", str(folder)).returncode == 0
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        wait_for(lambda: cli("--store", store, "status", "--check").stdout == "ok\n", what="ok")
        assert cli("--store", store, "status", "--check").returncode == 0
        with _opened(store) as opened, opened.atomic():
            opened.update_schedule("tick", blocked_reason="records contradict each other")
        checked = cli("--store", store, "status", "--check")
        assert checked.returncode == 1
        assert checked.stdout == "blocked: schedule tick: records contradict each other\n"
        as_json = cli("--store", store, "status", "--check", "--json")
        assert as_json.returncode == 1
        assert [p["check"] for p in json.loads(as_json.stdout)["problems"]] == ["blocked"]
        # Without --check, status reports and exits 0 whatever it finds.
        assert cli("--store", store, "status").returncode == 0
    finally:
        assert daemon.stop() == 0
    stopped = cli("--store", store, "status", "--check")
    assert stopped.returncode == 1
    assert stopped.stdout.splitlines()[0].startswith("no-supervisor: ")


@contextlib.contextmanager
def _opened(store: str) -> Iterator[Store]:
    from wfsched.store import open_location, resolve_store

    opened = open_location(resolve_store(store), create=False)
    assert opened is not None
    try:
        yield opened
    finally:
        opened.close()


# ------------------------------------------ restarts: what the startup rule passed over


def test_a_start_says_what_it_passed_over_and_apply_logs_one_summary(tmp_path: Path) -> None:
    """The supervisor's clock an hour ahead of the definitions' creation (the
    test-only skew hook) is a restart after an hour's gap: the startup rule
    passes over each schedule's instants of that hour. The log's
    `passed-over` line and `status` count them; each summary row's line
    carries its count; `--apply` logs one summary line, and no line per
    unchanged schedule."""
    store = tmp_path / "store"
    folder = tmp_path / "defs"
    cron = '[trigger]\ncron = "* * * * *"\n[run]\ncommand = ["true"]\n'
    write_definition(folder, "every", f'id = "every"\n{cron}')
    write_definition(folder, "keep", f'id = "keep"\n{cron}[policy]\nmisfire = "latest"\n')
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 60))
    write_definition(
        folder, "once", f'id = "once"\n[trigger]\nat = "{at}"\n[run]\ncommand = ["true"]\n'
    )
    skew = {"WFSCHED_TEST_CLOCK_SKEW": "3600"}
    daemon = Daemon(store, "--apply", str(folder), env=skew)
    try:
        daemon.wait_started()
        wait_for(lambda: " passed-over " in daemon.text(), what="the passed-over line")
        shown = json.loads(cli("--store", str(store), "status", "--json").stdout)
        human = cli("--store", str(store), "status", env={**os.environ, "COLUMNS": "250"}).stdout
    finally:
        assert daemon.stop() == 0
    lines = daemon.text().splitlines()
    assert [line.split()[1] for line in lines[:5]] == ["applied"] * 3 + ["apply-summary", "ready"]
    assert "created=3 updated=0 unchanged=0" in lines[3]
    counts = {}
    for line in lines:
        if " skipped-misfire " in line and "reason=supervisor-down" in line:
            schedule = line.split(" schedule=")[1].split()[0]
            counts[schedule] = int(line.split(" count=")[1].split()[0]) if " count=" in line else 1
    assert (
        counts["once"] == 1
        and counts["every"] in (60, 61)
        and counts["keep"] == counts["every"] - 1
    )
    (passed,) = [line for line in lines if " passed-over " in line]
    assert f" instants={sum(counts.values())} instants_exact=True schedules=3 " in passed
    assert 'misfire = \\"latest\\" keeps the latest' in passed
    report = shown["passed_over_at_start"]
    assert (report["instants"], report["schedules"]) == (sum(counts.values()), 3)
    assert f"{sum(counts.values())} instants of 3 schedules at the start " in human
    assert '(misfire = "skip" drops them; "latest" keeps the latest)' in human
    # Started again on the same folder: one summary line, no line per schedule.
    again = Daemon(store, "--apply", str(folder), env=skew)
    try:
        again.wait_started()
    finally:
        assert again.stop() == 0
    events = [line.split()[1] for line in again.text().splitlines()]
    assert "applied" not in events and events[:2] == ["apply-summary", "ready"]
    assert "created=0 updated=0 unchanged=3" in again.text()
