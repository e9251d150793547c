"""Bounded `IN (...)` lists: one helper instead of a loop per query."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")

IN_LIST_LIMIT = 500
"""Values bound per statement: well under SQLite's historical limit of 999
bound parameters, and small enough that one chunk is one short statement."""


def chunked(items: Sequence[T], size: int = IN_LIST_LIMIT) -> Iterator[list[T]]:
    """`items` in consecutive lists of at most `size` (none for no items)."""
    if size < 1:
        raise ValueError("chunk size must be at least 1")
    for start in range(0, len(items), size):
        yield list(items[start : start + size])
