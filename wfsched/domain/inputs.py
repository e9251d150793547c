"""Input bindings: validating `[[input]]` tables and resolving them per run.

A schedule stores *instructions* for building each run's input JSON document,
never the document itself: `occurrence` values differ per run. The expression
language is deliberately closed (literal, occurrence, array, object) so a
definition can never format dates, do arithmetic or execute code; runs that
need more compute it themselves from the resolved document.

Every bound is checked statically here, when a definition is validated, so a
schedule that passes `validate` cannot fail admission on its input: the only
per-run values (`schedule_id`, `occurrence_id`, `scheduled_at`) have a fixed
length, so the resolved size measured with sample values is exact (or an upper
bound, for manual runs whose occurrence id is null).
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, time
from typing import Any

from wfsched.domain.model import Binding
from wfsched.domain.timeutil import format_instant, occurrence_id
from wfsched.errors import DefinitionError

MAX_BINDINGS = 64
MAX_DEPTH = 8
"""Nested `array`/`object` expression levels; a top-level literal is depth 0."""
MAX_NODES = 1000
"""Expression tables across all bindings (each table counts one)."""
MAX_INPUT_BYTES = 64 * 1024
"""Resolved input, measured as compact UTF-8 JSON (see `input_json_bytes`)."""
MAX_TARGET_SEGMENTS = 32
"""Not in the contract's budget list: keeps a pathological target from
nesting the resolved document deeper than `json` can encode."""
MAX_LITERAL_DEPTH = 64
MIN_LITERAL_INT = -(2**63)
MAX_LITERAL_INT = 2**63 - 1
"""Integers in literals: TOML's own range (64-bit signed), which every TOML
reader holds exactly; Python's parser reads longer ones, other readers
refuse or round them."""
"""Nesting inside one literal value, for the same reason (the 64 KiB budget
alone would allow tens of thousands of levels)."""

EXPRESSION_KINDS = ("literal", "occurrence", "array", "object")
OCCURRENCE_FIELDS = ("schedule_id", "occurrence_id", "scheduled_at")
_BINDING_KEYS = ("target", *EXPRESSION_KINDS)

SAMPLE_INSTANT = 1_798_761_600
"""2027-01-01T00:00:00Z. Any instant does: the RFC 3339 text and the
occurrence id have the same length for every instant."""

# Applied with fullmatch (see `whole_match`).
_SEGMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def whole_match(pattern: re.Pattern[str], text: str, *, stored: bool = False) -> bool:
    """`text` is one whole match of `pattern`.

    A stored value may end in one newline: earlier releases matched with
    `^...$`, whose `$` also matches before a final newline, so they accepted
    and stored such values, and those must still load.
    """
    return pattern.fullmatch(text.removesuffix("\n") if stored else text) is not None


def validate_bindings(raw: object, source: str, *, stored: bool = False) -> tuple[Binding, ...]:
    """Validate the `input` array of tables into frozen bindings.

    Checks shapes, strict-JSON literals, target syntax and conflicts, and the
    count/depth/node bounds. The 64 KiB bound needs the schedule id, so the
    caller checks it with `sample_input`. `stored`: a definition from the
    store, read with the rules it was accepted under (`whole_match`).
    """
    if not isinstance(raw, list):
        raise DefinitionError(source, "input", "must be an array of tables ([[input]])")
    if len(raw) > MAX_BINDINGS:
        raise DefinitionError(
            source, "input", f"{len(raw)} bindings; at most {MAX_BINDINGS} are allowed"
        )
    bindings: list[Binding] = []
    segments: list[tuple[str, ...]] = []
    nodes = 0
    for index, table in enumerate(raw):
        path = f"input[{index}]"
        if type(table) is not dict and not isinstance(table, Mapping):
            raise DefinitionError(source, path, "must be a table with `target` and one expression")
        _reject_unknown(table, _BINDING_KEYS, source, path)
        target = table.get("target")
        parts = _target_segments(target, source, f"{path}.target", stored)
        expression = {k: v for k, v in table.items() if k != "target"}
        counter = _Counter()
        counter.bounded = not stored
        checked = _expression(expression, source, path, depth=0, counter=counter)
        nodes += counter.nodes
        _check_conflicts(parts, segments, source, index)
        segments.append(parts)
        bindings.append(Binding(target=".".join(parts), expression=checked))
    if nodes > MAX_NODES:
        raise DefinitionError(
            source,
            "input",
            f"{nodes:,} expression nodes in total; at most {MAX_NODES:,} "
            "(each literal/occurrence/array/object table counts one)",
        )
    return tuple(bindings)


def resolve_input(
    bindings: Iterable[Binding],
    *,
    schedule_id: str,
    occurrence_id: str | None,
    scheduled_at: str,
    source: str | None = None,
) -> dict[str, Any]:
    """Build one run's input JSON document from validated bindings.

    `occurrence_id` is None for a manual run (it resolves to JSON null).
    Literals are deep-copied so callers may mutate the result freely. Raises
    DefinitionError when the document exceeds 64 KiB; `source` names the
    definition in that message (default: the schedule id).
    """
    values = {
        "schedule_id": schedule_id,
        "occurrence_id": occurrence_id,
        "scheduled_at": scheduled_at,
    }
    document: dict[str, Any] = {}
    for binding in bindings:
        *parents, leaf = binding.target.split(".")
        node = document
        for segment in parents:
            node = node.setdefault(segment, {})
        node[leaf] = _evaluate(binding.expression, values)
    size = input_json_bytes(document)
    if size > MAX_INPUT_BYTES:
        raise DefinitionError(
            source or f"schedule {schedule_id}",
            "input",
            f"resolved input is {size:,} bytes of JSON; at most {MAX_INPUT_BYTES:,} (64 KiB)",
        )
    return document


def sample_input(
    bindings: Iterable[Binding], schedule_id: str, *, source: str | None = None
) -> dict[str, Any]:
    """Resolve with sample occurrence values: the static 64 KiB check."""
    return resolve_input(
        bindings,
        schedule_id=schedule_id,
        occurrence_id=occurrence_id(schedule_id, SAMPLE_INSTANT),
        scheduled_at=format_instant(SAMPLE_INSTANT) or "",
        source=source,
    )


def input_json_bytes(document: object) -> int:
    """The size the 64 KiB bound measures: compact, UTF-8, no ASCII escaping."""
    return len(_COMPACT.encode(document).encode("utf-8"))


_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
"""Built once (an encoder holds only its options): every definition validated
measures its sample input with it."""


class _Counter:
    nodes = 0
    bounded = True
    """False for a stored definition: read without bounds added since."""


def _evaluate(expression: Mapping[str, Any], values: Mapping[str, Any]) -> Any:
    ((kind, body),) = expression.items()
    if kind == "literal":
        return copy.deepcopy(body)
    if kind == "occurrence":
        return values[body]
    if kind == "array":
        return [_evaluate(item, values) for item in body]
    return {key: _evaluate(item, values) for key, item in body.items()}


def _expression(
    table: object, source: str, path: str, *, depth: int, counter: _Counter
) -> dict[str, Any]:
    """Validate one expression table; returns a fresh plain-dict copy."""
    if type(table) is not dict and not isinstance(table, Mapping):
        raise DefinitionError(
            source, path, f"must be an expression table with one of: {', '.join(EXPRESSION_KINDS)}"
        )
    _reject_unknown(table, EXPRESSION_KINDS, source, path)
    kinds = [kind for kind in EXPRESSION_KINDS if kind in table]
    if len(kinds) != 1:
        found = f"has {', '.join(kinds)}" if kinds else "has none"
        raise DefinitionError(
            source, path, f"needs exactly one of {', '.join(EXPRESSION_KINDS)} ({found})"
        )
    counter.nodes += 1
    kind = kinds[0]
    body = table[kind]
    where = f"{path}.{kind}"
    if kind == "literal":
        return {"literal": _strict_json(body, source, where, 0, counter.bounded)}
    if kind == "occurrence":
        if body not in OCCURRENCE_FIELDS:
            raise DefinitionError(
                source, where, f"{body!r} is not one of {', '.join(OCCURRENCE_FIELDS)}"
            )
        return {"occurrence": body}
    if depth + 1 > MAX_DEPTH:
        raise DefinitionError(source, where, f"array/object nesting deeper than {MAX_DEPTH} levels")
    if kind == "array":
        if not isinstance(body, list):
            raise DefinitionError(source, where, "must be an array of expression tables")
        items = [
            _expression(item, source, f"{where}[{i}]", depth=depth + 1, counter=counter)
            for i, item in enumerate(body)
        ]
        return {"array": items}
    if not isinstance(body, Mapping):
        raise DefinitionError(source, where, "must be a table of expression tables")
    members = {
        key: _expression(item, source, f"{where}.{toml_key(key)}", depth=depth + 1, counter=counter)
        for key, item in body.items()
    }
    return {"object": members}


def _strict_json(value: object, source: str, path: str, depth: int, bounded: bool = True) -> Any:
    """Copy a literal, refusing anything that is not plain JSON.

    TOML has dates and times and floats may be nan/inf: none of them is JSON,
    and TOML has no null, so a null from a stored document is refused too
    (it could not be written back by `get --toml`).
    """
    if depth > MAX_LITERAL_DEPTH:
        raise DefinitionError(
            source, path, f"literal nested deeper than {MAX_LITERAL_DEPTH} levels"
        )
    if isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        if bounded and not MIN_LITERAL_INT <= value <= MAX_LITERAL_INT:
            raise DefinitionError(
                source,
                path,
                f"{value} is out of range: integers are {MIN_LITERAL_INT} to {MAX_LITERAL_INT}"
                " (64-bit, as TOML promises); write a larger number as a string",
            )
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DefinitionError(
                source, path, f"{value} is not valid JSON; use a finite number or a string"
            )
        return value
    if isinstance(value, datetime | date | time):
        raise DefinitionError(
            source,
            path,
            f'TOML dates and times are not JSON; use a string, e.g. "{value.isoformat()}"',
        )
    if isinstance(value, list):
        return [
            _strict_json(item, source, f"{path}[{i}]", depth + 1, bounded)
            for i, item in enumerate(value)
        ]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise DefinitionError(source, path, f"key {key!r} is not a string")
            out[key] = _strict_json(item, source, f"{path}.{toml_key(key)}", depth + 1, bounded)
        return out
    if value is None:
        raise DefinitionError(source, path, "null is not accepted (TOML has no null); omit it")
    raise DefinitionError(source, path, f"{type(value).__name__} is not a JSON value")


def _target_segments(target: object, source: str, path: str, stored: bool) -> tuple[str, ...]:
    if target is None:
        raise DefinitionError(source, path, 'required: a dotted path such as "report.time"')
    if not isinstance(target, str):
        raise DefinitionError(source, path, 'must be a string, a dotted path such as "report.time"')
    parts = tuple(target.split("."))
    bad = [p for p in parts if not whole_match(_SEGMENT, p, stored=stored)]
    if bad:
        raise DefinitionError(
            source,
            path,
            f"{target!r} is not a dotted path of names (letters, digits, _ and -, "
            'not starting with a digit or -), e.g. "report.time"',
        )
    if len(parts) > MAX_TARGET_SEGMENTS:
        raise DefinitionError(source, path, f"{len(parts)} segments; at most {MAX_TARGET_SEGMENTS}")
    return parts


def _check_conflicts(
    parts: tuple[str, ...], earlier: Sequence[tuple[str, ...]], source: str, index: int
) -> None:
    """A target may not repeat or sit inside/above another: one would overwrite the other."""
    for other_index, other in enumerate(earlier):
        shorter = min(len(parts), len(other))
        if parts[:shorter] != other[:shorter]:
            continue
        mine, theirs = ".".join(parts), ".".join(other)
        if parts == other:
            why = "duplicates it"
        elif len(parts) > len(other):
            why = f"{theirs!r} already holds a value, so it cannot also hold {mine!r}"
        else:
            why = f"{mine!r} would replace the object that holds {theirs!r}"
        raise DefinitionError(
            source,
            f"input[{index}].target",
            f"{mine!r} conflicts with input[{other_index}].target {theirs!r}: {why}",
        )


def _reject_unknown(
    table: Mapping[Any, Any], allowed: Sequence[str], source: str, path: str
) -> None:
    for key in table:
        if key not in allowed:
            raise DefinitionError(
                source,
                f"{path}.{toml_key(key)}",
                f"unknown key; valid keys here: {', '.join(allowed)}",
            )


def toml_key(key: object) -> str:
    """Spell a key the way TOML would, so the path can be searched for."""
    text = str(key)
    return text if _BARE_KEY.fullmatch(text) else json.dumps(text, ensure_ascii=False)
