"""#47 W4 on a real worker with one pool slot: a webhook receiver holds the slot no longer than
``TETHER_WEBHOOK_TIMEOUT_S`` whatever it does, and its answer's size does not reach the
worker's memory.

The red-team's receiver trickling a byte a second held a slot 39 s (another tenant's run waited
38 s behind it), and a 400 MB answer took a worker from 49 MB to 851 MB. The same attempts
in-process: ``tests/test_webhooks_delivery.py``.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.stack import eventually, unique
from tests.support.webhook_receiver import HUGE, SILENT, TRICKLE, Receiver, webhook_receiver
from tether.core.results import RunStatus
from tether.dev.workers import WorkerFleet
from tether.producer.client import Producer
from tether.producer.ops.webhooks_admin import dead_letters
from tether.settings import Settings, load_settings

TIMEOUT_S = 2
#: Far above the deadline, far below what the receivers would hold a slot without it (60 s).
HELD_BOUND_S = 20.0
#: How much a pool process's peak memory may grow while it takes a 400 MB answer.
MEMORY_BOUND_BYTES = 50 << 20


@dataclass
class Bounds:
    env: dict[str, str]
    fleet: WorkerFleet
    receiver: Receiver

    def producer(self, tenant: str) -> Producer:
        names = {k[7:].lower(): v for k, v in self.env.items() if k.startswith("TETHER_")}
        settings: Settings = load_settings(**{**names, "tenant": tenant})
        return Producer(settings)

    def log(self) -> str:
        return self.fleet.workers[0].log_text()


@pytest.fixture(scope="module")
def bounds(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bounds]:
    """One worker, one pool slot, one attempt per delivery (a failure is dead at once)."""
    log_dir = tmp_path_factory.mktemp("hookbounds")
    suffix = uuid.uuid4().hex[:8]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env.update(
        TETHER_BROKER_URL=redis_server.url,
        TETHER_REDIS_URL=redis_server.url,
        TETHER_STORE_URL=f"file://{log_dir / 'store'}",
        TETHER_NAMESPACE=f"hb-{suffix}",
        TETHER_QUEUE=f"hookbounds-{suffix}",
        TETHER_WEBHOOK_SECRETS=json.dumps({"*": "whsec-bounds-" + suffix}),
        TETHER_WEBHOOK_ALLOW_PRIVATE="true",
        TETHER_WEBHOOK_MAX_ATTEMPTS="1",
        TETHER_WEBHOOK_TIMEOUT_S=str(TIMEOUT_S),
        PYTHONUNBUFFERED="1",
    )
    fleet = WorkerFleet(env, log_dir, count=1, concurrency=1, queue=env["TETHER_QUEUE"])
    with webhook_receiver() as receiver, fleet:
        yield Bounds(env, fleet, receiver)


def _peak_bytes(pid: int) -> int:
    """The process's peak resident memory (VmHWM): a peak freed since still shows."""
    status = Path(f"/proc/{pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def _pool(bounds: Bounds) -> list[int]:
    pid = bounds.fleet.workers[0].pid
    assert pid is not None
    return [child.pid for child in psutil.Process(pid).children(recursive=True)]


def test_a_trickling_receiver_holds_the_only_slot_no_longer_than_the_deadline(
    bounds: Bounds,
) -> None:
    bounds.receiver.default["/slow"] = TRICKLE
    with bounds.producer("slow-co") as slow:
        slow.run(
            unique("slow"), "hi", agent="echo", webhook=f"{bounds.receiver.url}/slow", wait_s=60
        )
        held = eventually(lambda: bounds.receiver.on("/slow"), 60)[0]  # the slot is taken
    with bounds.producer("other-co") as other:
        started = time.monotonic()
        result = other.run(unique("other"), "hello", agent="echo", wait_s=HELD_BOUND_S * 2)
        waited_s = time.monotonic() - started
    assert result.status is RunStatus.COMPLETED
    assert waited_s < HELD_BOUND_S  # behind one attempt of TIMEOUT_S, not the 60 s trickle
    assert held.ended.wait(HELD_BOUND_S) and held.held_s is not None
    assert held.held_s < HELD_BOUND_S


def test_a_huge_answer_does_not_reach_the_workers_memory(bounds: Bounds) -> None:
    bounds.receiver.default["/big"] = HUGE
    before = {pid: _peak_bytes(pid) for pid in _pool(bounds)}
    with bounds.producer("big-co") as producer:
        done = producer.run(
            unique("big"), "hi", agent="echo", webhook=f"{bounds.receiver.url}/big", wait_s=60
        )
    delivery_id = f"wh-{done.run_id}-completed"
    eventually(lambda: f"webhook {delivery_id} delivered" in bounds.log(), 60)
    answered = bounds.receiver.on("/big")[0]
    assert answered.ended.wait(30)
    grown = {pid: _peak_bytes(pid) - peak for pid, peak in before.items()}
    assert max(grown.values()) < MEMORY_BOUND_BYTES, grown
    assert answered.sent_bytes < bounds.receiver.huge_bytes  # the sender hung up early


def test_a_receiver_that_never_answers_is_dead_after_the_deadline(bounds: Bounds) -> None:
    bounds.receiver.default["/mute"] = SILENT
    with bounds.producer("mute-co") as producer:
        done = producer.run(
            unique("mute"), "hi", agent="echo", webhook=f"{bounds.receiver.url}/mute", wait_s=60
        )
        delivery_id = f"wh-{done.run_id}-completed"
        letter = eventually(lambda: dead_letters(producer).get(delivery_id), 60)
    assert letter.last_error is not None and f"timed out after {TIMEOUT_S} s" in letter.last_error
    muted = bounds.receiver.on("/mute")[0]
    assert muted.ended.wait(HELD_BOUND_S) and muted.held_s is not None
    assert muted.held_s < HELD_BOUND_S
