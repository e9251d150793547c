"""Plain rows read from the store; the store layer is the only producer.

The store interface (`wfsched.store.interface.Store`) returns only these
(and builtins), so nothing outside the store sees a driver type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple


@dataclass(frozen=True)
class ScheduleRow:
    id: str
    revision: int
    definition: str
    created_at: float
    updated_at: float
    paused: bool
    deleted_at: float | None
    exhausted: bool
    blocked_reason: str | None
    consumed_through: int
    candidate_at: int | None
    candidate_why: str | None
    next_due: int | None

    @property
    def state(self) -> str:
        if self.deleted_at is not None:
            return "deleted"
        if self.blocked_reason:
            return "blocked"
        if self.paused:
            return "paused"
        if self.exhausted:
            return "exhausted"
        return "active"


@dataclass(frozen=True)
class OccurrenceRow:
    seq: int
    schedule_id: str
    scheduled_at: int
    last_at: int | None
    count: int | None
    summary: bool
    state: str
    reason: str | None
    revision: int
    run_seq: int | None
    recorded_at: float
    run_state: str | None = None
    run_reason: str | None = None
    admitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    ledger_pos: int = 0
    """Its place in the schedule's history (record order; the page key)."""


@dataclass(frozen=True)
class Invocation:
    """A run's invocation as admission froze it (`runs.invocation`)."""

    command: list[str]
    cwd: str | None
    env: dict[str, str]
    input: Any
    """The resolved input document (JSON)."""
    timeout: int | None
    kill_grace: int
    interrupt_exit_code: int | None
    """None also for runs frozen before the setting existed."""
    runs_root: str | None = None
    """The runs root of the host that executes the run, where its directory
    (`WFSCHED_RUN_DIR`) is; None for runs frozen before it was recorded."""

    def to_json(self) -> str:
        """The text `from_json` reads back as this invocation (a run row's)."""
        return json.dumps(
            {
                "command": self.command,
                "cwd": self.cwd,
                "env": self.env,
                "input": self.input,
                "timeout": self.timeout,
                "kill_grace": self.kill_grace,
                "interrupt_exit_code": self.interrupt_exit_code,
                "runs_root": self.runs_root,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Invocation:
        """Raises ValueError or KeyError for a damaged row."""
        data = json.loads(text)
        return cls(
            command=data["command"],
            cwd=data["cwd"],
            env=data["env"],
            input=data["input"],
            timeout=data["timeout"],
            kill_grace=data["kill_grace"],
            interrupt_exit_code=data.get("interrupt_exit_code"),
            runs_root=data.get("runs_root"),
        )


@dataclass(frozen=True)
class RunRow:
    seq: int
    schedule_id: str
    kind: str
    scheduled_at: int
    state: str
    reason: str | None
    exit_code: int | None
    revision: int
    invocation: str
    admitted_at: float
    started_at: float | None
    finished_at: float | None
    attempt: int
    host: str | None = None
    """The host that admitted and executes the run (None: recorded before
    runs had hosts)."""

    @property
    def run_id(self) -> str:
        return run_id(self.seq)

    @cached_property
    def frozen(self) -> Invocation:
        """`invocation` parsed, once per row (ValueError/KeyError if damaged)."""
        return Invocation.from_json(self.invocation)

    def parsed_as(self, frozen: Invocation) -> RunRow:
        """This row, its `frozen` already known: a run just admitted from
        `frozen.to_json()`, whose launch need not parse the text back."""
        self.__dict__["frozen"] = frozen
        return self

    @property
    def is_manual(self) -> bool:
        """A `trigger`ed run: it has no occurrence and holds no capacity slot."""
        return self.kind == "manual"


@dataclass(frozen=True)
class AttemptRow:
    run_seq: int
    attempt: int
    state: str
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    reason: str | None
    shim_pid: int | None
    shim_start_time: int | None


class AttemptEnd(NamedTuple):
    """How an attempt ended, as `Store.end_attempts` records it on the
    attempt row and on its run."""

    run_seq: int
    attempt: int
    state: str
    finished_at: float
    exit_code: int | None
    reason: str | None
    stdout_tail: bytes | None
    stderr_tail: bytes | None
    run_finished_at: float | None
    """The run's finished_at: None for an interrupted run (it may be resumed)."""


@dataclass(frozen=True)
class RequestRow:
    seq: int
    kind: str
    schedule_id: str | None
    run_seq: int | None
    payload: str | None
    created_at: float
    state: str
    result: str | None
    handled_at: float | None


PRUNED_STATE = "pruned"
"""The ledger state of retention's summary rows (never pruned themselves)."""


@dataclass(slots=True)
class LedgerRow:
    """One occurrence row as the audit's ledger walk needs it. Not frozen: the
    walk builds a million of them, and a frozen dataclass costs three times
    as much to build (nothing writes to one after the store returns it)."""

    seq: int
    scheduled_at: int
    last_at: int | None
    count: int | None
    summary: bool
    state: str
    revision: int


@dataclass(frozen=True)
class RevisionRow:
    revision: int
    definition: str
    created_at: float
    watermark: int | None
    """consumed_through when the revision took over (None before schema 3)."""


@dataclass(frozen=True)
class RunAttempts:
    """A run with its attempt rows (attempt number -> state)."""

    seq: int
    schedule_id: str
    kind: str
    state: str
    attempt: int
    attempts: dict[int, str]
    host: str | None = None


@dataclass(frozen=True)
class SchemaProblem:
    """A schema object the migrations create that is missing or altered."""

    kind: str
    name: str
    found: str | None
    """The object's normalized SQL as found; None when it is missing."""


@dataclass(frozen=True)
class LedgerItem:
    """One occurrence row as retention sees it: the span it accounts for."""

    seq: int
    first: int
    last: int
    count: int | None
    """Instants covered: 1 for a row of its own, the summary's count (None = unknown)."""
    state: str
    revision: int
    ledger_pos: int
    """Its place in the history's record order."""


@dataclass(frozen=True)
class PrunableRow:
    """An occurrence row retention may remove, with the run that goes with it."""

    item: LedgerItem
    schedule_id: str
    run_seq: int | None


@dataclass(frozen=True)
class NotificationRow:
    """One failure hook: of a run's attempt, or of a preflight-rejected
    occurrence (no run: `run_seq` is None, `attempt` 0)."""

    seq: int
    schedule_id: str
    run_seq: int | None
    scheduled_at: int | None
    attempt: int
    state: str
    reason: str | None
    started_at: float
    finished_at: float | None


@dataclass(frozen=True)
class RejectionRow:
    """A schedule's newest preflight rejection with no successful run since."""

    schedule_id: str
    scheduled_at: int
    reason: str | None


def run_id(seq: int) -> str:
    return f"run-{seq:06d}"


MAX_RUN_SEQ = 2**63 - 1
"""The largest SQLite INTEGER: a larger number cannot name a run."""


def parse_run_id(text: str) -> int | None:
    """`run-000042` (or `42`) -> 42; anything else -> None.

    ASCII digits only: `"²".isdigit()` is true and int() refuses it, and
    Unicode digits such as `٤٢` must not name run 42 either.
    """
    digits = text[4:] if text.startswith("run-") else text
    if digits.isascii() and digits.isdigit() and len(digits) <= 19:
        seq = int(digits)
        if 0 < seq <= MAX_RUN_SEQ:
            return seq
    return None
