"""The mailbox on Redis: a stream per session in its own slot (``<p>:{<tenant>/<session>}:signals``,
writable by its tenant's credential and by no other's), appended with the session's waits read
in the same script (``signal_send.lua``). The asyncio producer sends with :func:`async_send`."""

from __future__ import annotations

import json
from typing import Any

import redis
import redis.asyncio

from tether.keys import RedisKeys
from tether.persistence.lua import load
from tether.persistence.redis_conn import translate_errors
from tether.runs.signals.base import (
    MAX_SIGNALS_PER_SESSION,
    SignalSent,
    full_mailbox,
    is_consumed,
)
from tether.runs.waits.base import WaitRecord
from tether.runtime.signals import Signal

SIGNAL_SEND = load("signal_send")
#: Entries read per round trip while looking for a name's next signal.
PAGE = 100


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _send_call(
    keys: RedisKeys, tenant: str, session_id: str, name: str, payload_json: str, sent_at_ms: int
) -> tuple[list[Any], list[Any]]:
    return (
        SIGNAL_SEND.keys(
            mailbox=keys.session_waits(tenant, session_id, "signals"),
            waits=keys.session_waits(tenant, session_id),
        ),
        SIGNAL_SEND.argv(
            name=name,
            payload=payload_json,
            sent_at_ms=sent_at_ms,
            max_signals=MAX_SIGNALS_PER_SESSION,
        ),
    )


def _sent(reply: Any, tenant: str, session_id: str) -> SignalSent:
    signal_id, waits = _text(reply[0]), reply[1]
    if not signal_id:
        raise full_mailbox(tenant, session_id)
    return SignalSent(signal_id, [WaitRecord.model_validate_json(w) for w in waits])


def _signal(entry_id: Any, fields: Any) -> Signal:
    doc = {_text(k): _text(v) for k, v in fields.items()}
    return Signal(
        id=_text(entry_id),
        name=doc["name"],
        payload=json.loads(doc["payload"]),
        sent_at_ms=int(doc["sent_at_ms"]),
    )


class RedisSignalMailbox:
    """:class:`~tether.runs.signals.base.SignalMailbox` on a Redis or a Redis Cluster."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, *, where: str = "Redis") -> None:
        self._client = client
        self._keys = keys
        self._where = where
        self._send = client.register_script(SIGNAL_SEND.source)

    def send(
        self, tenant: str, session_id: str, name: str, payload_json: str, *, sent_at_ms: int
    ) -> SignalSent:
        keys, argv = _send_call(self._keys, tenant, session_id, name, payload_json, sent_at_ms)
        with translate_errors(self._where):
            reply = self._send(keys=keys, args=argv)
        return _sent(reply, tenant, session_id)

    def first_after(
        self, tenant: str, session_id: str, name: str, after_id: str | None
    ) -> Signal | None:
        key = self._keys.session_waits(tenant, session_id, "signals")
        start = "-" if after_id is None else f"({after_id}"
        while True:
            with translate_errors(self._where):
                entries: list[Any] = self._client.xrange(key, min=start, max="+", count=PAGE) or []
            for entry_id, fields in entries:
                signal = _signal(entry_id, fields)
                if signal.name == name:
                    return signal
            if len(entries) < PAGE:
                return None
            start = f"({_text(entries[-1][0])}"

    def forget(self, tenant: str, session_id: str, consumed: dict[str, str]) -> None:
        """Drop the consumed signals among the mailbox's oldest :data:`PAGE` (each commit that
        consumed some does this: the mailbox stays short)."""
        if not consumed:
            return
        key = self._keys.session_waits(tenant, session_id, "signals")
        with translate_errors(self._where):
            entries: list[Any] = self._client.xrange(key, min="-", max="+", count=PAGE) or []
            done = [
                _text(entry_id)
                for entry_id, fields in entries
                if is_consumed(_signal(entry_id, fields), consumed)
            ]
            if done:
                self._client.xdel(key, *done)


async def async_send(
    client: redis.asyncio.Redis,
    keys: RedisKeys,
    tenant: str,
    session_id: str,
    name: str,
    payload_json: str,
    *,
    sent_at_ms: int,
) -> SignalSent:
    """:meth:`RedisSignalMailbox.send` on an asyncio client (the asyncio producer)."""
    script = client.register_script(SIGNAL_SEND.source)
    key_list, argv = _send_call(keys, tenant, session_id, name, payload_json, sent_at_ms)
    with translate_errors("Redis"):
        reply = await script(keys=key_list, args=argv)
    return _sent(reply, tenant, session_id)
