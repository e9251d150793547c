"""The `wfsched` program: catch an early stop of `supervise` (see
`wfsched.daemon.early_stop`) before importing the CLI, then run it."""

from __future__ import annotations

import sys


def main() -> None:
    from wfsched.daemon import early_stop

    early_stop.arm(sys.argv[1:])
    from wfsched.cli.main import main as cli_main

    cli_main()
