"""Schedule commands: validate, create, apply, get, list, update, edit, pause,
resume, delete, undelete, next, occurrences, status.

Each command parses its arguments, makes one call into `wfsched.api.admin.Admin`
(or `wfsched.domain.definition` / `wfsched.api.status`), and renders the result; domain
errors travel up to `wfsched.cli.main`, which prints one line and exits.
Heavy modules (the store, the calendar, rich, tomli_w) are imported inside
the commands that need them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from wfsched.cli import CliState, output, pass_state
from wfsched.cli.complete import schedule_argument
from wfsched.cli.params import MAX_COUNTER, Count, reverse_option, wide_option
from wfsched.errors import ConflictError, DefinitionError, WfschedError

if TYPE_CHECKING:
    from wfsched.api.admin import Admin, ApplyAction, Sources
    from wfsched.domain.model import Definition

DEFAULT_PAGE = 20


def _id_argument() -> Any:
    return schedule_argument()


_json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON (stable, documented field names; UTC times).",
)


def _load(state: CliState, file: str) -> Definition:
    """Parse and validate one definition file before any store is opened,
    so an invalid file leaves no trace at all."""
    from wfsched.domain.definition import load_definition_file

    return load_definition_file(file, now=int(state.clock()))


def _next_due_text(view: dict[str, Any]) -> str:
    if view["next_due"] is None:
        return f"no next due instant ({view['state']})"
    zone = output.schedule_zone(view)
    return f"next due {view['next_due']} ({output.local_text(view['next_due'], zone)})"


# ------------------------------------------------------------------ validate


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(allow_dash=True))
@pass_state
def validate(state: CliState, paths: tuple[str, ...]) -> None:
    """Check definition files and folders as `apply` would; write nothing.

    PATHs are files or folders (only `*.toml` files count in folders, as
    for `apply`); `-` reads stdin. Prints `ok FILE (ID)` per valid file and
    one error line per invalid file (naming the file and the key path),
    then exits 2 if any was invalid. An id defined in two files is an error
    in both, as `apply` refuses it. The store is not read: an id that
    belongs to a deleted schedule is `apply`'s warning (`deleted (left
    alone)`). Warns, without failing, when a command's executable is not
    found on the current PATH or its cwd does not exist here: the
    supervisor checks both again when each run is admitted.
    """
    import sys

    from wfsched.api.admin import STDIN_SOURCE, read_sources

    sources = read_sources(
        paths,
        int(state.clock()),
        {},
        stdin=lambda: _read_stdin(sys.stdin.buffer),
        as_given=True,
    )
    for defn, source, _digest in sources.parsed.values():
        shown = "-" if source == STDIN_SOURCE else source
        output.say(f"ok {shown} ({defn.id})")
        _warn_unlaunchable(shown, defn)
        _advise(state, shown, defn)
    sources.refuse_invalid("")


def _read_stdin(stream: Any) -> bytes:
    try:
        return bytes(stream.read())
    except OSError as exc:
        raise DefinitionError("<stdin>", "", f"cannot read: {exc}") from None


def _advise(state: CliState, file: str, defn: Definition) -> None:
    from wfsched.domain.advice import advise

    output.advise(file, advise(defn, int(state.clock())))


def _warn_unlaunchable(file: str, defn: Definition) -> None:
    """The admission preflight, run here as a warning: the host that runs
    `validate` may not be the one that runs the job."""
    import os

    from wfsched.api.preflight import preflight

    problem = preflight(defn.run.command, defn.run.cwd, {**os.environ, **dict(defn.run.env)})
    if problem is not None:
        click.echo(
            output.printable(
                f"wfsched: warning: {file}: run: {problem} here"
                " (checked again when each run is admitted)"
            ),
            err=True,
        )


# -------------------------------------------------------------------- create


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@pass_state
def create(state: CliState, file: str) -> None:
    """Create a schedule at revision 1 from FILE (`-` reads stdin).

    An id that exists, or that belongs to a deleted schedule, is refused
    (exit 4): ids are never reused (`wfsched undelete ID` revives a deleted
    one with its history).
    """
    defn = _load(state, file)
    view = state.admin(create=True).create(defn)
    output.say(f"created {view['id']} (revision {view['revision']}); {_next_due_text(view)}")
    _advise(state, "<stdin>" if file == "-" else file, defn)


# --------------------------------------------------------------------- apply


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--prune", is_flag=True, help="Delete schedules that no file defines any more.")
@click.option("--dry-run", is_flag=True, help="Show what would change; write nothing.")
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse (exit 4, write nothing) a file whose id belongs to a deleted schedule.",
)
@pass_state
def apply(
    state: CliState, paths: tuple[str, ...], prune: bool, dry_run: bool, strict: bool
) -> None:
    """Make the store match the definitions under PATHs (files or folders).

    Creates new schedules, updates changed ones, keeps unchanged ones (only
    `*.toml` files count in folders). Every file is validated first: if any
    is invalid, each is reported and nothing is written. One line per
    schedule: `created|updated|unchanged|deleted ID (revision N)`, then a
    summary naming the store written to. Replacing a revision made by `edit`
    or `update` since the schedule was last applied warns on stderr, naming
    both revisions (the folder wins).

    A file whose id belongs to a deleted schedule is reported as `deleted
    (left alone) ID` with a warning, and the rest is applied (exit 0):
    `wfsched undelete ID` revives it. With --strict that file is refused
    instead (exit 4) and nothing is written.
    """
    with _cycle_collector_paused():
        _report(state, _apply(state, paths, prune, dry_run, strict), dry_run)


def _report(state: CliState, actions: list[ApplyAction], dry_run: bool) -> None:
    from wfsched.api.admin import LEFT_ALONE

    tally = {"created": 0, "updated": 0, "unchanged": 0, "deleted": 0}
    lines = output.Lines()
    for action in actions:
        tally[action.action] = tally.get(action.action, 0) + 1
        lines.say(f"{action.action} {action.schedule_id} (revision {action.revision})")
        if action.action == LEFT_ALONE:
            lines.flush()
            output.warn(left_alone_words(action))
        if action.advice:
            lines.flush()
            output.advise(action.source or action.schedule_id, action.advice)
        if action.blocked_reason and not dry_run:
            lines.flush()
            output.still_blocked(action.schedule_id, action.blocked_reason)
        if action.outside is not None:
            lines.flush()
            last, replaced = action.outside
            verb = "would replace" if dry_run else "replaced"
            click.echo(
                f"wfsched: warning: {action.schedule_id}: apply {verb} revision {replaced},"
                f" made by `edit`, `update` or `undelete` after revision {last} was applied from"
                f" the folder, with revision {action.revision} from {action.source}",
                err=True,
            )
    lines.flush()
    if not actions:
        output.say("no definitions found")
        return
    summary = ", ".join(
        f"{count} {name}" for name, count in tally.items() if count or name != LEFT_ALONE
    )
    where = state.location().display
    output.say(
        f"{summary} (dry run: nothing written to {where})"
        if dry_run
        else f"{summary} in store {where}"
    )


def left_alone_words(action: ApplyAction) -> str:
    """The warning for a file whose id belongs to a deleted schedule (`apply`
    and `supervise --apply` say the same)."""
    from wfsched.domain.timeutil import format_instant

    assert action.deleted_at is not None
    return (
        f"{action.source}: id: {action.schedule_id!r} belongs to a schedule deleted at"
        f" {format_instant(action.deleted_at)}; left alone, the rest is applied"
        f" (`wfsched undelete {action.schedule_id}` revives it with its history;"
        " `apply --strict` refuses such a file)"
    )


def _apply(
    state: CliState, paths: tuple[str, ...], prune: bool, dry_run: bool, strict: bool
) -> list[ApplyAction]:
    """The actions, committed; a Ctrl-C says whether they were (see
    `wfsched.cli.interrupts`): before the commit it rolls everything back."""
    if dry_run:
        state.interrupted = "interrupted; nothing was written (dry run)"
    else:
        state.interrupted = "interrupted; nothing was written: the apply rolled back"
    try:
        actions = _apply_once(state, paths, prune, dry_run, strict)
        if not dry_run:
            state.interrupted = f"interrupted after the apply committed: {_done(actions)}"
    finally:
        state.interrupts.release()
    return actions


def _done(actions: list[ApplyAction]) -> str:
    """`created 3000 schedules, updated 1`: what a committed apply changed."""
    verbs = {"created": 0, "updated": 0, "deleted": 0}
    for action in actions:
        if action.action in verbs:
            verbs[action.action] += 1
    changed = [
        f"{verb} {count} schedule{'s' if count != 1 else ''}"
        for verb, count in verbs.items()
        if count
    ]
    return ", ".join(changed) or "nothing needed to change"


def _apply_once(
    state: CliState, paths: tuple[str, ...], prune: bool, dry_run: bool, strict: bool
) -> list[ApplyAction]:
    hold = state.interrupts.hold
    if state.store(create=False) is not None:
        return state.admin().apply(
            paths, prune=prune, dry_run=dry_run, strict=strict, before_commit=hold
        )
    from wfsched.api.admin import load_sources

    # No store yet: every file is validated before one is created, so an
    # invalid folder leaves no new, empty store (directory or schema).
    loaded = load_sources(paths, int(state.clock()), {}, prune=prune)
    if dry_run:
        return _dry_run_against_empty_store(state, paths, prune, loaded)
    return state.admin(create=True).apply(paths, prune=prune, loaded=loaded, before_commit=hold)


@contextmanager
def _cycle_collector_paused() -> Iterator[None]:
    """Python's cycle collector off while apply reads, validates and writes.

    What apply builds per file (TOML documents, definitions, rows, actions)
    holds no reference cycles, so the collector frees nothing here; but
    every 700 new containers it runs, and its older generations walk the
    whole growing heap: a tenth of the CPU of applying 10,000 new files.
    Reference counting still frees everything as before. It covers the
    output too: switched back on while the actions are alive, its next run
    would walk them all once. Its state is restored afterwards (tests run
    commands in one process)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _dry_run_against_empty_store(
    state: CliState, paths: tuple[str, ...], prune: bool, loaded: Sources
) -> list[ApplyAction]:
    # No store yet: a dry run must not create one, so it runs against a
    # throwaway empty store (every valid definition would be "created").
    import tempfile

    from wfsched.api.admin import Admin
    from wfsched.store import open_store

    with tempfile.TemporaryDirectory(prefix="wfsched-dry-run-") as scratch:
        store = open_store(scratch)
        try:
            return Admin(store, clock=state.clock).apply(
                paths, prune=prune, dry_run=True, loaded=loaded
            )
        finally:
            store.close()


# ----------------------------------------------------------------------- get


@click.command()
@_id_argument()
@_json_option
@click.option("--toml", "as_toml", is_flag=True, help="Print a definition file `update` accepts.")
@pass_state
def get(state: CliState, schedule_id: str, as_json: bool, as_toml: bool) -> None:
    """Show one schedule (deleted ones too: they are history)."""
    if as_json and as_toml:
        raise click.UsageError("--json and --toml cannot be combined")
    if as_toml:
        text, _revision = _toml_of(state.admin(), schedule_id)
        click.echo(text, nl=False)
        return
    view = state.reads().get(schedule_id)
    if as_json:
        output.print_json(view)
        return
    _show_schedule(state, view)


def _toml_of(admin: Admin, schedule_id: str) -> tuple[str, int]:
    """The definition as an editable file, and the revision it was read at."""
    from wfsched.domain.definition import to_toml

    row = admin.row(schedule_id)
    header = (
        f"# {row.id} at revision {row.revision}. To change it:\n"
        f"#   wfsched update FILE --expected-revision {row.revision}\n"
    )
    return header + to_toml(admin.definition(row)), row.revision


def _show_schedule(state: CliState, view: dict[str, Any]) -> None:
    zone = output.schedule_zone(view)
    run, policy = view["run"], view["policy"]
    fields: list[tuple[str, Any]] = [
        ("id", view["id"]),
        ("description", view["description"]),
        ("state", view["state"]),
        ("blocked reason", view["blocked_reason"]),
        (
            "preflight-rejected",
            _rejection_line(view["id"], view["preflight_rejected"])
            if view.get("preflight_rejected")
            else None,
        ),
        ("revision", view["revision"]),
        ("trigger", output.trigger_text(view["trigger"])),
        ("zone", output.zone_label(view)),
        ("next due (UTC)", output.utc_text(view["next_due"])),
        ("next due (local)", output.local_text(view["next_due"], zone)),
        ("pending", view.get("pending")),
        ("command", run["command"]),
        ("cwd", run["cwd"]),
        ("env", run["env"] or None),
        ("timeout", output.duration_text(run["timeout"])),
        ("kill grace", output.duration_text(run["kill_grace"])),
        ("interrupt exit code", run["interrupt_exit_code"]),
        ("overlap", policy["overlap"]),
        ("max active runs", policy["max_active_runs"]),
        ("misfire", policy["misfire"]),
        ("lateness", output.duration_text(policy["lateness"])),
        ("on failure", view["notify"]["on_failure"]),
        ("input bindings", len(view["input"])),
        ("active runs", view["active_runs"]),
        ("created", view["created_at"]),
        ("updated", view["updated_at"]),
        ("deleted", view.get("deleted_at")),
    ]
    grid = output.table("field", "value")
    grid.show_header = False
    for name, value in fields:
        if value is None and name in (
            "blocked reason",
            "preflight-rejected",
            "pending",
            "deleted",
            "description",
        ):
            continue
        output.add_row(grid, name, value)
    output.show(state.get_console(), grid)


# ---------------------------------------------------------------------- list


@click.command("list")
@click.option("--all", "show_all", is_flag=True, help="Include deleted schedules.")
@wide_option
@_json_option
@pass_state
def list_(state: CliState, show_all: bool, wide: bool, as_json: bool) -> None:
    """List schedules: state, next due and the time LEFT until it, when the
    LAST run started and its outcome, active runs.

    LOCAL is the schedule's own zone (its timezone, or the offset written in
    a one-shot's `at`), never the operator's. An outcome `cancelled` is a run
    stopped by `runs cancel` or a drain; `(manual)` marks a `trigger`ed run.
    PASSED is the time since the LAST run started. On a narrow terminal the
    columns needed least are left out (first REV, ZONE, TRIGGER, LAST (UTC),
    PASSED, then NEXT (LOCAL)); --wide shows them all.
    """
    store = state.read_store()
    items: list[dict[str, Any]] = []
    if store is not None:
        items = state.reads().schedules(include_deleted=show_all)
    if as_json:
        output.print_json({"items": items, "next_cursor": None})
        return
    if not items:
        output.say("no schedules")
        return
    Column = output.Column
    grid = output.Listing(
        Column("ID"),
        Column("STATE"),
        Column("TRIGGER", priority=9),
        Column("ZONE", priority=10),
        Column("NEXT (UTC)", priority=1),
        Column("NEXT (LOCAL)", priority=6),
        Column("LEFT", priority=3),
        Column("LAST (UTC)", priority=8),
        Column("PASSED", priority=7),
        Column("LAST OUTCOME", priority=2),
        Column("ACTIVE", priority=4, justify="right"),
        Column("REV", priority=11, justify="right"),
    )
    now = state.clock()
    for view in items:
        zone = output.schedule_zone(view)
        last = view["last_run"]
        grid.add_row(
            view["id"],
            (view["state"], "preflight-rejected")
            if view.get("preflight_rejected")
            else view["state"],
            output.trigger_text(view["trigger"]),
            output.zone_label(view),
            output.utc_text(view["next_due"]),
            output.local_text(view["next_due"], zone),
            output.left_text(view["next_due"], now),
            output.event_text(last["started_at"]) if last else None,
            output.passed_text(last["started_at"], now) if last else None,
            _outcome_text(last),
            view["active_runs"],
            view["revision"],
        )
    grid.show(state.get_console(), wide=wide)
    for view in items:
        if view["blocked_reason"]:
            output.say(f"blocked {view['id']}: {view['blocked_reason']}")
    for view in items:
        if view.get("preflight_rejected"):
            output.say(_rejection_line(view["id"], view["preflight_rejected"]))


def _outcome_text(last: dict[str, Any] | None) -> str | None:
    """`completed`, `cancelled (manual)`: the last run's outcome, and whether
    it was a `trigger`ed run rather than a scheduled one."""
    if last is None:
        return None
    return f"{last['outcome']} (manual)" if last["kind"] == "manual" else last["outcome"]


def _rejection_line(schedule_id: str, rejection: dict[str, Any]) -> str:
    return (
        f"preflight-rejected {schedule_id} at {rejection['scheduled_at']}: {rejection['reason']}"
        " (a failure until a later run succeeds)"
    )


# -------------------------------------------------------------------- update


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--expected-revision",
    type=Count(1, MAX_COUNTER),
    required=True,
    metavar="N",
    help="The revision you changed (from `get`); a stale one is refused (exit 4).",
)
@pass_state
def update(state: CliState, file: str, expected_revision: int) -> None:
    """Replace a schedule's definition with FILE (`-` reads stdin).

    A definition identical to the stored one is a no-op, like a no-op `edit`:
    exit 0, the revision stays, and it says `unchanged`.
    """
    defn = _load(state, file)
    view, changed = state.admin().update(defn, expected_revision)
    if changed:
        output.say(f"updated {view['id']} (revision {view['revision']}); {_next_due_text(view)}")
    else:
        output.say(
            f"unchanged {view['id']} (revision {view['revision']}): the definition is identical"
        )
    if view["blocked_reason"]:
        output.still_blocked(view["id"], view["blocked_reason"])


# ---------------------------------------------------------------------- edit


@click.command()
@_id_argument()
@pass_state
def edit(state: CliState, schedule_id: str) -> None:
    """Open a schedule's definition in $VISUAL / $EDITOR, then update it.

    The update expects the revision read before editing, so a change made
    meanwhile is refused (exit 4) instead of overwritten. An invalid edit
    changes nothing (exit 2); the edited text is kept in a temporary file.
    """
    from wfsched.domain.definition import parse_definition

    admin = state.admin()
    view = admin.get(schedule_id)
    if view["state"] == "deleted":
        raise ConflictError(
            f"{schedule_id}: cannot edit a deleted schedule; its history stays readable with"
            " `wfsched get`"
        )
    original, revision = _toml_of(admin, schedule_id)
    edited = click.edit(original, extension=".toml", require_save=True)
    if edited is None or edited == original:
        output.say(f"nothing changed: {schedule_id} stays at revision {revision}")
        return
    source = f"{schedule_id}.toml (edited)"
    try:
        defn = parse_definition(edited, source, now=int(state.clock()))
        if defn.id != schedule_id:
            raise DefinitionError(
                source,
                "id",
                f"changed from {schedule_id!r} to {defn.id!r}; edit cannot rename a schedule"
                " (create the new one, then delete this one)",
            )
        view, changed = admin.update(defn, revision)
    except WfschedError as exc:
        kept = _keep(schedule_id, edited)
        raise type(exc)(*_with_note(exc, f"your edit is kept in {kept}")) from None
    if changed:
        output.say(f"updated {schedule_id} (revision {view['revision']})")
    else:
        output.say(f"nothing changed: {schedule_id} stays at revision {revision}")
    if view["blocked_reason"]:
        output.still_blocked(schedule_id, view["blocked_reason"])


def _keep(schedule_id: str, text: str) -> str:
    import tempfile

    with tempfile.NamedTemporaryFile(
        "w", prefix=f"wfsched-edit-{schedule_id}-", suffix=".toml", delete=False
    ) as handle:
        handle.write(text)
    return handle.name


def _with_note(exc: WfschedError, note: str) -> tuple[Any, ...]:
    if isinstance(exc, DefinitionError):
        return (exc.source, exc.path, f"{exc.detail}; {note}")
    return (f"{exc}; {note}",)


# ------------------------------------------------------ pause, resume, delete


@click.command()
@_id_argument()
@pass_state
def pause(state: CliState, schedule_id: str) -> None:
    """Stop admitting occurrences (running runs continue). Idempotent."""
    _view, changed = state.admin().pause(schedule_id)
    output.say(f"paused {schedule_id}" if changed else f"{schedule_id} is already paused")


@click.command()
@_id_argument()
@pass_state
def resume(state: CliState, schedule_id: str) -> None:
    """Continue from the next future instant; the paused span is not replayed."""
    view, changed = state.admin().resume(schedule_id)
    if changed:
        output.say(f"resumed {schedule_id}; {_next_due_text(view)}")
    else:
        output.say(f"{schedule_id} is not paused")


@click.command()
@_id_argument()
@pass_state
def delete(state: CliState, schedule_id: str) -> None:
    """Delete a schedule: no more admissions; runs finish, history stays.

    The id is never used for another schedule; `wfsched undelete ID`
    revives this one.
    """
    _view, changed = state.admin().delete(schedule_id)
    if changed:
        output.say(
            f"deleted {schedule_id}; its history stays readable"
            f" (`wfsched get {schedule_id}`, `wfsched occurrences {schedule_id}`)"
        )
    else:
        output.say(f"{schedule_id} is already deleted")


@click.command()
@_id_argument()
@pass_state
def undelete(state: CliState, schedule_id: str) -> None:
    """Revive a deleted schedule under its id and history (revision + 1).

    Nothing is backfilled: the instants that fell due while it was deleted
    are recorded as one `skipped-paused` row (reason `deleted`), and it
    continues from the next future instant. One paused or blocked when it
    was deleted comes back paused or blocked. Idempotent.
    """
    view, changed = state.admin().undelete(schedule_id)
    if changed:
        output.say(f"undeleted {schedule_id} (revision {view['revision']}); {_next_due_text(view)}")
    else:
        output.say(f"{schedule_id} is not deleted")


# ---------------------------------------------------------------------- next

_NOTES = {
    "dst-gap-shifted": "DST gap: wall time did not exist, moved forward",
    "dst-fold-repeat": "DST fold: second of a repeated wall time",
}


@click.command("next")
@_id_argument()
@click.option("--count", type=int, default=5, show_default=True, help="How many (1-1000).")
@click.option(
    "--after", metavar="TIME", help="Start after this RFC 3339 time (with offset) instead of now."
)
@wide_option
@_json_option
@pass_state
def next_(
    state: CliState,
    schedule_id: str,
    count: int,
    after: str | None,
    wide: bool,
    as_json: bool,
) -> None:
    """Upcoming instants in UTC and local time, marking DST gaps and folds.

    Local time is the schedule's own zone, never the operator's. The
    instants of a paused (or blocked) schedule are marked `paused` (`blocked`):
    none of them runs unless `wfsched resume` comes first.
    """
    items = state.admin().next(schedule_id, count=count, after=after)
    if as_json:
        output.print_json({"items": items})
        return
    if not items:
        output.say(f"{schedule_id} has no upcoming instant")
        return
    grid = output.Listing(
        output.Column("SCHEDULED (UTC)"),
        output.Column("LOCAL", priority=1),
        output.Column("NOTE", priority=2, wrap=True),
    )
    for item in items:
        notes = [item["held"]] if item["held"] else []
        if item["note"]:
            notes.append(_NOTES.get(item["note"], item["note"]))
        grid.add_row(item["scheduled_at"], item["local"], "; ".join(notes))
    grid.show(state.get_console(), wide=wide)
    held = items[0]["held"]
    if held:
        output.say(f"{held}: none of these runs unless `wfsched resume {schedule_id}` comes first")


# --------------------------------------------------------------- occurrences


@click.command()
@_id_argument()
@click.option(
    "--limit",
    type=int,
    default=DEFAULT_PAGE,
    show_default=True,
    help="Rows per page (1-100).",
)
@click.option("--page", "cursor", metavar="CURSOR", help="The next_cursor of the previous page.")
@reverse_option
@wide_option
@_json_option
@pass_state
def occurrences(
    state: CliState,
    schedule_id: str,
    limit: int,
    cursor: str | None,
    reverse: bool,
    wide: bool,
    as_json: bool,
) -> None:
    """A schedule's history, oldest first (in the order it was recorded),
    one page at a time; --reverse: newest first.

    A held candidate shows as a `pending` row at the top of the first page.
    LOCAL is the schedule's own zone, never the operator's. The line under
    the table gives the command for the next page.
    """
    items, next_cursor = state.reads().occurrences(
        schedule_id, limit=limit, cursor=cursor, newest_first=reverse
    )
    if as_json:
        output.print_json({"items": items, "next_cursor": next_cursor})
        return
    if not items:
        output.say(f"no occurrences recorded for {schedule_id} yet")
    else:
        zone = output.schedule_zone(state.reads().get(schedule_id))
        Column = output.Column
        grid = output.Listing(
            Column("SCHEDULED (UTC)"),
            Column("LOCAL", priority=4),
            Column("STATE"),
            Column("REV", priority=5, justify="right"),
            Column("RUN", priority=1),
            Column("REASON", priority=2, wrap=True),
        )
        for item in items:
            scheduled, local, state_text = _occurrence_cells(item, zone)
            grid.add_row(
                scheduled, local, state_text, item["revision"], item["run_id"], item["reason"]
            )
        grid.show(state.get_console(), wide=wide)
    if next_cursor is not None:
        output.next_page(
            "occurrences",
            schedule_id,
            options={
                "--limit": limit if limit != DEFAULT_PAGE else None,
                "--reverse": True if reverse else None,
            },
            cursor=next_cursor,
        )


def _occurrence_cells(item: dict[str, Any], zone: Any) -> tuple[Any, Any, Any]:
    if "count" not in item:
        return (
            item["scheduled_at"],
            output.local_text(item["scheduled_at"], zone),
            item["state"],
        )
    # A summary row spans two lines rather than one too wide to fit.
    count = item["count"] if item["count"] is not None else "over 100"
    return (
        (f"{item['first']} ..", item["last"]),
        (f"{output.local_text(item['first'], zone)} ..", output.local_text(item["last"], zone)),
        (item["state"], f"({count} instants)"),
    )


# -------------------------------------------------------------------- status


@click.command()
@_json_option
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 with one line per problem (no supervisor or leader, stale, fault, blocked);"
    " 0 and `ok` when there is none.",
)
@pass_state
def status(state: CliState, as_json: bool, check: bool) -> int | None:
    """Is a supervisor running? Executing and interrupted runs, capacity, blocked.

    With --check, a health check for scripts and monitors (`wfsched status
    --check || alert`): exit 0 when all is well, 1 when a problem is found.
    """
    from wfsched.api.status import status as store_status
    from wfsched.api.status import status_without_store

    store = state.read_store()
    if store is None:
        location = state.location()
        info = status_without_store(location.display, location.kind)
    else:
        info = store_status(store, clock=state.clock)
    failed = 1 if check and info["problems"] else None
    if as_json:
        output.print_json(info)
        return failed
    if check:
        for problem in info["problems"]:
            output.say(f"{problem['check']}: {problem['detail']}")
        if not info["problems"]:
            output.say("ok")
        return failed
    supervisor = info["supervisor"]
    if supervisor["running"]:
        alive = f"running (pid {supervisor['pid']})"
        if supervisor["started_at"]:
            alive += f", started {supervisor['started_at']}"
        if supervisor["uptime"] is not None:
            alive += f" (up {output.span_text(int(supervisor['uptime']))})"
        if supervisor["last_tick_at"]:
            alive += f", last tick {supervisor['last_tick_at']}"
        if supervisor["stale"]:
            alive += " - STALE: no tick for 3 poll intervals"
        if supervisor["fault"]:
            alive += f" - FAULT since {supervisor['fault']['since']}"
        if supervisor["draining"]:
            alive += " - DRAINING"
    else:
        alive = "not running; start one with `wfsched supervise`"
    due = info["next_due"]
    grid = output.table("field", "value")
    grid.show_header = False
    output.add_row(grid, "store", info["store"])
    output.add_row(grid, "supervisor", alive)
    executing = f"{info['executing']} of {info['max_concurrent_runs']}"
    if info["executing_manual"]:
        executing += f" (+{info['executing_manual']} manual, outside capacity)"
    output.add_row(grid, "executing", executing)
    drain = supervisor["draining"]
    if drain:
        output.add_row(
            grid,
            "draining",
            f"since {drain['since']}; what still runs is cancelled at {drain['cancel_at']};"
            f" done by {drain['until']} at the latest",
        )
    if info["waiting_for_unblock"]:
        output.add_row(
            grid,
            "waiting",
            f"{info['waiting_for_unblock']} admitted, no slot until `wfsched resume` unblocks",
        )
    output.add_row(grid, "interrupted", info["interrupted"])
    if info["pending_requests"]:
        waiting_for = "the supervisor" if supervisor["running"] else "a supervisor to start"
        output.add_row(
            grid,
            "pending requests",
            f"{info['pending_requests']} waiting for {waiting_for} (`wfsched requests` lists them)",
        )
    output.add_row(grid, "next due", f"{due['schedule_id']} at {due['at']}" if due else None)
    output.add_row(grid, "blocked", len(info["blocked"]))
    output.add_row(grid, "errors", _errors_line(info["errors"]))
    launcher = info["launcher"]
    if launcher is not None and launcher["state"] == "down":
        output.add_row(
            grid,
            "launcher",
            f"DOWN since {launcher['since']}: {launcher['last_error']}; runs wait, retrying",
        )
    output.add_row(grid, "preflight-rejected", len(info["preflight_rejected"]))
    passed = info["passed_over_at_start"]
    if passed and passed["instants"]:
        count = f"{passed['instants']}{'' if passed['instants_exact'] else '+'}"
        output.add_row(
            grid,
            "passed over",
            f"{count} instants of {passed['schedules']} schedules at the start {passed['at']}"
            ' (misfire = "skip" drops them; "latest" keeps the latest)',
        )
    fault = supervisor["fault"]
    if fault:
        output.add_row(grid, "fault", f"{fault['kind']} since {fault['since']}: {fault['error']}")
    ended = info["errors"]["last_fault"]
    if ended:
        output.add_row(
            grid,
            "last fault",
            f"{ended['kind']} from {ended['since']} to {ended['ended']}"
            f" ({ended['duration']:g}s): {ended['error']}",
        )
    if info["store_kind"] == "postgresql":
        leader = info["leader"]
        if leader is None:
            leading = "NONE: no supervisor holds the lease"
        elif leader["silent_since"] is not None:
            leading = (
                f"{leader['host']} (pid {leader['pid']}, epoch {leader['epoch']}): lease held"
                f" by a silent host, expires in {leader['lease_expires_in']:g} s (silent since"
                f" {leader['silent_since']})"
            )
        else:
            leading = (
                f"{leader['host']} (pid {leader['pid']}, epoch {leader['epoch']},"
                f" lease until {leader['lease_expires_at']})"
            )
        output.add_row(grid, "leader", leading)
        output.add_row(
            grid,
            "standbys",
            ", ".join(f"{s['host']} (pid {s['pid']})" for s in info["standbys"]) or "none",
        )
    output.show(state.get_console(), grid)
    for host in info["hosts"]:
        role = host["role"]
        if host["silent_since"] is not None and role != "lost":
            role = f"silent since {host['silent_since']}" + (
                " (holds the lease)" if role == "leader" else ""
            )
        output.say(
            f"host {host['host']}: {role}, pid {host['pid']}, last seen"
            f" {host['last_seen']}, clock offset {host['clock_offset']:+.3f}s,"
            f" executing {host['executing']}"
        )
    for warning in info["warnings"]:
        output.say(f"warning: {warning}")
    for blocked in info["blocked"]:
        output.say(f"blocked {blocked['schedule_id']}: {blocked['reason']}")
    for rejection in info["preflight_rejected"]:
        output.say(_rejection_line(rejection["schedule_id"], rejection))
    return None


def _errors_line(errors: dict[str, Any]) -> str:
    """`3 (notification 2, retention 1); last 2026-...: notification run=...: why`."""
    if not errors["total"]:
        return "none"
    phases = ", ".join(f"{phase} {count}" for phase, count in sorted(errors["by_phase"].items()))
    text = f"{errors['total']} ({phases})"
    last = errors["last"]
    if last:
        about = " ".join(
            f"{key}={value}"
            for key, value in last.items()
            if key not in ("phase", "at", "error") and value is not None
        )
        text += f"; last {last['at']}: {last.get('phase')}{' ' + about if about else ''}"
        text += f": {last.get('error')}"
    return text


COMMANDS = (
    validate,
    create,
    apply,
    get,
    list_,
    update,
    edit,
    pause,
    resume,
    delete,
    undelete,
    next_,
    occurrences,
    status,
)


def register(group: click.Group) -> None:
    for command in COMMANDS:
        group.add_command(command)
