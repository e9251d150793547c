"""The operator's surface (issue 8): contract points, failures an operator can
see, safer apply, paging hints, completions, escaped terminal output."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliRun, definition_text

from tests.test_supervisor_loop import T0, Harness
from wfsched.domain.definition import parse_definition
from wfsched.store import Store

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


@pytest.mark.parametrize(
    ("written", "local"),
    [
        ('"2026-12-24T18:00:00.750+01:00"', "2026-12-24 18:00 +01:00"),
        ('"2026-12-24T18:00:00-03:30"', "2026-12-24 18:00 -03:30"),
        ('"2026-12-24T18:00:00+00:00"', "2026-12-24 18:00 +00:00 (UTC)"),
        ('"2026-12-24t18:00:00.9z"', "2026-12-24 18:00 +00:00 (UTC)"),
    ],
)
def test_next_shows_a_one_shot_in_the_offset_written_in_at(
    run_cli: CliRun, write_toml: Callable[..., Path], written: str, local: str
) -> None:
    """`next` says "local" like every other view: the schedule's zone, which
    for a one-shot is its written offset (it said UTC for every one-shot)."""
    assert run_cli("create", str(write_toml("once.toml", ONE_SHOT.format(at=written))))[0] == 0
    (item,) = json.loads(run_cli("next", "once", "--json")[1])["items"]
    assert item["local"] == local
    assert re.search(rf"next due \(local\)\s+{re.escape(local)}\s*\n", run_cli("get", "once")[1])
    assert local in run_cli("next", "once")[1]


def test_update_with_an_equal_definition_is_a_documented_no_op(
    run_cli: CliRun, make_definition: Callable[..., Path]
) -> None:
    path = make_definition("same")
    assert run_cli("create", str(path))[0] == 0
    code, out, _ = run_cli("update", str(path), "--expected-revision", "1")
    assert code == 0
    assert "unchanged same (revision 1)" in out
    assert json.loads(run_cli("get", "same", "--json")[1])["revision"] == 1
    help_text = " ".join(run_cli("update", "--help")[1].split())
    assert "identical to the stored one is a no-op" in help_text
    docs = (Path(__file__).resolve().parent.parent / "docs" / "definitions.md").read_text()
    assert "identical to the stored one is a no-op" in " ".join(docs.split())


# ------------------------------------------------- reads of a missing store

MISSING_NOTE = "no store at"


@pytest.mark.parametrize(
    ("args", "empty"),
    [
        (("list", "--json"), {"items": [], "next_cursor": None}),
        (("list", "--all", "--json"), {"items": [], "next_cursor": None}),
        (("runs", "--json"), {"items": [], "next_cursor": None}),
        (("runs", "list", "--schedule", "x", "--json"), {"items": [], "next_cursor": None}),
        (("audit", "--json"), None),
        (("status", "--json"), None),
        (("prune", "--older-than", "30d", "--dry-run", "--json"), None),
        (("prune", "--older-than", "30d", "--json"), None),
    ],
)
def test_listing_reads_of_a_missing_store_answer_as_an_empty_store(
    run_cli: CliRun, store_path: Path, args: tuple[str, ...], empty: object
) -> None:
    code, out, err = run_cli(*args)
    assert code == 0, err
    assert err.count("\n") == 1 and MISSING_NOTE in err and str(store_path) in err
    answer = json.loads(out)
    if empty is not None:
        assert answer == empty
    if args[0] == "audit":
        assert answer["ok"] is True and answer["violations"] == []
    if args[0] == "prune":
        assert answer["runs"] == 0 and answer["occurrences"] == 0
    if args[0] == "status":
        assert answer["executing"] == 0 and answer["blocked"] == []
    assert not store_path.exists()


@pytest.mark.parametrize("args", [("list",), ("runs",), ("runs", "list"), ("audit",), ("status",)])
def test_human_reads_of_a_missing_store_exit_0_with_a_note(
    run_cli: CliRun, store_path: Path, args: tuple[str, ...]
) -> None:
    code, _out, err = run_cli(*args)
    assert code == 0 and MISSING_NOTE in err and err.count("\n") == 1
    assert not store_path.exists()


@pytest.mark.parametrize(
    "args",
    [
        ("get", "x"),
        ("get", "x", "--json"),
        ("get", "x", "--toml"),
        ("next", "x"),
        ("occurrences", "x"),
        ("occurrences", "x", "--json"),
        ("runs", "show", "run-000001"),
        ("runs", "logs", "run-000001"),
    ],
)
def test_reads_of_one_id_on_a_missing_store_are_not_found(
    run_cli: CliRun, store_path: Path, args: tuple[str, ...]
) -> None:
    code, out, err = run_cli(*args)
    assert (code, out) == (3, "")
    assert err.startswith("wfsched: error: ") and err.count("\n") == 1 and MISSING_NOTE in err
    assert not store_path.exists()


def test_reads_of_a_database_without_a_store_answer_as_an_empty_store(
    run_cli: CliRun, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PostgreSQL store: a database with no wfsched schema yet reads as an
    empty store, one id is not found, and no read creates the schema."""
    from wfsched.store import open_location
    from wfsched.store.location import resolve_store

    monkeypatch.setenv("WFSCHED_STORE", pg_url)
    for args in (("runs", "--json"), ("audit", "--json"), ("status", "--json"), ("list",)):
        code, out, err = run_cli(*args)
        assert code == 0 and err.count("\n") == 1 and MISSING_NOTE in err, (args, err)
    assert json.loads(run_cli("audit", "--json")[1])["ok"] is True
    for args in (("get", "x"), ("runs", "show", "run-000001"), ("occurrences", "x")):
        code, out, err = run_cli(*args)
        assert (code, out) == (3, "") and MISSING_NOTE in err, args
    assert open_location(resolve_store(pg_url), create=False) is None


# ------------------------------------------------------- durations on flags


@pytest.mark.parametrize(
    "flags",
    [
        ("--drain-grace", "45s"),
        ("--drain-grace", "45"),
        ("--drain-grace", "0.5"),
        ("--poll-interval", "2m"),
        ("--poll-interval", "1"),
        ("--poll-interval", "0.25"),
    ],
)
def test_supervise_duration_flags_take_the_definition_forms(
    run_cli: CliRun, store_path: Path, flags: tuple[str, ...]
) -> None:
    # An unknown key in config.toml stops the start after the flags were
    # parsed: the error names config.toml, not the flag.
    store_path.mkdir()
    (store_path / "config.toml").write_text("no_such_setting = 1\n")
    code, _, err = run_cli("supervise", *flags)
    assert code == 2 and "config.toml" in err and "no_such_setting" in err, err


@pytest.mark.parametrize("value", ["45x", "-3", "", "1.5d", "nan"])
def test_supervise_rejects_a_malformed_duration_naming_the_flag(
    run_cli: CliRun, store_path: Path, value: str
) -> None:
    code, _, err = run_cli("supervise", "--drain-grace", value)
    assert code == 2 and "--drain-grace" in err and err.count("\n") == 1
    assert not store_path.exists()


def test_supervise_duration_flags_reach_the_config(store_path: Path) -> None:
    from wfsched.cli.params import Duration
    from wfsched.domain.config import load_config

    parse = Duration().convert
    config = load_config(
        store_path,
        {"drain_grace": parse("45s", None, None), "poll_interval": parse("2m", None, None)},
    )
    assert (config.drain_grace, config.poll_interval) == (45.0, 120.0)


def test_prune_older_than_takes_the_same_forms(run_cli: CliRun) -> None:
    for value, seconds in (("90", 90), ("90s", 90), ("2m", 120), ("30d", 30 * 86400)):
        code, out, _ = run_cli("prune", "--older-than", value, "--json")
        assert code == 0 and json.loads(out)["older_than"] == seconds


# ------------------------------------------- preflight rejection is a failure


def _cli_harness(store_path: Path) -> Harness:
    """The semantic harness (fake launcher, injected clock) on the CLI's store."""
    return Harness(store_path)


MISSING_BIN = '[run]\ncommand = ["/nonexistent/wfsched-missing-tool"]\n'


def _define_missing(h: Harness, schedule_id: str = "gone", hook: str = "") -> None:
    text = (
        f'id = "{schedule_id}"\n[trigger]\ncron = "0 * * * *"\n'
        + MISSING_BIN
        + (f"[notify]\non_failure = {hook}\n" if hook else "")
    )
    h.admin.create(parse_definition(text, f"{schedule_id}.toml", now=int(h.clock())))


def test_preflight_rejection_fires_the_failure_hook_and_records_its_outcome(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path / "store")
    _define_missing(h, hook='["alert", "--now"]')
    h.tick_at(T0)
    spec, _ = h.control.spec("gone@20261201T090000Z-notify")
    assert spec.argv == ("alert", "--now")
    assert spec.env["WFSCHED_RUN_STATE"] == "preflight-rejected"
    assert spec.env["WFSCHED_RUN_ID"] == "" and spec.env["WFSCHED_RUN_DIR"] == ""
    assert spec.env["WFSCHED_OCCURRENCE_ID"] == "gone@20261201T090000Z"
    assert "wfsched-missing-tool" in spec.env["WFSCHED_REASON"]
    assert Path(spec.attempt_dir).is_dir()
    assert "runs" not in Path(spec.attempt_dir).parts  # audit checks runs/ against the db
    h.control.finish("gone@20261201T090000Z-notify", exit_code=0)
    h.tick_at(T0 + 1)
    assert ("notified", {"run": "gone@20261201T090000Z"}) in h.events
    with h.store.snapshot():
        rows = h.store._conn.execute("SELECT state, run_seq FROM notifications").fetchall()
    assert rows == [("succeeded", None)]


def test_config_default_hook_fires_for_a_preflight_rejection(tmp_path: Path) -> None:
    h = Harness(tmp_path / "store", on_failure=("fallback",))
    _define_missing(h)
    h.tick_at(T0)
    assert h.control.spec("gone@20261201T090000Z-notify")[0].argv == ("fallback",)


def test_run_failure_hook_outcome_is_recorded_and_shown(store_path: Path, run_cli: CliRun) -> None:
    h = _cli_harness(store_path)
    h.define("a", '[notify]\non_failure = ["alert"]\n', cron="0 * * * *")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=3, reason="exited with status 3")
    h.tick_at(T0 + 1)
    h.control.finish("run-000001-notify", exit_code=1, reason="exited with status 1")
    h.tick_at(T0 + 2)
    view = json.loads(run_cli("runs", "show", "run-000001", "--json")[1])
    assert view["run_dir"] == str(store_path.resolve() / "runs" / "run-000001")
    assert [(hook["attempt"], hook["state"], hook["reason"]) for hook in view["failure_hooks"]] == [
        (1, "failed", "exited with status 1")
    ]
    code, out, _ = run_cli("runs", "show", "run-000001")
    assert code == 0
    assert "run_dir" in out and "attempt 1: failed (exited with status 1)" in out


def test_a_hook_left_running_by_a_dead_supervisor_is_recorded_as_not_rerun(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", '[notify]\non_failure = ["alert"]\n', cron="0 * * * *")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=3)
    h.tick_at(T0 + 1)
    h.supervisor = h.new_supervisor()  # the first one died with the hook in flight
    h.supervisor.recover()
    view = h.runs.show("run-000001")
    assert view["failure_hooks"][0]["state"] == "failed"
    assert "not re-run" in view["failure_hooks"][0]["reason"]


def test_list_status_and_get_flag_a_preflight_rejection_until_a_run_succeeds(
    store_path: Path, run_cli: CliRun
) -> None:
    h = _cli_harness(store_path)
    tool = store_path.parent / "tool"
    _define_missing(h)
    h.define("fine", cron="0 * * * *")
    text = f'id = "gone"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["{tool}"]\n'
    h.tick_at(T0)
    listed = {item["id"]: item for item in json.loads(run_cli("list", "--json")[1])["items"]}
    rejection = listed["gone"]["preflight_rejected"]
    assert rejection["scheduled_at"] == "2026-12-01T09:00:00Z"
    assert "wfsched-missing-tool" in rejection["reason"]
    assert listed["fine"]["preflight_rejected"] is None
    status = json.loads(run_cli("status", "--json")[1])
    assert [item["schedule_id"] for item in status["preflight_rejected"]] == ["gone"]
    assert "wfsched-missing-tool" in status["preflight_rejected"][0]["reason"]
    _code, out, _ = run_cli("list")
    assert re.search(r"\bactive +.*\n +preflight-rejected", out)
    assert "preflight-rejected gone at 2026-12-01T09:00:00Z" in out
    _code, out, _ = run_cli("status")
    assert "preflight-rejected gone at 2026-12-01T09:00:00Z" in out
    assert "preflight-rejected" in run_cli("get", "gone")[1]
    assert json.loads(run_cli("get", "gone", "--json")[1])["preflight_rejected"] is not None

    # The operator installs the tool; the flag stays until a run succeeds.
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    h.admin.update(parse_definition(text, "gone.toml", now=int(h.clock())), 1)
    h.tick_at(T0 + 3600)
    assert json.loads(run_cli("status", "--json")[1])["preflight_rejected"] != []
    (gone_run,) = [item["run_id"] for item in h.runs.list(schedule_id="gone")[0]]
    h.control.finish(gone_run, exit_code=0)
    h.tick_at(T0 + 3601)
    assert json.loads(run_cli("status", "--json")[1])["preflight_rejected"] == []
    listed = {item["id"]: item for item in json.loads(run_cli("list", "--json")[1])["items"]}
    assert listed["gone"]["preflight_rejected"] is None
    assert "preflight-rejected" not in run_cli("list")[1]


# ------------------------------------------------------------ runs logs/show


def _failed_run_with_output(h: Harness, stdout: bytes, stderr: bytes) -> None:
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    spec, _ = h.control.spec("run-000001")
    (Path(spec.attempt_dir) / "stdout.log").write_bytes(stdout)
    (Path(spec.attempt_dir) / "stderr.log").write_bytes(stderr)
    h.control.finish("run-000001", exit_code=2, reason="exited with status 2")
    h.tick_at(T0 + 1)


def test_runs_logs_without_a_stream_shows_both_labelled(store_path: Path, run_cli: CliRun) -> None:
    h = _cli_harness(store_path)
    _failed_run_with_output(h, b"", b"boom: no such table\n")
    code, out, _ = run_cli("runs", "logs", "run-000001")
    assert code == 0
    assert out == "==> stdout (0 bytes) <==\n==> stderr (20 bytes) <==\nboom: no such table\n"
    assert run_cli("runs", "logs", "run-000001", "--stderr")[1] == "boom: no such table\n"
    assert run_cli("runs", "logs", "run-000001", "--stdout")[1] == ""


def test_runs_logs_with_empty_stderr_prints_stdout_as_is(store_path: Path, run_cli: CliRun) -> None:
    h = _cli_harness(store_path)
    _failed_run_with_output(h, b"partial", b"")
    assert run_cli("runs", "logs", "run-000001")[:2] == (0, "partial")


def test_runs_logs_of_a_silent_run_says_so(store_path: Path, run_cli: CliRun) -> None:
    h = _cli_harness(store_path)
    _failed_run_with_output(h, b"", b"")
    code, out, err = run_cli("runs", "logs", "run-000001")
    assert (code, out) == (0, "") and "wrote nothing to stdout or stderr" in err


def test_runs_logs_refuses_both_stream_flags(store_path: Path, run_cli: CliRun) -> None:
    h = _cli_harness(store_path)
    _failed_run_with_output(h, b"x", b"y")
    code, _, err = run_cli("runs", "logs", "run-000001", "--stdout", "--stderr")
    assert code == 2 and err.count("\n") == 1


def test_runs_show_has_the_run_dir_and_the_last_lines_of_stderr(
    store_path: Path, run_cli: CliRun
) -> None:
    h = _cli_harness(store_path)
    lines = "".join(f"line {n}\n" for n in range(30))
    _failed_run_with_output(h, b"", lines.encode())
    view = json.loads(run_cli("runs", "show", "run-000001", "--json")[1])
    assert view["stderr_tail"] == [f"line {n}" for n in range(20, 30)]
    assert view["failure_hooks"] == []
    code, out, _ = run_cli("runs", "show", "run-000001")
    assert code == 0
    assert "last lines of stderr (attempt 1):" in out and "  line 29" in out
    assert "line 19" not in out
    assert str(store_path.resolve() / "runs" / "run-000001") in out
    assert "none ran" in out


# ------------------------------------------------------------ paging hints


def _follow_hint(run_cli: CliRun, out: str) -> list[str]:
    hint = [line for line in out.splitlines() if line.startswith("next page: ")]
    assert len(hint) == 1, out
    words = shlex.split(hint[0].removeprefix("next page: "))
    assert words[0] == "wfsched"
    return words[1:]


def _many_runs(h: Harness) -> Harness:
    """Runs of two schedules, interleaved, some failed: filters matter."""
    h.define("a", cron="0 * * * *")
    h.define("b", cron="0 * * * *")
    for hour in range(6):
        h.tick_at(T0 + hour * 3600)
        for item in h.runs.list(status="running", limit=100)[0]:
            failed = item["schedule_id"] == "a" and hour % 2 == 0
            h.control.finish(item["run_id"], exit_code=1 if failed else 0)
        h.tick_at(T0 + hour * 3600 + 1)
    return h


@pytest.fixture
def paged(
    store_kind: str,
    store_path: Path,
    make_store: Callable[[Path], Store],
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> Harness:
    """`_many_runs` in the store the CLI reads, of either kind: a cursor is
    the store's own, and the hint must reproduce the query on both."""
    if store_kind == "postgresql":
        monkeypatch.setenv("WFSCHED_STORE", str(request.getfixturevalue("pg_url")))
    return _many_runs(Harness(make_store(store_path)))


@pytest.mark.parametrize(
    "query",
    [
        ("runs", "--schedule", "a", "--status", "failed", "--limit", "1"),
        ("runs", "--schedule", "b", "--limit", "2"),
        ("runs", "list", "--status", "completed", "--limit", "3"),
        ("runs", "--limit", "5"),
    ],
    ids=" ".join,
)
def test_the_runs_next_page_hint_reproduces_the_same_query(
    paged: Harness, run_cli: CliRun, query: tuple[str, ...]
) -> None:
    expected = json.loads(run_cli(*query, "--json")[1])
    second = json.loads(run_cli(*query, "--json", "--page", expected["next_cursor"])[1])["items"]
    assert second, "the query must have a second page"
    code, out, _ = run_cli(*query)
    assert code == 0
    words = _follow_hint(run_cli, out)
    code, out, _ = run_cli(*words, "--json")
    assert code == 0
    assert json.loads(out)["items"] == second


def test_the_occurrences_next_page_hint_reproduces_the_same_query(
    paged: Harness, run_cli: CliRun
) -> None:
    query = ("occurrences", "a", "--limit", "2")
    first = json.loads(run_cli(*query, "--json")[1])
    second = json.loads(run_cli(*query, "--json", "--page", first["next_cursor"])[1])
    words = _follow_hint(run_cli, run_cli(*query)[1])
    assert json.loads(run_cli(*words, "--json")[1]) == second


def test_a_next_page_hint_keeps_a_store_given_on_the_command_line(
    store_path: Path, run_cli: CliRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _many_runs(_cli_harness(store_path))
    monkeypatch.setenv("WFSCHED_STORE", str(tmp_path / "elsewhere"))
    words = _follow_hint(run_cli, run_cli("--store", str(store_path), "runs", "--limit", "1")[1])
    assert words[:2] == ["--store", str(store_path)]
    code, out, _ = run_cli(*words, "--json")
    assert code == 0 and len(json.loads(out)["items"]) == 1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("runs",), "no runs\n"),
        (("runs", "--schedule", "a"), "no runs of a\n"),
        (("runs", "--status", "failed", "--schedule", "a"), "no failed runs of a\n"),
        (("list",), "no schedules\n"),
        (("list", "--all"), "no schedules\n"),
        (("occurrences", "a"), "no occurrences recorded for a yet\n"),
    ],
)
def test_empty_human_listings_say_so(
    store_path: Path, run_cli: CliRun, args: tuple[str, ...], said: str
) -> None:
    h = _cli_harness(store_path)
    if args[0] != "list":
        h.define("a", cron="0 * * * *")
    assert run_cli(*args)[:2] == (0, said)


# ------------------------------------------------- every invalid file at once


def test_validate_reports_every_invalid_file_in_one_pass(
    run_cli: CliRun, make_definition: Callable[..., Path], write_toml, store_path: Path
) -> None:
    good = make_definition("good")
    bad_cron = write_toml("bad1.toml", definition_text("bad1", cron="0 25 * * *"))
    bad_zone = write_toml("bad2.toml", definition_text("bad2", timezone="Mars/Olympus"))
    code, out, err = run_cli("validate", str(bad_cron), str(good), str(bad_zone))
    assert code == 2
    assert out == f"ok {good} (good)\n"
    lines = err.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(f"wfsched: error: {bad_cron}: trigger.cron:")
    assert lines[1].startswith(f"wfsched: error: {bad_zone}: trigger.timezone:")
    assert lines[2] == "wfsched: error: 2 of 3 definition files are invalid"
    assert not store_path.exists()


def test_apply_reports_every_invalid_file_and_writes_nothing(
    run_cli: CliRun, make_definition: Callable[..., Path], write_toml, store_path: Path
) -> None:
    make_definition("fine")
    write_toml("bad1.toml", definition_text("bad1", cron="0 25 * * *"))
    write_toml("bad2.toml", definition_text("bad2", timezone="Mars/Olympus"))
    write_toml("twin.toml", definition_text("fine"))
    folder = store_path.parent / "defs"
    code, out, err = run_cli("apply", str(folder))
    assert (code, out) == (2, "")
    lines = err.splitlines()
    assert len(lines) == 4, err
    assert "bad1.toml: trigger.cron:" in lines[0]
    assert "bad2.toml: trigger.timezone:" in lines[1]
    assert "twin.toml: id: 'fine' is also defined in" in lines[2]
    assert lines[3] == ("wfsched: error: 3 of 4 definition files are invalid; nothing was written")
    assert not store_path.exists()  # not even an empty store


def test_validate_warns_when_the_executable_is_not_on_path(
    run_cli: CliRun, make_definition: Callable[..., Path], store_path: Path
) -> None:
    missing = make_definition("missing", command='["wfsched-no-such-tool-anywhere", "-x"]')
    found = make_definition("found", command='["sh", "-c", "true"]')
    code, out, err = run_cli("validate", str(missing), str(found))
    assert code == 0
    assert out == f"ok {missing} (missing)\nok {found} (found)\n"
    assert err.count("\n") == 1
    assert err.startswith(f"wfsched: warning: {missing}: run: executable")
    assert "'wfsched-no-such-tool-anywhere' not found on PATH" in err
    assert not store_path.exists()


# ------------------------------------------------------------- safer apply


def test_apply_names_the_store_it_wrote_to(
    run_cli: CliRun, make_definition: Callable[..., Path], store_path: Path
) -> None:
    folder = str(make_definition("one").parent)
    out = run_cli("apply", folder)[1]
    assert out.splitlines()[-1].endswith(f" in store {store_path.resolve()}")


def test_apply_warns_when_it_replaces_a_revision_made_outside_the_folder(
    run_cli: CliRun, make_definition: Callable[..., Path], write_toml, store_path: Path
) -> None:
    path = make_definition("nightly")
    folder = str(path.parent)
    assert run_cli("apply", folder)[0] == 0
    # An operator hot-fixes the schedule with `update` (revision 2)...
    hotfix = write_toml("nightly.toml", definition_text("nightly", cron="15 * * * *"), "elsewhere")
    assert run_cli("update", str(hotfix), "--expected-revision", "1")[0] == 0
    # ...and the folder, unchanged, is applied again: a dry run says what
    # would happen, the real apply does it; both warn naming both revisions.
    code, out, err = run_cli("apply", folder, "--dry-run")
    assert code == 0 and "updated nightly (revision 3)" in out
    assert err.count("\n") == 1
    assert "wfsched: warning: nightly: apply would replace revision 2" in err
    assert "after revision 1 was applied" in err
    code, out, err = run_cli("apply", folder)
    assert code == 0 and "updated nightly (revision 3)" in out
    assert "wfsched: warning: nightly: apply replaced revision 2" in err
    assert "after revision 1 was applied" in err and "with revision 3" in err
    # Applied again with no outside change: no warning.
    make_definition("nightly", cron="45 * * * *")
    code, out, err = run_cli("apply", folder)
    assert code == 0 and "updated nightly (revision 4)" in out and err == ""


def test_apply_does_not_warn_for_its_own_changes_or_an_outside_no_op(
    run_cli: CliRun, make_definition: Callable[..., Path], store_path: Path
) -> None:
    path = make_definition("steady")
    folder = str(path.parent)
    assert run_cli("apply", folder)[0] == 0
    assert run_cli("update", str(path), "--expected-revision", "1")[0] == 0  # a no-op
    make_definition("steady", cron="5 * * * *")
    code, _, err = run_cli("apply", folder)
    assert code == 0 and err == ""


# ------------------------------------------------------------ human output


def test_durations_in_human_output_carry_units(store_path: Path, run_cli: CliRun) -> None:
    h = _cli_harness(store_path)
    h.define(
        "a",
        '\ntimeout = "2h"\nkill_grace = 10\n[policy]\nlateness = "5m"\n',
        cron="0 * * * *",
    )
    out = run_cli("get", "a")[1]
    assert re.search(r"timeout\s+2h\s*\n", out), out
    assert re.search(r"kill grace\s+10s\s*\n", out), out
    assert re.search(r"lateness\s+5m\s*\n", out), out
    view = json.loads(run_cli("get", "a", "--json")[1])
    assert (view["run"]["timeout"], view["run"]["kill_grace"]) == (7200, 10)
    h.tick_at(T0)
    assert re.search(r"invocation\.timeout\s+2h\s*\n", run_cli("runs", "show", "run-000001")[1])


SCHEDULE_ID_ARGUMENTS = [
    ("get",),
    ("edit",),
    ("pause",),
    ("resume",),
    ("delete",),
    ("next",),
    ("occurrences",),
    ("trigger",),
    ("runs", "--schedule"),
    ("runs", "list", "--schedule"),
]
RUN_ID_ARGUMENTS = [
    ("runs", "show"),
    ("runs", "logs"),
    ("runs", "cancel"),
    ("runs", "resume"),
]


def test_every_schedule_id_argument_completes(store_path: Path) -> None:
    from tests.test_completions import bash_complete

    h = _cli_harness(store_path)
    h.define("hourly-report", cron="0 * * * *")
    h.define("nightly", cron="0 3 * * *")
    for words in SCHEDULE_ID_ARGUMENTS:
        assert bash_complete(*words, "hou") == ["hourly-report"], words
    for words in RUN_ID_ARGUMENTS:
        assert bash_complete(*words, "hou") == [], words


def test_every_run_id_argument_completes(store_path: Path) -> None:
    from tests.test_completions import bash_complete

    h = _cli_harness(store_path)
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    h.control.finish("run-000001")
    h.tick_at(T0 + 3600)
    for words in RUN_ID_ARGUMENTS:
        assert bash_complete(*words, "run-") == ["run-000002", "run-000001"], words
        assert bash_complete(*words, "run-0000011") == [], words


def test_every_id_argument_of_the_cli_completes() -> None:
    """No command grows an id argument without completion."""
    import click

    from wfsched.cli.complete import run_ids, schedule_ids
    from wfsched.cli.main import cli

    def walk(
        group: click.Group, path: tuple[str, ...]
    ) -> list[tuple[tuple[str, ...], click.Parameter]]:
        found = []
        for name, command in group.commands.items():
            for param in command.params:
                found.append(((*path, name), param))
            if isinstance(command, click.Group):
                found.extend(walk(command, (*path, name)))
        return found

    for where, param in walk(cli, ()):
        if param.name in ("schedule_id", "run"):
            expected = schedule_ids if param.name == "schedule_id" else run_ids
            assert param._custom_shell_complete is expected, (where, param.name)


# ---------------------------------------------------- control characters


HOSTILE = "evil\x1b[2J\x1b]0;pwned\x07\rfake\u202e"


def test_control_characters_are_escaped_in_human_output_and_exact_in_json(
    store_path: Path, run_cli: CliRun
) -> None:
    h = _cli_harness(store_path)
    escaped_description = json.dumps(HOSTILE)[1:-1]  # TOML basic string escapes
    h.define(
        "a",
        f'\nenv = {{ NOTE = "{escaped_description}" }}\n',
        cron="0 * * * *",
    )
    text = (
        f'id = "b"\ndescription = "{escaped_description}"\n[trigger]\ncron = "0 * * * *"\n'
        f'[run]\ncommand = ["/nonexistent/{escaped_description}"]\n'
    )
    h.admin.create(parse_definition(text, "b.toml", now=int(h.clock())))
    h.tick_at(T0)  # b is preflight-rejected: its reason quotes the command
    outputs = [
        run_cli("get", "b")[1],
        run_cli("get", "a")[1],
        run_cli("list")[1],
        run_cli("status")[1],
        run_cli("occurrences", "b")[1],
        run_cli("runs", "show", "run-000001")[1],
    ]
    for out in outputs:
        assert "\x1b" not in out and "\x07" not in out and "\r" not in out, out
        assert "\u202e" not in out, out
    assert "evil\\x1b[2J\\x1b]0;pwned\\x07\\rfake\\u202e" in outputs[0]
    assert json.loads(run_cli("get", "b", "--json")[1])["description"] == HOSTILE
    assert json.loads(run_cli("get", "a", "--json")[1])["run"]["env"] == {"NOTE": HOSTILE}


def test_an_error_line_escapes_control_characters(run_cli: CliRun, tmp_path: Path) -> None:
    code, _, err = run_cli("validate", str(tmp_path / "x\x1b[31m.toml"))
    assert code == 2 and "\x1b" not in err and "x\\x1b[31m.toml" in err


def test_the_human_event_log_escapes_control_characters() -> None:
    import io

    from wfsched.daemon.eventlog import EventLog

    stream = io.StringIO()
    EventLog("human", stream=stream, clock=lambda: 0.0)(
        "preflight-rejected", schedule="a", reason="x\x1b[2Jy", at="z\u202e"
    )
    line = stream.getvalue()
    assert "\x1b" not in line and "\u202e" not in line
    assert 'reason="x\\u001b[2Jy"' in line


def test_a_real_supervisor_fires_the_hook_for_a_preflight_rejection(tmp_path: Path) -> None:
    from tests.daemon import Daemon, utc_in, wait_for, wfsched, wfsched_json, write_definition

    store = tmp_path / "store"
    seen = tmp_path / "hook-env"
    daemon = Daemon(store)
    daemon.wait_started()
    try:
        # Created once the supervisor runs, so the instant is due, not missed.
        path = write_definition(
            tmp_path,
            "gone",
            f'id = "gone"\n[trigger]\nat = "{utc_in(1.5)}"\n'
            '[run]\ncommand = ["/nonexistent/wfsched-missing-tool"]\n'
            f'[notify]\non_failure = ["sh", "-c", "env > {seen}"]\n',
        )
        assert wfsched(store, "create", str(path)).returncode == 0
        wait_for(lambda: seen.exists() and "WFSCHED_REASON" in seen.read_text(), what="hook")
        wait_for(lambda: " notified " in daemon.text(), what="hook logged")
    finally:
        daemon.stop()
    env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert env["WFSCHED_RUN_STATE"] == "preflight-rejected"
    assert env["WFSCHED_RUN_ID"] == ""
    assert "wfsched-missing-tool" in env["WFSCHED_REASON"]
    status = wfsched_json(store, "status")
    assert [item["schedule_id"] for item in status["preflight_rejected"]] == ["gone"]
    assert wfsched(store, "audit").returncode == 0


def test_prune_removes_a_pruned_runs_hook_outcomes(tmp_path: Path) -> None:
    from wfsched.api.retention import prune

    h = Harness(tmp_path / "store")
    h.define("a", '[notify]\non_failure = ["alert"]\n', cron="0 * * * *")
    h.tick_at(T0)
    h.control.finish("run-000001", exit_code=3)
    h.tick_at(T0 + 1)
    h.control.finish("run-000001-notify", exit_code=0)
    h.tick_at(T0 + 2)

    def count() -> int:
        return int(h.store._conn.execute("SELECT COUNT(*) FROM notifications").fetchone()[0])

    assert count() == 1
    report = prune(h.store, 86400, T0 + 3 * 86400)
    assert report.runs >= 1 and count() == 0


def test_status_shows_a_launcher_down_episode_on_one_line(
    run_cli: CliRun, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the supervisor records while no run keeper can be started (the
    `launcher` field, tested from the daemon) is one line of the human
    `status`, only while it is down."""
    import wfsched.api.status as api_status

    assert run_cli("create", "-", input=definition_text("a"))[0] == 0
    real = api_status.status
    launcher: dict[str, str | None] = {
        "state": "down",
        "since": "2026-12-02T03:00:00Z",
        "last_error": "the run keeper did not start: it exited with status -9",
    }

    def with_launcher(*args: object, **kwargs: object) -> dict:
        info = real(*args, **kwargs)  # type: ignore[arg-type]
        info["launcher"] = launcher
        return info

    monkeypatch.setattr(api_status, "status", with_launcher)
    code, out, _ = run_cli("status")
    assert code == 0
    [line] = [line for line in out.splitlines() if line.startswith("launcher")]
    assert line.split(None, 1)[1].rstrip() == (
        "DOWN since 2026-12-02T03:00:00Z: the run keeper did not start: it exited with"
        " status -9; runs wait, retrying"
    )
    launcher["state"] = "up"
    code, out, _ = run_cli("status")
    assert code == 0 and not [line for line in out.splitlines() if line.startswith("launcher")]
