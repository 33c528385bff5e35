"""The ``TETHER_*`` lines of the settings files: ``.tether/env`` (``tether up``'s local stack),
then ``.env`` (yours), the later file winning. Other lines are left to whoever else reads the
file (a ``.env`` often holds ``AWS_*`` or an app's own variables)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from pydantic.fields import FieldInfo
from pydantic_settings import PydanticBaseSettingsSource

ENV_PREFIX = "TETHER_"
#: Written by ``tether up``: the settings of the local stack of the project in this folder.
LOCAL_ENV_FILE = Path(".tether") / "env"
#: Read after (so overridden by) ``.env``.
ENV_FILES = (str(LOCAL_ENV_FILE), ".env")


class EnvFiles(PydanticBaseSettingsSource):
    """The ``TETHER_*`` lines of :data:`ENV_FILES` (later files win); other lines are left to
    whoever else reads the file (a ``.env`` often holds ``AWS_*`` or an app's own variables)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads the files whole

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name in ENV_FILES:
            path = Path(name)
            if not path.is_file():
                continue
            for key, value in dotenv_values(path).items():
                if value is not None and key.upper().startswith(ENV_PREFIX):
                    # an unknown TETHER_* name stays in: `extra="forbid"` reports it
                    values[key[len(ENV_PREFIX) :].lower()] = value
        return values
