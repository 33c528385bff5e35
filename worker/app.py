"""The Celery application: ``celery -A tether.worker.app worker`` (or ``tether worker``).

The app object exists at import, but its configuration is read lazily from the environment the
first time Celery needs it, so importing this module reads no settings and opens no connection.
That first read validates every setting (:func:`tether.settings.load_settings`): a bad one ends
the process there, before anything is consumed, with one line on stderr naming the variable
(exit code 2, as ``tether`` uses for configuration errors), never a traceback. A worker then
checks the model endpoint when ``TETHER_OPENAI_CHECK_MODELS`` asks for it, with the same
outcome when it is unreachable, refuses the key or lacks a model, and imports its
``TETHER_AGENT_MODULES``, with the same outcome when one does not import.
"""

from __future__ import annotations

import sys
from typing import Any

from celery import Celery
from celery.signals import celeryd_init

from tether.errors import ConfigurationError
from tether.runs.celery_config import celery_config
from tether.settings import load_settings

#: The exit code of a worker whose settings are invalid (``tether``'s usage/configuration code).
EXIT_SETTINGS = 2

app = Celery(
    "tether",
    include=[
        "tether.worker.tasks",
        "tether.worker.heartbeat",
        "tether.worker.canvas",
        "tether.worker.webhooks",
    ],
)


def _refuse(exc: ConfigurationError) -> SystemExit:
    # celery's CLI would print a traceback and, for some errors, start anyway
    sys.stderr.write(f"error: {exc.error_type}: {' '.join(str(exc).split())}\n")
    sys.stderr.flush()
    return SystemExit(EXIT_SETTINGS)


def _lazy_config() -> dict[str, Any]:
    try:
        return celery_config(load_settings())
    except ConfigurationError as exc:
        raise _refuse(exc) from None


app.add_defaults(_lazy_config)


@celeryd_init.connect
def _check_model_endpoint(**_: Any) -> None:
    """A worker (only: producers import this app too) checks the model endpoint before it
    consumes, when ``TETHER_OPENAI_CHECK_MODELS`` asks for it (see
    :mod:`tether.models.openai_check`). SystemExit passes through Celery's signal dispatch,
    which only catches ``Exception``."""
    try:
        settings = load_settings()
        if settings.openai_check_models:  # else not even the SDK's import (~0.4 s)
            from tether.models.openai_check import check_endpoint

            check_endpoint(settings)
    except ConfigurationError as exc:
        raise _refuse(exc) from None


@celeryd_init.connect
def _check_agent_modules(**_: Any) -> None:
    """A worker imports ``TETHER_AGENT_MODULES`` before it consumes (as Celery imports its task
    modules), so a module that does not import, or has no ``TETHER_AGENTS``, ends it with exit 2
    naming the module; it used to log "ready" and fail every run ``UnknownAgent``."""
    try:
        settings = load_settings()
        if settings.agent_modules:
            from tether.runtime.registry import AgentRegistry

            registry = AgentRegistry.default()
            for module in settings.agent_modules:
                _load_agents(registry, module)
    except ConfigurationError as exc:
        raise _refuse(exc) from None


def _load_agents(registry: Any, module: str) -> None:
    try:
        registry.load_module(module)
    except ConfigurationError:
        raise
    except Exception as exc:  # a module that raises on import fails the same way
        raise ConfigurationError(
            f"agent module {module!r} failed on import ({type(exc).__name__}: {exc}); fix it "
            "or TETHER_AGENT_MODULES"
        ) from exc


celery = app
