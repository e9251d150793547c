"""Coming from cron: `import-crontab` on real crontab files and `export`
(docs/operations.md, "Coming from cron")."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import CliRun, wfsched_executable

from wfsched.domain.crontab import translate_crontab
from wfsched.domain.definition import parse_definition

DATA = Path(__file__).parent / "data" / "crontabs"
DEBIAN = DATA / "debian-etc-crontab"
"""Debian's /etc/crontab, as the cron-daemon-common package ships it."""
E2SCRUB = DATA / "debian-cron.d-e2scrub_all"
"""/etc/cron.d/e2scrub_all, as Debian's e2fsprogs ships it."""
EVERY = DATA / "user-crontab-every-feature"
NOW = int(datetime(2026, 6, 1, 12, 0, tzinfo=UTC).timestamp())


def translate(path: Path, **options: object) -> object:
    arguments: dict[str, object] = {
        "source": str(path),
        "system": False,
        "zone": "Europe/Berlin",
        "owner": "alice",
        "now": NOW,
        "home_of": lambda user: None,
    }
    arguments.update(options)
    return translate_crontab(path.read_text(), **arguments)  # type: ignore[arg-type]


def documents(result: object) -> dict[str, dict[str, object]]:
    import tomllib

    return {item.schedule_id: tomllib.loads(item.text) for item in result.translated}  # type: ignore[attr-defined]


# ------------------------------------------------------------ layer 1: pure


def test_debians_system_crontab_translates_every_line() -> None:
    result = translate(DEBIAN, system=True, owner=None, home_of={"root": "/root"}.get)
    assert result.untranslated == []  # type: ignore[attr-defined]
    docs = documents(result)
    assert list(docs) == ["cron.hourly", "cron.daily", "cron.weekly", "cron.monthly"]
    hourly = docs["cron.hourly"]
    assert hourly["trigger"] == {"cron": "17 * * * *", "timezone": "Europe/Berlin"}
    assert hourly["run"] == {
        "command": "cd / && run-parts --report /etc/cron.hourly",
        "cwd": "/root",
        "env": {"PATH": "/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin"},
    }
    assert docs["cron.weekly"]["trigger"]["cron"] == "47 6 * * 7"  # type: ignore[index]
    first = result.translated[0]  # type: ignore[attr-defined]
    assert first.line == 18
    assert "17 *\t* * *\troot\tcd / && run-parts --report /etc/cron.hourly" in first.text
    assert "cron ran it as user root" in first.text


def test_a_cron_d_file_derives_ids_past_shell_words_and_variables() -> None:
    docs = documents(translate(E2SCRUB, system=True, owner=None))
    assert list(docs) == ["e2scrub_all_cron", "e2scrub_all"]


def test_a_user_crontab_with_every_feature() -> None:
    result = translate(EVERY)
    untranslated = {item.line: item.why for item in result.untranslated}  # type: ignore[attr-defined]
    assert sorted(untranslated) == [15, 16, 20, 21, 22]
    assert "@reboot" in untranslated[15]
    assert "'%'" in untranslated[16] and "standard input" in untranslated[16]
    assert "Mars/Olympus" in untranslated[20] and "keep America/New_York" in untranslated[20]
    assert "'L' (last day) is not Unix cron" in untranslated[21]
    assert "RANDOM_DELAY" in untranslated[22]
    docs = documents(result)
    assert list(docs) == [
        "backup.sh", "sync.py", "find", "rotate", "report", "odd-monday", "printf",
        "report-2", "with-var",
    ]  # fmt: skip
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "BACKUP_DIR": "/srv/backups"}
    assert docs["backup.sh"]["run"] == {
        "command": [
            "/bin/bash",
            "-c",
            "/usr/local/bin/backup.sh --full >> /var/log/backup.log 2>&1",
        ],
        "env": env,
    }
    assert docs["find"]["trigger"]["cron"] == "@daily"  # type: ignore[index]
    assert docs["printf"]["run"]["command"][2] == "/usr/bin/printf '100% done\\n'"  # type: ignore[index]
    assert docs["report-2"]["trigger"]["timezone"] == "America/New_York"  # type: ignore[index]
    assert docs["with-var"]["trigger"]["timezone"] == "America/New_York"  # type: ignore[index]
    notes = {item.schedule_id: item.notes for item in result.translated}  # type: ignore[attr-defined]
    assert any("MAILTO='ops@example.com'" in note for note in notes["find"])
    assert any(n.startswith("NOTE: ") and "Vixie cron" in n for n in notes["odd-monday"])
    assert any(n.startswith("NOTE: ") and "runs twice at 02:30" in n for n in notes["backup.sh"])
    assert any("cron ran it as user alice" in note for note in notes["rotate"])


def test_every_translated_file_is_a_valid_definition() -> None:
    for path, system in ((DEBIAN, True), (E2SCRUB, True), (EVERY, False)):
        for item in translate(path, system=system).translated:  # type: ignore[attr-defined]
            defn = parse_definition(item.text, item.schedule_id, now=NOW)
            assert defn.id == item.schedule_id


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("* * * *", "expected time fields and a command"),
        ("0 0 * foo * /bin/x", "month field: 'foo' is not a number"),
        ("0 0 5-1 * * /bin/x", "reversed"),
        ("WFSCHED_X=1", "reserved"),
    ],
)
def test_lines_it_cannot_translate_say_why(tmp_path: Path, line: str, why: str) -> None:
    path = tmp_path / "crontab"
    path.write_text(f"# header\n{line}\n")
    result = translate(path)
    assert result.translated == []  # type: ignore[attr-defined]
    [problem] = result.untranslated  # type: ignore[attr-defined]
    assert problem.line == 2 and why in problem.why


def test_repeated_programs_get_numbered_ids(tmp_path: Path) -> None:
    path = tmp_path / "crontab"
    path.write_text("0 1 * * * /bin/job\n0 2 * * * /bin/job\n0 3 * * * /opt/job-2\n0 4 * * * job\n")
    assert list(documents(translate(path))) == ["job", "job-2", "job-2-2", "job-3"]


# ---------------------------------------------------- layer 2: the real CLI


def test_import_then_apply_loads_every_translated_line(
    run_cli: CliRun, tmp_path: Path, store_path: Path
) -> None:
    folder = tmp_path / "imported"
    code, out, err = run_cli(
        "import-crontab", str(EVERY), "--to", str(folder), "--timezone", "Europe/Berlin"
    )
    assert code == 0, err
    assert f"wrote {folder / 'backup.sh.toml'} (line 9)" in out
    assert out.splitlines()[-1] == (
        f"wrote 9 definitions from {EVERY} to {folder}; 5 lines not translated;"
        f" load them with `wfsched apply {folder}`"
    )
    assert f"{EVERY}: line 15: not translated: @reboot" in err
    assert f"{EVERY}: line 14: '0 0 */2 * 1': wfsched runs it" in err
    assert not store_path.exists(), "import writes files, never the store"
    code, out, _ = run_cli("apply", str(folder))
    assert code == 0 and "9 created" in out


def test_dry_run_prints_the_files_and_writes_nothing(run_cli: CliRun, tmp_path: Path) -> None:
    folder = tmp_path / "never"
    code, out, _ = run_cli(
        "import-crontab",
        str(DEBIAN),
        "--system",
        "--to",
        str(folder),
        "--dry-run",
        "--timezone",
        "UTC",
    )
    assert code == 0
    assert f"# --- {folder / 'cron.daily.toml'}" in out and 'id = "cron.daily"' in out
    assert "would write 4 definitions" in out
    assert not folder.exists()


def test_system_format_follows_the_path_and_the_flag(run_cli: CliRun, tmp_path: Path) -> None:
    """Given as a user crontab, Debian's file's user field becomes the command's first word."""
    code, out, _ = run_cli(
        "import-crontab", str(DEBIAN), "--no-system", "--to", str(tmp_path / "u"), "--dry-run"
    )
    assert code == 0 and 'command = "root\tcd / && run-parts' in out.replace("\\t", "\t")
    code, _, err = run_cli("import-crontab", str(DEBIAN), "--system", "--user", "bob", "--to", "x")
    assert code == 2 and "--user names a user crontab's owner" in err


def test_a_folder_holding_other_files_is_refused_whole(run_cli: CliRun, tmp_path: Path) -> None:
    folder = tmp_path / "defs"
    folder.mkdir()
    (folder / "cron.daily.toml").write_text("# mine\n")
    code, out, err = run_cli("import-crontab", str(DEBIAN), "--system", "--to", str(folder))
    assert code == 4 and out == ""
    assert "cron.daily.toml already exist" in err and "nothing was written" in err
    assert sorted(path.name for path in folder.iterdir()) == ["cron.daily.toml"]
    code, _, _ = run_cli("import-crontab", str(DEBIAN), "--system", "--to", str(folder), "--force")
    assert code == 0 and len(list(folder.glob("*.toml"))) == 4
    code, out, _ = run_cli("import-crontab", str(DEBIAN), "--system", "--to", str(folder))
    assert code == 0 and "unchanged" in out


@pytest.mark.parametrize(
    ("arguments", "code", "words"),
    [
        (["/nonexistent/crontab"], 2, "/nonexistent/crontab: cannot read"),
        (["-", "--timezone", "Mars/Olympus"], 2, "--timezone: unknown time zone"),
        ([], 2, "no `crontab` command on this host"),
    ],
)
def test_bad_inputs_are_one_line_errors(
    tmp_path: Path, arguments: list[str], code: int, words: str
) -> None:
    folder = tmp_path / "out"
    env = {**os.environ, "PATH": str(tmp_path)}  # no `crontab` on it
    done = subprocess.run(
        [wfsched_executable(), "import-crontab", *arguments, "--to", str(folder)],
        input="",
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == code and done.stdout == ""
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert not folder.exists()


def test_without_a_file_it_reads_crontab_l_for_the_user(tmp_path: Path) -> None:
    """`crontab -l -u USER` is what a cron user runs to see their jobs; a
    stand-in `crontab` on PATH answers what it was asked."""
    stand_in = tmp_path / "crontab"
    stand_in.write_text('#!/bin/sh\n[ "$*" = "-l -u carol" ] || exit 1\necho "5 4 * * * /bin/x"\n')
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    done = subprocess.run(
        [wfsched_executable(), "import-crontab", "--user", "carol", "--to", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "cron ran it as user carol" in (tmp_path / "o" / "x.toml").read_text()
    done = subprocess.run(
        [wfsched_executable(), "import-crontab", "--user", "dave", "--to", str(tmp_path / "p")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 3 and "`crontab -l -u dave` failed" in done.stderr


def test_export_then_apply_prune_changes_nothing(
    run_cli: CliRun, make_definition: Callable[..., Path], tmp_path: Path, store_kind: str
) -> None:
    if store_kind == "postgresql":
        pytest.importorskip("psycopg")
    make_definition("hourly", cron="0 * * * *")
    make_definition("berlin", cron="30 6 * * 1-5", timezone="Europe/Berlin")
    defs = tmp_path / "defs"
    assert run_cli("apply", str(defs))[0] == 0
    assert run_cli("pause", "berlin")[0] == 0
    folder = tmp_path / "exported"
    code, out, _ = run_cli("export", str(folder))
    assert code == 0
    assert out.splitlines()[-1].startswith("2 definitions exported from store ")
    assert sorted(path.name for path in folder.iterdir()) == ["berlin.toml", "hourly.toml"]
    code, out, _ = run_cli("apply", "--prune", str(folder))
    assert code == 0 and "0 created, 0 updated, 2 unchanged, 0 deleted" in out
    code, out, _ = run_cli("export", str(folder))
    assert code == 0 and f"unchanged {folder / 'hourly.toml'}" in out
    (folder / "hourly.toml").write_text("# edited\n")
    code, _, err = run_cli("export", str(folder))
    assert code == 4 and "hourly.toml already exist" in err
    assert (folder / "hourly.toml").read_text() == "# edited\n"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Export reads the store: on both kinds."""
    if request.param == "postgresql":
        monkeypatch.setenv("WFSCHED_STORE", str(request.getfixturevalue("pg_url")))
    return str(request.param)
