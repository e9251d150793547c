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
from conftest import CliRun, SettableClock

from tests.daemon import Daemon, StoreName, wait_for, wfsched, wfsched_json, write_definition
from tests.test_supervisor_loop import T0, Harness
from wfsched.domain.config import LocalSettings, SupervisorConfig, load_config, local_settings
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
    "ALTER TABLE applied DROP COLUMN source_path",
    "ALTER TABLE applied DROP COLUMN source_digest",
)
"""What migrations 5 to 7 added: dropping it leaves the store a version 4 wrote."""


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


# -- the runs root ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('runs_dir = "relative/runs"\n', "must be an absolute path"),
        ('runs_dir = ""\n', "non-empty path"),
        ("runs_dir = 3\n", "non-empty path"),
    ],
)
def test_a_bad_runs_dir_in_the_file_names_file_and_key(
    tmp_path: Path, text: str, words: str
) -> None:
    (tmp_path / "config.toml").write_text(text)
    for load in (lambda: load_config(tmp_path, {}), lambda: local_settings(tmp_path)):
        with pytest.raises(DefinitionError) as caught:
            load()
        assert str(caught.value).startswith(f"{tmp_path / 'config.toml'}: runs_dir: ")
        assert words in str(caught.value)


def test_runs_dir_from_the_file_then_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.toml").write_text(f'runs_dir = "{tmp_path / "a"}"\nhost = "h1"\n')
    assert local_settings(tmp_path) == LocalSettings("h1", str(tmp_path / "a"))
    monkeypatch.chdir(tmp_path)
    # On the command line a relative path is the working directory's.
    assert local_settings(tmp_path, runs_dir="b").runs_dir == str(tmp_path / "b")
    assert load_config(tmp_path, {"runs_dir": "b"}).runs_dir == str(tmp_path / "b")


def test_a_runs_dir_that_is_a_file_is_refused_everywhere(tmp_path: Path) -> None:
    store = tmp_path / "store"
    taken = tmp_path / "file"
    taken.write_text("x")
    for args in (
        ["supervise", "--runs-dir", str(taken)],
        ["runs", "logs", "run-000001", "--runs-dir", str(taken)],
        ["runs", "show", "run-000001", "--runs-dir", str(taken)],
        ["audit", "--runs-dir", str(taken)],
    ):
        result = wfsched(store, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr == (
            f"wfsched: error: command line: --runs-dir: {taken} exists and is not a directory\n"
        )
    assert not store.exists()


def test_supervise_refuses_a_runs_dir_it_cannot_create(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (tmp_path / "file").write_text("x")
    unusable = tmp_path / "file" / "runs"
    result = wfsched(store, "supervise", "--runs-dir", str(unusable))
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"wfsched: error: runs_dir {unusable}: cannot use it: Not a directory\n"
    )
    assert not store.exists()


# -- output kept in the store, logs from any host -----------------------------------------

BIG = 70_000
"""More than the 64 KiB the store keeps of a stream."""


def _define_job(store: StoreName, tmp_path: Path, name: str, command: str) -> None:
    path = write_definition(
        tmp_path / "defs",
        name,
        f'id = "{name}"\n[trigger]\ncron = "0 0 1 1 *"\n[run]\n'
        f'command = ["sh", "-c", "{command}"]\n',
    )
    result = wfsched(store, "create", str(path))
    assert result.returncode == 0, result.stderr


def _local_dir(store: StoreName) -> Path:
    from wfsched.store.location import resolve_store

    return resolve_store(str(store)).local_dir


def test_runs_logs_on_another_host_print_the_tail_kept_in_the_store(
    store: StoreName, tmp_path: Path
) -> None:
    """The run executes in a runs root of its own (`--runs-dir`); a command
    without it, or one whose host name differs, reads the stored tails and is
    told where the full logs are; with it, on the same host, the full logs."""
    runs_root = tmp_path / "elsewhere-runs"
    _define_job(
        store,
        tmp_path,
        "big",
        f"yes x | head -c {BIG}; echo END; echo oops >&2; exit 3",
    )
    _define_job(store, tmp_path, "slow", "echo begun; exec sleep 30")
    # This host's name, as the commands below read it (the supervisor's flag wins).
    local = _local_dir(store)
    local.mkdir(parents=True, exist_ok=True)
    (local / "config.toml").write_text('host = "worker-7"\n')
    daemon = Daemon(store, "--host", "worker-7", "--runs-dir", str(runs_root))
    try:
        daemon.wait_started()
        assert wfsched(store, "trigger", "big").returncode == 0
        wait_for(
            lambda: wfsched_json(store, "runs", "show", "run-000001")["state"] == "failed",
            what="the big run",
        )
        assert wfsched(store, "trigger", "slow").returncode == 0
        wait_for(
            lambda: wfsched_json(store, "runs", "show", "run-000002")["state"] == "running",
            what="the slow run",
        )
        attempt_dir = runs_root / "run-000001" / "attempt-1"
        full = (attempt_dir / "stdout.log").read_bytes()
        assert len(full) == BIG + 4 and full.endswith(b"x\nEND\n")

        # On the executing host, with its runs root: the full logs.
        here = wfsched(
            store, "runs", "logs", "run-000001", "--stdout", "--runs-dir", str(runs_root)
        )
        assert here.returncode == 0 and here.stdout.encode() == full and here.stderr == ""

        # Without that runs root the directory is not here: the stored tail.
        tail = wfsched(store, "runs", "logs", "run-000001", "--stdout")
        assert tail.returncode == 0, tail.stderr
        assert tail.stdout.encode() == full[-65536:]
        assert tail.stderr == (
            f"wfsched: note: run-000001 attempt 1 ran on host worker-7 in {attempt_dir}"
            f" (this host, but not in the runs root read here, {_local_dir(store) / 'runs'});"
            " showing the last 64 KiB of each stream, kept in the store\n"
        )
        both = wfsched(store, "runs", "logs", "run-000001")
        assert both.returncode == 0
        assert both.stdout.endswith("x\nEND\n==> stderr (5 bytes) <==\noops\n")
        assert both.stdout.startswith("==> stdout (65536 bytes) <==\n")
        shown = wfsched_json(store, "runs", "show", "run-000001")
        assert shown["logs_here"] is False and shown["run_dir"] == str(runs_root / "run-000001")
        assert shown["host"] == "worker-7" and shown["stderr_tail"] == ["oops"]
        human = wfsched(store, "runs", "show", "run-000001")
        assert f"the full logs are on host worker-7 in {runs_root / 'run-000001'}" in human.stdout
        # --follow of a finished attempt has nothing more to wait for: the tail.
        followed = wfsched(store, "runs", "logs", "run-000001", "--follow")
        assert followed.returncode == 0 and followed.stdout.encode() == full[-65536:]

        # A running attempt elsewhere: nothing in the store yet; --follow says where.
        running = runs_root / "run-000002" / "attempt-1"
        follow = wfsched(store, "runs", "logs", "run-000002", "--follow")
        assert follow.returncode == 3
        assert follow.stderr == (
            f"wfsched: error: run-000002 attempt 1 is running on host worker-7 in {running}"
            f" (this host, but not in the runs root read here, {_local_dir(store) / 'runs'});"
            " follow it there (its output reaches the store when the attempt ends)\n"
        )
        plain = wfsched(store, "runs", "logs", "run-000002")
        assert plain.returncode == 3 and "is still running: the store holds none" in plain.stderr

        # Same runs root, another host name (config `host` of this host): elsewhere too.
        (local / "config.toml").write_text(f'host = "worker-8"\nruns_dir = "{runs_root}"\n')
        other = wfsched(store, "runs", "logs", "run-000001", "--stderr")
        assert other.returncode == 0 and other.stdout == "oops\n"
        assert other.stderr == (
            f"wfsched: note: run-000001 attempt 1 ran on host worker-7 in {attempt_dir};"
            " showing the last 64 KiB of each stream, kept in the store\n"
        )
        # The same name: the full logs again, from config.toml's runs_dir.
        (local / "config.toml").write_text(f'host = "worker-7"\nruns_dir = "{runs_root}"\n')
        again = wfsched(store, "runs", "logs", "run-000001", "--stdout")
        assert again.stdout.encode() == full and again.stderr == ""
        audit = wfsched(store, "audit")
        assert audit.returncode == 0, audit.stdout + audit.stderr
        assert wfsched(store, "runs", "cancel", "run-000002").returncode == 0
    finally:
        daemon.stop()


def test_the_exit_record_keeps_the_last_64_kib_of_each_stream(
    tmp_path: Path, make_store: Callable[[Path], Store]
) -> None:
    """Layer 1: ingestion stores each stream's tail, whatever the log holds."""
    h = Harness(make_store(tmp_path / "s"))
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    attempt = h.store.runs_dir / "run-000001" / "attempt-1"
    attempt.mkdir(parents=True, exist_ok=True)
    out = bytes(range(256)) * 300  # 76,800 bytes, every byte value
    (attempt / "stdout.log").write_bytes(out)
    (attempt / "stderr.log").write_bytes(b"")
    h.control.finish("run-000001", exit_code=0)
    h.tick_at(T0 + 5)
    assert h.store.attempt_output(1, 1) == (out[-65536:], b"")
    # A run whose logs are gone (or never written) keeps no tail.
    h.runs.request_trigger("a")
    h.tick_at(T0 + 6)
    h.control.finish("run-000002", exit_code=1)
    h.tick_at(T0 + 7)
    assert h.store.attempt_output(2, 1) == (None, None)


def test_prune_and_audit_use_the_runs_root_they_are_given(
    tmp_path: Path, store_path: Path, run_cli: CliRun, clock: SettableClock
) -> None:
    """A store whose runs live in another root: `audit` and `prune` find them
    there with `--runs-dir` (or config `runs_dir`), and only there."""
    import shutil

    from tests.test_retention import KEPT, NOW, OLD_FINISHED, cli_store

    cli_store(store_path)
    clock.now = NOW
    root = tmp_path / "root"
    shutil.move(store_path / "runs", root)
    code, out, _ = run_cli("audit", "--json")
    assert code == 1 and {v["check"] for v in json.loads(out)["violations"]} == {"rundir-mismatch"}
    code, out, err = run_cli("audit", "--runs-dir", str(root))
    assert code == 0, out + err
    code, out, err = run_cli("prune", "--older-than", "30d", "--json", "--runs-dir", str(root))
    assert code == 0, err
    assert json.loads(out)["run_dirs"] == len(OLD_FINISHED)
    assert sorted(path.name for path in root.iterdir()) == KEPT
    (store_path / "config.toml").write_text(f'runs_dir = "{root}"\n')
    code, out, err = run_cli("audit")
    assert code == 0, out + err
