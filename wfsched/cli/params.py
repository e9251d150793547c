"""Shared click parameter types, and the listing options every listing spells alike.

Durations are accepted in the same forms everywhere (definition, config file,
command-line flags): seconds (`45`, or `0.5` where a fraction makes sense)
or `<n>s|m|h|d` (`"45s"`, `"2m"`).
"""

from __future__ import annotations

from typing import Any

import click

from wfsched.domain.timeutil import parse_duration


class Duration(click.ParamType):
    name = "duration"

    def __init__(self, *, fractions: bool = True) -> None:
        self.fractions = fractions

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        text = str(value).strip()
        try:
            if not text.isascii():
                # "²".isdigit() and float("٣") are true: only ASCII digits count.
                raise ValueError(f"{text!r} is not a duration; use seconds or '<n>s|m|h|d'")
            if self.fractions and _is_number(text):
                # Range (negative, nan, too long) is the config's to judge,
                # with the same message as for config.toml.
                return float(text)
            return float(parse_duration(int(text) if text.isdigit() else text))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


wide_option = click.option(
    "--wide",
    is_flag=True,
    help="Show every column, however wide the terminal (else the least needed columns"
    " are left out until the table fits).",
)

reverse_option = click.option(
    "--reverse",
    is_flag=True,
    help="The other order: newest first for occurrences, oldest first for runs"
    " (the next page's command keeps it).",
)
