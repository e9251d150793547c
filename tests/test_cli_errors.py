"""Errors at the CLI edge: one line on stderr, the documented exit status, no
traceback, and nothing written (docs/definitions.md,
"Errors"; docs/operations.md, "Exit statuses")."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import CliRun, definition_text, wfsched_executable

from wfsched.cli import CliState
from wfsched.cli.main import cli
from wfsched.store import SQLiteStore

CRON_HEADER = 'id = "bad"\n\n[trigger]\ncron = "0 * * * *"\n\n[run]\ncommand = ["/bin/true"]\n'


def bindings(count: int) -> str:
    return "".join(f'\n[[input]]\ntarget = "k{i}"\nliteral = {i}\n' for i in range(count))


# (case id, file text, what stderr must contain besides the file name)
BAD_DEFINITIONS = [
    (
        "malformed-toml",
        'id = "bad"\n[trigger\ncron = "0 * * * *"\n',
        ["invalid TOML", "line 2", "column"],
    ),
    ("bad-cron", definition_text("bad", cron="0 0 * * * *"), ["trigger.cron:"]),
    ("cron-never-fires", definition_text("bad", cron="0 0 30 2 *"), ["trigger.cron:", "never"]),
    ("cron-extension", definition_text("bad", cron="0 0 L * *"), ["trigger.cron:", "'L'"]),
    ("unknown-zone", definition_text("bad", timezone="Mars/Olympus_Mons"), ["trigger.timezone:"]),
    (
        "naive-at",
        'id = "bad"\n[trigger]\nat = 2026-12-24T18:00:00\n[run]\ncommand = ["/bin/true"]\n',
        ["trigger.at:", "offset"],
    ),
    (
        "huge-input",
        CRON_HEADER + '\n[[input]]\ntarget = "blob"\nliteral = "' + "x" * 70_000 + '"\n',
        ["input:", "64 KiB"],
    ),
    ("too-many-bindings", CRON_HEADER + bindings(65), ["input:", "at most 64"]),
    (
        "conflicting-targets",
        CRON_HEADER
        + '\n[[input]]\ntarget = "a"\nliteral = 1\n\n[[input]]\ntarget = "a.b"\nliteral = 2\n',
        ["input[1].target:", "conflicts with input[0].target"],
    ),
    (
        "duplicate-targets",
        CRON_HEADER
        + '\n[[input]]\ntarget = "a"\nliteral = 1\n\n[[input]]\ntarget = "a"\nliteral = 2\n',
        ["input[1].target:", "duplicates"],
    ),
    (
        "unknown-key",
        CRON_HEADER.replace("[run]\n", '[run]\ntimout = "1h"\n'),
        ["run.timout:", "unknown key"],
    ),
    (
        "parallel-without-limit",
        CRON_HEADER + '\n[policy]\noverlap = "parallel"\n',
        ["policy.max_active_runs:", "required"],
    ),
    # Edges that used to pass validation and then fail (or crash) later.
    (
        "timeout-beyond-ten-years",
        CRON_HEADER + 'timeout = "9999999999d"\n',
        ["run.timeout:", "too long: at most 315360000 seconds (3650d, ten years)"],
    ),
    (
        "kill-grace-beyond-ten-years",
        CRON_HEADER + "kill_grace = 315360001\n",
        ["run.kill_grace:", "too long"],
    ),
    (
        "lateness-beyond-ten-years",
        CRON_HEADER + '\n[policy]\nlateness = "3651d"\n',
        ["policy.lateness:", "too long"],
    ),
    (
        "at-in-year-10000-in-utc",
        'id = "bad"\n[trigger]\nat = 9999-12-31T23:00:00-05:00\n[run]\ncommand = ["/bin/true"]\n',
        ["trigger.at:", "outside the instants wfsched can represent"],
    ),
    (
        "at-string-in-year-0-in-utc",
        'id = "bad"\n[trigger]\nat = "0001-01-01T00:30:00+01:00"\n[run]\ncommand = ["/bin/true"]\n',
        ["trigger.at:", "outside the instants wfsched can represent"],
    ),
    (
        "id-with-newline",
        CRON_HEADER.replace('id = "bad"', 'id = "nl\\n"'),
        ["id:", "not a valid id"],
    ),
    ("zone-localtime", definition_text("bad", timezone="localtime"), ["trigger.timezone:"]),
    ("zone-factory", definition_text("bad", timezone="Factory"), ["trigger.timezone:"]),
    (
        "huge-env",
        CRON_HEADER + 'env = { BIG = "' + "x" * 70_000 + '" }\n',
        ["run.env.BIG:", "70,000 bytes; at most 65,536"],
    ),
    (
        "env-name-with-newline",
        CRON_HEADER + 'env = { "A\\n" = "x" }\n',
        ['run.env."A\\n":', "not a valid environment name"],
    ),
    (
        "nul-in-argv",
        CRON_HEADER.replace('["/bin/true"]', '["/bin/echo", "a\\u0000b"]'),
        ["run.command[1]:", "NUL character"],
    ),
]


def assert_one_line_error(err: str, *needles: str) -> None:
    assert err.startswith("wfsched: error: ")
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)


def schedule_ids(store_path: Path) -> list[str]:
    if not (store_path / "wfsched.db").exists():
        return []
    store = SQLiteStore(store_path)
    try:
        return [row.id for row in store.list_schedules(include_deleted=True)]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("text", "needles"),
    [(text, needles) for _, text, needles in BAD_DEFINITIONS],
    ids=[case for case, _, _ in BAD_DEFINITIONS],
)
@pytest.mark.parametrize("command", ["validate", "create", "apply"])
def test_invalid_definition_is_one_line_exit_2_and_writes_nothing(
    run_cli: CliRun,
    write_toml: Callable[..., Path],
    store_path: Path,
    command: str,
    text: str,
    needles: list[str],
) -> None:
    path = write_toml("bad.toml", text)
    target = str(path.parent) if command == "apply" else str(path)
    code, out, err = run_cli(command, target)
    assert code == 2
    assert out == ""
    assert_one_line_error(err, f"{path}: ", *needles)
    assert not store_path.exists()  # not even an empty store


@pytest.mark.parametrize(
    ("text", "needles"),
    [(text, needles) for _, text, needles in BAD_DEFINITIONS],
    ids=[case for case, _, _ in BAD_DEFINITIONS],
)
def test_invalid_update_changes_nothing(
    run_cli: CliRun,
    write_toml: Callable[..., Path],
    store_path: Path,
    text: str,
    needles: list[str],
) -> None:
    good = write_toml("bad.toml", definition_text("bad"), folder="good")
    assert run_cli("create", str(good))[0] == 0
    store = SQLiteStore(store_path)
    before = store.get_schedule("bad")
    store.close()
    path = write_toml("bad.toml", text)
    code, out, err = run_cli("update", str(path), "--expected-revision", "1")
    assert code == 2 and out == ""
    assert_one_line_error(err, f"{path}: ", *needles)
    store = SQLiteStore(store_path)
    assert store.get_schedule("bad") == before
    store.close()


def test_unreadable_file_is_named(run_cli: CliRun, tmp_path: Path) -> None:
    code, _, err = run_cli("validate", str(tmp_path / "absent.toml"))
    assert code == 2
    assert_one_line_error(err, f"{tmp_path / 'absent.toml'}: no such file or directory")


@pytest.mark.parametrize("command", ["validate", "create", "apply", "update", "stdin"])
def test_a_file_starting_with_a_byte_order_mark_is_accepted(
    run_cli: CliRun, tmp_path: Path, store_path: Path, command: str
) -> None:
    """Windows editors start UTF-8 files with a BOM; it is not part of the TOML."""
    text = definition_text("bom")
    if command == "update":
        assert run_cli("create", "-", input=text)[0] == 0
        text = definition_text("bom", cron="30 * * * *")
    folder = tmp_path / "bom"
    folder.mkdir()
    path = folder / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    args = {
        "validate": ("validate", str(path)),
        "create": ("create", str(path)),
        "apply": ("apply", str(folder)),
        "update": ("update", str(path), "--expected-revision", "1"),
        "stdin": ("create", "-"),
    }[command]
    code, out, err = run_cli(*args, input="\ufeff" + text if command == "stdin" else None)
    assert (code, err) == (0, ""), err
    assert "bom" in out
    if command != "validate":
        assert schedule_ids(store_path) == ["bom"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("list", "--bogus"), "No such option '--bogus'"),
        (("frobnicate",), "No such command 'frobnicate'"),
        (("get",), "Missing argument 'ID'"),
        (("update", "x.toml"), "Missing option '--expected-revision'"),
        (("update", "x.toml", "--expected-revision", "0"), "--expected-revision"),
        (("occurrences", "x", "--limit", "lots"), "'lots' is not a valid integer"),
    ],
)
def test_usage_errors_are_one_line_exit_2(
    run_cli: CliRun, args: tuple[str, ...], needle: str
) -> None:
    code, out, err = run_cli(*args)
    assert code == 2 and out == ""
    assert_one_line_error(err, needle, "--help")


@pytest.mark.parametrize(
    "run", ["run-\u00b2", "\u0664\u0662", "99999999999999999999999", "run-9223372036854775808"]
)
def test_a_run_id_that_names_no_run_is_not_found(
    run_cli: CliRun, make_definition: Callable[..., Path], run: str
) -> None:
    """Not a traceback: "²".isdigit() is true, and a huge number overflows SQLite."""
    assert run_cli("create", str(make_definition("x")))[0] == 0
    code, out, err = run_cli("runs", "show", run)
    assert code == 3 and out == ""
    assert_one_line_error(err, f"no run {run!r}")


def test_no_arguments_shows_help(run_cli: CliRun) -> None:
    code, _, err = run_cli()
    assert code == 2 and "Usage: wfsched" in err and "Commands:" in err


def _exploding_clock() -> float:
    raise RuntimeError("the clock fell off the wall")


@pytest.mark.parametrize("debug", [False, True])
def test_unexpected_errors_are_one_line_exit_1_with_traceback_only_on_debug(
    make_definition: Callable[..., Path], debug: bool
) -> None:
    path = make_definition("doomed")
    args = ["--debug"] if debug else []
    result = CliRunner().invoke(
        cli,
        [*args, "create", str(path)],
        obj=CliState(clock=_exploding_clock),
        prog_name="wfsched",
        catch_exceptions=False,
    )
    assert result.exit_code == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith("wfsched: error: RuntimeError: the clock fell off the wall")
    if debug:
        assert result.stderr.startswith("Traceback")
    else:
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
        assert "--debug" in last


def test_debug_shows_the_traceback_of_a_domain_error(run_cli: CliRun) -> None:
    code, _, err = run_cli("--debug", "get", "nothing-here")
    assert code == 3
    assert err.startswith("Traceback") and "NotFoundError" in err
    assert err.splitlines()[-1].startswith("wfsched: error: no store at")


def test_a_store_path_that_is_a_file_fails_cleanly(
    run_cli: CliRun, make_definition: Callable[..., Path], tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    code, _, err = run_cli("--store", str(blocker), "create", str(make_definition("x")))
    assert code == 2
    assert_one_line_error(err, f"store {blocker} is a file, not a directory")


# --------------------------------------------- the real console script, as a shell sees it


def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [wfsched_executable(), *args], capture_output=True, text=True, input=input, timeout=60
    )


def test_console_script_exit_codes_and_no_traceback(
    write_toml: Callable[..., Path], store_path: Path
) -> None:
    bad = write_toml("bad.toml", definition_text("bad", timezone="Atlantis/Capital"))
    invalid = run("validate", str(bad))
    assert invalid.returncode == 2 and invalid.stdout == ""
    assert_one_line_error(invalid.stderr, f"{bad}: trigger.timezone:")

    created = run("create", "-", input=definition_text("fine"))
    assert created.returncode == 0, created.stderr
    missing = run("get", "absent")
    assert missing.returncode == 3
    assert_one_line_error(missing.stderr, "no schedule 'absent'")

    usage = run("list", "--nope")
    assert usage.returncode == 2
    assert_one_line_error(usage.stderr, "No such option")

    stale = run("update", "-", "--expected-revision", "9", input=definition_text("fine"))
    assert stale.returncode == 4
    assert_one_line_error(stale.stderr, "stale revision 9")
    assert json.loads(run("get", "fine", "--json").stdout)["revision"] == 1


@pytest.mark.parametrize(
    ("config", "args", "needles"),
    [
        ("", ("supervise", "--drain-grace", "3651d"), ["--drain-grace", "(3650d, ten years)"]),
        ('drain_grace = "3651d"\n', ("supervise",), ["config.toml: drain_grace: ", "too long"]),
        ("retention = 315360001\n", ("supervise",), ["config.toml: retention: ", "too long"]),
        ("", ("prune", "--older-than", "9999999999d"), ["--older-than", "(3650d, ten years)"]),
    ],
    ids=["drain-grace-flag", "drain-grace-config", "retention-config", "prune-older-than"],
)
def test_operator_durations_beyond_ten_years_are_one_line_exit_2_and_write_nothing(
    tmp_path: Path, config: str, args: tuple[str, ...], needles: list[str]
) -> None:
    """The real program (a subprocess: a `supervise` that wrongly started
    would be stopped by the timeout, not hang the test session)."""
    from tests.daemon import wfsched

    store = tmp_path / "store"
    if config:
        store.mkdir()
        (store / "config.toml").write_text(config)
    before = sorted(os.listdir(store)) if store.exists() else None
    result = wfsched(store, *args)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert_one_line_error(result.stderr, "too long", *needles)
    assert (sorted(os.listdir(store)) if store.exists() else None) == before


def test_an_invalid_apply_creates_no_postgresql_schema(tmp_path: Path, pg_url: str) -> None:
    import psycopg

    from tests.daemon import wfsched

    folder = tmp_path / "defs"
    folder.mkdir()
    (folder / "bad.toml").write_text(definition_text("bad", timezone="Factory"))
    result = wfsched(pg_url, "apply", str(folder))
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert_one_line_error(result.stderr, "bad.toml: trigger.timezone: ")
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    assert tables == []
