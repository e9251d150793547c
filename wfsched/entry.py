"""The `wfsched` program: catch an early stop of `supervise` (see
`wfsched.daemon.early_stop`) before importing the CLI, then run it.

When the command is done, every object the process still holds is frozen
(`gc.freeze()`) before the interpreter exits. The interpreter's exit runs
full garbage collections that walk every object the imports built, only for
the memory to go back to the system a moment later; with psycopg loaded one
such walk costs about 15 ms of CPU, and the exit makes more than one (the
figures are in docs/postgresql.md).

Nothing else changes at exit: `atexit` handlers run, threads are joined,
modules are torn down and whatever reference counting frees is freed as
before. Only objects caught in reference cycles are left to the end of the
process instead of being collected, so a `__del__` on such an object does
not run: Python never promises that at exit, and the store is closed
explicitly (a commit is durable when it returns, never at exit).
"""

from __future__ import annotations

import gc
import os
import sys


def main() -> None:
    from wfsched.daemon import early_stop

    early_stop.arm(sys.argv[1:])
    from wfsched.cli.main import main as cli_main

    try:
        try:
            cli_main()
        finally:
            # Inside the try: output still buffered when the reader has left
            # fails here, not in the interpreter's own flush at exit.
            sys.stdout.flush()
    except BrokenPipeError:
        _reader_left()
    finally:
        gc.freeze()


def _reader_left() -> None:
    """`wfsched runs | head -1`: the reader closed the pipe, as a reader may.

    Not an error, so exit 0 with nothing on stderr (where a shell's
    `set -o pipefail` would see a failure). As the Python docs advise for
    SIGPIPE, stdout is pointed at /dev/null first, so the interpreter's flush
    at exit does not fail on the closed pipe again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(0)
