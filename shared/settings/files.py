"""The ``TETHER_*`` lines of the settings files: the local stack's ``.tether/env`` (written by
``tether up``), then ``.env`` (yours), the later file winning. Other lines are left to whoever
else reads the file (a ``.env`` often holds ``AWS_*`` or an app's own variables).

The local stack's file is found as ``git`` finds its repository (:func:`project_env_file`): the
working folder's own, else the one of the nearest folder above that is a project's root. Every
process reads it the same way (``Producer()``, ``AsyncProducer()``, :func:`load_settings`, the
``tether`` command): from ``examples/`` of a project with a ``tether up`` stack, a ``Producer()``
used to read only its own folder and fall back to a Redis on 127.0.0.1:6379 (someone else's
database, or none) while ``tether config`` showed the stack.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dotenv import dotenv_values
from pydantic.fields import FieldInfo
from pydantic_settings import PydanticBaseSettingsSource

ENV_PREFIX = "TETHER_"
#: Written by ``tether up``: the settings of the local stack of the project in this folder.
LOCAL_ENV_FILE = Path(".tether") / "env"
#: Read after (so overridden by) ``.env``; the first is looked for up to the project's root.
ENV_FILES = (str(LOCAL_ENV_FILE), ".env")
#: What makes a folder a project's root (where ``tether up`` is run, as ``git`` finds its own).
PROJECT_MARKERS = ("pyproject.toml", ".git")


def project_env_file(start: Path | None = None) -> Path | None:
    """The local stack's settings file a process in ``start`` (default: the working folder)
    reads: ``start/.tether/env``, else the one of the nearest folder above (``start`` included)
    that is a project's root (it holds ``pyproject.toml`` or ``.git``). None when neither
    exists: the search stops at the first project root, so a stack above it (another
    project's) is never read."""
    here = Path.cwd() if start is None else start
    if (here / LOCAL_ENV_FILE).is_file():
        return here / LOCAL_ENV_FILE
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            found = folder / LOCAL_ENV_FILE
            return found if found.is_file() else None
    return None


def env_files() -> list[Path]:
    """The settings files this process reads, in order (a later file wins)."""
    found = project_env_file()
    return ([found] if found is not None else []) + [Path(ENV_FILES[1])]


def export_stack_aws_env() -> None:
    """Export the ``AWS_*`` variables of the local stack's file that the environment lacks:
    boto3 reads only the environment, and a ``tether up --s3`` stack's moto server needs some."""
    path = project_env_file()
    if path is None:
        return
    for key, value in dotenv_values(path).items():
        if key.startswith("AWS_") and value is not None and key not in os.environ:
            os.environ[key] = value


class EnvFiles(PydanticBaseSettingsSource):
    """The ``TETHER_*`` lines of :func:`env_files` (later files win); other lines are left to
    whoever else reads the file (a ``.env`` often holds ``AWS_*`` or an app's own variables)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads the files whole

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for path in env_files():
            if not path.is_file():
                continue
            for key, value in dotenv_values(path).items():
                if value is not None and key.upper().startswith(ENV_PREFIX):
                    # an unknown TETHER_* name stays in: `extra="forbid"` reports it
                    values[key[len(ENV_PREFIX) :].lower()] = value
        return values
