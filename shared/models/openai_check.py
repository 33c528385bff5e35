"""The worker's start-up check of the model endpoint: reachable, key accepted, models served.

With ``TETHER_OPENAI_CHECK_MODELS`` set, a worker asks the configured endpoint for
``GET /models`` before it consumes anything, and refuses to start (one line naming the variable,
exit code 2) when the endpoint cannot be reached, refuses the key, or does not list one of the
models, instead of failing every run later. Unset (the default), nothing is checked and a
worker needs no network at start (``make demo`` stays offline).

Azure OpenAI lists base models, not deployments, so for Azure only the endpoint and the key are
checked.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import openai

from tether.errors import SettingsError
from tether.models.openai_client import OpenAIEndpoint
from tether.models.openai_errors import body_excerpt, shorten

if TYPE_CHECKING:
    from tether.settings import Settings

#: The longest the check waits for the endpoint (one retry), whatever TETHER_OPENAI_TIMEOUT_S.
CHECK_TIMEOUT_S = 10.0
_CHECKED = "TETHER_OPENAI_CHECK_MODELS"
_KEY = "TETHER_OPENAI_API_KEY"
_SHOWN_MODELS = 10


def check_endpoint(settings: Settings) -> None:
    """Check the endpoint and models ``TETHER_OPENAI_CHECK_MODELS`` names (nothing if unset).

    Raises:
        SettingsError: the endpoint is unreachable, refuses the key, answers something else
            than a model list, or does not list a model; the message names the variable.
    """
    names = settings.openai_check_models
    if not names:
        return
    endpoint = OpenAIEndpoint.from_settings(settings)
    # a worker start must not hang for minutes on a dead endpoint
    endpoint = dataclasses.replace(
        endpoint, timeout_s=min(endpoint.timeout_s, CHECK_TIMEOUT_S), max_retries=1
    )
    listed = _list_models(endpoint)
    if endpoint.azure is not None:
        return
    missing = [name for name in names if name not in listed]
    if missing:
        shown = ", ".join(sorted(listed)[:_SHOWN_MODELS]) or "none"
        more = f" and {len(listed) - _SHOWN_MODELS} more" if len(listed) > _SHOWN_MODELS else ""
        raise SettingsError(
            f"{_CHECKED} names {', '.join(map(repr, missing))}, which {endpoint.url} does not "
            f"serve (GET /models lists {shown}{more}): fix the model name (and "
            "TETHER_OPENAI_MODEL), or make the server serve it (e.g. `ollama pull <model>`)",
            variables=(_CHECKED,),
        )


def _list_models(endpoint: OpenAIEndpoint) -> list[str]:
    azure = endpoint.azure is not None
    variable = "TETHER_OPENAI_AZURE_ENDPOINT" if azure else "TETHER_OPENAI_BASE_URL"
    scrub = endpoint.scrubber()
    client = endpoint.sync_client()
    failure: SettingsError
    try:
        return [model.id for model in client.models.list()]
    except openai.APIStatusError as exc:
        status = exc.status_code
        excerpt = body_excerpt(exc.body if exc.body is not None else "", scrub)
        if status in (401, 403):
            failure = SettingsError(
                f"{_KEY} was refused by {endpoint.url} (HTTP {status} on GET /models: "
                f"{excerpt}): set the key this server accepts",
                variables=(_KEY,),
            )
        else:
            failure = SettingsError(
                f"{variable}={endpoint.url!r} answered GET /models with HTTP {status} "
                f"({excerpt}): point it at an OpenAI-compatible API root (ending in /v1), "
                f"or unset {_CHECKED}",
                variables=(variable,),
            )
    except openai.APIConnectionError as exc:
        cause = exc.__cause__ or exc
        failure = SettingsError(
            f"{variable}={endpoint.url!r} cannot be reached ({type(cause).__name__}: "
            f"{shorten(scrub(str(cause)))}): start the server or fix {variable} (checked at "
            f"start because {_CHECKED} is set)",
            variables=(variable,),
        )
    except (openai.OpenAIError, ValueError) as exc:
        failure = SettingsError(
            f"{variable}={endpoint.url!r} did not answer GET /models with a model list "
            f"({type(exc).__name__}: {shorten(scrub(str(exc)))}): point it at an "
            f"OpenAI-compatible API root, or unset {_CHECKED}",
            variables=(variable,),
        )
    finally:
        client.close()
    raise failure
