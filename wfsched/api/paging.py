"""Opaque keyset cursors: a page is an index seek, whatever the history size."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from wfsched.errors import UsageError


def encode_cursor(**key: Any) -> str:
    raw = json.dumps({"v": 1, **key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, *fields: str) -> dict[str, Any]:
    """The cursor's key fields; a cursor not made by `encode_cursor` is exit 2."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        key = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        if not isinstance(key, dict) or key.get("v") != 1 or set(key) != {"v", *fields}:
            raise ValueError("wrong shape")
        for name in fields:
            value = key[name]
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or abs(value) >= 2**63
            ):
                raise ValueError("wrong type")
    except (ValueError, UnicodeError, binascii.Error):
        raise UsageError(
            f"malformed cursor {cursor!r}; pass the next_cursor printed by the previous page"
        ) from None
    return key


def decode_directed(cursor: str, forward: str, backward: str, *, reverse: bool) -> int | None:
    """The key of a cursor of a listing that pages either way (`--reverse`).

    A cursor names its direction by its field, so a cursor taken from a
    `--reverse` page and passed without `--reverse` (or the other way round)
    is refused, naming the fix, instead of silently paging the wrong way.
    """
    wanted, other = (backward, forward) if reverse else (forward, backward)
    try:
        return decode_cursor(cursor, wanted)[wanted]  # type: ignore[no-any-return]
    except UsageError:
        try:
            decode_cursor(cursor, other)
        except UsageError:
            raise
        raise UsageError(
            f"cursor {cursor!r} is from a listing {'without' if reverse else 'with'} --reverse;"
            f" {'drop' if reverse else 'add'} --reverse, with the previous page's other options"
        ) from None
