"""Golden files of the fleet's persisted formats, re-read by today's code: a schedule entry as
celery-redbeat stores it (schedule format v1) and a dead webhook delivery (delivery format v1)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import redis

from tether.producer.schedules import Schedules
from tether.producer.schedules.store import encode_definition, encode_meta
from tether.runs.webhooks.delivery import Delivery
from tether.settings import Settings

FIXTURES = Path(__file__).parent / "fixtures"


def test_a_v1_schedule_entry_still_loads_with_its_last_tick(redis_url: str) -> None:
    """Stored in its tenant's keyspace (where schedules live since they belong to tenants), a
    v1 entry reads as it did, and today's code writes the same definition."""
    stored = json.loads((FIXTURES / "schedule_entry_v1.json").read_text())
    redis.Redis.from_url(redis_url).hset("tether:{default/~sched}:digest", mapping=stored)
    redis.Redis.from_url(redis_url).zadd("tether:{default/~sched}", {"digest": 0})
    schedules = Schedules(Settings(broker_url=redis_url, redis_url=redis_url))
    view = schedules.get("digest")
    assert (view.schedule.cron, view.schedule.session_id, view.schedule.missed) == (
        "0 7 * * *",
        "s-news",
        "catch_up",
    )
    assert view.last_tick == datetime(2026, 12, 5, 7, 0, tzinfo=UTC)
    assert view.next_tick == datetime(2026, 12, 6, 7, 0, tzinfo=UTC)
    assert view.schedule.request_id(view.last_tick) == "sched:digest:1796454000"
    assert encode_definition(view.schedule, enabled=True) == stored["definition"]
    assert encode_meta(view.last_tick, 3) == stored["meta"]


def test_a_v1_dead_delivery_still_loads() -> None:
    delivery = Delivery.model_validate_json((FIXTURES / "webhook_delivery_v1.json").read_text())
    assert delivery.attempts == 6 and delivery.last_error == "HTTP 500"
    assert json.loads(delivery.body)["pending"][0]["tool"] == "transfer"
