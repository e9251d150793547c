"""Supervisor configuration, failure hooks, event log format, `supervise --apply`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.daemon import Daemon, wait_for, wfsched, wfsched_json, write_definition
from tests.test_supervisor_loop import T0, Harness
from wfsched.daemon.supervisor import Supervisor
from wfsched.domain.config import SupervisorConfig, load_config
from wfsched.domain.definition import parse_definition
from wfsched.errors import DefinitionError


class TestConfig:
    def test_defaults_without_a_file(self, tmp_path: Path) -> None:
        assert load_config(tmp_path, {}) == SupervisorConfig()

    def test_file_then_flags(self, tmp_path: Path) -> None:
        (tmp_path / "config.toml").write_text(
            'poll_interval = "2s"\nmax_concurrent_runs = 8\ndrain_grace = "1m"\n'
            'on_failure = ["mail", "ops@example.com"]\nretention = "30d"\n'
        )
        config = load_config(tmp_path, {"max_concurrent_runs": 2, "drain_grace": None})
        assert config.poll_interval == 2
        assert config.max_concurrent_runs == 2
        assert config.drain_grace == 60
        assert config.on_failure == ("mail", "ops@example.com")
        assert config.retention == 30 * 86400

    @pytest.mark.parametrize(
        ("text", "key", "words"),
        [
            ("pol_interval = 1\n", "pol_interval", "unknown setting"),
            ("max_concurrent_runs = 0\n", "max_concurrent_runs", "from 1 to 10,000"),
            ("max_concurrent_runs = true\n", "max_concurrent_runs", "number"),
            ('drain_grace = "soon"\n', "drain_grace", "not a duration"),
            ("on_failure = []\n", "on_failure", "argv"),
            ('retention = "1m"\n', "retention", "at least"),
            # Durations end at 3650d; the poll interval at one epoll wait's day.
            ('retention = "3651d"\n', "retention", "too long"),
            ('drain_grace = "9999999999d"\n', "drain_grace", "too long"),
            ("drain_grace = inf\n", "drain_grace", "not a number of seconds"),
            ("poll_interval = nan\n", "poll_interval", "not a number of seconds"),
            ("poll_interval = 1e300\n", "poll_interval", "too long"),
            ('poll_interval = "2d"\n', "poll_interval", "at most 86400 seconds"),
            ('on_failure = ["mail", "a\\u0000b"]\n', "on_failure[1]", "NUL character"),
            ('on_failure = ["mail", ""]\n', "on_failure[1]", "non-empty string"),
            ("poll_interval = [\n", "", "cannot read"),
        ],
    )
    def test_invalid_values_name_file_and_key(
        self, tmp_path: Path, text: str, key: str, words: str
    ) -> None:
        (tmp_path / "config.toml").write_text(text)
        with pytest.raises(DefinitionError) as caught:
            load_config(tmp_path, {})
        message = str(caught.value)
        assert message.startswith(str(tmp_path / "config.toml"))
        assert f": {key}: " in message if key else True
        assert words in message

    def test_bad_flag_is_named(self, tmp_path: Path) -> None:
        with pytest.raises(DefinitionError, match="--max-concurrent-runs"):
            load_config(tmp_path, {"max_concurrent_runs": 0})

    @pytest.mark.parametrize(
        ("flag", "value", "words"),
        [
            ("poll_interval", float("nan"), "--poll-interval: nan is not a number of seconds"),
            ("poll_interval", 86400.5, "--poll-interval: must be at most 86400 seconds"),
            ("drain_grace", float("inf"), "--drain-grace: inf is not a number of seconds"),
            ("drain_grace", 315360000.5, "--drain-grace: 315360000.5 is too long"),
        ],
    )
    def test_flag_durations_are_bounded(
        self, tmp_path: Path, flag: str, value: float, words: str
    ) -> None:
        with pytest.raises(DefinitionError) as caught:
            load_config(tmp_path, {flag: value})
        assert str(caught.value).startswith(f"command line: {words}")

    def test_largest_settings_are_accepted(self, tmp_path: Path) -> None:
        (tmp_path / "config.toml").write_text(
            '\ufeffpoll_interval = "1d"\ndrain_grace = "3650d"\nretention = 315360000\n'
        )
        config = load_config(tmp_path, {})
        assert (config.poll_interval, config.drain_grace, config.retention) == (
            86400,
            315360000,
            315360000,
        )

    def test_supervise_refuses_a_nan_poll_interval_with_one_line_and_exit_2(
        self, tmp_path: Path
    ) -> None:
        result = wfsched(tmp_path / "store", "supervise", "--poll-interval", "nan")
        assert result.returncode == 2
        assert result.stderr == (
            "wfsched: error: command line: --poll-interval: nan is not a number of seconds\n"
        )

    def test_supervise_refuses_bad_config_with_one_line_and_exit_2(self, tmp_path: Path) -> None:
        store = tmp_path / "store"
        store.mkdir()
        (store / "config.toml").write_text("max_concurrent_runs = -1\n")
        result = wfsched(store, "supervise")
        assert result.returncode == 2
        assert "max_concurrent_runs" in result.stderr
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


class TestHooks:
    def hook_harness(
        self, tmp_path: Path, on_failure: str = "", default: tuple[str, ...] | None = None
    ) -> Harness:
        h = Harness(tmp_path / "store")
        h.supervisor = Supervisor(
            h.store,
            SupervisorConfig(on_failure=default),
            h.control,
            clock=h.clock,
            log=lambda event, **fields: h.events.append((event, fields)),
        )
        text = 'id = "a"\n[trigger]\ncron = "0 * * * *"\n[run]\ncommand = ["true"]\n' + on_failure
        h.admin.create(parse_definition(text, "a.toml", now=int(h.clock())))
        h.supervisor.tick()
        return h

    def test_failed_run_fires_the_schedule_hook_with_the_facts(self, tmp_path: Path) -> None:
        h = self.hook_harness(tmp_path, '[notify]\non_failure = ["alert", "--now"]\n')
        h.tick_at(T0)
        h.control.finish("run-000001", exit_code=3, reason="exited with status 3")
        h.tick_at(T0 + 1)
        spec, _ = h.control.spec("run-000001-notify")
        assert spec.argv == ("alert", "--now")
        assert spec.env["WFSCHED_RUN_ID"] == "run-000001"
        assert spec.env["WFSCHED_SCHEDULE_ID"] == "a"
        assert spec.env["WFSCHED_RUN_STATE"] == "failed"
        assert spec.env["WFSCHED_EXIT_CODE"] == "3"
        assert spec.env["WFSCHED_REASON"] == "exited with status 3"
        assert spec.timeout is not None

    def test_config_default_hook_applies_and_its_failure_is_logged_once(
        self, tmp_path: Path
    ) -> None:
        h = self.hook_harness(tmp_path, default=("fallback",))
        h.tick_at(T0)
        h.control.finish("run-000001", exit_code=1)
        h.tick_at(T0 + 1)
        assert h.control.spec("run-000001-notify")[0].argv == ("fallback",)
        h.control.finish("run-000001-notify", exit_code=1, reason="exited with status 1")
        h.tick_at(T0 + 2)
        h.tick_at(T0 + 3)
        failures = [fields for event, fields in h.events if event == "notify-failed"]
        assert failures == [{"run": "run-000001", "reason": "exited with status 1"}]
        assert sum(spec.run_id.endswith("-notify") for spec, _ in h.control.spawned) == 1

    def test_success_and_operator_cancel_fire_no_hook(self, tmp_path: Path) -> None:
        h = self.hook_harness(tmp_path, default=("fallback",))
        h.tick_at(T0)
        h.control.finish("run-000001")
        h.tick_at(T0 + 3600)
        h.runs.request_cancel("run-000002")
        h.supervisor.tick()
        h.control.finish("run-000002", exit_code=None, outcome="cancelled", reason="cancelled")
        h.supervisor.tick()
        assert not [spec for spec, _ in h.control.spawned if spec.run_id.endswith("-notify")]

    def test_real_hook_receives_the_environment(self, tmp_path: Path) -> None:
        store = tmp_path / "store"
        seen = tmp_path / "hook-env"
        daemon = Daemon(store)
        daemon.wait_started()
        try:
            path = write_definition(
                tmp_path,
                "bad",
                'id = "bad"\n[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["false"]\n'
                f'[notify]\non_failure = ["sh", "-c", "env > {seen}"]\n',
            )
            assert wfsched(store, "create", str(path)).returncode == 0
            assert wfsched(store, "trigger", "bad").returncode == 0
            wait_for(lambda: seen.exists() and "WFSCHED_RUN_ID" in seen.read_text(), what="hook")
            wait_for(lambda: " notified " in daemon.text(), what="hook logged")
        finally:
            daemon.stop()
        env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
        assert env["WFSCHED_RUN_ID"] == "run-000001"
        assert env["WFSCHED_RUN_STATE"] == "failed"
        assert env["WFSCHED_EXIT_CODE"] == "1"


def test_supervise_apply_and_json_log_format(tmp_path: Path) -> None:
    store = tmp_path / "store"
    folder = tmp_path / "defs"
    write_definition(
        folder, "a", 'id = "a"\n[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["true"]\n'
    )
    daemon = Daemon(store, "--apply", str(folder), "--log-format", "json")
    try:
        wait_for(lambda: '"event": "ready"' in daemon.text(), what="start")
        assert wfsched_json(store, "get", "a")["revision"] == 1
        assert wfsched(store, "trigger", "a").returncode == 0
        wait_for(lambda: '"event": "completed"' in daemon.text(), what="completion")
    finally:
        assert daemon.stop() == 0
    events = [json.loads(line) for line in daemon.text().splitlines()]
    names = [event["event"] for event in events]
    assert names[:3] == ["applied", "apply-summary", "ready"]
    (summary,) = [event for event in events if event["event"] == "apply-summary"]
    assert (summary["created"], summary["updated"], summary["unchanged"]) == (1, 0, 0)
    assert {"admitted", "started", "completed", "draining", "drained"} <= set(names)
    assert all(event["time"].endswith("Z") for event in events)


def test_idle_ticks_log_nothing(tmp_path: Path) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", cron="0 0 1 1 *")
    before = len(h.events)
    for second in range(50):
        h.tick_at(T0 + second)
    assert len(h.events) == before


def test_automatic_retention_prunes_old_finished_runs_in_bounded_steps(tmp_path: Path) -> None:
    h = Harness(tmp_path / "store")
    h.supervisor = Supervisor(
        h.store,
        SupervisorConfig(retention=3600),
        h.control,
        clock=h.clock,
        log=lambda event, **fields: h.events.append((event, fields)),
    )
    h.supervisor.tick()
    h.define("a")
    for minute in range(3):
        h.tick_at(T0 + minute * 60)
        h.control.finish(h.control.spawned[-1][0].run_id)
        h.tick_at(T0 + minute * 60 + 1)
    assert len(h.run_ids()) == 3
    h.tick_at(T0 + 2 * 3600)
    assert [fields for event, fields in h.events if event == "pruned"]
    assert [r for r in h.run_ids() if r in ("run-000001", "run-000002", "run-000003")] == []
