"""The operator's surface (issue 8): contract points, failures an operator can
see, safer apply, paging hints, completions, escaped terminal output."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliRun, definition_text

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
