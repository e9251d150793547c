"""`wfsched requests`: what waits for the supervisor (trigger, resume, cancel),
and `requests cancel N` to withdraw one it has not taken."""

from __future__ import annotations

import click

from wfsched.cli import CliState, pass_state
from wfsched.cli.output import print_json, say
from wfsched.cli.params import MAX_COUNTER, Count


@click.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def requests(ctx: click.Context, as_json: bool) -> None:
    """Pending requests: triggers, resumes and cancels no supervisor has taken.

    Oldest first: id, kind, target (schedule or run), when it was requested.
    A request recorded while no supervisor runs waits here until one starts.
    """
    if ctx.invoked_subcommand is not None:
        return
    from wfsched.api.run_ops import Runs

    state = ctx.ensure_object(CliState)
    store = state.read_store()
    items = Runs(store, clock=state.clock).pending_requests() if store is not None else []
    if as_json:
        print_json({"items": items, "next_cursor": None})
        return
    if not items:
        say("no pending requests")
        return
    from wfsched.cli import output

    grid = output.table("ID", "KIND", "TARGET", "REQUESTED AT (UTC)", "BY")
    for item in items:
        output.add_row(
            grid,
            item["id"],
            item["kind"],
            item["target"],
            item["requested_at"],
            item["requested_by"] or "not recorded",
        )
    output.show(state.get_console(), grid)


@requests.command("cancel")
@click.argument("request_id", metavar="N", type=Count(1, MAX_COUNTER))
@pass_state
def cancel(state: CliState, request_id: int) -> None:
    """Withdraw pending request N before the supervisor takes it.

    Exit 0 when withdrawn (or already withdrawn), 4 when the supervisor has
    already taken it (it says with what outcome), 3 when there is no such
    request. The supervisor's taking it and this withdrawal are decided in
    one statement: exactly one of them wins.
    """
    from wfsched.api.run_ops import Runs

    store = state.store(create=False)
    if store is None:
        from wfsched.errors import NotFoundError

        raise NotFoundError(f"no store at {state.location().display}; no request {request_id}")
    say(Runs(store, clock=state.clock).withdraw(request_id))


def register(group: click.Group) -> None:
    group.add_command(requests)
