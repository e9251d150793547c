"""Definition files: every rejection names file + key path; round trips hold."""

from __future__ import annotations

import copy
import io
import json
import os
import re
import threading
import tomllib
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from wfsched.domain.definition import (
    canonical_json,
    definition_from_document,
    load_definition_file,
    parse_definition,
    to_toml,
)
from wfsched.domain.model import CronTrigger, Definition, OneShotTrigger
from wfsched.domain.timeutil import MAX_DURATION, MAX_INSTANT, MIN_INSTANT
from wfsched.errors import DefinitionError

SOURCE = "report.toml"
NOW = 1_796_083_200  # 2026-12-01T00:00:00Z
EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.toml"))

BASE: dict[str, Any] = {
    "id": "report",
    "trigger": {"cron": "0 * * * *"},
    "run": {"command": ["true"]},
}

FULL_TOML = """
id = "hourly-report"
description = "Hourly sales report"

[trigger]
cron = "@hourly"
timezone = "Europe/Berlin"

[run]
command = ["python3", "report.py", "--hourly"]
cwd = "/srv/reports"
env = { REPORT_BUCKET = "sales", A_FIRST = "1" }
timeout = "2h"
kill_grace = 15
interrupt_exit_code = 75

[policy]
overlap = "parallel"
max_active_runs = 2
misfire = "latest"
lateness = "90s"

[notify]
on_failure = ["notify-send-mail", "ops@example.com"]

[[input]]
target = "team"
literal = "engineering"

[[input]]
target = "report.time"
occurrence = "scheduled_at"

[[input]]
target = "report.parts"
array = [{ literal = 1 }, { object = { at = { occurrence = "occurrence_id" } } }]
"""


def build(*edits: tuple[str, Any]) -> dict[str, Any]:
    """BASE with dotted-path edits; a value of DELETE removes the key."""
    document = copy.deepcopy(BASE)
    for path, value in edits:
        *parents, leaf = path.split(".")
        node = document
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return document


DELETE = object()


def parse(document: dict[str, Any], *, now: int | None = NOW) -> Definition:
    return parse_definition(tomli_w.dumps(document), SOURCE, now=now)


def rejection(text: str, *, now: int | None = NOW) -> DefinitionError:
    with pytest.raises(DefinitionError) as info:
        parse_definition(text, SOURCE, now=now)
    return info.value


def assert_names(error: DefinitionError, path: str, fragment: str) -> None:
    assert error.source == SOURCE
    assert error.path == path
    assert str(error).startswith(f"{SOURCE}: {path}: ")
    assert fragment in str(error)


# ------------------------------------------------------------------ rejections

REJECTIONS: list[tuple[tuple[tuple[str, Any], ...], str, str]] = [
    # id
    ((("id", DELETE),), "id", "required"),
    ((("id", "Report"),), "id", "a-z, 0-9"),
    ((("id", ""),), "id", "not a valid id"),
    ((("id", "-report"),), "id", "starting with a letter or digit"),
    ((("id", "a" * 64),), "id", "1-63 characters"),
    ((("id", "a b"),), "id", "not a valid id"),
    ((("id", 5),), "id", "not a valid id"),
    # `$` matches before a final newline: the whole id must match
    ((("id", "nl\n"),), "id", "not a valid id"),
    ((("id", "nl\r\n"),), "id", "not a valid id"),
    # unknown keys, named at every level
    ((("idd", "x"),), "idd", "unknown key; valid keys here: id, description"),
    ((("trigger.crn", "x"),), "trigger.crn", "unknown key"),
    ((("run.timout", "1h"),), "run.timout", "unknown key; valid keys here: command, cwd"),
    ((("policy.overlp", "skip"),), "policy.overlp", "unknown key"),
    ((("notify.onfailure", ["x"]),), "notify.onfailure", "unknown key"),
    ((("input", [{"target": "a", "litteral": 1}]),), "input[0].litteral", "unknown key"),
    # tables
    ((("trigger", DELETE),), "trigger", "required"),
    ((("run", DELETE),), "run", "required"),
    ((("run", "true"),), "run", "must be a table"),
    ((("policy", 5),), "policy", "must be a table"),
    ((("notify", ["x"]),), "notify", "must be a table"),
    ((("description", 5),), "description", "must be a string"),
    # trigger
    ((("trigger.cron", DELETE),), "trigger", "exactly one of `cron` or `at` (has neither)"),
    ((("trigger.at", "2027-01-01T00:00:00Z"),), "trigger", "(has both)"),
    (
        (
            ("trigger.cron", DELETE),
            ("trigger.at", "2027-01-01T00:00:00Z"),
            ("trigger.timezone", "UTC"),
        ),
        "trigger.timezone",
        "not allowed with `at`",
    ),
    ((("trigger.timezone", "Mars/Olympus"),), "trigger.timezone", "unknown time zone"),
    ((("trigger.timezone", "europe/berlin"),), "trigger.timezone", "unknown time zone"),
    ((("trigger.timezone", 5),), "trigger.timezone", "IANA zone name"),
    # files of the tz database that name no zone
    ((("trigger.timezone", "localtime"),), "trigger.timezone", "unknown time zone"),
    ((("trigger.timezone", "Factory"),), "trigger.timezone", "unknown time zone"),
    ((("trigger.timezone", "posixrules"),), "trigger.timezone", "unknown time zone"),
    ((("trigger.timezone", "posix/Europe/Berlin"),), "trigger.timezone", "unknown time zone"),
    ((("trigger.timezone", "right/UTC"),), "trigger.timezone", "unknown time zone"),
    ((("trigger.timezone", "Europe/Berlin\n"),), "trigger.timezone", "unknown time zone"),
    ((("trigger.cron", 5),), "trigger.cron", "must be a string"),
    ((("trigger.cron", "61 * * * *"),), "trigger.cron", "minute"),
    ((("trigger.cron", "* * * *"),), "trigger.cron", "fields"),
    ((("trigger.cron", "@reboot"),), "trigger.cron", "@reboot"),
    ((("trigger.cron", "0 0 30 2 *"),), "trigger.cron", "never fires"),
    (
        (("trigger.cron", DELETE), ("trigger.at", "2027-01-01T00:00:00")),
        "trigger.at",
        "no UTC offset",
    ),
    ((("trigger.cron", DELETE), ("trigger.at", "tomorrow")), "trigger.at", "not an RFC 3339"),
    ((("trigger.cron", DELETE), ("trigger.at", "2027-01-01")), "trigger.at", "not an RFC 3339"),
    ((("trigger.cron", DELETE), ("trigger.at", "2027-13-01T00:00:00Z")), "trigger.at", "e.g."),
    ((("trigger.cron", DELETE), ("trigger.at", 1798761600)), "trigger.at", "offset date-time"),
    # instants a datetime cannot hold in UTC
    (
        (("trigger.cron", DELETE), ("trigger.at", "9999-12-31T23:00:00-05:00")),
        "trigger.at",
        "in UTC it must lie from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z",
    ),
    (
        (("trigger.cron", DELETE), ("trigger.at", "0001-01-01T00:30:00+01:00")),
        "trigger.at",
        "outside the instants wfsched can represent",
    ),
    (
        (("trigger.cron", DELETE), ("trigger.at", "0001-01-01T00:00:00Z")),
        "trigger.at",
        "first representable second",
    ),
    (
        (
            ("trigger.cron", DELETE),
            ("trigger.at", datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))),
        ),
        "trigger.at",
        "outside the instants wfsched can represent",
    ),
    (
        (("trigger.cron", DELETE), ("trigger.at", "\uff12\uff10\uff12\uff17-01-01T00:00:00Z")),
        "trigger.at",
        "not an RFC 3339",
    ),
    # run.command
    ((("run.command", DELETE),), "run.command", "required"),
    ((("run.command", []),), "run.command", "non-empty argv list"),
    ((("run.command", [""]),), "run.command[0]", "non-empty string"),
    ((("run.command", ["echo", 5]),), "run.command[1]", "non-empty string"),
    ((("run.command", ["echo", "a\0b"]),), "run.command[1]", "NUL character"),
    ((("run.command", ""),), "run.command", "non-blank"),
    ((("run.command", "   "),), "run.command", "non-blank"),
    ((("run.command", 5),), "run.command", "argv list"),
    ((("run.command", "echo a\0b"),), "run.command", "NUL character"),
    ((("run.command", "x" * 70_000),), "run.command", "70,000 bytes; at most 65,536"),
    ((("run.command", ["echo", "x" * 70_000]),), "run.command[1]", "at most 65,536"),
    ((("run.command", ["echo"] + ["x" * 999] * 66),), "run.command", "at most 65,536 (64 KiB)"),
    ((("run.command", {"argv": ["x"]}),), "run.command", "argv list"),
    # run.cwd
    ((("run.cwd", "srv/reports"),), "run.cwd", "absolute path"),
    ((("run.cwd", "./x"),), "run.cwd", "absolute path"),
    ((("run.cwd", ""),), "run.cwd", "absolute path"),
    ((("run.cwd", 5),), "run.cwd", "absolute path"),
    ((("run.cwd", "/srv/a\0b"),), "run.cwd", "NUL character"),
    ((("run.cwd", "/" + "d" * 4095),), "run.cwd", "4,096 bytes; at most 4,095"),
    # run.env
    ((("run.env", "A=1"),), "run.env", "table of strings"),
    ((("run.env", {"1A": "x"}),), "run.env.1A", "valid environment name"),
    ((("run.env", {"A-B": "x"}),), "run.env.A-B", "valid environment name"),
    ((("run.env", {"": "x"}),), 'run.env.""', "valid environment name"),
    ((("run.env", {"WFSCHED_INPUT": "x"}),), "run.env.WFSCHED_INPUT", "reserved"),
    ((("run.env", {"A": 1}),), "run.env.A", 'must be a string (quote it: "1")'),
    ((("run.env", {"A": True}),), "run.env.A", "must be a string"),
    ((("run.env", {"A": ["x"]}),), "run.env.A", "must be a string"),
    ((("run.env", {"A\n": "x"}),), 'run.env."A\\n"', "valid environment name"),
    ((("run.env", {"A=B": "x"}),), 'run.env."A=B"', "valid environment name"),
    ((("run.env", {"A\0": "x"}),), 'run.env."A\\u0000"', "valid environment name"),
    ((("run.env", {"A": "x\0y"}),), "run.env.A", "NUL character"),
    ((("run.env", {"BIG": "x" * 70_000}),), "run.env.BIG", "70,000 bytes; at most 65,536"),
    (
        (("run.env", {f"V{i}": "x" * 1000 for i in range(66)}),),
        "run.env",
        "as NAME=value strings; at most 65,536 (64 KiB)",
    ),
    ((("run.env", {f"V{i}": "" for i in range(257)}),), "run.env", "257 variables; at most 256"),
    # durations
    ((("run.timeout", 0),), "run.timeout", "must be positive"),
    ((("run.timeout", "0s"),), "run.timeout", "must be positive"),
    ((("run.timeout", -5),), "run.timeout", "negative"),
    ((("run.timeout", "5x"),), "run.timeout", "not a duration"),
    ((("run.timeout", "-1s"),), "run.timeout", "not a duration"),
    ((("run.timeout", "1h30m"),), "run.timeout", "not a duration"),
    ((("run.timeout", 1.5),), "run.timeout", "not a duration"),
    ((("run.timeout", True),), "run.timeout", "duration"),
    ((("run.kill_grace", "soon"),), "run.kill_grace", "not a duration"),
    ((("run.kill_grace", -1),), "run.kill_grace", "negative"),
    ((("run.kill_grace", False),), "run.kill_grace", "duration"),
    ((("policy.lateness", -1),), "policy.lateness", "negative"),
    ((("policy.lateness", "1w"),), "policy.lateness", "not a duration"),
    ((("policy.lateness", True),), "policy.lateness", "duration"),
    # at most 3650d: longer overflows the run's watcher and the date arithmetic
    ((("run.timeout", "9999999999d"),), "run.timeout", "too long: at most 315360000 seconds"),
    ((("run.timeout", 315_360_001),), "run.timeout", "(3650d, ten years)"),
    ((("run.timeout", "3651d"),), "run.timeout", "too long"),
    ((("run.timeout", "9" * 5000 + "s"),), "run.timeout", "too long"),
    ((("run.kill_grace", "87601h"),), "run.kill_grace", "too long"),
    ((("run.kill_grace", 2**63),), "run.kill_grace", "too long"),
    ((("policy.lateness", "5256001m"),), "policy.lateness", "too long"),
    # interrupt_exit_code
    ((("run.interrupt_exit_code", 0),), "run.interrupt_exit_code", "1 to 255"),
    ((("run.interrupt_exit_code", 256),), "run.interrupt_exit_code", "1 to 255"),
    ((("run.interrupt_exit_code", -1),), "run.interrupt_exit_code", "1 to 255"),
    ((("run.interrupt_exit_code", True),), "run.interrupt_exit_code", "integer"),
    ((("run.interrupt_exit_code", "75"),), "run.interrupt_exit_code", "integer"),
    ((("run.interrupt_exit_code", 7.5),), "run.interrupt_exit_code", "integer"),
    # policy
    ((("policy.overlap", "sometimes"),), "policy.overlap", "skip, queue, parallel"),
    ((("policy.overlap", 1),), "policy.overlap", "not one of"),
    (
        (("policy.overlap", "parallel"),),
        "policy.max_active_runs",
        'required when overlap = "parallel"',
    ),
    (
        (("policy.overlap", "parallel"), ("policy.max_active_runs", 0)),
        "policy.max_active_runs",
        "integer from 1 to 10,000",
    ),
    (
        (("policy.overlap", "parallel"), ("policy.max_active_runs", True)),
        "policy.max_active_runs",
        "integer from 1 to 10,000",
    ),
    (
        (("policy.overlap", "parallel"), ("policy.max_active_runs", "3")),
        "policy.max_active_runs",
        "integer from 1 to 10,000",
    ),
    ((("policy.max_active_runs", 2),), "policy.max_active_runs", '(overlap is "skip")'),
    (
        (("policy.overlap", "queue"), ("policy.max_active_runs", 1)),
        "policy.max_active_runs",
        '(overlap is "queue")',
    ),
    ((("policy.misfire", "never"),), "policy.misfire", "skip, latest"),
    # notify
    ((("notify.on_failure", []),), "notify.on_failure", "non-empty argv list"),
    ((("notify.on_failure", "mail ops"),), "notify.on_failure", "argv list"),
    ((("notify.on_failure", ["mail", 1]),), "notify.on_failure[1]", "non-empty string"),
    ((("notify.on_failure", [""]),), "notify.on_failure[0]", "non-empty string"),
    ((("notify.on_failure", ["mail", "a\0b"]),), "notify.on_failure[1]", "NUL character"),
    ((("notify.on_failure", ["mail", "x" * 70_000]),), "notify.on_failure[1]", "at most 65,536"),
    # description
    ((("description", "d" * 4097),), "description", "4,097 bytes; at most 4,096"),
    # UTF-8 bytes are counted, not characters
    ((("description", "\u00e9" * 2049),), "description", "4,098 bytes; at most 4,096"),
    ((("run.cwd", "/" + "\u00e9" * 2048),), "run.cwd", "4,097 bytes; at most 4,095"),
    # inputs (details in test_inputs.py), through the file
    ((("input", {"target": "a"}),), "input", "array of tables"),
    (
        (("input", [{"target": "a", "literal": float("nan")}]),),
        "input[0].literal",
        "not valid JSON",
    ),
    (
        (("input", [{"target": "a", "literal": 1}, {"target": "a.b", "literal": 1}]),),
        "input[1].target",
        "conflicts with input[0].target 'a'",
    ),
    ((("input", [{"target": "a", "literal": "x" * 70000}]),), "input", "64 KiB"),
    ((("input", [{"target": "a\n", "literal": 1}]),), "input[0].target", "not a dotted path"),
]


@pytest.mark.parametrize(("edits", "path", "fragment"), REJECTIONS)
def test_rejection_names_file_and_key_path(
    edits: tuple[tuple[str, Any], ...], path: str, fragment: str
) -> None:
    with pytest.raises(DefinitionError) as info:
        parse(build(*edits))
    assert_names(info.value, path, fragment)


def test_design_example_message_is_exact() -> None:
    with pytest.raises(DefinitionError) as info:
        parse(build(("policy.overlap", "parallel")))
    assert (
        str(info.value) == 'report.toml: policy.max_active_runs: required when overlap = "parallel"'
    )
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("at", "fragment"),
    [
        ("2026-12-24T18:00:00", "local date-time has no UTC offset"),
        ("2026-12-24 18:00:00.5", "local date-time has no UTC offset"),
        ("2026-12-24", "local date or time is not an instant"),
        ("18:00:00", "local date or time is not an instant"),
    ],
)
def test_toml_local_date_times_are_refused_for_at(at: str, fragment: str) -> None:
    error = rejection(f'id = "x"\n[trigger]\nat = {at}\n[run]\ncommand = "true"\n')
    assert_names(error, "trigger.at", fragment)
    assert "+01:00" in str(error)


def test_document_that_is_not_a_table() -> None:
    with pytest.raises(DefinitionError, match=r"^report\.toml: .*must be a table"):
        definition_from_document(["x"], SOURCE)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('id = "x"\n[trigger\ncron = "0 * * * *"\n', "line 2, column"),
        ('id = "x"\nid = "y"\n', "line 2, column"),
        ('id = "x"\ndescription = \n', "line 2, column"),
        ("a = " + "[" * 3000 + "]" * 3000, ""),
    ],
)
def test_toml_syntax_errors_keep_line_and_column(text: str, where: str) -> None:
    error = rejection(text)
    assert error.path == ""
    assert str(error).startswith(f"{SOURCE}: invalid TOML: ")
    assert where in str(error)


@pytest.mark.parametrize(
    "text",
    [
        'id = "x"\n[trigger\ncron = "0 * * * *"\n',
        'id = "x"\nid = "y"\n',
        'id = "x"\ndescription = \n',
        "at = 2026-13-01T00:00:00Z\n",
        'a = "\\q"\n',
        "a = { b = 1, }\n",
        "a = " + "[" * 3000 + "]" * 3000,
    ],
)
def test_toml_errors_are_the_standard_librarys_word_for_word(text: str) -> None:
    """The compiled parser (tomli) refuses these too, but the message shown
    is tomllib's, as before the switch: same words, line and column."""
    import tomli

    with pytest.raises(Exception) as fast:
        tomli.loads(text)
    assert isinstance(fast.value, tomli.TOMLDecodeError | RecursionError)
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        expected = f"{SOURCE}: invalid TOML: {exc}"
    except RecursionError:
        expected = f"{SOURCE}: invalid TOML: nested too deeply"
    assert str(rejection(text)) == expected


def test_toml_is_parsed_by_the_compiled_parser_and_tomllib_has_the_last_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tomli

    expected = parse(BASE)
    text = to_toml(expected)
    calls: list[str] = []
    real = tomli.loads

    def counted(given: str) -> dict[str, Any]:
        calls.append(given)
        return real(given)

    monkeypatch.setattr(tomli, "loads", counted)
    assert parse_definition(text, SOURCE, now=NOW) == expected
    assert calls == [text]

    def refusing(given: str) -> dict[str, Any]:
        raise tomli.TOMLDecodeError("refused", given, 0)

    # A file the fast parser refused but tomllib reads is read, as tomllib reads it.
    monkeypatch.setattr(tomli, "loads", refusing)
    assert parse_definition(text, SOURCE, now=NOW) == expected


def test_never_fires_probe_only_runs_with_now() -> None:
    document = build(("trigger.cron", "0 0 30 2 *"))
    definition = parse(document, now=None)
    assert isinstance(definition.trigger, CronTrigger)
    with pytest.raises(DefinitionError, match="never fires"):
        parse(document, now=NOW)
    # Loading an already-stored definition back never probes.
    stored = json.loads(canonical_json(definition))
    assert definition_from_document(stored, "store") == definition


# ---------------------------------------------------------------- acceptance


def test_full_definition_parses_into_frozen_types() -> None:
    definition = parse_definition(FULL_TOML, SOURCE, now=NOW)
    assert definition.id == "hourly-report"
    assert definition.trigger == CronTrigger(
        cron="@hourly", timezone="Europe/Berlin", normalized="0 * * * *"
    )
    assert definition.run.command == ("python3", "report.py", "--hourly")
    assert definition.run.command_written == ("python3", "report.py", "--hourly")
    assert definition.run.cwd == "/srv/reports"
    assert definition.run.env == (("A_FIRST", "1"), ("REPORT_BUCKET", "sales"))
    assert (definition.run.timeout, definition.run.kill_grace) == (7200, 15)
    assert definition.run.interrupt_exit_code == 75
    assert definition.policy.overlap == "parallel"
    assert definition.policy.max_active_runs == 2
    assert (definition.policy.misfire, definition.policy.lateness) == ("latest", 90)
    assert definition.on_failure == ("notify-send-mail", "ops@example.com")
    assert [b.target for b in definition.inputs] == ["team", "report.time", "report.parts"]


def test_defaults() -> None:
    definition = parse(BASE)
    assert definition.trigger == CronTrigger("0 * * * *", "UTC", "0 * * * *")
    assert definition.run.timeout is None
    assert definition.run.kill_grace == 10
    assert definition.run.cwd is None and definition.run.env == ()
    assert definition.run.interrupt_exit_code is None
    assert definition.policy.overlap == "skip"
    assert definition.policy.max_active_runs is None
    assert (definition.policy.misfire, definition.policy.lateness) == ("skip", 60)
    assert definition.description is None and definition.on_failure is None
    assert definition.inputs == ()


def test_string_command_is_frozen_as_sh_c() -> None:
    definition = parse(build(("run.command", "echo hi | tr a-z A-Z")))
    assert definition.run.command == ("/bin/sh", "-c", "echo hi | tr a-z A-Z")
    assert definition.run.command_written == "echo hi | tr a-z A-Z"


def test_argv_is_frozen_as_written() -> None:
    definition = parse(build(("run.command", ["report", " spaced ", "$HOME"])))
    assert definition.run.command == ("report", " spaced ", "$HOME")


@pytest.mark.parametrize(
    ("at", "epoch"),
    [
        ("2027-01-01T00:00:00+01:00", 1798758000),
        ('"2027-01-01T00:00:00+01:00"', 1798758000),
        ('"2026-12-31T23:00:00Z"', 1798758000),
        ('"2026-12-31t23:00:00z"', 1798758000),
        ('"2026-12-31 23:00:00-00:00"', 1798758000),
        ("2026-12-31T23:00:00.999Z", 1798758000),
        ('"2026-12-31T23:00:00.999999999Z"', 1798758000),
        ('"2026-12-31T23:00:59.9+00:00"', 1798758059),
        ("2000-01-01T00:00:00Z", 946684800),  # already past: accepted, misfire decides
    ],
)
def test_at_offset_date_times(at: str, epoch: int) -> None:
    text = f'id = "x"\n[trigger]\nat = {at}\n[run]\ncommand = "true"\n'
    definition = parse_definition(text, SOURCE, now=NOW)
    assert isinstance(definition.trigger, OneShotTrigger)
    assert definition.trigger.at == epoch
    assert parse_definition(to_toml(definition), SOURCE, now=NOW) == definition


def test_max_active_runs_with_parallel() -> None:
    definition = parse(build(("policy.overlap", "parallel"), ("policy.max_active_runs", 3)))
    assert definition.policy.max_active_runs == 3


def test_zero_lateness_and_kill_grace_are_allowed() -> None:
    definition = parse(build(("policy.lateness", 0), ("run.kill_grace", "0s")))
    assert (definition.policy.lateness, definition.run.kill_grace) == (0, 0)


def test_empty_notify_table_means_no_notification() -> None:
    assert parse(build(("notify", {}))).on_failure is None


def test_every_bound_is_inclusive_and_round_trips() -> None:
    definition = parse(
        build(
            ("run.timeout", "3650d"),
            ("run.kill_grace", 315_360_000),
            ("policy.lateness", "87600h"),
            ("run.env", {f"V{i:03d}": "" for i in range(256)}),
            ("run.cwd", "/" + "d" * 4094),
            ("description", "\u00e9" * 2048),  # 4,096 bytes of UTF-8
            ("notify.on_failure", ["x" * 65_535]),  # with its NUL: 64 KiB
        )
    )
    run = definition.run
    assert run.timeout == run.kill_grace == definition.policy.lateness == MAX_DURATION
    assert len(run.env) == 256
    assert parse_definition(to_toml(definition), SOURCE, now=NOW) == definition


def test_env_size_counts_name_equals_value() -> None:
    # "V=" + value: exec receives each variable as one NAME=value string.
    assert parse(build(("run.env", {"V": "x" * (65_536 - 2)}))).run.env[0][0] == "V"
    with pytest.raises(DefinitionError, match="65,537 bytes as NAME=value strings"):
        parse(build(("run.env", {"V": "x" * 1000, "W": "y" * (65_536 - 1004 + 1)})))


@pytest.mark.parametrize(
    ("at", "epoch"),
    [
        ("9999-12-31T23:59:59Z", MAX_INSTANT),
        ("9999-12-31T18:59:59-05:00", MAX_INSTANT),
        ("0001-01-01T00:00:01Z", MIN_INSTANT + 1),
        ("0001-01-01T14:00:01+14:00", MIN_INSTANT + 1),
    ],
)
@pytest.mark.parametrize("quoted", [False, True], ids=["toml-date-time", "string"])
def test_one_shot_at_the_ends_of_representable_time(at: str, epoch: int, quoted: bool) -> None:
    written = f'"{at}"' if quoted else at
    text = f'id = "x"\n[trigger]\nat = {written}\n[run]\ncommand = "true"\n'
    definition = parse_definition(text, SOURCE, now=NOW)
    assert isinstance(definition.trigger, OneShotTrigger)
    assert definition.trigger.at == epoch
    assert parse_definition(to_toml(definition), SOURCE, now=NOW) == definition


def test_a_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    text = to_toml(parse(BASE))
    assert parse_definition("\ufeff" + text, SOURCE, now=NOW) == parse(BASE)
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert load_definition_file(path, now=NOW) == parse(BASE)
    # Only a leading one: elsewhere it is a character like any other.
    with pytest.raises(DefinitionError, match="invalid TOML"):
        parse_definition(text + "\ufeff", SOURCE, now=NOW)


# ---------------------------------------------------------------- files


def test_load_file_names_the_path_as_given(tmp_path: Path) -> None:
    path = tmp_path / "report.toml"
    path.write_text('id = "report"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = "true"\n')
    assert load_definition_file(path, now=NOW).id == "report"
    path.write_text('id = "Report"\n')
    with pytest.raises(DefinitionError) as info:
        load_definition_file(str(path))
    assert str(info.value).startswith(f"{path}: id: ")


def test_load_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(DefinitionError) as info:
        load_definition_file(missing)
    assert str(info.value) == f"{missing}: cannot read: No such file or directory"


def test_load_a_folder_or_a_fifo_with_nothing_written(tmp_path: Path) -> None:
    """What reading says of a path that is no regular file (apply reads
    every `*.toml` entry it is given by name): a folder is refused by name,
    and a fifo whose writer closes at once is an empty file."""
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    with pytest.raises(DefinitionError) as info:
        load_definition_file(folder)
    assert str(info.value) == f"{folder}: cannot read: Is a directory"
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: open(fifo, "wb").close())
    writer.start()
    with pytest.raises(DefinitionError) as info:
        load_definition_file(fifo)
    writer.join()
    assert str(info.value) == f'{fifo}: id: required, e.g. id = "hourly-report"'


def test_load_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'id = "caf\xe9"\n')
    with pytest.raises(DefinitionError, match=r"cannot read: not UTF-8"):
        load_definition_file(path)


def test_load_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO('id = "x"\n[trigger]\ncron = "0 * * * *"\n'))
    with pytest.raises(DefinitionError) as info:
        load_definition_file("-", now=NOW)
    assert str(info.value).startswith("<stdin>: run: required")
    monkeypatch.setattr("sys.stdin", io.StringIO(to_toml(parse(BASE))))
    assert load_definition_file("-", now=NOW) == parse(BASE)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_parse_and_round_trip(path: Path) -> None:
    definition = load_definition_file(path, now=NOW)
    assert definition.id == path.stem
    assert parse_definition(to_toml(definition), SOURCE, now=NOW) == definition
    stored = json.loads(canonical_json(definition))
    assert definition_from_document(stored, "store") == definition


def test_required_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {
        "hourly-report.toml",
        "nightly-backup.toml",
        "new-year-oneshot.toml",
        "parallel-crawl.toml",
    } <= names


def test_examples_cover_what_they_promise() -> None:
    by_name = {p.stem: load_definition_file(p, now=NOW) for p in EXAMPLES}
    hourly = by_name["hourly-report"]
    assert hourly.trigger == CronTrigger("0 * * * *", "Europe/Berlin", "0 * * * *")
    assert hourly.policy.misfire == "latest"
    kinds = {next(iter(b.expression)) for b in hourly.inputs}
    assert kinds == {"literal", "occurrence", "array", "object"}
    backup = by_name["nightly-backup"]
    assert backup.run.timeout and backup.run.kill_grace and backup.policy.overlap == "skip"
    oneshot = by_name["new-year-oneshot"].trigger
    assert isinstance(oneshot, OneShotTrigger) and oneshot.at > NOW
    crawl = by_name["parallel-crawl"]
    assert crawl.policy.overlap == "parallel" and crawl.policy.max_active_runs == 3
    assert isinstance(crawl.trigger, CronTrigger) and crawl.trigger.cron.startswith("*/5 ")


# ------------------------------------------------------------------ round trips


def test_full_round_trips_through_toml_and_json() -> None:
    definition = parse_definition(FULL_TOML, SOURCE, now=NOW)
    text = to_toml(definition)
    assert parse_definition(text, SOURCE, now=NOW) == definition
    assert 'timeout = "2h"' in text and 'kill_grace = "15s"' in text
    assert "null" not in text
    stored = json.loads(canonical_json(definition))
    assert definition_from_document(stored, "store") == definition
    assert stored["run"]["timeout"] == 7200  # JSON durations are seconds


def test_minimal_to_toml_drops_absent_values() -> None:
    text = to_toml(parse(BASE))
    assert "description" not in text and "cwd" not in text and "notify" not in text
    assert "env" not in text and "input" not in text
    assert parse_definition(text, SOURCE) == parse(BASE)


def test_canonical_json_is_stable() -> None:
    one = parse_definition(FULL_TOML, SOURCE, now=NOW)
    reordered = FULL_TOML.replace(
        'env = { REPORT_BUCKET = "sales", A_FIRST = "1" }',
        'env = { A_FIRST = "1", REPORT_BUCKET = "sales" }',
    )
    two = parse_definition(reordered, SOURCE, now=NOW)
    assert canonical_json(one) == canonical_json(two) == canonical_json(one)
    again = parse_definition(to_toml(one), SOURCE, now=NOW)
    assert canonical_json(again) == canonical_json(one)
    assert json.loads(canonical_json(one))["id"] == "hourly-report"
    assert " " not in canonical_json(parse(BASE)).replace("0 * * * *", "")


def test_canonical_json_detects_changes() -> None:
    base = parse(BASE)
    changed = parse(build(("run.timeout", "1h")))
    assert canonical_json(base) != canonical_json(changed)
    # Same meaning, different spelling of a duration: unchanged.
    assert canonical_json(parse(build(("run.timeout", 3600)))) == canonical_json(changed)


# -------------------------------------------------------------------- property

units = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@settings(max_examples=100, deadline=None)
@given(
    amount=st.integers(min_value=0, max_value=10**7),
    unit=st.sampled_from(sorted(units)),
    as_int=st.booleans(),
)
def test_duration_spellings(amount: int, unit: str, as_int: bool) -> None:
    seconds = amount * units[unit]
    written: int | str = seconds if as_int else f"{amount}{unit}"
    if seconds > MAX_DURATION:
        with pytest.raises(DefinitionError) as info:
            parse(build(("policy.lateness", written)), now=None)
        assert_names(info.value, "policy.lateness", "at most 315360000 seconds")
        return
    definition = parse(build(("policy.lateness", written), ("run.kill_grace", written)), now=None)
    assert definition.policy.lateness == seconds
    assert definition.run.kill_grace == seconds
    assert parse_definition(to_toml(definition), SOURCE) == definition
    if seconds:
        timed = parse(build(("run.timeout", written)), now=None)
        assert timed.run.timeout == seconds


@settings(max_examples=100, deadline=None)
@given(
    st.integers(max_value=-1)
    | st.floats()
    | st.booleans()
    | st.text(max_size=6).filter(lambda v: not re.fullmatch(r"\s*\d+[smhd]\s*", v))
)
def test_non_durations_are_refused(value: object) -> None:
    document = build(("policy.lateness", value))
    with pytest.raises(DefinitionError) as info:
        definition_from_document(document, SOURCE)
    assert str(info.value).startswith(f"{SOURCE}: policy.lateness: ")


@settings(max_examples=100, deadline=None)
@given(
    command=st.text(min_size=1).filter(lambda t: t.strip() and "\0" not in t),
    description=st.text(max_size=1000),  # 4,096 bytes of UTF-8 at most
)
def test_any_string_round_trips_through_toml(command: str, description: str) -> None:
    definition = parse(build(("run.command", command), ("description", description)), now=None)
    assert parse_definition(to_toml(definition), SOURCE) == definition
