"""`wfsched runs ...`, `wfsched logs` and `wfsched trigger`: inspect runs
and their output, and ask the supervisor to start, resume or cancel them."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from wfsched.cli import CliState, pass_state, runs_dir_option
from wfsched.cli.complete import run_argument, schedule_argument, schedule_ids
from wfsched.cli.output import (
    Column,
    Listing,
    add_row,
    duration_text,
    event_text,
    local_text,
    next_page,
    print_json,
    run_duration_text,
    say,
    schedule_zone,
    show,
    table,
)
from wfsched.cli.params import MAX_COUNTER, Count, reverse_option, wide_option
from wfsched.domain.timeutil import format_event
from wfsched.errors import NotFoundError, OperationError, UsageError

if TYPE_CHECKING:
    from wfsched.api.run_ops import LogPlace, Runs

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_PAGE = 20
ANSWER_WAIT = 5.0
"""Seconds a request waits for a running supervisor's answer (it polls every 1 s)."""


def _runs(state: CliState, *, here: bool = False) -> Runs:
    """The runs API; `here`: told this host's name (config `host`), for the
    commands that read run directories."""
    from wfsched.api.run_ops import Runs

    store = state.store(create=False)
    if store is None:
        raise NotFoundError(f"no store at {state.location().display}")
    return Runs(store, clock=state.clock, host=state.settings().host if here else None)


def _list_options(command: F) -> F:
    """The listing options, shared by `runs` alone and `runs list`."""
    for option in reversed(
        (
            click.option(
                "--schedule",
                "schedule_id",
                metavar="ID",
                help="Only runs of this schedule.",
                shell_complete=schedule_ids,
            ),
            click.option(
                "--status", metavar="STATE", help="admitted|running|interrupted|completed|failed"
            ),
            click.option(
                "--limit",
                type=int,
                default=DEFAULT_PAGE,
                show_default=True,
                help="Rows per page (1..100).",
            ),
            click.option(
                "--page", "cursor", metavar="CURSOR", help="The next_cursor of the previous page."
            ),
            reverse_option,
            wide_option,
            click.option("--json", "as_json", is_flag=True, help="Print JSON."),
        )
    ):
        command = option(command)
    return command


@click.group(invoke_without_command=True)
@_list_options
@click.pass_context
def runs(
    ctx: click.Context,
    schedule_id: str | None,
    status: str | None,
    limit: int,
    cursor: str | None,
    reverse: bool,
    wide: bool,
    as_json: bool,
) -> None:
    """Runs, newest first (`runs` alone lists them too)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(
            list_runs,
            schedule_id=schedule_id,
            status=status,
            limit=limit,
            cursor=cursor,
            reverse=reverse,
            wide=wide,
            as_json=as_json,
        )


@runs.command("list")
@_list_options
@pass_state
def list_runs(
    state: CliState,
    schedule_id: str | None,
    status: str | None,
    limit: int,
    cursor: str | None,
    reverse: bool,
    wide: bool,
    as_json: bool,
) -> None:
    """Runs, newest first (--reverse: oldest first).

    STARTED is when its latest attempt's process started; DURATION how long
    it ran (so far, while it runs). "SCHEDULED (LOCAL)" is in the schedule's
    own zone, never the operator's. On a narrow terminal the columns needed
    least are left out (first KIND, SCHEDULED (LOCAL), SCHEDULED (UTC));
    --wide shows them all. The line under the table gives the command for
    the next page.
    """
    from wfsched.api.run_ops import Runs, check_list_arguments

    check_list_arguments(status=status, limit=limit, cursor=cursor, oldest_first=reverse)
    store = state.read_store()
    items: list[dict[str, Any]] = []
    next_cursor = None
    if store is not None:
        items, next_cursor = Runs(store, clock=state.clock).list(
            schedule_id=schedule_id,
            status=status,
            limit=limit,
            cursor=cursor,
            oldest_first=reverse,
        )
    if as_json:
        print_json({"items": items, "next_cursor": next_cursor})
        return
    if not items:
        say(_no_runs_text(schedule_id, status, cursor))
        return
    zones = _Zones(state)
    grid = Listing(
        Column("RUN"),
        Column("SCHEDULE"),
        Column("KIND", priority=8),
        Column("STATE"),
        Column("SCHEDULED (UTC)", priority=6),
        Column("SCHEDULED (LOCAL)", priority=7),
        Column("STARTED (UTC)", priority=1),
        Column("DURATION", priority=2, justify="right"),
        Column("EXIT", priority=4, justify="right"),
        Column("REASON", priority=3, wrap=True),
    )
    now = state.clock()
    for item in items:
        grid.add_row(
            item["run_id"],
            item["schedule_id"],
            item["kind"],
            item["state"],
            item["scheduled_at"],
            local_text(item["scheduled_at"], zones.of(item["schedule_id"])),
            event_text(item["started_at"]),
            run_duration_text(item["started_at"], item["finished_at"], now),
            item["exit_code"],
            item["reason"],
        )
    grid.show(state.get_console(), wide=wide)
    if next_cursor:
        next_page(
            "runs",
            options={
                "--schedule": schedule_id,
                "--status": status,
                "--limit": limit if limit != DEFAULT_PAGE else None,
                "--reverse": True if reverse else None,
            },
            cursor=next_cursor,
        )


def _no_runs_text(schedule_id: str | None, status: str | None, cursor: str | None) -> str:
    """`no runs`, `no failed runs of nightly`: an empty listing says so."""
    text = f"no {status} runs" if status else "no runs"
    if schedule_id:
        text += f" of {schedule_id}"
    return text + (" on this page" if cursor else "")


@runs.command("show")
@run_argument()
@wide_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@runs_dir_option
@pass_state
def show_run(state: CliState, run: str, wide: bool, as_json: bool) -> None:
    """One run: its frozen invocation, attempts and reasons.

    From a host other than the one that executed the run, the stderr lines
    come from the tail its exit record kept in the store.
    """
    view = _runs(state, here=True).show(run)
    if as_json:
        print_json(view)
        return
    grid = table("FIELD", "VALUE", title=view["run_id"])
    grid.show_header = False
    for key in ("schedule_id", "occurrence_id", "kind", "state", "reason", "exit_code"):
        add_row(grid, key, view[key])
    add_row(grid, "revision", view["revision"])
    add_row(grid, "host", view["host"] or "(not recorded: admitted before runs had hosts)")
    zone = _Zones(state).of(view["schedule_id"])
    for key in ("scheduled_at", "admitted_at", "started_at", "finished_at"):
        when = view[key]
        add_row(grid, key, f"{when}  ({local_text(when, zone)})" if when else None)
    for key, value in view["invocation"].items():
        add_row(grid, f"invocation.{key}", duration_text(value) if key == "timeout" else value)
    add_row(grid, "run_dir", view["run_dir"])
    add_row(grid, "failure hook", _hooks_text(view))
    show(state.get_console(), grid)
    if view["attempts"]:
        attempts = Listing(
            Column("ATTEMPT", justify="right"),
            Column("STATE"),
            Column("STARTED (UTC)", priority=1),
            Column("DURATION", priority=2, justify="right"),
            Column("FINISHED (UTC)", priority=5),
            Column("EXIT", priority=4, justify="right"),
            Column("REASON", priority=3, wrap=True),
        )
        now = state.clock()
        for attempt in view["attempts"]:
            attempts.add_row(
                attempt["attempt"],
                attempt["state"],
                event_text(attempt["started_at"]),
                run_duration_text(attempt["started_at"], attempt["finished_at"], now),
                event_text(attempt["finished_at"]),
                attempt["exit_code"],
                attempt["reason"],
            )
        attempts.show(state.get_console(), wide=wide)
        for attempt in view["attempts"]:
            for stream, dropped in (attempt["output_truncated"] or {}).items():
                say(
                    f"attempt {attempt['attempt']} {stream}: output truncated, the first"
                    f" {dropped} bytes dropped (max_log_bytes)"
                )
    else:
        say("not started yet: no attempts, no output")
        return
    if not view["logs_here"]:
        host = f"host {view['host']}" if view["host"] else "the host that ran it"
        say(
            f"the full logs are on {host} in {view['run_dir']}; the lines below come from"
            " the last 64 KiB of output kept in the store"
        )
    if view["stderr_tail"]:
        say(f"last lines of stderr (attempt {view['attempts'][-1]['attempt']}):")
        for line in view["stderr_tail"]:
            say(f"  {line}")
    else:
        say(f"stderr of attempt {view['attempts'][-1]['attempt']} is empty")


def _hooks_text(view: dict[str, Any]) -> str:
    """Did the alert go out? One phrase per hook fired for this run."""
    if not view["failure_hooks"]:
        if view["state"] == "failed":
            return "none ran (no hook configured, or the run was cancelled)"
        return "none (the run did not fail)"
    parts = []
    for hook in view["failure_hooks"]:
        text = f"attempt {hook['attempt']}: {hook['state']}"
        if hook["reason"]:
            text += f" ({hook['reason']})"
        if hook["finished_at"]:
            text += f" at {hook['finished_at']}"
        parts.append(text)
    return "; ".join(parts)


@runs.command("logs")
@run_argument()
@click.option("--stdout", "only_stdout", is_flag=True, help="Show stdout only, unlabelled.")
@click.option("--stderr", is_flag=True, help="Show stderr only, unlabelled.")
@click.option("--attempt", type=Count(1, MAX_COUNTER), help="Attempt number (default: the latest).")
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Keep printing until the attempt ends (stdout unless --stderr).",
)
@runs_dir_option
@pass_state
def logs(
    state: CliState,
    run: str,
    only_stdout: bool,
    stderr: bool,
    attempt: int | None,
    follow: bool,
) -> None:
    """Print a run's output.

    With neither --stdout nor --stderr, both streams are shown: stdout as is
    when stderr is empty, otherwise each under a `==> stdout (N bytes) <==`
    label. --follow follows one stream (stdout unless --stderr) and says how
    much the other one holds. On another host than the one that ran it, the
    last 64 KiB of each stream kept in the store are shown, and stderr says
    which host and directory hold the full logs; --follow of an attempt still
    running elsewhere exits 3 naming them.
    """
    if only_stdout and stderr:
        raise UsageError("--stdout and --stderr cannot be combined; give neither for both")
    _print_logs(_runs(state, here=True), run, only_stdout, stderr, attempt, follow)


def _print_logs(
    api: Runs, run: str, only_stdout: bool, stderr: bool, attempt: int | None, follow: bool
) -> None:
    """One attempt's output, as `runs logs` prints it (and `logs` reuses)."""
    place = api.log_place(run, attempt)
    if not place.here:
        _stored_logs(api, place, only_stdout, stderr, follow)
        return
    if stderr or only_stdout or follow:
        path = api.log_file(run, attempt=attempt, stderr=stderr)
        _copy_log(api, run, attempt, path, follow)
        if follow and not only_stdout:
            _mention_other(api.log_file(run, attempt=attempt, stderr=not stderr))
        return
    out_path = api.log_file(run, attempt=attempt, stderr=False)
    err_path = api.log_file(run, attempt=attempt, stderr=True)
    err_size = _size(err_path)
    if not err_size:
        if not out_path.exists() and not err_path.exists():
            raise NotFoundError(f"{out_path.parent}: no log written (yet)")
        if not _size(out_path):
            click.echo(
                f"wfsched: note: {api.run(run).run_id} wrote nothing to stdout or stderr", err=True
            )
            return
        _copy_log(api, run, attempt, out_path, False)
        return
    for name, path in (("stdout", out_path), ("stderr", err_path)):
        say(f"==> {name} ({_size(path)} bytes) <==")
        if _size(path):
            _copy_log(api, run, attempt, path, False)
            _end_line(path)


def _stored_logs(api: Runs, place: LogPlace, only_stdout: bool, stderr: bool, follow: bool) -> None:
    """The tails the exit record kept, for an attempt that ran elsewhere."""
    from wfsched.store.rundirs import OUTPUT_TAIL_BYTES

    where = place.elsewhere()
    label = f"{place.run_id} attempt {place.attempt}"
    if follow and place.running:
        raise NotFoundError(
            f"{label} is running {where}; follow it there (its output reaches the store"
            " when the attempt ends)"
        )
    out, err = api.stored_output(place)
    if out is None and err is None:
        why = "is still running" if place.running else "ended before output was kept"
        raise NotFoundError(
            f"{label} {why}: the store holds none of its output; the full logs are {where}"
        )
    click.echo(
        f"wfsched: note: {label} ran {where}; showing the last"
        f" {OUTPUT_TAIL_BYTES // 1024} KiB of each stream, kept in the store",
        err=True,
    )
    if stderr or only_stdout or follow:
        _write((err if stderr else out) or b"")
        return
    if not err:
        if not out:
            click.echo(f"wfsched: note: {label} wrote nothing to stdout or stderr", err=True)
        _write(out or b"")
        return
    for name, data in (("stdout", out or b""), ("stderr", err)):
        say(f"==> {name} ({len(data)} bytes) <==")
        _write(data if data.endswith(b"\n") or not data else data + b"\n")


def _write(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _end_line(path: Path) -> None:
    """Keep the next label on a line of its own after output without a final newline."""
    with open(path, "rb") as handle:
        handle.seek(-1, 2)
        if handle.read(1) != b"\n":
            sys.stdout.buffer.write(b"\n")
            sys.stdout.buffer.flush()


def _mention_other(path: Path) -> None:
    size = _size(path)
    if size:
        stream = "stderr" if path.name.startswith("stderr") else "stdout"
        click.echo(f"wfsched: note: {stream} has {size} bytes (`--{stream}` shows it)", err=True)


def _copy_log(api: Runs, run: str, attempt: int | None, path: Path, follow: bool) -> None:
    out = sys.stdout.buffer
    if not path.exists():
        raise NotFoundError(f"{path}: no log written (yet)")
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(65536)
            if chunk:
                out.write(chunk)
                out.flush()
                continue
            if not follow or not api.attempt_running(run, attempt):
                rest = handle.read()
                out.write(rest)
                out.flush()
                return
            time.sleep(0.2)


FOLLOW_POLL = 0.5
"""Seconds between looks for a schedule's next run (`logs --follow`)."""


@click.command("logs")
@schedule_argument()
@click.option("--stdout", "only_stdout", is_flag=True, help="Show stdout only, unlabelled.")
@click.option("--stderr", is_flag=True, help="Show stderr only, unlabelled.")
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Keep following: each next run of the schedule, under a header line, until Ctrl-C.",
)
@runs_dir_option
@pass_state
def schedule_logs(
    state: CliState, schedule_id: str, only_stdout: bool, stderr: bool, follow: bool
) -> int | None:
    """Print the logs of a schedule's latest run, as `runs logs` prints a run's.

    The latest run is the newest one that has started (a run still waiting
    for a slot has no output yet). --follow follows it, then each run of the
    schedule that starts after it (a resumed run's new attempt too), like
    `journalctl -f`: one line `==> RUN attempt N (KIND, started TIME) <==`
    before each, then its output as `runs logs --follow` shows it (stdout
    unless --stderr). It waits for the first run if there is none yet, and
    ends on Ctrl-C with exit status 0.
    """
    if only_stdout and stderr:
        raise UsageError("--stdout and --stderr cannot be combined; give neither for both")
    state.reads().row(schedule_id)
    api = _runs(state, here=True)
    if not follow:
        latest = api.latest_started(schedule_id)
        if latest is None:
            raise NotFoundError(
                f"{schedule_id} has no run that started yet; `wfsched runs --schedule"
                f" {schedule_id}` lists its runs, `wfsched logs --follow {schedule_id}` waits"
            )
        _print_logs(api, latest.run_id, only_stdout, stderr, None, False)
        return None
    try:
        _follow_schedule(api, schedule_id, only_stdout, stderr)
    except KeyboardInterrupt:
        # Ctrl-C is how a follow ends, as with `journalctl -f`: not an error.
        return 0
    return None


def _follow_schedule(api: Runs, schedule_id: str, only_stdout: bool, stderr: bool) -> None:
    followed: tuple[int, int] | None = None
    waiting_noted = False
    while True:
        latest = api.latest_started(schedule_id)
        if latest is None or (latest.seq, latest.attempt) == followed:
            if latest is None and not waiting_noted:
                click.echo(f"wfsched: note: waiting for the first run of {schedule_id}", err=True)
                waiting_noted = True
            time.sleep(FOLLOW_POLL)
            continue
        followed = (latest.seq, latest.attempt)
        started = latest.started_at if latest.started_at is not None else latest.admitted_at
        say(
            f"==> {latest.run_id} attempt {latest.attempt} ({latest.kind},"
            f" started {event_text(format_event(started))}) <=="
        )
        place = api.log_place(latest.run_id, latest.attempt)
        while not place.here and place.running:
            # Its output reaches the store when the attempt ends elsewhere.
            time.sleep(FOLLOW_POLL)
            place = api.log_place(latest.run_id, latest.attempt)
        try:
            _print_logs(api, latest.run_id, only_stdout, stderr, latest.attempt, True)
        except NotFoundError as exc:
            # One run without output does not end the follow.
            click.echo(f"wfsched: note: {exc}", err=True)


@runs.command("resume")
@run_argument()
@click.option(
    "--input",
    "input_file",
    type=click.File("r"),
    help="JSON for the new attempt (WFSCHED_RESUME_INPUT and its stdin).",
)
@pass_state
def resume(state: CliState, run: str, input_file: Any) -> None:
    """Ask the supervisor to resume an interrupted run (attempt N+1)."""
    from wfsched.store.rundirs import NO_RESUME_INPUT

    document = NO_RESUME_INPUT
    if input_file is not None:
        try:
            document = json.load(input_file)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--input {input_file.name}: not JSON: {exc}") from None
    api = _runs(state)
    _report(
        api,
        _recorded(state, lambda: api.request_resume(run, document), "resume"),
        "resume",
        # Refused because its host was lost by then: a conflict, as up front.
        on_refusal=lambda: api.check_resume_host(api.run(run)),
    )


@runs.command("cancel")
@run_argument()
@pass_state
def cancel(state: CliState, run: str) -> None:
    """Terminate a run's process group (SIGTERM, kill_grace, SIGKILL)."""
    api = _runs(state)
    outcome = api.request_cancel(run)
    if isinstance(outcome, str):
        say(outcome)
        return
    _report(api, outcome, "cancel")


@click.command()
@schedule_argument()
@pass_state
def trigger(state: CliState, schedule_id: str) -> None:
    """Start a manual run of the schedule's current definition now.

    Bypasses overlap and capacity; works while paused; refused when deleted.
    """
    api = _runs(state)
    _report(api, _recorded(state, lambda: api.request_trigger(schedule_id), "trigger"), "trigger")


def _recorded(state: CliState, request: Callable[[], int], what: str) -> int:
    """Record a request with Ctrl-C held (one short transaction), so that a
    Ctrl-C afterwards, while waiting for the answer, says it was recorded: a
    second `trigger` would make a second run."""
    state.interrupts.hold()
    try:
        seq = request()
        state.interrupted = (
            f"interrupted after recording {what} request {seq}: it stands, and the supervisor"
            f" carries it out (`wfsched requests` lists it; `wfsched requests cancel {seq}`"
            " withdraws it while it is not taken)"
        )
    finally:
        state.interrupts.release()
    return seq


class _Zones:
    """Each schedule's display zone, read once per command (times are shown
    in UTC and in the schedule's zone, as every human output shows times)."""

    def __init__(self, state: CliState) -> None:
        self._state = state
        self._zones: dict[str, tzinfo] = {}

    def of(self, schedule_id: str) -> tzinfo:
        if schedule_id not in self._zones:
            self._zones[schedule_id] = schedule_zone(self._state.reads().get(schedule_id))
        return self._zones[schedule_id]


def _report(
    api: Runs, request_seq: int, what: str, on_refusal: Callable[[], None] | None = None
) -> None:
    """The supervisor's answer, or what the request waits for. `on_refusal`
    may raise a more precise error than the refusal's exit 1."""
    pid = api.supervisor_pid()
    if pid is None:
        say(
            f"{what} request {request_seq} recorded; no supervisor is running, so it waits"
            " until `wfsched supervise` starts"
        )
        return
    answer = api.wait(request_seq, ANSWER_WAIT)
    if answer.state == "pending":
        note = api.waiting_note(answer)
        if note is not None:
            say(f"{what} request {request_seq} recorded; {note}")
        else:
            say(
                f"{what} request {request_seq} recorded; the supervisor (pid {pid})"
                " has not answered yet"
            )
    elif answer.state == "refused":
        if on_refusal is not None:
            on_refusal()
        raise OperationError(f"{what} refused: {answer.result}")
    else:
        say(answer.result or "done")


def register(group: click.Group) -> None:
    group.add_command(runs)
    group.add_command(trigger)
    group.add_command(schedule_logs)
