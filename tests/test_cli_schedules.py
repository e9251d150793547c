"""The schedule commands through the real CLI (docs/operations.md:
the command reference, JSON output, exit statuses)."""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import pytest
from conftest import CLI_NOW, CliRun, definition_text, wfsched_executable

from wfsched.cli.main import cli
from wfsched.domain.timeutil import format_instant
from wfsched.store import ScheduleRow, SQLiteStore, Store, open_location, resolve_store

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SCHEDULE_FIELDS = [
    "id",
    "revision",
    "description",
    "trigger",
    "run",
    "policy",
    "notify",
    "input",
    "state",
    "blocked_reason",
    "next_due",
    "active_runs",
    "created_at",
    "updated_at",
]
OCCURRENCE_FIELDS = [
    "occurrence_id",
    "schedule_id",
    "scheduled_at",
    "state",
    "reason",
    "revision",
    "run_id",
    "admitted_at",
    "started_at",
    "finished_at",
]


PG_URL: list[str] = []
"""The PostgreSQL store this module's CLI runs against, while `store_kind` is postgresql."""


@pytest.fixture(autouse=True)
def cli_backend(
    store_kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Every test here runs the CLI on a SQLite store and on a PostgreSQL store."""
    if store_kind == "postgresql":
        url = str(request.getfixturevalue("pg_url"))
        monkeypatch.setenv("WFSCHED_STORE", url)
        PG_URL.append(url)
    yield
    PG_URL.clear()


def open_store_at(store_path: Path, *, create: bool = True) -> Store | None:
    """The store the CLI uses: SQLite at `store_path`, or this test's PostgreSQL database."""
    if PG_URL:
        return open_location(resolve_store(PG_URL[0]), create=create)
    if not create and not (store_path / "wfsched.db").exists():
        return None
    return SQLiteStore(store_path)


@contextmanager
def opened(store_path: Path) -> Iterator[Store]:
    store = open_store_at(store_path)
    assert store is not None
    try:
        yield store
    finally:
        store.close()


def shown(store_path: Path) -> str:
    """How output names the store: its directory, or the PostgreSQL URL without password."""
    return resolve_store(PG_URL[0]).display if PG_URL else str(store_path.resolve())


def assert_no_store(store_path: Path) -> None:
    """Nothing was written: no store directory, and no PostgreSQL schema either."""
    assert not store_path.exists()
    store = open_store_at(store_path, create=False)
    if store is not None:
        store.close()
        raise AssertionError("a store was created")


def take_ownership(store_path: Path) -> Callable[[], None]:
    """Own the store as a supervisor would (this process); returns the release."""
    if PG_URL:
        store = open_store_at(store_path)
        assert store is not None
        store.take_ownership()  # type: ignore[attr-defined]
        return store.close
    from wfsched.store.ownership import Ownership

    owner = Ownership(store_path / "supervisor.lock")
    owner.acquire()
    return owner.release


def rows(store_path: Path) -> dict[str, ScheduleRow]:
    """Every schedule row (deleted too); {} when no store exists."""
    store = open_store_at(store_path, create=False)
    if store is None:
        return {}
    try:
        return {row.id: row for row in store.list_schedules(include_deleted=True)}
    finally:
        store.close()


def occurrence_count(store_path: Path, schedule_id: str) -> int:
    with opened(store_path) as store:
        return len(store.page_occurrences(schedule_id, None, 10_000))


def as_json(output: str) -> dict:
    return json.loads(output)


def in_order(keys: list[str], documented: list[str]) -> bool:
    """The documented fields are all present, in their documented order."""
    positions = [keys.index(name) for name in documented if name in keys]
    return len(positions) == len(documented) and positions == sorted(positions)


@pytest.fixture
def created(run_cli: CliRun, make_definition: Callable[..., Path]) -> Callable[..., Path]:
    """Create a schedule through the CLI; returns its file."""

    def create(schedule_id: str, **fields: str) -> Path:
        path = make_definition(schedule_id, **fields)
        code, _, err = run_cli("create", str(path))
        assert code == 0, err
        return path

    return create


# ------------------------------------------------------------------ validate


def test_validate_prints_ok_per_file_and_creates_no_store(
    run_cli: CliRun, make_definition: Callable[..., Path], store_path: Path
) -> None:
    first, second = make_definition("alpha"), make_definition("beta")
    code, out, err = run_cli("validate", str(first), str(second))
    assert (code, err) == (0, "")
    assert out.splitlines() == [f"ok {first} (alpha)", f"ok {second} (beta)"]
    assert_no_store(store_path)


def test_validate_reads_stdin(run_cli: CliRun, store_path: Path) -> None:
    code, out, _ = run_cli("validate", "-", input=definition_text("piped"))
    assert (code, out) == (0, "ok - (piped)\n")
    assert_no_store(store_path)


def test_validate_checks_every_file_past_an_invalid_one(
    run_cli: CliRun, make_definition: Callable[..., Path], write_toml, store_path: Path
) -> None:
    good = make_definition("good")
    bad = write_toml("bad.toml", definition_text("bad", cron="0 25 * * *"))
    later = make_definition("later")
    code, out, err = run_cli("validate", str(good), str(bad), str(later))
    assert code == 2
    assert out == f"ok {good} (good)\nok {later} (later)\n"
    assert err.count("\n") == 1 and f"{bad}: trigger.cron:" in err
    assert_no_store(store_path)


# -------------------------------------------------------------- create / get


def test_create_then_get_json_has_the_documented_shape(
    run_cli: CliRun, make_definition: Callable[..., Path]
) -> None:
    path = make_definition("report", timezone="Europe/Berlin")
    code, out, err = run_cli("create", str(path))
    assert code == 0, err
    assert out.startswith("created report (revision 1); next due 2026-06-01T13:00:00Z")
    assert "2026-06-01 15:00 +02:00 (CEST)" in out

    code, out, _ = run_cli("get", "report", "--json")
    view = as_json(out)
    assert code == 0
    assert in_order(list(view), SCHEDULE_FIELDS)
    assert view["id"] == "report" and view["revision"] == 1
    assert view["trigger"] == {"cron": "0 * * * *", "timezone": "Europe/Berlin"}
    assert list(view["run"]) == [
        "command",
        "cwd",
        "env",
        "timeout",
        "kill_grace",
        "interrupt_exit_code",
    ]
    assert view["run"]["command"] == ["/bin/true"] and view["run"]["kill_grace"] == 10
    assert list(view["policy"]) == ["overlap", "max_active_runs", "misfire", "lateness"]
    assert view["policy"]["lateness"] == 60
    assert view["notify"] == {"on_failure": None}
    assert view["input"] == []
    assert view["state"] == "active" and view["blocked_reason"] is None
    assert view["next_due"] == "2026-06-01T13:00:00Z"
    assert view["active_runs"] == 0
    assert view["created_at"].startswith("2026-06-01T12:00:00") and view["created_at"][-1] == "Z"


def test_create_reads_stdin(run_cli: CliRun, store_path: Path) -> None:
    code, out, err = run_cli("create", "-", input=definition_text("from-stdin"))
    assert code == 0, err
    assert out.startswith("created from-stdin (revision 1)")
    assert set(rows(store_path)) == {"from-stdin"}


def test_get_human_shows_utc_and_local_times(run_cli: CliRun, created) -> None:
    created("berlin", timezone="Europe/Berlin")
    code, out, _ = run_cli("get", "berlin")
    assert code == 0
    assert "2026-06-01T13:00:00Z" in out
    assert "2026-06-01 15:00 +02:00 (CEST)" in out
    assert "Europe/Berlin" in out and '["/bin/true"]' in out


def test_get_rejects_json_with_toml(run_cli: CliRun, created) -> None:
    created("both")
    code, out, err = run_cli("get", "both", "--json", "--toml")
    assert code == 2 and out == ""
    assert err.startswith("wfsched: error: --json and --toml cannot be combined")


def test_create_of_an_existing_id_is_a_conflict_and_changes_nothing(
    run_cli: CliRun, created, write_toml, store_path: Path
) -> None:
    created("taken")
    before = rows(store_path)["taken"]
    other = write_toml("again.toml", definition_text("taken", cron="5 * * * *"))
    code, out, err = run_cli("create", str(other))
    assert code == 4 and out == ""
    assert err.count("\n") == 1 and "'taken' already exists (revision 1)" in err
    assert rows(store_path)["taken"] == before


def test_create_of_a_deleted_id_is_a_conflict(run_cli: CliRun, created, store_path: Path) -> None:
    path = created("gone")
    assert run_cli("delete", "gone")[0] == 0
    code, _, err = run_cli("create", str(path))
    assert code == 4
    assert "belongs to a schedule deleted at" in err and "`wfsched undelete gone`" in err
    assert rows(store_path)["gone"].deleted_at is not None


def test_get_toml_round_trips_into_update(
    run_cli: CliRun, tmp_path: Path, store_path: Path
) -> None:
    assert run_cli("create", str(EXAMPLES / "hourly-report.toml"))[0] == 0
    code, text, _ = run_cli("get", "hourly-report", "--toml")
    assert code == 0
    assert text.startswith("# hourly-report at revision 1.")
    exported = tmp_path / "exported.toml"
    exported.write_text(text)

    # Unchanged: the exported file means exactly what is stored.
    code, out, err = run_cli("update", str(exported), "--expected-revision", "1")
    assert code == 0, err
    assert out.startswith("unchanged hourly-report (revision 1)")

    exported.write_text(text.replace('cron = "0 * * * *"', 'cron = "15 * * * *"'))
    code, out, err = run_cli("update", str(exported), "--expected-revision", "1")
    assert code == 0, err
    assert out.startswith("updated hourly-report (revision 2)")
    view = as_json(run_cli("get", "hourly-report", "--json")[1])
    assert view["revision"] == 2 and view["trigger"]["cron"] == "15 * * * *"
    assert len(view["input"]) == 5 and view["run"]["env"]["REPORT_BUCKET"] == "sales"


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.toml")))
def test_every_example_exports_to_an_identical_definition(
    run_cli: CliRun, tmp_path: Path, example: str
) -> None:
    assert run_cli("create", str(EXAMPLES / example))[0] == 0
    schedule_id = Path(example).stem
    text = run_cli("get", schedule_id, "--toml")[1]
    exported = tmp_path / example
    exported.write_text(text)
    code, out, _ = run_cli("update", str(exported), "--expected-revision", "1")
    assert (code, out.split()[0]) == (0, "unchanged")


# -------------------------------------------------------------------- update


def test_stale_update_is_refused_and_the_store_is_unchanged(
    run_cli: CliRun, created, write_toml, store_path: Path
) -> None:
    created("shared")
    first = write_toml("first.toml", definition_text("shared", cron="1 * * * *"))
    second = write_toml("second.toml", definition_text("shared", cron="2 * * * *"))
    assert run_cli("update", str(first), "--expected-revision", "1")[0] == 0
    before = rows(store_path)["shared"]
    code, out, err = run_cli("update", str(second), "--expected-revision", "1")
    assert code == 4 and out == ""
    assert err.count("\n") == 1
    assert "stale revision 1; the store has revision 2" in err
    assert rows(store_path)["shared"] == before
    assert json.loads(before.definition)["trigger"]["cron"] == "1 * * * *"


def test_update_requires_the_expected_revision(run_cli: CliRun, created) -> None:
    path = created("needs-rev")
    code, _, err = run_cli("update", str(path))
    assert code == 2
    assert "--expected-revision" in err and err.count("\n") == 1


# ---------------------------------------------------------------------- list


def test_list_json_shape_and_deleted_only_with_all(run_cli: CliRun, created) -> None:
    created("a-one")
    created("b-two", timezone="Asia/Tokyo")
    assert run_cli("delete", "b-two")[0] == 0

    code, out, _ = run_cli("list", "--json")
    listing = as_json(out)
    assert code == 0
    assert list(listing) == ["items", "next_cursor"] and listing["next_cursor"] is None
    assert [item["id"] for item in listing["items"]] == ["a-one"]
    item = listing["items"][0]
    assert in_order(list(item), SCHEDULE_FIELDS)
    assert item["last_outcome"] is None and item["active_runs"] == 0

    listing = as_json(run_cli("list", "--all", "--json")[1])
    assert [(i["id"], i["state"]) for i in listing["items"]] == [
        ("a-one", "active"),
        ("b-two", "deleted"),
    ]
    assert listing["items"][1]["next_due"] is None


def test_list_table_shows_next_due_in_utc_and_local(run_cli: CliRun, created) -> None:
    created("tokyo", timezone="Asia/Tokyo", cron="30 9 * * *")
    code, out, _ = run_cli("list")
    assert code == 0
    header = out.splitlines()[0].split()
    assert header[:3] == ["ID", "STATE", "TRIGGER"]
    assert "NEXT" in header and "OUTCOME" in header and "ACTIVE" in header
    line = next(line for line in out.splitlines() if line.startswith("tokyo"))
    assert "active" in line and "30 9 * * *" in line and "Asia/Tokyo" in line
    assert "2026-06-02T00:30:00Z" in line and "2026-06-02 09:30 +09:00 (JST)" in line


def test_list_on_a_fresh_machine_is_empty_and_creates_nothing(
    run_cli: CliRun, store_path: Path
) -> None:
    code, out, err = run_cli("list")
    assert (code, out) == (0, "no schedules\n")
    assert err.startswith("wfsched: note: no store at") and err.count("\n") == 1
    assert as_json(run_cli("list", "--json")[1]) == {"items": [], "next_cursor": None}
    assert_no_store(store_path)


def test_global_store_option_overrides_the_environment(
    run_cli: CliRun, make_definition: Callable[..., Path], tmp_path: Path, store_path: Path
) -> None:
    other = tmp_path / "other-store"
    path = make_definition("elsewhere")
    assert run_cli("--store", str(other), "create", str(path))[0] == 0
    sqlite = SQLiteStore(other)
    try:
        assert [row.id for row in sqlite.list_schedules()] == ["elsewhere"]
    finally:
        sqlite.close()
    assert_no_store(store_path)


# --------------------------------------------------------------------- apply


def test_apply_creates_updates_keeps_and_prunes(
    run_cli: CliRun, make_definition: Callable[..., Path], store_path: Path
) -> None:
    make_definition("keep")
    change = make_definition("change")
    drop = make_definition("drop")
    folder = str(change.parent)
    code, out, err = run_cli("apply", folder)
    assert code == 0, err
    assert out.splitlines() == [
        "created change (revision 1)",
        "created drop (revision 1)",
        "created keep (revision 1)",
        f"3 created, 0 updated, 0 unchanged, 0 deleted in store {shown(store_path)}",
    ]

    make_definition("change", cron="30 * * * *")
    drop.unlink()
    make_definition("fresh")
    code, out, _ = run_cli("apply", folder)
    assert out.splitlines() == [
        "updated change (revision 2)",
        "created fresh (revision 1)",
        "unchanged keep (revision 1)",
        f"1 created, 1 updated, 1 unchanged, 0 deleted in store {shown(store_path)}",
    ]
    assert rows(store_path)["drop"].deleted_at is None  # absent, but no --prune

    code, out, _ = run_cli("apply", folder, "--prune")
    assert code == 0
    assert out.splitlines() == [
        "unchanged change (revision 2)",
        "unchanged fresh (revision 1)",
        "unchanged keep (revision 1)",
        "deleted drop (revision 1)",
        f"0 created, 0 updated, 3 unchanged, 1 deleted in store {shown(store_path)}",
    ]
    assert rows(store_path)["drop"].deleted_at is not None


def test_apply_dry_run_writes_nothing(
    run_cli: CliRun, make_definition: Callable[..., Path], store_path: Path
) -> None:
    folder = str(make_definition("one").parent)
    make_definition("two")
    code, out, _ = run_cli("apply", folder, "--dry-run")
    assert code == 0
    assert out.splitlines() == [
        "created one (revision 1)",
        "created two (revision 1)",
        f"2 created, 0 updated, 0 unchanged, 0 deleted (dry run: nothing written to"
        f" {shown(store_path)})",
    ]
    assert_no_store(store_path)

    assert run_cli("apply", folder)[0] == 0
    before = rows(store_path)
    make_definition("one", cron="45 * * * *")
    (store_path.parent / "defs" / "two.toml").unlink()
    make_definition("three")
    code, out, _ = run_cli("apply", folder, "--prune", "--dry-run")
    assert code == 0
    assert out.splitlines() == [
        "updated one (revision 2)",
        "created three (revision 1)",
        "deleted two (revision 1)",
        f"1 created, 1 updated, 0 unchanged, 1 deleted (dry run: nothing written to"
        f" {shown(store_path)})",
    ]
    assert rows(store_path) == before


def test_apply_of_a_folder_with_one_invalid_file_writes_nothing(
    run_cli: CliRun, make_definition: Callable[..., Path], write_toml, store_path: Path
) -> None:
    make_definition("fine")
    bad = write_toml("broken.toml", definition_text("broken", timezone="Nowhere/Land"))
    code, out, err = run_cli("apply", str(bad.parent))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"{bad}: trigger.timezone:" in err
    assert_no_store(store_path)  # not even an empty store is left behind


def test_apply_to_an_existing_store_with_invalid_files_writes_nothing(
    run_cli: CliRun, make_definition: Callable[..., Path], write_toml, store_path: Path
) -> None:
    make_definition("fine")
    assert run_cli("apply", str(store_path.parent / "defs"))[0] == 0
    before = rows(store_path)
    make_definition("fine", cron="5 * * * *")
    write_toml("bad1.toml", definition_text("bad1", cron="0 25 * * *"))
    write_toml("bad2.toml", definition_text("bad2", timezone="Nowhere/Land"))
    code, out, err = run_cli("apply", str(store_path.parent / "defs"), "--prune")
    assert (code, out) == (2, "")
    assert err.count("\n") == 3 and err.endswith(
        "2 of 3 definition files are invalid; nothing was written\n"
    )
    assert rows(store_path) == before


def test_apply_strict_of_a_deleted_id_is_a_conflict_and_writes_nothing(
    run_cli: CliRun, make_definition: Callable[..., Path], store_path: Path
) -> None:
    gone = make_definition("gone")
    assert run_cli("apply", str(gone.parent))[0] == 0
    assert run_cli("delete", "gone")[0] == 0
    make_definition("newcomer")
    code, out, err = run_cli("apply", "--strict", str(gone.parent))
    assert code == 4 and out == ""
    assert f"{gone}: id:" in err and "--strict refuses it" in err
    assert set(rows(store_path)) == {"gone"}


def test_apply_counts_only_toml_files(
    run_cli: CliRun, make_definition: Callable[..., Path], write_toml, store_path: Path
) -> None:
    folder = make_definition("counted").parent
    write_toml("README.md", "# not a definition\n")
    write_toml("old.toml.bak", definition_text("backup"))
    write_toml("notes.txt", "id = 'nope'\n")
    write_toml("nested.toml", definition_text("nested"), folder="defs/sub")
    code, out, _ = run_cli("apply", str(folder))
    assert code == 0
    assert set(rows(store_path)) == {"counted", "nested"}
    assert "backup" not in out


def test_apply_reads_a_file_reached_twice_through_links_once(
    run_cli: CliRun, make_definition: Callable[..., Path], write_toml, store_path: Path
) -> None:
    """A definition is one file by its real path, whatever links lead to it:
    a linked copy inside the folder, a linked folder, the file named again."""
    original = make_definition("once")
    folder = original.parent
    (folder / "alias.toml").symlink_to(original)
    (folder / "linked").symlink_to(folder)
    (folder / "dangling.toml").symlink_to(folder / "missing.toml")
    (folder / "dir.toml").mkdir()
    code, out, err = run_cli("apply", str(folder), str(original))
    assert (code, err) == (0, "")
    assert set(rows(store_path)) == {"once"}
    assert "1 created" in out


def test_apply_pauses_the_cycle_collector_and_restores_it(
    run_cli: CliRun,
    make_definition: Callable[..., Path],
    write_toml,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The collector is off while apply parses (it frees nothing there and
    walked the growing heap), and on again afterwards, after an error too."""
    import wfsched.api.admin as admin_module

    collecting: list[bool] = []
    real = admin_module.parse_definition_bytes

    def spy(data: bytes, source: str, *, now: int | None = None) -> object:
        collecting.append(gc.isenabled())
        return real(data, source, now=now)

    monkeypatch.setattr(admin_module, "parse_definition_bytes", spy)
    folder = make_definition("fine").parent
    assert gc.isenabled()
    assert run_cli("apply", str(folder))[0] == 0
    assert collecting == [False] and gc.isenabled()
    write_toml("bad.toml", definition_text("bad", timezone="Nowhere/Land"))
    assert run_cli("apply", str(folder))[0] == 2
    assert collecting == [False, False] and gc.isenabled()


def test_apply_of_an_empty_folder_says_so(run_cli: CliRun, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert run_cli("apply", str(tmp_path / "empty")) == (0, "no definitions found\n", "")


def test_apply_of_a_missing_path_is_a_usage_error(
    run_cli: CliRun, tmp_path: Path, store_path: Path
) -> None:
    code, _, err = run_cli("apply", str(tmp_path / "missing"))
    assert code == 2 and "no such file or directory" in err
    assert_no_store(store_path)


def test_apply_prune_of_an_empty_folder_is_refused_and_writes_nothing(
    run_cli: CliRun, tmp_path: Path, store_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli("apply", str(tmp_path / "empty"), "--prune")
    assert code == 2 and "refusing to --prune every schedule" in err
    assert_no_store(store_path)


# ---------------------------------------------------------------------- edit


CHANGE_CRON = """
text = text.replace('cron = "0 * * * *"', 'cron = "20 * * * *"')
save = True
"""


def test_edit_updates_with_the_edited_definition(
    run_cli: CliRun, created, fake_editor, store_path: Path
) -> None:
    created("tuned")
    fake_editor(CHANGE_CRON)
    code, out, err = run_cli("edit", "tuned")
    assert (code, err) == (0, "")
    assert out == "updated tuned (revision 2)\n"
    assert json.loads(rows(store_path)["tuned"].definition)["trigger"]["cron"] == "20 * * * *"


@pytest.mark.parametrize(
    "body",
    [
        "save = True",  # saved unchanged
        "",  # quit without saving
        "text = text + '\\n# just a comment\\n'\nsave = True",  # same meaning
    ],
    ids=["saved-unchanged", "not-saved", "comment-only"],
)
def test_noop_edit_changes_nothing(
    run_cli: CliRun, created, fake_editor, store_path: Path, body: str
) -> None:
    created("steady")
    before = rows(store_path)["steady"]
    fake_editor(body)
    code, out, err = run_cli("edit", "steady")
    assert (code, err) == (0, "")
    assert out == "nothing changed: steady stays at revision 1\n"
    assert rows(store_path)["steady"] == before


def test_invalid_edit_writes_nothing_and_keeps_the_text(
    run_cli: CliRun, created, fake_editor, store_path: Path
) -> None:
    created("fragile")
    before = rows(store_path)["fragile"]
    fake_editor("""
text = text.replace('[run]', '[run]\\ntimout = "1h"')
save = True
""")
    code, out, err = run_cli("edit", "fragile")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "fragile.toml (edited): run.timout: unknown key" in err
    kept = err.split("your edit is kept in ")[1].strip()
    assert 'timout = "1h"' in Path(kept).read_text()
    Path(kept).unlink()
    assert rows(store_path)["fragile"] == before


def test_edit_cannot_rename(run_cli: CliRun, created, fake_editor, store_path: Path) -> None:
    created("named")
    fake_editor("""
text = text.replace('id = "named"', 'id = "renamed"')
save = True
""")
    code, _, err = run_cli("edit", "named")
    assert code == 2
    assert "id: changed from 'named' to 'renamed'" in err
    Path(err.split("your edit is kept in ")[1].strip()).unlink()
    assert set(rows(store_path)) == {"named"}


def test_edit_refuses_a_change_made_while_editing(
    run_cli: CliRun, created, fake_editor, write_toml, store_path: Path
) -> None:
    created("contested")
    meanwhile = write_toml("meanwhile.toml", definition_text("contested", cron="40 * * * *"))
    # While "the editor is open", another operator updates the schedule with
    # the real console script (a separate process on the same store).
    fake_editor(f"""
subprocess.run(
    [{wfsched_executable()!r}, "update", {str(meanwhile)!r}, "--expected-revision", "1"],
    check=True, capture_output=True,
)
text = text.replace('cron = "0 * * * *"', 'cron = "20 * * * *"')
save = True
""")
    code, out, err = run_cli("edit", "contested")
    assert code == 4 and out == ""
    assert err.count("\n") == 1 and "stale revision 1; the store has revision 2" in err
    Path(err.split("your edit is kept in ")[1].strip()).unlink()
    row = rows(store_path)["contested"]
    assert row.revision == 2
    assert json.loads(row.definition)["trigger"]["cron"] == "40 * * * *"


def test_edit_of_a_deleted_schedule_never_opens_the_editor(
    run_cli: CliRun, created, fake_editor, tmp_path: Path
) -> None:
    created("closed")
    assert run_cli("delete", "closed")[0] == 0
    marker = tmp_path / "editor-ran"
    fake_editor(f"pathlib.Path({str(marker)!r}).touch()")
    code, _, err = run_cli("edit", "closed")
    assert code == 4 and "cannot edit a deleted schedule" in err
    assert not marker.exists()


# ------------------------------------------------------ pause, resume, delete


def test_pause_resume_delete_are_idempotent_and_keep_the_revision(
    run_cli: CliRun, created, store_path: Path
) -> None:
    created("cycle")
    assert run_cli("pause", "cycle") == (0, "paused cycle\n", "")
    assert run_cli("pause", "cycle") == (0, "cycle is already paused\n", "")
    view = as_json(run_cli("get", "cycle", "--json")[1])
    assert (view["state"], view["next_due"]) == ("paused", None)

    code, out, _ = run_cli("resume", "cycle")
    assert code == 0 and out.startswith("resumed cycle; next due 2026-06-01T13:00:00Z")
    assert run_cli("resume", "cycle") == (0, "cycle is not paused\n", "")

    code, out, _ = run_cli("delete", "cycle")
    assert code == 0 and out.startswith("deleted cycle; its history stays readable")
    assert run_cli("delete", "cycle") == (0, "cycle is already deleted\n", "")
    assert rows(store_path)["cycle"].revision == 1


def test_deleted_schedule_refuses_changes_but_stays_readable(
    run_cli: CliRun, created, store_path: Path
) -> None:
    path = created("history")
    assert run_cli("delete", "history")[0] == 0
    before = rows(store_path)["history"]
    for args in (
        ("pause", "history"),
        ("resume", "history"),
        ("update", str(path), "--expected-revision", "1"),
    ):
        code, out, err = run_cli(*args)
        assert code == 4, args
        assert out == "" and err.count("\n") == 1
        assert "deleted schedule" in err
    assert rows(store_path)["history"] == before
    code, out, _ = run_cli("get", "history", "--json")
    assert code == 0 and as_json(out)["state"] == "deleted"
    assert run_cli("occurrences", "history", "--json")[0] == 0


@pytest.mark.parametrize(
    "args",
    [
        ("get", "ghost"),
        ("get", "ghost", "--toml"),
        ("pause", "ghost"),
        ("resume", "ghost"),
        ("delete", "ghost"),
        ("edit", "ghost"),
        ("next", "ghost"),
        ("occurrences", "ghost"),
    ],
)
def test_unknown_schedule_is_not_found(
    run_cli: CliRun, created, args: tuple[str, ...], store_path: Path
) -> None:
    created("present")
    code, out, err = run_cli(*args)
    assert code == 3 and out == ""
    assert err == "wfsched: error: no schedule 'ghost'; `wfsched list --all` shows them\n"


def test_update_of_an_unknown_id_is_not_found(
    run_cli: CliRun, created, make_definition: Callable[..., Path]
) -> None:
    created("present")
    code, _, err = run_cli("update", str(make_definition("stranger")), "--expected-revision", "1")
    assert code == 3 and "no schedule 'stranger'" in err


def test_commands_on_a_missing_store_are_not_found(run_cli: CliRun, store_path: Path) -> None:
    code, _, err = run_cli("get", "anything")
    assert code == 3 and "no store at" in err
    assert_no_store(store_path)


# ---------------------------------------------------------------------- next


def test_next_starts_after_now_and_honours_count(run_cli: CliRun, created) -> None:
    created("ticker", cron="*/15 * * * *")
    code, out, _ = run_cli("next", "ticker", "--count", "3", "--json")
    assert code == 0
    assert as_json(out) == {
        "items": [
            {"scheduled_at": t, "local": local, "note": None, "held": None}
            for t, local in (
                ("2026-06-01T12:15:00Z", "2026-06-01 12:15 +00:00 (UTC)"),
                ("2026-06-01T12:30:00Z", "2026-06-01 12:30 +00:00 (UTC)"),
                ("2026-06-01T12:45:00Z", "2026-06-01 12:45 +00:00 (UTC)"),
            )
        ]
    }
    code, out, _ = run_cli("next", "ticker", "--after", "2027-01-01T00:00:00+01:00", "--json")
    items = as_json(out)["items"]
    assert len(items) == 5 and items[0]["scheduled_at"] == "2026-12-31T23:15:00Z"


def test_next_marks_the_new_york_fall_fold(run_cli: CliRun, created) -> None:
    created("fold", cron="30 1 * * *", timezone="America/New_York")
    args = ("next", "fold", "--after", "2026-10-31T12:00:00Z", "--count", "3")
    items = as_json(run_cli(*args, "--json")[1])["items"]
    assert items == [
        {
            "scheduled_at": "2026-11-01T05:30:00Z",
            "local": "2026-11-01 01:30 -04:00 (EDT)",
            "note": None,
            "held": None,
        },
        {
            "scheduled_at": "2026-11-01T06:30:00Z",
            "local": "2026-11-01 01:30 -05:00 (EST)",
            "note": "dst-fold-repeat",
            "held": None,
        },
        {
            "scheduled_at": "2026-11-02T06:30:00Z",
            "local": "2026-11-02 01:30 -05:00 (EST)",
            "note": None,
            "held": None,
        },
    ]
    code, out, _ = run_cli(*args)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:2] == ["SCHEDULED", "(UTC)"]
    marked = [line for line in lines if "DST fold" in line]
    assert len(marked) == 1 and marked[0].startswith("2026-11-01T06:30:00Z")


def test_next_marks_the_new_york_spring_gap(run_cli: CliRun, created) -> None:
    created("gap", cron="30 2 * * *", timezone="America/New_York")
    args = ("next", "gap", "--after", "2026-03-07T12:00:00Z", "--count", "2")
    items = as_json(run_cli(*args, "--json")[1])["items"]
    assert items == [
        {
            "scheduled_at": "2026-03-08T07:00:00Z",
            "local": "2026-03-08 03:00 -04:00 (EDT)",
            "note": "dst-gap-shifted",
            "held": None,
        },
        {
            "scheduled_at": "2026-03-09T06:30:00Z",
            "local": "2026-03-09 02:30 -04:00 (EDT)",
            "note": None,
            "held": None,
        },
    ]
    out = run_cli(*args)[1]
    marked = [line for line in out.splitlines() if "DST gap" in line]
    assert len(marked) == 1 and marked[0].startswith("2026-03-08T07:00:00Z")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--count", "0"), "--count must be between 1 and 1000"),
        (("--after", "2026-03-07T12:00:00"), "has no UTC offset"),
        (("--after", "tomorrow"), "not an RFC 3339 date-time"),
        (("--count", "many"), "'many' is not a valid integer"),
    ],
)
def test_next_rejects_bad_arguments(
    run_cli: CliRun, created, extra: tuple[str, ...], message: str
) -> None:
    created("strict")
    code, out, err = run_cli("next", "strict", *extra)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err


# --------------------------------------------------------------- occurrences


def seed_history(store_path: Path, schedule_id: str, count: int) -> list[int]:
    """`count` decided instants (one a minute from the clock's now on)."""
    start = int(CLI_NOW) + 60
    instants = [start + 60 * i for i in range(count)]
    with opened(store_path) as store, store.atomic():
        store.insert_occurrences(
            [
                (schedule_id, at, None, None, 0, "skipped-overlap", "seeded", 1, None, CLI_NOW)
                for at in instants
            ]
        )
    return instants


def walk(run_cli: CliRun, schedule_id: str, limit: int) -> tuple[list[dict], int]:
    items: list[dict] = []
    cursor: str | None = None
    pages = 0
    while True:
        args = ["occurrences", schedule_id, "--limit", str(limit), "--json"]
        if cursor is not None:
            args += ["--page", cursor]
        code, out, err = run_cli(*args)
        assert code == 0, err
        page = as_json(out)
        assert list(page) == ["items", "next_cursor"]
        assert len(page["items"]) <= limit
        items.extend(page["items"])
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            return items, pages


def test_occurrence_cursor_walks_every_row_exactly_once(
    run_cli: CliRun, created, store_path: Path
) -> None:
    created("ledger", cron="* * * * *")
    instants = seed_history(store_path, "ledger", 250)
    items, pages = walk(run_cli, "ledger", 100)
    assert pages == 3
    got = [item["scheduled_at"] for item in items]
    assert got == [format_instant(t) for t in instants]
    assert len(set(got)) == 250
    assert all(in_order(list(item), OCCURRENCE_FIELDS) for item in items)
    assert items[0]["occurrence_id"] == "ledger@20260601T120100Z"
    assert items[0]["state"] == "skipped-overlap" and items[0]["reason"] == "seeded"


def test_pending_candidate_is_the_first_row_of_the_first_page_only(
    run_cli: CliRun, created, store_path: Path
) -> None:
    created("held", cron="* * * * *")
    seed_history(store_path, "held", 5)
    with opened(store_path) as store, store.atomic():
        store.update_schedule("held", candidate_at=int(CLI_NOW) + 3600, candidate_why="queued")
    page = as_json(run_cli("occurrences", "held", "--limit", "3", "--json")[1])
    first = page["items"][0]
    assert (first["state"], first["scheduled_at"]) == ("pending", "2026-06-01T13:00:00Z")
    assert first["reason"] == "queued behind a run" and first["run_id"] is None
    assert [i["state"] for i in page["items"]] == ["pending", "skipped-overlap", "skipped-overlap"]
    items, _ = walk(run_cli, "held", 3)
    assert [i["state"] for i in items].count("pending") == 1
    assert len(items) == 6


@pytest.mark.parametrize("limit", ["0", "101", "-1"])
def test_occurrence_limit_out_of_bounds_is_a_usage_error(
    run_cli: CliRun, created, limit: str
) -> None:
    created("bounded")
    code, out, err = run_cli("occurrences", "bounded", "--limit", limit)
    assert code == 2 and out == ""
    assert err == "wfsched: error: --limit must be between 1 and 100\n"


@pytest.mark.parametrize("limit", ["1", "100"])
def test_occurrence_limit_bounds_are_inclusive(run_cli: CliRun, created, limit: str) -> None:
    created("inclusive")
    assert run_cli("occurrences", "inclusive", "--limit", limit)[0] == 0


@pytest.mark.parametrize(
    "cursor", ["garbage", "eyJ2IjoyfQ", "", "eyJ2IjoxLCJhdCI6IngiLCJzZXEiOjF9"]
)
def test_malformed_cursor_is_a_usage_error(run_cli: CliRun, created, cursor: str) -> None:
    created("cursed")
    code, out, err = run_cli("occurrences", "cursed", "--page", cursor)
    assert code == 2 and out == ""
    assert err.startswith("wfsched: error: malformed cursor") and err.count("\n") == 1


def test_occurrences_table_prints_the_next_page_command(
    run_cli: CliRun, created, store_path: Path
) -> None:
    created("paged", cron="* * * * *", timezone="Europe/Berlin")
    seed_history(store_path, "paged", 25)
    code, out, _ = run_cli("occurrences", "paged")
    lines = out.splitlines()
    assert code == 0
    assert "2026-06-01T12:01:00Z" in lines[2] and "2026-06-01 14:01 +02:00 (CEST)" in lines[2]
    assert lines[-1].startswith("next page: wfsched occurrences paged --page ")
    cursor = lines[-1].split("--page ")[1]
    code, out, _ = run_cli("occurrences", "paged", "--page", cursor)
    assert code == 0 and "2026-06-01T12:21:00Z" in out
    assert "next page" not in out
    assert " --limit 5 --page " in run_cli("occurrences", "paged", "--limit", "5")[1]


def test_summary_rows_carry_count_first_and_last(
    run_cli: CliRun, created, store_path: Path, clock
) -> None:
    created("napper", cron="*/10 * * * *")
    assert run_cli("pause", "napper")[0] == 0
    clock.advance(3600)
    assert run_cli("resume", "napper")[0] == 0
    items = as_json(run_cli("occurrences", "napper", "--json")[1])["items"]
    assert len(items) == 1
    summary = items[0]
    assert in_order(list(summary), [*OCCURRENCE_FIELDS, "count", "first", "last"])
    assert summary["state"] == "skipped-paused" and summary["occurrence_id"] is None
    assert (summary["count"], summary["first"], summary["last"]) == (
        6,
        "2026-06-01T12:10:00Z",
        "2026-06-01T13:00:00Z",
    )
    out = run_cli("occurrences", "napper")[1]
    # A summary row spans two lines: first and last instant, state and count.
    assert re.search(r"2026-06-01T12:10:00Z \.\. .* skipped-paused ", out)
    assert re.search(r"\n2026-06-01T13:00:00Z .* \(6 instants\)", out)


def test_empty_history_says_so(run_cli: CliRun, created) -> None:
    created("quiet")
    assert run_cli("occurrences", "quiet") == (0, "no occurrences recorded for quiet yet\n", "")
    assert as_json(run_cli("occurrences", "quiet", "--json")[1]) == {
        "items": [],
        "next_cursor": None,
    }


# -------------------------------------------------------------------- status


def test_status_json_without_a_supervisor(run_cli: CliRun, created, store_path: Path) -> None:
    created("later", cron="0 18 * * *")
    created("sooner", cron="30 12 * * *")
    created("stuck")
    with opened(store_path) as store, store.atomic():
        store.update_schedule("stuck", blocked_reason="records contradict each other")
    code, out, _ = run_cli("status", "--json")
    info = as_json(out)
    assert code == 0
    assert in_order(
        list(info),
        ["supervisor", "executing", "interrupted", "max_concurrent_runs", "blocked"],
    )
    assert info["supervisor"] == {
        "running": False,
        "state": None,
        "draining": None,
        "pid": None,
        "started_at": None,
        "last_tick_at": None,
        "uptime": None,
        "stale": False,
        "fault": None,
    }
    assert (info["executing"], info["interrupted"], info["max_concurrent_runs"]) == (0, 0, 4)
    assert info["next_due"] == {"schedule_id": "sooner", "at": "2026-06-01T12:30:00Z"}
    assert info["blocked"] == [{"schedule_id": "stuck", "reason": "records contradict each other"}]
    code, out, _ = run_cli("status")
    assert "not running" in out and "0 of 4" in out
    assert "blocked stuck: records contradict each other" in out


def test_status_sees_the_lock_holder_and_a_stale_tick(
    run_cli: CliRun, created, store_path: Path
) -> None:
    created("watched")
    with opened(store_path) as store, store.atomic():
        store.set_meta(
            started_at=repr(CLI_NOW - 100),
            last_tick_at=repr(CLI_NOW - 2),
            poll_interval="1.0",
            max_concurrent_runs="7",
        )
    with opened(store_path) as store, store.atomic():
        store.set_meta(pid=str(os.getpid()))
    owner = take_ownership(store_path)
    try:
        info = as_json(run_cli("status", "--json")[1])
        assert info["supervisor"]["running"] is True
        assert info["supervisor"]["pid"] == os.getpid()
        assert info["supervisor"]["last_tick_at"] == "2026-06-01T11:59:58.000Z"
        assert info["supervisor"]["stale"] is False
        assert info["max_concurrent_runs"] == 7
        with opened(store_path) as store, store.atomic():
            store.set_meta(last_tick_at=repr(CLI_NOW - 10))
        info = as_json(run_cli("status", "--json")[1])
        assert info["supervisor"]["stale"] is True
        assert "STALE" in run_cli("status")[1]
    finally:
        owner()
    assert as_json(run_cli("status", "--json")[1])["supervisor"]["running"] is False


def test_status_judges_staleness_by_the_stamp_interval_the_supervisor_recorded(
    run_cli: CliRun, created, store_path: Path
) -> None:
    """An idle supervisor stamps every `stamp_interval` (5 s), not every
    poll interval: stale only after three of those."""
    created("watched")
    with opened(store_path) as store, store.atomic():
        store.set_meta(
            started_at=repr(CLI_NOW - 100),
            last_tick_at=repr(CLI_NOW - 14),
            poll_interval="1.0",
            stamp_interval="5.0",
        )
    owner = take_ownership(store_path)
    try:
        assert as_json(run_cli("status", "--json")[1])["supervisor"]["stale"] is False
        with opened(store_path) as store, store.atomic():
            store.set_meta(last_tick_at=repr(CLI_NOW - 16))
        assert as_json(run_cli("status", "--json")[1])["supervisor"]["stale"] is True
    finally:
        owner()


def test_status_on_a_fresh_machine_creates_nothing(run_cli: CliRun, store_path: Path) -> None:
    info = as_json(run_cli("status", "--json")[1])
    assert info["supervisor"]["running"] is False and info["next_due"] is None
    assert_no_store(store_path)


# --------------------------------------------------------------- help (docs)


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for name, command in sorted(group.commands.items()):
        yield (*prefix, name)
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))


@pytest.mark.parametrize("path", list(_commands(cli)), ids=" ".join)
def test_every_command_has_help(run_cli: CliRun, path: tuple[str, ...]) -> None:
    code, out, err = run_cli(*path, "--help")
    assert (code, err) == (0, "")
    assert out.startswith(f"Usage: wfsched {' '.join(path)}")
    summary = out.split("\n\n")[1].strip()
    assert len(summary) > 10, f"`wfsched {' '.join(path)}` needs a help text"


def test_version(run_cli: CliRun) -> None:
    from wfsched import __version__

    assert run_cli("--version") == (0, f"wfsched {__version__}\n", "")


# ------------------------------------------------ the installed console script


def test_console_script_round_trip(tmp_path: Path, make_definition: Callable[..., Path]) -> None:
    binary = wfsched_executable()
    path = make_definition("real")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([binary, *args], capture_output=True, text=True, timeout=60)

    created = run("create", str(path))
    assert created.returncode == 0, created.stderr
    listing = json.loads(run("list", "--json").stdout)
    assert [item["id"] for item in listing["items"]] == ["real"]
    again = run("create", str(path))
    assert again.returncode == 4
    assert again.stderr.startswith("wfsched: error: 'real' already exists")
    assert again.stderr.count("\n") == 1 and "Traceback" not in again.stderr


# ------------------------------------------------------------ blocks and updates

BLOCK = "run-000001: unreadable exit record: not JSON"


def block(store_path: Path, schedule_id: str) -> None:
    """What the supervisor's `block` writes."""
    with opened(store_path) as store, store.atomic():
        store.update_schedule(schedule_id, blocked_reason=BLOCK, next_due=None)


def assert_still_blocked(run_cli: CliRun, schedule_id: str, err: str) -> None:
    assert err.count("\n") == 1
    assert f"{schedule_id} is still blocked ({BLOCK})" in err
    assert f"wfsched resume {schedule_id}" in err
    code, out, _ = run_cli("status", "--json")
    assert code == 0
    assert as_json(out)["blocked"] == [{"schedule_id": schedule_id, "reason": BLOCK}]
    view = as_json(run_cli("get", schedule_id, "--json")[1])
    assert (view["state"], view["blocked_reason"], view["next_due"]) == ("blocked", BLOCK, None)


def test_update_keeps_a_supervisor_block_and_says_so(
    run_cli: CliRun, created, write_toml, store_path: Path
) -> None:
    created("stuck")
    block(store_path, "stuck")
    changed = write_toml(
        "stuck.toml", 'description = "now described"\n' + definition_text("stuck"), "edits"
    )
    code, out, err = run_cli("update", str(changed), "--expected-revision", "1")
    assert code == 0
    assert out.startswith("updated stuck (revision 2)")
    assert_still_blocked(run_cli, "stuck", err)
    # Only resume clears it.
    code, out, _ = run_cli("resume", "stuck")
    assert code == 0
    view = as_json(run_cli("get", "stuck", "--json")[1])
    assert (view["state"], view["blocked_reason"]) == ("active", None)
    assert view["next_due"] is not None


def test_apply_of_a_changed_file_keeps_a_supervisor_block(
    run_cli: CliRun, created, write_toml, store_path: Path, tmp_path: Path
) -> None:
    created("stuck")
    created("fine", cron="30 * * * *")
    block(store_path, "stuck")
    write_toml("stuck.toml", 'description = "now described"\n' + definition_text("stuck"), "new")
    fine = definition_text("fine", cron="30 * * * *")
    write_toml("fine.toml", 'description = "also"\n' + fine, "new")
    code, out, err = run_cli("apply", str(tmp_path / "new"))
    assert code == 0
    assert "updated stuck (revision 2)" in out and "updated fine (revision 2)" in out
    assert_still_blocked(run_cli, "stuck", err)
    assert "fine" not in err


def test_edit_keeps_a_supervisor_block(
    run_cli: CliRun, created, fake_editor, store_path: Path
) -> None:
    created("stuck")
    block(store_path, "stuck")
    fake_editor(CHANGE_CRON)
    code, out, err = run_cli("edit", "stuck")
    assert (code, out) == (0, "updated stuck (revision 2)\n")
    assert_still_blocked(run_cli, "stuck", err)
