"""The operator's surface (issue 8): contract points, failures an operator can
see, safer apply, paging hints, completions, escaped terminal output."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliRun

ONE_SHOT = """\
id = "once"

[trigger]
at = {at}

[run]
command = ["/bin/true"]
"""


@pytest.mark.parametrize(
    "written",
    [
        '"2026-12-24T18:00:00.750+01:00"',
        "2026-12-24T18:00:00.750+01:00",
        '"2026-12-24t18:00:00.9z"',
    ],
)
def test_one_shot_at_is_the_utc_instant_in_json_and_as_written_in_toml(
    run_cli: CliRun, write_toml: Callable[..., Path], written: str
) -> None:
    path = write_toml("once.toml", ONE_SHOT.format(at=written))
    assert run_cli("create", str(path))[0] == 0
    expected = "2026-12-24T17:00:00Z" if "+01:00" in written else "2026-12-24T18:00:00Z"
    code, out, _ = run_cli("get", "once", "--json")
    assert code == 0
    assert json.loads(out)["trigger"] == {"at": expected}
    code, out, _ = run_cli("list", "--json")
    assert json.loads(out)["items"][0]["trigger"] == {"at": expected}
    code, out, _ = run_cli("get", "once", "--toml")
    assert "+01:00" in out if "+01:00" in written else "18:00:00" in out
    # Human output still shows local times in the zone written in `at`.
    code, out, _ = run_cli("get", "once")
    if "+01:00" in written:
        assert "2026-12-24 18:00 +01:00" in out


def test_update_with_an_equal_definition_is_a_documented_no_op(
    run_cli: CliRun, make_definition: Callable[..., Path]
) -> None:
    path = make_definition("same")
    assert run_cli("create", str(path))[0] == 0
    code, out, _ = run_cli("update", str(path), "--expected-revision", "1")
    assert code == 0
    assert "unchanged same (revision 1)" in out
    assert json.loads(run_cli("get", "same", "--json")[1])["revision"] == 1
    help_text = " ".join(run_cli("update", "--help")[1].split())
    assert "identical to the stored one is a no-op" in help_text
    docs = (Path(__file__).resolve().parent.parent / "docs" / "definitions.md").read_text()
    assert "identical to the stored one is a no-op" in " ".join(docs.split())


# ------------------------------------------------- reads of a missing store

MISSING_NOTE = "no store at"


@pytest.mark.parametrize(
    ("args", "empty"),
    [
        (("list", "--json"), {"items": [], "next_cursor": None}),
        (("list", "--all", "--json"), {"items": [], "next_cursor": None}),
        (("runs", "--json"), {"items": [], "next_cursor": None}),
        (("runs", "list", "--schedule", "x", "--json"), {"items": [], "next_cursor": None}),
        (("audit", "--json"), None),
        (("status", "--json"), None),
        (("prune", "--older-than", "30d", "--dry-run", "--json"), None),
        (("prune", "--older-than", "30d", "--json"), None),
    ],
)
def test_listing_reads_of_a_missing_store_answer_as_an_empty_store(
    run_cli: CliRun, store_path: Path, args: tuple[str, ...], empty: object
) -> None:
    code, out, err = run_cli(*args)
    assert code == 0, err
    assert err.count("\n") == 1 and MISSING_NOTE in err and str(store_path) in err
    answer = json.loads(out)
    if empty is not None:
        assert answer == empty
    if args[0] == "audit":
        assert answer["ok"] is True and answer["violations"] == []
    if args[0] == "prune":
        assert answer["runs"] == 0 and answer["occurrences"] == 0
    if args[0] == "status":
        assert answer["executing"] == 0 and answer["blocked"] == []
    assert not store_path.exists()


@pytest.mark.parametrize("args", [("list",), ("runs",), ("runs", "list"), ("audit",), ("status",)])
def test_human_reads_of_a_missing_store_exit_0_with_a_note(
    run_cli: CliRun, store_path: Path, args: tuple[str, ...]
) -> None:
    code, _out, err = run_cli(*args)
    assert code == 0 and MISSING_NOTE in err and err.count("\n") == 1
    assert not store_path.exists()


@pytest.mark.parametrize(
    "args",
    [
        ("get", "x"),
        ("get", "x", "--json"),
        ("get", "x", "--toml"),
        ("next", "x"),
        ("occurrences", "x"),
        ("occurrences", "x", "--json"),
        ("runs", "show", "run-000001"),
        ("runs", "logs", "run-000001"),
    ],
)
def test_reads_of_one_id_on_a_missing_store_are_not_found(
    run_cli: CliRun, store_path: Path, args: tuple[str, ...]
) -> None:
    code, out, err = run_cli(*args)
    assert (code, out) == (3, "")
    assert err.startswith("wfsched: error: ") and err.count("\n") == 1 and MISSING_NOTE in err
    assert not store_path.exists()


# ------------------------------------------------------- durations on flags


@pytest.mark.parametrize(
    "flags",
    [
        ("--drain-grace", "45s"),
        ("--drain-grace", "45"),
        ("--drain-grace", "0.5"),
        ("--poll-interval", "2m"),
        ("--poll-interval", "1"),
        ("--poll-interval", "0.25"),
    ],
)
def test_supervise_duration_flags_take_the_definition_forms(
    run_cli: CliRun, store_path: Path, flags: tuple[str, ...]
) -> None:
    # An unknown key in config.toml stops the start after the flags were
    # parsed: the error names config.toml, not the flag.
    store_path.mkdir()
    (store_path / "config.toml").write_text("no_such_setting = 1\n")
    code, _, err = run_cli("supervise", *flags)
    assert code == 2 and "config.toml" in err and "no_such_setting" in err, err


@pytest.mark.parametrize("value", ["45x", "-3", "", "1.5d", "nan"])
def test_supervise_rejects_a_malformed_duration_naming_the_flag(
    run_cli: CliRun, store_path: Path, value: str
) -> None:
    code, _, err = run_cli("supervise", "--drain-grace", value)
    assert code == 2 and "--drain-grace" in err and err.count("\n") == 1
    assert not store_path.exists()


def test_supervise_duration_flags_reach_the_config(store_path: Path) -> None:
    from wfsched.cli.params import Duration
    from wfsched.config import load_config

    parse = Duration().convert
    config = load_config(
        store_path,
        {"drain_grace": parse("45s", None, None), "poll_interval": parse("2m", None, None)},
    )
    assert (config.drain_grace, config.poll_interval) == (45.0, 120.0)


def test_prune_older_than_takes_the_same_forms(run_cli: CliRun) -> None:
    for value, seconds in (("90", 90), ("90s", 90), ("2m", 120), ("30d", 30 * 86400)):
        code, out, _ = run_cli("prune", "--older-than", value, "--json")
        assert code == 0 and json.loads(out)["older_than"] == seconds
