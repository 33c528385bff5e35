"""Agents are found by name: built-ins, configured modules, entry points."""

from __future__ import annotations

import pytest

from tether.errors import ConfigurationError, UnknownAgent
from tether.runtime.registry import AgentRegistry
from tether.settings import load_settings


def test_module_agents_are_registered_and_built_once() -> None:
    registry = AgentRegistry.default(["tests.support.custom_agents"])
    assert "shout" in registry.names() and "echo" in registry.names()
    assert registry.get("shout").run("hey").output == "HEY"
    assert registry.get("shout") is registry.get("shout")


def test_settings_name_the_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "TETHER_AGENT_MODULES", "tests.support.custom_agents, shared.demo_agents_missing"
    )
    settings = load_settings()
    assert settings.agent_modules == ["tests.support.custom_agents", "shared.demo_agents_missing"]
    with pytest.raises(ConfigurationError, match="demo_agents_missing"):
        AgentRegistry.default(settings.agent_modules)


def test_module_without_agents_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="TETHER_AGENTS"):
        AgentRegistry.default(["tether.ids"])


def test_unknown_name_is_a_usage_error() -> None:
    with pytest.raises(UnknownAgent) as info:
        AgentRegistry.default(entry_points_enabled=False).get("x" * 500)
    assert len(str(info.value)) < 400


def test_the_assistant_is_built_in_on_the_configured_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.models.openai import OpenAIResponsesModel
    from tether.runtime.model_agents import ASSISTANT_PROMPT

    monkeypatch.setenv("TETHER_OPENAI_BASE_URL", "http://127.0.0.1:1/v1")  # never called here
    monkeypatch.setenv("TETHER_OPENAI_API", "responses")
    monkeypatch.setenv("TETHER_OPENAI_MODEL", "llama3.2")
    monkeypatch.setenv("TETHER_OPENAI_API_KEY", "sk-assistant-key-0123")
    agent = AgentRegistry.default().get("assistant")
    assert isinstance(agent.model, OpenAIResponsesModel)
    assert (agent.model_name, agent.system_prompt) == ("llama3.2", ASSISTANT_PROMPT)
    assert agent.model.endpoint.url == "http://127.0.0.1:1/v1"
    assert agent.redact is not None and agent.redact("key sk-assistant-key-0123") == "key ***"
