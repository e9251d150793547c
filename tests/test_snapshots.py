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
import re
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
    # A manual run of paris, cancelled: `list` says `cancelled (manual)`.
    h.runs.request_trigger("paris")
    h.tick_at(T0 + 16 * MINUTE)
    h.runs.request_cancel("run-000003")
    h.tick_at(T0 + 16 * MINUTE + 2)
    h.control.finish("run-000003", exit_code=None, outcome="cancelled", reason="cancelled")
    h.tick_at(T0 + 16 * MINUTE + 3)
    h.store.close()
    clock.now = T0 + 20 * MINUTE
    return store_path


TABLES = [
    ("list", ["list"]),
    ("list-all", ["list", "--all"]),
    ("status", ["status"]),
    ("runs", ["runs"]),
    ("runs-reverse", ["runs", "--reverse", "--limit", "2"]),
    ("runs-show", ["runs", "show", "run-2"]),
    ("next", ["next", "report", "--count", "4"]),
    ("next-paused", ["next", "nightly", "--count", "2"]),
    ("occurrences", ["occurrences", "report"]),
    ("occurrences-reverse", ["occurrences", "report", "--reverse"]),
]


@pytest.mark.parametrize(("name", "args"), TABLES)
def test_human_table(run_cli: CliRun, scene: Path, name: str, args: list[str]) -> None:
    code, out, err = run_cli(*args)
    assert (code, err) == (0, "")
    out = out.replace(str(scene), "<store>")
    assert_snapshot(name, re.sub(r"(?m)^host( +)\S+", r"host\1<host>", out))


def test_field_tables_fit_the_terminal(clock: SettableClock, scene: Path) -> None:
    """`status` and `runs show` (field and value; a value longer than the
    terminal, such as a path, is the one thing folded) fit 80 columns."""
    for args in (["status"], ["runs", "show", "run-2"]):
        out = _render(clock, args, 80)
        assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
    assert "1  failed  2026-12-01T09:15:00Z" in _render(clock, ["runs", "show", "2"], 80)


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize(
    ("name", "args"), [table for table in TABLES if table[0] not in ("status", "runs-show")]
)
def test_human_table_fits_the_terminal(
    clock: SettableClock, scene: Path, name: str, args: list[str], width: int
) -> None:
    """At 80 and 120 columns every line fits, and no id, state or time is
    cut: whole columns are left out instead, least needed first."""
    out = _render(clock, args, width)
    assert_snapshot(f"{name}-{width}", out.replace(str(scene), "<store>"))
    assert max(len(line.rstrip()) for line in out.splitlines()) <= width
    for word in ("run-000001", "run-000002", "completed", "2026-12-01T09:30:00Z"):
        if word in _render(clock, args, 200):
            assert word in out, f"{word} cut or dropped at {width} columns"


def test_wide_shows_every_column_beyond_the_terminal(clock: SettableClock, scene: Path) -> None:
    narrow = _render(clock, ["list", "--wide"], 80)
    assert narrow == _render(clock, ["list"], 300)
    assert "REV" in narrow and "REV" not in _render(clock, ["list"], 80)


def test_list_shows_the_last_run_and_its_outcome(clock: SettableClock, scene: Path) -> None:
    rows = {line.split()[0]: line for line in _render(clock, ["list"], 200).splitlines()[2:]}
    assert "cancelled (manual)" in rows["paris"] and "2026-12-01T09:16:00Z" in rows["paris"]
    assert " failed " in rows["report"] and "10m" in rows["report"]


def _render(clock: SettableClock, args: list[str], width: int) -> str:
    """A command's stdout through a console `width` columns wide (a terminal)."""
    from click.testing import CliRunner
    from rich.console import Console

    from wfsched.cli import CliState
    from wfsched.cli.main import cli

    console = Console(width=width, color_system=None, highlight=False, soft_wrap=False)
    result = CliRunner().invoke(
        cli, args, obj=CliState(clock=clock, console=console), catch_exceptions=False
    )
    assert (result.exit_code, result.stderr) == (0, ""), result.stderr
    return result.stdout


def test_snapshot_mismatch_names_the_way_to_update(tmp_path: Path) -> None:
    if UPDATE:
        pytest.skip("rewriting snapshots")
    with pytest.raises(AssertionError, match="WFSCHED_UPDATE_SNAPSHOTS=1"):
        assert_snapshot("list", "not the table\n")
