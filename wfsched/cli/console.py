"""The console human output goes through (imported on first use: rich is slow to import)."""

from __future__ import annotations

import errno

from rich.console import Console


class PipeConsole(Console):
    """A rich console that leaves a closed pipe to wfsched's entry point.

    rich answers a write to a closed pipe by exiting 1 on its own; a reader
    that leaves early (`wfsched list | head -1`) is not an error, and
    `wfsched.entry` answers it for every command alike: exit 0, quiet.
    """

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")
