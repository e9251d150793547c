"""`wfsched store copy`: move a whole store, e.g. from SQLite to PostgreSQL."""

from __future__ import annotations

import click

from wfsched.cli import CliState, pass_state, runs_dir_option
from wfsched.cli.output import print_json, say
from wfsched.errors import OperationError


@click.group()
def store() -> None:
    """Operations on the store as a whole."""


@store.command("copy")
@click.option(
    "--to",
    "destination",
    required=True,
    metavar="STORE",
    help="An empty store to copy into: a directory (SQLite) or a postgresql:// URL.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@runs_dir_option
@pass_state
def copy(state: CliState, destination: str, as_json: bool) -> None:
    """Copy the whole store (--store) into the empty store STORE, then audit the copy.

    Schedules with every revision, watermarks, candidates, the ledger, runs,
    attempts, requests and this host's run directories. Refused (exit 4)
    while a supervisor owns either store, or when the destination holds
    anything. Exit status 1 when the copy's audit finds a violation.
    """
    from wfsched.api.store_copy import copy_store
    from wfsched.store.location import resolve_store

    report = copy_store(state.location(), resolve_store(destination), state.settings().host)
    audit = report["audit"]
    if as_json:
        print_json(report)
    else:
        counts = ", ".join(f"{count} {table}" for table, count in report["copied"].items())
        verdict = "ok" if audit["ok"] else f"{len(audit['violations'])} violation(s)"
        say(f"copied {report['from']} to {report['to']} in {report['seconds']:.1f}s: {counts}")
        for violation in audit["violations"]:
            say(f"{violation['check']}: {violation['detail']}")
        say(f"audit of the copy: {verdict}")
    if not audit["ok"]:
        raise OperationError(
            f"the copy in {report['to']} failed its audit: {len(audit['violations'])} violation(s)"
        )


def register(group: click.Group) -> None:
    group.add_command(store)
