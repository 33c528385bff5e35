"""The built-in demo agents answer deterministically, without network."""

from __future__ import annotations

import pytest

from tether import AgentRegistry, project_events
from tether.errors import UnknownAgent


@pytest.fixture(scope="module")
def registry() -> AgentRegistry:
    return AgentRegistry.default()


def test_echo(registry: AgentRegistry) -> None:
    assert registry.get("echo").run("hi there").output == "echo: hi there"


@pytest.mark.parametrize(
    ("expression", "value"), [("2+3", "5"), ("(2 + 3) * 4", "20"), ("7/2", "3.5")]
)
def test_calculator_uses_its_tool(registry: AgentRegistry, expression: str, value: str) -> None:
    result = registry.get("calculator").run(expression)
    assert result.output == value
    assert [c.name for c in result.tool_calls] == ["calculate"]


def test_calculator_refuses_code(registry: AgentRegistry) -> None:
    result = registry.get("calculator").run("__import__('os').system('true')")
    assert result.tool_results[0].ok is False
    assert "unsupported expression" in result.tool_results[0].output


def test_notes_recall_in_order_from_memory(registry: AgentRegistry) -> None:
    session = registry.get("notes").new_session()
    for fact in ["alpha", "beta", "gamma"]:
        assert session.run(f"remember {fact}").output == f"noted: {fact}"
    assert session.run("recall").output == "alpha\nbeta\ngamma"
    assert project_events(session.events) == session.memory_snapshot()


def test_sleepy_sleeps(registry: AgentRegistry) -> None:
    result = registry.get("sleepy").run("sleep 0.05")
    assert result.output == "slept 0.05"


def test_unknown_agent_lists_known_names(registry: AgentRegistry) -> None:
    names = "approver, assistant, calculator, echo, notes, sleepy"
    with pytest.raises(UnknownAgent, match=f"known agents: {names}"):
        registry.get("nope")
