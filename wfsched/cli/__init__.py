"""The `wfsched` command line: a thin click shell over the operator API (`wfsched.api`).

Each command module (`schedules`, `runs`, `supervise`, `prune`, `audit`,
`store`) adds its commands to the group in `wfsched.cli.main`. They share `CliState`, the one
object click passes down (`ctx.obj`): the store path, the `--debug` flag, the
clock and the console. Tests inject a clock or a console by passing their own
`CliState` as `obj`; production code never asks whether it is under test.

Nothing here imports the store, the calendar or rich at import time: a
`wfsched list --json` must start fast, and shell completion even faster.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from wfsched.domain.timeutil import Clock, wall_clock
from wfsched.errors import NotFoundError

if TYPE_CHECKING:
    from rich.console import Console

    from wfsched.api.admin import Admin
    from wfsched.api.reads import Reads
    from wfsched.domain.config import LocalSettings
    from wfsched.store import Store
    from wfsched.store.location import StoreLocation

F = TypeVar("F", bound=Callable[..., Any])

PIPE_WIDTH = 200


@dataclass
class CliState:
    """Per-invocation state; the group callback fills in the global options."""

    store_option: str | None = None
    """`--store` / `$WFSCHED_STORE` as given; None means the default."""
    _location: StoreLocation | None = field(default=None, repr=False)
    debug: bool = False
    clock: Clock = wall_clock
    console: Console | None = None
    """Injectable; created on first use (stdout, no forced colour)."""
    _store: Store | None = field(default=None, repr=False)
    runs_dir_option: str | None = None
    """`--runs-dir` of the commands that read or write run directories."""
    uses_runs_dir: bool = False
    """Set by `runs_dir_option`: the command reads this host's settings
    (config.toml `runs_dir`, `host`) to find run directories."""
    _settings: LocalSettings | None = field(default=None, repr=False)

    def get_console(self) -> Console:
        if self.console is None:
            import os
            import sys

            from wfsched.cli.console import PipeConsole

            width = None
            if "COLUMNS" not in os.environ and not sys.stdout.isatty():
                # Piped or redirected: do not fold tables at rich's 80-column
                # default; tables only take the width they need.
                width = PIPE_WIDTH
            self.console = PipeConsole(highlight=False, soft_wrap=False, width=width)
        return self.console

    def location(self) -> StoreLocation:
        """The store `--store` / `$WFSCHED_STORE` / the default names (parsed once)."""
        if self._location is None:
            from wfsched.store.location import resolve_store

            location = resolve_store(self.store_option)
            if self.uses_runs_dir:
                runs_dir = self.settings(location.local_dir).runs_dir
                if runs_dir is not None:
                    location = replace(location, runs_dir=Path(runs_dir))
            self._location = location
        return self._location

    def settings(self, local_dir: Path | None = None) -> LocalSettings:
        """This host's name and runs root: flags, else config.toml, else defaults."""
        if self._settings is None:
            from wfsched.domain.config import local_settings

            self._settings = local_settings(
                local_dir or self.location().local_dir, runs_dir=self.runs_dir_option
            )
        return self._settings

    def store(self, *, create: bool) -> Store | None:
        """The store, opened once per invocation and closed with the context.

        With `create=False` a store that does not exist yet is None: reading
        commands must not leave an empty store (directory or schema) behind.
        """
        if self._store is None:
            from wfsched.store import open_location

            self._store = open_location(self.location(), create=create)
            if self._store is None:
                return None
            ctx = click.get_current_context(silent=True)
            if ctx is not None:
                ctx.call_on_close(self._close)
        return self._store

    def read_store(self) -> Store | None:
        """The store for a listing read, or None after a one-line stderr note.

        A read of a store that does not exist answers as an empty store would
        (exit 0, no items); only writes create a store. Reads of one id use
        `reads()`/`admin()` instead, which answer "not found" (exit 3).
        """
        if self.store_missing():
            return None
        return self.store(create=False)

    def store_missing(self) -> bool:
        """True, after the one-line stderr note, when no store exists yet."""
        if self.store(create=False) is not None:
            return False
        click.echo(
            f"wfsched: note: no store at {self.location().display} yet; answering as an"
            " empty store would (`wfsched create` or `wfsched apply` makes one)",
            err=True,
        )
        return True

    def reads(self) -> Reads:
        """The read-only API (`list`, `get --json`, `occurrences`): light imports."""
        from wfsched.api.reads import Reads

        return Reads(self._existing_store(), clock=self.clock)

    def _existing_store(self) -> Store:
        store = self.store(create=False)
        if store is None:
            raise NotFoundError(
                f"no store at {self.location().display} (no schedules yet); create one"
                " with `wfsched create FILE` or `wfsched apply DIR`, or pass --store"
            )
        return store

    def admin(self, *, create: bool = False) -> Admin:
        """An `Admin` over the store; a missing store is "not found" (exit 3)."""
        from wfsched.api.admin import Admin

        store = self.store(create=True) if create else self._existing_store()
        assert store is not None
        return Admin(store, clock=self.clock)

    def _close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def runs_dir_option(func: F) -> F:
    """`--runs-dir DIR` for the commands that read or write run directories; with
    it they also read this host's `runs_dir` and `host` from config.toml."""

    def remember(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        state = ctx.ensure_object(CliState)
        state.uses_runs_dir = True
        state.runs_dir_option = value

    return click.option(
        "--runs-dir",
        metavar="DIR",
        expose_value=False,
        is_eager=True,
        callback=remember,
        help="This host's run directories. [config runs_dir, else <local dir>/runs]",
    )(func)


def pass_state(func: F) -> F:
    """Hand the command its `CliState` as the first argument."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        return func(ctx.ensure_object(CliState), *args, **kwargs)

    return wrapper  # type: ignore[return-value]
