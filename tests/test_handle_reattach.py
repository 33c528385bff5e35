"""A handle reattached by run id (``Producer.handle``, ``AsyncProducer.handle``) looks its run
up on its first wait. When that lookup failed (a Redis blip, through a TCP proxy cut in front of
the stack's redis-server) or the wait was cancelled during it, the handle was marked registered
without being registered, and never resolved, although the run had finished: every later wait
timed out while a fresh handle on the same run resolved at once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.support.stack import Stack, unique
from tests.support.tcp_proxy import TcpProxy
from tether.errors import TetherError
from tether.producer import AsyncProducer
from tether.producer.client import Producer

#: How long the proxy stays cut: longer than a lookup takes to fail (the first waits of the
#: tests above fail within 3 s).
BLIP_S = 5.0


@pytest.fixture
def proxy(live_stack: Stack) -> Iterator[TcpProxy]:
    cut = TcpProxy(live_stack.redis.port)
    try:
        yield cut
    finally:
        cut.close()


def _finished(stack: Stack) -> str:
    handle = stack.producer.run_async(unique("reattach"), "hi", agent="echo")
    assert handle.result(timeout=60).output == "echo: hi"
    return handle.run_id


def test_a_reattached_handle_resolves_after_its_first_wait_met_a_redis_blip(
    live_stack: Stack, proxy: TcpProxy
) -> None:
    run_id = _finished(live_stack)
    settings = live_stack.settings.model_copy(update={"redis_url": proxy.url()})
    with Producer(settings) as producer:
        handle = producer.handle(run_id)
        proxy.down()
        with pytest.raises((TetherError, TimeoutError)):
            handle.result(timeout=3)
        proxy.up()
        assert handle.result(timeout=30).output == "echo: hi"


def test_an_async_reattached_handle_resolves_after_a_cancelled_or_failed_first_wait(
    live_stack: Stack, proxy: TcpProxy
) -> None:
    run_id = _finished(live_stack)

    async def main() -> None:
        async with AsyncProducer(live_stack.settings) as producer:
            handle = producer.handle(run_id)
            with pytest.raises(TimeoutError):  # cancelled while it looks the run up
                await asyncio.wait_for(handle.result(), timeout=0.0005)
            assert (await handle.result(timeout=30)).output == "echo: hi"
        settings = live_stack.settings.model_copy(update={"redis_url": proxy.url()})
        async with AsyncProducer(settings) as producer:
            handle = producer.handle(run_id)
            proxy.down()
            with pytest.raises((TetherError, TimeoutError)):
                await handle.result(timeout=3)
            proxy.up()
            assert (await handle.result(timeout=30)).output == "echo: hi"

    asyncio.run(main())


async def _awaited(handle: object) -> object:
    return await handle  # type: ignore[misc]


def test_awaiting_a_reattached_handle_resolves_after_its_lookup_met_a_redis_blip(
    live_stack: Stack, proxy: TcpProxy
) -> None:
    """``await handle`` (and ``add_done_callback``) register once and wait: when that lookup
    failed, nothing looked again, and the await hung although Redis came back. A failed lookup
    is now tried again in the background."""
    run_id = _finished(live_stack)
    settings = live_stack.settings.model_copy(update={"redis_url": proxy.url()})
    with Producer(settings) as producer:
        handle = producer.handle(run_id)
        proxy.down()

        async def main() -> object:
            waiting = asyncio.ensure_future(_awaited(handle))
            await asyncio.sleep(BLIP_S)  # its lookup fails meanwhile
            proxy.up()
            return await asyncio.wait_for(waiting, timeout=30)

        result = asyncio.run(main())
        assert getattr(result, "output", None) == "echo: hi"


def test_an_async_handle_looks_again_after_a_cancelled_wait_whose_lookup_failed(
    live_stack: Stack, proxy: TcpProxy
) -> None:
    """The first wait is cancelled while the run is looked up, and that lookup then fails: the
    next wait raised the old failure instead of looking again."""
    run_id = _finished(live_stack)
    settings = live_stack.settings.model_copy(update={"redis_url": proxy.url()})

    async def main() -> str | None:
        async with AsyncProducer(settings) as producer:
            handle = producer.handle(run_id)
            proxy.down()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(handle.result(), timeout=0.0005)
            await asyncio.sleep(BLIP_S)  # the lookup fails meanwhile, its waiter gone
            proxy.up()
            return (await handle.result(timeout=30)).output

    assert asyncio.run(main()) == "echo: hi"
