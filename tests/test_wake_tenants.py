"""Waking a parked call is tenant-scoped at the server: with one Redis ACL user per tenant (the
recipe of docs/deployment.md), tenant acme's credential wakes its own session's parked call
(registered in the session's queue, with the fleet's own wake id, on the queue of the workers
that serve its agent), and is refused tenant bob's, naming the tenant, with nothing written
(sync and asyncio producers)."""

from __future__ import annotations

import asyncio

import pytest

from tests.test_tenant_acl import NS, World, world  # noqa: F401 (the fixture)
from tether.core.waits import WaitFor
from tether.errors import PermissionDenied
from tether.keys import RedisKeys
from tether.producer import AsyncProducer
from tether.runs.waits.base import WaitRecord, wake_run_id
from tether.runs.waits.redis import RedisWaitIndex

FAR_MS = 4_000_000_000_000


def _park(w: World, tenant: str, session_id: str) -> None:
    """A call parked on a timer, as a worker records it (admin credential)."""
    record = WaitRecord(
        tenant=tenant,
        session_id=session_id,
        call_id="c1",
        run_id="run-parked",
        agent="sleeper",
        queue="sleepq",
        wait_for=WaitFor(kind="timer", due_at_ms=FAR_MS),
    )
    RedisWaitIndex(w.admin, RedisKeys(NS)).park([record])


def _queued(w: World, tenant: str, session_id: str) -> list[bytes]:
    return list(w.admin.lrange(RedisKeys(NS).pending(tenant, session_id), 0, -1))


def test_a_tenant_wakes_its_own_parked_call_and_never_another_tenants(world: World) -> None:  # noqa: F811
    _park(world, "acme", "s-1")
    _park(world, "bob", "s-1")
    acme = world.producer("acme")
    try:
        with pytest.raises(PermissionDenied, match="'bob'") as refused:
            acme.wake("s-1", tenant="bob")
        assert "TETHER_REDIS_URL" in str(refused.value)  # says what to use instead
        assert _queued(world, "bob", "s-1") == []  # nothing written
        (woke,) = acme.wake("s-1")
    finally:
        acme.close()
    assert woke.run_id == wake_run_id("acme", "s-1", "c1") and not woke.duplicate
    assert _queued(world, "acme", "s-1") == [woke.run_id.encode()]  # registered in its queue
    assert world.admin.llen(f"{NS}-celery:sleepq") == 1  # the queue of the workers serving it


def test_the_asyncio_producer_is_refused_another_tenants_session_too(world: World) -> None:  # noqa: F811
    _park(world, "bob", "s-2")
    _park(world, "acme", "s-2")

    async def wake() -> None:
        async with AsyncProducer(world.settings("acme")) as acme:
            with pytest.raises(PermissionDenied, match="'bob'"):
                await acme.wake("s-2", tenant="bob")
            (woke,) = await acme.wake("s-2", "c1")
            assert woke.run_id == wake_run_id("acme", "s-2", "c1")
            (again,) = await acme.wake("s-2", "c1")  # a double click: the same run, dropped
            assert again.duplicate and again.run_id == woke.run_id

    asyncio.run(wake())
    assert _queued(world, "bob", "s-2") == []
    assert len(_queued(world, "acme", "s-2")) == 1
