"""Signals on real workers (2 Celery worker processes, so 2 sweepers), redis-server and S3 over
HTTP: a signal sent before the wait is taken at once; one sent after it wakes the parked run
with no second submit by the client; three signals are delivered in send order, once each; a
timeout is a tool result; a malformed or oversized payload is refused with nothing written; and
``tether signal`` sends one from a shell."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.agents_fleet import QUEUE, AgentsFleet
from tests.support.stack import Stack, eventually, finished, unique
from tests.test_cli import tether
from tether.core.results import RunStatus
from tether.errors import InputTooLarge, InvalidInput
from tether.keys import RedisKeys
from tether.producer import AsyncProducer, Producer
from tether.runs.contract import RunResult
from tether.runs.waits.base import wake_request_id, wake_run_id
from tether.runs.waits.redis import RedisWaitIndex


@pytest.fixture(scope="module")
def producer(stack: Stack, agents_fleet: AgentsFleet) -> Iterator[Producer]:
    """A producer on the shared fleet (two workers, so two sweepers) serving the signal agents."""
    with agents_fleet.producer(stack, max_input_bytes=2000) as client:
        yield client


def _payloads(result: RunResult) -> list[Any]:
    assert result.output is not None, result
    parts = result.output.removeprefix("got: ").split(" | ")
    return [json.loads(p).get("payload") for p in parts]


def _mailbox_len(stack: Stack, sid: str) -> int:
    keys = RedisKeys(stack.settings.namespace)
    return int(stack.redis.client().xlen(keys.session_waits("default", sid, "signals")))


def test_a_signal_sent_before_the_wait_is_taken_at_once(producer: Producer) -> None:
    sid = unique("sig-before")
    sent = producer.signal(sid, "go", {"build": 42})
    assert sent.woke_run_id is None  # nobody waits yet: kept
    result = producer.run(sid, "listen go 60", agent="listener", wait_s=60)
    assert result.status is RunStatus.COMPLETED, result
    assert _payloads(result) == [{"build": 42}]
    assert sent.signal_id in (result.output or "")


def test_a_signal_sent_after_the_wait_wakes_the_parked_run_once(
    stack: Stack, producer: Producer
) -> None:
    sid = unique("sig-after")
    waiting = producer.run(sid, "listen go 600", agent="listener", wait_s=60)
    assert waiting.status is RunStatus.WAITING
    (pending,) = waiting.pending
    assert pending.wait_for is not None and pending.wait_for.name == "go"
    sent = producer.signal(sid, "go", "ship it")
    assert sent.woke_run_id == wake_run_id("default", sid, pending.call_id)
    woke = finished(producer, sent.woke_run_id)
    assert woke.status is RunStatus.COMPLETED, woke
    assert _payloads(woke) == ["ship it"]
    head = stack.reader().read(sid)
    assert head is not None
    applied = [r.request_id for r in head.applied]
    assert applied.count(wake_request_id("default", sid, pending.call_id)) == 1
    keys = RedisKeys(stack.settings.namespace)
    assert RedisWaitIndex(stack.redis.client(), keys).records("default", sid) == []
    report = stack.reader().verify(sid)
    assert report.ok, report.problems


def test_three_signals_arrive_in_send_order_once_each(stack: Stack, producer: Producer) -> None:
    sid = unique("sig-order")
    waiting = producer.run(sid, "listen go 600 3", agent="signal_waiter", wait_s=60)
    assert waiting.status is RunStatus.WAITING
    for n in (1, 2, 3):
        producer.signal(sid, "go", n)

    def done() -> RunResult | None:
        head = stack.reader().read(sid)
        last = head.applied[-1] if head is not None and head.applied else None
        return last if last is not None and last.status == "COMPLETED" else None  # type: ignore[return-value]

    last = eventually(done, timeout_s=60)
    got = [json.loads(p)["payload"] for p in last.output.removeprefix("got: ").split(" | ")]  # type: ignore[attr-defined]
    assert got == [1, 2, 3]


def test_a_timeout_is_a_tool_result(producer: Producer) -> None:
    sid = unique("sig-timeout")
    waiting = producer.run(sid, "listen go 1", agent="listener", wait_s=60)
    (pending,) = waiting.pending
    woke = finished(producer, wake_run_id("default", sid, pending.call_id))
    assert woke.status is RunStatus.COMPLETED, woke
    assert woke.output == 'got: {"signal": "go", "timed_out": true}'


def test_a_malformed_or_oversized_payload_is_refused_with_nothing_written(
    stack: Stack, producer: Producer
) -> None:
    sid = unique("sig-bad")
    with pytest.raises(InvalidInput, match="not JSON"):
        producer.signal(sid, "go", {"when": object()})
    with pytest.raises(InputTooLarge, match="TETHER_MAX_INPUT_BYTES"):
        producer.signal(sid, "go", "x" * 5000)
    with pytest.raises(InvalidInput, match="signal name"):
        producer.signal(sid, "not a name", 1)
    assert _mailbox_len(stack, sid) == 0


def test_the_asyncio_producer_signals_too(stack: Stack, producer: Producer) -> None:
    import asyncio

    sid = unique("sig-aio")
    waiting = producer.run(sid, "listen go 600", agent="listener", wait_s=60)
    assert waiting.status is RunStatus.WAITING

    async def send() -> str | None:
        async with AsyncProducer(producer.settings) as aio:
            return (await aio.signal(sid, "go", ["from", "asyncio"])).woke_run_id

    woke_run_id = asyncio.run(send())
    assert woke_run_id is not None
    assert _payloads(finished(producer, woke_run_id)) == [["from", "asyncio"]]


def test_tether_signal_sends_from_a_shell(stack: Stack, producer: Producer, tmp_path: Any) -> None:
    sid = unique("sig-cli")
    waiting = producer.run(sid, "listen go 600", agent="listener", wait_s=60)
    assert waiting.status is RunStatus.WAITING
    env = dict(stack.env, TETHER_QUEUE=QUEUE)
    bad = tether(env, "signal", sid, "go", "{not json")
    assert bad.returncode == 2 and "not JSON" in bad.stderr, bad.stderr
    payload = tmp_path / "payload.json"
    payload.write_text('{"approved": true}')
    done = tether(env, "signal", sid, "go", "--payload-file", str(payload), "--json")
    assert done.returncode == 0, done.stderr
    sent = json.loads(done.stdout)
    assert sent["woke_run_id"] is not None
    assert _payloads(finished(producer, sent["woke_run_id"])) == [{"approved": True}]
