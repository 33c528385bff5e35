"""Tether's OpenAI model clients, on the official ``openai`` SDK (one import for all of them).

- :class:`OpenAIChatModel`: Chat Completions (OpenAI, Azure, any compatible server).
- :class:`OpenAIResponsesModel`: the Responses API.
- :func:`model_from_settings`: the one ``TETHER_OPENAI_API`` chooses, configured by
  ``TETHER_OPENAI_*`` (what the built-in ``assistant`` agent uses).

Their modules: ``openai_client`` (endpoint and SDK clients), ``openai_mapping`` (items and
tools to the SDK's types and back), ``openai_errors`` (SDK failures as ``ModelError``, keys
scrubbed), ``openai_check`` (the worker's start-up check). The guide is docs/models.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.models.openai_base import OpenAIModel
from tether.models.openai_chat import OpenAIChatModel
from tether.models.openai_client import NO_KEY, AzureTarget, OpenAIEndpoint
from tether.models.openai_responses import OpenAIResponsesModel

if TYPE_CHECKING:
    from tether.settings import Settings

__all__ = [
    "NO_KEY",
    "AzureTarget",
    "OpenAIChatModel",
    "OpenAIClient",
    "OpenAIEndpoint",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "model_from_settings",
]

OpenAIClient = OpenAIChatModel | OpenAIResponsesModel
"""Either OpenAI model client (both are :class:`~tether.models.base.StreamingModelClient`)."""


def model_from_settings(settings: Settings | None = None) -> OpenAIClient:
    """The model client ``TETHER_OPENAI_API`` names (``chat`` or ``responses``), for the
    endpoint ``TETHER_OPENAI_*`` configures (settings read now when not given)."""
    if settings is None:
        from tether.settings import load_settings

        settings = load_settings()
    endpoint = OpenAIEndpoint.from_settings(settings)
    if settings.openai_api == "responses":
        return OpenAIResponsesModel.for_endpoint(endpoint)
    return OpenAIChatModel.for_endpoint(endpoint)
