"""Signals are tenant-scoped at the server: with one Redis ACL user per tenant (the recipe of
docs/deployment.md, :meth:`~tether.keys.RedisKeys.tenant_acl_keys`), tenant acme's credential
sends signals to its own sessions, and a signal to tenant bob's session is refused with a clear
error naming the tenant, with nothing written to bob's mailbox (sync and asyncio producers)."""

from __future__ import annotations

import asyncio

import pytest

from tests.test_tenant_acl import NS, World, world  # noqa: F401 (the fixture)
from tether.errors import PermissionDenied
from tether.keys import RedisKeys
from tether.producer import AsyncProducer


def _mailbox_len(w: World, tenant: str, session_id: str) -> int:
    return int(w.admin.xlen(RedisKeys(NS).session_waits(tenant, session_id, "signals")))


def test_a_tenant_signals_its_own_sessions_and_never_another_tenants(world: World) -> None:  # noqa: F811
    acme = world.producer("acme")
    try:
        sent = acme.signal("s-1", "go", {"ok": True})
        assert sent.woke_run_id is None and _mailbox_len(world, "acme", "s-1") == 1
        with pytest.raises(PermissionDenied, match="'bob'") as refused:
            acme.signal("s-1", "go", {"ok": True}, tenant="bob")
        assert "TETHER_REDIS_URL" in str(refused.value)  # says what to use instead
        assert _mailbox_len(world, "bob", "s-1") == 0  # nothing written
    finally:
        acme.close()


def test_the_asyncio_producer_is_refused_another_tenants_session_too(world: World) -> None:  # noqa: F811
    settings = world.settings("acme")

    async def send() -> None:
        async with AsyncProducer(settings) as acme:
            with pytest.raises(PermissionDenied, match="'bob'"):
                await acme.signal("s-2", "go", 1, tenant="bob")
            await acme.signal("s-2", "go", 2)

    asyncio.run(send())
    assert _mailbox_len(world, "bob", "s-2") == 0
    assert _mailbox_len(world, "acme", "s-2") == 1
