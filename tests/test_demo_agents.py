"""The built-in demo agents answer deterministically, without network."""

from __future__ import annotations

import pytest

from tether import AgentRegistry, project_events
from tether.core.items import UserMessage
from tether.errors import UnknownAgent
from tether.models.base import ModelRequest
from tether.models.scripted import ScriptedModel


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


@pytest.mark.parametrize("name", ["approver", "calculator", "echo", "notes", "sleepy"])
def test_demo_agents_keep_no_requests(registry: AgentRegistry, name: str) -> None:
    """A worker's agents live as long as it does: a request kept per run (each holding the
    session's history) would grow its heap, and every full collection would scan it again."""
    agent = registry.get(name)
    assert isinstance(agent.model, ScriptedModel)
    inputs = {"calculator": "1+1", "sleepy": "sleep 0", "approver": "transfer 1"}
    agent.run(inputs.get(name, "remember x"))
    assert len(agent.model.requests) == 0


def test_a_scripted_model_keeps_every_request_unless_told() -> None:
    keep_all = ScriptedModel(default_text="ok")
    keep_two = ScriptedModel(default_text="ok", keep_requests=2)
    for model in (keep_all, keep_two):
        for i in range(5):
            model.complete(ModelRequest(model="m", items=(UserMessage(content=str(i)),)))
    assert [r.items[0].content for r in keep_all.requests] == ["0", "1", "2", "3", "4"]
    assert [r.items[0].content for r in keep_two.requests] == ["3", "4"]
    with pytest.raises(ValueError, match="keep_requests"):
        ScriptedModel(keep_requests=-1)
