"""`wfsched prune`: remove finished runs and ledger history older than a bound."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from wfsched.cli import CliState, pass_state, runs_dir_option
from wfsched.cli.output import print_json, say
from wfsched.cli.params import Duration
from wfsched.errors import OperationError

if TYPE_CHECKING:
    from wfsched.api.retention import PruneReport

SHOWN_RUN_IDS = 20


@click.command()
@click.option(
    "--older-than",
    "older_than",
    required=True,
    type=Duration(fractions=False),
    metavar="DURATION",
    help="Age bound: seconds or <n>s|m|h|d, e.g. 30d.",
)
@click.option("--dry-run", is_flag=True, help="Show what would be removed; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@runs_dir_option
@pass_state
def prune(state: CliState, older_than: float, dry_run: bool, as_json: bool) -> None:
    """Remove finished runs (rows, attempts, run directories) and ledger rows
    older than DURATION.

    Also removes requests (trigger, resume, cancel) answered before the bound.
    Unfinished runs (admitted, running, interrupted) and their rows are never
    touched, nor are pending requests or schedules. The removed span of each
    schedule's history stays accounted for by a `pruned` summary row. Safe
    while a supervisor runs.
    """
    from wfsched.api.retention import PruneReport
    from wfsched.api.retention import prune as prune_store

    seconds = int(older_than)
    store = state.read_store()
    if store is None:
        # Nothing to prune, and a prune must not create a store to say so.
        report = PruneReport(cutoff=state.clock() - seconds, dry_run=dry_run)
    else:
        report = prune_store(store, seconds, state.clock(), dry_run=dry_run)
    if as_json:
        print_json({"older_than": seconds, **report.to_json()})
    else:
        _say_report(report)
    if report.errors:
        raise OperationError(
            f"{len(report.errors)} run director{'y' if len(report.errors) == 1 else 'ies'}"
            f" could not be removed (the next prune retries): {report.errors[0]}"
        )


def _say_report(report: PruneReport) -> None:
    verb = "would remove" if report.dry_run else "removed"
    say(f"history finished before {_instant(report.cutoff)}: {verb}")
    say(f"  runs:             {report.runs} ({report.attempts} attempts)")
    say(f"  occurrence rows:  {report.occurrences}")
    say(f"  run directories:  {report.run_dirs}")
    say(f"  requests:         {report.requests} (answered)")
    if not report.dry_run:
        say(f"  `pruned` summary rows written: {report.summary_rows}")
    if report.run_ids:
        shown = ", ".join(report.run_ids[:SHOWN_RUN_IDS])
        rest = len(report.run_ids) - SHOWN_RUN_IDS
        say(f"  run ids: {shown}" + (f" and {rest} more (--json lists all)" if rest > 0 else ""))
    if report.dry_run:
        say("dry run: nothing was written")


def _instant(epoch: float) -> str:
    from wfsched.domain.timeutil import format_instant

    return format_instant(epoch) or "-"


def register(group: click.Group) -> None:
    group.add_command(prune)
