"""The Celery app of the beat process: ``celery -A tether.producer.schedules.beat beat`` (what
``tether beat`` runs).

Its configuration is read from the TETHER_* settings the first time Celery needs it (importing
this module reads nothing): the broker and Celery options every Tether process shares, and
celery-redbeat's (its lock is ``<namespace>:{~sched}::lock`` in TETHER_REDIS_URL; the schedules
are in their tenants' keyspaces, see :mod:`tether.producer.schedules.store`).
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from tether.keys import RedisKeys
from tether.producer.schedules.book import check_single_node
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
    redis_url = check_single_node(settings)
    return {
        **celery_config(settings),
        "redbeat_redis_url": redis_url,
        # the beat's lock (<ns>:{~sched}::lock); the schedules are in their tenants' keyspaces
        "redbeat_key_prefix": RedisKeys(settings.namespace).beat_prefix(),
        # explicit, or redbeat hands the broker's transport options to redis-py
        "redbeat_redis_options": {},
        "beat_scheduler": "tether.producer.schedules.scheduler:TetherScheduler",
        "beat_max_loop_interval": MAX_LOOP_INTERVAL_S,
        # no results are stored, so beat needs no result clean-up entry of its own
        "result_expires": None,
    }


def build_beat_app(settings: Settings) -> Celery:
    """A Celery app configured for ``settings`` (a beat's, for tests and tools)."""
    beat = Celery("tether-beat", set_as_current=False)
    beat.conf.update(beat_config(settings))
    return beat


def _lazy_config() -> dict[str, Any]:
    return beat_config(load_settings())


app = Celery("tether-beat")
app.add_defaults(_lazy_config)
celery = app
