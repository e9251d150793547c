"""Admission preflight: what can change after validation (the executable
and the cwd; docs/definitions.md, "Warnings").

Executable found and cwd present are re-checked at admission; everything
static was checked when the definition was accepted.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence


def preflight(argv: Sequence[str], cwd: str | None, env: Mapping[str, str]) -> str | None:
    """None when the run can start, else the reason it cannot."""
    if cwd is not None and not os.path.isdir(cwd):
        return f"cwd {cwd!r} does not exist or is not a directory"
    program = argv[0]
    if "/" in program:
        path = program if os.path.isabs(program) or cwd is None else os.path.join(cwd, program)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            return f"executable {program!r} not found or not executable"
        return None
    search = env.get("PATH", os.environ.get("PATH", os.defpath))
    if shutil.which(program, path=search) is None:
        return f"executable {program!r} not found on PATH"
    return None
