"""`wfsched audit`: check the store's invariants; exit 1 naming each violation."""

from __future__ import annotations

import click

from wfsched.cli import CliState, pass_state, runs_dir_option
from wfsched.cli.output import print_json, say
from wfsched.errors import OperationError


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@runs_dir_option
@pass_state
def audit(state: CliState, as_json: bool) -> None:
    """Prove from the store that no occurrence was admitted twice, every run is
    tied to its admission, every calendar instant since creation is in the
    ledger, watermarks never moved back and run directories match the database.

    Read-only. Exit status 1 when any violation is found; each is printed
    with its check name (see `wfsched.api.audit_checks` for the list).
    """
    from wfsched.api.audit_checks import audit_location, empty_report

    missing = state.store_missing()
    report = empty_report() if missing else audit_location(state.location(), state.settings().host)
    if as_json:
        print_json(report)
    else:
        for violation in report["violations"]:
            subject = " ".join(
                part for part in (violation["schedule_id"], violation["run_id"]) if part
            )
            say(f"{violation['check']}: {subject or '-'}: {violation['detail']}")
        for item in report["notes"]:
            say(f"note: {item['schedule_id'] or item['run_id']}: {item['detail']}")
        checked = ", ".join(f"{count} {name}" for name, count in report["checked"].items())
        verdict = "ok" if report["ok"] else f"{len(report['violations'])} violation(s)"
        say(f"audit: {verdict} (checked {checked or 'nothing'})")
    if not report["ok"]:
        names = sorted({violation["check"] for violation in report["violations"]})
        raise OperationError(
            f"audit found {len(report['violations'])} violation(s): {', '.join(names)}"
        )


def register(group: click.Group) -> None:
    group.add_command(audit)
