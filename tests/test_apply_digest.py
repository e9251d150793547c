"""`apply` skips parsing a file whose path and bytes are those it last took
the schedule from, while the schedule keeps the revision apply gave it; every
other case (moved, edited, deleted, changed outside the folder, another
wfsched version) still parses, validates and compares as before."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import SettableClock, definition_text

import wfsched.api.admin as admin_module
import wfsched.domain.definition as definition_module
from wfsched.api.admin import Admin
from wfsched.domain.definition import parse_definition
from wfsched.errors import ConflictError, DefinitionErrors
from wfsched.store import SQLiteStore


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[Admin]:
    store = SQLiteStore(tmp_path / "store")
    yield Admin(store, clock=SettableClock())
    store.close()


class ParseCounter:
    """Counts the files apply parses (wraps the real parser)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sources: list[str] = []
        real = admin_module.parse_definition_bytes

        def counting(data: bytes, source: str, *, now: int | None = None) -> object:
            self.sources.append(Path(source).name)
            return real(data, source, now=now)

        monkeypatch.setattr(admin_module, "parse_definition_bytes", counting)

    def take(self) -> list[str]:
        taken, self.sources = self.sources, []
        return sorted(taken)


def actions(admin: Admin, folder: Path) -> list[tuple[str, str, int | None]]:
    return [(a.action, a.schedule_id, a.revision) for a in admin.apply([str(folder)])]


def test_an_unchanged_folder_is_not_parsed_again(
    admin: Admin, make_definition: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_definition("a").parent
    make_definition("b")
    parsed = ParseCounter(monkeypatch)
    assert actions(admin, folder) == [("created", "a", 1), ("created", "b", 1)]
    assert parsed.take() == ["a.toml", "b.toml"]
    assert actions(admin, folder) == [("unchanged", "a", 1), ("unchanged", "b", 1)]
    assert parsed.take() == []


def test_new_bytes_or_a_new_path_are_parsed_and_then_remembered(
    admin: Admin,
    make_definition: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = make_definition("a")
    folder = path.parent
    admin.apply([str(folder)])
    parsed = ParseCounter(monkeypatch)
    # A comment changes the bytes, not the definition: parsed, unchanged.
    path.write_text("# owned by ops\n" + path.read_text())
    assert actions(admin, folder) == [("unchanged", "a", 1)]
    assert parsed.take() == ["a.toml"]
    assert actions(admin, folder) == [("unchanged", "a", 1)]
    assert parsed.take() == []
    # The same bytes under another name: parsed once, then remembered there.
    path.rename(folder / "renamed.toml")
    assert actions(admin, folder) == [("unchanged", "a", 1)]
    assert parsed.take() == ["renamed.toml"]
    assert actions(admin, folder) == [("unchanged", "a", 1)]
    assert parsed.take() == []


def test_a_schedule_deleted_since_is_left_alone_or_refused_when_strict(
    admin: Admin, make_definition: Callable[..., Path]
) -> None:
    folder = make_definition("a").parent
    admin.apply([str(folder)])
    admin.delete("a")
    (action,) = admin.apply([str(folder)])
    assert (action.action, action.revision) == ("deleted (left alone)", 1)
    with pytest.raises(ConflictError, match="'a' belongs to a schedule deleted"):
        admin.apply([str(folder)], strict=True)


def test_a_revision_made_outside_the_folder_is_replaced_and_reported(
    admin: Admin, make_definition: Callable[..., Path]
) -> None:
    folder = make_definition("a").parent
    admin.apply([str(folder)])
    admin.update(parse_definition(definition_text("a", cron="15 * * * *"), "edit"), 1)
    (action,) = admin.apply([str(folder)])
    assert (action.action, action.revision, action.outside) == ("updated", 3, (1, 2))


def test_an_edit_between_reading_and_writing_is_seen_inside_the_transaction(
    admin: Admin, make_definition: Callable[..., Path]
) -> None:
    """The folder is compared with the store outside the transaction, so an
    `update` can land in between: the transaction reads the sources again and
    parses the file whose schedule changed, which then replaces the edit."""
    folder = make_definition("a").parent
    admin.apply([str(folder)])
    store = admin.store
    real = store.applied_sources
    calls = []

    def edited_after_the_first_read() -> dict[tuple[str, str], tuple[str, int]]:
        found = real()
        if not calls:
            admin.update(parse_definition(definition_text("a", cron="15 * * * *"), "edit"), 1)
        calls.append(found)
        return found

    store.applied_sources = edited_after_the_first_read  # type: ignore[method-assign]
    (action,) = admin.apply([str(folder)])
    assert len(calls) == 2 and calls[0] and not calls[1]
    assert (action.action, action.revision, action.outside) == ("updated", 3, (1, 2))


def test_a_second_file_with_a_remembered_id_is_a_duplicate(
    admin: Admin, make_definition: Callable[..., Path], write_toml: Callable[..., Path]
) -> None:
    folder = make_definition("a").parent
    admin.apply([str(folder)])
    write_toml("z-copy.toml", definition_text("a", cron="5 * * * *"))
    with pytest.raises(DefinitionErrors) as raised:
        admin.apply([str(folder)])
    first, second = (str(error) for error in raised.value.errors)
    assert re.search(r"a\.toml: id: 'a' is also defined in .*z-copy\.toml$", first)
    assert re.search(r"z-copy\.toml: id: 'a' is also defined in .*/a\.toml$", second)


def test_another_wfsched_version_parses_every_file_again(
    admin: Admin, make_definition: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation may change between versions: a file accepted by an older
    one must meet the rules of the one applying it."""
    folder = make_definition("a").parent
    admin.apply([str(folder)])
    monkeypatch.setattr(definition_module, "__version__", "99.0")
    parsed = ParseCounter(monkeypatch)
    assert actions(admin, folder) == [("unchanged", "a", 1)]
    assert parsed.take() == ["a.toml"]


def test_dry_run_remembers_nothing(
    admin: Admin, make_definition: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = make_definition("a")
    admin.apply([str(path.parent)])
    path.write_text("# touched\n" + path.read_text())
    parsed = ParseCounter(monkeypatch)
    admin.apply([str(path.parent)], dry_run=True)
    admin.apply([str(path.parent)], dry_run=True)
    assert parsed.take() == ["a.toml", "a.toml"]
