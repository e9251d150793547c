"""Input bindings: shapes, strict JSON, target conflicts, bounds, resolution."""

from __future__ import annotations

import copy
import json
import math
import tomllib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wfsched.domain.inputs import (
    MAX_BINDINGS,
    MAX_DEPTH,
    MAX_INPUT_BYTES,
    MAX_NODES,
    input_json_bytes,
    resolve_input,
    sample_input,
    validate_bindings,
)
from wfsched.errors import DefinitionError

SOURCE = "report.toml"
OCCURRENCE = {
    "schedule_id": "report",
    "occurrence_id": "report@20270104T080000Z",
    "scheduled_at": "2027-01-04T08:00:00Z",
}


def reject(raw: object) -> DefinitionError:
    with pytest.raises(DefinitionError) as info:
        validate_bindings(raw, SOURCE)
    return info.value


def nested(kind: str, levels: int) -> dict[str, Any]:
    """An expression with `levels` nested array/object levels around a literal."""
    expression: dict[str, Any] = {"literal": 1}
    for _ in range(levels):
        expression = {"array": [expression]} if kind == "array" else {"object": {"k": expression}}
    return expression


def toml_input(text: str) -> object:
    return tomllib.loads(text)["input"]


# ----------------------------------------------------------------- rejections


@pytest.mark.parametrize(
    ("raw", "path", "fragment"),
    [
        ("x", "input", "array of tables"),
        ({"target": "a"}, "input", "array of tables"),
        (["x"], "input[0]", "must be a table"),
        ([{"literal": 1}], "input[0].target", "required"),
        ([{"target": 5, "literal": 1}], "input[0].target", "must be a string"),
        ([{"target": "", "literal": 1}], "input[0].target", "dotted path"),
        ([{"target": "a..b", "literal": 1}], "input[0].target", "dotted path"),
        ([{"target": "1a", "literal": 1}], "input[0].target", "dotted path"),
        ([{"target": "a b", "literal": 1}], "input[0].target", "dotted path"),
        ([{"target": "a.", "literal": 1}], "input[0].target", "dotted path"),
        ([{"target": ".".join(["a"] * 33), "literal": 1}], "input[0].target", "at most 32"),
        ([{"target": "a", "litteral": 1}], "input[0].litteral", "unknown key"),
        ([{"target": "a"}], "input[0]", "exactly one of literal, occurrence, array, object"),
        ([{"target": "a", "literal": 1, "occurrence": "schedule_id"}], "input[0]", "exactly one"),
        ([{"target": "a", "occurrence": "now"}], "input[0].occurrence", "schedule_id"),
        ([{"target": "a", "occurrence": 1}], "input[0].occurrence", "scheduled_at"),
        ([{"target": "a", "array": {"literal": 1}}], "input[0].array", "array of expression"),
        ([{"target": "a", "array": [1]}], "input[0].array[0]", "expression table"),
        ([{"target": "a", "array": [{}]}], "input[0].array[0]", "exactly one"),
        ([{"target": "a", "array": [{"value": 1}]}], "input[0].array[0].value", "unknown key"),
        ([{"target": "a", "object": [1]}], "input[0].object", "table of expression"),
        ([{"target": "a", "object": {"k": 1}}], "input[0].object.k", "expression table"),
        (
            [{"target": "a", "object": {"my key": {"occurrence": "x"}}}],
            'input[0].object."my key".occurrence',
            "is not one of",
        ),
        ([{"target": "a", "literal": math.nan}], "input[0].literal", "not valid JSON"),
        ([{"target": "a", "literal": [1, math.inf]}], "input[0].literal[1]", "not valid JSON"),
        ([{"target": "a", "literal": {"x": -math.inf}}], "input[0].literal.x", "finite"),
        ([{"target": "a", "literal": None}], "input[0].literal", "TOML has no null"),
        ([{"target": "a", "literal": [None]}], "input[0].literal[0]", "TOML has no null"),
        ([{"target": "a", "literal": {1: 2}}], "input[0].literal", "not a string"),
        ([{"target": "a", "literal": b"x"}], "input[0].literal", "not a JSON value"),
        (
            [{"target": "a", "literal": 1}, {"target": "a", "literal": 2}],
            "input[1].target",
            "'a' conflicts with input[0].target 'a': duplicates it",
        ),
        (
            [{"target": "a", "literal": 1}, {"target": "a.b", "literal": 2}],
            "input[1].target",
            "'a.b' conflicts with input[0].target 'a'",
        ),
        (
            [{"target": "a.b.c", "literal": 1}, {"target": "a", "literal": 2}],
            "input[1].target",
            "'a' conflicts with input[0].target 'a.b.c'",
        ),
    ],
)
def test_binding_rejections_name_file_and_path(raw: object, path: str, fragment: str) -> None:
    error = reject(raw)
    assert error.path == path
    assert str(error).startswith(f"{SOURCE}: {path}: ")
    assert fragment in str(error)


@pytest.mark.parametrize(
    ("toml", "path"),
    [
        ("[[input]]\ntarget = 'a'\nliteral = 2026-12-24T18:00:00+01:00", "input[0].literal"),
        ("[[input]]\ntarget = 'a'\nliteral = 2026-12-24T18:00:00", "input[0].literal"),
        ("[[input]]\ntarget = 'a'\nliteral = 2026-12-24", "input[0].literal"),
        ("[[input]]\ntarget = 'a'\nliteral = 18:00:00", "input[0].literal"),
        ("[[input]]\ntarget = 'a'\nliteral = [1, 2026-12-24]", "input[0].literal[1]"),
        ("[[input]]\ntarget = 'a'\nliteral = { when = 18:00:00 }", "input[0].literal.when"),
        (
            "[[input]]\ntarget = 'a'\narray = [{ literal = 2026-12-24 }]",
            "input[0].array[0].literal",
        ),
    ],
)
def test_toml_dates_are_not_json(toml: str, path: str) -> None:
    error = reject(toml_input(toml))
    assert str(error).startswith(f"{SOURCE}: {path}: TOML dates and times are not JSON")
    assert "use a string" in str(error)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "+nan"])
def test_toml_nan_and_infinity_literals_are_rejected(value: str) -> None:
    error = reject(toml_input(f"[[input]]\ntarget = 'a'\nliteral = {value}"))
    assert str(error).startswith(f"{SOURCE}: input[0].literal: ")


def test_literal_nesting_is_bounded() -> None:
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    error = reject([{"target": "a", "literal": deep}])
    assert "literal nested deeper than" in str(error)


# --------------------------------------------------------------------- bounds


def test_64_bindings_accepted_65_refused() -> None:
    raw = [{"target": f"t{i}", "literal": i} for i in range(MAX_BINDINGS)]
    assert len(validate_bindings(raw, SOURCE)) == 64
    error = reject([*raw, {"target": "extra", "literal": 0}])
    assert str(error) == f"{SOURCE}: input: 65 bindings; at most 64 are allowed"


@pytest.mark.parametrize("kind", ["array", "object"])
def test_depth_8_accepted_9_refused(kind: str) -> None:
    (binding,) = validate_bindings([{"target": "a", **nested(kind, MAX_DEPTH)}], SOURCE)
    resolved = resolve_input([binding], **OCCURRENCE)["a"]
    for _ in range(MAX_DEPTH):
        resolved = resolved[0] if kind == "array" else resolved["k"]
    assert resolved == 1
    error = reject([{"target": "a", **nested(kind, MAX_DEPTH + 1)}])
    assert str(error).startswith(f"{SOURCE}: input[0].{kind}")
    assert "nesting deeper than 8 levels" in str(error)


def test_depth_counts_mixed_array_and_object_levels() -> None:
    expression: dict[str, Any] = {"occurrence": "scheduled_at"}
    for level in range(MAX_DEPTH + 1):
        expression = {"array": [expression]} if level % 2 else {"object": {"k": expression}}
    error = reject([{"target": "a", **expression}])
    assert "nesting deeper than 8" in str(error)


def test_1000_nodes_accepted_1001_refused() -> None:
    # Every expression table counts one, the binding's own table included.
    items = [{"literal": i} for i in range(MAX_NODES - 2)]
    raw = [
        {"target": "a", "array": items},  # 1 + 998 nodes
        {"target": "b", "occurrence": "schedule_id"},  # 1 node
    ]
    assert len(validate_bindings(raw, SOURCE)) == 2
    raw[1] = {"target": "b", "object": {"x": {"literal": 0}}}  # 2 nodes
    error = reject(raw)
    assert str(error).startswith(f"{SOURCE}: input: 1,001 expression nodes in total; at most 1,000")


def test_64_kib_measured_on_the_sample_resolution() -> None:
    # {"a":"<s>"} is 8 bytes of JSON around the string.
    exact = validate_bindings([{"target": "a", "literal": "x" * (MAX_INPUT_BYTES - 8)}], SOURCE)
    assert input_json_bytes(sample_input(exact, "report")) == MAX_INPUT_BYTES
    over = validate_bindings([{"target": "a", "literal": "x" * (MAX_INPUT_BYTES - 7)}], SOURCE)
    with pytest.raises(DefinitionError) as info:
        sample_input(over, "report", source=SOURCE)
    assert str(info.value) == (
        f"{SOURCE}: input: resolved input is 65,537 bytes of JSON; at most 65,536 (64 KiB)"
    )


def test_64_kib_counts_occurrence_values_and_utf8_bytes() -> None:
    # 2-byte characters: half as many fit.
    near = MAX_INPUT_BYTES // 2 - 100
    raw = [
        {"target": "a", "literal": "é" * near},
        {"target": "b", "array": [{"occurrence": "occurrence_id"}] * 10},
    ]
    bindings = validate_bindings(raw, SOURCE)
    with pytest.raises(DefinitionError, match="resolved input is"):
        sample_input(bindings, "report")


def test_resolve_input_refuses_an_oversized_document() -> None:
    bindings = validate_bindings([{"target": "a", "occurrence": "schedule_id"}], SOURCE)
    huge_id = "s" * MAX_INPUT_BYTES
    with pytest.raises(DefinitionError) as info:
        resolve_input(bindings, **{**OCCURRENCE, "schedule_id": huge_id})
    assert str(info.value).startswith(f"schedule {huge_id}: input: resolved input is")


# ----------------------------------------------------------------- resolution


def test_resolve_all_four_kinds_nested() -> None:
    raw = toml_input(
        """
        [[input]]
        target = "team"
        literal = "engineering"
        [[input]]
        target = "report.time"
        occurrence = "scheduled_at"
        [[input]]
        target = "report.meta.id"
        occurrence = "occurrence_id"
        [[input]]
        target = "list"
        array = [{ literal = 1 }, { occurrence = "schedule_id" }, { array = [] }, { object = {} }]
        [[input]]
        target = "obj"
        [input.object.x]
        literal = { deep = [1.5, true, "s"] }
        [input.object.y]
        array = [{ object = { z = { occurrence = "scheduled_at" } } }]
        """
    )
    bindings = validate_bindings(raw, SOURCE)
    assert resolve_input(bindings, **OCCURRENCE) == {
        "team": "engineering",
        "report": {
            "time": "2027-01-04T08:00:00Z",
            "meta": {"id": "report@20270104T080000Z"},
        },
        "list": [1, "report", [], {}],
        "obj": {
            "x": {"deep": [1.5, True, "s"]},
            "y": [{"z": "2027-01-04T08:00:00Z"}],
        },
    }


def test_no_bindings_resolve_to_an_empty_object() -> None:
    assert resolve_input((), **OCCURRENCE) == {}
    assert validate_bindings([], SOURCE) == ()


def test_manual_run_occurrence_id_resolves_to_null() -> None:
    bindings = validate_bindings([{"target": "o", "occurrence": "occurrence_id"}], SOURCE)
    resolved = resolve_input(
        bindings, schedule_id="report", occurrence_id=None, scheduled_at="2027-01-04T08:00:00Z"
    )
    assert resolved == {"o": None}


def test_sample_input_uses_realistic_occurrence_values() -> None:
    raw = [
        {"target": "s", "occurrence": "schedule_id"},
        {"target": "o", "occurrence": "occurrence_id"},
        {"target": "t", "occurrence": "scheduled_at"},
    ]
    sample = sample_input(validate_bindings(raw, SOURCE), "report")
    assert sample == {
        "s": "report",
        "o": "report@20270101T000000Z",
        "t": "2027-01-01T00:00:00Z",
    }


def test_resolved_literals_are_copies() -> None:
    bindings = validate_bindings([{"target": "a", "literal": {"list": [1]}}], SOURCE)
    resolve_input(bindings, **OCCURRENCE)["a"]["list"].append(2)
    assert resolve_input(bindings, **OCCURRENCE) == {"a": {"list": [1]}}


def test_bindings_are_stored_as_written_and_validation_copies() -> None:
    raw = [{"target": "a.b", "object": {"k": {"literal": [1]}}}]
    before = copy.deepcopy(raw)
    (binding,) = validate_bindings(raw, SOURCE)
    assert binding.target == "a.b"
    assert binding.expression == {"object": {"k": {"literal": [1]}}}
    raw[0]["object"]["k"]["literal"].append(2)  # type: ignore[index]
    assert binding.expression == {k: v for k, v in before[0].items() if k != "target"}


def test_sibling_targets_do_not_conflict() -> None:
    raw = [
        {"target": "a.b", "literal": 1},
        {"target": "a.c", "literal": 2},
        {"target": "ab", "literal": 3},
    ]
    bindings = validate_bindings(raw, SOURCE)
    assert resolve_input(bindings, **OCCURRENCE) == {"a": {"b": 1, "c": 2}, "ab": 3}


# ------------------------------------------------------------------ property

json_scalars = (
    # No None: TOML has no null, so literals never hold one.
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
expressions = st.recursive(
    st.builds(lambda v: {"literal": v}, json_values)
    | st.sampled_from(["schedule_id", "occurrence_id", "scheduled_at"]).map(
        lambda f: {"occurrence": f}
    ),
    lambda children: (
        st.lists(children, max_size=4).map(lambda items: {"array": items})
        | st.dictionaries(st.text(max_size=8), children, max_size=4).map(
            lambda members: {"object": members}
        )
    ),
    max_leaves=20,
)


@settings(max_examples=100, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.booleans(), expressions), max_size=6),
    occurrence_id=st.none() | st.just("report@20270104T080000Z"),
)
def test_resolution_is_always_strict_json(
    pairs: list[tuple[bool, dict[str, Any]]], occurrence_id: str | None
) -> None:
    # Distinct leaves, some under a shared parent object: never conflicting.
    raw = [
        {"target": f"group.b{i}" if grouped else f"b{i}", **expression}
        for i, (grouped, expression) in enumerate(pairs)
    ]
    bindings = validate_bindings(raw, SOURCE)
    document = resolve_input(
        bindings,
        schedule_id="report",
        occurrence_id=occurrence_id,
        scheduled_at="2027-01-04T08:00:00Z",
    )
    text = json.dumps(document, allow_nan=False)
    assert json.loads(text) == document
    assert isinstance(document, dict)
    assert input_json_bytes(document) <= MAX_INPUT_BYTES
