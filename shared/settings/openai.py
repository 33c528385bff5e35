"""The model endpoint's settings (``TETHER_OPENAI_*``), a part of
:class:`tether.settings.Settings` kept in its own module (see docs/models.md); their checks
(URLs, the Azure trio, model names) run in :class:`~tether.settings.Settings`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, NoDecode


class OpenAISettings(BaseSettings):
    """Where model calls go and how they are retried and checked."""

    openai_base_url: str = Field(
        default="https://api.openai.com/v1", description="OpenAI-compatible endpoint."
    )
    openai_api_key: SecretStr | None = Field(default=None, description="API key (secret).")
    openai_model: str = Field(
        default="gpt-4o-mini", min_length=1, description="Model of the built-in assistant agent."
    )
    openai_api: Literal["chat", "responses"] = Field(
        default="chat", description="chat (Chat Completions, any compatible server) or responses."
    )
    openai_timeout_s: float = Field(
        default=60.0, gt=0, le=3_600, description="Timeout of one model request (per attempt)."
    )
    openai_max_retries: int = Field(
        default=2, ge=0, le=20, description="Retries of a model request (429, 5xx, timeouts)."
    )
    openai_check_models: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Worker start: GET /models must list these (JSON or comma list; [] skips).",
    )
    openai_azure_endpoint: str | None = Field(
        default=None, description="Azure OpenAI resource endpoint; set, model calls go to Azure."
    )
    openai_azure_api_version: str | None = Field(
        default=None, min_length=1, description="Azure OpenAI API version (needed with Azure)."
    )
    openai_azure_deployment: str | None = Field(
        default=None, min_length=1, description="Azure deployment (default: TETHER_OPENAI_MODEL)."
    )
