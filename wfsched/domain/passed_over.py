"""What a supervisor's start passed over: the startup rule made visible.

Under `misfire = "skip"` a restart that straddles a due instant drops it
(the startup rule: what fell due while no supervisor ran is not run late),
and `misfire = "latest"` keeps the latest one. The rule stays; the count is
what an operator needs to notice it: the supervisor logs it once after its
first admission pass (`passed-over`), and records it for `status`
(`startup_passed_over`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

META_KEY = "startup_passed_over"
HINT = (
    'misfire = "skip" drops the instants a restart passes over;'
    ' misfire = "latest" keeps the latest of them'
)


@dataclass
class PassedOver:
    """The instants the startup rule passed over, and of how many schedules."""

    instants: int = 0
    exact: bool = True
    """False when a summary row spanned more than 100 instants (its count is
    not computed: `instants` is then a lower bound)."""
    schedules: set[str] = field(default_factory=set)

    def add(self, schedule_id: str, count: int | None) -> None:
        """One ledger row of reason `supervisor-down`: one instant, or a
        summary of `count` (None: more than 100)."""
        self.schedules.add(schedule_id)
        if count is None:
            self.exact = False
            count = 101
        self.instants += count

    def fields(self) -> dict[str, Any]:
        return {
            "instants": self.instants,
            "instants_exact": self.exact,
            "schedules": len(self.schedules),
        }

    def to_meta(self, at: str | None) -> str:
        return json.dumps({"at": at, **self.fields()})


def published(text: str | None) -> dict[str, Any] | None:
    """The recorded report as `status` shows it, with the hint when anything
    was passed over; None when none was recorded (or it is garbled)."""
    if not text:
        return None
    try:
        value = json.loads(text)
        report = {
            "at": value["at"],
            "instants": int(value["instants"]),
            "instants_exact": bool(value["instants_exact"]),
            "schedules": int(value["schedules"]),
        }
    except (ValueError, KeyError, TypeError):
        return None
    report["hint"] = HINT if report["instants"] else None
    return report
