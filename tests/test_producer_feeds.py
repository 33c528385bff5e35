"""#15: each producer reads only the completions of its own runs (its cost does not grow with
other producers' traffic), on the real stack (workers, redis-server, S3 over HTTP). The
namespace feed still carries every completion for observers such as the console."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from tests.support.stack import Stack, unique
from tether.producer import Producer


def _feed_run_ids(producer: Producer, feed: str | None) -> set[str]:
    """The runs announced on every shard of ``feed`` (None: the namespace's)."""
    keys = producer.keys
    found = set()
    for shard in range(keys.feed_shards(feed)):
        key = keys.feed_stream(feed, shard)
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], producer.redis.xrange(key))
        found |= {fields[b"run_id"].decode() for _entry_id, fields in entries}
    return found


@pytest.fixture
def two_producers(live_stack: Stack) -> Iterator[tuple[Producer, Producer]]:
    first, second = Producer(live_stack.settings), Producer(live_stack.settings)
    yield first, second
    first.close()
    second.close()


def test_each_producer_feed_holds_only_its_own_runs(
    two_producers: tuple[Producer, Producer],
) -> None:
    first, second = two_producers
    assert first.producer_id != second.producer_id
    mine = [first.run_async(unique("f1"), f"hi {i}", agent="echo") for i in range(3)]
    theirs = [second.run_async(unique("f2"), f"yo {i}", agent="echo") for i in range(3)]
    for handle in mine + theirs:
        assert handle.result(timeout=60).status == "COMPLETED"

    keys = first.keys
    assert _feed_run_ids(first, first.feed) == {h.run_id for h in mine}
    assert _feed_run_ids(first, second.feed) == {h.run_id for h in theirs}
    everyone = _feed_run_ids(first, None)
    assert {h.run_id for h in mine + theirs} <= everyone
    # a producer's feed expires without it (one that crashed is never read again)
    for handle in mine:
        shard = keys.feed_shard_of(first.feed, handle.tenant or "", handle.session_id or "")
        ttl_s = cast(Any, first.redis.ttl(keys.producer_done(first.feed, shard)))
        assert 0 < int(ttl_s) <= first.settings.result_ttl_s


def test_another_producer_reattaches_by_run_id_and_a_closed_producer_drops_its_feed(
    live_stack: Stack,
) -> None:
    with Producer(live_stack.settings) as submitter:
        handle = submitter.run_async(unique("f3"), "hello", agent="echo")
        assert handle.result(timeout=60).output
        k = submitter.keys
        shard = k.feed_shard_of(submitter.feed, handle.tenant or "", handle.session_id or "")
        feed = k.producer_done(submitter.feed, shard)
        assert submitter.redis.exists(feed)
    with Producer(live_stack.settings) as other:
        assert not other.redis.exists(feed)  # dropped on close
        # no completion reaches this producer's feed: it settles from the run record
        assert other.handle(handle.run_id).result(timeout=30).output == handle.result().output


def test_runs_of_another_tenant_are_announced_on_the_feed_the_producer_reads(
    live_stack: Stack,
) -> None:
    """A producer submitting to a tenant other than its own reads that tenant's feed: workers
    announce a run on its own tenant's feed, and a producer listening only on its default
    tenant's feed settled such runs from the 2 s recheck, not the announcement."""
    with Producer(live_stack.settings) as producer:
        assert producer.settings.tenant != "alpha"
        handles = [
            producer.run_async(unique("ft"), f"hi {i}", agent="echo", tenant="alpha")
            for i in range(3)
        ]
        for handle in handles:
            assert handle.result(timeout=60).status == "COMPLETED"
        listener = producer.listener_for("alpha")
        announced = _feed_run_ids(producer, listener.feed)
        assert {h.run_id for h in handles} <= announced
        own = _feed_run_ids(producer, producer.listener.feed)
        assert not own & {h.run_id for h in handles}
