"""The console's Schedules and Webhooks pages, on a real ``tether console`` process: each shows
its own tenant's schedules and dead webhook deliveries only, and a dead delivery can be
redelivered from the page (with ``--actions``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import redis

from tests.support.console import Console
from tether.core.results import RunStatus
from tether.keys import RedisKeys
from tether.producer.schedules import Schedules
from tether.runs.contract import RunResult
from tether.runs.webhooks.dead import WebhookDeadLetters
from tether.runs.webhooks.delivery import delivery_for
from tether.settings import Settings


def _dead(tenant: str, run_id: str) -> object:
    result = RunResult(
        run_id=run_id,
        request_id=run_id,
        session_id="s-1",
        tenant=tenant,
        status=RunStatus.FAILED,
        error_type="ToolError",
        error_message="boom",
    )
    return delivery_for(result, "https://hooks.example/x")


def test_the_console_shows_its_tenants_schedules_and_dead_webhooks(
    redis_url: str, tmp_path: Path
) -> None:
    schedules = Schedules(Settings(broker_url=redis_url, redis_url=redis_url))
    schedules.add("mine", session_id="s-1", agent="echo", cron="0 7 * * *")
    schedules.add("theirs", session_id="s-1", agent="echo", every_s=60, tenant="other")
    schedules.pause("mine")
    letters = WebhookDeadLetters(redis.Redis.from_url(redis_url), RedisKeys("tether"))
    mine, theirs = _dead("default", "run-mine"), _dead("other", "run-theirs")
    letters.add(mine, "HTTP 500")  # type: ignore[arg-type]
    letters.add(theirs, "HTTP 500")  # type: ignore[arg-type]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(
        {
            "TETHER_BROKER_URL": redis_url,
            "TETHER_REDIS_URL": redis_url,
            "TETHER_STORE_URL": f"file://{tmp_path / 'store'}",
        }
    )
    with Console(env, tmp_path, "--actions") as console:
        page = httpx.get(console.url + "/schedules", timeout=30)
        hooks = httpx.get(console.url + "/webhooks", timeout=30)
        key = re.search(r'name="form_key" value="([^"]+)"', hooks.text)
        assert key is not None, hooks.text
        posted = httpx.post(
            f"{console.url}/webhooks/wh-run-mine-failed/redeliver",
            data={"form_key": key.group(1)},
            timeout=30,
        )
        foreign = httpx.post(
            f"{console.url}/webhooks/wh-run-theirs-failed/redeliver",
            data={"form_key": key.group(1)},
            timeout=30,
        )
    assert page.status_code == 200
    assert 'data-schedule="mine"' in page.text and "0 7 * * *" in page.text
    assert "paused" in page.text and 'data-schedule="theirs"' not in page.text
    assert hooks.status_code == 200
    assert 'data-delivery-id="wh-run-mine-failed"' in hooks.text and "HTTP 500" in hooks.text
    assert "wh-run-theirs-failed" not in hooks.text
    assert posted.status_code == 303 and "queued" in posted.headers["location"]
    assert foreign.status_code == 303 and "no+dead+webhook" in foreign.headers["location"]
    assert [d.id for d in letters.list()] == ["wh-run-theirs-failed"]  # mine was requeued
