"""Coming from cron: import-crontab and export.

`import-crontab` turns a crontab into definition files (what a cron user has
today), `export` turns the store back into them (what `crontab -l` gives a
cron user). Both write into a folder that `apply` then makes true; the
translation rules are in `wfsched.domain.crontab`.
"""

from __future__ import annotations

from pathlib import Path

import click

from wfsched.cli import CliState, output, pass_state
from wfsched.errors import UsageError

_SYSTEM_PATHS = ("/etc/crontab", "/etc/cron.d/")


@click.command("import-crontab")
@click.argument("file", required=False, type=click.Path(dir_okay=False, allow_dash=True))
@click.option(
    "--to",
    "folder",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder to write one definition file per crontab line into.",
)
@click.option("--user", help="Whose crontab (read with `crontab -l -u USER` when FILE is omitted).")
@click.option(
    "--timezone", help="Zone of lines before any CRON_TZ. [default: this host's zone, as cron's]"
)
@click.option(
    "--system/--no-system",
    default=None,
    help="Lines carry a user field (/etc/crontab, /etc/cron.d). [default: by FILE's path]",
)
@click.option("--dry-run", is_flag=True, help="Print the files instead of writing them.")
@click.option("--force", is_flag=True, help="Replace files in the folder that differ.")
@pass_state
def import_crontab(
    state: CliState,
    file: str | None,
    folder: str,
    user: str | None,
    timezone: str | None,
    system: bool | None,
    dry_run: bool,
    force: bool,
) -> None:
    """Translate a crontab into definition files, one per job line.

    FILE is a crontab (`-` reads stdin); without it, `crontab -l` is read.
    Every line that cannot be translated (@reboot, `%` in a command, a field
    wfsched refuses) is reported with its line number and left out; the
    rest is written, and each file's comments say what differs from cron.
    Then `wfsched apply FOLDER` loads them.
    """
    from wfsched.api import definition_files as files
    from wfsched.domain.calendar import load_zone
    from wfsched.domain.crontab import translate_crontab

    if system is None:
        system = file is not None and file.startswith(_SYSTEM_PATHS)
    if system and user is not None:
        raise UsageError("--user names a user crontab's owner; a system crontab names its users")
    zone = timezone or files.host_zone()
    if zone is None:
        zone = "UTC"
        click.echo(
            "wfsched: warning: this host names no time zone (/etc/localtime, $TZ);"
            " lines before any CRON_TZ are read in UTC (--timezone chooses one)",
            err=True,
        )
    try:
        load_zone(zone)
    except ValueError as exc:
        raise UsageError(f"--timezone: {exc}") from None
    text, source = files.read_crontab(file, user)
    result = translate_crontab(
        text,
        source=source,
        system=system,
        zone=zone,
        owner=None if system else (user or files.invoking_user()),
        now=int(state.clock()),
        home_of=files.home_of,
    )
    for problem in result.untranslated:
        _warn(source, problem.line, f"not translated: {problem.why}")
    for item in result.translated:
        for note in item.notes:
            if note.startswith("NOTE: "):
                _warn(source, item.line, note.removeprefix("NOTE: "))
    texts = {f"{item.schedule_id}.toml": item.text for item in result.translated}
    target = Path(folder)
    if dry_run:
        for name, body in texts.items():
            output.say(f"# --- {target / name}")
            click.echo(body)
    else:
        written = files.write_definition_files(target, texts, force=force)
        for item, done in zip(result.translated, written, strict=True):
            verb = "wrote" if done.changed else "unchanged"
            output.say(f"{verb} {done.path} (line {item.line})")
    skipped = len(result.untranslated)
    verb = "would write" if dry_run else "wrote"
    output.say(
        f"{verb} {len(texts)} definitions from {source} to {target};"
        f" {skipped} line{'s' if skipped != 1 else ''} not translated"
        + ("" if dry_run else f"; load them with `wfsched apply {target}`")
    )


def _warn(source: str, line: int, message: str) -> None:
    click.echo(output.printable(f"wfsched: warning: {source}: line {line}: {message}"), err=True)


@click.command()
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--force", is_flag=True, help="Replace files in the folder that differ.")
@pass_state
def export(state: CliState, folder: str, force: bool) -> None:
    """Write every schedule (deleted ones aside) as its definition file.

    FOLDER gets one `ID.toml` per schedule, the file `get --toml` prints,
    so `wfsched apply --prune FOLDER` right after changes nothing. A file
    already there with other content is refused (exit 4, nothing written)
    unless --force.
    """
    from wfsched.api.definition_files import exported_files, write_definition_files

    target = Path(folder)
    texts = {} if state.store_missing() else exported_files(state.admin())
    written = write_definition_files(target, texts, force=force)
    for done in written:
        output.say(f"{'wrote' if done.changed else 'unchanged'} {done.path}")
    strays = sorted(
        path.name for path in target.glob("*.toml") if target.is_dir() and path.name not in texts
    )
    for name in strays:
        click.echo(
            f"wfsched: warning: {target / name} is no schedule's file;"
            " `apply --prune` of this folder would apply it too",
            err=True,
        )
    output.say(f"{len(texts)} definitions exported from store {state.location().display}")


COMMANDS = (import_crontab, export)


def register(group: click.Group) -> None:
    for command in COMMANDS:
        group.add_command(command)
