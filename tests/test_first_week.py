"""An operator's first week (the CLI, the shipped unit, the local directory):
the traps a new operator met, each pinned through the real CLI."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.daemon import Daemon, write_definition

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


# ------------------------------------------- a PostgreSQL store's local directory


def _env_without_home(**extra: str) -> dict[str, str]:
    """A system user's environment: HOME where nothing can be made (as root
    too: nothing is made under /proc), no XDG_STATE_HOME, no STATE_DIRECTORY."""
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_STATE_HOME", "STATE_DIRECTORY")}
    return {**env, "HOME": "/proc/nonexistent", **extra}


def _modes(top: Path) -> dict[str, int]:
    return {
        str(path.relative_to(top.parent)): stat.S_IMODE(path.stat().st_mode)
        for path in [top, *top.rglob("*")]
        if path.is_dir()
    }


def test_a_user_without_a_home_is_told_what_could_not_be_made_and_how_to_choose(
    pg_url: str,
) -> None:
    result = cli("--store", pg_url, "supervise", env=_env_without_home())
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    line = result.stderr
    assert line.startswith("wfsched: error: cannot create this host's local directory"), line
    assert "/proc/nonexistent/.local/state/wfsched/postgresql/" in line
    assert "No such file or directory" in line and "--local-dir DIR" in line
    assert "STATE_DIRECTORY" not in _env_without_home()


def test_the_local_directory_defaults_to_the_units_state_directory(
    pg_url: str, tmp_path: Path
) -> None:
    state = tmp_path / "var-lib-wfsched"
    daemon = Daemon(pg_url, env=_env_without_home(STATE_DIRECTORY=str(state)))
    try:
        daemon.wait_started()
    finally:
        assert daemon.stop() == 0
    (local,) = (state / "postgresql").iterdir()
    assert (local / "keeper.lock").exists() and (local / "runs").is_dir()
    assert set(_modes(state / "postgresql").values()) == {0o700}, _modes(state)


def test_local_dir_chooses_the_place_and_makes_it_private(pg_url: str, tmp_path: Path) -> None:
    local = tmp_path / "made" / "here"
    folder = tmp_path / "defs"
    write_definition(
        folder, "tick", 'id = "tick"\n[trigger]\ncron = "0 0 * * *"\n[run]\ncommand = ["true"]\n'
    )
    env = _env_without_home()
    applied = cli("--store", pg_url, "--local-dir", str(local), "apply", str(folder), env=env)
    assert applied.returncode == 0, applied.stderr
    assert _modes(tmp_path / "made") == {"made": 0o700, "made/here": 0o700, "made/here/runs": 0o700}
    daemon = Daemon(pg_url, env={**env, "WFSCHED_LOCAL_DIR": str(local)})
    try:
        daemon.wait_started()
        assert (local / "keeper.lock").exists()
    finally:
        assert daemon.stop() == 0
    assert not Path("/proc/nonexistent").exists()


def test_local_dir_is_refused_for_a_sqlite_store_and_nothing_is_written(tmp_path: Path) -> None:
    store = tmp_path / "store"
    local = tmp_path / "local"
    folder = tmp_path / "defs"
    write_definition(
        folder, "tick", 'id = "tick"\n[trigger]\ncron = "0 0 * * *"\n[run]\ncommand = ["true"]\n'
    )
    result = cli("--store", str(store), "--local-dir", str(local), "apply", str(folder))
    assert result.returncode == 2, result.stderr
    assert "only a PostgreSQL store has a local directory" in result.stderr
    assert not store.exists() and not local.exists()
