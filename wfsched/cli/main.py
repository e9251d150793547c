"""The `wfsched` group, its global options, and the error edge.

Every error an operator can cause ends here as ONE line on stderr and an exit
status (docs/operations.md, "Exit statuses"): 0 ok, 1 failed, 2 usage or invalid definition,
3 not found, 4 conflict. The handling lives in `WfschedGroup.main`, not in a
wrapper around it, so click's test runner sees exactly what a shell sees.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import click

from wfsched import __version__
from wfsched.cli import CliState
from wfsched.cli.output import printable
from wfsched.daemon import early_stop
from wfsched.errors import DefinitionErrors, WfschedError
from wfsched.store.resource_faults import os_error_words

PROG = "wfsched"


def _error(message: str) -> None:
    # Multi-line messages would break "one line per error"; fold them.
    # Control characters from operator text (an id, a path) are escaped.
    click.echo(f"{PROG}: error: {printable(' '.join(str(message).split()))}", err=True)


class _ReaderLeft(Exception):
    """A write to stdout met a closed pipe (`BrokenPipeError` in `__cause__`).

    click answers EPIPE itself with exit 1; carried past it as this, the
    closed pipe reaches `wfsched.entry`, which answers it (exit 0, quiet).
    """


class WfschedGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise _ReaderLeft() from exc

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name != "supervise":
            early_stop.disarm()
        return name, command, rest

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        state = extra.setdefault("obj", CliState())
        code = self._run(state, args, prog_name or PROG, complete_var, extra)
        if standalone_mode:
            sys.exit(code)
        return code

    def _run(
        self,
        state: CliState,
        args: Sequence[str] | None,
        prog_name: str,
        complete_var: str | None,
        extra: dict[str, Any],
    ) -> int:
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except WfschedError as exc:
            if state.debug:
                _print_traceback()
            # Several invalid files are one line each, then the summary.
            for line in exc.lines() if isinstance(exc, DefinitionErrors) else [str(exc)]:
                _error(line)
            return exc.exit_code
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            return exc.exit_code
        except click.UsageError as exc:
            hint = ""
            if exc.ctx is not None:
                hint = f" (see '{exc.ctx.command_path} --help')"
            _error(f"{exc.format_message()}{hint}")
            return exc.exit_code
        except click.ClickException as exc:
            _error(exc.format_message())
            return exc.exit_code
        except click.Abort as exc:
            interrupted = isinstance(exc.__cause__, KeyboardInterrupt)
            _error(state.interrupted if interrupted and state.interrupted else "aborted")
            # Ctrl-C is 128 + SIGINT, as a shell reports an interrupted command.
            return 130 if interrupted else 1
        except _ReaderLeft as exc:
            # `wfsched list | head -1`: the entry point's to answer (`wfsched.entry`).
            raise exc.__cause__ from None  # type: ignore[misc]
        except OSError as exc:
            # A full disk, a read-only store, EIO while writing a run's files:
            # said in words with the fix, exit 1 (the operation failed).
            if state.debug:
                _print_traceback()
            _error(os_error_words(exc, state.location().local_dir))
            return 1
        except Exception as exc:
            if state.debug:
                _print_traceback()
                _error(f"{type(exc).__name__}: {exc}")
            else:
                _error(f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)")
            return 1
        # Non-standalone click returns the callback's value, or the code of a
        # `ctx.exit(code)`; commands return None when all went well.
        if isinstance(result, int) and not isinstance(result, bool):
            return result
        return 0


def _print_traceback() -> None:
    import traceback

    traceback.print_exc()


@click.group(
    cls=WfschedGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--store",
    "store",
    metavar="PATH|URL",
    envvar="WFSCHED_STORE",
    show_envvar=True,
    help=(
        "The store: a directory (SQLite) or a postgresql://[user@]host[:port]/dbname URL"
        " (several hosts share it). [default: $XDG_STATE_HOME/wfsched, i.e."
        " ~/.local/state/wfsched]"
    ),
)
@click.option(
    "--local-dir",
    "local_dir",
    metavar="DIR",
    envvar="WFSCHED_LOCAL_DIR",
    show_envvar=True,
    help=(
        "PostgreSQL store: this host's directory (config.toml, run directories), made"
        " mode 0700. [default: $STATE_DIRECTORY/postgresql/<db>@<host>:<port> under"
        " systemd, else the same under $XDG_STATE_HOME/wfsched]"
    ),
)
@click.option("--debug", is_flag=True, help="Show a traceback when a command fails.")
@click.version_option(__version__, "--version", prog_name=PROG, message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, store: str | None, local_dir: str | None, debug: bool) -> None:
    """wfsched: a durable cron replacement.

    Keep schedule definitions as TOML files, load them with `apply`, and let
    `wfsched supervise` run them. One host keeps its store in a SQLite
    directory; several hosts share a PostgreSQL store (--store postgresql://...),
    one supervisor leading and the others standing by. Every read command
    takes --json.

    Exit status: 0 ok, 1 failed, 2 usage or invalid definition, 3 not found,
    4 conflict (stale revision, id taken, deleted schedule, store owned).
    """
    state = ctx.ensure_object(CliState)
    state.debug = debug
    # Resolved on first use: `validate` never touches a store.
    state.store_option = store
    state.local_dir_option = local_dir


# --- command registration: the one place command groups join `wfsched` ---------
COMMAND_MODULES = {
    "wfsched.cli.schedules": (
        "validate", "create", "apply", "get", "list", "update", "edit", "pause", "resume",
        "delete", "undelete", "next", "occurrences", "status",
    ),
    "wfsched.cli.runs": ("runs", "trigger", "logs"),
    "wfsched.cli.supervise": ("supervise",),
    "wfsched.cli.prune": ("prune",),
    "wfsched.cli.audit": ("audit",),
    "wfsched.cli.store": ("store",),
    "wfsched.cli.requests": ("requests",),
    "wfsched.cli.web": ("web",),
    "wfsched.cli.cron": ("import-crontab", "export"),
}  # fmt: skip
"""Which module registers which commands (its `register(group)`)."""


class _Commands(dict[str, click.Command]):
    """The group's commands, each module imported when one of its commands
    is first asked for: `wfsched supervise` runs for months, and the other
    commands' modules would cost it about 2 MB of resident memory for
    nothing. Listing (help, completion) imports them all."""

    def __init__(self, group: click.Group) -> None:
        super().__init__()
        self._group = group
        self._pending = {
            name: module for module, names in COMMAND_MODULES.items() for name in names
        }

    def _load(self, name: str) -> None:
        module = self._pending.get(name)
        if module is None:
            return
        for other in COMMAND_MODULES[module]:
            self._pending.pop(other, None)
        importlib.import_module(module).register(self._group)

    def _load_all(self) -> None:
        while self._pending:
            self._load(next(iter(self._pending)))

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        self._load(name)
        return super().get(name, default)

    def __getitem__(self, name: str) -> click.Command:
        self._load(name)
        return super().__getitem__(name)

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str):
            self._load(name)
        return super().__contains__(name)

    def __iter__(self) -> Iterator[str]:
        self._load_all()
        return super().__iter__()

    def __len__(self) -> int:
        self._load_all()
        return super().__len__()

    def keys(self):  # type: ignore[no-untyped-def]
        self._load_all()
        return super().keys()

    def values(self):  # type: ignore[no-untyped-def]
        self._load_all()
        return super().values()

    def items(self):  # type: ignore[no-untyped-def]
        self._load_all()
        return super().items()


cli.commands = _Commands(cli)
# ---------------------------------------------------------------------------------


def main() -> None:
    """Console-script entry point."""
    cli.main(prog_name=PROG)
