"""Shell completions: the committed scripts are what click generates today,
and completion itself (commands, options, schedule ids) works.

Regenerate the scripts with `completions/regenerate.sh`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import CliRun

from wfsched.cli.main import cli

COMPLETIONS = Path(__file__).resolve().parent.parent / "completions"


def complete(env: dict[str, str]) -> str:
    result = CliRunner().invoke(cli, [], env=env, prog_name="wfsched", catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_committed_completion_script_is_current(shell: str) -> None:
    generated = complete({"_WFSCHED_COMPLETE": f"{shell}_source"})
    committed = (COMPLETIONS / f"wfsched.{shell}").read_text()
    assert generated.strip() == committed.strip(), (
        f"completions/wfsched.{shell} is stale; run completions/regenerate.sh"
    )


def bash_complete(*words: str) -> list[str]:
    out = complete(
        {
            "_WFSCHED_COMPLETE": "bash_complete",
            "COMP_WORDS": " ".join(("wfsched", *words)),
            "COMP_CWORD": str(len(words)),
        }
    )
    return [line.split(",", 1)[1] for line in out.splitlines() if line]


def test_commands_and_options_complete() -> None:
    assert {"apply", "occurrences", "status", "validate"} <= set(bash_complete(""))
    assert bash_complete("occ") == ["occurrences"]
    assert bash_complete("apply", "--p") == ["--prune"]


def test_schedule_ids_complete_from_the_store(
    run_cli: CliRun, make_definition: Callable[..., Path]
) -> None:
    assert bash_complete("get", "") == []  # no store yet: nothing, and no error
    for schedule_id in ("hourly-report", "hourly-sync", "nightly"):
        assert run_cli("create", str(make_definition(schedule_id)))[0] == 0
    assert bash_complete("get", "hourly") == ["hourly-report", "hourly-sync"]
    assert bash_complete("pause", "n") == ["nightly"]
