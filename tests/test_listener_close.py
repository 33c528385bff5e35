"""Closing a producer does not wait for its listener's blocking read (every ``tether`` command
closes one on exit), and the listener it leaves behind exits without a word: no warning about
a stream that was closed on purpose. On a real redis-server."""

from __future__ import annotations

import logging
import threading

import pytest

from tests.support.stack import eventually
from tether.producer import Producer
from tether.producer.settlement import BLOCK_MS


def _listeners() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tether-listener" and t.is_alive()]


def test_close_leaves_the_blocking_read_quietly(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = set(_listeners())
    producer = Producer(redis_url=redis_url, broker_url=redis_url)
    producer.listener._start()  # the thread now blocks in XREAD on the producer's feed
    (thread,) = set(_listeners()) - before
    with caplog.at_level(logging.WARNING, logger="tether.producer.listener"):
        producer.close()
        eventually(lambda: not thread.is_alive(), timeout_s=3 * BLOCK_MS / 1000)
    assert [r.getMessage() for r in caplog.records] == []
