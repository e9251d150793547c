"""An operator's first week (the CLI, the shipped unit, the local directory):
the traps a new operator met, each pinned through the real CLI."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a subprocess, with `env` as given."""
    return subprocess.run(
        [sys.executable, "-m", "wfsched", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_help_and_package_say_more_than_one_host_and_name_postgresql_urls() -> None:
    shown = cli("--help")
    assert shown.returncode == 0, shown.stderr
    assert "for one host" not in shown.stdout
    assert "postgresql://" in shown.stdout.split("--store", 1)[1].split("--debug", 1)[0]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "one host" not in project["description"].replace("one host on SQLite", "")
    assert "PostgreSQL" in project["description"]
