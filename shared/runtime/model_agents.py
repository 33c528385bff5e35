"""Built-in agents on the configured model: unlike the demo agents, they call a real model.

- ``assistant``: a plain assistant (no tools) on ``TETHER_OPENAI_MODEL`` at the endpoint the
  ``TETHER_OPENAI_*`` settings configure, through the API ``TETHER_OPENAI_API`` names (chat or
  responses). ``tether run s1 "hi" --agent assistant`` talks to it.

The settings are read when a worker first runs the agent, so registering it costs nothing and
needs no network (``make demo`` stays offline). The configured secrets (the API key, the broker
and Redis passwords) are redacted from everything the agent's sessions store.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.runtime.agent import Agent
from tether.runtime.redaction import settings_redactor
from tether.settings import load_settings

ASSISTANT_PROMPT = "You are a helpful assistant. Answer briefly and accurately."


def assistant_agent() -> Agent:
    """The ``assistant`` agent, on the model the settings configure."""
    # imported here: the SDK takes ~0.4 s to import, which every process that imports the
    # registry (every `tether` command) would otherwise pay without running this agent
    from tether.models.openai import model_from_settings

    settings = load_settings()
    return Agent(
        model_from_settings(settings),
        settings.openai_model,
        system_prompt=ASSISTANT_PROMPT,
        name="assistant",
        redact=settings_redactor(settings),
    )


MODEL_AGENTS: dict[str, Callable[[], Agent]] = {"assistant": assistant_agent}
