"""Every integer of a definition, the config file and a command-line flag has
a documented range; outside it is one line, exit 2, nothing written (issue 26,
item 2). Through the real CLI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import CliRun, definition_text

from tests.daemon import wfsched
from tests.test_cli_schedules import assert_no_store, cli_backend, rows  # noqa: F401

HUGE = "99999999999999999999"

DEFINITIONS = {
    "max_active_runs huge": (
        '[policy]\noverlap = "parallel"\nmax_active_runs = ' + HUGE + "\n",
        f"policy.max_active_runs: {HUGE} must be an integer from 1 to 10,000",
    ),
    "max_active_runs above the bound": (
        '[policy]\noverlap = "parallel"\nmax_active_runs = 10001\n',
        "policy.max_active_runs: 10001 must be an integer from 1 to 10,000",
    ),
    "max_active_runs a float": (
        '[policy]\noverlap = "parallel"\nmax_active_runs = 1e20\n',
        "policy.max_active_runs: 1e+20 must be an integer from 1 to 10,000",
    ),
    "literal integer beyond 64 bits": (
        '[[input]]\ntarget = "n"\nliteral = ' + HUGE + "\n",
        f"input[0].literal: {HUGE} is out of range: integers are -9223372036854775808 to",
    ),
    "nested literal integer": (
        '[[input]]\ntarget = "n"\nliteral = { a = [1, -' + HUGE + "] }\n",
        f"input[0].literal.a[1]: -{HUGE} is out of range",
    ),
    "interrupt_exit_code": (
        "interrupt_exit_code = 256\n",
        "run.interrupt_exit_code: 256 must be an integer from 1 to 255",
    ),
    "timeout seconds": (
        f"timeout = {HUGE}\n",
        f"run.timeout: {HUGE} is too long: at most 315360000 seconds",
    ),
}


@pytest.mark.parametrize("case", sorted(DEFINITIONS))
@pytest.mark.parametrize("command", ["validate", "create", "apply"])
def test_an_integer_out_of_range_in_a_definition_is_refused(
    run_cli: CliRun, write_toml: Callable[..., Path], store_path: Path, command: str, case: str
) -> None:
    extra, message = DEFINITIONS[case]
    text = definition_text("big")
    if extra.startswith(("interrupt_exit_code", "timeout")):
        text += extra  # inside [run], the last table of definition_text
    else:
        text += "\n" + extra
    path = write_toml("big.toml", text)
    code, out, err = run_cli(command, str(path))
    assert (code, out) == (2, "")
    assert err == f"wfsched: error: {path}: {message}" + err.split(message, 1)[1]
    assert err.count("\n") == 1
    assert_no_store(store_path)


def test_the_largest_values_in_range_are_accepted(
    run_cli: CliRun, write_toml: Callable[..., Path]
) -> None:
    text = definition_text("edge") + (
        "interrupt_exit_code = 255\n"
        '\n[policy]\noverlap = "parallel"\nmax_active_runs = 10000\n'
        '\n[[input]]\ntarget = "n"\nliteral = [9223372036854775807, -9223372036854775808]\n'
    )
    code, _out, err = run_cli("create", str(write_toml("edge.toml", text)))
    assert (code, err) == (0, "")
    view = run_cli("get", "edge", "--json")[1]
    assert '"max_active_runs": 10000' in view and "1e+" not in view


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            f"max_concurrent_runs = {HUGE}",
            f"max_concurrent_runs: {HUGE} must be an integer from 1 to 10,000",
        ),
        (
            "max_concurrent_runs = 1e20",
            "max_concurrent_runs: 1e+20 must be an integer from 1 to 10,000",
        ),
        (
            "max_admissions_per_tick = 100001",
            "max_admissions_per_tick: 100001 must be an integer from 1 to 100,000",
        ),
        (
            "max_log_bytes = 1099511627777",
            "max_log_bytes: 1099511627777 must be an integer from 4,096 to 1,099,511,627,776",
        ),
    ],
)
def test_an_integer_out_of_range_in_the_config_file_stops_the_supervisor(
    tmp_path: Path, setting: str, message: str
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "config.toml").write_text(setting + "\n")
    result = wfsched(store, "supervise")
    assert result.returncode == 2
    assert result.stderr == f"wfsched: error: {store / 'config.toml'}: {message}\n"
    assert sorted(path.name for path in store.iterdir()) == ["config.toml"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["supervise", "--max-concurrent-runs", "1e20"],
            "'1e20' is not a whole number; expected an integer from 1 to 10,000",
        ),
        (
            ["supervise", "--max-concurrent-runs", HUGE],
            f"{HUGE} is out of range; expected an integer from 1 to 10,000",
        ),
        (
            ["supervise", "--max-concurrent-runs", "0"],
            "0 is out of range; expected an integer from 1 to 10,000",
        ),
        (
            ["update", "DEF", "--expected-revision", "2147483648"],
            "2147483648 is out of range; expected an integer from 1 to 2,147,483,647",
        ),
        (["runs", "logs", "run-1", "--attempt", "1.5"], "'1.5' is not a whole number"),
    ],
)
def test_an_integer_flag_out_of_range_is_refused(
    tmp_path: Path, make_definition: Callable[..., Path], args: list[str], message: str
) -> None:
    store = tmp_path / "store"
    args = [str(make_definition("x")) if arg == "DEF" else arg for arg in args]
    result = wfsched(store, *args)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and message in result.stderr
    assert not store.exists()
