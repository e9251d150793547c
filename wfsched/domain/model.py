"""Typed, frozen schedule definitions: what a valid TOML file parses into.

`wfsched.domain.definition` builds these (and is the only place that validates);
everything else may assume they are valid. `Definition.to_document()` gives the
plain mapping that `--json`, `get --toml` and change detection use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Overlap = Literal["skip", "queue", "parallel"]
Misfire = Literal["skip", "latest"]


@dataclass(frozen=True)
class CronTrigger:
    cron: str
    """As written by the operator (shown back to them)."""
    timezone: str
    normalized: str
    """Five Unix fields after the adapter's rewrites; what croniter sees."""


@dataclass(frozen=True)
class OneShotTrigger:
    at: int
    """UTC epoch seconds (fractions truncated)."""
    written: str
    """The instant as written, offset included, for `get --toml`."""


Trigger = CronTrigger | OneShotTrigger


@dataclass(frozen=True)
class RunSpec:
    command: tuple[str, ...]
    """argv as frozen: a string command becomes ("/bin/sh", "-c", STRING)."""
    command_written: str | tuple[str, ...]
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    timeout: int | None = None
    kill_grace: int = 10
    interrupt_exit_code: int | None = None


@dataclass(frozen=True)
class Policy:
    overlap: Overlap = "skip"
    max_active_runs: int | None = None
    misfire: Misfire = "skip"
    lateness: int = 60


@dataclass(frozen=True)
class Binding:
    target: str
    expression: Any
    """The expression table as written (plain dicts/lists), validated."""


@dataclass(frozen=True)
class Definition:
    id: str
    trigger: Trigger
    run: RunSpec
    policy: Policy = field(default_factory=Policy)
    description: str | None = None
    on_failure: tuple[str, ...] | None = None
    inputs: tuple[Binding, ...] = ()

    def to_document(self) -> dict[str, Any]:
        """The definition as a TOML/JSON-ready mapping (the field names of
        docs/operations.md, "JSON output").

        Absent optional values are None here; `to_toml` drops them because
        TOML has no null.
        """
        if isinstance(self.trigger, CronTrigger):
            trigger: dict[str, Any] = {
                "cron": self.trigger.cron,
                "timezone": self.trigger.timezone,
            }
        else:
            trigger = {"at": self.trigger.written}
        command = self.run.command_written
        return {
            "id": self.id,
            "description": self.description,
            "trigger": trigger,
            "run": {
                "command": command if isinstance(command, str) else list(command),
                "cwd": self.run.cwd,
                "env": dict(self.run.env),
                "timeout": self.run.timeout,
                "kill_grace": self.run.kill_grace,
                "interrupt_exit_code": self.run.interrupt_exit_code,
            },
            "policy": {
                "overlap": self.policy.overlap,
                "max_active_runs": self.policy.max_active_runs,
                "misfire": self.policy.misfire,
                "lateness": self.policy.lateness,
            },
            "notify": {"on_failure": list(self.on_failure) if self.on_failure else None},
            "input": [{"target": b.target, **b.expression} for b in self.inputs],
        }
