"""Requests waiting for the supervisor: `requests`, `requests cancel N`, and
the count in `status` (issue 26, item 10), through the real CLI on both stores."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliRun, SettableClock

from tests.daemon import Daemon, define, wait_for, wfsched, wfsched_json
from tests.test_cli_schedules import cli_backend  # noqa: F401 - every test on both stores
from wfsched.api.run_ops import WITHDRAWN, Runs
from wfsched.store import Store


def test_pending_requests_are_listed_counted_and_withdrawn(
    run_cli: CliRun, make_definition: Callable[..., Path]
) -> None:
    assert run_cli("requests") == (0, "no pending requests\n", run_cli("requests")[2])
    assert run_cli("create", str(make_definition("job")))[0] == 0
    for _ in range(2):
        code, out, _err = run_cli("trigger", "job")
        assert code == 0 and "no supervisor is running, so it waits" in out
    items = json.loads(run_cli("requests", "--json")[1])["items"]
    assert [(i["id"], i["kind"], i["target"], i["state"]) for i in items] == [
        (1, "trigger", "job", "pending"),
        (2, "trigger", "job", "pending"),
    ]
    assert items[0]["requested_at"] == "2026-06-01T12:00:00Z" and items[0]["requested_by"] is None
    table = run_cli("requests")[1]
    assert "REQUESTED AT (UTC)" in table and "2026-06-01T12:00:00Z" in table
    assert json.loads(run_cli("status", "--json")[1])["pending_requests"] == 2
    assert "pending requests     2 waiting for a supervisor to start" in run_cli("status")[1]
    assert run_cli("requests", "cancel", "1") == (
        0,
        "withdrew request 1 (trigger job); the supervisor will not act on it\n",
        "",
    )
    assert run_cli("requests", "cancel", "1") == (
        0,
        "request 1 (trigger job) was already withdrawn\n",
        "",
    )
    code, out, err = run_cli("requests", "cancel", "99")
    assert (code, out) == (3, "") and "no request 99" in err
    code, out, err = run_cli("requests", "cancel", "1e3")
    assert (code, out) == (2, "") and "not a whole number" in err
    assert [i["id"] for i in json.loads(run_cli("requests", "--json")[1])["items"]] == [2]
    assert json.loads(run_cli("status", "--json")[1])["pending_requests"] == 1


def test_the_withdrawal_and_the_supervisors_answer_cannot_both_win(
    make_store: Callable[[Path], Store], tmp_path: Path, clock: SettableClock
) -> None:
    store = make_store(tmp_path / "store")
    try:
        with store.atomic():
            first = store.insert_request("trigger", clock(), schedule_id="a")
            second = store.insert_request("trigger", clock(), schedule_id="a")
        runs = Runs(store, clock=clock)
        assert runs.withdraw(first).startswith("withdrew request 1")
        with store.atomic():
            # The supervisor's answer comes second: nothing is written.
            assert store.finish_request(first, "done", "run-000001", clock()) is False
            assert store.finish_request(second, "done", "run-000002", clock()) is True
        assert store.get_request(first).result == WITHDRAWN  # type: ignore[union-attr]
        with pytest.raises(Exception, match="already taken by the supervisor"):
            runs.withdraw(second)
    finally:
        store.close()


@pytest.fixture
def daemon_store(tmp_path: Path, store_kind: str, request: pytest.FixtureRequest) -> Path | str:
    if store_kind == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return tmp_path / "store"


def test_a_withdrawn_trigger_never_runs_and_a_taken_one_cannot_be_withdrawn(
    daemon_store: Path | str, tmp_path: Path
) -> None:
    define(
        daemon_store, tmp_path, "job", '[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["true"]\n'
    )
    assert wfsched(daemon_store, "trigger", "job").returncode == 0
    assert wfsched(daemon_store, "trigger", "job").returncode == 0
    assert wfsched(daemon_store, "requests", "cancel", "1").returncode == 0
    daemon = Daemon(daemon_store)
    try:
        daemon.wait_started()
        wait_for(lambda: wfsched_json(daemon_store, "requests")["items"] == [], what="taken")
        wait_for(lambda: " completed " in daemon.text(), what="the one run")
        runs = wfsched_json(daemon_store, "runs")["items"]
        assert len(runs) == 1 and runs[0]["kind"] == "manual"
        late = wfsched(daemon_store, "requests", "cancel", "2")
        assert (
            late.returncode == 4
            and "already taken by the supervisor (done: run-000001)" in late.stderr
        )
    finally:
        assert daemon.stop() == 0
