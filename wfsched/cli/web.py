"""`wfsched web`: serve the read-only web view; `wfsched web hash-password`.

The view is its own process beside the supervisor, over a store opened
read-only. Its libraries (Jinja2, waitress) are the `web` extra, checked
before anything of the view is imported.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import click

from wfsched.cli import CliState, runs_dir_option
from wfsched.errors import NotFoundError, UsageError

WEB_EXTRA_HINT = "pip install 'wfsched[web]'"


def _require_web_extra() -> None:
    missing = []
    for name in ("jinja2", "waitress"):
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise UsageError(
            f"the web view needs the `web` extra ({', '.join(missing)} not installed):"
            f" {WEB_EXTRA_HINT}"
        )


@click.group("web", invoke_without_command=True)
@click.option(
    "--listen",
    default="127.0.0.1:8765",
    show_default=True,
    metavar="HOST:PORT",
    help="Address to serve on; a non-loopback one needs --password-file.",
)
@click.option(
    "--password-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="HTTP basic auth against this file (from `wfsched web hash-password`).",
)
@click.option("--show-env", is_flag=True, help="Show environment values (masked by default).")
@runs_dir_option
@click.pass_context
def web(
    ctx: click.Context,
    listen: str,
    password_file: Path | None,
    show_env: bool,
) -> None:
    """Serve a read-only web view of the store (GET only; the store opened read-only).

    Pages: schedules, a schedule, runs, a run with its live log, timeline,
    calendar, hosts, status. See docs/web.md for running it under systemd
    and behind a TLS reverse proxy.
    """
    if ctx.invoked_subcommand is not None:
        return
    _require_web_extra()
    state = ctx.ensure_object(CliState)
    from wfsched.store import Store, open_location
    from wfsched.web.app import WebConfig
    from wfsched.web.auth import read_password_file
    from wfsched.web.server import check_exposure, parse_listen, serve
    from wfsched.web.site import make_app

    where = parse_listen(listen)
    credential = read_password_file(password_file) if password_file is not None else None
    check_exposure(where, credential is not None)
    location = state.location()

    def open_store() -> Store:
        store = open_location(location, create=False, read_only=True)
        if store is None:
            raise NotFoundError(
                f"no store at {location.display} (no schedules yet); create one with"
                " `wfsched create FILE` or `wfsched apply DIR`, or pass --store"
            )
        return store

    open_store().close()  # a missing or unreadable store is said now, not per page
    config = WebConfig(
        open_store=open_store,
        credential=credential,
        show_env=show_env,
        host=state.settings(location.local_dir).host,
    )
    serve(make_app(config), where, location.display)


@web.command("hash-password")
@click.option("--user", required=True, help="The one user name the view accepts.")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def hash_password_command(user: str, file: Path) -> None:
    """Write FILE for --password-file: USER and a salted scrypt hash.

    The password is read from the terminal (twice), or as one line from
    standard input when it is not a terminal. FILE is written mode 0600.
    """
    from wfsched.web.auth import check_user, hash_password

    check_user(user)
    if sys.stdin.isatty():
        password = click.prompt("Password", hide_input=True, confirmation_prompt=True)
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise UsageError("hash-password: the password is empty; nothing written")
    line = f"{user}:{hash_password(password)}\n"
    temporary = file.with_name(f".{file.name}.tmp")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(line)
        os.replace(temporary, file)
    except OSError as exc:
        raise UsageError(f"hash-password: cannot write {file}: {exc.strerror}") from None
    click.echo(f"wrote {file} (user {user}); start the view with --password-file {file}")


def register(group: click.Group) -> None:
    group.add_command(web)
