"""`wfsched supervise`: the daemon in the foreground (for a service manager)."""

from __future__ import annotations

import functools
import os
import re
from typing import TYPE_CHECKING

import click

from wfsched.cli import CliState, pass_state, runs_dir_option
from wfsched.cli.params import Count, Duration
from wfsched.daemon import early_stop
from wfsched.domain.config import MAX_CONCURRENT_RUNS

if TYPE_CHECKING:
    from wfsched.daemon.eventlog import EventLog
    from wfsched.daemon.metrics import Metrics
    from wfsched.daemon.metrics_server import MetricsServer
    from wfsched.domain.timeutil import Clock
    from wfsched.store import Store


@click.command()
@click.option(
    "--poll-interval",
    type=Duration(),
    metavar="DURATION",
    help="Time between polls when nothing is due: seconds or <n>s|m|h|d. [1s]",
)
@click.option(
    "--max-concurrent-runs",
    type=Count(1, MAX_CONCURRENT_RUNS),
    help=f"Scheduled runs executing at once (1-{MAX_CONCURRENT_RUNS:,}). [4]",
)
@click.option(
    "--drain-grace",
    type=Duration(),
    metavar="DURATION",
    help="How long SIGTERM waits for runs before cancelling: seconds or <n>s|m|h|d. [30s]",
)
@click.option(
    "--apply",
    "apply_dir",
    metavar="DIR",
    help="Apply the definitions in DIR before starting (for ExecStart=).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="With --apply: an invalid file (exit 2) or a deleted id (exit 4) stops the start.",
)
@click.option(
    "--metrics",
    metavar="HOST:PORT",
    help="Serve Prometheus /metrics and /healthz here (PORT or :PORT = loopback). [off]",
)
@click.option(
    "--host",
    metavar="NAME",
    help="The name recorded on every run this supervisor admits. [the hostname]",
)
@runs_dir_option
@click.option(
    "--lease",
    type=Duration(),
    metavar="DURATION",
    help="PostgreSQL store: the leader's lease; a standby takes over after it. [5s]",
)
@click.option(
    "--lease-renew",
    type=Duration(),
    metavar="DURATION",
    help="PostgreSQL store: how often the leader renews its lease (< --lease). [1s]",
)
@click.option(
    "--host-timeout",
    type=Duration(),
    metavar="DURATION",
    help="PostgreSQL store: a host silent this long is lost; the leader fails its runs. [60s]",
)
@click.option(
    "--log-format",
    type=click.Choice(["human", "json"]),
    default="human",
    show_default=True,
    help="One line per event on stderr.",
)
@pass_state
def supervise(
    state: CliState,
    poll_interval: float | None,
    max_concurrent_runs: int | None,
    drain_grace: float | None,
    apply_dir: str | None,
    strict: bool,
    metrics: str | None,
    host: str | None,
    lease: float | None,
    lease_renew: float | None,
    host_timeout: float | None,
    log_format: str,
) -> None:
    """Run the supervisor: admit due occurrences, launch and watch runs.

    Takes the store's supervisor.lock (a second supervisor exits 4), recovers
    what a previous one left, then runs until SIGTERM/SIGINT, when it drains.
    Settings come from <store>/config.toml, overridden by these flags.
    With --metrics (config: metrics_listen) the address is bound before
    anything else starts, so a bad one exits 2 with nothing done.

    With --apply, an invalid file or one whose id belongs to a deleted
    schedule is logged (`apply-invalid`, `apply-left-alone`) and left out,
    and the supervisor starts on the rest: one bad file must not keep every
    schedule down. With --strict either one stops the start instead (exit 2
    or 4) and nothing is applied.
    """
    from wfsched.daemon.eventlog import EventLog
    from wfsched.daemon.supervisor import run_supervisor
    from wfsched.domain.config import CONFIG_NAME, load_config
    from wfsched.faults import fault_at, no_fault

    location = state.location()
    config = load_config(
        location.local_dir,
        {
            "poll_interval": poll_interval,
            "max_concurrent_runs": max_concurrent_runs,
            "drain_grace": drain_grace,
            "metrics_listen": metrics,
            "host": host,
            "lease": lease,
            "lease_renew": lease_renew,
            "host_timeout": host_timeout,
            "runs_dir": state.runs_dir_option,
        },
    )
    log = EventLog(log_format, clock=state.clock)
    # Test-only hook (the crash tests): kill ourselves at a named boundary.
    spec = os.environ.get("WFSCHED_FAULT")
    fault = fault_at(spec) if spec else no_fault
    clock = _skewed(state.clock)
    server = None
    observer = None
    if config.metrics_listen is not None:
        from wfsched.daemon.metrics import Metrics
        from wfsched.daemon.metrics_server import MetricsServer
        from wfsched.domain.config import parse_listen

        source = (
            "--metrics"
            if metrics is not None
            else f"{location.local_dir / CONFIG_NAME}: metrics_listen"
        )
        server = MetricsServer(parse_listen(config.metrics_listen), source)
        observer = Metrics(
            poll_interval=config.poll_interval,
            host=config.host,
            store_kind=location.kind,
            clock=clock,
        )
    prepare = functools.partial(
        _prepare,
        apply_dir=apply_dir,
        strict=strict,
        state=state,
        log=log,
        server=server,
        observer=observer,
    )
    try:
        run_supervisor(
            location,
            config,
            launcher_fault=spec or "",
            clock=clock,
            fault=fault,
            log=log,
            prepare=prepare,
            stopped=early_stop.caught,
            observer=observer,
        )
    finally:
        if server is not None:
            server.close()


def _skewed(clock: Clock) -> Clock:
    """Test-only hook (the clock-skew tests): `WFSCHED_TEST_CLOCK_SKEW=SECONDS`
    makes this supervisor's wall clock run that far ahead (negative: behind),
    as a host with a wrong clock would. Never set it in production."""
    skew = os.environ.get("WFSCHED_TEST_CLOCK_SKEW")
    if not skew:
        return clock
    offset = float(skew)
    return lambda: clock() + offset


def _prepare(
    store: Store,
    apply_dir: str | None,
    strict: bool,
    state: CliState,
    log: EventLog,
    server: MetricsServer | None,
    observer: Metrics | None,
) -> None:
    """Under the supervisor's lock, before recovery: `--apply`, then serving
    metrics (the socket was bound before the lock was taken)."""
    if apply_dir is not None:
        _apply(store, apply_dir, strict, state, log)
    if server is not None and observer is not None:
        server.start(lambda: observer.snapshot, quiet=observer.quiet)
        observer.on_publish = server.published
        log("metrics", listen=str(server.address))


def _apply(store: Store, apply_dir: str, strict: bool, state: CliState, log: EventLog) -> None:
    """`--apply`: under the supervisor's lock, so a refused start writes nothing.

    Without `strict`, what `wfsched apply` would refuse is left out and
    logged, and the valid rest is applied: a schedule whose file is invalid
    keeps the revision the store has (it runs as before), and a file whose
    id belongs to a deleted schedule leaves it deleted. One `applied` line
    per schedule it changed, and one `apply-summary` line with the count of
    each action: a folder of 3,000 unchanged files must not write 3,000
    lines at every start."""
    from collections import Counter

    from wfsched.api.admin import LEFT_ALONE, Admin, load_sources

    now = int(state.clock())
    sources = load_sources([apply_dir], now, store.applied_sources(), skip_invalid=not strict)
    actions = Admin(store, state.clock).apply(
        [apply_dir], loaded=sources, strict=strict, skip_invalid=not strict
    )
    for error in sources.invalid:
        log(
            "apply-invalid",
            file=error.source,
            reason=f"{error}; this file is not applied (its schedule, if any, keeps its stored"
            " revision): fix it, then `wfsched apply` or restart",
        )
    counts: Counter[str] = Counter({"created": 0, "updated": 0, "unchanged": 0})
    for action in actions:
        counts[action.action] += 1
        if action.action == "unchanged":
            continue
        if action.action == LEFT_ALONE:
            from wfsched.cli.schedules import left_alone_words

            log(
                "apply-left-alone",
                schedule=action.schedule_id,
                file=action.source,
                reason=left_alone_words(action),
            )
        elif action.outside is not None:
            # The folder wins over a revision made by `edit`/`update`; say so.
            log(
                "applied",
                schedule=action.schedule_id,
                action=action.action,
                replaced_outside_revision=action.outside[1],
                last_applied_revision=action.outside[0],
            )
        else:
            log("applied", schedule=action.schedule_id, action=action.action)
    log(
        "apply-summary",
        folder=apply_dir,
        **{re.sub(r"[^a-z0-9]+", "_", name).strip("_"): count for name, count in counts.items()},
    )


def register(group: click.Group) -> None:
    group.add_command(supervise)
