"""The order ``make test``'s processes take the files in (tests/support/schedule.py): longest
first, each file's tests in their order, and a group's files as one unit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import schedule


def test_the_longest_files_go_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(schedule, "FILE_SECONDS", {"tests/b.py": 50.0, "tests/c.py": 9.0})
    monkeypatch.setattr(schedule, "GROUPS", {})
    units = ["tests/a.py", "tests/b.py", "tests/d.py", "tests/c.py"]
    # not measured: after the measured ones, in the collection's order
    assert schedule.longest_first(units) == ["tests/b.py", "tests/c.py", "tests/a.py", "tests/d.py"]


def test_a_group_is_one_unit_timed_as_its_files_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        schedule, "FILE_SECONDS", {"tests/x.py": 30.0, "tests/y.py": 30.0, "tests/z.py": 50.0}
    )
    monkeypatch.setattr(schedule, "GROUPS", {"tests/x.py": "fleet", "tests/y.py": "fleet"})
    assert schedule.scope_of("tests/x.py::t") == schedule.scope_of("tests/y.py::t") == "fleet"
    units = [schedule.scope_of(n) for n in ("tests/z.py::t", "tests/x.py::t")]
    assert schedule.longest_first(units) == ["fleet", "tests/z.py"]  # 60 s against 50 s


def test_the_grouped_files_exist() -> None:
    root = Path(__file__).resolve().parents[1]
    for path in schedule.GROUPS:
        assert (root / path).is_file(), f"{path} is grouped in tests/support/schedule.py but gone"


@pytest.mark.parametrize(
    ("group", "uses"),
    [("chaos-stack", "tests.support.chaos_fixtures"), ("stream-fleet", "streaming: Streaming")],
)
def test_every_file_of_a_session_stack_is_in_its_group(group: str, uses: str) -> None:
    """A file left out would start the stack again in another process, and leave it idling
    there until the session ends."""
    root = Path(__file__).resolve().parents[1]
    users = {
        str(path.relative_to(root))
        for path in (root / "tests").glob("test_*.py")
        if uses in path.read_text() and path != Path(__file__).resolve()
    }
    grouped = {path for path, name in schedule.GROUPS.items() if name == group}
    assert users and users == grouped


def test_the_durations_table_is_read_from_pytest_output() -> None:
    text = (
        "12.50s call     tests/test_a.py::test_x[1]\n"
        "0.50s setup    tests/test_a.py::test_y\n"
        "3.00s teardown tests/test_b.py::test_z\n"
        "(2 durations < 0.005s hidden.)\n"
    )
    assert schedule.table(text) == {"tests/test_a.py": 13.0, "tests/test_b.py": 3.0}
