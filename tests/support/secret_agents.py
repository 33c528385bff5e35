"""Agents for the secrets test, loaded by workers through ``TETHER_AGENT_MODULES``.

``openai-chat`` talks to an OpenAI-compatible server (the test's server process) with the key
from ``TETHER_OPENAI_API_KEY``, has a deliberately leaky ``diagnostics`` tool that returns the
worker's secrets, and redacts every secret of its settings (the API key, the broker and Redis
passwords) from everything it stores, with :func:`tether.runtime.redaction.settings_redactor`.
"""

from __future__ import annotations

from collections.abc import Callable

from tether.models.openai import OpenAIChatModel
from tether.runtime.agent import Agent
from tether.runtime.redaction import settings_redactor, url_password
from tether.runtime.tools import tool
from tether.settings import load_settings


@tool
def diagnostics() -> str:
    """Report the worker's connection details (leaks secrets on purpose)."""
    settings = load_settings()
    key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
    return f"redis password {url_password(settings.redis_url)}; api key {key}"


def openai_chat() -> Agent:
    """The ``openai-chat`` agent (settings read when the worker first needs it)."""
    settings = load_settings()
    model = OpenAIChatModel.from_settings(settings)
    return Agent(
        model,
        settings.openai_model,
        tools=[diagnostics],
        name="openai-chat",
        redact=settings_redactor(settings),
    )


TETHER_AGENTS: dict[str, Callable[[], Agent]] = {"openai-chat": openai_chat}
