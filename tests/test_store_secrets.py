"""The store's password stays with the supervisor: runs and hooks never see
its credentials, every printed store is masked, and a store value that is no
supported URL is refused before anything is created (docs/high-availability.md,
"What runs never see")."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon import Daemon, define, wait_for, wfsched, wfsched_json
from wfsched.daemon.job_environment import WITHHELD, inherited_environment
from wfsched.errors import UsageError
from wfsched.store import open_location
from wfsched.store.location import resolve_store

SECRET = "Pa55-in-the-env-file"


def credentials(folder: Path) -> dict[str, str]:
    """What an environment file for the supervisor may hold: libpq reads each
    (the service file is real; the trust server ignores the password, and a
    socket connection no certificate), only where they end up matters."""
    service = folder / "pg_service.conf"
    service.write_text("[wfsched-store]\nconnect_timeout=10\n")
    return {
        "PGPASSWORD": SECRET,
        "PGPASSFILE": str(folder / f"{SECRET}.pgpass"),
        "PGSERVICE": "wfsched-store",
        "PGSERVICEFILE": str(service),
        "PGSYSCONFDIR": str(folder),
        "PGSSLCERT": str(folder / "client.crt"),
        "PGSSLKEY": str(folder / "client.key"),
    }


def with_password(url: str) -> str:
    return url.replace("postgresql://wfsched_test@", f"postgresql://wfsched_test:{SECRET}@", 1)


def dumped(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A SQLite directory, or a PostgreSQL URL carrying the password."""
    if request.param == "postgresql":
        return with_password(request.getfixturevalue("pg_url"))
    return tmp_path / "store"


def test_runs_and_hooks_never_see_the_store_credentials(store: Path | str, tmp_path: Path) -> None:
    """A job that dumps its environment, and its failure hook, under a supervisor
    whose environment holds the store's credentials: none reaches the job, its
    logs, the stored output tail or the hook; `[run] env` still gives one on purpose."""
    env_url = f"postgresql://ops:{SECRET}@db.example/wfsched?sslmode=require&password={SECRET}"
    hook_env = tmp_path / "hook-env"
    dump = 'env > "$0/env-$WFSCHED_SCHEDULE_ID"; env; env >&2; exit 1'
    define(
        store,
        tmp_path,
        "leaky",
        '[trigger]\ncron = "0 0 1 1 *"\n[run]\n'
        f"command = {json.dumps(['sh', '-c', dump, str(tmp_path)])}\n"
        + f'[notify]\non_failure = ["sh", "-c", "env > {hook_env}"]\n',
    )
    define(
        store,
        tmp_path,
        "chosen",
        '[trigger]\ncron = "0 0 1 1 *"\n[run]\n'
        f"command = {json.dumps(['sh', '-c', dump, str(tmp_path)])}\n"
        + 'env = { PGPASSWORD = "given-on-purpose" }\n',
    )
    daemon = Daemon(store, env={**credentials(tmp_path), "WFSCHED_STORE": env_url})
    try:
        daemon.wait_started()
        for name in ("leaky", "chosen", "leaky"):
            assert wfsched(store, "trigger", name).returncode == 0
        wait_for(
            lambda: hook_env.exists() and "WFSCHED_RUN_ID" in hook_env.read_text(), what="hook"
        )
        wait_for(
            lambda: len(wfsched_json(store, "runs", "--status", "failed")["items"]) == 3,
            what="three failed runs",
        )
    finally:
        assert daemon.stop() == 0
    job, hook, chosen = (
        dumped(tmp_path / "env-leaky"),
        dumped(hook_env),
        dumped(tmp_path / "env-chosen"),
    )
    for env in (job, hook):
        assert not WITHHELD & set(env), sorted(WITHHELD & set(env))
        assert env["WFSCHED_STORE"] == "postgresql://ops@db.example/wfsched?sslmode=require"
        assert SECRET not in "".join(env.values())
    assert chosen["PGPASSWORD"] == "given-on-purpose" and "PGPASSFILE" not in chosen
    assert job["WFSCHED_SCHEDULE_ID"] == "leaky" and hook["WFSCHED_RUN_STATE"] == "failed"

    opened = open_location(resolve_store(store), create=False)
    assert opened is not None
    try:
        tails = [opened.attempt_output(seq, 1) for seq in (1, 2, 3)]
        with opened.atomic():  # two skipped instants: a ledger worth paging
            opened.insert_occurrences(
                [
                    ("leaky", at, None, None, 0, "skipped-overlap", "seeded", 1, None, at)
                    for at in (1_700_000_000, 1_700_000_060)
                ]
            )
    finally:
        opened.close()
    assert all(out and err and b"WFSCHED_RUN_ID=" in out + err for out, err in tails)
    assert not [tail for pair in tails for tail in pair if tail and SECRET.encode() in tail]
    # Run logs, hook logs, records, the supervisor's own log: nowhere on disk.
    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert any(path.name == "stdout.log" for path in written), written
    assert [path for path in written if SECRET.encode() in path.read_bytes()] == []

    # The next-page hints name the store without its password, and still reach it.
    runs = wfsched(store, "runs", "--limit", "1")
    occurrences = wfsched(store, "occurrences", "leaky", "--limit", "1")
    for result in (runs, occurrences):
        assert result.returncode == 0 and SECRET not in result.stdout + result.stderr
        hint = [line for line in result.stdout.splitlines() if line.startswith("next page: ")]
        assert len(hint) == 1, result.stdout
        words = shlex.split(hint[0].removeprefix("next page: "))
        assert words[1] == "--store" and words[2] == str(store).replace(f":{SECRET}@", "@")
        followed = wfsched(words[2], *words[3:])
        page = followed.stdout
        assert followed.returncode == 0 and ("run-000002" in page or "2023-11-14" in page), page


def test_a_store_url_in_the_environment_keeps_its_other_parts() -> None:
    env = inherited_environment(
        {
            "PATH": "/usr/bin",
            "PGHOST": "db",
            "PGPASSWORD": SECRET,
            "NOTIFY_SOCKET": "/run/systemd/notify",
            "WFSCHED_STORE": f"postgres://u:{SECRET}@/db?host=/run/pg&sslpassword={SECRET}",
        }
    )
    assert env == {
        "PATH": "/usr/bin",
        "PGHOST": "db",
        "WFSCHED_STORE": "postgres://u@/db?host=/run/pg",
    }
    for unsupported in (f"host=db password={SECRET}", f"pg://u:{SECRET}@db/x"):
        assert inherited_environment({"WFSCHED_STORE": unsupported}) == {}
    for plain in ("/var/lib/wfsched", "postgresql://u@db/x?sslmode=require"):
        assert inherited_environment({"WFSCHED_STORE": plain}) == {"WFSCHED_STORE": plain}


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://u:{SECRET}@[broken/db",  # libpq's message quotes the whole URL
        f"postgresql://u:{SECRET}%zz@h/db",
        f"postgresql://u@h/db?password={SECRET}&bogus=1",
    ],
)
def test_a_malformed_url_never_repeats_its_password(url: str) -> None:
    with pytest.raises(UsageError, match="not a valid PostgreSQL URL") as caught:
        resolve_store(url)
    assert SECRET not in str(caught.value)


UNSUPPORTED = [
    (f"postgressql://u:{SECRET}@host/db", "postgressql://... is not a supported store URL"),
    (f"pg://u:{SECRET}@host/db", "pg://... is not a supported store URL"),
    ("pg://", "pg://... is not a supported store URL"),
    (f"postgresql:/u:{SECRET}@host/db", "postgresql:/... is not a supported store URL"),
    ("sqlite:///var/lib/wfsched", "sqlite://... is not a supported store URL"),
    (f"host=db password={SECRET}", "connection string (host, password) is not accepted"),
    (f"passwrod={SECRET} host=db", "connection string (passwrod) is not accepted"),
]


@pytest.mark.parametrize(("value", "said"), UNSUPPORTED)
@pytest.mark.parametrize("given", ["option", "environment"])
def test_a_store_that_is_no_supported_url_is_refused_and_nothing_is_created(
    value: str, said: str, given: str, tmp_path: Path
) -> None:
    """Through the real console script, from `--store` and from `WFSCHED_STORE`,
    for a write (which would create a store) and for `status`."""
    work = tmp_path / "cwd"
    work.mkdir()
    definition = tmp_path / "job.toml"
    definition.write_text('id = "job"\n[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["true"]\n')
    env = {**os.environ, "WFSCHED_STORE": value}
    option = ["--store", value] if given == "option" else []
    before = sorted(tmp_path.rglob("*"))
    for args in (["create", str(definition)], ["status"], ["supervise"]):
        result = subprocess.run(
            [sys.executable, "-m", "wfsched", *option, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=work,
            timeout=60,
        )
        assert result.returncode == 2, (args, result.stderr)
        assert result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("wfsched: error: --store: ") and said in result.stderr
        assert "nothing was created" in result.stderr
        assert SECRET not in result.stderr
    assert sorted(tmp_path.rglob("*")) == before
