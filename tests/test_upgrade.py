"""Definitions an earlier release stored still load after an upgrade.

Validation tightened (durations at most 3650d, size caps, tz-database zone
names only, whole-string patterns). Those bounds apply to definitions coming
in; a stored one was accepted under the rules of its day. Each test writes
the rows an earlier release would have stored (SQL over the schedules and
revisions tables, as that release's `create` left them) and checks that the
schedule can still be read, paused, resumed, updated to a fixed definition,
deleted and audited, and that the supervisor runs it when that is safe.
"""

from __future__ import annotations

import json
import sqlite3
import zoneinfo
from pathlib import Path

import pytest
from conftest import CliRun, definition_text

from tests.test_supervisor_loop import T0, Harness, iso
from wfsched.domain.definition import parse_definition
from wfsched.domain.timeutil import MAX_DURATION

LONG = 4000 * 86400  # "4000d": accepted before durations were capped at 3650d
GONE_ZONE = "US/Pacific-New"  # left the tz database in 2020b
OLD_ROWS = {
    "long-timeout": {"run.timeout": LONG, "run.kill_grace": LONG, "policy.lateness": LONG},
    "host-zone": {"trigger.timezone": "localtime"},
    "big": {
        "description": "x" * 5000,
        "run.env": {f"V{n}": "v" for n in range(300)},
        "run.command": ["/bin/true", "y" * 70_000],
    },
    "newline": {"run.env": {"LANG\n": "C"}},
}


def make_old(store_dir: Path, schedule_id: str, changes: dict[str, object]) -> None:
    """Rewrite a schedule's stored definition (and its revision row) as an
    earlier release, with looser rules, would have stored it."""
    db = sqlite3.connect(store_dir / "wfsched.db")
    (text,) = db.execute("SELECT definition FROM schedules WHERE id = ?", (schedule_id,)).fetchone()
    document = json.loads(text)
    for path, value in changes.items():
        *tables, key = path.split(".")
        target = document
        for table in tables:
            target = target[table]
        target[key] = value
    old = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    db.execute("UPDATE schedules SET definition = ? WHERE id = ?", (old, schedule_id))
    db.execute("UPDATE revisions SET definition = ? WHERE schedule_id = ?", (old, schedule_id))
    db.commit()
    db.close()


@pytest.fixture
def old_store(run_cli: CliRun, store_path: Path, tmp_path: Path) -> Path:
    for schedule_id, changes in {**OLD_ROWS, "gone": {"trigger.timezone": GONE_ZONE}}.items():
        source = tmp_path / f"{schedule_id}.toml"
        source.write_text(definition_text(schedule_id))
        assert run_cli("create", str(source))[0] == 0
        make_old(store_path, schedule_id, changes)
    return store_path


def test_the_zone_names_these_tests_rely_on() -> None:
    assert "localtime" in zoneinfo.available_timezones()
    assert GONE_ZONE not in zoneinfo.available_timezones()


@pytest.mark.parametrize("schedule_id", sorted(OLD_ROWS))
def test_an_old_row_can_be_read_paused_resumed_updated_and_deleted(
    run_cli: CliRun, old_store: Path, tmp_path: Path, schedule_id: str
) -> None:
    for command in (
        ("get", schedule_id, "--json"),
        ("get", schedule_id, "--toml"),
        ("next", schedule_id),
        ("pause", schedule_id),
        ("resume", schedule_id),
    ):
        code, _, err = run_cli(*command)
        assert (code, err) == (0, ""), command
    fixed = tmp_path / "fixed.toml"
    fixed.write_text(definition_text(schedule_id, timezone="Europe/Berlin"))
    code, _, err = run_cli("update", str(fixed), "--expected-revision", "1")
    assert (code, err) == (0, "")
    code, out, _ = run_cli("get", schedule_id, "--json")
    assert json.loads(out)["revision"] == 2
    assert run_cli("delete", schedule_id)[0] == 0
    code, out, _ = run_cli("audit")
    assert code == 0, out


def test_the_old_definition_is_refused_when_it_comes_in_again(
    run_cli: CliRun, old_store: Path, tmp_path: Path
) -> None:
    code, toml, _ = run_cli("get", "long-timeout", "--toml")
    assert code == 0 and 'timeout = "4000d"' in toml
    again = tmp_path / "again.toml"
    again.write_text(toml)
    code, _, err = run_cli("update", str(again), "--expected-revision", "1")
    assert code == 2
    assert "run.timeout: '4000d' is too long" in err
    code, toml, _ = run_cli("get", "host-zone", "--toml")
    again.write_text(toml)
    code, _, err = run_cli("validate", str(again))
    assert code == 2 and "unknown time zone 'localtime'" in err


def test_a_zone_that_no_longer_resolves_is_pausable_updatable_and_deletable(
    run_cli: CliRun, old_store: Path, tmp_path: Path
) -> None:
    code, out, err = run_cli("audit")
    assert code == 0, out
    assert f"note: gone: revision 1: ledger not checked: time zone '{GONE_ZONE}'" in out
    for command in (("resume", "gone"), ("next", "gone")):
        assert run_cli("pause", "gone")[0] == 0
        code, _, err = run_cli(*command)
        assert code == 1, command
        assert err.count("\n") == 1
        assert f"gone: time zone '{GONE_ZONE}' does not resolve" in err
        assert "update the schedule" in err and "wfsched edit gone" in err
    fixed = tmp_path / "fixed.toml"
    fixed.write_text(definition_text("gone", timezone="America/Los_Angeles"))
    assert run_cli("update", str(fixed), "--expected-revision", "1")[0] == 0
    assert run_cli("resume", "gone")[0] == 0
    code, out, _ = run_cli("next", "gone", "--json")
    assert code == 0 and json.loads(out)["items"]
    assert run_cli("delete", "gone")[0] == 0
    code, out, _ = run_cli("audit", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and [n["schedule_id"] for n in report["notes"]] == ["gone"]


def old_harness(tmp_path: Path, *ids_and_changes: tuple[str, dict[str, object]]) -> Harness:
    h = Harness(tmp_path / "store")
    for schedule_id, changes in ids_and_changes:
        h.define(schedule_id, cron="0 * * * *")
        make_old(h.store.root, schedule_id, changes)
    h.supervisor = h.new_supervisor()  # the upgraded supervisor
    h.tick_at(T0 - 10)
    return h


def test_the_supervisor_runs_old_rows_and_clamps_an_out_of_range_timeout(tmp_path: Path) -> None:
    h = old_harness(tmp_path, *OLD_ROWS.items())
    h.tick_at(T0)
    launched = {spec.env["WFSCHED_SCHEDULE_ID"]: spec for spec, _ in h.control.spawned}
    assert sorted(launched) == sorted(OLD_ROWS)
    assert launched["long-timeout"].timeout == MAX_DURATION
    assert launched["long-timeout"].kill_grace == MAX_DURATION
    run = h.runs.show(launched["long-timeout"].run_id)
    assert run["invocation"]["timeout"] == MAX_DURATION


def test_a_zone_that_no_longer_resolves_blocks_its_schedule_until_updated_and_resumed(
    tmp_path: Path,
) -> None:
    h = old_harness(tmp_path, ("gone", {"trigger.timezone": GONE_ZONE}))
    h.define("other", cron="0 * * * *")
    h.tick_at(T0)
    reason = h.store.get_schedule("gone").blocked_reason  # type: ignore[union-attr]
    assert reason is not None and f"time zone '{GONE_ZONE}' does not resolve" in reason
    assert "update the schedule" in reason
    assert [spec.env["WFSCHED_SCHEDULE_ID"] for spec, _ in h.control.spawned] == ["other"]
    trigger = h.runs.request_trigger("gone")  # a manual run needs no calendar
    h.tick_at(T0 + 1)
    assert h.store.get_request(trigger).state == "done"  # type: ignore[union-attr]
    text = 'id = "gone"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["true"]\n'
    h.admin.update(parse_definition(text, "gone.toml", now=int(h.clock())), expected_revision=1)
    assert h.store.get_schedule("gone").blocked_reason == reason  # type: ignore[union-attr]
    h.admin.resume("gone")  # only resume clears a block; the calendar resolves now
    h.tick_at(T0 + 3600)
    assert h.history("gone") == [(iso(T0 + 3600), "running", None)]
