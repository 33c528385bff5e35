"""Celery configuration derived from Tether settings (shared by the worker and producers)."""

from __future__ import annotations

from typing import Any

from tether.settings import Settings


def broker_prefix(settings: Settings) -> str:
    """What every key of the Redis broker starts with (kombu's ``global_keyprefix``)."""
    return f"{settings.namespace}-celery:"


def broker_acl_keys(settings: Settings) -> list[str]:
    """The ACL rules a tenant's user needs on a Redis broker: its keys and its channels
    (Celery's queues have no tenants; docs/trust-model.md says what that leaves open)."""
    return [f"~{broker_prefix(settings)}*", "&*"]


def celery_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings that make at-least-once delivery safe for long runs.

    JSON only (a pickle message is refused), late acks with requeue when a pool child dies,
    prefetch 1 so a message never ages in a prefetch buffer, and a visibility timeout longer than
    the longest run (a shorter one would start a second copy of a running run). Crash recovery
    does not wait for that timeout: the sweeper (see :mod:`tether.worker.sweeper`) re-enqueues
    sessions
    whose lease expired within about one lease TTL.
    """
    vt = settings.visibility_timeout_s
    transport = {
        "visibility_timeout": vt,
        "global_keyprefix": broker_prefix(settings),
        "unacked_restore_interval": min(10, vt),
        "unacked_restore_throttle": 1,
    }
    is_redis = settings.effective_broker_url.startswith(("redis://", "rediss://", "unix://"))
    return {
        "broker_url": settings.effective_broker_url,
        "broker_transport_options": transport if is_redis else {},
        "broker_connection_retry_on_startup": True,
        "visibility_timeout": vt,
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "event_serializer": "json",
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "task_acks_on_failure_or_timeout": True,
        "worker_prefetch_multiplier": 1,
        "worker_cancel_long_running_tasks_on_connection_loss": True,
        # task events cost three broker publishes per run and nothing in Tether reads them;
        # Flower turns them on itself (it broadcasts enable_events to the workers)
        "worker_send_task_events": False,
        # producers do not announce each message: it costs a Redis publish per submitted run
        # (about a third of the submit rate); workers still send received/started/succeeded
        "task_send_sent_event": False,
        "task_track_started": True,
        "task_default_queue": settings.queue,
        "task_time_limit": int(settings.max_run_s + 120),
        "task_soft_time_limit": int(settings.max_run_s + 90),
        "worker_hijack_root_logger": False,
    }
