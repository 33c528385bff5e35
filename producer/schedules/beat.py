"""The Celery app of the beat process: ``celery -A tether.producer.schedules.beat beat`` (what
``tether beat`` runs).

Its configuration is read from the TETHER_* settings the first time Celery needs it (importing
this module reads nothing): the broker and Celery options every Tether process shares, and
celery-redbeat's, with the schedules under ``<namespace>:{~sched}:`` in TETHER_REDIS_URL.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from tether.errors import ConfigurationError
from tether.keys import RedisKeys
from tether.runs.celery_config import celery_config
from tether.settings import Settings, load_settings

#: Longest sleep of the beat loop (s); redbeat's lock outlives five of them, so a second beat
#: takes over about this x 5 after the first one dies.
MAX_LOOP_INTERVAL_S = 5


def beat_config(settings: Settings) -> dict[str, Any]:
    """Celery's options for a beat process (and for editing schedules) on ``settings``.

    Raises:
        ConfigurationError: the state Redis is a Redis Cluster (celery-redbeat needs one node).
    """
    redis_url = settings.effective_redis_url
    if redis_url.startswith("redis+cluster"):
        raise ConfigurationError(
            f"scheduled runs need a single Redis node, and TETHER_REDIS_URL is a cluster "
            f"({redis_url.split('://', 1)[0]}://); run beat against a plain redis:// URL"
        )
    return {
        **celery_config(settings),
        "redbeat_redis_url": redis_url,
        "redbeat_key_prefix": RedisKeys(settings.namespace).schedules(),
        # explicit, or redbeat hands the broker's transport options to redis-py
        "redbeat_redis_options": {},
        "beat_scheduler": "tether.producer.schedules.scheduler:TetherScheduler",
        "beat_max_loop_interval": MAX_LOOP_INTERVAL_S,
        # no results are stored, so beat needs no result clean-up entry of its own
        "result_expires": None,
    }


def build_beat_app(settings: Settings) -> Celery:
    """A Celery app configured for ``settings`` (what :class:`Schedules` edits entries with)."""
    beat = Celery("tether-beat", set_as_current=False)
    beat.conf.update(beat_config(settings))
    return beat


def _lazy_config() -> dict[str, Any]:
    return beat_config(load_settings())


app = Celery("tether-beat")
app.add_defaults(_lazy_config)
celery = app
