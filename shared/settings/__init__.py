"""Tether's settings (``TETHER_*``): :class:`Settings` and :func:`load_settings`, read and
validated in one place (:mod:`tether.settings.core`, read by :mod:`tether.settings.loading`),
with their parts: the checks behind them (``checks``), the env files (``files``), the JSON
settings (``json``) and their tables (``limits``, ``prices``, ``budgets``), the model endpoint
(``openai``) and the webhooks (``webhooks``). The parts are plain data and checks: they import
no model, runtime or run code (those read the settings, never the other way round).

The names below are imported on first use, so a module that needs only a part (a URL check, say)
does not pay for pydantic-settings.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.settings.core import Settings
    from tether.settings.files import ENV_FILES, ENV_PREFIX, LOCAL_ENV_FILE
    from tether.settings.loading import load_settings, masked, show_value, variable

#: Where each public name lives (the imports above, for the type checker, say the same).
_EXPORTS: dict[str, str] = {
    "ENV_FILES": "tether.settings.files",
    "ENV_PREFIX": "tether.settings.files",
    "LOCAL_ENV_FILE": "tether.settings.files",
    "Settings": "tether.settings.core",
    "load_settings": "tether.settings.loading",
    "masked": "tether.settings.loading",
    "show_value": "tether.settings.loading",
    "variable": "tether.settings.loading",
}
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
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tether.settings' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
