"""The Celery application: ``celery -A tether.worker.app worker`` (or ``tether worker``).

The app object exists at import, but its configuration is read lazily from the environment the
first time Celery needs it, so importing this module reads no settings and opens no connection.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from tether.runs.celery_config import celery_config
from tether.settings import load_settings

app = Celery("tether", include=["tether.worker.tasks"])


def _lazy_config() -> dict[str, Any]:
    return celery_config(load_settings())


app.add_defaults(_lazy_config)
celery = app
