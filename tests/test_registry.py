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
