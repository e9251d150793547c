"""Per-run directories: `runs/<run-id>/` with the input, the state dir kept
across attempts, and one `attempt-N/` per attempt (logs, shim and exit records).

Files are written after the admission commit; the database stays the
authority, the directory is the run's working material.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class RunDir:
    def __init__(self, runs_root: Path, run_id: str) -> None:
        self.path = runs_root / run_id
        self.input_path = self.path / "input.json"
        self.state_dir = self.path / "state"

    def attempt_dir(self, attempt: int) -> Path:
        return self.path / f"attempt-{attempt}"

    def log_path(self, attempt: int, stream: str) -> Path:
        return self.attempt_dir(attempt) / f"{stream}.log"

    def resume_input_path(self, attempt: int) -> Path:
        return self.attempt_dir(attempt) / "resume-input.json"

    def prepare(self, input_document: Any) -> None:
        """Create the run directory with its input; idempotent, so a launch
        retried after recovery rewrites the same content."""
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_json_atomic(self.input_path, input_document)

    def prepare_attempt(self, attempt: int, resume_input: Any | None = None) -> Path:
        directory = self.attempt_dir(attempt)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if resume_input is not None:
            write_json_atomic(self.resume_input_path(attempt), resume_input)
        return directory


def write_json_atomic(path: Path, document: Any) -> None:
    """Complete or absent, never torn (tmp + rename). No fsync: the database
    holds the frozen input as the authority, and an fsync per run would cost
    a burst of a thousand launches whole seconds."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(document, handle, ensure_ascii=False)
    os.replace(tmp, path)
