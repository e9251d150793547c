"""A file whose id belongs to a deleted schedule, `undelete`, and `supervise
--apply` on a folder with a bad file (issue 26, item 1), through the real CLI
on both stores."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliRun, SettableClock, definition_text

from tests.daemon import Daemon, wait_for, wfsched, wfsched_json
from tests.test_cli_schedules import (  # noqa: F401 - cli_backend: every test on both stores
    as_json,
    cli_backend,
    opened,
    rows,
    shown,
)

HOUR = 3600


@pytest.fixture
def folder(make_definition: Callable[..., Path], run_cli: CliRun) -> Path:
    """defs/ with keep.toml and gone.toml applied, then `gone` deleted."""
    make_definition("keep")
    gone = make_definition("gone")
    assert run_cli("apply", str(gone.parent))[0] == 0
    assert run_cli("delete", "gone")[0] == 0
    return gone.parent


def test_apply_leaves_a_deleted_id_alone_and_applies_the_rest(
    run_cli: CliRun, folder: Path, make_definition: Callable[..., Path], store_path: Path
) -> None:
    make_definition("newcomer")
    code, out, err = run_cli("apply", str(folder))
    assert code == 0
    assert out.splitlines() == [
        "deleted (left alone) gone (revision 1)",
        "unchanged keep (revision 1)",
        "created newcomer (revision 1)",
        f"1 created, 0 updated, 1 unchanged, 0 deleted, 1 deleted (left alone) in store"
        f" {shown(store_path)}",
    ]
    assert err.count("\n") == 1
    assert err.startswith(f"wfsched: warning: {folder / 'gone.toml'}: id: 'gone' belongs to a")
    assert "`wfsched undelete gone` revives it" in err
    found = rows(store_path)
    assert found["gone"].deleted_at is not None and found["gone"].revision == 1
    assert set(found) == {"keep", "gone", "newcomer"}


def test_apply_strict_refuses_a_deleted_id_and_writes_nothing(
    run_cli: CliRun, folder: Path, make_definition: Callable[..., Path], store_path: Path
) -> None:
    make_definition("newcomer")
    code, out, err = run_cli("apply", "--strict", str(folder))
    assert (code, out) == (4, "")
    assert err.count("\n") == 1 and f"{folder / 'gone.toml'}: id: 'gone' belongs to" in err
    assert "nothing was written" in err
    assert set(rows(store_path)) == {"keep", "gone"}


def test_apply_dry_run_shows_a_deleted_id_left_alone(run_cli: CliRun, folder: Path) -> None:
    code, out, err = run_cli("apply", "--dry-run", str(folder))
    assert code == 0 and "deleted (left alone) gone (revision 1)" in out
    assert "warning:" in err


def test_create_of_a_deleted_id_says_to_undelete(
    run_cli: CliRun, folder: Path, store_path: Path
) -> None:
    code, out, err = run_cli("create", str(folder / "gone.toml"))
    assert (code, out) == (4, "")
    assert "`wfsched undelete gone` revives it" in err
    assert rows(store_path)["gone"].revision == 1


def test_undelete_revives_under_the_same_id_with_one_row_for_the_deleted_span(
    run_cli: CliRun, folder: Path, clock: SettableClock, store_path: Path
) -> None:
    before = as_json(run_cli("occurrences", "gone", "--json")[1])["items"]
    clock.advance(5 * HOUR)
    code, out, err = run_cli("undelete", "gone")
    assert (code, err) == (0, "")
    assert out.startswith("undeleted gone (revision 2); next due 2026-06-01T18:00:00Z")
    view = as_json(run_cli("get", "gone", "--json")[1])
    assert (view["state"], view["revision"]) == ("active", 2)
    items = as_json(run_cli("occurrences", "gone", "--json")[1])["items"]
    assert items[: len(before)] == before
    (span,) = items[len(before) :]
    assert (span["state"], span["reason"], span["count"]) == ("skipped-paused", "deleted", 5)
    assert (span["first"], span["last"]) == ("2026-06-01T13:00:00Z", "2026-06-01T17:00:00Z")
    assert run_cli("undelete", "gone") == (0, "gone is not deleted\n", "")
    # The folder's file is its definition again, unchanged, and the store is sound.
    code, out, _ = run_cli("apply", str(folder))
    assert code == 0 and "unchanged gone (revision 2)" in out
    code, out, _ = run_cli("audit")
    assert code == 0 and out.startswith("audit: ok"), out


def test_undelete_of_a_paused_schedule_keeps_it_paused(
    run_cli: CliRun, make_definition: Callable[..., Path], clock: SettableClock
) -> None:
    assert run_cli("create", str(make_definition("sleepy")))[0] == 0
    assert run_cli("pause", "sleepy")[0] == 0
    assert run_cli("delete", "sleepy")[0] == 0
    clock.advance(2 * HOUR)
    assert run_cli("undelete", "sleepy")[0] == 0
    view = as_json(run_cli("get", "sleepy", "--json")[1])
    assert (view["state"], view["next_due"]) == ("paused", None)
    assert run_cli("audit")[0] == 0


def test_undelete_of_unknown_or_missing_store(run_cli: CliRun, make_definition) -> None:
    code, _out, err = run_cli("undelete", "nope")
    assert code == 3 and err.startswith("wfsched: error: no store")
    assert run_cli("create", str(make_definition("here")))[0] == 0
    code, _out, err = run_cli("undelete", "nope")
    assert code == 3 and "nope" in err


def test_validate_accepts_folders_and_refuses_an_id_in_two_files(
    run_cli: CliRun, write_toml, store_path: Path
) -> None:
    one = write_toml("one.toml", definition_text("twin"))
    two = write_toml("two.toml", definition_text("twin"), folder="defs/sub")
    write_toml("notes.txt", "not a definition")
    solo = write_toml("solo.toml", definition_text("solo"))
    code, out, err = run_cli("validate", str(one.parent))
    assert code == 2 and out == f"ok {solo} (solo)\n"
    assert err.splitlines() == [
        f"wfsched: error: {one}: id: 'twin' is also defined in {two}",
        f"wfsched: error: {two}: id: 'twin' is also defined in {one}",
        "wfsched: error: 2 of 3 definition files are invalid",
    ]
    # apply refuses the same folder in the same words, and writes nothing.
    code, _out, apply_err = run_cli("apply", str(one.parent))
    assert code == 2 and apply_err.splitlines()[:2] == err.splitlines()[:2]
    two.unlink()
    assert run_cli("validate", str(one.parent))[0] == 0


# -- supervise --apply: the real daemon --------------------------------------


@pytest.fixture
def daemon_store(tmp_path: Path, store_kind: str, request: pytest.FixtureRequest) -> Path | str:
    if store_kind == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return tmp_path / "store"


def _definition(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def test_supervise_apply_starts_on_the_rest_past_a_deleted_id_and_an_invalid_file(
    daemon_store: Path | str, tmp_path: Path
) -> None:
    folder = tmp_path / "schedules"
    _definition(folder, "keep", definition_text("keep", cron="0 0 1 1 *"))
    _definition(folder, "gone", definition_text("gone", cron="0 0 1 1 *"))
    assert wfsched(daemon_store, "apply", str(folder)).returncode == 0
    assert wfsched(daemon_store, "delete", "gone").returncode == 0
    _definition(folder, "fresh", definition_text("fresh", cron="0 0 1 1 *"))
    bad = _definition(folder, "broken", 'id = "broken"\n[trigger]\ncron = "0 25 * * *"\n')
    # --strict: each problem stops the start, and nothing is applied.
    strict = Daemon(daemon_store, "--apply", str(folder), "--strict")
    assert strict.wait_exit() == 2 and f"{bad}: " in strict.text()
    bad.unlink()
    strict = Daemon(daemon_store, "--apply", str(folder), "--strict")
    assert strict.wait_exit() == 4 and "'gone' belongs to a schedule deleted" in strict.text()
    assert "fresh" not in {item["id"] for item in wfsched_json(daemon_store, "list")["items"]}
    # Without it the supervisor starts, says what it left out, and applies the rest.
    _definition(folder, "broken", 'id = "broken"\n[trigger]\ncron = "0 25 * * *"\n')
    daemon = Daemon(daemon_store, "--apply", str(folder))
    try:
        daemon.wait_started()
        log = daemon.text()
        assert f"apply-invalid file={bad} " in log
        assert "apply-left-alone schedule=gone " in log
        listed = {
            item["id"]: item["state"]
            for item in wfsched_json(daemon_store, "list", "--all")["items"]
        }
        assert listed == {"keep": "active", "gone": "deleted", "fresh": "active"}
        assert wfsched(daemon_store, "trigger", "fresh").returncode == 0
        wait_for(lambda: " completed " in daemon.text(), what="the run of the applied rest")
    finally:
        assert daemon.stop() == 0
