"""Snapshots of the human tables (`list`, `status`, `runs`, `next`,
`occurrences`), rendered through the injected fixed-width console.

The expected text lives in `tests/snapshots/<name>.txt`, so a change to a
table's layout shows up as a reviewed diff of those files. After an intended
change, rewrite them with

    WFSCHED_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_snapshots.py

and commit the files with the change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import CliRun, SettableClock

from tests.test_supervisor_loop import MINUTE, T0, Harness
from wfsched.domain.definition import parse_definition

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("WFSCHED_UPDATE_SNAPSHOTS") == "1"


def assert_snapshot(name: str, text: str) -> None:
    """Compare (or, when updating, write); trailing blanks are not layout."""
    text = "".join(f"{line.rstrip()}\n" for line in text.splitlines())
    path = SNAPSHOTS / f"{name}.txt"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"no snapshot {path.name}; create it with WFSCHED_UPDATE_SNAPSHOTS=1"
    expected = path.read_text()
    assert text == expected, (
        f"{name} differs from {path} (if intended: WFSCHED_UPDATE_SNAPSHOTS=1)\n"
        f"--- expected\n{expected}--- got\n{text}"
    )


@pytest.fixture
def scene(store_path: Path, clock: SettableClock) -> Path:
    """A store with a little of everything: a completed and a failed run, a
    paused schedule, a one-shot, skipped history; the CLI's clock after it."""
    h = Harness(store_path)
    h.define("report", cron="*/15 * * * *")
    h.define("old", cron="0 3 * * *")
    paris = (
        'id = "paris"\n[trigger]\ncron = "0 3 * * *"\ntimezone = "Europe/Paris"\n'
        '[run]\ncommand = ["true"]\n'
    )
    h.admin.create(parse_definition(paris, "paris.toml", now=int(h.clock())))
    h.define("nightly", cron="30 1 * * *")
    once = 'id = "once"\n[trigger]\nat = "2026-12-24T18:00:00Z"\n[run]\ncommand = ["true"]\n'
    h.admin.create(parse_definition(once, "once.toml", now=int(h.clock())))
    h.admin.pause("nightly")
    h.admin.delete("old")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=0)
    h.tick_at(T0 + 5)
    h.tick_at(T0 + 15 * MINUTE)
    h.control.finish("run-000002", exit_code=3)
    h.tick_at(T0 + 15 * MINUTE + 7)
    h.store.close()
    clock.now = T0 + 20 * MINUTE
    return store_path


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("list", ["list"]),
        ("list-all", ["list", "--all"]),
        ("status", ["status"]),
        ("runs", ["runs"]),
        ("next", ["next", "report", "--count", "4"]),
        ("occurrences", ["occurrences", "report"]),
    ],
)
def test_human_table(run_cli: CliRun, scene: Path, name: str, args: list[str]) -> None:
    code, out, err = run_cli(*args)
    assert (code, err) == (0, "")
    assert_snapshot(name, out.replace(str(scene), "<store>"))


def test_snapshot_mismatch_names_the_way_to_update(tmp_path: Path) -> None:
    if UPDATE:
        pytest.skip("rewriting snapshots")
    with pytest.raises(AssertionError, match="WFSCHED_UPDATE_SNAPSHOTS=1"):
        assert_snapshot("list", "not the table\n")
