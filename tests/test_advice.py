"""Warnings for what surprises a cron user (docs/definitions.md, "Warnings"):
printed by validate, create and apply, never a refusal; and the three slips
that stay errors but say what was meant."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import CliRun, definition_text

from wfsched.domain.advice import advise
from wfsched.domain.definition import parse_definition

NOW = int(datetime(2026, 6, 1, 12, 0, tzinfo=UTC).timestamp())


def warnings_for(text: str, now: int = NOW) -> list[tuple[str, str]]:
    return advise(parse_definition(text, "t.toml", now=now), now)


# ------------------------------------------------------------ layer 1: pure


def test_a_fixed_time_in_the_fold_and_the_gap_is_named_with_both_nights() -> None:
    [(path, message)] = warnings_for(definition_text("n", "30 2 * * *", "Europe/Berlin"))
    assert path == "trigger.cron"
    assert "runs twice at 02:30 on 2026-10-25, the night clocks go back" in message
    assert "runs at 03:00 on 2027-03-28, the night clocks go forward" in message


def test_a_time_only_in_the_fold_names_only_the_fold() -> None:
    [(_, message)] = warnings_for(definition_text("n", "30 1 * * *", "America/New_York"))
    assert "runs twice at 01:30 on 2026-11-01" in message
    assert "forward" not in message


@pytest.mark.parametrize(
    ("cron", "zone"),
    [
        ("30 3 * * *", "Europe/Berlin"),  # after both changes
        ("0 * * * *", "Europe/Berlin"),  # an hour field of * keeps its cadence
        ("30 2 * * *", "UTC"),
        ("30 2 * * *", "Asia/Tokyo"),  # no DST
        ("30 2 1 * *", "Europe/Berlin"),  # the 1st is never a change night in 2026-27
    ],
)
def test_no_clock_change_warning_where_nothing_repeats_or_vanishes(cron: str, zone: str) -> None:
    assert warnings_for(definition_text("n", cron, zone)) == []


def test_the_clock_is_the_injected_one() -> None:
    """Twelve months from 2030: the change nights named are 2030's."""
    later = int(datetime(2030, 1, 1, tzinfo=UTC).timestamp())
    [(_, message)] = warnings_for(definition_text("n", "30 2 * * *", "Europe/Berlin"), later)
    assert "2030-03-31" in message and "2030-10-27" in message


@pytest.mark.parametrize("cron", ["0 0 */2 * 1", "0 0 13 * */2", "0 0 */3 * mon-fri"])
def test_day_fields_that_cron_ands_are_warned_about(cron: str) -> None:
    [(path, message)] = warnings_for(definition_text("n", cron))
    assert path == "trigger.cron"
    assert "OR" in message and "Vixie cron and cronie" in message


@pytest.mark.parametrize("cron", ["0 0 13 * 5", "0 0 */2 * *", "0 0 * * 1", "0 0 1-7 * 1"])
def test_day_fields_read_alike_everywhere_are_not_warned_about(cron: str) -> None:
    assert warnings_for(definition_text("n", cron)) == []


@pytest.mark.parametrize(
    ("zone", "words"),
    [
        ("EST", ["'EST' is UTC-05:00 all year", "did you mean 'America/New_York'"]),
        ("MST", ["UTC-07:00 all year", "'America/Denver'"]),
        ("Etc/GMT+5", ["UTC-05:00 all year", "behind UTC"]),
        ("Etc/GMT-3", ["UTC+03:00 all year", "ahead of UTC"]),
        ("CET", ["'CET' is a legacy zone name", "Area/City"]),
        ("EST5EDT", ["'EST5EDT' is a legacy zone name"]),
        ("US/Eastern", ["legacy zone name (it follows 'America/New_York')"]),
        ("Japan", ["it follows 'Asia/Tokyo'"]),
    ],
)
def test_legacy_and_fixed_offset_zones_are_warned_about(zone: str, words: list[str]) -> None:
    found = [m for p, m in warnings_for(definition_text("n", "0 12 * * *", zone))]
    assert len(found) == 1, found
    for word in words:
        assert word in found[0]


@pytest.mark.parametrize("zone", ["UTC", "Etc/UTC", "GMT", "Europe/Oslo", "America/Phoenix"])
def test_ordinary_zone_names_are_not_warned_about(zone: str) -> None:
    assert warnings_for(definition_text("n", "0 12 * * *", zone)) == []


def one_shot(at: str, policy: str = "") -> str:
    return f'id = "o"\n[trigger]\nat = {at}\n[run]\ncommand = ["/bin/true"]\n{policy}'


@pytest.mark.parametrize(
    ("policy", "words"),
    [
        ("", 'with misfire = "skip" it never runs'),
        ('[policy]\nmisfire = "latest"\n', 'with misfire = "latest" it runs once'),
        ('[policy]\nlateness = "2d"\n', "still within its lateness"),
    ],
)
def test_a_past_one_shot_says_what_will_happen(policy: str, words: str) -> None:
    [(path, message)] = warnings_for(one_shot("2026-05-31T12:00:00Z", policy))
    assert path == "trigger.at"
    assert "2026-05-31T12:00:00Z is already past" in message and words in message


def test_a_future_one_shot_is_not_warned_about() -> None:
    assert warnings_for(one_shot("2026-06-02T00:00:00Z")) == []


# ---------------------------------------------- errors that say what was meant


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (definition_text("n", timezone="europe/berlin"), "did you mean 'Europe/Berlin'?"),
        (
            definition_text("n", cron="0 5 * * * /usr/local/bin/backup --full"),
            "the sixth field '/usr/local/bin/backup' looks like a command",
        ),
        (
            definition_text("n", cron="17 * * * * root cd / && run-parts /etc/cron.hourly"),
            "(or, in /etc/crontab, a user): the command goes in run.command",
        ),
        (definition_text("n", cron="0 0 0 * * *"), "seconds and year fields are not supported"),
        (definition_text("n", extra="[policy]\nmisfire = None\n"), "TOML has no None"),
        (
            definition_text("n", extra='[run.env]\nA = "1"\n\n[policy]\nx = [True]\n'),
            "line 13: TOML writes True as true (lower case)",
        ),
    ],
)
def test_slips_are_errors_that_say_what_was_meant(
    run_cli: CliRun, write_toml: Callable[..., Path], store_path: Path, text: str, words: str
) -> None:
    path = write_toml("n.toml", text)
    code, out, err = run_cli("validate", str(path))
    assert code == 2 and out == ""
    assert err.startswith(f"wfsched: error: {path}: ") and words in err, err
    assert len(err.splitlines()) == 1
    code, _, _ = run_cli("create", str(path))
    assert code == 2 and not store_path.exists()


# ---------------------------------------------------- layer 2: the real CLI


def test_validate_create_and_apply_warn_and_succeed(
    run_cli: CliRun, make_definition: Callable[..., Path]
) -> None:
    berlin = make_definition("nightly", cron="30 2 * * *", timezone="Europe/Berlin")
    eastern = make_definition("eastern", cron="0 12 * * *", timezone="EST")
    code, out, err = run_cli("validate", str(berlin), str(eastern))
    assert code == 0 and out.splitlines() == [f"ok {berlin} (nightly)", f"ok {eastern} (eastern)"]
    assert err.splitlines() == [
        line for line in err.splitlines() if line.startswith("wfsched: warning: ")
    ]
    assert f"wfsched: warning: {berlin}: trigger.cron: '30 2 * * *' in Europe/Berlin" in err
    assert f"wfsched: warning: {eastern}: trigger.timezone: 'EST' is UTC-05:00" in err

    code, out, err = run_cli("create", str(eastern))
    assert code == 0 and out.startswith("created eastern")
    assert err.count("wfsched: warning: ") == 1 and "'EST'" in err

    code, out, err = run_cli("apply", str(berlin.parent))
    assert code == 0 and "created nightly" in out and "unchanged eastern" in out
    assert "Europe/Berlin" in err and "'EST'" not in err, "an unchanged file is not re-warned"

    berlin.write_text(berlin.read_text().replace("30 2", "45 2"))
    code, out, err = run_cli("apply", str(berlin.parent))
    assert code == 0 and "updated nightly" in out and "'45 2 * * *' in Europe/Berlin" in err

    code, out, err = run_cli("apply", str(berlin.parent))
    assert code == 0 and err == ""
