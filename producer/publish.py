"""Publishing run messages to the broker: the Celery side of both producers (the blocking
producer publishes on its caller's thread; the asyncio one through
:mod:`tether.producer.publish_aio`, a thread of its own)."""

from __future__ import annotations

import contextlib
import time

from celery import Celery
from kombu.exceptions import OperationalError

from tether.errors import BrokerUnavailable
from tether.producer.submission import Message
from tether.runs.celery_config import celery_config
from tether.settings import Settings
from tether.settings.checks import mask_url


def build_celery_app(settings: Settings) -> Celery:
    """A Celery app that publishes run messages as configured by ``settings`` (no I/O)."""
    app = Celery("tether-producer", set_as_current=False)
    app.conf.update(celery_config(settings))
    return app


def publish_runs(
    app: Celery, messages: list[Message], *, chunk: int | None = None, pause_s: float = 0.0
) -> None:
    """Publish run messages (:func:`~tether.producer.submission.run_message`) on one connection.

    ``chunk`` messages at a time (None: all at once), pausing ``pause_s`` between chunks.

    Raises:
        BrokerUnavailable: the broker did not take them, naming ``TETHER_BROKER_URL``.
    """
    if not messages:
        return
    try:
        _publish(app, messages, chunk=chunk, pause_s=pause_s)
    except OperationalError as exc:  # kombu's, after Celery's own publish retries
        raise BrokerUnavailable(
            f"the broker at TETHER_BROKER_URL={mask_url(str(app.conf.broker_url))} did not take "
            f"the run message(s) ({exc}); start it or fix TETHER_BROKER_URL (`tether status` "
            "shows what is up)"
        ) from exc


def _publish(app: Celery, messages: list[Message], *, chunk: int | None, pause_s: float) -> None:
    size = chunk or len(messages)
    with app.producer_or_acquire() as publisher:
        batch = getattr(publisher, "batch", None)
        for start in range(0, len(messages), size):
            if start and pause_s:
                time.sleep(pause_s)
            part = messages[start : start + size]
            # kombu >= 5.7 pipelines the pushes of a batch into one Redis round trip; a batch
            # of one costs more to set up (a pipeline, a connection) than it saves
            with batch() if batch is not None and len(part) > 1 else contextlib.nullcontext():
                for message in part:
                    app.send_task(producer=publisher, **message)
