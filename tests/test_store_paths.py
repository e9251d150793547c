"""A store path that is no store, a broken database, a refused copy: each is
refused in one line and leaves nothing behind (issue 26, item 9)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliRun

from tests.daemon import Daemon
from tests.test_retention import build
from wfsched.store import open_location, resolve_store
from wfsched.store.ownership import Ownership

COMMANDS = [
    ("list",),
    ("status",),
    ("runs",),
    ("audit",),
    ("get", "x"),
    ("apply", "DEFS"),
    ("create", "DEFS/x.toml"),
]


def _args(command: tuple[str, ...], defs: Path) -> list[str]:
    return [part.replace("DEFS", str(defs)) for part in command]


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under root with its bytes (None for a directory)."""
    return {
        str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
        for path in sorted(root.rglob("*"))
    }


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("below", [False, True], ids=["file", "below-a-file"])
def test_a_store_path_that_is_a_file_is_a_usage_error_everywhere(
    tmp_path: Path,
    run_cli: CliRun,
    make_definition: Callable[..., Path],
    command: tuple[str, ...],
    below: bool,
) -> None:
    defs = make_definition("x").parent
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("notes\n")
    store = blocker / "store" if below else blocker
    before = tree(tmp_path)
    code, out, err = run_cli("--store", str(store), *_args(command, defs))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and str(blocker) in err and "not a directory" in err
    assert tree(tmp_path) == before


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_file_that_is_no_database_is_refused_and_nothing_is_created(
    tmp_path: Path, run_cli: CliRun, make_definition: Callable[..., Path], command: tuple[str, ...]
) -> None:
    defs = make_definition("x").parent
    store = tmp_path / "broken"
    store.mkdir()
    (store / "wfsched.db").write_bytes(b"this is not a database, just bytes\n" * 200)
    before = tree(store)
    code, out, err = run_cli("--store", str(store), *_args(command, defs))
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and "not a usable wfsched database" in err
    assert tree(store) == before


def test_the_supervisor_on_a_file_that_is_no_database_leaves_no_lock_or_keeper(
    tmp_path: Path,
) -> None:
    store = tmp_path / "broken"
    store.mkdir()
    (store / "wfsched.db").write_bytes(b"\x00garbage" * 1000)
    before = tree(store)
    daemon = Daemon(store)
    assert daemon.wait_exit() == 1
    assert "not a usable wfsched database" in daemon.text()
    assert tree(store) == before


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_copy_refused_because_the_source_is_owned_creates_no_destination(
    tmp_path: Path, run_cli: CliRun, kind: str, request: pytest.FixtureRequest
) -> None:
    build(tmp_path / "source").store.close()
    destination = (
        str(request.getfixturevalue("pg_url")) if kind == "postgresql" else str(tmp_path / "dest")
    )
    owner = Ownership(tmp_path / "source" / "supervisor.lock")
    owner.acquire()
    try:
        code, out, err = run_cli(
            "--store", str(tmp_path / "source"), "store", "copy", "--to", destination
        )
    finally:
        owner.release()
    assert (code, out) == (4, "") and "another supervisor" in err
    assert not (tmp_path / "dest").exists()
    assert open_location(resolve_store(destination), create=False) is None
