"""Runs and hosts: each run records the host that executed it, on both stores.

`supervise --host NAME` (config `host`, default the machine's host name)
names the host on every run the supervisor admits, scheduled or manual; the
run's JSON and `runs show` show it; runs recorded before schema version 5
show none.
"""

from __future__ import annotations

import json
import re
import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliRun

from tests.daemon import Daemon, StoreName, wait_for, wfsched, wfsched_json, write_definition
from tests.test_supervisor_loop import T0, Harness
from wfsched.domain.config import SupervisorConfig, load_config
from wfsched.errors import DefinitionError
from wfsched.store import Store

# -- the setting ------------------------------------------------------------------------


def test_the_host_defaults_to_the_machine_host_name(tmp_path: Path) -> None:
    assert SupervisorConfig().host == socket.gethostname()
    assert load_config(tmp_path, {}).host == socket.gethostname()


def test_the_host_comes_from_the_file_then_the_flag(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('host = "db-1.example.com"\n')
    assert load_config(tmp_path, {}).host == "db-1.example.com"
    assert load_config(tmp_path, {"host": "web_2"}).host == "web_2"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ('""', "must not be empty"),
        ('"two words"', "only letters, digits"),
        ('"-leading-dash"', "only letters, digits"),
        ('"a/b"', "only letters, digits"),
        ('"' + "h" * 254 + '"', "at most 253"),
        ("7", "must be a string"),
    ],
)
def test_a_bad_host_in_the_file_names_file_and_key(tmp_path: Path, value: str, words: str) -> None:
    (tmp_path / "config.toml").write_text(f"host = {value}\n")
    with pytest.raises(DefinitionError) as caught:
        load_config(tmp_path, {})
    assert str(caught.value).startswith(f"{tmp_path / 'config.toml'}: host: ")
    assert words in str(caught.value)


def test_an_unusable_machine_host_name_asks_for_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "")
    with pytest.raises(DefinitionError, match="must not be empty; give --host or config host"):
        load_config(tmp_path, {})
    assert load_config(tmp_path, {"host": "ok"}).host == "ok"


@pytest.mark.parametrize("bad", ["", "has space", "x" * 300, "semi;colon"])
def test_supervise_refuses_a_bad_host_with_one_line_exit_2_and_nothing_written(
    tmp_path: Path, bad: str
) -> None:
    store = tmp_path / "store"
    result = wfsched(store, "supervise", "--host", bad)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("wfsched: error: command line: --host: ")
    assert result.stderr.count("\n") == 1
    assert not store.exists()


def test_supervise_refuses_a_bad_host_in_config_toml(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "config.toml").write_text('host = "no good"\n')
    result = wfsched(store, "supervise")
    assert result.returncode == 2
    assert result.stderr == (
        f"wfsched: error: {store / 'config.toml'}: host: 'no good': only letters, digits,"
        " '.', '-' and '_', starting with a letter or digit\n"
    )
    assert sorted(path.name for path in store.iterdir()) == ["config.toml"]


# -- every run records its host ---------------------------------------------------------


def test_scheduled_and_manual_runs_record_the_supervisor_host(
    tmp_path: Path, make_store: Callable[[Path], Store], run_cli: CliRun
) -> None:
    h = Harness(make_store(tmp_path / "s"), host="alpha")
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    h.runs.request_trigger("a")
    h.tick_at(T0 + 1)
    runs, _ = h.runs.list()
    assert [(run["kind"], run["host"]) for run in runs] == [
        ("manual", "alpha"),
        ("scheduled", "alpha"),
    ]
    assert h.runs.show("run-000001")["host"] == "alpha"
    # Another supervisor (another host) records its own name; earlier runs keep theirs.
    h.supervisor = h.new_supervisor(host="beta")
    h.runs.request_trigger("a")
    h.tick_at(T0 + 2)
    assert [run["host"] for run in h.runs.list()[0]] == ["beta", "alpha", "alpha"]


def test_runs_show_prints_the_host(tmp_path: Path, run_cli: CliRun, store_path: Path) -> None:
    h = Harness(store_path, host="alpha")
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    h.store.close()
    code, out, err = run_cli("runs", "show", "run-000001")
    assert code == 0, err
    assert re.search(r"^\W*host\W+alpha\W*$", out, re.MULTILINE), out


# -- runs from before schema version 5 --------------------------------------------------


UNDO_VERSION_5 = (
    "DROP TABLE leader_lease",
    "DROP TABLE hosts",
    "ALTER TABLE runs DROP COLUMN host",
    "ALTER TABLE attempts DROP COLUMN stdout_tail",
    "ALTER TABLE attempts DROP COLUMN stderr_tail",
)
"""What migrations 5 and 6 added: dropping it leaves the store a version 4 wrote."""


def test_runs_recorded_before_version_5_have_no_host(
    tmp_path: Path,
    store_kind: str,
    make_store: Callable[[Path], Store],
    request: pytest.FixtureRequest,
    run_cli: CliRun,
) -> None:
    h = Harness(make_store(tmp_path / "s"))
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    h.store.close()
    store: StoreName
    if store_kind == "sqlite":
        store = tmp_path / "s"
        db = sqlite3.connect(store / "wfsched.db")
        for statement in UNDO_VERSION_5:
            db.execute(statement)
        db.execute("PRAGMA user_version = 4")
        db.commit()
        db.close()
    else:
        import psycopg

        store = str(request.getfixturevalue("pg_url"))
        with psycopg.connect(store) as conn:
            for statement in UNDO_VERSION_5:
                conn.execute(statement)  # type: ignore[arg-type]
            conn.execute("UPDATE schema_version SET version = 4")
    code, out, err = run_cli("--store", str(store), "runs", "show", "run-000001", "--json")
    assert code == 0, err
    assert json.loads(out)["host"] is None
    code, out, err = run_cli("--store", str(store), "runs", "show", "run-000001")
    assert code == 0, err
    assert "not recorded" in out
    # The upgraded schema is the one a new store gets.
    # (The fake launcher wrote no run directory: only the schema is in question here.)
    code, out, err = run_cli("--store", str(store), "audit", "--json")
    assert [v for v in json.loads(out)["violations"] if v["check"] == "schema"] == []


# -- the real daemon ----------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path, store_kind: str, request: pytest.FixtureRequest) -> StoreName:
    if store_kind == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return tmp_path / "store"


def test_supervise_host_is_recorded_on_the_runs_it_executes(
    store: StoreName, tmp_path: Path
) -> None:
    path = write_definition(
        tmp_path / "defs",
        "job",
        'id = "job"\n[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["true"]\n',
    )
    assert wfsched(store, "create", str(path)).returncode == 0
    daemon = Daemon(store, "--host", "worker-7")
    try:
        daemon.wait_started()
        assert " host=worker-7 " in daemon.text()
        assert wfsched(store, "trigger", "job").returncode == 0
        wait_for(
            lambda: wfsched_json(store, "runs", "show", "run-000001")["state"] == "completed",
            what="the triggered run",
        )
    finally:
        daemon.stop()
    assert wfsched_json(store, "runs")["items"][0]["host"] == "worker-7"
    assert wfsched_json(store, "runs", "show", "run-000001")["host"] == "worker-7"
