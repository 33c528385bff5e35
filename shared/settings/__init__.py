"""Tether's settings (``TETHER_*``): :class:`Settings` and :func:`load_settings`, read and
validated in one place (:mod:`tether.settings.core`), with their parts: the checks behind them
(``checks``), the env files (``files``), the JSON settings (``json``) and their tables
(``limits``, ``prices``, ``budgets``), the model endpoint (``openai``) and the webhooks
(``webhooks``). The parts are plain data and checks: they import no model, runtime or run code
(those read the settings, never the other way round).

The names below are imported on first use, so a module that needs only a part (a URL check, say)
does not pay for pydantic-settings.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.settings.core import (
        ENV_FILES,
        ENV_PREFIX,
        LOCAL_ENV_FILE,
        Settings,
        load_settings,
        masked,
        show_value,
        variable,
    )

__all__ = [
    "ENV_FILES",
    "ENV_PREFIX",
    "LOCAL_ENV_FILE",
    "Settings",
    "load_settings",
    "masked",
    "show_value",
    "variable",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'tether.settings' has no attribute {name!r}")
    value = getattr(importlib.import_module("tether.settings.core"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
